// The recorded training step (StepOptions::record: a CUDA graph captured on the second step of a layout and
// replayed after) against the same steps op by op: every loss, every LoRA gradient and the AdamW-updated weights
// bit for bit, through layout and checkpointing changes (each drops the recording; the next repeat records anew);
// also for an FP8 base whose untied embedding table stays in host memory (read through its device mapping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "../golden_files.h"
#include "backend/backend.h"
#include "backend/cuda_kernels_setting.h"
#include "data/batch.h"
#include "lora/lora.h"
#include "model/qwen35_model.h"
#include "model/weights.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace deltatune {
namespace {

struct RecordRun {
  std::vector<double> losses;
  std::vector<std::vector<char>> grads;  // per step: every gA, gB's bytes
  std::vector<char> weights;             // every A, B after the last step
  int replayed = 0;
};

std::vector<char> bytes_of(Backend& be, const std::vector<const Tensor*>& ts) {
  std::vector<char> out;
  for (const Tensor* t : ts) {
    const Tensor h = be.download(*t, t->dtype);
    const char* p = static_cast<const char*>(h.data);
    out.insert(out.end(), p, p + h.nbytes());
  }
  return out;
}

// host: the checkpointed steps keep their layer inputs in page-locked host memory (RecomputeKeep::inputs_on_host):
// copies on a stream of their own, forked and joined by events, recorded into the graph with the rest.
RecordRun train(const ModelWeights& w, const std::vector<Example>& seqs, const std::string& kernels, bool record,
                bool host = false, LossLogits logits = LossLogits::F32) {
  auto be = make_cuda_backend(0, DType::BF16, kernels);
  Qwen35Model model(w, *be);
  LoraSpec spec;
  spec.r = 8;
  spec.alpha = 16;
  spec.groups = lora_default_groups(w.config);
  if (w.config.is_moe()) spec.groups.push_back("experts");
  LoraAdapter adapter = lora_create(w.config, spec, 7);
  lora_to_backend(adapter, *be);
  std::vector<const Example*> all, half;
  for (size_t i = 0; i < seqs.size(); ++i) {
    all.push_back(&seqs[i]);
    if (2 * i < seqs.size()) half.push_back(&seqs[i]);
  }
  const Batch a = batch_from_examples(all), b = batch_from_examples(half);
  // (batch, checkpointing): repeats record and replay; each change starts op by op again.
  const std::vector<std::pair<const Batch*, bool>> plan = {{&a, false}, {&a, false}, {&a, false}, {&a, true},
                                                           {&a, true},  {&a, true},  {&b, true},  {&b, true},
                                                           {&a, false}, {&a, false}};
  OptimizerSettings os;
  os.weight_decay = 0.01;
  RecordRun run;
  int s = 0;
  for (const auto& [batch, ckpt] : plan) {
    ++s;
    lora_zero_grad(adapter, *be);
    StepOptions so;
    so.backward = true;
    // A different scale every step, as a real run's 1/targets of the optimizer step: an input of the recording
    // (read from device memory), so the same steps still replay.
    so.grad_scale = 1.f / static_cast<float>(batch->num_targets + s);
    so.gradient_checkpointing = ckpt;
    so.keep.inputs_on_host = host;
    so.keep.mlp_host_every = host ? 2 : 0;  // with the MLP gate/up of every 2nd layer in host memory too
    so.record = record;
    so.loss_logits = logits;
    const StepOutput out = model.step(*batch, &adapter, so);
    run.losses.push_back(out.loss_sum);
    run.replayed += out.replayed ? 1 : 0;
    std::vector<const Tensor*> gs;
    for (const LoraModule& m : adapter.modules) gs.insert(gs.end(), {&m.gA, &m.gB});
    run.grads.push_back(bytes_of(*be, gs));
    optimizer_step(adapter, *be, os, 2e-3, s, lora_grad_norm(adapter, *be));
  }
  std::vector<const Tensor*> ws;
  for (const LoraModule& m : adapter.modules) ws.insert(ws.end(), {&m.A, &m.B});
  run.weights = bytes_of(*be, ws);
  return run;
}

class CudaStepRecord : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaStepRecord, ReplayedStepsAreBitIdenticalToOpByOp) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const auto& [name, kernels] = GetParam();
  const fs::path dir = testing_goldens::goldens_dir() / name;
  if (!fs::exists(dir)) GTEST_SKIP() << "no golden checkpoint " << dir;
  const ModelWeights w = model_weights_load(dir.string());
  // Every token trained: a batch with many rows without a target runs its loss on the target rows alone and is
  // not recorded (loss_target_rows); checked below on the golden's own labels.
  auto seqs = testing_goldens::read_jsonl(dir / "golden_eval.jsonl");
  const auto masked = seqs;
  for (Example& e : seqs) e.labels = e.input_ids;
  const RecordRun ops = train(w, seqs, kernels, false), rec = train(w, seqs, kernels, true);
  EXPECT_EQ(ops.replayed, 0);
  EXPECT_EQ(rec.replayed, 6) << "steps 2-3, 5-6, 8 and 10 replay a recording";
  std::vector<const Example*> all;
  for (const Example& e : masked) all.push_back(&e);
  if (!loss_target_rows(batch_from_examples(all)).empty()) {
    const RecordRun ops_masked = train(w, masked, kernels, false), rec_masked = train(w, masked, kernels, true);
    EXPECT_EQ(rec_masked.replayed, 0) << "a loss on the target rows alone is not recorded";
    EXPECT_TRUE(rec_masked.weights == ops_masked.weights);
  }
  ASSERT_EQ(ops.losses.size(), rec.losses.size());
  for (size_t i = 0; i < ops.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&ops.losses[i], &rec.losses[i], sizeof(double)), 0)
        << "step " << i + 1 << ": loss op by op " << ops.losses[i] << ", recorded " << rec.losses[i];
    EXPECT_TRUE(ops.grads[i] == rec.grads[i]) << "step " << i + 1 << ": LoRA gradients differ";
  }
  EXPECT_TRUE(ops.weights == rec.weights) << "LoRA weights after the last step differ";
  // The inputs in host memory, recorded and replayed: the same bits as op by op with the inputs on the device.
  const RecordRun host = train(w, seqs, kernels, true, true);
  EXPECT_EQ(host.replayed, 6) << "inputs on the host: steps 2-3, 5-6, 8 and 10 replay a recording";
  for (size_t i = 0; i < ops.losses.size() && i < host.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&ops.losses[i], &host.losses[i], sizeof(double)), 0)
        << "step " << i + 1 << " (inputs on the host): loss op by op " << ops.losses[i] << ", recorded "
        << host.losses[i];
    EXPECT_TRUE(ops.grads[i] == host.grads[i]) << "step " << i + 1 << " (inputs on the host): LoRA gradients differ";
  }
  EXPECT_TRUE(ops.weights == host.weights) << "inputs on the host: LoRA weights after the last step differ";
  std::printf("[step_record] %s/%s: %d of %zu steps replayed, losses %.6f .. %.6f, bit-identical\n", name.c_str(),
              kernels.c_str(), rec.replayed, rec.losses.size(), rec.losses.front(), rec.losses.back());
}

// loss_logits: bf16 (the fused loss's logits in bf16): recorded and replayed with the same bits as op by op, and
// not the F32 logits' losses (the bf16 form ran).
TEST(CudaStepRecordLossLogits, Bf16LogitsReplayedStepsAreBitIdenticalToOpByOp) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = testing_goldens::goldens_dir() / "models/dense_vl";
  if (!fs::exists(dir)) GTEST_SKIP() << "no golden checkpoint " << dir;
  const ModelWeights w = model_weights_load(dir.string());
  auto seqs = testing_goldens::read_jsonl(dir / "golden_eval.jsonl");
  for (Example& e : seqs) e.labels = e.input_ids;
  const RecordRun ops = train(w, seqs, "auto", false, false, LossLogits::BF16),
                  rec = train(w, seqs, "auto", true, false, LossLogits::BF16),
                  f32 = train(w, seqs, "auto", false, false, LossLogits::F32);
  EXPECT_EQ(rec.replayed, 6);
  ASSERT_EQ(ops.losses.size(), rec.losses.size());
  for (size_t i = 0; i < ops.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&ops.losses[i], &rec.losses[i], sizeof(double)), 0) << "step " << i + 1;
    EXPECT_TRUE(ops.grads[i] == rec.grads[i]) << "step " << i + 1 << ": LoRA gradients differ";
  }
  EXPECT_TRUE(ops.weights == rec.weights);
  EXPECT_NE(ops.losses[0], f32.losses[0]) << "bf16 logits gave the F32 logits' loss";
  std::printf("[step_record] bf16 logits: %d of %zu steps replayed, bit-identical; step 1 loss %.6f (F32 logits "
              "%.6f, rel %.2e)\n",
              rec.replayed, rec.losses.size(), ops.losses[0], f32.losses[0],
              std::fabs(ops.losses[0] - f32.losses[0]) / std::fabs(f32.losses[0]));
}

std::string record_case_name(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
  return fs::path(std::get<0>(info.param)).filename().string() + "_" + std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CudaStepRecord,
                         ::testing::Combine(::testing::Values("models/dense_vl", "models/moe_tied"),
                                            ::testing::Values(std::string("auto"), std::string("portable"))),
                         record_case_name);
// A quantized base with an untied head keeps its embedding table in mapped host memory, which the recording
// reads too. Dequantized bf16 GEMMs only: the FP8 GEMMs' cuBLASLt algorithm is timed per backend, so two
// backends may pick different ones (different bits, not a recording fault).
INSTANTIATE_TEST_SUITE_P(QuantizedBase, CudaStepRecord,
                         ::testing::Values(std::make_tuple(std::string("quant/fp8"), std::string("portable"))),
                         record_case_name);

}  // namespace
}  // namespace deltatune
