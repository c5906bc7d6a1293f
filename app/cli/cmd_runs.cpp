// `deltatune runs list|show|compare|delete|tag`: the experiment database from the terminal. Every open
// first marks runs whose process is gone as crashed, so the table never shows a dead run as running.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "deltatune/error.h"
#include "deltatune/experiment_store.h"
#include "deltatune/run_config.h"

namespace deltatune::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: deltatune runs list [--json]\n"
    "       deltatune runs show RUN [--json] [--events N]\n"
    "       deltatune runs compare RUN RUN... [--json]\n"
    "       deltatune runs delete RUN [--files]\n"
    "       deltatune runs tag RUN TAG\n"
    "RUN is an id, a unique id prefix, a run name or the run's output folder (or a checkpoint in it).\n"
    "Every command takes --db PATH (default: $DELTATUNE_DB,\n"
    "$XDG_DATA_HOME/deltatune/experiments.db or ~/.local/share/deltatune/experiments.db).";

std::unique_ptr<ExperimentStore> open_store(const ParsedArgs& p) {
  auto store =
      std::make_unique<ExperimentStore>(p.has("--db") ? p.get("--db") : ExperimentStore::default_path());
  store->mark_crashed_runs();
  return store;
}

RunRecord resolve(ExperimentStore& store, const std::string& what) {
  auto r = store.find_run(what);
  check(r.has_value(), "no run '" + what + "' in " + store.path() + " (try: deltatune runs list)");
  return *r;
}

// Seconds since the epoch of our ISO-8601 UTC stamps ("2025-01-02T03:04:05.678Z"); -1 when unreadable.
double parse_time(const std::string& iso) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

double duration_seconds(const RunRecord& r) {
  const double start = parse_time(r.created_at);
  if (start < 0) return -1;
  double end = parse_time(r.finished_at);
  if (end < 0) {
    if (r.status != "running") return -1;
    end = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  return std::max(0.0, end - start);
}

std::string format_duration(double s) {
  if (s < 0) return "-";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  std::ostringstream o;
  if (t >= 3600)
    o << t / 3600 << "h" << std::setw(2) << std::setfill('0') << (t % 3600) / 60 << "m";
  else if (t >= 60)
    o << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  else
    o << t << "s";
  return o.str();
}

std::string format_loss(double v) {
  if (v < 0) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(4) << v;
  return o.str();
}

// "2025-01-02T03:04:05.678Z" -> "2025-01-02 03:04" (UTC, like the database).
std::string short_time(const std::string& iso) {
  return iso.size() >= 16 ? iso.substr(0, 10) + " " + iso.substr(11, 5) : iso;
}

std::string model_name(const std::string& model) {
  const fs::path p(model);
  const std::string base = p.filename().string();
  return base.empty() ? p.parent_path().filename().string() : base;
}

std::string clip(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

// Left-aligned columns, two spaces apart.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t c = 0; c < r.size(); ++c) {
      out += r[c];
      if (c + 1 < r.size()) out += std::string(w[c] - r[c].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

json loss_json(double v) {
  return v < 0 ? json(nullptr) : json(v);
}

json run_json(const RunRecord& r) {
  const double d = duration_seconds(r);
  return {{"id", r.id},
          {"name", r.name},
          {"status", r.status},
          {"model", r.model},
          {"datasets", r.datasets},
          {"output_dir", r.output_dir},
          {"device", r.device},
          {"engine_version", r.engine_version},
          {"steps", r.steps},
          {"total_steps", r.total_steps},
          {"final_loss", loss_json(r.final_loss)},
          {"best_eval_loss", loss_json(r.best_eval_loss)},
          {"created_at", r.created_at},
          {"finished_at", r.finished_at},
          {"duration_seconds", d < 0 ? json(nullptr) : json(d)},
          {"pid", r.pid},
          {"tags", r.tags},
          {"notes", r.notes}};
}

std::string steps_text(const RunRecord& r) {
  return std::to_string(r.steps) + (r.total_steps > 0 ? "/" + std::to_string(r.total_steps) : "");
}

int runs_list(const ParsedArgs& p) {
  check(p.positionals.size() == 1, kUsage);
  auto store = open_store(p);
  const auto runs = store->list_runs();
  if (p.has("--json")) {
    json a = json::array();
    for (const auto& r : runs) a.push_back(run_json(r));
    std::cout << a.dump(2) << "\n";
    return 0;
  }
  if (runs.empty()) {
    std::cout << "no runs in " << store->path() << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs)
    rows.push_back({r.id, clip(r.name, 28), r.status, clip(model_name(r.model), 28), steps_text(r),
                    format_loss(r.final_loss), format_loss(r.best_eval_loss), short_time(r.created_at),
                    format_duration(duration_seconds(r))});
  print_table({"ID", "NAME", "STATUS", "MODEL", "STEPS", "LOSS", "BEST EVAL", "CREATED (UTC)", "DURATION"},
              rows);
  return 0;
}

struct MetricsSummary {
  size_t rows = 0;
  double first_loss = -1, final_loss = -1, min_loss = -1, best_eval = -1, last_lr = 0, mean_tps = 0;
  int64_t last_step = 0, tokens_seen = 0, best_eval_step = 0;
  double wall_seconds = 0;
};

MetricsSummary summarize(const std::vector<StepMetrics>& ms) {
  MetricsSummary s;
  s.rows = ms.size();
  double tps_sum = 0;
  size_t tps_n = 0;
  for (const auto& m : ms) {
    if (s.first_loss < 0) s.first_loss = m.loss;
    s.final_loss = m.loss;
    s.min_loss = s.min_loss < 0 ? m.loss : std::min(s.min_loss, m.loss);
    if (m.eval_loss >= 0 && (s.best_eval < 0 || m.eval_loss < s.best_eval)) {
      s.best_eval = m.eval_loss;
      s.best_eval_step = m.step;
    }
    s.last_lr = m.lr;
    s.last_step = m.step;
    s.tokens_seen = std::max(s.tokens_seen, m.tokens_seen);
    s.wall_seconds = std::max(s.wall_seconds, m.wall_seconds);
    if (m.tokens_per_second > 0) tps_sum += m.tokens_per_second, ++tps_n;
  }
  s.mean_tps = tps_n ? tps_sum / tps_n : 0;
  return s;
}

int runs_show(const ParsedArgs& p) {
  check(p.positionals.size() == 2, kUsage);
  auto store = open_store(p);
  const RunRecord r = resolve(*store, p.positionals[1]);
  const auto ms = store->metrics(r.id);
  const auto arts = store->artifacts(r.id);
  const auto events = store->events(r.id);
  size_t n_events = 10;
  if (p.has("--events")) {
    try {
      n_events = std::stoul(p.get("--events"));
    } catch (const std::exception&) {
      throw Error("--events: expected a number, got '" + p.get("--events") + "'");
    }
  }
  const size_t first_event = events.size() > n_events ? events.size() - n_events : 0;
  const MetricsSummary s = summarize(ms);

  if (p.has("--json")) {
    json j = run_json(r);
    j["config_yaml"] = r.config_yaml;
    j["metrics_summary"] = {{"rows", s.rows},
                            {"last_step", s.last_step},
                            {"first_loss", loss_json(s.first_loss)},
                            {"final_loss", loss_json(s.final_loss)},
                            {"min_loss", loss_json(s.min_loss)},
                            {"best_eval_loss", loss_json(s.best_eval)},
                            {"best_eval_step", s.best_eval_step},
                            {"last_lr", s.last_lr},
                            {"tokens_seen", s.tokens_seen},
                            {"wall_seconds", s.wall_seconds},
                            {"mean_tokens_per_second", s.mean_tps}};
    j["artifacts"] = json::array();
    for (const auto& a : arts)
      j["artifacts"].push_back(
          {{"kind", a.kind}, {"path", a.path}, {"step", a.step}, {"created_at", a.created_at}});
    j["events"] = json::array();
    for (size_t i = first_event; i < events.size(); ++i)
      j["events"].push_back(
          {{"time", events[i].time}, {"level", events[i].level}, {"message", events[i].message}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::cout << "run " << r.id << (r.name.empty() ? "" : " (" + r.name + ")") << "\n"
            << "  status      " << r.status << "\n"
            << "  model       " << r.model << "\n"
            << "  datasets    " << r.datasets << "\n"
            << "  output_dir  " << r.output_dir << "\n"
            << "  device      " << (r.device.empty() ? "-" : r.device) << "   engine " << r.engine_version
            << "\n"
            << "  created     " << r.created_at << "   finished "
            << (r.finished_at.empty() ? "-" : r.finished_at) << "   duration "
            << format_duration(duration_seconds(r)) << "\n"
            << "  steps       " << steps_text(r) << "\n";
  if (!r.tags.empty()) {
    std::string tags;
    for (const auto& t : r.tags) tags += (tags.empty() ? "" : ", ") + t;
    std::cout << "  tags        " << tags << "\n";
  }
  if (!r.notes.empty()) std::cout << "  notes       " << r.notes << "\n";

  std::cout << "\nmetrics (" << s.rows << " rows)\n";
  if (s.rows) {
    std::cout << "  loss        first " << format_loss(s.first_loss) << "   final "
              << format_loss(s.final_loss) << "   min " << format_loss(s.min_loss) << "\n"
              << "  best eval   " << format_loss(s.best_eval)
              << (s.best_eval >= 0 ? " (step " + std::to_string(s.best_eval_step) + ")" : "") << "\n"
              << "  last lr     " << s.last_lr << "\n"
              << "  tokens      " << s.tokens_seen << " seen"
              << (s.mean_tps > 0 ? ", " + std::to_string(static_cast<int64_t>(s.mean_tps)) + " tokens/s mean"
                                 : "")
              << "\n";
  }

  std::cout << "\nartifacts (" << arts.size() << ")\n";
  for (const auto& a : arts) std::cout << "  step " << a.step << "  " << a.kind << "  " << a.path << "\n";

  std::cout << "\nevents (last " << events.size() - first_event << " of " << events.size() << ")\n";
  for (size_t i = first_event; i < events.size(); ++i)
    std::cout << "  " << short_time(events[i].time) << "  " << events[i].level << "  " << events[i].message
              << "\n";

  std::cout << "\nconfig\n";
  std::istringstream yaml(r.config_yaml);
  for (std::string line; std::getline(yaml, line);) std::cout << "  " << line << "\n";
  return 0;
}

// key -> value of a stored config. Configs that no longer parse (older versions) are compared line by line.
std::vector<std::pair<std::string, std::string>> config_items(const RunRecord& r) {
  try {
    return run_config_items(run_config_from_yaml_string(r.config_yaml, ""));
  } catch (const Error&) {
    std::vector<std::pair<std::string, std::string>> items;
    std::istringstream in(r.config_yaml);
    for (std::string line; std::getline(in, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos || line.empty() || line[0] == ' ' || line[0] == '-') continue;
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      items.emplace_back(line.substr(0, colon), value);
    }
    return items;
  }
}

int runs_compare(const ParsedArgs& p) {
  check(p.positionals.size() >= 3, kUsage);
  auto store = open_store(p);
  std::vector<RunRecord> runs;
  for (size_t i = 1; i < p.positionals.size(); ++i) runs.push_back(resolve(*store, p.positionals[i]));

  // Union of keys in first-seen order (canonical order for parsed configs).
  std::vector<std::string> keys;
  std::vector<std::map<std::string, std::string>> values;
  for (const auto& r : runs) {
    std::map<std::string, std::string> v;
    for (const auto& [k, val] : config_items(r)) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      v[k] = val;
    }
    values.push_back(std::move(v));
  }
  auto value_of = [&](size_t i, const std::string& k) {
    const auto it = values[i].find(k);
    return it == values[i].end() ? std::string("(unset)") : it->second;
  };
  std::vector<std::string> differing;
  for (const auto& k : keys)
    for (size_t i = 1; i < runs.size(); ++i)
      if (value_of(i, k) != value_of(0, k)) {
        differing.push_back(k);
        break;
      }

  struct Row {
    std::string label;
    std::vector<std::string> cells;
  };
  std::vector<Row> results;
  auto add = [&](const std::string& label, auto&& f) {
    Row row{label, {}};
    for (const auto& r : runs) row.cells.push_back(f(r));
    results.push_back(std::move(row));
  };
  add("status", [](const RunRecord& r) { return r.status; });
  add("steps", [](const RunRecord& r) { return steps_text(r); });
  add("final loss", [](const RunRecord& r) { return format_loss(r.final_loss); });
  add("best eval", [](const RunRecord& r) { return format_loss(r.best_eval_loss); });
  add("duration", [](const RunRecord& r) { return format_duration(duration_seconds(r)); });
  add("tokens seen", [&](const RunRecord& r) {
    const auto ms = store->metrics(r.id);
    return ms.empty() ? std::string("-") : std::to_string(summarize(ms).tokens_seen);
  });

  if (p.has("--json")) {
    json j;
    j["runs"] = json::array();
    for (const auto& r : runs) j["runs"].push_back(run_json(r));
    j["config_differences"] = json::object();
    for (const auto& k : differing) {
      json col = json::array();
      for (size_t i = 0; i < runs.size(); ++i) col.push_back(value_of(i, k));
      j["config_differences"][k] = col;
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::vector<std::string> header{""};
  for (const auto& r : runs) header.push_back(r.id + (r.name.empty() ? "" : " " + clip(r.name, 20)));
  std::vector<std::vector<std::string>> rows;
  for (const auto& k : differing) {
    std::vector<std::string> row{k};
    for (size_t i = 0; i < runs.size(); ++i) row.push_back(clip(value_of(i, k), 48));
    rows.push_back(std::move(row));
  }
  std::cout << "config differences (" << differing.size() << " of " << keys.size() << " keys)\n";
  if (rows.empty())
    std::cout << "(none: the configs are identical)\n";
  else
    print_table(header, rows);
  rows.clear();
  for (const auto& row : results) {
    std::vector<std::string> line{row.label};
    line.insert(line.end(), row.cells.begin(), row.cells.end());
    rows.push_back(std::move(line));
  }
  std::cout << "\nresults\n";
  print_table(header, rows);
  return 0;
}

int runs_delete(const ParsedArgs& p) {
  check(p.positionals.size() == 2, kUsage);
  auto store = open_store(p);
  const RunRecord r = resolve(*store, p.positionals[1]);
  // mark_crashed_runs ran on open, so "running" means the process is alive (or on another machine).
  check(r.status != "running",
        "run " + r.id + " is running (pid " + std::to_string(r.pid) + "); stop it before deleting it");
  store->delete_run(r.id);
  std::cout << "deleted run " << r.id << (r.name.empty() ? "" : " (" + r.name + ")") << " from "
            << store->path() << "\n";
  if (p.has("--files")) {
    const fs::path dir = r.output_dir;
    std::error_code ec;
    // Guard against a config whose output_dir is a root or home folder.
    const char* home = std::getenv("HOME");
    const bool too_broad =
        dir.empty() || dir == dir.root_path() || fs::equivalent(dir, fs::path(home ? home : "/"), ec);
    if (too_broad) {
      std::cerr << "warning: not removing output_dir '" << r.output_dir
                << "' (empty, a root or the home folder)\n";
    } else if (fs::exists(dir)) {
      fs::remove_all(dir, ec);
      check(!ec, "run deleted, but removing " + r.output_dir + " failed: " + ec.message());
      std::cout << "removed " << r.output_dir << "\n";
    } else {
      std::cout << "output_dir " << r.output_dir << " does not exist; nothing to remove\n";
    }
  }
  return 0;
}

int runs_tag(const ParsedArgs& p) {
  check(p.positionals.size() == 3, kUsage);
  auto store = open_store(p);
  const RunRecord r = resolve(*store, p.positionals[1]);
  store->add_tag(r.id, p.positionals[2]);
  std::cout << "tagged " << r.id << " '" << p.positionals[2] << "'\n";
  return 0;
}

}  // namespace

int cmd_runs(const Args& args) {
  const ParsedArgs p = parse_args(args, {"--db", "--events"}, {"--json", "--files"});
  check(!p.positionals.empty(), kUsage);
  const std::string& sub = p.positionals[0];
  if (sub == "list" || sub == "ls") return runs_list(p);
  if (sub == "show") return runs_show(p);
  if (sub == "compare") return runs_compare(p);
  if (sub == "delete") return runs_delete(p);
  if (sub == "tag") return runs_tag(p);
  throw Error("unknown 'runs' command '" + sub + "'\n" + kUsage);
}

}  // namespace deltatune::cli
