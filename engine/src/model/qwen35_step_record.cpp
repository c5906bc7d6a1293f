// The recorded training step: the second of two steps with the same key is recorded (the backend's step capture,
// a CUDA graph on the CUDA backend) and replayed, and so is every later step with that key. A new key drops the
// recording; its first step runs op by op. The recorded ops are the op-by-op step's, on the same kinds of
// buffers, so the results are the same bit for bit.
#include <cstring>

#include "core/error.h"
#include "model/step_record.h"

namespace deltatune {

namespace {

StepKey step_key(const Batch& batch, const LoraAdapter* lora, const StepOptions& opts) {
  StepKey k;
  k.cu_seqlens = batch.cu_seqlens;
  k.backward = opts.backward;
  k.fused_loss = opts.fused_loss;
  k.checkpointing = opts.gradient_checkpointing;
  k.loss_chunk_rows = opts.loss_chunk_rows;
  k.loss_logits = opts.loss_logits;
  k.checkpoint_layers = opts.checkpoint_layers;
  k.keep = opts.keep;
  k.adapter = lora;
  if (lora)
    for (const LoraModule& m : lora->modules) {
      for (const Tensor* t : {&m.A, &m.B, &m.gA, &m.gB}) k.lora_tensors.push_back(t->data);
      k.lora_scalings.push_back(m.scaling);
    }
  return k;
}

}  // namespace

bool Qwen35Model::step_recorded(const Batch& batch, LoraAdapter* lora, const StepOptions& opts, StepOutput& out) {
  if (!record_) record_ = std::make_unique<StepRecord>();
  StepRecord& r = *record_;
  const bool dropout = opts.lora.training && opts.lora.dropout > 0.f;  // a new mask (seed) every step
  const bool recordable = opts.record && !r.refused && !sharded_ && !ep_ && !opts.on_layer_backward && opts.fused_loss &&
                          !dropout && batch.image_grids.empty() &&
                          batch.mrope_positions.empty() && !batch.input_ids.empty() &&
                          !loss_on_target_rows(batch);
  StepKey key = recordable ? step_key(batch, lora, opts) : StepKey{};
  if (r.recording && !(recordable && r.key == key)) {
    // A step that does not replay the recording drops it: its pool goes back to the allocator before this
    // step's tensors are allocated.
    r.recording.reset();
    r.moe_load = Tensor();
  }
  if (!recordable) {
    r.previous.reset();
    return false;
  }
  if (!r.recording) {
    if (!(r.previous && *r.previous == key)) {
      r.previous = std::move(key);
      return false;
    }
    r.previous.reset();
    // Record, with the inputs made before.
    const auto T = static_cast<int64_t>(batch.input_ids.size());
    r.seq = make_layout(batch);
    r.ids = be_.alloc({T}, DType::I32);
    r.targets = be_.alloc({T}, DType::I32);
    r.loss = be_.alloc({8}, DType::U8);
    r.grad_scale = be_.alloc({1}, DType::F32);
    if (!be_.begin_step_capture()) {
      r.refused = true;
      return false;
    }
    StepOutput recorded;
    bool complete = true;
    try {
      const DeviceScalars dev{r.loss, r.grad_scale};
      step_ops(batch, r.seq, r.ids, r.targets, lora, opts, recorded, &dev);
    } catch (const std::exception&) {
      complete = false;  // nothing ran while recording: this step runs op by op
    }
    r.recording = be_.end_capture();
    if (!complete || !r.recording) {
      r.recording.reset();
      r.refused = true;
      return false;
    }
    r.key = std::move(key);
    r.moe_load = recorded.moe_load;
  }
  check_ids(batch);
  be_.write_i32(r.ids, batch.input_ids);
  be_.write_i32(r.targets, batch.targets);
  be_.write_i32(r.seq.positions, batch.positions);
  be_.write_f32(r.grad_scale, {opts.grad_scale});
  be_.replay(*r.recording);
  out.targets = batch.num_targets;
  out.replayed = true;
  const Tensor loss = be_.download(r.loss, DType::U8);
  std::memcpy(&out.loss_sum, loss.data, sizeof out.loss_sum);
  if (r.moe_load.defined()) {  // a tensor of the caller's own, as op by op
    out.moe_load = be_.alloc(r.moe_load.shape, DType::F32);
    be_.copy(out.moe_load, r.moe_load);
  }
  return true;
}

}  // namespace deltatune
