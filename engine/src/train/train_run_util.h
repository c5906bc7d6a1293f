// Small helpers of the train_run steps.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "backend/backend.h"
#include "deltatune/trainer.h"
#include "dist/data_parallel.h"
#include "lora/lora.h"

namespace deltatune {

std::string now_iso();  // UTC, "2026-11-28T06:00:00Z"
// The LoRA dropout seed of micro-batch `micro` of optimizer step `step`.
uint64_t step_seed(int64_t seed, int64_t step, int64_t micro);
// "trainable LoRA parameters: N (attn n, mlp n) in M modules, r=.., alpha=.."
std::string describe_groups(const LoraAdapter& a);
// FNV-1a over the F32 bytes of every A and B, in module order.
std::string lora_weights_hash(const LoraAdapter& adapter, Backend& be);
// The GPU index this process trains on.
int training_gpu(const RunConfig& cfg, const TrainOptions& topts);
// Every worker must train the same config on the same data; the GPUs are recorded as the run's device.
// Returns "<n> workers: rank 0 (<host>, pid <pid>) <device> <GiB>; ...".
std::string check_workers_agree(DataParallel& dp, const RunConfig& cfg, const std::string& data_fp, Backend& be,
                                const std::function<void(LogLevel, const std::string&)>& log);

}  // namespace deltatune
