// What Qwen35Model keeps to replay a recorded training step (qwen35_step_record.cpp): the recording, the device
// inputs it reads, and the key of the settings it was recorded for.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/qwen35_model.h"

namespace deltatune {

// Everything a recorded step bakes in: the sequence layout (attention tile lists, GDN chunk lists and kernel
// grids are built from it on the host), the options that become kernel arguments or pick ops, and the LoRA
// tensors' addresses. Token ids, targets, positions and the gradient scale (1/targets of the optimizer step, a
// different number nearly every step of a real run) are inputs, rewritten before each replay.
struct StepKey {
  std::vector<int32_t> cu_seqlens;
  bool backward = false, fused_loss = false, checkpointing = false;
  int64_t loss_chunk_rows = 0, checkpoint_layers = 0;
  LossLogits loss_logits = LossLogits::F32;
  RecomputeKeep keep;
  const LoraAdapter* adapter = nullptr;
  std::vector<const void*> lora_tensors;  // A, B, gA, gB of every module
  std::vector<float> lora_scalings;
  bool operator==(const StepKey&) const = default;
};

struct Qwen35Model::StepRecord {
  std::optional<StepKey> previous;  // the last step's key when it ran op by op
  StepKey key;                      // the recording's
  SeqLayout seq;
  Tensor ids, targets, loss, grad_scale, moe_load;
  std::unique_ptr<Backend::Recording> recording;
  bool refused = false;  // recording failed once: op by op from then on
};

}  // namespace deltatune
