#include "train/train_run_util.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "deltatune/model_info.h"
#include "deltatune/distributed.h"
#include "deltatune/run_config.h"

namespace deltatune {

std::string now_iso() {
  const auto t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

uint64_t step_seed(int64_t seed, int64_t step, int64_t micro) {
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(step) << 20) ^
               static_cast<uint64_t>(micro);
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 29);
}

std::string describe_groups(const LoraAdapter& a) {
  std::ostringstream os;
  os << "trainable LoRA parameters: " << a.trainable_params() << " (";
  bool first = true;
  for (const auto& [g, n] : a.params_per_group()) {
    os << (first ? "" : ", ") << g << " " << n;
    first = false;
  }
  os << ") in " << a.modules.size() << " modules, r=" << a.r << ", alpha=" << a.alpha;
  return os.str();
}

std::string lora_weights_hash(const LoraAdapter& adapter, Backend& be) {
  uint64_t h = 1469598103934665603ull;
  for (const LoraModule& m : adapter.modules)
    for (const Tensor* t : {&m.A, &m.B}) {
      const Tensor host = be.download(*t, DType::F32);
      const auto* p = static_cast<const unsigned char*>(host.data);
      for (size_t i = 0; i < host.nbytes(); ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
      }
    }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int training_gpu(const RunConfig& cfg, const TrainOptions& topts) {
  const std::vector<int>& ids = !topts.gpus.empty() ? topts.gpus : cfg.gpus;
  if (topts.dist.active()) return worker_gpu(topts.dist, ids, visible_cuda_devices());
  check(ids.size() <= 1, "gpus lists " + std::to_string(ids.size()) +
                             " GPUs, but this process is a single worker: start the run with `deltatune train` "
                             "(one worker per GPU) or a launcher such as torchrun or srun");
  return ids.empty() ? cfg.gpu : ids[0];
}

std::string check_workers_agree(DataParallel& dp, const RunConfig& cfg, const std::string& data_fp, Backend& be,
                                const std::function<void(LogLevel, const std::string&)>& log) {
  const MemoryStats ms = be.memory_stats();
  const std::string mine = run_config_hash(cfg) + "\n" + data_fp + "\n" + be.name() + "\n" +
                           std::to_string(ms.total_bytes);
  const std::vector<std::string> all = dp.host().all_gather(mine);
  auto field = [](const std::string& s, int i) {
    size_t b = 0;
    for (int k = 0; k < i; ++k) b = s.find('\n', b) + 1;
    return s.substr(b, s.find('\n', b) - b);
  };
  std::string summary = std::to_string(dp.world()) + " workers:";
  int64_t smallest = -1, largest = 0;
  int smallest_rank = 0;
  for (int r = 0; r < dp.world(); ++r) {
    const std::string& s = all[static_cast<size_t>(r)];
    check(field(s, 0) == field(all[0], 0),
          dp.host().describe(r) + " has another run config than rank 0 (hash " + field(s, 0) + " vs " +
              field(all[0], 0) + "): every worker must be started with the same run file");
    check(field(s, 1) == field(all[0], 1),
          dp.host().describe(r) + " read other training data than rank 0: the dataset files must be identical "
                                  "on every machine");
    const int64_t total = std::stoll(field(s, 3));
    summary += (r ? "; " : " ") + dp.host().describe(r) + " " + field(s, 2) + " " +
               std::to_string(total >> 30) + " GiB";
    if (smallest < 0 || total < smallest) smallest = total, smallest_rank = r;
    largest = std::max(largest, total);
  }
  if (smallest > 0 && smallest != largest) {
    std::string advice = "GPUs differ in memory (" + std::to_string(smallest >> 30) + " to " +
                         std::to_string(largest >> 30) +
                         " GiB): every worker trains micro-batches of the same shape, so the run must fit the "
                         "smallest, " + dp.host().describe(smallest_rank);
    if (cfg.gradient_checkpointing_auto) {
      advice += "; gradient_checkpointing: auto plans each GPU for its own free memory";
    } else {
      try {
        const ModelInfo info = model_info_load(cfg.base_model);
        const VramEstimate est =
            estimate_vram(info, cfg.lora_r, cfg.micro_batch_size * cfg.sequence_len, cfg.fused_loss,
                          cfg.gradient_checkpointing, cfg.gradient_checkpointing_layers, cfg.base_quantization,
                          1024, {}, cfg.lora_target_groups, false,
                          loss_logits_from_name(cfg.loss_logits, "loss_logits"));
        advice += "; estimated peak " + std::to_string(est.total >> 30) + " GiB per GPU" +
                  (est.total > smallest ? " does NOT fit it: lower micro_batch_size or sequence_len, or enable "
                                          "gradient_checkpointing"
                                        : "");
      } catch (const std::exception&) {
      }
    }
    log(LogLevel::Warning, advice);
  }
  return summary;
}

}  // namespace deltatune
