// Which adapter an export starts from, and which base model an adapter folder names (deltatune/export.h).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "deltatune/export.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;

namespace deltatune {

std::string run_export_adapter_dir(const RunRecord& run, const std::string& checkpoint) {
  if (!checkpoint.empty()) {
    const std::string dir = (fs::path(run.output_dir) / ("checkpoint-" + checkpoint)).string();
    check(fs::exists(dir), "export: run " + run.id + " has no checkpoint " + checkpoint + " (" + dir + ")");
    return dir;
  }
  const bool has_adapter = fs::exists(fs::path(run.output_dir) / "adapter_model.safetensors");
  const bool ended = run.status == "finished" || run.status == "cancelled";
  const auto latest = ended && has_adapter ? std::nullopt : checkpoint_latest(run.output_dir);
  check(latest.has_value() || has_adapter,
        "export: run " + run.id + " has no adapter or checkpoint in " + run.output_dir);
  return latest ? *latest : run.output_dir;
}

std::string adapter_base_model_dir(const std::string& dir) {
  check(fs::is_directory(dir), "--adapter " + dir + ": no such folder (expected a PEFT adapter folder)");
  std::ifstream in(fs::path(dir) / "adapter_config.json");
  check(in.good(), "--adapter " + dir +
                       ": no adapter_config.json (expected a PEFT adapter folder: adapter_config.json and "
                       "adapter_model.safetensors, as a run's output folder or `deltatune export` writes)");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  check(!j.is_discarded() && j.is_object(), dir + "/adapter_config.json: not valid JSON");
  const auto it = j.find("base_model_name_or_path");
  check(it != j.end() && it->is_string() && fs::exists(it->get<std::string>()),
        dir + "/adapter_config.json: base_model_name_or_path is not a local folder; pass --model DIR");
  return it->get<std::string>();
}

}  // namespace deltatune
