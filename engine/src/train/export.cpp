// export_adapter: a PEFT adapter folder for the chosen model class, or a merged full checkpoint. Both are
// built in a hidden folder beside the target (".<name>.partial<pid>") and moved into place in one rename,
// so a kill at any moment leaves the target either as it was or complete; leftovers of killed exports
// are removed by the next export into the same parent folder.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "deltatune/export.h"
#include "io/files.h"
#include "lora/peft_io.h"
#include "model/merged_checkpoint.h"
#include "model/weights.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

// The files a PEFT export writes: a folder holding only these (and hidden temp files) is an earlier
// export and may be replaced as a whole.
const std::set<std::string> kAdapterFiles = {"adapter_model.safetensors", "adapter_config.json", "README.md"};

// "a/b/" -> "a/b": filename() of the target must not be empty.
fs::path normalized(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

// The pid in a ".<name>.partial<pid>" folder's name (an export in progress or killed), else -1.
int64_t partial_owner_pid(const fs::directory_entry& e) {
  const std::string name = e.path().filename().string();
  const size_t at = name.rfind(".partial");
  std::error_code ec;
  if (name[0] != '.' || at == std::string::npos || at == 0 || !e.is_directory(ec)) return -1;
  const std::string digits = name.substr(at + 8);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stol(digits);
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Moves the finished folder `tmp` to `out`: a plain rename when `out` is missing or empty, an atomic
// exchange when `out` holds an earlier adapter export and nothing else. A folder with other files in it
// keeps them: the adapter files are moved in one by one, the weights last (their presence is what marks
// a complete adapter).
void publish(const fs::path& tmp, const fs::path& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path(), false);
  fsync_path(tmp, true);
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  // Called right after the failed rename with its errno (read before any string is built).
  auto fail = [&](int err, const char* what, const char* name = "") {
    throw Error(out.string() + ": cannot move the exported adapter into place (" + what + name + ": " +
                std::strerror(err) + ")");
  };
  if (!fs::exists(out, ec) || (fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    if (::rename(tmp.c_str(), out.c_str()) != 0) fail(errno, "rename");
    fsync_path(parent, true);
    return;
  }
  check(fs::is_directory(out, ec), out.string() + ": exists and is not a folder");
  bool only_adapter = true;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (!kAdapterFiles.count(name) && !(name[0] == '.' && name.find(".tmp") != std::string::npos))
      only_adapter = false;
  }
  if (only_adapter && ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_path(parent, true);
    fs::remove_all(tmp, ec);  // the earlier export, now under the temporary name
    return;
  }
  for (const char* name : {"README.md", "adapter_config.json", "adapter_model.safetensors"})
    if (::rename((tmp / name).c_str(), (out / name).c_str()) != 0) fail(errno, "rename of ", name);
  fsync_path(out, true);
  fs::remove_all(tmp, ec);
}

}  // namespace

void export_adapter(const ExportOptions& opts) {
  check(!opts.model_dir.empty(), "export: the base model folder is not known (pass --model DIR)");
  check(!opts.adapter_dir.empty(), "export: no adapter folder given");
  check(!opts.out_dir.empty(), "export: no output folder given (--out DIR)");
  check(fs::exists(fs::path(opts.adapter_dir) / "adapter_model.safetensors"),
        opts.adapter_dir + ": no adapter_model.safetensors (expected a PEFT adapter folder)");
  check(fs::weakly_canonical(opts.out_dir) != fs::weakly_canonical(opts.adapter_dir),
        "export: --out " + opts.out_dir + " is the adapter folder the export reads; choose another folder");
  // A checkpoint keeps its adapter in step with its optimizer state, a run's output folder with the run's
  // record: an adapter moved in there would silently stand for another run (or be overwritten by it).
  if (const std::string held = run_files_in(opts.out_dir, false); !held.empty())
    throw Error("export: --out " + opts.out_dir + " holds a training run's files (" + held +
                "); the export would replace that run's adapter: choose another folder");
  const fs::path out = normalized(opts.out_dir);
  remove_leftovers_of_dead_writers((out.has_parent_path() ? out.parent_path() : fs::path(".")).string(),
                                   partial_owner_pid);
  if (opts.progress) opts.progress(0.0);
  const ModelWeights base = model_weights_load(opts.model_dir);
  const LoraAdapter adapter = peft_adapter_read(opts.adapter_dir, base.config);
  if (opts.merged) {
    check(base.fp8_scale_inv.empty(), "export --merged: " + opts.model_dir +
                                          " is an FP8 checkpoint; a merged checkpoint is written from the bf16 base "
                                          "(expected --model the bf16 checkpoint: the adapter is the same)");
    merged_checkpoint_write(base, adapter, out.string(), opts.progress);
  } else {
    std::string name = ".";  // built stepwise: GCC 12 gives a false -Wrestrict on "." + s + "..."
    name += out.filename().string();
    name += ".partial";
    name += std::to_string(::getpid());
    const fs::path tmp = (out.has_parent_path() ? out.parent_path() : fs::path(".")) / name;
    std::error_code ec;
    fs::remove_all(tmp, ec);
    try {
      // --class auto keeps the class the adapter was written for (its key prefix), e.g. a run's chosen
      // model_class or a PEFT adapter made on *ForCausalLM of a VL checkpoint.
      const bool keep_class =
          (opts.model_class == "auto" || opts.model_class.empty()) && !adapter.class_prefix.empty();
      const std::string prefix = keep_class ? adapter.class_prefix : peft_class_prefix(base.key_prefix, opts.model_class);
      peft_adapter_write(adapter, base.config, prefix, opts.model_dir, tmp.string());
      publish(tmp, out);
    } catch (...) {
      fs::remove_all(tmp, ec);
      throw;
    }
  }
  if (opts.progress) opts.progress(1.0);
}

}  // namespace deltatune
