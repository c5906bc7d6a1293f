// Readers for the golden files under tests/goldens, shared by the CPU and CUDA test binaries.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "data/batch.h"
#include "io/safetensors.h"
#include "lora/lora.h"
#include "lora/lora_b_layout.h"
#include "lora/peft_io.h"
#include "model/qwen35_model.h"
#include "model/weights.h"

namespace deltatune::testing_goldens {

// tests/goldens: $DT_GOLDENS, else the source tree's, else tests/goldens of the current folder (a checkout's root, as
// on the GPU machine, where the build's source folder does not exist).
inline std::filesystem::path goldens_dir() {
  if (const char* e = std::getenv("DT_GOLDENS"); e && *e) return e;
  const std::filesystem::path src = std::filesystem::path(DT_SOURCE_DIR) / "tests" / "goldens";
  if (std::filesystem::exists(src)) return src;
  return std::filesystem::path("tests") / "goldens";
}

// golden_eval.jsonl: {"input_ids": [...], "labels": [...]?} per line.
inline std::vector<Example> read_jsonl(const std::filesystem::path& p) {
  std::vector<Example> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    Example ex;
    ex.input_ids = j["input_ids"].get<std::vector<int32_t>>();
    ex.labels = j.contains("labels") ? j["labels"].get<std::vector<int32_t>>() : ex.input_ids;
    out.push_back(ex);
  }
  return out;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The weight matrices rounded to bf16 the way the CUDA backend uploads them for bf16 compute (every linear,
// embedding, head, router and expert matrix; norms, conv1d taps, A_log and dt_bias stay fp32).
inline void round_matrices_to_bf16(ModelWeights& w) {
  auto r = [](Tensor& t) {
    if (t.defined()) t = host_convert(host_convert(t, DType::BF16), DType::F32);
  };
  r(w.embed);
  r(w.lm_head);
  for (LayerWeights& l : w.layers) {
    for (Tensor* t : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj, &l.lin.in_proj_qkv,
                      &l.lin.in_proj_z, &l.lin.in_proj_b, &l.lin.in_proj_a, &l.lin.out_proj, &l.mlp.gate_proj,
                      &l.mlp.up_proj, &l.mlp.down_proj, &l.moe.router, &l.moe.gate_up, &l.moe.down,
                      &l.moe.shared.gate_proj, &l.moe.shared.up_proj, &l.moe.shared.down_proj, &l.moe.shared_gate})
      r(*t);
  }
}

struct LossSum {
  double sum = 0;     // Σ CE over the trained targets
  int64_t targets = 0;
};

// Forward of each sequence on its own (no LoRA), the way the HF goldens were made.
inline LossSum loss_each_sequence(Qwen35Model& model, const std::vector<Example>& seqs,
                                  const StepOptions& opts = {}) {
  LossSum r;
  for (const auto& ex : seqs) {
    const StepOutput o = model.step(batch_from_examples({&ex}), nullptr, opts);
    r.sum += o.loss_sum;
    r.targets += o.targets;
  }
  return r;
}

// max |a[i]| and max |a[i] − b[i]| (a and b of one size): a gradient vector's scale and two steps' largest
// difference, for "the same gradients within rounding" checks.
inline double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::fabs(x)));
  return m;
}
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// A golden checkpoint (tests/goldens/models/NAME) with its PEFT adapter (tests/goldens/lora/NAME/adapter) on a
// backend, ready to step. Not movable: the model refers to the weights.
struct GoldenLoraModel {
  ModelWeights w;
  Qwen35Model model;
  LoraAdapter adapter;
  GoldenLoraModel(const std::filesystem::path& mdir, const std::filesystem::path& gdir, Backend& be)
      : w(model_weights_load(mdir.string())),
        model(w, be),
        adapter(peft_adapter_read((gdir / "adapter").string(), w.config)) {
    lora_to_backend(adapter, be);
  }
  GoldenLoraModel(const GoldenLoraModel&) = delete;
  GoldenLoraModel& operator=(const GoldenLoraModel&) = delete;
};

// Runs fn(name, golden, backend, model dir) for each named golden checkpoint with its adapter on a 2-thread CPU
// backend. Returns the name of the first golden whose files are missing (then nothing runs and the test skips),
// else an empty string.
template <class Fn>
std::string for_each_cpu_lora_golden(std::initializer_list<const char*> names, Fn&& fn) {
  for (const char* name : names)
    for (const char* sub : {"models", "lora"})
      if (!std::filesystem::exists(goldens_dir() / sub / name)) return name;
  for (const char* name : names) {
    const std::filesystem::path mdir = goldens_dir() / "models" / name;
    auto be = make_cpu_backend(2);
    GoldenLoraModel g(mdir, goldens_dir() / "lora" / name, *be);
    fn(std::string(name), g, *be, mdir);
  }
  return {};
}

// All sequences as one packed row.
// Every LoRA gradient (gA then gB of each module) as one F32 vector, for comparing two steps' gradients.
inline std::vector<float> all_lora_grads(const LoraAdapter& a, Backend& be) {
  std::vector<float> g;
  for (const auto& m : a.modules)
    for (const Tensor* t : {&m.gA, &m.gB}) {
      const Tensor h = be.download(*t, DType::F32);
      g.insert(g.end(), h.ptr<float>(), h.ptr<float>() + h.numel());
    }
  return g;
}

inline Batch packed_batch(const std::vector<Example>& seqs) {
  std::vector<const Example*> all;
  for (const auto& ex : seqs) all.push_back(&ex);
  return batch_from_examples(all);
}

// PEFT key "base_model.model.<prefix>layers.N.<module>.lora_A.weight" -> (module path, is_A); expert keys
// are nested (experts.base_layer.* = gate_up_proj, experts.* = down_proj when both are targeted); the vision
// tower's "base_model.model.model.visual.blocks.N.<module>" -> "visual.blocks.N.<module>".
inline std::pair<std::string, bool> module_of(std::string key) {
  const bool is_a = key.find(".lora_A.") != std::string::npos;
  key = key.substr(0, key.find(is_a ? ".lora_A." : ".lora_B."));
  const auto vision = key.find(".visual.blocks.");
  if (vision != std::string::npos) return {key.substr(vision + 1), is_a};
  const auto pos = key.find("layers.");
  key = key.substr(pos);
  const std::string base = ".experts.base_layer";
  if (key.size() > base.size() && key.compare(key.size() - base.size(), base.size(), base) == 0)
    key = key.substr(0, key.size() - base.size()) + ".experts.gate_up_proj";
  else if (key.size() > 8 && key.compare(key.size() - 8, 8, ".experts") == 0)
    key += ".down_proj";
  return {key, is_a};
}

// The LoRA golden step (tests/goldens/lora/make_lora_goldens.py): each golden_eval sequence on its own,
// forward and backward into `adapter` (gradients zeroed first), losses scaled by 1/targets as HF's mean.
// Returns the mean loss.
inline double lora_golden_step(Qwen35Model& model, Backend& be, LoraAdapter& adapter, const std::vector<Example>& seqs,
                               StepOptions so) {
  lora_zero_grad(adapter, be);
  int64_t targets = 0;
  for (const auto& ex : seqs) targets += batch_from_examples({&ex}).num_targets;
  so.backward = true;
  so.grad_scale = 1.f / static_cast<float>(targets);
  double sum = 0;
  for (const auto& ex : seqs) sum += model.step(batch_from_examples({&ex}), &adapter, so).loss_sum;
  return sum / static_cast<double>(targets);
}

// Norm-relative error ‖ours − HF‖/‖HF‖ of each LoRA gradient in grads.safetensors (HF + PEFT), in file
// order; INFINITY for a key with no module, a size mismatch or a non-finite value.
struct GradError {
  std::string name;
  double rel = 0;
};
inline std::vector<GradError> lora_grad_errors(Backend& be, LoraAdapter& adapter, const std::filesystem::path& file) {
  SafetensorsFile grads(file.string());
  std::vector<GradError> out;
  for (const auto& e : grads.entries()) {
    GradError r{e.name, INFINITY};
    const auto [path, is_a] = module_of(e.name);
    if (LoraModule* m = adapter.find(path)) {
      const std::vector<float> ref = host_to_f32(grads.get(e.name));
      const Tensor got = is_a ? be.download(m->gA, DType::F32) : lora_b_download(be, *m, m->gB);  // PEFT's layout
      if (got.numel() == static_cast<int64_t>(ref.size())) {
        double ref2 = 0, err2 = 0;
        bool finite = true;
        for (size_t i = 0; i < ref.size(); ++i) {
          const double g = got.ptr<float>()[i];
          finite = finite && std::isfinite(g);
          ref2 += double(ref[i]) * ref[i];
          err2 += (g - ref[i]) * (g - ref[i]);
        }
        if (finite) r.rel = std::sqrt(err2 / std::max(ref2, 1e-30));
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace deltatune::testing_goldens
