// Merged full-checkpoint export, as PEFT's merge_and_unload + save_pretrained (docs/peft-adapter.md §8):
//   linear  W' = round(float(W) + s·(B@A))          (delta in fp32, one rounding into W's dtype)
//   experts W'[e] = round(W[e] + round(s·B_e@A_e))   (ParamWrapper casts the delta to W's dtype first)
// Everything else of the base folder (vision/MTP tensors, shards, index, config, tokenizer) is carried over
// unchanged, under the same names.
#include "model/merged_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "io/safetensors.h"

namespace deltatune {

namespace fs = std::filesystem;

namespace {

// One checkpoint tensor changed by one LoRA module: rows [row_begin, row_end) of the module's delta (of
// expert `expert` for 3-D parameters) land on the tensor (or on tensor[expert] when `fused`).
struct MergeTarget {
  const LoraModule* module = nullptr;
  int64_t expert = -1;  // -1: linear
  bool fused = false;   // 3-D [E, out, in] tensor (else a 2-D slice of one expert)
  int64_t row_begin = 0, row_end = 0;
};

float load(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return t.ptr<float>()[i];
    case DType::BF16: return bf16_to_f32(t.ptr<uint16_t>()[i]);
    default: return f16_to_f32(t.ptr<uint16_t>()[i]);
  }
}

void store(Tensor& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::F32: t.ptr<float>()[i] = v; break;
    case DType::BF16: t.ptr<uint16_t>()[i] = f32_to_bf16(v); break;
    default: t.ptr<uint16_t>()[i] = f32_to_f16(v); break;
  }
}

float round_to(DType dt, float v) {
  switch (dt) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}

template <class F>
void parallel_rows(int64_t n, F&& body) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  if (n < 64 || threads == 1) {
    body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t b = 0; b < n; b += chunk) pool.emplace_back([&, b] { body(b, std::min(n, b + chunk)); });
  for (std::thread& t : pool) t.join();
}

// dst (rows x in, a 2-D view in the checkpoint dtype) += delta rows [row_begin, row_end) of module m (expert e).
// The fp32 delta accumulates over k in ascending order with FMA, as a BLAS micro-kernel does, and is scaled
// after the product (PEFT: (B @ A) * s).
void apply_delta(const LoraModule& m, int64_t e, int64_t row_begin, int64_t row_end, bool round_delta, Tensor& dst) {
  const int64_t r = m.r, in = m.in, E = m.experts;
  const float* A = m.A.ptr<float>();
  const float* B = m.B.ptr<float>();
  const float s = m.scaling;
  parallel_rows(row_end - row_begin, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<size_t>(in));
    for (int64_t o = row_begin + lo; o < row_begin + hi; ++o) {
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t k = 0; k < r; ++k) {
        const float b = e < 0 ? B[o * r + k] : B[o * r * E + k * E + e];
        const float* a = e < 0 ? A + k * in : A + (e * r + k) * in;
        for (int64_t i = 0; i < in; ++i) acc[size_t(i)] = std::fma(b, a[i], acc[size_t(i)]);
      }
      const int64_t base = (o - row_begin) * in;
      for (int64_t i = 0; i < in; ++i) {
        float d = acc[size_t(i)] * s;
        if (round_delta) d = round_to(dst.dtype, d);
        store(dst, base + i, load(dst, base + i) + d);
      }
    }
  });
}

void copy_file_atomic(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  check(!ec, to.string() + ": cannot copy from " + from.string() + ": " + ec.message());
}

}  // namespace

void merged_checkpoint_write(const ModelWeights& base, const LoraAdapter& adapter, const std::string& out_dir,
                             const std::function<void(double)>& progress) {
  check(base.reader != nullptr, "internal: merged export needs the base checkpoint's reader");
  const CheckpointReader& rd = *base.reader;
  const std::string& P = base.key_prefix;

  // Where each module lands in the checkpoint (fused 3-D experts, or per-expert 2-D tensors).
  std::map<std::string, MergeTarget> targets;
  for (const LoraModule& m : adapter.modules) {
    check(m.A.device == Device::CPU && m.B.device == Device::CPU && m.A.dtype == DType::F32 &&
              m.B.dtype == DType::F32,
          "internal: merged export needs host F32 adapter tensors (" + m.path + ")");
    const int64_t rows = m.experts > 0 ? int64_t(m.r) * m.experts : m.r;
    check(m.A.shape == Shape({rows, m.in}) && m.B.shape == Shape({m.out, rows}),
          "merged export: adapter module " + m.path + " has A " + shape_str(m.A.shape) + ", B " +
              shape_str(m.B.shape) + ", expected " + shape_str({rows, m.in}) + " and " + shape_str({m.out, rows}));
    if (m.group == "vision") {
      // The tower's tensors: model.visual.* (or visual.* in older vision-language checkpoints).
      const std::string vp = rd.has("model.visual.patch_embed.proj.weight") ? "model." : "";
      targets[vp + m.path + ".weight"] = {&m, -1, false, 0, m.out};
    } else if (m.experts == 0) {
      targets[P + m.path + ".weight"] = {&m, -1, false, 0, m.out};
    } else if (rd.has(P + m.path)) {
      targets[P + m.path] = {&m, -1, true, 0, m.out};
    } else {
      // Per-expert checkpoint: transformers fuses experts.{e}.{gate,up}_proj into gate_up_proj[e] = [gate; up]
      // at load and splits them again on save.
      const std::string experts = P + m.path.substr(0, m.path.rfind('.'));
      check(rd.has(experts + ".0.down_proj.weight"),
            base.dir + ": the checkpoint has no tensor " + P + m.path + " (nor per-expert " + experts +
                ".0.down_proj.weight ...) for adapter module " + m.path);
      const bool gate_up = m.path.size() >= 13 && m.path.compare(m.path.size() - 13, 13, ".gate_up_proj") == 0;
      for (int64_t e = 0; e < m.experts; ++e) {
        const std::string ep = experts + "." + std::to_string(e) + ".";
        if (gate_up) {
          targets[ep + "gate_proj.weight"] = {&m, e, false, 0, m.out / 2};
          targets[ep + "up_proj.weight"] = {&m, e, false, m.out / 2, m.out};
        } else {
          targets[ep + "down_proj.weight"] = {&m, e, false, 0, m.out};
        }
      }
    }
  }
  for (const auto& [key, t] : targets) {
    check(rd.has(key), base.dir + ": the checkpoint has no tensor " + key + " for adapter module " + t.module->path);
    const TensorEntry& en = rd.entry(key);
    const Shape want = t.fused ? Shape{t.module->experts, t.module->out, t.module->in}
                               : Shape{t.row_end - t.row_begin, t.module->in};
    check(en.shape == want, base.dir + ": tensor " + key + " has shape " + shape_str(en.shape) + ", the adapter needs " +
                                shape_str(want));
    check(en.dtype == DType::F32 || en.dtype == DType::BF16 || en.dtype == DType::F16,
          base.dir + ": tensor " + key + " has dtype " + dtype_name(en.dtype) + "; merging needs F32, BF16 or F16");
  }

  const fs::path out(out_dir);
  std::error_code ec;
  check(fs::weakly_canonical(out, ec) != fs::weakly_canonical(fs::path(base.dir), ec),
        out_dir + ": the merged export cannot overwrite the base checkpoint");
  if (fs::exists(out)) {
    check(fs::is_directory(out) && fs::is_empty(out),
          out_dir + ": exists and is not empty; choose a new folder for the merged checkpoint");
  }
  // Written beside the target and renamed at the end, so a crash never leaves a half checkpoint under out_dir.
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".partial" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  check(!ec, tmp.string() + ": cannot create: " + ec.message());

  try {
    size_t total = 0, done = 0;
    const std::vector<std::string> names = rd.names();
    for (const std::string& n : names) total += rd.entry(n).end - rd.entry(n).begin;
    for (const std::string& file : rd.files()) {
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const std::string& n : names) {
        if (rd.file_of(n) != file) continue;
        Tensor t = rd.get(n);
        auto it = targets.find(n);
        if (it != targets.end()) {
          const MergeTarget& mt = it->second;
          Tensor w = host_convert(t, t.dtype);  // writable copy
          if (mt.fused) {
            for (int64_t e = 0; e < mt.module->experts; ++e) {
              Tensor we = w.index(e);
              apply_delta(*mt.module, e, 0, mt.module->out, true, we);
            }
          } else {
            apply_delta(*mt.module, mt.expert, mt.row_begin, mt.row_end, mt.expert >= 0, w);
          }
          t = w;
        }
        tensors.emplace_back(n, t);
        done += t.nbytes();
        if (progress && total) progress(0.95 * double(done) / double(total));
      }
      safetensors_write((tmp / file).string(), tensors);
    }
    for (const fs::directory_entry& de : fs::directory_iterator(base.dir)) {
      if (!de.is_regular_file()) continue;
      const std::string name = de.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      const bool weights = name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
      if (weights) continue;  // shards were written above; others (not in the index) are not part of the model
      copy_file_atomic(de.path(), tmp / name);  // index (same names, dtypes, sizes), config, tokenizer, ...
    }
    if (fs::exists(out)) fs::remove(out);
    fs::rename(tmp, out, ec);
    check(!ec, out_dir + ": cannot move the merged checkpoint into place: " + ec.message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (progress) progress(1.0);
}

}  // namespace deltatune
