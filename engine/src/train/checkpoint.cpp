#include "train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/files.h"
#include "io/safetensors.h"

namespace deltatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormat = "deltatune-checkpoint";
constexpr int kFormatVersion = 1;
const char* const kRequiredFiles[] = {"adapter_config.json", "adapter_model.safetensors",
                                      "optimizer.safetensors", "trainer_state.json"};

std::string errno_text(int e) {
  return std::strerror(e);
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  check(fd >= 0, p.string() + ": cannot open for fsync (" + errno_text(errno) + ")");
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  check(rc == 0, p.string() + ": fsync failed (" + errno_text(e) + ")");
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  const int rc = ::rename(from.c_str(), to.c_str()), e = errno;  // errno read before any message is built
  check(rc == 0, "rename of " + from.string() + " to " + to.string() + " failed (" + errno_text(e) + ")");
}

// Every file below `dir`, then every folder bottom-up: whatever the adapter writer did is on disk.
void fsync_tree(const fs::path& dir) {
  std::vector<fs::path> dirs{dir};
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file())
      fsync_path(e.path(), false);
    else if (e.is_directory())
      dirs.push_back(e.path());
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) fsync_path(*it, true);
}

std::string tmp_name(int64_t step, const std::string& suffix = "") {
  return "checkpoint-" + std::to_string(step) + ".tmp-" + std::to_string(::getpid()) + suffix;
}

// pid of a "checkpoint-<step>.tmp-<pid>[...]" leftover, or -1 when the name is not one.
int64_t leftover_pid(const std::string& name) {
  if (name.rfind("checkpoint-", 0) != 0) return -1;
  const size_t at = name.find(".tmp-");
  if (at == std::string::npos) return -1;
  int64_t pid = 0;
  size_t i = at + 5, digits = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i, ++digits) {
    if (digits == 10) return -1;  // no pid is that long; more digits would overflow (UB)
    pid = pid * 10 + (name[i] - '0');
  }
  return digits ? pid : -1;
}

// Removing a folder is not atomic, so it is first renamed to a leftover name: a kill during remove_all
// leaves a stale *.tmp-* folder, never a half-deleted checkpoint under its final name.
void remove_checkpoint(const fs::path& dir) {
  const fs::path doomed =
      dir.parent_path() / (dir.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-rm");
  std::error_code ec;
  fs::rename(dir, doomed, ec);
  fs::remove_all(ec ? dir : doomed, ec);
}

json state_to_json(const TrainerState& s) {
  json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["step"] = s.step;
  j["total_steps"] = s.total_steps;
  j["epoch"] = s.epoch;
  j["epoch_index"] = s.epoch_index;
  j["micro_batch_index"] = s.micro_batch_index;
  j["seed"] = s.seed;
  j["rng_state"] = s.rng_state;
  j["scheduler_step"] = s.scheduler_step;
  j["lr"] = s.lr;
  j["tokens_seen"] = s.tokens_seen;
  j["trained_tokens"] = s.trained_tokens;
  j["wall_seconds"] = s.wall_seconds;
  j["best_eval_loss"] = s.best_eval_loss;
  j["run_id"] = s.run_id;
  j["config_hash"] = s.config_hash;
  j["extra"] = s.extra;
  return j;
}

TrainerState state_from_json(const json& j, const std::string& where) {
  check(j.is_object(), where + ": expected a JSON object");
  auto field = [&](const char* key) -> const json& {
    check(j.contains(key), where + ": field '" + key + "' is missing");
    return j.at(key);
  };
  auto integer = [&](const char* key) {
    const json& v = field(key);
    check(v.is_number_integer(),
          where + ": field '" + std::string(key) + "' must be an integer, got " + v.dump());
    return v.get<int64_t>();
  };
  auto number = [&](const char* key) {
    const json& v = field(key);
    check(v.is_number(), where + ": field '" + std::string(key) + "' must be a number, got " + v.dump());
    return v.get<double>();
  };
  auto text = [&](const char* key) {
    const json& v = field(key);
    check(v.is_string(), where + ": field '" + std::string(key) + "' must be a string, got " + v.dump());
    return v.get<std::string>();
  };
  check(text("format") == kFormat, where + ": field 'format' is not '" + std::string(kFormat) + "'");
  const int64_t version = integer("version");
  check(version >= 1 && version <= kFormatVersion,
        where + ": format version " + std::to_string(version) + " is not supported (expected 1.." +
            std::to_string(kFormatVersion) + "); use a newer DeltaTune");
  TrainerState s;
  s.step = integer("step");
  s.total_steps = integer("total_steps");
  s.epoch = number("epoch");
  s.epoch_index = integer("epoch_index");
  s.micro_batch_index = integer("micro_batch_index");
  s.seed = integer("seed");
  s.rng_state = text("rng_state");
  s.scheduler_step = integer("scheduler_step");
  s.lr = number("lr");
  s.tokens_seen = integer("tokens_seen");
  s.trained_tokens = integer("trained_tokens");
  s.wall_seconds = number("wall_seconds");
  s.best_eval_loss = number("best_eval_loss");
  s.run_id = text("run_id");
  s.config_hash = text("config_hash");
  const json& extra = field("extra");
  check(extra.is_object(), where + ": field 'extra' must be an object of strings");
  for (const auto& [k, v] : extra.items()) {
    check(v.is_string(), where + ": extra['" + k + "'] must be a string");
    s.extra[k] = v.get<std::string>();
  }
  check(s.step >= 0 && s.epoch_index >= 0 && s.micro_batch_index >= 0,
        where + ": step, epoch_index and micro_batch_index must be >= 0");
  return s;
}

void prune(const fs::path& out, int64_t new_step, int64_t limit) {
  if (limit <= 0) return;
  std::vector<std::pair<int64_t, std::string>> older;
  for (const auto& [step, path] : checkpoint_list(out.string())) {
    if (step == new_step) continue;
    if (step > new_step)
      remove_checkpoint(path);  // abandoned timeline: would fool checkpoint_latest
    else
      older.emplace_back(step, path);
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = static_cast<size_t>(limit - 1); i < older.size(); ++i) remove_checkpoint(older[i].second);
}

}  // namespace

int64_t checkpoint_step_of(const std::string& name) {
  const std::string prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() > prefix.size() + 18)
    return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string checkpoint_write(const std::string& output_dir, const TrainerState& state,
                             const std::vector<std::pair<std::string, Tensor>>& optimizer,
                             const AdapterWriter& write_adapter, int64_t save_total_limit) {
  check(state.step >= 0, "checkpoint_write: step must be >= 0");
  check(static_cast<bool>(write_adapter), "checkpoint_write: no adapter writer given");
  const fs::path out(output_dir);
  const fs::path final_dir = out / ("checkpoint-" + std::to_string(state.step));
  const fs::path tmp = out / tmp_name(state.step);
  const std::string what = "cannot write checkpoint '" + final_dir.string() + "': ";
  std::error_code ec;
  fs::create_directories(out, ec);
  check(!ec, what + "cannot create '" + out.string() + "' (" + ec.message() + ")");
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  check(!ec, what + "cannot create '" + tmp.string() + "' (" + ec.message() + ")");

  try {
    write_adapter(tmp.string());
    safetensors_write((tmp / "optimizer.safetensors").string(), optimizer,
                      {{"step", std::to_string(state.step)}, {"content", "optimizer"}});
    write_text_file_atomic((tmp / "trainer_state.json").string(), state_to_json(state).dump(2) + "\n");
    for (const char* f : kRequiredFiles)
      check(fs::is_regular_file(tmp / f), std::string("the adapter writer did not write ") + f);
    fsync_tree(tmp);
    if (!fs::exists(final_dir)) {
      rename_or_throw(tmp, final_dir);
    } else {
      // Same step again (e.g. a save on stop right after a periodic save): swap atomically, so the step is
      // never missing; the old content ends up under the leftover name and goes.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
        const fs::path old = out / tmp_name(state.step, "-old");
        rename_or_throw(final_dir, old);
        rename_or_throw(tmp, final_dir);
        fs::remove_all(old, ec);
      }
    }
    fsync_path(out, true);
  } catch (const Error& e) {
    fs::remove_all(tmp, ec);
    throw Error(what + e.what());
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    throw Error(what + e.what());
  }
  fs::remove_all(tmp, ec);  // the old content after an exchange
  prune(out, state.step, save_total_limit);
  return final_dir.string();
}

Checkpoint checkpoint_load(const std::string& dir) {
  const fs::path d(dir);
  const std::string where = "checkpoint '" + dir + "'";
  check(fs::is_directory(d), where + " does not exist or is not a folder");
  for (const char* f : kRequiredFiles)
    check(fs::is_regular_file(d / f), where + " is incomplete: " + f + " is missing");

  Checkpoint ck;
  ck.dir = dir;
  const std::string state_path = (d / "trainer_state.json").string();
  json j;
  try {
    j = json::parse(read_text_file(state_path));
  } catch (const json::exception& e) {
    throw Error(state_path + ": not valid JSON (" + e.what() + ")");
  }
  ck.state = state_from_json(j, state_path);
  const int64_t named = checkpoint_step_of(d.filename().string());
  check(named < 0 || named == ck.state.step, state_path + ": step " + std::to_string(ck.state.step) +
                                                 " does not match the folder name (step " +
                                                 std::to_string(named) + ")");

  const std::string config_path = (d / "adapter_config.json").string();
  try {
    check(json::parse(read_text_file(config_path)).is_object(), config_path + ": expected a JSON object");
  } catch (const json::exception& e) {
    throw Error(config_path + ": not valid JSON (" + e.what() + ")");
  }
  SafetensorsFile adapter((d / "adapter_model.safetensors").string());  // validates the header and sizes
  ck.optimizer = std::make_shared<SafetensorsFile>((d / "optimizer.safetensors").string());
  const auto& meta = ck.optimizer->metadata();
  const auto it = meta.find("step");
  check(it != meta.end() && it->second == std::to_string(ck.state.step),
        ck.optimizer->path() + ": metadata step " + (it == meta.end() ? "missing" : "'" + it->second + "'") +
            " does not match trainer_state.json (step " + std::to_string(ck.state.step) + ")");
  return ck;
}

std::vector<std::pair<int64_t, std::string>> checkpoint_list(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const int64_t step = checkpoint_step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string run_files_in(const std::string& dir, bool with_adapter) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const char* f : {"adapter_model.safetensors", "trainer_state.json", "optimizer.safetensors"})
    if ((with_adapter || f[0] != 'a') && fs::is_regular_file(fs::path(dir) / f, ec)) names.push_back(f);
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = checkpoint_step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) steps.emplace_back(step, e.path().filename().string());
  }
  std::sort(steps.begin(), steps.end());
  const size_t shown = std::min<size_t>(steps.size(), 3);  // the newest: how far the run got
  for (size_t i = steps.size() - shown; i < steps.size(); ++i) names.push_back(steps[i].second);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  if (steps.size() > shown) out += " and " + std::to_string(steps.size() - shown) + " older checkpoints";
  return out;
}

std::optional<std::string> checkpoint_latest(const std::string& output_dir) {
  // Our own leftovers are in progress or already cleaned up by the writer; a live pid may be another trainer
  // writing into this folder right now.
  remove_leftovers_of_dead_writers(
      output_dir, [](const fs::directory_entry& e) { return leftover_pid(e.path().filename().string()); });

  auto all = checkpoint_list(output_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      checkpoint_load(it->second);
      return it->second;
    } catch (const Error&) {
      // Not complete (e.g. edited by hand): the next older one may be.
    }
  }
  return std::nullopt;
}

}  // namespace deltatune
