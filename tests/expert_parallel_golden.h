// Expert parallel against the unsplit model on a LoRA golden (tests/goldens/lora/moe_tied), shared by the CPU test
// (ranks as threads exchanging through InProcessExchangeGroup) and the 2-GPU test (NCCL send/recv): each rank
// trains its own packed micro-batch with E/N experts and their LoRA slices; the unsplit model trains every rank's
// micro-batch in turn. The step's loss, the non-expert LoRA gradients summed over the ranks (data parallel's
// all-reduce), the expert LoRA gradients of each rank's slice and the router loads summed over the ranks must
// equal the unsplit model's.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/token_exchange.h"
#include "data/batch.h"
#include "dist/expert_lora.h"
#include "lora/lora.h"
#include "lora/lora_b_layout.h"
#include "model/qwen35_model.h"

namespace deltatune::testing_goldens {

struct EpRun {
  double loss_sum = 0;
  std::vector<LoraModule> grads;  // per module: path, experts and gA / gB on the host (F32)
  std::vector<float> moe_load;    // [layers, E]
  std::string error;
};

// Rank r's micro-batch: the sequences i with i % world == r packed into one row (sequence r % n when none).
inline std::vector<Batch> ep_rank_batches(const std::vector<Example>& seqs, int world) {
  std::vector<Batch> out;
  for (int r = 0; r < world; ++r) {
    std::vector<const Example*> mine;
    for (size_t i = static_cast<size_t>(r); i < seqs.size(); i += static_cast<size_t>(world)) mine.push_back(&seqs[i]);
    if (mine.empty()) mine.push_back(&seqs[static_cast<size_t>(r) % seqs.size()]);
    out.push_back(batch_from_examples(mine));
  }
  return out;
}

// ex null: the unsplit model trains every batch (gradients accumulate). Otherwise rank ex->rank() trains its own
// batch with its experts. `adapter_host`: the full adapter on the host; grad_scale: 1 / targets of all batches.
inline EpRun ep_run(Backend& be, const ModelWeights& w, const LoraAdapter& adapter_host,
                    const std::vector<Batch>& batches, TokenExchange* ex, StepOptions so) {
  EpRun out;
  try {
    Qwen35Model model(w, be, nullptr, ex);
    LoraAdapter adapter = adapter_host;
    if (ex) expert_lora_keep_slice(adapter, ex->rank(), ex->world());  // on the host, as the trainer does
    lora_to_backend(adapter, be);
    lora_zero_grad(adapter, be);
    int64_t targets = 0;
    for (const Batch& b : batches) targets += b.num_targets;
    so.backward = true;
    so.grad_scale = 1.f / static_cast<float>(targets);
    Tensor load;
    for (size_t i = 0; i < batches.size(); ++i) {
      if (ex && static_cast<int>(i) != ex->rank()) continue;
      const StepOutput o = model.step(batches[i], &adapter, so);
      out.loss_sum += o.loss_sum;
      const Tensor l = be.download(o.moe_load, DType::F32);
      if (out.moe_load.empty()) out.moe_load.assign(static_cast<size_t>(l.numel()), 0.f);
      for (int64_t j = 0; j < l.numel(); ++j) out.moe_load[static_cast<size_t>(j)] += l.ptr<float>()[j];
    }
    for (const LoraModule& m : adapter.modules) {
      LoraModule g;
      g.path = m.path;
      g.experts = m.experts;
      g.gA = be.download(m.gA, DType::F32);
      g.gB = lora_b_download(be, m, m.gB);  // PEFT's layout, as expert_lora_join takes it
      out.grads.push_back(std::move(g));
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

// ‖a − b‖ / ‖b‖.
inline double norm_rel(const float* a, const float* b, int64_t n) {
  double e2 = 0, r2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    e2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r2 += double(b[i]) * b[i];
  }
  return std::sqrt(e2 / std::max(r2, 1e-30));
}

struct EpErrors {
  double loss_rel = 0;       // |Σ_r loss_r − loss_ref| / loss_ref
  double grad_rel = 0;       // max over the LoRA gradient tensors of the norm-relative error
  std::string worst;         // the tensor with grad_rel
  bool load_equal = true;    // the router loads summed over the ranks equal the unsplit model's
  std::string error;
};

// The ranks (rank order) against the unsplit run.
inline EpErrors ep_compare(const std::vector<EpRun>& ranks, const EpRun& ref) {
  EpErrors e;
  const int W = static_cast<int>(ranks.size());
  double loss = 0;
  for (const EpRun& r : ranks) {
    if (!r.error.empty()) {
      e.error = r.error;
      return e;
    }
    loss += r.loss_sum;
  }
  e.loss_rel = std::abs(loss - ref.loss_sum) / std::abs(ref.loss_sum);
  std::vector<float> load(ref.moe_load.size(), 0.f);
  for (const EpRun& r : ranks)
    for (size_t j = 0; j < load.size() && j < r.moe_load.size(); ++j) load[j] += r.moe_load[j];
  e.load_equal = load == ref.moe_load;
  for (size_t m = 0; m < ref.grads.size(); ++m) {
    const LoraModule& want = ref.grads[m];
    for (int part = 0; part < 2; ++part) {
      const Tensor& full = part ? want.gB : want.gA;
      std::vector<float> got(static_cast<size_t>(full.numel()), 0.f);
      if (is_expert_lora(want)) {  // each rank's slice, joined
        std::vector<LoraModule> slices;
        for (const EpRun& r : ranks) {
          LoraModule s = r.grads[m];
          s.r = static_cast<int>(want.gA.dim(0) / want.experts);
          s.A = s.gA;
          s.B = s.gB;
          slices.push_back(s);
        }
        const LoraModule joined = expert_lora_join(slices);
        const Tensor& j = part ? joined.B : joined.A;
        std::copy(j.ptr<float>(), j.ptr<float>() + j.numel(), got.begin());
      } else {  // summed over the ranks, in rank order
        for (int r = 0; r < W; ++r) {
          const Tensor& g = part ? ranks[static_cast<size_t>(r)].grads[m].gB : ranks[static_cast<size_t>(r)].grads[m].gA;
          for (int64_t i = 0; i < g.numel(); ++i) got[static_cast<size_t>(i)] += g.ptr<float>()[i];
        }
      }
      const double rel = norm_rel(got.data(), full.ptr<float>(), full.numel());
      if (rel > e.grad_rel || std::isnan(rel)) {
        e.grad_rel = std::isnan(rel) ? INFINITY : rel;
        e.worst = want.path + (part ? ".lora_B" : ".lora_A");
      }
    }
  }
  return e;
}

}  // namespace deltatune::testing_goldens
