// Forward  x = patch_embed(pixels) + pos;  per block: a1 = LN1(x_in), qkv = a1·Wᵀ + b (+ LoRA), q/k 2-D rotary,
//          o = attention within each frame, x_mid = x_in + proj(o); a2 = LN2(x_mid), h = fc1(a2),
//          g = gelu_tanh(h), x_out = x_mid + fc2(g);  merger: m1 = fc1(LN(x) as [patches/4, 4·hidden]),
//          out = fc2(gelu_erf(m1)).
// Backward (LoRA of the blocks only; patch embedding, position table and merger frozen): the same steps in reverse,
//          each linear's dx = dy·W (+ LoRA path) with its LoRA gradients, rotary by the negative angle.
#include "model/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace deltatune {
namespace {

Tensor host_f32(const std::vector<float>& v, Shape shape) {
  Tensor t = host_tensor(std::move(shape), DType::F32);
  check(t.numel() == int64_t(v.size()), "vision tower: internal size mismatch");
  std::memcpy(t.data, v.data(), v.size() * sizeof(float));
  return t;
}

// Dropout salts of the tower's modules: apart from the text layers' (layer·64 + module).
uint64_t salt_of(size_t block, int module) { return (uint64_t(1) << 32) + uint64_t(block) * 8 + uint64_t(module); }

constexpr float kEps = 1e-6f;

}  // namespace

VisionEncoder::VisionEncoder(Backend& be, std::shared_ptr<const VisionWeights> host, std::optional<DType> dtype)
    : be_(be), host_(std::move(host)), dt_(dtype.value_or(be.compute_dtype())) {
  check(host_ != nullptr, "vision tower: no weights");
  patch_embed_ = upload(host_->patch_embed);
  for (const VisionBlockWeights& b : host_->blocks)
    blocks_.push_back(Block{upload(b.norm1), upload(b.norm2), upload(b.qkv), upload(b.proj), upload(b.fc1),
                            upload(b.fc2)});
  merger_norm_ = upload(host_->merger_norm);
  merger_fc1_ = upload(host_->merger_fc1);
  merger_fc2_ = upload(host_->merger_fc2);
}

VisionEncoder::Linear VisionEncoder::upload(const VisionLinear& l) {
  return Linear{be_.upload(host_f32(l.w, {l.out, l.in}), dt_),
                be_.upload(host_f32(l.b, {1, l.out}), DType::F32)};
}

VisionEncoder::Norm VisionEncoder::upload(const VisionLayerNorm& n) {
  const auto dim = int64_t(n.w.size());
  return Norm{be_.upload(host_f32(n.w, {dim}), DType::F32), be_.upload(host_f32(n.b, {dim}), DType::F32)};
}

bool VisionEncoder::adapts(const LoraAdapter* lora) {
  if (!lora) return false;
  return std::any_of(lora->modules.begin(), lora->modules.end(),
                     [](const LoraModule& m) { return m.group == "vision"; });
}

VisionEncoder::BlockLora VisionEncoder::block_lora(LoraAdapter* lora, size_t block) const {
  BlockLora l;
  if (!lora) return l;
  const std::string p = "visual.blocks." + std::to_string(block) + ".";
  l.qkv = lora->find(p + "attn.qkv");
  l.proj = lora->find(p + "attn.proj");
  l.fc1 = lora->find(p + "mlp.linear_fc1");
  l.fc2 = lora->find(p + "mlp.linear_fc2");
  return l;
}

void VisionEncoder::linear(const Linear& l, LoraModule* m, const LoraRuntime& rt, uint64_t salt, const Tensor& x,
                           Tensor& y, LinearCache& cache) {
  linear_fwd(be_, x, BaseMatrix(l.w), m, rt, salt, y, cache);
  Tensor ones = be_.alloc({x.rows(), 1}, DType::F32);
  be_.fill(ones, 1.f);
  be_.gemm(ones, false, l.b, false, y, 1.f, 1.f);  // + bias: ones [rows, 1] · b [1, out]
}

Tensor VisionEncoder::forward(const std::vector<float>& pixel_values, const std::vector<std::array<int64_t, 3>>& grids,
                              LoraAdapter* lora, const LoraRuntime& rt, Saved* saved) {
  const VisionConfig& c = host_->cfg;
  const int64_t H = c.hidden, nh = c.heads, hd = c.head_dim(), merge = c.merge_size, F = c.patch_features();
  for (const auto& g : grids)
    check(g[1] % merge == 0 && g[2] % merge == 0, "vision tower: image grid " + std::to_string(g[1]) + "x" +
                                                      std::to_string(g[2]) + " is not a multiple of the merge size");
  const int64_t N = vision_patch_count(grids);
  check(int64_t(pixel_values.size()) == N * F, "vision tower: pixel_values has " +
                                                   std::to_string(pixel_values.size()) + " values, the grids need " +
                                                   std::to_string(N * F));
  const DType dt = dt_;
  // The frozen tower on the CPU backend: the host reference (vision_tower.h, dot products in double) rather than
  // the backend's fp32 GEMMs, so the CPU goldens measure transformers' rounding, not ours (the two agree within
  // 1.5e-6 of the largest merged value: vision_tower_test.cpp).
  if (be_.device() == Device::CPU && !saved && !adapts(lora)) {
    const VisionOutput ref = vision_forward(*host_, pixel_values, grids);
    return be_.upload(host_f32(ref.embeds, {N / (merge * merge), c.out_hidden}), dt);
  }

  // Patch embedding + the interpolated position table.
  Tensor pixels = be_.upload(host_f32(pixel_values, {N, F}), dt);
  Tensor x = be_.alloc({N, H}, dt);
  LinearCache unused;
  linear(patch_embed_, nullptr, rt, 0, pixels, x, unused);
  be_.add(x, be_.upload(host_f32(vision_position_embeds(*host_, grids), {N, H}), dt), 1.f);

  const Tensor positions = be_.upload_i32(vision_patch_positions(grids, merge)).view({2, N});
  SeqLayout frames;
  frames.host_cu_seqlens = vision_frame_bounds(grids);
  frames.cu_seqlens = be_.upload_i32(frames.host_cu_seqlens);
  std::vector<int32_t> within(static_cast<size_t>(N));
  for (size_t f = 0; f + 1 < frames.host_cu_seqlens.size(); ++f) {
    for (int32_t t = frames.host_cu_seqlens[f]; t < frames.host_cu_seqlens[f + 1]; ++t)
      within[size_t(t)] = t - frames.host_cu_seqlens[f];
    frames.max_seqlen = std::max(frames.max_seqlen, frames.host_cu_seqlens[f + 1] - frames.host_cu_seqlens[f]);
  }
  frames.positions = be_.upload_i32(within);
  frames.causal = false;
  if (saved) {
    *saved = Saved{};
    saved->frames = frames;
    saved->positions = positions;
    saved->patches = N;
  }

  const auto scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const auto theta = static_cast<float>(c.rope_theta);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const BlockLora l = block_lora(lora, i);
    BlockSaved s;
    s.x_in = x;
    s.mean1 = be_.alloc({N}, DType::F32);
    s.rstd1 = be_.alloc({N}, DType::F32);
    s.a1 = be_.alloc({N, H}, dt);
    be_.layer_norm_fwd(x, b.norm1.w, b.norm1.b, kEps, s.a1, s.mean1, s.rstd1);
    Tensor qkv = be_.alloc({N, 3 * H}, dt);
    linear(b.qkv, l.qkv, rt, salt_of(i, 0), s.a1, qkv, s.qkv);
    s.q = be_.alloc({N, nh, hd}, dt);
    s.k = be_.alloc({N, nh, hd}, dt);
    s.v = be_.alloc({N, nh, hd}, dt);
    for (auto [t, col] : {std::pair{&s.q, int64_t(0)}, std::pair{&s.k, H}, std::pair{&s.v, 2 * H}}) {
      Tensor t2 = t->view({N, H});
      be_.copy_cols(t2, 0, qkv, col, H);
    }
    be_.rope_2d(s.q, positions, theta, false);
    be_.rope_2d(s.k, positions, theta, false);
    s.o = be_.alloc({N, nh, hd}, dt);
    s.lse = be_.alloc({N, nh}, DType::F32);
    be_.attention_fwd(s.q, s.k, s.v, frames, scale, s.o, s.lse);
    Tensor y = be_.alloc({N, H}, dt);
    linear(b.proj, l.proj, rt, salt_of(i, 1), s.o.view({N, H}), y, s.proj);
    s.x_mid = be_.alloc({N, H}, dt);
    be_.copy(s.x_mid, x);
    be_.add(s.x_mid, y, 1.f);
    s.mean2 = be_.alloc({N}, DType::F32);
    s.rstd2 = be_.alloc({N}, DType::F32);
    s.a2 = be_.alloc({N, H}, dt);
    be_.layer_norm_fwd(s.x_mid, b.norm2.w, b.norm2.b, kEps, s.a2, s.mean2, s.rstd2);
    s.h = be_.alloc({N, c.intermediate}, dt);
    linear(b.fc1, l.fc1, rt, salt_of(i, 2), s.a2, s.h, s.fc1);
    s.g = be_.alloc({N, c.intermediate}, dt);
    be_.gelu_fwd(s.h, true, s.g);
    Tensor y2 = be_.alloc({N, H}, dt);
    linear(b.fc2, l.fc2, rt, salt_of(i, 3), s.g, y2, s.fc2);
    x = be_.alloc({N, H}, dt);
    be_.copy(x, s.x_mid);
    be_.add(x, y2, 1.f);
    if (saved) saved->blocks.push_back(std::move(s));
  }

  // Merger: LayerNorm per patch, then each run of merge² patches as one row.
  const int64_t tokens = N / (merge * merge), M = merge * merge * H;
  Tensor mean = be_.alloc({N}, DType::F32), rstd = be_.alloc({N}, DType::F32), a = be_.alloc({N, H}, dt);
  be_.layer_norm_fwd(x, merger_norm_.w, merger_norm_.b, kEps, a, mean, rstd);
  Tensor m1 = be_.alloc({tokens, M}, dt), m1g = be_.alloc({tokens, M}, dt);
  Tensor out = be_.alloc({tokens, c.out_hidden}, dt);
  linear(merger_fc1_, nullptr, rt, 0, a.view({tokens, M}), m1, unused);
  be_.gelu_fwd(m1, false, m1g);
  linear(merger_fc2_, nullptr, rt, 0, m1g, out, unused);
  if (saved) {
    saved->x_final = x;
    saved->mean_f = mean;
    saved->rstd_f = rstd;
    saved->m1 = m1;
  }
  return out;
}

void VisionEncoder::backward(const Tensor& d_embeds, LoraAdapter& lora, const LoraRuntime& rt, Saved& saved) {
  const VisionConfig& c = host_->cfg;
  const int64_t H = c.hidden, nh = c.heads, hd = c.head_dim(), merge = c.merge_size, N = saved.patches;
  const int64_t tokens = N / (merge * merge), M = merge * merge * H;
  check(saved.blocks.size() == blocks_.size() && d_embeds.rows() == tokens && d_embeds.cols() == c.out_hidden,
        "vision tower backward: " + shape_str(d_embeds.shape) + " gradient for a forward of " +
            std::to_string(tokens) + " merged tokens (or no activations kept)");
  const DType dt = dt_;
  // Merger (frozen): d m1g = d·W2, d m1 = gelu'(m1), d LN out = d m1·W1 viewed per patch.
  Tensor dm1g = be_.alloc({tokens, M}, dt), dm1 = be_.alloc({tokens, M}, dt), da = be_.alloc({tokens, M}, dt);
  be_.gemm(d_embeds, false, merger_fc2_.w, false, dm1g, 1.f, 0.f);
  be_.gelu_bwd(dm1g, saved.m1, false, dm1);
  be_.gemm(dm1, false, merger_fc1_.w, false, da, 1.f, 0.f);
  Tensor dx = be_.alloc({N, H}, dt);
  be_.layer_norm_bwd(da.view({N, H}), saved.x_final, merger_norm_.w, saved.mean_f, saved.rstd_f, dx);

  const auto scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const auto theta = static_cast<float>(c.rope_theta);
  for (size_t i = blocks_.size(); i-- > 0;) {
    const Block& b = blocks_[i];
    const BlockLora l = block_lora(&lora, i);
    BlockSaved& s = saved.blocks[i];
    // x_out = x_mid + fc2(gelu(fc1(LN2(x_mid)))).
    Tensor dg = be_.alloc({N, c.intermediate}, dt), dh = be_.alloc({N, c.intermediate}, dt);
    linear_bwd(be_, dx, BaseMatrix(b.fc2.w), l.fc2, rt, salt_of(i, 3), s.fc2, dg, false);
    be_.gelu_bwd(dg, s.h, true, dh);
    Tensor da2 = be_.alloc({N, H}, dt), dxm = be_.alloc({N, H}, dt);
    linear_bwd(be_, dh, BaseMatrix(b.fc1.w), l.fc1, rt, salt_of(i, 2), s.fc1, da2, false);
    be_.layer_norm_bwd(da2, s.x_mid, b.norm2.w, s.mean2, s.rstd2, dxm);
    be_.add(dxm, dx, 1.f);  // d x_mid
    // x_mid = x_in + proj(attention(rotary(qkv(LN1(x_in))))).
    Tensor d_o = be_.alloc({N, nh, hd}, dt);
    Tensor d_o2 = d_o.view({N, H});
    linear_bwd(be_, dxm, BaseMatrix(b.proj.w), l.proj, rt, salt_of(i, 1), s.proj, d_o2, false);
    Tensor dq = be_.alloc({N, nh, hd}, dt), dk = be_.alloc({N, nh, hd}, dt), dv = be_.alloc({N, nh, hd}, dt);
    be_.attention_bwd(d_o, s.q, s.k, s.v, s.o, s.lse, saved.frames, scale, dq, dk, dv);
    be_.rope_2d(dq, saved.positions, theta, true);
    be_.rope_2d(dk, saved.positions, theta, true);
    Tensor dqkv = be_.alloc({N, 3 * H}, dt);
    for (auto [t, col] : {std::pair{&dq, int64_t(0)}, std::pair{&dk, H}, std::pair{&dv, 2 * H}})
      be_.copy_cols(dqkv, col, t->view({N, H}), 0, H);
    Tensor da1 = be_.alloc({N, H}, dt);
    linear_bwd(be_, dqkv, BaseMatrix(b.qkv.w), l.qkv, rt, salt_of(i, 0), s.qkv, da1, false);
    if (i == 0) break;  // the patch embedding is frozen: no gradient below the first block's LoRA
    Tensor dx_in = be_.alloc({N, H}, dt);
    be_.layer_norm_bwd(da1, s.x_in, b.norm1.w, s.mean1, s.rstd1, dx_in);
    be_.add(dx_in, dxm, 1.f);
    dx = dx_in;
    s = BlockSaved{};  // this block's activations are no longer needed
  }
}

}  // namespace deltatune
