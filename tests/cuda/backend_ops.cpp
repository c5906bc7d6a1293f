// Every op of the Backend interface on the CUDA backend against the CPU reference (label `cuda`, needs a
// GPU; skipped without one). Inputs are seeded random values rounded to the GPU dtype so both backends see
// identical numbers; GPU outputs sit between guard bands and start poisoned with NaN.
//
// Tolerances (normalised MSE, Σ(gpu − cpu)²/Σ cpu²):
//  - exact ops (copies, gathers, conversions, dropout masks, optimizer math in fp32): 1e-10 .. 0
//  - a BF16 output rounds each value by up to 2^-9 relative, an nmse of about 1e-6; elementwise, norm,
//    RoPE, conv and gate ops with BF16 outputs: 1e-5
//  - reductions of many terms into a BF16 output (GEMM, attention, GDN, losses' gradients): 1e-4; the
//    backward of attention and GDN chains several such reductions (and the GDN recurrence compounds
//    rounding over the sequence): 5e-4
//  - F32 statistics (rstd, lse, g) computed in fp32 on both sides: 1e-8 .. 1e-10; scalar losses: 1e-5 relative
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda_kernels_setting.h"
#include "backend/gradient_reducer.h"
#include "backend/shard_gatherer.h"
#include "backend/token_exchange.h"
#include "backend_harness.h"
#include "core/error.h"

namespace deltatune::test {
namespace {

constexpr DType BF = DType::BF16;
constexpr DType F32 = DType::F32;

// ---- memory, transfers, conversions ---------------------------------------------------------------------
void case_memory(Env& e) {
  Backend& g = *e.gpu;
  EXPECT_EQ(g.device(), Device::CUDA);
  EXPECT_NE(g.name().find("cuda:"), std::string::npos) << g.name();
  EXPECT_EQ(g.compute_dtype(), BF);
  EXPECT_EQ(g.weight_dtype(), BF);
  // upload/download round trips: F32 exact, BF16 equal to the host rounding.
  Tensor h = e.host_rand({37, 13}, F32, -3.f, 3.f);
  EXPECT_EQ(e.down(g, g.upload(h, F32)), host_to_f32(h));
  EXPECT_EQ(e.down(g, g.upload(h, BF)), host_to_f32(host_convert(host_convert(h, BF), F32)));
  Tensor z = g.zeros({1031}, BF);
  for (float v : e.down(g, z)) ASSERT_EQ(v, 0.f);
  // Caching allocator: a freed block is reused (no new reservation), stats are consistent.
  g.synchronize();
  const MemoryStats s0 = g.memory_stats();
  EXPECT_GT(s0.total_bytes, 0);
  { Tensor big = g.alloc({3 << 20}, DType::U8); }
  const MemoryStats s1 = g.memory_stats();
  { Tensor big = g.alloc({3 << 20}, DType::U8); EXPECT_GE(g.memory_stats().allocated_bytes, s1.allocated_bytes + (3 << 20)); }
  const MemoryStats s2 = g.memory_stats();
  EXPECT_EQ(s2.reserved_bytes, s1.reserved_bytes) << "a freed block was not reused";
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_GE(s2.peak_allocated_bytes, s0.allocated_bytes + (3 << 20));
  EXPECT_GE(s2.reserved_bytes, s2.allocated_bytes);
  // Out of memory is an Error with advice, and the backend keeps working.
  try {
    Tensor huge = g.alloc({int64_t(1) << 50}, DType::U8);
    ADD_FAILURE() << "allocating 1 PiB did not fail";
  } catch (const Error& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sequence_len"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradient_checkpointing"), std::string::npos) << msg;
  }
  Tensor after = g.upload(h, F32);
  EXPECT_EQ(e.down(g, after), host_to_f32(h));
  g.synchronize();
}

void case_fill_copy(Env& e) {
  for (DType dt : {F32, BF}) {
    Pair y = e.out({1029}, dt);
    e.cpu->fill(y.c, 0.625f);
    e.gpu->fill(y.g, 0.625f);
    compare(e, std::string("fill ") + dtype_name(dt), y, 0);
  }
  // copy with conversion F32 -> BF16 -> F32 equals host rounding.
  Pair x = e.in({7, 131}, F32, -5.f, 5.f);
  Tensor xb = host_convert(host_convert(e.cpu->download(x.c, F32), BF), F32);
  Pair yb = e.out({7, 131}, BF);
  e.gpu->copy(yb.g, x.g);
  e.cpu->copy(yb.c, e.cpu->upload(xb, F32));
  compare(e, "copy F32->BF16", yb, 0);
  Pair yf = e.out({7 * 131}, F32);
  e.gpu->copy(yf.g, yb.g);
  e.cpu->copy(yf.c, yb.c);
  compare(e, "copy BF16->F32", yf, 0);
  // copy_cols: a column block into the middle of another matrix; the other columns stay.
  Pair src = e.in({13, 17}, BF);
  Pair dst = e.out_init({13, 11}, BF);
  e.cpu->copy_cols(dst.c, 4, src.c, 3, 5);
  e.gpu->copy_cols(dst.g, 4, src.g, 3, 5);
  compare(e, "copy_cols", dst, 0);
  // bf16 rows whose widths and offsets are multiples of 8 take the 16-byte path.
  Pair src8 = e.in({13, 48}, BF);
  Pair dst8 = e.out_init({13, 40}, BF);
  e.cpu->copy_cols(dst8.c, 8, src8.c, 16, 24);
  e.gpu->copy_cols(dst8.g, 8, src8.g, 16, 24);
  compare(e, "copy_cols (16-byte path)", dst8, 0);
}

// ---- GEMM -----------------------------------------------------------------------------------------------
void case_gemm(Env& e) {
  struct G {
    int64_t M, N, K;
    DType a, b, c;
    float alpha, beta;
  };
  const G cases[] = {{37, 13, 70, BF, BF, BF, 1.f, 0.f},   {5, 129, 7, BF, BF, F32, 0.5f, 1.f},
                     {64, 65, 33, F32, F32, F32, 1.f, 0.f}, {11, 7, 300, BF, F32, F32, 1.f, 0.25f},
                     {33, 17, 16, F32, F32, BF, -1.f, 0.f}, {1, 257, 128, BF, BF, BF, 1.f, 1.f}};
  for (const G& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Pair A = e.in(ta ? Shape{c.K, c.M} : Shape{c.M, c.K}, c.a);
        Pair B = e.in(tb ? Shape{c.N, c.K} : Shape{c.K, c.N}, c.b);
        Pair C = c.beta != 0.f ? e.out_init({c.M, c.N}, c.c) : e.out({c.M, c.N}, c.c);  // beta 0: NaN ignored
        e.cpu->gemm(A.c, ta, B.c, tb, C.c, c.alpha, c.beta);
        e.gpu->gemm(A.g, ta, B.g, tb, C.g, c.alpha, c.beta);
        std::ostringstream name;
        name << "gemm " << c.M << "x" << c.N << "x" << c.K << (ta ? " Aᵀ" : "") << (tb ? " Bᵀ" : "") << " "
             << dtype_name(c.a) << "·" << dtype_name(c.b) << "->" << dtype_name(c.c) << " beta " << c.beta;
        compare(e, name.str(), C, c.c == F32 && c.a == F32 && c.b == F32 ? 1e-10 : 1e-4);
      }
}

// gemm_cols: column blocks of wider tensors as A (both orientations), B and C, as the grouped LoRA products use
// them (u_i of a [T, Σr] tensor; du_i written into its columns); the columns of C outside the block stay.
void case_gemm_cols(Env& e) {
  struct G {
    int64_t M, N, K;
    DType c;
    float alpha, beta;
  };
  const G cases[] = {{67, 40, 16, BF, 2.f, 0.f}, {16, 72, 131, F32, 1.f, 1.f}, {130, 16, 48, BF, 0.5f, 1.f}};
  for (const G& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        // A's block: columns [5, 5 + a_cols) of a tensor 9 columns wider; B's [3, ...) of 4 wider; C's [2, ...) of 7.
        const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K, b_rows = tb ? c.N : c.K,
                      b_cols = tb ? c.K : c.N;
        Pair A = e.in({a_rows, a_cols + 9}, BF), B = e.in({b_rows, b_cols + 4}, BF);
        Pair C = e.out_init({c.M, c.N + 7}, c.c);
        const Backend::Cols ac{A.c, 5, a_cols}, bc{B.c, 3, b_cols}, cc{C.c, 2, c.N};
        const Backend::Cols ag{A.g, 5, a_cols}, bg{B.g, 3, b_cols}, cg{C.g, 2, c.N};
        e.cpu->gemm_cols(ac, ta, bc, tb, cc, c.alpha, c.beta);
        e.gpu->gemm_cols(ag, ta, bg, tb, cg, c.alpha, c.beta);
        std::ostringstream name;
        name << "gemm_cols " << c.M << "x" << c.N << "x" << c.K << (ta ? " Aᵀ" : "") << (tb ? " Bᵀ" : "") << " ->"
             << dtype_name(c.c) << " beta " << c.beta;
        compare(e, name.str(), C, 1e-4);
      }
  // A whole tensor is its own block: equal to gemm.
  Pair A = e.in({33, 16}, BF), B = e.in({40, 16}, BF);
  Pair C = e.out({33, 40}, BF);
  e.cpu->gemm(A.c, false, B.c, true, C.c, 1.f, 0.f);
  e.gpu->gemm_cols(A.g, false, B.g, true, C.g, 1.f, 0.f);
  compare(e, "gemm_cols whole tensors", C, 1e-4);
}

// du (=) alpha·dy·B and gB (+=) alpha·dyᵀ·u. Shapes the CUDA kernel takes (r 16, N a multiple of 64): token
// tails (300, 77), several 64-column chunks per block (T 4096, N 2560: 14 column splits of 3 chunks, the last of 1);
// and shapes it leaves to the GEMMs (r 32, N 40, r 8). u and du are column blocks of wider tensors, as in the grouped
// backward. Tolerances: du 1e-4 (a bf16 output, as gemm_cols), gB 1e-5 (fp32, summed in another order than the CPU).
void case_lora_dy(Env& e) {
  struct L {
    int64_t T, N, r;
  };
  const L cases[] = {{300, 192, 16}, {77, 128, 16}, {4096, 2560, 16}, {77, 128, 32}, {50, 40, 16}, {64, 64, 8}};
  for (const L& c : cases) {
    Pair dy = e.in({c.T, c.N}, BF), B = e.in({c.N, c.r}, BF, -0.5f, 0.5f), u = e.in({c.T, 3 * c.r}, BF);
    Pair du = e.out_init({c.T, 2 * c.r}, BF), gB = e.out_init({c.N, c.r}, F32);
    const Backend::Cols uc{u.c, c.r, c.r}, ug{u.g, c.r, c.r}, duc{du.c, c.r, c.r}, dug{du.g, c.r, c.r};
    e.cpu->lora_dy_products(dy.c, B.c, uc, 0.75f, duc, gB.c);
    e.gpu->lora_dy_products(dy.g, B.g, ug, 0.75f, dug, gB.g);
    const std::string tag = " T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " r=" + std::to_string(c.r);
    compare(e, "lora_dy_products du" + tag, du, 1e-4);
    compare(e, "lora_dy_products gB" + tag, gB, 1e-5);
  }
}

// y (=) alpha·u·Bᵀ (+ residual). Shapes the CUDA kernel takes (r 16, N a multiple of 8): tails of the 128 x 128
// tiles (T 300, N 200), a residual apart and the residual being y itself, none; r 8 goes to the GEMM. u is a column
// block of a wider tensor, as in the grouped forward; y starts random (no guard: the kernel needs 16-byte aligned
// rows). Tolerance 1e-4 (a bf16 output, as gemm_cols).
void case_lora_up(Env& e) {
  struct L {
    int64_t T, N, r;
  };
  const L cases[] = {{300, 200, 16}, {128, 2048, 16}, {33, 40, 8}};
  for (const L& c : cases)
    for (int mode = 0; mode < 3; ++mode) {  // 0: no residual, 1: a residual tensor, 2: the residual is y
      Pair u = e.in({c.T, 3 * c.r}, BF), B = e.in({c.N, c.r}, BF, -0.5f, 0.5f), res = e.in({c.T, c.N}, BF);
      Pair y = e.in({c.T, c.N}, BF);  // 16-byte aligned, as the model's tensors (the guarded outputs are not)
      const Backend::Cols uc{u.c, c.r, c.r}, ug{u.g, c.r, c.r};
      const Tensor* rc = mode == 1 ? &res.c : mode == 2 ? &y.c : nullptr;
      const Tensor* rg = mode == 1 ? &res.g : mode == 2 ? &y.g : nullptr;
      e.cpu->lora_up(uc, B.c, 0.75f, rc, y.c);
      e.gpu->lora_up(ug, B.g, 0.75f, rg, y.g);
      compare(e, "lora_up T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " r=" + std::to_string(c.r) +
                     (mode == 0 ? "" : mode == 1 ? " + residual" : " + y"),
              y, 1e-4);
    }
}

// Elements of two GPU tensors that differ in their bits (fused op vs the ops it replaces, same device).
int64_t bit_mismatches(Env& e, const Tensor& a, const Tensor& b) {
  const std::vector<float> x = e.down(*e.gpu, a), y = e.down(*e.gpu, b);
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return n;
}

// SwiGLU with the LoRA rank-r terms of its neighbours. Forward: h (=) silu(g + ag·ug·Bgᵀ)·(u + au·uu·Buᵀ), the sums
// back in g and u with keep_sums; backward: dh' = dh + dr·A, then swiglu_bwd. Shapes the CUDA kernels take (r 16,
// N a multiple of 8): tails of the tiles (T 300, N 200), a 2b-like row (T 256, N 6144), gate values down to -100
// (the kernels' exact sigmoid for warps with a gate below -87: in every warp, or in the first 24 rows only, so that
// the warps of a block take both paths); r 8 goes to the default (lora_up / gemm + the SwiGLU ops). ug and uu are
// column blocks of one [T, 2r] tensor, as in the grouped forward. The outputs are guarded with kGuard16 (16-byte
// aligned, as the kernels need; with kGuard they would take the default). Tolerance 1e-4 against the F32 CPU (bf16
// outputs of sums, as lora_up). On the GPU the forward is also compared with the ops it replaces (lora_up with the
// residual in place twice + swiglu_fwd: same arithmetic, same bits expected) and the backward with gemm (+=) +
// swiglu_bwd (cuBLAS sums the 16 products in its own order: printed only).
void case_lora_swiglu(Env& e) {
  struct L {
    int64_t T, N, r;
    float glo;         // the gate's lowest value
    int64_t low_rows;  // gates below -3 only in rows [0, low_rows) (0: in all rows)
  };
  const L cases[] = {{300, 200, 16, -3.f, 0},
                     {256, 6144, 16, -3.f, 0},
                     {33, 40, 8, -3.f, 0},
                     {200, 136, 16, -100.f, 0},
                     {200, 136, 16, -100.f, 24}};
  auto tag_of = [](const L& c) {
    return " T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " r=" + std::to_string(c.r) +
           (c.glo < -3.f ? " g>=-100" : "") + (c.low_rows > 0 ? " rows<" + std::to_string(c.low_rows) : "");
  };
  auto gates = [&](const L& c) {  // [T, N] in [glo, 3), clamped to -3 from row low_rows on
    Tensor h = e.host_rand({c.T, c.N}, BF, c.glo, 3.f);
    if (c.low_rows > 0)
      for (int64_t i = c.low_rows * c.N; i < h.numel(); ++i) h.ptr<float>()[i] = std::max(h.ptr<float>()[i], -3.f);
    return e.from_host(h, BF);
  };
  for (const L& c : cases) {
    const std::string tag = tag_of(c);
    for (int keep = 0; keep < 2; ++keep) {
      Pair uz = e.in({c.T, 2 * c.r}, BF), Bg = e.in({c.N, c.r}, BF, -0.5f, 0.5f), Bu = e.in({c.N, c.r}, BF, -0.5f, 0.5f);
      Pair g = gates(c), u = e.in({c.T, c.N}, BF, -2.f, 2.f), h = e.out_init({c.T, c.N}, BF, -1.f, 1.f, kGuard16);
      Tensor g2 = e.gpu->alloc(g.g.shape, BF), u2 = e.gpu->alloc(u.g.shape, BF), h2 = e.gpu->alloc(h.g.shape, BF);
      e.gpu->copy(g2, g.g);
      e.gpu->copy(u2, u.g);
      e.cpu->lora_swiglu_fwd({uz.c, 0, c.r}, Bg.c, 0.75f, {uz.c, c.r, c.r}, Bu.c, 1.25f, g.c, u.c, h.c, keep != 0);
      e.gpu->lora_swiglu_fwd({uz.g, 0, c.r}, Bg.g, 0.75f, {uz.g, c.r, c.r}, Bu.g, 1.25f, g.g, u.g, h.g, keep != 0);
      const std::string k = keep ? " keep_sums" : "";
      compare(e, "lora_swiglu_fwd h" + tag + k, h, 1e-4);
      if (keep) {
        compare(e, "lora_swiglu_fwd g" + tag + k, g, 1e-4);
        compare(e, "lora_swiglu_fwd u" + tag + k, u, 1e-4);
      }
      e.gpu->lora_up({uz.g, 0, c.r}, Bg.g, 0.75f, &g2, g2);
      e.gpu->lora_up({uz.g, c.r, c.r}, Bu.g, 1.25f, &u2, u2);
      e.gpu->swiglu_fwd(g2, u2, h2);
      const int64_t hbits = bit_mismatches(e, h.g, h2);
      EXPECT_EQ(hbits, 0) << "lora_swiglu_fwd" << tag << k << ": h vs lora_up x2 + swiglu_fwd";
      std::printf("  lora_swiglu_fwd%s%s vs lora_up x2 + swiglu_fwd on the GPU: %lld of %lld h differ in bits\n",
                  tag.c_str(), k.c_str(), static_cast<long long>(hbits), static_cast<long long>(h2.numel()));
    }
    Pair dh = e.in({c.T, c.N}, BF), dr = e.in({c.T, c.r}, BF, -0.5f, 0.5f), A = e.in({c.r, c.N}, BF, -0.5f, 0.5f);
    Pair g = gates(c), u = e.in({c.T, c.N}, BF, -2.f, 2.f);
    Pair dg = e.out_init({c.T, c.N}, BF, -1.f, 1.f, kGuard16), du = e.out_init({c.T, c.N}, BF, -1.f, 1.f, kGuard16);
    Tensor dh2 = e.gpu->alloc(dh.g.shape, BF), dg2 = e.gpu->alloc(dh.g.shape, BF), du2 = e.gpu->alloc(dh.g.shape, BF);
    e.gpu->copy(dh2, dh.g);
    e.cpu->lora_swiglu_bwd(dh.c, dr.c, A.c, g.c, u.c, dg.c, du.c, nullptr);
    e.gpu->lora_swiglu_bwd(dh.g, dr.g, A.g, g.g, u.g, dg.g, du.g, nullptr);
    compare(e, "lora_swiglu_bwd dg" + tag, dg, 1e-4);
    compare(e, "lora_swiglu_bwd du" + tag, du, 1e-4);
    e.gpu->gemm(dr.g, false, A.g, false, dh2, 1.f, 1.f);
    e.gpu->swiglu_bwd(dh2, g.g, u.g, dg2, du2);
    std::printf("  lora_swiglu_bwd%s vs gemm + swiglu_bwd on the GPU: %lld / %lld of %lld dg / du differ in bits\n",
                tag.c_str(), static_cast<long long>(bit_mismatches(e, dg.g, dg2)),
                static_cast<long long>(bit_mismatches(e, du.g, du2)), static_cast<long long>(dg2.numel()));
  }
  // The backward with the gate/up terms (g and u the base products, as lora_swiglu_fwd leaves them without
  // keep_sums): vs the F32 CPU, and on the GPU vs the sums formed by lora_up and the backward without terms (same
  // bits expected). After the cases above, so that their inputs stay as they were.
  for (const L& c : cases) {
    const std::string tag = tag_of(c);
    Pair dh = e.in({c.T, c.N}, BF), dr = e.in({c.T, c.r}, BF, -0.5f, 0.5f), A = e.in({c.r, c.N}, BF, -0.5f, 0.5f);
    Pair g = gates(c), u = e.in({c.T, c.N}, BF, -2.f, 2.f), uz = e.in({c.T, 2 * c.r}, BF);
    Pair Bg = e.in({c.N, c.r}, BF, -0.5f, 0.5f), Bu = e.in({c.N, c.r}, BF, -0.5f, 0.5f);
    Pair dg = e.out_init({c.T, c.N}, BF, -1.f, 1.f, kGuard16), du = e.out_init({c.T, c.N}, BF, -1.f, 1.f, kGuard16);
    Tensor dh2 = e.gpu->alloc(dh.g.shape, BF), gs = e.gpu->alloc(dh.g.shape, BF), us = e.gpu->alloc(dh.g.shape, BF);
    Tensor dg2 = e.gpu->alloc(dh.g.shape, BF), du2 = e.gpu->alloc(dh.g.shape, BF);
    e.gpu->copy(dh2, dh.g);
    const Backend::GateUpTerms tc{{uz.c, 0, c.r}, {uz.c, c.r, c.r}, Bg.c, Bu.c, 0.75f, 1.25f};
    const Backend::GateUpTerms tg{{uz.g, 0, c.r}, {uz.g, c.r, c.r}, Bg.g, Bu.g, 0.75f, 1.25f};
    e.cpu->lora_swiglu_bwd(dh.c, dr.c, A.c, g.c, u.c, dg.c, du.c, &tc);
    e.gpu->lora_swiglu_bwd(dh.g, dr.g, A.g, g.g, u.g, dg.g, du.g, &tg);
    compare(e, "lora_swiglu_bwd (gate/up terms) dg" + tag, dg, 1e-4);
    compare(e, "lora_swiglu_bwd (gate/up terms) du" + tag, du, 1e-4);
    e.gpu->lora_up(tg.ug, Bg.g, 0.75f, &g.g, gs);
    e.gpu->lora_up(tg.uu, Bu.g, 1.25f, &u.g, us);
    e.gpu->lora_swiglu_bwd(dh2, dr.g, A.g, gs, us, dg2, du2, nullptr);
    const int64_t gbits = bit_mismatches(e, dg.g, dg2), ubits = bit_mismatches(e, du.g, du2);
    EXPECT_EQ(gbits + ubits, 0) << "lora_swiglu_bwd (gate/up terms)" << tag << ": vs lora_up x2 + lora_swiglu_bwd";
    std::printf("  lora_swiglu_bwd (gate/up terms)%s vs lora_up x2 + lora_swiglu_bwd on the GPU: %lld / %lld of %lld "
                "dg / du differ in bits\n",
                tag.c_str(), static_cast<long long>(gbits), static_cast<long long>(ubits),
                static_cast<long long>(dg2.numel()));
  }
}

// ---- elementwise ----------------------------------------------------------------------------------------
void case_add_scale(Env& e) {
  Tensor hx = e.host_rand({1031}, BF, -2.f, 2.f);
  hx.ptr<float>()[3] = NAN;
  hx.ptr<float>()[700] = INFINITY;
  Pair x = e.from_host(hx, BF);
  Pair y = e.out_init({1031}, BF);
  e.cpu->add(y.c, x.c, 0.375f);
  e.gpu->add(y.g, x.g, 0.375f);
  compare(e, "add (with NaN/Inf)", y, 1e-5);
  Tensor hx8 = e.host_rand({1032}, BF, -2.f, 2.f);  // a multiple of 8: the 16-byte bf16 path
  hx8.ptr<float>()[5] = NAN;
  Pair x8 = e.from_host(hx8, BF);
  Pair y8 = e.out_init({1032}, BF);
  e.cpu->add(y8.c, x8.c, -0.625f);
  e.gpu->add(y8.g, x8.g, -0.625f);
  compare(e, "add (16-byte path, with NaN)", y8, 1e-5);
  Pair z = e.out_init({1031}, F32);
  e.cpu->scale(z.c, -1.75f);
  e.gpu->scale(z.g, -1.75f);
  compare(e, "scale", z, 1e-12);

  // copy_many: 70 pairs (two launches of 64) F32 -> BF16, BF16 -> F32, one same-type pair, one empty tensor;
  // each result equal to copy() of the same pair (whose conversion the fill_copy case checks against the host).
  std::vector<Tensor> srcs, many, one;
  std::vector<Backend::CopyPair> pairs;
  for (int i = 0; i < 70; ++i) {
    const int64_t n = i == 3 ? 0 : 1 + (i * 331) % 4099;
    const DType from = i % 2 ? BF : F32, to = i == 9 ? from : (i % 2 ? F32 : BF);
    srcs.push_back(e.gpu->upload(e.host_rand({n}, F32, -5.f, 5.f), from));
    many.push_back(e.gpu->alloc({n}, to));
    one.push_back(e.gpu->alloc({n}, to));
  }
  for (size_t i = 0; i < srcs.size(); ++i) {
    pairs.push_back({&many[i], &srcs[i]});
    e.gpu->copy(one[i], srcs[i]);
  }
  e.gpu->copy_many(pairs);
  for (size_t i = 0; i < srcs.size(); ++i)
    EXPECT_EQ(e.down(*e.gpu, many[i]), e.down(*e.gpu, one[i])) << "copy_many pair " << i;
  std::vector<Backend::CopyPair> cpu_pairs;  // the CPU's generic form runs too
  Tensor cs = e.cpu->upload(e.host_rand({33}, F32, -1.f, 1.f), F32), cd = e.cpu->alloc({33}, F32);
  cpu_pairs.push_back({&cd, &cs});
  e.cpu->copy_many(cpu_pairs);
  EXPECT_EQ(e.down(*e.cpu, cd), e.down(*e.cpu, cs));
}

void case_reductions(Env& e) {
  Pair x = e.in({4099}, BF, -3.f, 3.f);
  compare_scalar("sum_squares", e.gpu->sum_squares(x.g), e.cpu->sum_squares(x.c), 1e-6);
  EXPECT_TRUE(e.gpu->all_finite(x.g));
  Tensor h = e.host_rand({257}, F32, -1.f, 1.f);
  h.ptr<float>()[256] = INFINITY;
  EXPECT_FALSE(e.gpu->all_finite(e.gpu->upload(h, F32)));
  h.ptr<float>()[256] = 0.f;
  h.ptr<float>()[5] = NAN;
  EXPECT_FALSE(e.gpu->all_finite(e.gpu->upload(h, BF)));
  EXPECT_EQ(e.gpu->all_finite(e.gpu->upload(h, F32)), e.cpu->all_finite(e.cpu->upload(h, F32)));

  // The many-tensor forms: 130 tensors (two launches of 96), mixed dtypes and sizes, one empty.
  std::vector<Pair> xs;
  for (int i = 0; i < 130; ++i)
    xs.push_back(e.in({i == 7 ? 0 : 1 + (i * 397) % 5003}, i % 3 ? F32 : BF, -2.f, 2.f));
  std::vector<const Tensor*> gs, cs;
  for (const Pair& p : xs) {
    gs.push_back(&p.g);
    cs.push_back(&p.c);
  }
  compare_scalar("sum_squares_many", e.gpu->sum_squares_many(gs), e.cpu->sum_squares_many(cs), 1e-6);
  EXPECT_TRUE(e.gpu->all_finite_many(gs));
  EXPECT_TRUE(e.gpu->all_finite_many({}));
  EXPECT_EQ(e.gpu->sum_squares_many({}), 0.0);
  for (float bad : {NAN, INFINITY}) {  // in the second launch's range, last element of its tensor
    Tensor hb = e.host_rand({301}, F32, -1.f, 1.f);
    hb.ptr<float>()[300] = bad;
    Tensor gb = e.gpu->upload(hb, F32);
    std::vector<const Tensor*> with_bad = gs;
    with_bad.insert(with_bad.begin() + 110, &gb);
    EXPECT_FALSE(e.gpu->all_finite_many(with_bad));
    Tensor cb = e.cpu->upload(hb, F32);
    std::vector<const Tensor*> with_bad_cpu = cs;
    with_bad_cpu.insert(with_bad_cpu.begin() + 110, &cb);
    EXPECT_FALSE(e.cpu->all_finite_many(with_bad_cpu));
  }
  EXPECT_TRUE(e.cpu->all_finite_many(cs));
}

void case_dropout(Env& e) {
  // F32 on the GPU too, so the kept values and the mask must agree to the last bit or so.
  Pair x = e.in({2053}, F32, 0.5f, 1.5f);
  Pair y = e.out({2053}, F32);
  e.cpu->dropout(x.c, 0.3f, 987654321ull, y.c);
  e.gpu->dropout(x.g, 0.3f, 987654321ull, y.g);
  const std::vector<float> c = e.down(*e.cpu, y.c), g = e.down(*e.gpu, y.g);
  int64_t mask_diff = 0;
  for (size_t i = 0; i < c.size(); ++i) mask_diff += (c[i] == 0.f) != (g[i] == 0.f);
  EXPECT_EQ(mask_diff, 0) << "dropout masks differ";
  compare(e, "dropout p=0.3", y, 1e-12);
}

void case_activations(Env& e) {
  const Shape s{7, 149};
  Pair gate = e.in(s, BF, -4.f, 4.f), up = e.in(s, BF, -2.f, 2.f), dout = e.in(s, BF);
  Pair o = e.out(s, BF);
  e.cpu->swiglu_fwd(gate.c, up.c, o.c);
  e.gpu->swiglu_fwd(gate.g, up.g, o.g);
  compare(e, "swiglu_fwd", o, 1e-5);
  Pair dg = e.out(s, BF), du = e.out(s, BF);
  e.cpu->swiglu_bwd(dout.c, gate.c, up.c, dg.c, du.c);
  e.gpu->swiglu_bwd(dout.g, gate.g, up.g, dg.g, du.g);
  compare(e, "swiglu_bwd dgate", dg, 1e-5);
  compare(e, "swiglu_bwd dup", du, 1e-5);
  {  // 7 x 152: a multiple of 8 elements, so the 16-byte bf16 kernels run
    const Shape s8{7, 152};
    Pair g8 = e.in(s8, BF, -4.f, 4.f), u8 = e.in(s8, BF, -2.f, 2.f), d8 = e.in(s8, BF);
    Pair o8 = e.out(s8, BF), dg8 = e.out(s8, BF), du8 = e.out(s8, BF);
    e.cpu->swiglu_fwd(g8.c, u8.c, o8.c);
    e.gpu->swiglu_fwd(g8.g, u8.g, o8.g);
    compare(e, "swiglu_fwd (16-byte path)", o8, 1e-5);
    e.cpu->swiglu_bwd(d8.c, g8.c, u8.c, dg8.c, du8.c);
    e.gpu->swiglu_bwd(d8.g, g8.g, u8.g, dg8.g, du8.g);
    compare(e, "swiglu_bwd dgate (16-byte path)", dg8, 1e-5);
    compare(e, "swiglu_bwd dup (16-byte path)", du8, 1e-5);
    Pair so8 = e.out(s8, BF), dx8 = e.out(s8, BF), dgt8 = e.out(s8, BF);
    e.cpu->sigmoid_mul_fwd(u8.c, g8.c, so8.c);
    e.gpu->sigmoid_mul_fwd(u8.g, g8.g, so8.g);
    compare(e, "sigmoid_mul_fwd (16-byte path)", so8, 1e-5);
    e.cpu->sigmoid_mul_bwd(d8.c, u8.c, g8.c, dx8.c, dgt8.c);
    e.gpu->sigmoid_mul_bwd(d8.g, u8.g, g8.g, dx8.g, dgt8.g);
    compare(e, "sigmoid_mul_bwd dx (16-byte path)", dx8, 1e-5);
    compare(e, "sigmoid_mul_bwd dgate (16-byte path)", dgt8, 1e-5);
  }
  Pair so = e.out(s, BF);
  e.cpu->sigmoid_mul_fwd(up.c, gate.c, so.c);
  e.gpu->sigmoid_mul_fwd(up.g, gate.g, so.g);
  compare(e, "sigmoid_mul_fwd", so, 1e-5);
  Pair dx = e.out(s, BF), dgt = e.out(s, BF);
  e.cpu->sigmoid_mul_bwd(dout.c, up.c, gate.c, dx.c, dgt.c);
  e.gpu->sigmoid_mul_bwd(dout.g, up.g, gate.g, dx.g, dgt.g);
  compare(e, "sigmoid_mul_bwd dx", dx, 1e-5);
  compare(e, "sigmoid_mul_bwd dgate", dgt, 1e-5);
  Pair sg = e.out(s, F32);
  e.cpu->sigmoid(gate.c, sg.c);
  e.gpu->sigmoid(gate.g, sg.g);
  compare(e, "sigmoid", sg, 1e-10);
}

void case_embedding(Env& e) {
  Pair table = e.in({37, 13}, BF);
  std::vector<int32_t> ids = {0, 36, 5, 5, 17, 2, 36, 9, 11, 30, 1};
  Pair id = e.ints({11}, ids);
  Pair o = e.out({11, 13}, BF);
  e.cpu->embedding_fwd(id.c, table.c, o.c);
  e.gpu->embedding_fwd(id.g, table.g, o.g);
  compare(e, "embedding_fwd", o, 0);
}

// ---- norms ----------------------------------------------------------------------------------------------
void case_rmsnorm(Env& e) {
  // n % 8 == 0 runs the lane-group kernels (16 lanes for 24, 32 lanes with 1..16 chunks of 8 per lane, F32
  // weights at 2048); 13 and 1030 the one-block-per-row kernels. 21 rows: the last block is partly empty.
  for (int64_t n : {13, 24, 256, 1030, 2048, 4096})
    for (bool zc : {true, false}) {
      const int64_t rows = 21;
      Pair x = e.in({rows, n}, BF, -3.f, 3.f), w = e.in({n}, n == 2048 ? F32 : BF, -0.5f, 0.5f);
      Pair dy = e.in({rows, n}, BF);
      Pair y = e.out({rows, n}, BF), r = e.out({rows}, F32), dx = e.out({rows, n}, BF);
      e.cpu->rmsnorm_fwd(x.c, w.c, 1e-6f, zc, y.c, r.c);
      e.gpu->rmsnorm_fwd(x.g, w.g, 1e-6f, zc, y.g, r.g);
      const std::string tag = " n=" + std::to_string(n) + (zc ? " zero-centred" : " plain");
      compare(e, "rmsnorm_fwd y" + tag, y, 1e-5);
      compare(e, "rmsnorm_fwd rstd" + tag, r, 1e-10);
      e.cpu->rmsnorm_bwd(dy.c, x.c, w.c, r.c, zc, dx.c);
      e.gpu->rmsnorm_bwd(dy.g, x.g, w.g, r.g, zc, dx.g);
      compare(e, "rmsnorm_bwd dx" + tag, dx, 1e-5);
      // With the residual stream's gradient added: the fused kernel (bf16 rows of 8k <= 4096) gives the bits of
      // rmsnorm_bwd then add.
      Pair res = e.in({rows, n}, BF), dxr = e.out({rows, n}, BF);
      e.cpu->rmsnorm_bwd_add(dy.c, x.c, w.c, r.c, zc, res.c, dxr.c);
      e.gpu->rmsnorm_bwd_add(dy.g, x.g, w.g, r.g, zc, res.g, dxr.g);
      compare(e, "rmsnorm_bwd_add dx" + tag, dxr, 1e-5);
      e.gpu->add(dx.g, res.g, 1.f);
      EXPECT_EQ(host_to_f32(e.gpu->download(dxr.g, DType::BF16)), host_to_f32(e.gpu->download(dx.g, DType::BF16)))
          << "rmsnorm_bwd_add is not rmsnorm_bwd + add bit for bit" << tag;
    }
}

// The attention block's q and gate read, and their gradients written, in place in q_proj's [q | gate] rows (the
// *_cols ops) against the CPU's defaults (contiguous copies); the other half of each gradient row stays as it was.
// hd = 256 (the models' heads: the 16-byte row and gate kernels, F32 norm weight as uploaded) and 12 (the
// one-block-per-row norm kernels with a row stride, the gate through the default's copies).
void case_attn_cols(Env& e) {
  for (int64_t hd : {256, 12}) {
    const int64_t rows = 21;
    const std::string tag = " hd=" + std::to_string(hd);
    Pair qg = e.in({rows, 2 * hd}, BF, -3.f, 3.f), w = e.in({hd}, hd == 256 ? F32 : BF, -0.5f, 0.5f);
    Pair y = e.out({rows, hd}, BF), r = e.out({rows}, F32);
    e.cpu->rmsnorm_fwd_cols({qg.c, 0, hd}, w.c, 1e-6f, true, y.c, r.c);
    e.gpu->rmsnorm_fwd_cols({qg.g, 0, hd}, w.g, 1e-6f, true, y.g, r.g);
    compare(e, "rmsnorm_fwd_cols y" + tag, y, 1e-5);
    compare(e, "rmsnorm_fwd_cols rstd" + tag, r, 1e-10);
    Pair dy = e.in({rows, hd}, BF), dqg = e.out_init({rows, 2 * hd}, BF);
    e.cpu->rmsnorm_bwd_cols(dy.c, {qg.c, 0, hd}, w.c, r.c, true, {dqg.c, 0, hd});
    e.gpu->rmsnorm_bwd_cols(dy.g, {qg.g, 0, hd}, w.g, r.g, true, {dqg.g, 0, hd});
    compare(e, "rmsnorm_bwd_cols dx (gate half as it was)" + tag, dqg, 1e-5);
    Pair o = e.in({rows, hd}, BF, -2.f, 2.f), so = e.out({rows, hd}, BF);
    e.cpu->sigmoid_mul_fwd_cols(o.c, {qg.c, hd, hd}, so.c);
    e.gpu->sigmoid_mul_fwd_cols(o.g, {qg.g, hd, hd}, so.g);
    compare(e, "sigmoid_mul_fwd_cols" + tag, so, 1e-5);
    Pair dso = e.in({rows, hd}, BF), dx = e.out({rows, hd}, BF);
    e.cpu->sigmoid_mul_bwd_cols(dso.c, o.c, {qg.c, hd, hd}, dx.c, {dqg.c, hd, hd});
    e.gpu->sigmoid_mul_bwd_cols(dso.g, o.g, {qg.g, hd, hd}, dx.g, {dqg.g, hd, hd});
    compare(e, "sigmoid_mul_bwd_cols dx" + tag, dx, 1e-5);
    compare(e, "sigmoid_mul_bwd_cols dgate (dq half as it was)" + tag, dqg, 1e-5);
  }
}

// The vision tower's ops: LayerNorm (rows of the tower's widths: the tiny golden's 32, the 9B tower's 1152, the
// merger's 4·1152; F32 weight and bias as the tower uploads them), GELU (tanh and erf), 2-D RoPE.
void case_vision(Env& e) {
  for (int64_t n : {32, 1152, 4608}) {
    const int64_t rows = 13;
    Pair x = e.in({rows, n}, BF, -3.f, 3.f), w = e.in({n}, F32, 0.5f, 1.5f), b = e.in({n}, F32, -0.5f, 0.5f);
    Pair dy = e.in({rows, n}, BF);
    Pair y = e.out({rows, n}, BF), mean = e.out({rows}, F32), r = e.out({rows}, F32), dx = e.out({rows, n}, BF);
    e.cpu->layer_norm_fwd(x.c, w.c, b.c, 1e-6f, y.c, mean.c, r.c);
    e.gpu->layer_norm_fwd(x.g, w.g, b.g, 1e-6f, y.g, mean.g, r.g);
    const std::string tag = " n=" + std::to_string(n);
    compare(e, "layer_norm_fwd y" + tag, y, 1e-5);
    compare(e, "layer_norm_fwd mean" + tag, mean, 1e-10);
    compare(e, "layer_norm_fwd rstd" + tag, r, 1e-10);
    e.cpu->layer_norm_bwd(dy.c, x.c, w.c, mean.c, r.c, dx.c);
    e.gpu->layer_norm_bwd(dy.g, x.g, w.g, mean.g, r.g, dx.g);
    compare(e, "layer_norm_bwd dx" + tag, dx, 1e-5);
  }
  const Shape s{7, 149};
  Pair x = e.in(s, BF, -5.f, 5.f), dy = e.in(s, BF);
  for (bool tanh_approx : {true, false}) {
    const std::string tag = tanh_approx ? " tanh" : " erf";
    Pair y = e.out(s, BF), dx = e.out(s, BF);
    e.cpu->gelu_fwd(x.c, tanh_approx, y.c);
    e.gpu->gelu_fwd(x.g, tanh_approx, y.g);
    compare(e, "gelu_fwd" + tag, y, 1e-5);
    e.cpu->gelu_bwd(dy.c, x.c, tanh_approx, dx.c);
    e.gpu->gelu_bwd(dy.g, x.g, tanh_approx, dx.g);
    compare(e, "gelu_bwd" + tag, dx, 1e-5);
  }
  std::uniform_int_distribution<int32_t> u(0, 63);
  for (int64_t hd : {16, 72}) {
    std::vector<int32_t> pos2(2 * 41);
    for (auto& p : pos2) p = u(e.rng);
    Pair P2 = e.ints({2, 41}, pos2);
    for (bool inverse : {false, true}) {
      Pair xr = e.out_init({41, 3, hd}, BF, -2.f, 2.f);
      e.cpu->rope_2d(xr.c, P2.c, 1e4f, inverse);
      e.gpu->rope_2d(xr.g, P2.g, 1e4f, inverse);
      compare(e, std::string(inverse ? "rope_2d inverse" : "rope_2d") + " hd " + std::to_string(hd), xr, 1e-5);
    }
  }
}

void case_gated_rmsnorm(Env& e) {
  for (int64_t n : {12, 24, 128, 136}) {  // 12: one block per row; 24, 128: 16-lane groups; 136: 32 lanes
    const int64_t rows = 19;
    Pair x = e.in({rows, n}, BF, -2.f, 2.f), z = e.in({rows, n}, BF, -3.f, 3.f), w = e.in({n}, BF, 0.5f, 1.5f);
    Pair dy = e.in({rows, n}, BF);
    Pair y = e.out({rows, n}, BF), r = e.out({rows}, F32), dx = e.out({rows, n}, BF), dz = e.out({rows, n}, BF);
    e.cpu->gated_rmsnorm_fwd(x.c, z.c, w.c, 1e-6f, y.c, r.c);
    e.gpu->gated_rmsnorm_fwd(x.g, z.g, w.g, 1e-6f, y.g, r.g);
    const std::string tag = " n=" + std::to_string(n);
    compare(e, "gated_rmsnorm_fwd y" + tag, y, 1e-5);
    compare(e, "gated_rmsnorm_fwd rstd" + tag, r, 1e-10);
    e.cpu->gated_rmsnorm_bwd(dy.c, x.c, z.c, w.c, r.c, dx.c, dz.c);
    e.gpu->gated_rmsnorm_bwd(dy.g, x.g, z.g, w.g, r.g, dx.g, dz.g);
    compare(e, "gated_rmsnorm_bwd dx" + tag, dx, 1e-5);
    compare(e, "gated_rmsnorm_bwd dz" + tag, dz, 1e-5);
  }
}

// ---- RoPE -----------------------------------------------------------------------------------------------
void case_rope(Env& e) {
  std::vector<int32_t> pos(37);
  std::uniform_int_distribution<int32_t> u(0, 5000);
  for (auto& p : pos) p = u(e.rng);
  pos[0] = 0;
  Pair P = e.ints({37}, pos);
  for (bool inverse : {false, true}) {
    Pair x = e.out_init({37, 3, 256}, BF, -2.f, 2.f);
    e.cpu->rope(x.c, P.c, 64, 1e7f, inverse);
    e.gpu->rope(x.g, P.g, 64, 1e7f, inverse);
    compare(e, inverse ? "rope inverse (hd 256, rot 64)" : "rope (hd 256, rot 64)", x, 1e-5);
  }
  Pair x = e.out_init({37, 5, 40}, BF);
  e.cpu->rope(x.c, P.c, 40, 10000.f, false);
  e.gpu->rope(x.g, P.g, 40, 10000.f, false);
  compare(e, "rope (hd 40, full rotation)", x, 1e-5);

  // Multimodal RoPE (Qwen3.5's interleaved sections [11, 11, 10] over 32 slots): three different rows per token.
  std::vector<int32_t> pos3(3 * 37);
  for (auto& p : pos3) p = u(e.rng);
  Pair P3 = e.ints({3, 37}, pos3);
  for (bool inverse : {false, true}) {
    Pair xm = e.out_init({37, 3, 256}, BF, -2.f, 2.f);
    e.cpu->rope_multimodal(xm.c, P3.c, 64, 1e7f, {11, 11, 10}, inverse);
    e.gpu->rope_multimodal(xm.g, P3.g, 64, 1e7f, {11, 11, 10}, inverse);
    compare(e, inverse ? "rope_multimodal inverse (hd 256, rot 64)" : "rope_multimodal (hd 256, rot 64)", xm, 1e-5);
  }
}

// ---- attention ------------------------------------------------------------------------------------------
// BF16 q/k/v run the tensor-core kernels (bf16 operands incl. P and dS, fp32 accumulators) at head_dim 64, 96,
// 128 or 256, other head dims in (64, 256] zero-padded to the next of these; smaller head dims and F32/F16
// inputs run the fp32 FMA kernels. The same tolerances hold for both:
// o and the gradients are sums of many bf16-rounded terms (1e-4 forward, 5e-4 backward as above; measured
// ~1e-6..1e-5), lse is an fp32 statistic of exact bf16 products (1e-8).
void case_attention(Env& e) {
  struct A {
    int64_t nH, nKV;
    int hd;
    std::vector<int32_t> cu;
    DType dt = BF;
  };
  const std::vector<int32_t> awkward = {0, 1, 16, 80, 145, 345, 678};  // lengths 1, 15, 64, 65, 200, 333
  const A cases[] = {{4, 1, 256, {0, 17, 50, 51, 84}},  // GQA 4, head_dim 256, tiles just past 16/32
                     {6, 3, 64, {0, 5, 12, 25, 37}},    // GQA 2, several short sequences
                     {2, 2, 40, {0, 33}},               // MHA, head_dim 40 (FMA kernels)
                     {3, 1, 128, {0, 1, 66, 70}},       // GQA 3
                     {2, 1, 64, {0, 40, 100}, F32},     // F32 inputs (FMA kernels at a tensor-core head_dim)
                     {2, 1, 256, {0, 70, 150}, F32},    // FMA kernels at hd 256 (dK/dV walks 16-row steps)
                     // Tensor-core tiles are 64 tokens: sequences shorter than, equal to and just past one.
                     {2, 2, 64, awkward},   // MHA
                     {4, 2, 128, awkward},  // GQA 2
                     {4, 1, 256, awkward},  // GQA 4
                     {2, 1, 256, {0, 1024}},   // 16 diagonal and 120 full 64x64 tiles
                     {8, 2, 256, awkward},     // the 2B shape's heads (GQA 4, 2 kv heads), packed ragged
                     {8, 2, 256, {0, 130, 500}},  // ragged: 2 and 6 tiles, both ending mid-tile
                     // Packed (Hopper dK/dV: clusters of two key tiles of one sequence): 4 sequences of 4 tiles;
                     // 3, 3, 3 and 2 tiles (odd last tiles paired across sequences, an odd list).
                     {8, 2, 256, {0, 256, 512, 768, 1024}},
                     {16, 4, 256, {0, 192, 384, 576, 700}}};
  // Full attention (the vision tower: every key of the frame): the tiny golden's head_dim 16 (FMA kernels), the
  // 9B tower's 72 on the tensor cores (zero-padded to 96; one frame of a 512x512 image = 1024 patches), 64, and
  // F32 inputs on the FMA kernels.
  const A full[] = {{2, 2, 16, {0, 16, 80, 336}},
                    {2, 2, 72, {0, 1, 64, 65, 333}},
                    {3, 3, 72, {0, 1024, 1100}},
                    {2, 2, 64, awkward},
                    {4, 2, 256, awkward},  // hd 256 full attention (the Hopper forward's non-causal kernel)
                    {8, 2, 256, awkward},  // GQA 4 full attention (Hopper: the K/V-sharing cluster kernels)
                    {2, 2, 72, {0, 70, 150}, F32}};
  auto run = [&](const A& c, bool causal) {
    const int64_t T = c.cu.back();
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    sc.causal = sg.causal = causal;
    const float scale = 1.f / std::sqrt(float(c.hd));
    Pair q = e.in({T, c.nH, c.hd}, c.dt, -2.f, 2.f), k = e.in({T, c.nKV, c.hd}, c.dt, -2.f, 2.f),
         v = e.in({T, c.nKV, c.hd}, c.dt);
    // The tensor-core path needs 16-byte aligned inputs (else the FMA fallback runs silently).
    for (const Pair* p : {&q, &k, &v}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p->g.data) % 16, 0u);
    Pair o = e.out({T, c.nH, c.hd}, c.dt), lse = e.out({T, c.nH}, F32);
    e.cpu->attention_fwd(q.c, k.c, v.c, sc, scale, o.c, lse.c);
    e.gpu->attention_fwd(q.g, k.g, v.g, sg, scale, o.g, lse.g);
    std::ostringstream tag;
    tag << (causal ? "" : " full") << " nH=" << c.nH << " nKV=" << c.nKV << " hd=" << c.hd << " T=" << T << " " << dtype_name(c.dt);
    compare(e, "attention_fwd o" + tag.str(), o, 1e-4);
    compare(e, "attention_fwd lse" + tag.str(), lse, 1e-8);
    // Backward from the CPU's forward results (rounded to the GPU dtype for o) so only the backward is compared.
    Tensor oh = e.cpu->download(o.c, F32);
    Pair ob = e.from_host(c.dt == F32 ? oh : host_convert(host_convert(oh, c.dt), F32), c.dt);
    Pair lb = e.from_host(e.cpu->download(lse.c, F32), F32);
    Pair dout = e.in({T, c.nH, c.hd}, c.dt);
    Pair dq = e.out({T, c.nH, c.hd}, c.dt), dk = e.out({T, c.nKV, c.hd}, c.dt), dv = e.out({T, c.nKV, c.hd}, c.dt);
    e.cpu->attention_bwd(dout.c, q.c, k.c, v.c, ob.c, lb.c, sc, scale, dq.c, dk.c, dv.c);
    e.gpu->attention_bwd(dout.g, q.g, k.g, v.g, ob.g, lb.g, sg, scale, dq.g, dk.g, dv.g);
    compare(e, "attention_bwd dq" + tag.str(), dq, 5e-4);
    compare(e, "attention_bwd dk" + tag.str(), dk, 5e-4);
    compare(e, "attention_bwd dv" + tag.str(), dv, 5e-4);
  };
  for (const A& c : cases) run(c, true);
  for (const A& c : full) run(c, false);
}

// ---- GDN ------------------------------------------------------------------------------------------------
void case_conv(Env& e) {
  struct D {
    std::vector<int32_t> cu;
    int64_t C;
    int K;
  };
  // Sequence starts inside 64-token tiles, on their edges (63, 64, 65, 128) and spanning them; more channels
  // than one block; K = 3 takes the per-element kernels (the tiled ones are built for K = 4). C % 8 == 0
  // takes the bf16 forward tiles and the row-piece backward (conv_rows.cuh: 8-token runs, with and without a
  // sequence start or the end of T among a run's rows: starts on 31, 32, 33, 64 and several inside one run,
  // T = 90 and 161; 1032 channels = several blocks, parts of 344); other C the walking ones.
  const D cases[] = {{{0, 1, 3, 8, 19, 90}, 13, 4},
                     {{0, 63, 64, 65, 128, 200}, 300, 4},
                     {{0, 5, 77}, 9, 3},
                     {{0, 1, 3, 8, 19, 90}, 16, 4},
                     {{0, 31, 32, 33, 64, 100, 161}, 1032, 4}};
  for (const D& c : cases) {
    const int64_t T = c.cu.back();
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    Pair x = e.in({T, c.C}, BF, -2.f, 2.f), w = e.in({c.C, c.K}, BF), dy = e.in({T, c.C}, BF);
    Pair y = e.out({T, c.C}, BF), dx = e.out({T, c.C}, BF);
    const std::string tag = " T=" + std::to_string(T) + " C=" + std::to_string(c.C) + " K=" + std::to_string(c.K);
    e.cpu->conv1d_silu_fwd(x.c, w.c, sc, y.c);
    e.gpu->conv1d_silu_fwd(x.g, w.g, sg, y.g);
    compare(e, "conv1d_silu_fwd" + tag, y, 1e-5);
    e.cpu->conv1d_silu_bwd(dy.c, x.c, w.c, sc, dx.c);
    e.gpu->conv1d_silu_bwd(dy.g, x.g, w.g, sg, dx.g);
    compare(e, "conv1d_silu_bwd" + tag, dx, 1e-5);
    // The output (input gradient) as separate column blocks (the GDN layer's q | k | v): widths that keep the
    // 8-channel backward where C % 8 == 0.
    std::vector<int64_t> widths;
    const int64_t unit = c.C % 8 == 0 ? 8 : 1, units = c.C / unit;
    for (int64_t u0 = 0, i = 0; u0 < units; ++i) {
      const int64_t n = i == 2 ? units - u0 : std::max<int64_t>(1, units / 3);
      widths.push_back(n * unit);
      u0 += n;
    }
    std::vector<Pair> ys, dys;
    for (int64_t wd : widths) ys.push_back(e.out({T, wd}, BF));
    std::vector<Tensor*> yc, yg;
    for (Pair& p : ys) yc.push_back(&p.c), yg.push_back(&p.g);
    e.cpu->conv1d_silu_fwd_split(x.c, w.c, sc, yc);
    e.gpu->conv1d_silu_fwd_split(x.g, w.g, sg, yg);
    int64_t c0 = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      const std::string pt = tag + " part " + std::to_string(i) + " cols " + std::to_string(c0) + "+" +
                             std::to_string(widths[i]);
      compare(e, "conv1d_silu_fwd_split" + pt, ys[i], 1e-5);
      // The part's gradient: the same columns of dy.
      dys.push_back(e.out({T, widths[i]}, BF));
      e.cpu->copy_cols(dys.back().c, 0, dy.c, c0, widths[i]);
      e.gpu->copy_cols(dys.back().g, 0, dy.g, c0, widths[i]);
      c0 += widths[i];
    }
    std::vector<const Tensor*> dyc, dyg;
    for (const Pair& p : dys) dyc.push_back(&p.c), dyg.push_back(&p.g);
    Pair dx2 = e.out({T, c.C}, BF);
    e.cpu->conv1d_silu_bwd_split(dyc, x.c, w.c, sc, dx2.c);
    e.gpu->conv1d_silu_bwd_split(dyg, x.g, w.g, sg, dx2.g);
    compare(e, "conv1d_silu_bwd_split" + tag + " parts " + std::to_string(widths.size()), dx2, 1e-5);
  }
}

void case_gates(Env& e) {
  const int64_t T = 19, HV = 5;
  Pair a = e.in({T, HV}, BF, -6.f, 25.f), b = e.in({T, HV}, BF, -4.f, 4.f);
  Pair A_log = e.in({HV}, F32, 0.f, 2.7f), dt = e.in({HV}, F32, -1.f, 1.f);
  Pair g = e.out({T, HV}, F32), beta = e.out({T, HV}, BF);
  e.cpu->gdn_gates_fwd(a.c, b.c, A_log.c, dt.c, g.c, beta.c);
  e.gpu->gdn_gates_fwd(a.g, b.g, A_log.g, dt.g, g.g, beta.g);
  compare(e, "gdn_gates_fwd g", g, 1e-10);
  compare(e, "gdn_gates_fwd beta", beta, 1e-5);
  Pair dg = e.in({T, HV}, F32), db = e.in({T, HV}, BF);
  Pair da = e.out({T, HV}, BF), dbb = e.out({T, HV}, BF);
  e.cpu->gdn_gates_bwd(dg.c, db.c, a.c, b.c, A_log.c, dt.c, da.c, dbb.c);
  e.gpu->gdn_gates_bwd(dg.g, db.g, a.g, b.g, A_log.g, dt.g, da.g, dbb.g);
  compare(e, "gdn_gates_bwd da", da, 1e-5);
  compare(e, "gdn_gates_bwd db", dbb, 1e-5);
}

// The five gradients of a GDN backward (dq, dk, dv and the two gate gradients, named in `gate_names`).
void compare_gdn_grads(Env& e, const std::string& op, const std::string& tag, const Pair& dq, const Pair& dk,
                       const Pair& dv, const Pair& dg, const Pair& db, const char* const (&gate_names)[2],
                       double dg_tol = 5e-4) {
  compare(e, op + " dq" + tag, dq, 5e-4);
  compare(e, op + " dk" + tag, dk, 5e-4);
  compare(e, op + " dv" + tag, dv, 5e-4);
  compare(e, op + " " + gate_names[0] + tag, dg, dg_tol);
  compare(e, op + " " + gate_names[1] + tag, db, 5e-4);
}
constexpr const char* kDgDbeta[2] = {"dg", "dbeta"};

void case_gdn(Env& e) {
  struct D {
    int64_t HK, HV;
    int dk, dv;
    std::vector<int32_t> cu;
    float g_lo = -2.f, b_lo = 0.05f, b_hi = 1.f;
  };
  std::vector<int32_t> many{0};  // a row of many short sequences (1..97 tokens), 1500 tokens in all
  for (int32_t len = 1; many.back() + len <= 1500; len = len % 97 + 7) many.push_back(many.back() + len);
  const D cases[] = {{2, 4, 128, 128, {0, 70, 75, 150}},            // Qwen3.5 head dims, GVA 2, chunk 64 + partial
                     {1, 3, 16, 24, {0, 9, 73}},                     // small dims, GVA 3
                     {1, 3, 128, 128, {0, 100, 230}},                // GVA 3 at the Hopper kernels' head dims
                     {2, 2, 32, 32, {0, 1, 2, 131}},                 // GVA 1, length-1 sequences
                     {1, 4, 128, 128, many},                          // GVA 4, many short sequences
                     {2, 2, 64, 96, {0, 200}, -12.f},                // strongly decaying gates (g down to -12)
                     {1, 1, 128, 128, {0, 129}, -1.f, 0.f, 0.02f},   // β near 0
                     {1, 2, 128, 128, {0, 190}, -1.f, 0.98f, 1.f},   // β near 1
                     {1, 2, 128, 128, {0, 8192}, -1.f},              // one long sequence (8K)
                     {16, 32, 128, 128, {0, 300, 557}},              // 9B's heads, 2 sequences: wide scan tiles
                     {9, 36, 128, 128, {0, 600}, -1.f},               // 36 pairs, 10 chunks: the Hopper reverse
                                                                      // scan with TMA tiles, its ring wrapping
                     {17, 68, 128, 128, {0, 540}, -1.f}};             // 68 pairs: its 128-column TMA tiles
                                                                      // (more than one wave of 64 columns)
  for (const D& c : cases) {
    const int64_t T = c.cu.back();
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    const float scale = 1.f / std::sqrt(float(c.dk));
    Pair q = e.in({T, c.HK, c.dk}, BF, -1.f, 1.f), k = e.in({T, c.HK, c.dk}, BF, -1.f, 1.f);
    Pair v = e.in({T, c.HV, c.dv}, BF, -1.f, 1.f);
    Pair g = e.in({T, c.HV}, F32, c.g_lo, 0.f), beta = e.in({T, c.HV}, BF, c.b_lo, c.b_hi);
    Pair o = e.out({T, c.HV, c.dv}, BF);
    e.cpu->gdn_fwd(q.c, k.c, v.c, g.c, beta.c, sc, scale, o.c);
    e.gpu->gdn_fwd(q.g, k.g, v.g, g.g, beta.g, sg, scale, o.g);
    std::ostringstream tag;
    tag << " HK=" << c.HK << " HV=" << c.HV << " dk=" << c.dk << " dv=" << c.dv << " T=" << T << " seqs="
        << c.cu.size() - 1 << " g>=" << c.g_lo << " beta in [" << c.b_lo << "," << c.b_hi << "]";
    compare(e, "gdn_fwd o" + tag.str(), o, 1e-4);
    Pair dout = e.in({T, c.HV, c.dv}, BF);
    Pair dq = e.out({T, c.HK, c.dk}, BF), dk = e.out({T, c.HK, c.dk}, BF), dv = e.out({T, c.HV, c.dv}, BF);
    Pair dg = e.out({T, c.HV}, F32), db = e.out({T, c.HV}, BF);
    e.cpu->gdn_bwd(dout.c, q.c, k.c, v.c, g.c, beta.c, sc, scale, dq.c, dk.c, dv.c, dg.c, db.c);
    e.gpu->gdn_bwd(dout.g, q.g, k.g, v.g, g.g, beta.g, sg, scale, dq.g, dk.g, dv.g, dg.g, db.g);
    compare_gdn_grads(e, "gdn_bwd", tag.str(), dq, dk, dv, dg, db, kDgDbeta);
    // The 8K and 68-pair cases run only the plain pair: the keep modes and the gated pair run the same scans
    // and cost most of the CPU op's time (the 68-pair case with all of them: 22.7 s on the H200 machine, where
    // all passed, session 24).
    if (c.cu.back() > 2000 || c.HV > 64) continue;
    // The pair that keeps the forward's chunk quantities for the backward (All: gradient checkpointing's
    // recompute; States: only the chunk-start states, for layers not checkpointed): the same results as the
    // plain pair (the CPU backend keeps nothing and recomputes).
    auto keep_pair = [&](Backend::GdnKeep what, const std::string& kt) {
      Pair o2 = e.out({T, c.HV, c.dv}, BF);
      Pair dq2 = e.out({T, c.HK, c.dk}, BF), dk2 = e.out({T, c.HK, c.dk}, BF), dv2 = e.out({T, c.HV, c.dv}, BF);
      Pair dg2 = e.out({T, c.HV}, F32), db2 = e.out({T, c.HV}, BF);
      auto kc = e.cpu->gdn_fwd_keep(q.c, k.c, v.c, g.c, beta.c, sc, scale, o2.c, what);
      auto kg = e.gpu->gdn_fwd_keep(q.g, k.g, v.g, g.g, beta.g, sg, scale, o2.g, what);
      EXPECT_EQ(kc, nullptr);
      compare(e, "gdn_fwd_keep o" + kt + tag.str(), o2, 1e-4);
      e.cpu->gdn_bwd_saved(kc.get(), dout.c, q.c, k.c, v.c, g.c, beta.c, sc, scale, dq2.c, dk2.c, dv2.c, dg2.c,
                           db2.c);
      e.gpu->gdn_bwd_saved(kg.get(), dout.g, q.g, k.g, v.g, g.g, beta.g, sg, scale, dq2.g, dk2.g, dv2.g, dg2.g,
                           db2.g);
      compare_gdn_grads(e, "gdn_bwd_saved", kt + tag.str(), dq2, dk2, dv2, dg2, db2, kDgDbeta);
    };
    keep_pair(Backend::GdnKeep::All, " keep all");
    keep_pair(Backend::GdnKeep::States, " keep states");
    // The gate inputs in place of g and β (the tensor-core path forms the gates while loading and its WY
    // backward writes da, db; other paths compose the gate ops), each keep mode.
    Pair a = e.in({T, c.HV}, BF, -6.f, 6.f), bl = e.in({T, c.HV}, BF, -4.f, 4.f);
    Pair A_log = e.in({c.HV}, F32, -1.f, 1.5f), dt = e.in({c.HV}, F32, -1.f, 1.f);
    const Backend::GdnGateInputs gin_c{a.c, bl.c, A_log.c, dt.c}, gin_g{a.g, bl.g, A_log.g, dt.g};
    using Keep = std::optional<Backend::GdnKeep>;
    for (Keep keep : {Keep{}, Keep{Backend::GdnKeep::All}, Keep{Backend::GdnKeep::States}}) {
      const std::string kt = std::string(" gated") + (!keep                            ? ""
                                                      : *keep == Backend::GdnKeep::All ? " keep all"
                                                                                       : " keep states");
      Pair o4 = e.out({T, c.HV, c.dv}, BF);
      Pair dq4 = e.out({T, c.HK, c.dk}, BF), dk4 = e.out({T, c.HK, c.dk}, BF),
           dv4 = e.out({T, c.HV, c.dv}, BF);
      Pair da4 = e.out({T, c.HV}, BF), db4 = e.out({T, c.HV}, BF);
      auto kc = e.cpu->gdn_gated_fwd(q.c, k.c, v.c, gin_c, sc, scale, o4.c, keep);
      auto kg = e.gpu->gdn_gated_fwd(q.g, k.g, v.g, gin_g, sg, scale, o4.g, keep);
      compare(e, "gdn_gated_fwd o" + kt + tag.str(), o4, 1e-4);
      e.cpu->gdn_gated_bwd(kc.get(), dout.c, q.c, k.c, v.c, gin_c, sc, scale, dq4.c, dk4.c, dv4.c, da4.c,
                           db4.c);
      e.gpu->gdn_gated_bwd(kg.get(), dout.g, q.g, k.g, v.g, gin_g, sg, scale, dq4.g, dk4.g, dv4.g, da4.g,
                           db4.g);
      compare_gdn_grads(e, "gdn_gated_bwd", kt + tag.str(), dq4, dk4, dv4, da4, db4, {"da", "db"});
    }
  }
}

// ---- generation: state carried between calls -----------------------------------------------------------
// The decode ops read and leave per-sequence state; the model keeps the conv history and the KV cache in BF16
// (its compute dtype) and the delta-rule state in F32, as here. Tolerances:
//  - conv1d_silu_step y: the conv class (1e-5, one BF16 rounding of a K-term fp32 sum); the history it leaves
//    is a copy of BF16 inputs: exact (0)
//  - kv_cache_write: copies: exact (0), rows not written keep their values
//  - gdn_recurrent o, attention_cached o: reductions of many terms into BF16 (1e-4, as gdn_fwd and
//    attention_fwd); the F32 delta-rule state: fp32 on both sides with the same per-token order of updates,
//    only the sums' order differs (1e-8, the F32-statistics class)
//  - gdn_prefill: o as gdn_fwd (1e-4, the same chunked kernels); its final state starts from the chunked
//    scan's BF16 chunk-start state (tensor-core path) and continues in fp32: the BF16 class (1e-5)
// A layout whose sequence n continues at position start[n] (tokens already in the state come first).
SeqLayout continued_layout(Backend& b, const std::vector<int32_t>& cu, const std::vector<int32_t>& start) {
  SeqLayout s;
  s.host_cu_seqlens = cu;
  s.cu_seqlens = b.upload_i32(cu);
  std::vector<int32_t> pos;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int32_t t = cu[n]; t < cu[n + 1]; ++t) pos.push_back(start[n] + t - cu[n]);
    s.max_seqlen = std::max(s.max_seqlen, cu[n + 1] - cu[n]);
  }
  s.positions = b.upload_i32(pos);
  return s;
}

void case_decode_conv(Env& e) {
  struct D {
    std::vector<int32_t> cu;  // new tokens per sequence: fewer than K-1 (history partly kept), more, one
    int64_t C;
    int K;
  };
  const D cases[] = {{{0, 1, 3, 8, 9}, 300, 4}, {{0, 1, 2, 3, 4, 5, 6, 7, 8}, 6144, 4}, {{0, 2, 9}, 13, 3}};
  for (const D& c : cases) {
    const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    Pair w = e.in({c.C, c.K}, BF);
    Pair state = e.out_init({N, c.K - 1, c.C}, BF, -2.f, 2.f);  // the history of earlier calls
    const std::string tag = " T=" + std::to_string(T) + " N=" + std::to_string(N) + " C=" + std::to_string(c.C) +
                            " K=" + std::to_string(c.K);
    for (int call = 0; call < 2; ++call) {  // the second call continues from what the first left
      Pair x = e.in({T, c.C}, BF, -2.f, 2.f), y = e.out({T, c.C}, BF);
      e.cpu->conv1d_silu_step(x.c, w.c, sc, state.c, y.c);
      e.gpu->conv1d_silu_step(x.g, w.g, sg, state.g, y.g);
      const std::string ct = tag + " call " + std::to_string(call + 1);
      compare(e, "conv1d_silu_step y" + ct, y, 1e-5);
      compare(e, "conv1d_silu_step history" + ct, state, 0);
    }
  }
}

void case_decode_gdn(Env& e) {
  struct D {
    int64_t HK, HV;
    int dk, dv;
    std::vector<int32_t> cu;
  };
  const D cases[] = {{2, 4, 128, 128, {0, 1, 2, 40}},         // Qwen3.5 head dims, GVA 2; decode steps and a chunk
                     {1, 3, 16, 24, {0, 5, 6, 70}},           // small dims, dv not a multiple of 16 columns
                     {16, 32, 128, 128, {0, 1, 2, 3, 4}},     // 9B's heads, one token for each of 4 sequences
                     {1, 2, 256, 64, {0, 3}}};                // the kernel's largest dk
  for (const D& c : cases) {
    const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    const float scale = 1.f / std::sqrt(float(c.dk));
    Pair state = e.out_init({N, c.HV, c.dk, c.dv}, F32, -0.5f, 0.5f);  // a state left by earlier tokens
    std::ostringstream tag;
    tag << " HK=" << c.HK << " HV=" << c.HV << " dk=" << c.dk << " dv=" << c.dv << " T=" << T << " seqs=" << N;
    for (int call = 0; call < 2; ++call) {
      Pair q = e.in({T, c.HK, c.dk}, BF), k = e.in({T, c.HK, c.dk}, BF), v = e.in({T, c.HV, c.dv}, BF);
      Pair g = e.in({T, c.HV}, F32, -2.f, 0.f), beta = e.in({T, c.HV}, F32, 0.05f, 1.f);
      Pair o = e.out({T, c.HV, c.dv}, BF);
      e.cpu->gdn_recurrent(q.c, k.c, v.c, g.c, beta.c, sc, scale, state.c, o.c);
      e.gpu->gdn_recurrent(q.g, k.g, v.g, g.g, beta.g, sg, scale, state.g, o.g);
      const std::string ct = tag.str() + " call " + std::to_string(call + 1);
      compare(e, "gdn_recurrent o" + ct, o, 1e-4);
      compare(e, "gdn_recurrent state" + ct, state, 1e-8);
    }
  }
}

void case_decode_prefill(Env& e) {
  struct D {
    int64_t HK, HV;
    int dk, dv;
    std::vector<int32_t> cu;  // lengths around the 64-token chunks: 1, 63, 64, 65, 130, a 1,024-token prompt
  };
  const D cases[] = {{2, 4, 128, 128, {0, 1, 64, 128, 193, 323}},
                     {1, 2, 128, 128, {0, 1024}},
                     {1, 3, 16, 24, {0, 9, 73}}};
  for (const D& c : cases) {
    const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
    SeqLayout sc = e.layout(*e.cpu, c.cu), sg = e.layout(*e.gpu, c.cu);
    const float scale = 1.f / std::sqrt(float(c.dk));
    Pair q = e.in({T, c.HK, c.dk}, BF), k = e.in({T, c.HK, c.dk}, BF), v = e.in({T, c.HV, c.dv}, BF);
    Pair g = e.in({T, c.HV}, F32, -1.f, 0.f), beta = e.in({T, c.HV}, F32, 0.05f, 1.f);
    Pair o = e.out({T, c.HV, c.dv}, BF), state = e.out({N, c.HV, c.dk, c.dv}, F32);
    e.cpu->gdn_prefill(q.c, k.c, v.c, g.c, beta.c, sc, scale, state.c, o.c);
    e.gpu->gdn_prefill(q.g, k.g, v.g, g.g, beta.g, sg, scale, state.g, o.g);
    std::ostringstream tag;
    tag << " HK=" << c.HK << " HV=" << c.HV << " dk=" << c.dk << " dv=" << c.dv << " T=" << T << " seqs=" << N;
    compare(e, "gdn_prefill o" + tag.str(), o, 1e-4);
    compare(e, "gdn_prefill state" + tag.str(), state, 1e-5);
    // A decode step continues from it.
    std::vector<int32_t> one(static_cast<size_t>(N + 1));
    for (int64_t n = 0; n <= N; ++n) one[static_cast<size_t>(n)] = static_cast<int32_t>(n);
    SeqLayout s1c = e.layout(*e.cpu, one), s1g = e.layout(*e.gpu, one);
    Pair q1 = e.in({N, c.HK, c.dk}, BF), k1 = e.in({N, c.HK, c.dk}, BF), v1 = e.in({N, c.HV, c.dv}, BF);
    Pair g1 = e.in({N, c.HV}, F32, -1.f, 0.f), b1 = e.in({N, c.HV}, F32, 0.05f, 1.f);
    Pair o1 = e.out({N, c.HV, c.dv}, BF);
    e.cpu->gdn_recurrent(q1.c, k1.c, v1.c, g1.c, b1.c, s1c, scale, state.c, o1.c);
    e.gpu->gdn_recurrent(q1.g, k1.g, v1.g, g1.g, b1.g, s1g, scale, state.g, o1.g);
    compare(e, "gdn_recurrent after gdn_prefill o" + tag.str(), o1, 1e-4);
  }
}

void case_decode_kv(Env& e) {
  struct D {
    int64_t nH, nKV;
    int hd;
    int64_t L;
    std::vector<int32_t> cu, start;  // new tokens per sequence and the position each continues at
  };
  const D cases[] = {{8, 2, 256, 300, {0, 1, 2, 40, 41}, {0, 299, 17, 150}},  // Qwen3.5 0.8b/2b attention heads
                     {6, 3, 64, 70, {0, 5, 6}, {64, 0}},
                     {16, 4, 256, 1100, {0, 1, 2}, {1024, 3}},                // a 1,024-token prompt's cache
                     {2, 2, 40, 33, {0, 33}, {0}}};                          // head_dim not a multiple of 32
  for (const D& c : cases) {
    const int64_t T = c.cu.back(), N = static_cast<int64_t>(c.cu.size()) - 1;
    const SeqLayout sc = continued_layout(*e.cpu, c.cu, c.start), sg = continued_layout(*e.gpu, c.cu, c.start);
    Pair kc = e.out_init({N, c.L, c.nKV, c.hd}, BF, -2.f, 2.f), vc = e.out_init({N, c.L, c.nKV, c.hd}, BF);
    Pair k = e.in({T, c.nKV, c.hd}, BF, -2.f, 2.f), v = e.in({T, c.nKV, c.hd}, BF);
    std::ostringstream tag;
    tag << " nH=" << c.nH << " nKV=" << c.nKV << " hd=" << c.hd << " L=" << c.L << " T=" << T << " seqs=" << N;
    e.cpu->kv_cache_write(k.c, v.c, sc, kc.c, vc.c);
    e.gpu->kv_cache_write(k.g, v.g, sg, kc.g, vc.g);
    compare(e, "kv_cache_write k_cache" + tag.str(), kc, 0);
    compare(e, "kv_cache_write v_cache" + tag.str(), vc, 0);
    Pair q = e.in({T, c.nH, c.hd}, BF, -2.f, 2.f), o = e.out({T, c.nH, c.hd}, BF);
    const float scale = 1.f / std::sqrt(float(c.hd));
    e.cpu->attention_cached(q.c, kc.c, vc.c, sc, scale, o.c);
    e.gpu->attention_cached(q.g, kc.g, vc.g, sg, scale, o.g);
    compare(e, "attention_cached o" + tag.str(), o, 1e-4);
  }
}

// A recorded step (the decode step's CUDA graph): ops recorded once on fixed tensors, replayed after their inputs
// were rewritten with write_i32, give what running the ops gives. The CPU backend records nothing.
void case_recording(Env& e) {
  EXPECT_FALSE(e.cpu->begin_capture());
  EXPECT_EQ(e.cpu->end_capture(), nullptr);
  Pair table = e.in({50, 24}, BF);
  Pair ids = e.ints({6}, {0, 1, 2, 3, 4, 5});
  Pair x = e.out({6, 24}, BF), y = e.out({6, 24}, BF), w = e.in({24}, BF, 0.5f, 1.5f), r = e.out({6}, F32);
  ASSERT_TRUE(e.gpu->begin_capture()) << "the CUDA backend could not start recording";
  e.gpu->embedding_fwd(ids.g, table.g, x.g);
  e.gpu->rmsnorm_fwd(x.g, w.g, 1e-6f, true, y.g, r.g);
  std::unique_ptr<Backend::Recording> rec = e.gpu->end_capture();
  ASSERT_NE(rec, nullptr) << "recording failed";
  for (const std::vector<int32_t>& step : {std::vector<int32_t>{7, 49, 0, 3, 3, 12}, {1, 2, 3, 4, 5, 6}}) {
    e.gpu->write_i32(ids.g, step);
    e.cpu->write_i32(ids.c, step);
    e.gpu->replay(*rec);
    e.cpu->embedding_fwd(ids.c, table.c, x.c);
    e.cpu->rmsnorm_fwd(x.c, w.c, 1e-6f, true, y.c, r.c);
    EXPECT_EQ(host_to_f32(e.gpu->download(ids.g, DType::I32)), host_to_f32(e.cpu->download(ids.c, DType::I32)))
        << "write_i32";
    compare(e, "replay: embedding_fwd", x, 0);
    compare(e, "replay: rmsnorm_fwd", y, 1e-5);
  }
  // A training step's recording: a scratch tensor allocated while recording comes from the recording's pool and
  // still holds its values at every replay; a host upload while recording is refused and fails the recording.
  EXPECT_FALSE(e.cpu->begin_step_capture());
  ASSERT_TRUE(e.gpu->begin_step_capture()) << "the CUDA backend could not start a step recording";
  {
    Tensor scratch = e.gpu->alloc({6, 24}, DType::BF16);
    e.gpu->embedding_fwd(ids.g, table.g, scratch);
    e.gpu->rmsnorm_fwd(scratch, w.g, 1e-6f, true, y.g, r.g);
  }
  rec = e.gpu->end_capture();
  ASSERT_NE(rec, nullptr) << "step recording failed";
  for (const std::vector<int32_t>& step : {std::vector<int32_t>{9, 8, 7, 6, 5, 4}, {0, 0, 1, 1, 2, 2}}) {
    e.gpu->write_i32(ids.g, step);
    e.cpu->write_i32(ids.c, step);
    Tensor other = e.gpu->zeros({6, 24}, DType::BF16);  // outside the pool: must not be handed the scratch block
    e.gpu->replay(*rec);
    e.cpu->embedding_fwd(ids.c, table.c, x.c);
    e.cpu->rmsnorm_fwd(x.c, w.c, 1e-6f, true, y.c, r.c);
    compare(e, "step replay: rmsnorm_fwd", y, 1e-5);
    EXPECT_EQ(host_to_f32(e.gpu->download(other, DType::BF16)), std::vector<float>(6 * 24, 0.f));
  }
  ASSERT_TRUE(e.gpu->begin_step_capture());
  EXPECT_THROW(e.gpu->upload_i32({1, 2, 3}), Error);
  EXPECT_EQ(e.gpu->end_capture(), nullptr) << "a recording with a refused upload must fail";
  // Allocator statistics as op by op: a pool block counts while a tensor holds it, not while the pool keeps it.
  const int64_t before = e.gpu->memory_stats().allocated_bytes;
  ASSERT_TRUE(e.gpu->begin_step_capture());
  {
    Tensor scratch = e.gpu->alloc({1 << 20}, DType::F32);
    e.gpu->fill(scratch, 0.f);
  }
  rec = e.gpu->end_capture();
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(e.gpu->memory_stats().allocated_bytes, before);
}

// A data-parallel job of one worker: the CUDA backend's reducer (NCCL) sums and broadcasts over that one rank,
// leaving the tensor as it was (exact); the CPU backend has none (its jobs sum through the host connections).
void case_gradient_reducer(Env& e) {
  ReducerSetup setup;
  setup.share_from_rank0 = [](const std::string& bytes) { return bytes; };
  setup.peer_fault = [] { return std::string(); };
  setup.timeout_s = 60;
  EXPECT_EQ(e.cpu->create_gradient_reducer(setup), nullptr);
  std::unique_ptr<GradientReducer> red = e.gpu->create_gradient_reducer(setup);
  if (!red) GTEST_SKIP() << "this build has no NCCL";
  Pair t = e.in({4099}, F32, -3.f, 3.f);
  const std::vector<float> before = e.down(*e.gpu, t.g);
  red->start_sum(t.g);
  red->finish();
  EXPECT_EQ(e.down(*e.gpu, t.g), before) << "a one-rank sum changed the tensor";
  red->broadcast(t.g);
  red->finish();
  EXPECT_EQ(e.down(*e.gpu, t.g), before) << "a one-rank broadcast changed the tensor";
}

// A sharded job of one worker: the CUDA backend's all-gather (NCCL) of one rank's shard gives that shard back
// (exact); the CPU backend has none (its jobs gather through the host connections).
void case_shard_gatherer(Env& e) {
  ReducerSetup setup;
  setup.share_from_rank0 = [](const std::string& bytes) { return bytes; };
  setup.peer_fault = [] { return std::string(); };
  setup.timeout_s = 60;
  EXPECT_EQ(e.cpu->create_shard_gatherer(setup), nullptr);
  std::unique_ptr<ShardGatherer> gather = e.gpu->create_shard_gatherer(setup);
  if (!gather) GTEST_SKIP() << "this build has no NCCL";
  EXPECT_EQ(gather->world(), 1);
  Pair shard = e.in({1027}, F32, -3.f, 3.f);
  Pair full = e.out({1027}, F32);
  gather->ready(gather->start_all_gather(shard.g.data, full.g.data, 1027 * sizeof(float)));
  EXPECT_EQ(e.down(*e.gpu, full.g), e.down(*e.gpu, shard.g)) << "a one-rank all-gather changed the bytes";
}

// An expert-parallel job of one worker: the CUDA backend's token exchange (NCCL send/recv) gathers this rank's
// counts and sends its rows to itself (exact); the CPU backend has none (its jobs exchange through the host).
void case_token_exchange(Env& e) {
  ReducerSetup setup;
  setup.share_from_rank0 = [](const std::string& bytes) { return bytes; };
  setup.peer_fault = [] { return std::string(); };
  setup.timeout_s = 60;
  EXPECT_EQ(e.cpu->create_token_exchange(setup), nullptr);
  std::unique_ptr<TokenExchange> ex = e.gpu->create_token_exchange(setup);
  if (!ex) GTEST_SKIP() << "this build has no NCCL";
  EXPECT_EQ(ex->world(), 1);
  EXPECT_EQ(ex->rank(), 0);
  const Tensor offsets = e.gpu->upload_i32({0, 7, 7, 10});
  ex->gather_offsets_start(offsets.data, 4);
  EXPECT_EQ(ex->gather_offsets_wait(), (std::vector<std::vector<int32_t>>{{0, 7, 7, 10}}));
  Pair send = e.in({37, 5}, BF, -3.f, 3.f);
  Pair recv = e.out({37, 5}, BF);
  const int64_t bytes = 37 * 5 * 2;
  ex->pace();
  ex->all_to_all(send.g.data, {bytes}, recv.g.data, {bytes});
  ex->join();
  EXPECT_EQ(e.down(*e.gpu, recv.g), e.down(*e.gpu, send.g)) << "a one-rank exchange changed the rows";
  ex->pace();
  ex->finish();
}

// ---- MoE ------------------------------------------------------------------------------------------------
void case_moe(Env& e) {
  const int64_t T = 13, E = 11;
  const int k = 3;
  Pair logits = e.in({T, E}, BF, -3.f, 3.f);
  Pair idx;
  idx.c = e.cpu->zeros({T, k}, DType::I32);
  idx.g = e.gpu->zeros({T, k}, DType::I32);
  Pair w = e.out({T, k}, F32);
  e.cpu->moe_router_fwd(logits.c, k, idx.c, w.c);
  e.gpu->moe_router_fwd(logits.g, k, idx.g, w.g);
  EXPECT_EQ(host_to_f32(e.cpu->download(idx.c, DType::I32)), host_to_f32(e.gpu->download(idx.g, DType::I32)))
      << "moe_router_fwd: selected experts differ";
  compare(e, "moe_router_fwd w", w, 1e-10);
  // Backward from the CPU's routing so only the backward is compared.
  Pair dw = e.in({T, k}, F32);
  Pair dl = e.out({T, E}, F32);
  e.cpu->moe_router_bwd(dw.c, idx.c, w.c, dl.c);
  e.gpu->moe_router_bwd(dw.g, e.gpu->upload(e.cpu->download(idx.c, DType::I32), DType::I32),
                        e.gpu->upload(e.cpu->download(w.c, F32), F32), dl.g);
  compare(e, "moe_router_bwd", dl, 1e-10);

  const int64_t H = 37, n = 9;
  Pair src = e.in({T, H}, BF);
  Pair rows = e.ints({n}, {3, 0, 12, 3, 7, 7, 7, 1, 12});
  Pair gd = e.out({n, H}, BF);
  e.cpu->gather_rows(src.c, rows.c, gd.c);
  e.gpu->gather_rows(src.g, rows.g, gd.g);
  compare(e, "gather_rows", gd, 0);
  Pair sv = e.in({n, H}, F32), sc = e.in({n}, F32, 0.f, 1.f);
  for (bool with_scale : {true, false}) {
    Pair dst = e.out_init({T, H}, F32);
    e.cpu->scatter_add_rows(sv.c, rows.c, with_scale ? sc.c : Tensor(), dst.c);
    e.gpu->scatter_add_rows(sv.g, rows.g, with_scale ? sc.g : Tensor(), dst.g);
    compare(e, with_scale ? "scatter_add_rows (scaled)" : "scatter_add_rows", dst, 1e-12);
  }
  Pair dstb = e.out_init({T, H}, BF);
  e.cpu->scatter_add_rows(sv.c, rows.c, sc.c, dstb.c);
  e.gpu->scatter_add_rows(sv.g, rows.g, sc.g, dstb.g);
  compare(e, "scatter_add_rows (BF16 dst, bf16 atomics)", dstb, 1e-4);
  Pair a = e.in({n, H}, BF), b = e.in({n, H}, BF);
  Pair rd = e.out({n}, F32);
  e.cpu->row_dot(a.c, b.c, rd.c);
  e.gpu->row_dot(a.g, b.g, rd.g);
  compare(e, "row_dot", rd, 1e-10);
  Pair ys = e.out({n, H}, BF);
  e.cpu->scale_rows(a.c, sc.c, ys.c);
  e.gpu->scale_rows(a.g, sc.g, ys.g);
  compare(e, "scale_rows", ys, 1e-5);
  {  // rows of 96 bf16 values: the warp-per-row 16-byte kernels (the MoE layer's hidden and expert rows)
    const int64_t H8 = 96;
    Pair src8 = e.in({T, H8}, BF), gd8 = e.out({n, H8}, BF);
    e.cpu->gather_rows(src8.c, rows.c, gd8.c);
    e.gpu->gather_rows(src8.g, rows.g, gd8.g);
    compare(e, "gather_rows (16-byte rows)", gd8, 0);
    Pair a8 = e.in({n, H8}, BF), b8 = e.in({n, H8}, BF), rd8 = e.out({n}, F32), ys8 = e.out({n, H8}, BF);
    e.cpu->row_dot(a8.c, b8.c, rd8.c);
    e.gpu->row_dot(a8.g, b8.g, rd8.g);
    compare(e, "row_dot (16-byte rows)", rd8, 1e-10);
    e.cpu->scale_rows(a8.c, sc.c, ys8.c);
    e.gpu->scale_rows(a8.g, sc.g, ys8.g);
    compare(e, "scale_rows (16-byte rows)", ys8, 1e-5);
  }
}

// ---- MoE dispatch, combine, grouped expert GEMMs, permute3 --------------------------------------------------
// Dispatch and permute3 are exact (integer maps, copies: tol 0). combine sums K <= 8 products in fp32 into a
// BF16 output: 1e-5. The grouped GEMMs follow gemm: with a BF16 operand they run bf16 tensor cores (an F32
// operand rounded to bf16) summing up to ~1000 products in fp32: 1e-4; F32·F32 runs in fp32: 1e-10 into an
// F32 output, 1e-5 into a BF16 one (the output rounding).
void case_moe_grouped(Env& e) {
  // Dispatch: several warps and blocks of slots; an expert count past one warp's 32 lanes; empty experts
  // (including the last); everything on one expert.
  auto dispatch = [&](const std::string& tag, int64_t T, int64_t K, int E, const std::vector<int32_t>& idx) {
    Pair pi = e.ints({T, K}, idx);
    const int64_t n = T * K;
    Pair off, rt, rs, sr;
    for (Pair* p : {&off, &rt, &rs, &sr}) {
      const int64_t len = p == &off ? E + 1 : n;
      *p = e.ints({len}, std::vector<int32_t>(static_cast<size_t>(len), -1));  // poisoned on both sides
    }
    Pair load = e.out_init({E}, F32, 0.f, 4.f);
    e.cpu->moe_dispatch(pi.c, E, off.c, rt.c, rs.c, sr.c, &load.c);
    e.gpu->moe_dispatch(pi.g, E, off.g, rt.g, rs.g, sr.g, &load.g);
    const char* names[] = {"offsets", "row_token", "row_slot", "slot_row"};
    int i = 0;
    for (Pair* p : {&off, &rt, &rs, &sr})
      EXPECT_EQ(host_to_f32(e.cpu->download(p->c, DType::I32)), host_to_f32(e.gpu->download(p->g, DType::I32)))
          << "moe_dispatch " << tag << ": " << names[i++] << " differ";
    compare(e, "moe_dispatch load " + tag, load, 0);
  };
  {
    const int64_t T = 700, K = 3;
    const int E = 37;
    std::vector<int32_t> idx(T * K);
    std::uniform_int_distribution<int32_t> u(0, E - 1);
    for (auto& v : idx) {
      v = u(e.rng);
      if (v % 5 == 1 || v == E - 1) v = 0;  // experts 1, 6, 11, ... and the last get nothing; 0 gets many
    }
    dispatch("T=700 K=3 E=37", T, K, E, idx);
    dispatch("all on expert 2", 129, 2, 3, std::vector<int32_t>(258, 2));
    std::vector<int32_t> idx64(1000 * 8);
    std::uniform_int_distribution<int32_t> u64(0, 63);
    for (auto& v : idx64) v = u64(e.rng);
    dispatch("T=1000 K=8 E=64", 1000, 8, 64, idx64);
  }

  // Offsets of random per-expert counts, some zero; M rows in all (>= the counts' sum).
  auto offsets = [&](int64_t E, int64_t rows, int64_t M) {
    std::vector<int32_t> cnt(E, 0);
    std::uniform_int_distribution<int64_t> pick(0, E - 1);
    for (int64_t i = 0; i < rows; ++i) {
      int64_t x = pick(e.rng);
      if (x % 4 == 3) x = 0;  // every fourth expert empty
      ++cnt[x];
    }
    std::vector<int32_t> off{0};
    for (int32_t c : cnt) off.push_back(off.back() + c);
    EXPECT_LE(off.back(), M);
    return e.ints({E + 1}, off);
  };

  // combine (fixed-order weighted sum per token)
  {
    const int64_t T = 37, K = 4, H = 67;
    std::vector<int32_t> perm(T * K);
    for (int64_t i = 0; i < T * K; ++i) perm[i] = static_cast<int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), e.rng);
    Pair sr = e.ints({T * K}, perm);
    Pair y = e.in({T * K, H}, BF), w = e.in({T, K}, F32, 0.f, 1.f);
    Pair out = e.out({T, H}, BF);
    e.cpu->moe_combine(y.c, sr.c, w.c, out.c);
    e.gpu->moe_combine(y.g, sr.g, w.g, out.g);
    compare(e, "moe_combine (weighted)", out, 1e-5);
    Pair out1 = e.out({T, H}, F32);
    e.cpu->moe_combine(y.c, sr.c, Tensor{}, out1.c);
    e.gpu->moe_combine(y.g, sr.g, Tensor{}, out1.g);
    compare(e, "moe_combine (unweighted)", out1, 1e-10);
    const int64_t H8 = 96;  // rows of 8k bf16 values: the warp-per-token 16-byte kernel
    Pair y8 = e.in({T * K, H8}, BF), o8 = e.out({T, H8}, BF), o8f = e.out({T, H8}, F32);
    e.cpu->moe_combine(y8.c, sr.c, w.c, o8.c);
    e.gpu->moe_combine(y8.g, sr.g, w.g, o8.g);
    compare(e, "moe_combine (weighted, 16-byte rows)", o8, 1e-5);
    e.cpu->moe_combine(y8.c, sr.c, Tensor{}, o8f.c);
    e.gpu->moe_combine(y8.g, sr.g, Tensor{}, o8f.g);
    compare(e, "moe_combine (unweighted into F32, 16-byte rows)", o8f, 1e-10);
  }

  // grouped_gemm: both weight orientations, big and skinny N, vector loads (the cp.async ring kernel, or the wgmma
  // kernel under the Hopper policy) and scalar
  // ones (K or N not a multiple of 8: the register-prefetch kernel), several row tiles per expert, rows past
  // offsets[E] left alone; the last case the gate_up GEMM of a 35B-A3B layer (hidden 2048, 2 x 512 expert
  // columns, ~128 rows an expert), then its LoRA up-projection (fp32 u·B_eᵀ into bf16 y, K = r: the thin kernel).
  struct G {
    int64_t E, rows, M, N, K;
    DType x, w, y;
    float alpha, beta;
  };
  const G gcases[] = {{3, 301, 305, 40, 72, BF, BF, BF, 1.f, 0.f},    {37, 500, 500, 130, 33, BF, BF, F32, 1.f, 0.f},
                      {64, 777, 780, 16, 64, F32, F32, BF, 0.5f, 1.f}, {5, 300, 300, 24, 20, BF, F32, F32, 1.f, 0.25f},
                      {8, 1000, 1000, 256, 256, BF, BF, BF, 1.f, 0.f}, {11, 250, 251, 72, 16, F32, BF, BF, -1.f, 1.f},
                      {13, 400, 401, 200, 16, F32, F32, F32, 1.f, 1.f}, {6, 90, 90, 16, 130, F32, F32, F32, 1.f, 0.f},
                      {8, 1024, 1024, 1024, 2048, BF, BF, BF, 1.f, 0.f}, {16, 2048, 2048, 1024, 16, F32, F32, BF, 2.f, 1.f},
                      // The wgmma kernel (Hopper policy) on 35B-A3B sizes: the down projection (2048 x 512) and its
                      // dX orientation, ~128 rows an expert, some experts empty, row counts not multiples of 64;
                      // ~24 rows an expert (the second warpgroup idle), a partial column tile; beta 1 into F32;
                      // odd N (Wᵀ only: the last column alone) with K past a k-step, beta into BF16.
                      {16, 2000, 2050, 2048, 512, BF, BF, BF, 1.f, 0.f}, {37, 900, 905, 136, 64, BF, BF, BF, 1.f, 0.f},
                      {12, 1500, 1510, 512, 2048, BF, BF, F32, 0.5f, 1.f}, {9, 300, 300, 139, 40, BF, BF, BF, 1.f, 0.5f}};
  for (const G& c : gcases)
    for (int tw = 0; tw < 2; ++tw) {
      Pair off = offsets(c.E, c.rows, c.M);
      Pair x = e.in({c.M, c.K}, c.x);
      Pair w = e.in(tw ? Shape{c.E, c.N, c.K} : Shape{c.E, c.K, c.N}, c.w);
      // Rows past offsets[E] must keep their content, so y starts initialised even for beta 0.
      Pair y = e.out_init({c.M, c.N}, c.y);
      e.cpu->grouped_gemm(x.c, w.c, tw, off.c, y.c, c.alpha, c.beta);
      e.gpu->grouped_gemm(x.g, w.g, tw, off.g, y.g, c.alpha, c.beta);
      std::ostringstream name;
      name << "grouped_gemm E=" << c.E << " M=" << c.M << " " << c.N << "x" << c.K << (tw ? " Wᵀ " : " W ")
           << dtype_name(c.x) << "·" << dtype_name(c.w) << "->" << dtype_name(c.y) << " beta " << c.beta;
      const bool fp32 = c.x == F32 && c.w == F32;
      compare(e, name.str(), y, fp32 ? (c.y == F32 ? 1e-10 : 1e-5) : 1e-4);
    }
  // beta 0 ignores NaN in the rows it writes.
  {
    Pair off = offsets(7, 200, 200);
    Pair x = e.in({200, 48}, BF), w = e.in({7, 56, 48}, BF);
    Pair y = e.out({200, 56}, BF);
    e.cpu->grouped_gemm(x.c, w.c, true, off.c, y.c, 1.f, 0.f);
    e.gpu->grouped_gemm(x.g, w.g, true, off.g, y.g, 1.f, 0.f);
    compare(e, "grouped_gemm beta 0 over NaN", y, 1e-4);
  }
  // grouped_gemm_lora: y = x·op(W_e) + s·u·op(L_e) (+ beta·y). Under the Hopper policy the wgmma kernel adds the
  // LoRA term in its epilogue (r <= 16, a multiple of 4): the 35B-A3B gate_up forward (B_e [N, r]) and the dX of
  // down (A_e [r, N]), r 8 (zero filled), beta 1 into F32, odd N, ~24 rows an expert; r 20 and r 6 take the
  // two-product path everywhere. Both orientations for every case.
  struct L {
    int64_t E, rows, M, N, K, r;
    DType y;
    float alpha, lscale, beta;
  };
  const L lcases[] = {{16, 2048, 2048, 1024, 2048, 16, BF, 1.f, 2.f, 0.f}, {16, 2000, 2050, 2048, 512, 16, BF, 1.f, 1.f, 0.f},
                      {12, 1500, 1510, 512, 256, 8, F32, 0.5f, 2.f, 1.f},  {9, 300, 300, 139, 40, 16, BF, 1.f, 0.5f, 0.5f},
                      {37, 900, 905, 136, 64, 12, BF, 1.f, 1.f, 0.f},     {7, 400, 400, 256, 64, 20, BF, 1.f, 1.f, 0.f},
                      {7, 400, 400, 256, 64, 6, BF, 1.f, 1.f, 1.f}};
  for (const L& c : lcases)
    for (int tw = 0; tw < 2; ++tw) {
      if (!tw && c.N % 8) continue;  // W_e [K, N] needs no odd N here (the base GEMM's case covers it)
      Pair off = offsets(c.E, c.rows, c.M);
      Pair x = e.in({c.M, c.K}, BF);
      Pair w = e.in(tw ? Shape{c.E, c.N, c.K} : Shape{c.E, c.K, c.N}, BF);
      Pair u = e.in({c.M, c.r}, F32);
      Pair l = e.in(tw ? Shape{c.E, c.N, c.r} : Shape{c.E, c.r, c.N}, F32);
      Pair y = e.out_init({c.M, c.N}, c.y);
      e.cpu->grouped_gemm_lora(x.c, w.c, tw, off.c, u.c, l.c, c.lscale, y.c, c.alpha, c.beta);
      e.gpu->grouped_gemm_lora(x.g, w.g, tw, off.g, u.g, l.g, c.lscale, y.g, c.alpha, c.beta);
      std::ostringstream name;
      name << "grouped_gemm_lora E=" << c.E << " M=" << c.M << " " << c.N << "x" << c.K << " r=" << c.r
           << (tw ? " Wᵀ " : " W ") << "->" << dtype_name(c.y) << " beta " << c.beta;
      compare(e, name.str(), y, 1e-4);
    }
  // grouped_lora_linear_fwd: u = x·A_eᵀ and y = x·W_eᵀ + s·u·B_eᵀ (Hopper: u formed in the expert GEMM); 35B-A3B
  // gate_up and down forward sizes, r 8 (zero filled), ~24 rows an expert with a partial column tile, r 20 (two
  // kernels).
  for (const auto& [E, rows, M, N, K, r] : {std::array<int64_t, 6>{16, 2048, 2048, 1024, 2048, 16},
                                            {16, 2000, 2050, 2048, 512, 16}, {12, 1500, 1510, 512, 256, 8},
                                            {37, 900, 905, 136, 64, 16}, {7, 400, 400, 256, 64, 20}}) {
    Pair off = offsets(E, rows, M);
    Pair x = e.in({M, K}, BF), w = e.in({E, N, K}, BF), a = e.in({E, r, K}, F32), l = e.in({E, N, r}, F32);
    Pair u = e.out_init({M, r}, F32), y = e.out_init({M, N}, BF);
    e.cpu->grouped_lora_linear_fwd(x.c, w.c, a.c, off.c, l.c, 0.5f, u.c, y.c);
    e.gpu->grouped_lora_linear_fwd(x.g, w.g, a.g, off.g, l.g, 0.5f, u.g, y.g);
    const std::string tag = " E=" + std::to_string(E) + " M=" + std::to_string(M) + " " + std::to_string(N) + "x" +
                            std::to_string(K) + " r=" + std::to_string(r);
    compare(e, "grouped_lora_linear_fwd u" + tag, u, 1e-4);
    compare(e, "grouped_lora_linear_fwd y" + tag, y, 1e-4);
  }
  // swiglu_packed: [gate | up] rows; bf16 rows of 8k values (16-byte path) and odd widths.
  for (const auto& [n, I, dt] : {std::tuple<int64_t, int64_t, DType>{333, 512, BF}, {37, 13, BF}, {29, 24, F32}}) {
    Pair gu = e.in({n, 2 * I}, dt, -4.f, 4.f), dh = e.in({n, I}, dt);
    Pair h = e.out({n, I}, dt), dgu = e.out({n, 2 * I}, dt);
    e.cpu->swiglu_packed_fwd(gu.c, h.c);
    e.gpu->swiglu_packed_fwd(gu.g, h.g);
    const std::string tag = " n=" + std::to_string(n) + " I=" + std::to_string(I) + " " + dtype_name(dt);
    compare(e, "swiglu_packed_fwd" + tag, h, dt == F32 ? 1e-10 : 1e-5);
    e.cpu->swiglu_packed_bwd(dh.c, gu.c, dgu.c);
    e.gpu->swiglu_packed_bwd(dh.g, gu.g, dgu.g);
    compare(e, "swiglu_packed_bwd" + tag, dgu, dt == F32 ? 1e-10 : 1e-5);
  }

  // grouped_gemm_wgrad: LoRA A-like (N = r small, K large), B-like (K = r), awkward sizes; beta 0 over NaN.
  struct W {
    int64_t E, rows, M, N, K;
    DType a, b;
    float alpha, beta;
  };
  const W wcases[] = {{9, 400, 400, 16, 72, F32, BF, 1.f, 1.f},  {9, 400, 403, 72, 16, BF, F32, 0.5f, 1.f},
                      {3, 150, 150, 33, 130, BF, BF, 1.f, 0.f},  {40, 321, 321, 8, 40, F32, F32, 1.f, 0.f},
                      {6, 700, 700, 64, 136, BF, BF, 1.f, 0.f},   // the cp.async ring (vector operands)
                      // rank-fitted tiles (r <= 16) on the ring: gA-like 16 x 128 with a partial column tile and
                      // r 8 (half the m16 block), gB-like 128 x 16 with a partial row tile; r 12 on the register path.
                      {12, 1500, 1500, 16, 200, BF, BF, 1.f, 1.f}, {5, 600, 611, 8, 136, BF, BF, 1.f, 0.f},
                      {12, 1500, 1500, 264, 16, BF, BF, 0.5f, 1.f}, {7, 500, 500, 72, 12, BF, BF, 1.f, 0.f},
                      {7, 500, 500, 12, 72, BF, BF, 1.f, 1.f}};
  for (const W& c : wcases) {
    Pair off = offsets(c.E, c.rows, c.M);
    Pair a = e.in({c.M, c.N}, c.a), b = e.in({c.M, c.K}, c.b);
    Pair g = c.beta != 0.f ? e.out_init({c.E, c.N, c.K}, F32) : e.out({c.E, c.N, c.K}, F32);
    e.cpu->grouped_gemm_wgrad(a.c, b.c, off.c, g.c, c.alpha, c.beta);
    e.gpu->grouped_gemm_wgrad(a.g, b.g, off.g, g.g, c.alpha, c.beta);
    std::ostringstream name;
    name << "grouped_gemm_wgrad E=" << c.E << " M=" << c.M << " " << c.N << "x" << c.K << " " << dtype_name(c.a)
         << "ᵀ·" << dtype_name(c.b) << " beta " << c.beta;
    compare(e, name.str(), g, c.a == F32 && c.b == F32 ? 1e-10 : 1e-4);
  }

  // permute3: expert LoRA B [out, r·E] -> [E, out, r] and back; with a dtype conversion.
  {
    const int64_t out = 37, r = 5, E = 11;
    Pair B = e.in({out, r * E}, F32);
    Pair Bc = e.out({E, out, r}, F32);
    e.cpu->permute3(B.c, out, r, E, 2, 0, 1, Bc.c);
    e.gpu->permute3(B.g, out, r, E, 2, 0, 1, Bc.g);
    compare(e, "permute3 (2,0,1)", Bc, 0);
    Pair back = e.out({out, r * E}, F32);
    e.cpu->permute3(Bc.c, E, out, r, 1, 2, 0, back.c);
    e.gpu->permute3(Bc.g, E, out, r, 1, 2, 0, back.g);
    compare(e, "permute3 (1,2,0)", back, 0);
    Pair x = e.in({6, 7, 8}, BF);
    Pair xt = e.out({8, 7, 6}, F32);
    e.cpu->permute3(x.c, 6, 7, 8, 2, 1, 0, xt.c);
    e.gpu->permute3(x.g, 6, 7, 8, 2, 1, 0, xt.g);
    compare(e, "permute3 (2,1,0) BF16->F32", xt, 0);
    // A 35B-A3B-like expert B (out 67, r 16, 40 experts): several 32 x 32 transpose tiles, partial ones at the edges.
    const int64_t out2 = 67, r2 = 16, E2 = 40;
    Pair B2 = e.in({out2, r2 * E2}, F32), Bc2 = e.out({E2, out2, r2}, F32), back2 = e.out({out2, r2 * E2}, F32);
    e.cpu->permute3(B2.c, out2, r2, E2, 2, 0, 1, Bc2.c);
    e.gpu->permute3(B2.g, out2, r2, E2, 2, 0, 1, Bc2.g);
    compare(e, "permute3 (2,0,1) 67x16x40", Bc2, 0);
    e.cpu->permute3(Bc2.c, E2, out2, r2, 1, 2, 0, back2.c);
    e.gpu->permute3(Bc2.g, E2, out2, r2, 1, 2, 0, back2.g);
    compare(e, "permute3 (1,2,0) 40x67x16", back2, 0);
  }
}

// ---- losses ---------------------------------------------------------------------------------------------
void case_cross_entropy(Env& e) {
  // BF16 rows of 1001: the generic kernel. F32 rows of 40,004 values and BF16 rows of 40,008: under the Hopper
  // policy the cluster kernels (16 blocks a row, the last one's slice shorter; bf16: 8 logits a 16-byte load), the
  // gradient written in place over the logits they read.
  for (const auto& [V, dt] : {std::pair<int64_t, DType>{1001, BF}, std::pair<int64_t, DType>{40004, DType::F32},
                              std::pair<int64_t, DType>{40008, BF}}) {
    const int64_t T = 13;
    const std::string tag = std::string(" ") + dtype_name(dt) + " V " + std::to_string(V);
    std::vector<int32_t> lab(T);
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V) - 1);
    for (auto& l : lab) l = u(e.rng);
    lab[2] = -100;
    lab[9] = -100;
    lab[5] = static_cast<int32_t>(V) - 1;
    lab[6] = 0;
    Pair labels = e.ints({T}, lab);
    Pair logits = e.in({T, V}, dt, -8.f, 8.f);
    compare_scalar("cross_entropy loss (no grad)" + tag, e.gpu->cross_entropy(logits.g, labels.g, 1.f, nullptr),
                   e.cpu->cross_entropy(logits.c, labels.c, 1.f, nullptr), 1e-5);
    // Gradient in place of the logits on both sides.
    Pair d = e.out_init({T, V}, dt, -8.f, 8.f);
    e.cpu->copy(d.c, logits.c);
    e.gpu->copy(d.g, logits.g);
    const double lg = e.gpu->cross_entropy(d.g, labels.g, 1.f / 11, &d.g);
    const double lc = e.cpu->cross_entropy(d.c, labels.c, 1.f / 11, &d.c);
    compare_scalar("cross_entropy loss (in-place grad)" + tag, lg, lc, 1e-5);
    compare(e, "cross_entropy dlogits (in place)" + tag, d, 1e-5);
  }
}

void case_linear_cross_entropy(Env& e) {
  // Row chunks of 16 (the last partial); V % 4 == 0 takes the 16-byte cross-entropy kernel (under the Hopper
  // policy the cluster kernel: 33,000, and Qwen3.5's 248,320), 1001 the generic one.
  for (const int64_t V : {int64_t(33000), int64_t(248320), int64_t(1001)}) {
    const int64_t T = 37, H = 64;
    std::vector<int32_t> lab(T);
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V) - 1);
    for (auto& l : lab) l = u(e.rng);
    lab[0] = -100;
    lab[20] = static_cast<int32_t>(V) - 1;
    lab[21] = 0;
    Pair labels = e.ints({T}, lab);
    Pair h = e.in({T, H}, BF, -1.f, 1.f), w = e.in({V, H}, BF, -0.5f, 0.5f);
    Pair dh = e.out({T, H}, BF);
    const std::string tag = " V " + std::to_string(V);
    const double lc = e.cpu->linear_cross_entropy(h.c, w.c, labels.c, 0.1f, &dh.c, 16, LossLogits::F32);
    const double lg = e.gpu->linear_cross_entropy(h.g, w.g, labels.g, 0.1f, &dh.g, 16, LossLogits::F32);
    compare_scalar("linear_cross_entropy loss" + tag, lg, lc, 1e-5);
    compare(e, "linear_cross_entropy dh" + tag, dh, 1e-4);
    compare_scalar("linear_cross_entropy loss (no grad)" + tag,
                   e.gpu->linear_cross_entropy(h.g, w.g, labels.g, 1.f, nullptr, 7, LossLogits::F32), lc, 1e-5);
    // The loss left on the device: the same double as returned (GPU), as the base version's upload (CPU).
    for (Backend* be : {e.gpu.get(), e.cpu.get()}) {
      const bool gpu = be == e.gpu.get();
      Tensor loss = be->alloc({8}, DType::U8), scale = be->alloc({1}, DType::F32);
      be->write_f32(scale, {0.1f});
      EXPECT_EQ(be->download(scale, DType::F32).ptr<float>()[0], 0.1f) << "write_f32" << tag;
      Pair dh2 = e.out({T, H}, BF);
      be->linear_cross_entropy_into(gpu ? h.g : h.c, gpu ? w.g : w.c, gpu ? labels.g : labels.c, scale,
                                    gpu ? &dh2.g : &dh2.c, 16, LossLogits::F32, loss);
      double got = 0;
      std::memcpy(&got, be->download(loss, DType::U8).data, sizeof got);
      EXPECT_EQ(got, gpu ? lg : lc) << "linear_cross_entropy_into" << tag << (gpu ? " (gpu)" : " (cpu)");
      if (gpu)
        EXPECT_EQ(host_to_f32(e.gpu->download(dh2.g, DType::BF16)), host_to_f32(e.gpu->download(dh.g, DType::BF16)))
            << "linear_cross_entropy_into dh" << tag;
    }
    // LossLogits::BF16 (the run config's loss_logits: bf16): the lm_head GEMM writes bf16 logits, as HF and Liger
    // do; the cross-entropy's math stays fp32 (under the Hopper policy the bf16 cluster kernel for V 33,000 and
    // 248,320, the generic kernel for 1001). Against the CPU's fp32 op, which takes BF16 as fp32 (the reference:
    // the same loss bit for bit). Each logit is rounded to bf16, at most 2^-8 of its value (2^-9 typical; here
    // |logit| <= ~7, std ~1.3). Tolerances:
    //  - loss: a row's CE moves by Σ p·δ − δ_label, at most a few 1e-3 against a CE of ~ln V (7 to 12), the rows'
    //    errors of both signs: 1e-3 relative (the 2b loss shape measured 1.4e-6 .. 1.4e-5, PERF_NOTES session 33).
    //  - dh: the gradient is bf16 in both forms (nmse ~1e-6); the logits' rounding moves each softmax value by its
    //    δ, small beside the one-hot term: the F32 form's 1e-4 nmse.
    //  - the loss differs from the F32 logits' (the bf16 form ran), and linear_cross_entropy_into gives the same.
    Pair dh16 = e.out({T, H}, BF);
    const double lc16 = e.cpu->linear_cross_entropy(h.c, w.c, labels.c, 0.1f, &dh16.c, 16, LossLogits::BF16);
    EXPECT_EQ(lc16, lc) << "CPU linear_cross_entropy, bf16 logits asked (fp32 computed)" << tag;
    const double lg16 = e.gpu->linear_cross_entropy(h.g, w.g, labels.g, 0.1f, &dh16.g, 1024, LossLogits::BF16);
    compare_scalar("linear_cross_entropy loss (bf16 logits)" + tag, lg16, lc, 1e-3);
    compare(e, "linear_cross_entropy dh (bf16 logits)" + tag, dh16, 1e-4);
    EXPECT_NE(lg16, lg) << "linear_cross_entropy: bf16 logits gave the F32 logits' loss" << tag;
    std::printf("  bf16 logits%s: loss rel %.2e vs cpu fp32 (F32 logits on the GPU: %.2e)\n", tag.c_str(),
                std::fabs(lg16 - lc) / std::fabs(lc), std::fabs(lg - lc) / std::fabs(lc));
    compare_scalar("linear_cross_entropy loss (bf16 logits, no grad, chunks of 7)" + tag,
                   e.gpu->linear_cross_entropy(h.g, w.g, labels.g, 1.f, nullptr, 7, LossLogits::BF16), lc, 1e-3);
    {
      Tensor loss = e.gpu->alloc({8}, DType::U8), scale = e.gpu->alloc({1}, DType::F32);
      e.gpu->write_f32(scale, {0.1f});
      Pair dh2 = e.out({T, H}, BF);
      e.gpu->linear_cross_entropy_into(h.g, w.g, labels.g, scale, &dh2.g, 1024, LossLogits::BF16, loss);
      double got = 0;
      std::memcpy(&got, e.gpu->download(loss, DType::U8).data, sizeof got);
      EXPECT_NEAR(got, lg16, 1e-12 * std::fabs(lg16)) << "linear_cross_entropy_into (bf16 logits)" << tag;
      EXPECT_EQ(host_to_f32(e.gpu->download(dh2.g, DType::BF16)), host_to_f32(e.gpu->download(dh16.g, DType::BF16)))
          << "linear_cross_entropy_into dh (bf16 logits)" << tag;
    }
  }
}

// ---- optimizers -----------------------------------------------------------------------------------------
void case_optim(Env& e) {
  const Shape s{1037};
  Pair p = e.out_init(s, F32), m = e.out_init(s, F32, -0.1f, 0.1f), v = e.out_init(s, F32, 0.f, 0.01f);
  Pair grad = e.in(s, F32);
  for (int64_t step : {1, 2, 7}) {
    e.cpu->adamw_step(p.c, grad.c, m.c, v.c, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
    e.gpu->adamw_step(p.g, grad.g, m.g, v.g, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
  }
  compare(e, "adamw_step param", p, 1e-12);
  compare(e, "adamw_step m", m, 1e-12);
  compare(e, "adamw_step v", v, 1e-12);
  Pair q = e.out_init(s, F32);
  Pair gb = e.in(s, BF);
  e.cpu->sgd_step(q.c, gb.c, 0.05f, 0.1f);
  e.gpu->sgd_step(q.g, gb.g, 0.05f, 0.1f);
  compare(e, "sgd_step (BF16 grad)", q, 1e-12);

  // adamw_step_many: 61 slots (two launches of 48) of mixed sizes, one BF16 gradient (per-tensor path), with
  // and without a clipping scale; the gradients must come back unchanged.
  std::vector<Pair> ps, ms, vs, gr;
  for (int i = 0; i < 61; ++i) {
    const Shape si{1 + (i * 211) % 3001};
    ps.push_back(e.out_init(si, F32));
    ms.push_back(e.out_init(si, F32, -0.1f, 0.1f));
    vs.push_back(e.out_init(si, F32, 0.f, 0.01f));
    gr.push_back(e.in(si, i == 13 ? BF : F32));
  }
  const std::vector<float> before = e.down(*e.gpu, gr[5].g);
  for (auto [step, scale] : {std::pair<int64_t, float>{1, 1.f}, {2, 0.37f}, {5, 0.37f}}) {
    std::vector<Backend::AdamWSlot> sc, sg;
    for (size_t i = 0; i < ps.size(); ++i) {
      sc.push_back({&ps[i].c, &gr[i].c, &ms[i].c, &vs[i].c});
      sg.push_back({&ps[i].g, &gr[i].g, &ms[i].g, &vs[i].g});
    }
    e.cpu->adamw_step_many(sc, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, scale);
    e.gpu->adamw_step_many(sg, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step, scale);
  }
  for (size_t i : {size_t(0), size_t(13), size_t(47), size_t(48), size_t(60)}) {
    compare(e, "adamw_step_many param " + std::to_string(i), ps[i], 1e-12);
    compare(e, "adamw_step_many m " + std::to_string(i), ms[i], 1e-12);
    compare(e, "adamw_step_many v " + std::to_string(i), vs[i], 1e-12);
  }
  EXPECT_EQ(e.down(*e.gpu, gr[5].g), before) << "adamw_step_many changed a gradient";
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = {
      {"memory",
       {"device", "name", "compute_dtype", "weight_dtype", "alloc", "zeros", "upload", "download",
        "memory_stats", "synchronize"},
       case_memory},
      {"fill_copy", {"fill", "copy", "copy_cols"}, case_fill_copy},
      {"gemm", {"gemm"}, case_gemm},
      {"gemm_cols", {"gemm_cols"}, case_gemm_cols},
      {"lora_dy", {"lora_dy_products"}, case_lora_dy},
      {"lora_up", {"lora_up"}, case_lora_up},
      {"lora_swiglu", {"lora_swiglu_fwd", "lora_swiglu_bwd"}, case_lora_swiglu},
      {"add_scale", {"add", "scale", "copy_many"}, case_add_scale},
      {"reductions", {"sum_squares", "all_finite", "sum_squares_many", "all_finite_many"}, case_reductions},
      {"dropout", {"dropout"}, case_dropout},
      {"activations",
       {"swiglu_fwd", "swiglu_bwd", "sigmoid_mul_fwd", "sigmoid_mul_bwd", "sigmoid"},
       case_activations},
      {"embedding", {"embedding_fwd"}, case_embedding},
      {"rmsnorm", {"rmsnorm_fwd", "rmsnorm_bwd", "rmsnorm_bwd_add"}, case_rmsnorm},
      {"attn_cols", {"rmsnorm_fwd_cols", "rmsnorm_bwd_cols", "sigmoid_mul_fwd_cols", "sigmoid_mul_bwd_cols"},
       case_attn_cols},
      {"vision", {"layer_norm_fwd", "layer_norm_bwd", "gelu_fwd", "gelu_bwd", "rope_2d"}, case_vision},
      {"gated_rmsnorm", {"gated_rmsnorm_fwd", "gated_rmsnorm_bwd"}, case_gated_rmsnorm},
      {"rope", {"rope", "rope_multimodal"}, case_rope},
      {"attention", {"attention_fwd", "attention_bwd"}, case_attention},
      {"conv",
       {"conv1d_silu_fwd", "conv1d_silu_bwd", "conv1d_silu_fwd_split", "conv1d_silu_bwd_split"},
       case_conv},
      {"gates", {"gdn_gates_fwd", "gdn_gates_bwd"}, case_gates},
      {"gdn",
       {"gdn_fwd", "gdn_bwd", "gdn_fwd_keep", "gdn_bwd_saved", "gdn_gated_fwd", "gdn_gated_bwd"},
       case_gdn},
      {"gradient_reducer", {"create_gradient_reducer"}, case_gradient_reducer},
      {"shard_gatherer", {"create_shard_gatherer"}, case_shard_gatherer},
      {"token_exchange", {"create_token_exchange"}, case_token_exchange},
      {"decode_conv", {"conv1d_silu_step"}, case_decode_conv},
      {"decode_gdn", {"gdn_recurrent"}, case_decode_gdn},
      {"decode_prefill", {"gdn_prefill"}, case_decode_prefill},
      {"decode_kv", {"kv_cache_write", "attention_cached"}, case_decode_kv},
      {"recording", {"begin_capture", "begin_step_capture", "end_capture", "replay", "write_i32"}, case_recording},
      {"moe",
       {"moe_router_fwd", "moe_router_bwd", "gather_rows", "scatter_add_rows", "row_dot", "scale_rows"},
       case_moe},
      {"moe_grouped",
       {"moe_dispatch", "moe_combine", "grouped_gemm", "grouped_gemm_lora", "grouped_lora_linear_fwd", "grouped_gemm_wgrad", "permute3",
        "swiglu_packed_fwd", "swiglu_packed_bwd"},
       case_moe_grouped},
      {"cross_entropy", {"cross_entropy"}, case_cross_entropy},
      {"linear_cross_entropy", {"linear_cross_entropy", "linear_cross_entropy_into", "write_f32"},
       case_linear_cross_entropy},
      {"optim", {"adamw_step", "sgd_step", "adamw_step_many"}, case_optim},
  };
  return cases;
}

// Every case runs under both kernel policies (the run config's `kernels`): "auto" (on a Hopper the wgmma +
// TMA kernels where an op has them) and "portable" (the sm_80 kernels, on any GPU).
using CaseAndKernels = std::tuple<std::string, std::string>;
class BackendOps : public ::testing::TestWithParam<CaseAndKernels> {
 protected:
  static Env* env(const std::string& kernels) {
    static std::map<std::string, std::unique_ptr<Env>> envs;
    std::unique_ptr<Env>& e = envs[kernels];
    if (!e) {
      e = std::make_unique<Env>();
      e->cpu = make_cpu_backend(2);
      e->gpu = make_cuda_backend(0, DType::BF16, kernels);
    }
    return e.get();
  }
};

TEST_P(BackendOps, MatchesCpu) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no CUDA device";
  const auto& [name, kernels] = GetParam();
  for (const OpCase& c : all_cases())
    if (c.name == name) {
      Env* e = env(kernels);
      e->rng.seed(std::hash<std::string>{}(c.name));
      std::printf("[%s, kernels: %s]\n", c.name.c_str(), kernels.c_str());
      c.run(*e);
      e->gpu->synchronize();
      return;
    }
  FAIL() << "no case " << name;
}

std::vector<std::string> case_names() {
  std::vector<std::string> n;
  for (const OpCase& c : all_cases()) n.push_back(c.name);
  return n;
}

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(case_names()),
                                            ::testing::Values(std::string("auto"), std::string("portable"))),
                         [](const ::testing::TestParamInfo<CaseAndKernels>& i) {
                           return std::get<0>(i.param) + "_" + std::get<1>(i.param);
                         });

// backend.h of the source tree: DT_SOURCE_ROOT, the build's source folder, or the current folder (a checkout's root,
// as on the GPU machine); empty when none has it.
namespace fs = std::filesystem;
fs::path backend_header() {
  const fs::path rel = fs::path("engine") / "src" / "backend" / "backend.h";
  if (const char* root = std::getenv("DT_SOURCE_ROOT")) return fs::exists(fs::path(root) / rel) ? fs::path(root) / rel : fs::path();
  for (const fs::path& root : {fs::path(DT_SOURCE_DIR), fs::current_path()})
    if (fs::exists(root / rel)) return root / rel;
  return {};
}

// Every virtual function of backend.h must be exercised by some case (runs without a GPU too).
TEST(BackendOpsCoverage, EveryInterfaceOpHasACase) {
  const std::filesystem::path header = backend_header();
  if (header.empty()) GTEST_SKIP() << "engine/src/backend/backend.h not found (set DT_SOURCE_ROOT to a checkout)";
  std::ifstream f(header);
  ASSERT_TRUE(f.good()) << "cannot read " << header;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::regex fn(R"(virtual\s+[\w:<>,\s\*&]*?\b(\w+)\s*\()");
  std::set<std::string> covered;
  for (const OpCase& c : all_cases()) covered.insert(c.ops.begin(), c.ops.end());
  std::set<std::string> interface_ops;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), fn); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (name == "Backend") continue;  // destructor
    interface_ops.insert(name);
  }
  interface_ops.insert("zeros");  // non-virtual helper, covered as well
  EXPECT_GE(interface_ops.size(), 40u) << "backend.h parse found too few functions";
  for (const std::string& op : interface_ops) EXPECT_TRUE(covered.count(op)) << "no backend_ops case for " << op;
  for (const std::string& op : covered) EXPECT_TRUE(interface_ops.count(op)) << "case names unknown op " << op;
}

}  // namespace
}  // namespace deltatune::test
