// Rough GPU timings of the heavy ops at model shapes (DISABLED_: run on the GPU machine with
// --gtest_also_run_disabled_tests). Median of 5 runs after a warm-up, host clock around synchronize().
// Prints one line per op with the achieved rate; asserts only that the outputs are finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_kernels_setting.h"
#include "core/tensor.h"

namespace deltatune::test {
namespace {

double median_ms(Backend& b, const std::function<void()>& f) {
  f();
  b.synchronize();
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    b.synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

Tensor rand_dev(Backend& b, Shape s, DType dt, float lo, float hi, uint64_t seed) {
  Tensor h = host_tensor(s, DType::F32);
  uint64_t z = seed;
  for (int64_t i = 0; i < h.numel(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    h.ptr<float>()[i] = lo + (hi - lo) * float(z >> 40) / 16777216.f;
  }
  return b.upload(h, dt);
}

SeqLayout one_seq(Backend& b, int32_t T) {
  SeqLayout s;
  s.host_cu_seqlens = {0, T};
  Tensor hc = host_tensor({2}, DType::I32);
  hc.ptr<int32_t>()[1] = T;
  s.cu_seqlens = b.upload(hc, DType::I32);
  Tensor hp = host_tensor({T}, DType::I32);
  for (int32_t t = 0; t < T; ++t) hp.ptr<int32_t>()[t] = t;
  s.positions = b.upload(hp, DType::I32);
  s.max_seqlen = T;
  return s;
}

// Several sequences packed in one row (sequence packing), positions restarting per sequence.
SeqLayout packed_seqs(Backend& b, const std::vector<int32_t>& lens) {
  SeqLayout s;
  s.host_cu_seqlens = {0};
  for (int32_t l : lens) s.host_cu_seqlens.push_back(s.host_cu_seqlens.back() + l);
  const int32_t T = s.host_cu_seqlens.back();
  Tensor hc = host_tensor({int64_t(s.host_cu_seqlens.size())}, DType::I32);
  std::copy(s.host_cu_seqlens.begin(), s.host_cu_seqlens.end(), hc.ptr<int32_t>());
  s.cu_seqlens = b.upload(hc, DType::I32);
  Tensor hp = host_tensor({T}, DType::I32);
  for (size_t n = 0; n < lens.size(); ++n)
    for (int32_t t = 0; t < lens[n]; ++t) hp.ptr<int32_t>()[s.host_cu_seqlens[n] + t] = t;
  s.positions = b.upload(hp, DType::I32);
  s.max_seqlen = *std::max_element(lens.begin(), lens.end());
  return s;
}

TEST(BackendTiming, DISABLED_ModelShapes) {
  if (!cuda_backend_available()) GTEST_SKIP();
  auto gpu = make_cuda_backend(0);
  Backend& b = *gpu;
  const DType BF = DType::BF16;
  std::printf("%s\n", b.name().c_str());
  {  // GEMM 4096 x 6144 x 2048
    Tensor a = rand_dev(b, {4096, 2048}, BF, -1, 1, 1), w = rand_dev(b, {6144, 2048}, BF, -1, 1, 2);
    Tensor c = b.alloc({4096, 6144}, BF);
    const double ms = median_ms(b, [&] { b.gemm(a, false, w, true, c, 1.f, 0.f); });
    std::printf("gemm 4096x6144x2048 bf16          %8.3f ms  %7.1f TFLOP/s\n", ms, 2.0 * 4096 * 6144 * 2048 / ms / 1e9);
  }
  for (int T : {4096}) {  // attention, Qwen3.5-2B-like: 8 heads, 2 kv heads, head_dim 256
    const int nH = 8, nKV = 2, hd = 256;
    SeqLayout s = one_seq(b, T);
    Tensor q = rand_dev(b, {T, nH, hd}, BF, -1, 1, 3), k = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 4),
           v = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 5);
    Tensor o = b.alloc({T, nH, hd}, BF), lse = b.alloc({T, nH}, DType::F32);
    const double flops = 2.0 * 2.0 * double(T) * T / 2 * nH * hd;  // causal QK and PV
    const double f = median_ms(b, [&] { b.attention_fwd(q, k, v, s, 0.0625f, o, lse); });
    Tensor dq = b.alloc(q.shape, BF), dk = b.alloc(k.shape, BF), dv = b.alloc(v.shape, BF);
    const double bw = median_ms(b, [&] { b.attention_bwd(o, q, k, v, o, lse, s, 0.0625f, dq, dk, dv); });
    std::printf("attention T=%d nH=%d nKV=%d hd=%d fwd %8.3f ms (%5.1f TFLOP/s)  bwd %8.3f ms (%5.1f TFLOP/s)\n", T,
                nH, nKV, hd, f, flops / f / 1e9, bw, 2.5 * flops / bw / 1e9);
    EXPECT_TRUE(b.all_finite(o) && b.all_finite(dq) && b.all_finite(dk));
  }
  {  // GDN core, 16 key/value heads of 128, 4096 tokens in one sequence and in 8 sequences
    const int T = 4096, HK = 16, HV = 16, dk = 128, dv = 128;
    Tensor q = rand_dev(b, {T, HK, dk}, BF, -1, 1, 6), k = rand_dev(b, {T, HK, dk}, BF, -1, 1, 7),
           v = rand_dev(b, {T, HV, dv}, BF, -1, 1, 8), g = rand_dev(b, {T, HV}, DType::F32, -1, 0, 9),
           beta = rand_dev(b, {T, HV}, BF, 0, 1, 10);
    Tensor o = b.alloc({T, HV, dv}, BF);
    for (int nseq : {1, 8}) {
      SeqLayout s = one_seq(b, T);
      if (nseq > 1) {
        s.host_cu_seqlens.clear();
        for (int n = 0; n <= nseq; ++n) s.host_cu_seqlens.push_back(n * T / nseq);
        Tensor hc = host_tensor({nseq + 1}, DType::I32);
        for (int n = 0; n <= nseq; ++n) hc.ptr<int32_t>()[n] = s.host_cu_seqlens[n];
        s.cu_seqlens = b.upload(hc, DType::I32);
      }
      const double f = median_ms(b, [&] { b.gdn_fwd(q, k, v, g, beta, s, 0.088f, o); });
      Tensor dq = b.alloc(q.shape, BF), dkk = b.alloc(k.shape, BF), dvv = b.alloc(v.shape, BF),
             dg = b.alloc(g.shape, DType::F32), db = b.alloc(beta.shape, BF);
      const double bw = median_ms(b, [&] { b.gdn_bwd(o, q, k, v, g, beta, s, 0.088f, dq, dkk, dvv, dg, db); });
      std::printf("gdn T=%d nseq=%d HV=%d dk=dv=128       fwd %8.3f ms  bwd %8.3f ms\n", T, nseq, HV, f, bw);
      EXPECT_TRUE(b.all_finite(o) && b.all_finite(dq) && b.all_finite(dg));
    }
  }
  {  // fused linear cross-entropy, 4096 tokens, H 2048, V 248320
    const int T = 4096, H = 2048, V = 248320;
    Tensor h = rand_dev(b, {T, H}, BF, -1, 1, 11), w = rand_dev(b, {V, H}, BF, -0.05f, 0.05f, 12);
    Tensor hl = host_tensor({T}, DType::I32);
    for (int t = 0; t < T; ++t) hl.ptr<int32_t>()[t] = (t * 7919) % V;
    Tensor lab = b.upload(hl, DType::I32);
    Tensor dh = b.alloc({T, H}, BF);
    for (const LossLogits logits : {LossLogits::F32, LossLogits::BF16}) {  // the run config's loss_logits
      b.synchronize();
      const MemoryStats m0 = b.memory_stats();
      const double ms = median_ms(b, [&] { b.linear_cross_entropy(h, w, lab, 1.f / T, &dh, 1024, logits); });
      const MemoryStats m1 = b.memory_stats();
      std::printf("linear_cross_entropy T=%d H=%d V=%d %s logits %8.3f ms (%5.1f TFLOP/s), peak %lld MiB over %lld "
                  "MiB before\n",
                  T, H, V, loss_logits_name(logits), ms, 3 * 2.0 * T * double(H) * V / ms / 1e9,
                  (long long)(m1.peak_allocated_bytes >> 20), (long long)(m0.allocated_bytes >> 20));
      EXPECT_TRUE(b.all_finite(dh));
    }
  }
}

// RMSNorm over the hidden rows of 4096 tokens at the 2b (2048) and 9b (4096) widths, F32 weights as the model keeps
// them: 50 calls per timing (one call is tens of microseconds), bytes moved per call over the time.
TEST(BackendTiming, DISABLED_Norms) {
  if (!cuda_backend_available()) GTEST_SKIP();
  auto gpu = make_cuda_backend(0);
  Backend& b = *gpu;
  const DType BF = DType::BF16;
  constexpr int kCalls = 50;
  for (int n : {2048, 4096}) {
    const int T = 4096;
    Tensor x = rand_dev(b, {T, n}, BF, -3, 3, 1), w = rand_dev(b, {n}, DType::F32, -0.5f, 0.5f, 2),
           dy = rand_dev(b, {T, n}, BF, -1, 1, 3), res = rand_dev(b, {T, n}, BF, -1, 1, 4);
    Tensor y = b.alloc({T, n}, BF), r = b.alloc({T}, DType::F32), dx = b.alloc({T, n}, BF);
    const double mb = double(T) * n * 2 / 1e6;  // one bf16 [T, n] operand
    const double f = median_ms(b, [&] {
                       for (int i = 0; i < kCalls; ++i) b.rmsnorm_fwd(x, w, 1e-6f, true, y, r);
                     }) / kCalls;
    const double bw = median_ms(b, [&] {
                        for (int i = 0; i < kCalls; ++i) b.rmsnorm_bwd(dy, x, w, r, true, dx);
                      }) / kCalls;
    const double ba = median_ms(b, [&] {
                        for (int i = 0; i < kCalls; ++i) b.rmsnorm_bwd_add(dy, x, w, r, true, res, dx);
                      }) / kCalls;
    std::printf("rmsnorm [%d, %d] fwd %7.1f us (%4.2f TB/s)  bwd %7.1f us (%4.2f TB/s)  bwd_add %7.1f us (%4.2f TB/s)\n",
                T, n, f * 1e3, 2 * mb / f / 1e3, bw * 1e3, 3 * mb / bw / 1e3, ba * 1e3, 4 * mb / ba / 1e3);
    EXPECT_TRUE(b.all_finite(y) && b.all_finite(dx));
  }
}

// MoE expert ops at the Qwen3.5-35B-A3B shape: 4096 tokens, top-8 of 256 experts (uniform random routing,
// ~128 rows per expert), H 2048, expert intermediate 512, LoRA r 16. The dense cuBLAS GEMM with the same
// M·N·K is printed as the reference rate.
TEST(BackendTiming, DISABLED_MoeShapes) {
  if (!cuda_backend_available()) GTEST_SKIP();
  auto gpu = make_cuda_backend(0);
  Backend& b = *gpu;
  const DType BF = DType::BF16, F32 = DType::F32;
  const int T = 4096, K = 8, E = 256, H = 2048, I = 512, r = 16;
  const int64_t M = int64_t(T) * K;
  std::printf("%s\n", b.name().c_str());
  Tensor hi = host_tensor({T, K}, DType::I32);
  uint64_t z = 99;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < K; ++j) {  // K distinct experts per token
      int e;
      bool dup;
      do {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        e = int((z >> 33) % E);
        dup = false;
        for (int q = 0; q < j; ++q) dup |= hi.ptr<int32_t>()[t * K + q] == e;
      } while (dup);
      hi.ptr<int32_t>()[t * K + j] = e;
    }
  Tensor idx = b.upload(hi, DType::I32);
  Tensor off = b.alloc({E + 1}, DType::I32), rt = b.alloc({M}, DType::I32), rs = b.alloc({M}, DType::I32),
         sr = b.alloc({M}, DType::I32), load = b.zeros({E}, F32);
  const double dms = median_ms(b, [&] { b.moe_dispatch(idx, E, off, rt, rs, sr, &load); });
  std::printf("moe_dispatch T=%d K=%d E=%d                %8.3f ms\n", T, K, E, dms);

  auto rate = [](double flop, double ms) { return flop / ms / 1e9; };
  Tensor x = rand_dev(b, {M, H}, BF, -1, 1, 21), wgu = rand_dev(b, {E, 2 * I, H}, BF, -0.05f, 0.05f, 22);
  Tensor gu = b.alloc({M, 2 * I}, BF);
  double ms = median_ms(b, [&] { b.grouped_gemm(x, wgu, true, off, gu, 1.f, 0.f); });
  const double f_gu = 2.0 * M * 2 * I * H;
  std::printf("grouped_gemm gate_up  %lldx%dx%d Wt     %8.3f ms  %6.1f TFLOP/s\n", (long long)M, 2 * I, H, ms,
              rate(f_gu, ms));
  Tensor dx = b.alloc({M, H}, BF);
  ms = median_ms(b, [&] { b.grouped_gemm(gu, wgu, false, off, dx, 1.f, 0.f); });
  std::printf("grouped_gemm gate_up dX %lldx%dx%d W    %8.3f ms  %6.1f TFLOP/s\n", (long long)M, H, 2 * I, ms,
              rate(f_gu, ms));
  Tensor h = rand_dev(b, {M, I}, BF, -1, 1, 23), wd = rand_dev(b, {E, H, I}, BF, -0.05f, 0.05f, 24);
  Tensor y = b.alloc({M, H}, BF);
  ms = median_ms(b, [&] { b.grouped_gemm(h, wd, true, off, y, 1.f, 0.f); });
  std::printf("grouped_gemm down     %lldx%dx%d Wt     %8.3f ms  %6.1f TFLOP/s\n", (long long)M, H, I, ms,
              rate(2.0 * M * H * I, ms));
  Tensor A = rand_dev(b, {E, r, H}, F32, -0.05f, 0.05f, 25), u = b.alloc({M, r}, F32);
  ms = median_ms(b, [&] { b.grouped_gemm(x, A, true, off, u, 1.f, 0.f); });
  std::printf("grouped_gemm LoRA u   %lldx%dx%d (F32 A) %8.3f ms  %6.1f GB/s of x\n", (long long)M, r, H, ms,
              double(M) * H * 2 / ms / 1e6);
  Tensor gA = b.zeros({E, r, H}, F32);
  ms = median_ms(b, [&] { b.grouped_gemm_wgrad(u, x, off, gA, 1.f, 1.f); });
  std::printf("grouped_gemm_wgrad gA %dx%dx%d over %lld rows %8.3f ms  %6.1f GB/s of x\n", E, r, H, (long long)M, ms,
              double(M) * H * 2 / ms / 1e6);
  {  // the weight gradients on bf16 operands alone (what the MoE backward passes): gA = duᵀ·x, gB = dyᵀ·u
    Tensor ub = rand_dev(b, {M, r}, BF, -1, 1, 29), dyb = rand_dev(b, {M, 2 * I}, BF, -1, 1, 30);
    Tensor gB = b.zeros({E, 2 * I, r}, F32);
    ms = median_ms(b, [&] { b.grouped_gemm_wgrad(ub, x, off, gA, 1.f, 1.f); });
    std::printf("grouped_gemm_wgrad gA bf16 %dx%dx%d     %8.3f ms  %6.1f GB/s of x\n", E, r, H, ms,
                double(M) * H * 2 / ms / 1e6);
    ms = median_ms(b, [&] { b.grouped_gemm_wgrad(dyb, ub, off, gB, 1.f, 1.f); });
    std::printf("grouped_gemm_wgrad gB bf16 %dx%dx%d     %8.3f ms  %6.1f GB/s of dy\n", E, 2 * I, r, ms,
                double(M) * 2 * I * 2 / ms / 1e6);
    Tensor hb = rand_dev(b, {M, I}, BF, -1, 1, 31), gAd = b.zeros({E, r, I}, F32), dyd = rand_dev(b, {M, H}, BF, -1, 1, 32),
           gBd = b.zeros({E, H, r}, F32);
    ms = median_ms(b, [&] { b.grouped_gemm_wgrad(ub, hb, off, gAd, 1.f, 1.f); });
    std::printf("grouped_gemm_wgrad gA down bf16 %dx%dx%d %8.3f ms\n", E, r, I, ms);
    ms = median_ms(b, [&] { b.grouped_gemm_wgrad(dyd, ub, off, gBd, 1.f, 1.f); });
    std::printf("grouped_gemm_wgrad gB down bf16 %dx%dx%d %8.3f ms\n", E, H, r, ms);
    EXPECT_TRUE(b.all_finite(gB) && b.all_finite(gAd) && b.all_finite(gBd));
  }
  Tensor B = rand_dev(b, {2 * I, r * E}, F32, -0.05f, 0.05f, 26), Bc = b.alloc({E, 2 * I, r}, F32);
  ms = median_ms(b, [&] { b.permute3(B, 2 * I, r, E, 2, 0, 1, Bc); });
  std::printf("permute3 LoRA B %dx%d -> [E, out, r]      %8.3f ms\n", 2 * I, r * E, ms);
  Tensor out = b.alloc({T, H}, BF), w = rand_dev(b, {T, K}, F32, 0, 1, 27);
  ms = median_ms(b, [&] { b.moe_combine(y, sr, w, out); });
  std::printf("moe_combine T=%d K=%d H=%d                %8.3f ms\n", T, K, H, ms);
  {  // dense reference at the gate_up size
    Tensor wd2 = rand_dev(b, {2 * I, H}, BF, -0.05f, 0.05f, 28);
    ms = median_ms(b, [&] { b.gemm(x, false, wd2, true, gu, 1.f, 0.f); });
    std::printf("dense gemm (cuBLAS)   %lldx%dx%d        %8.3f ms  %6.1f TFLOP/s\n", (long long)M, 2 * I, H, ms,
                rate(f_gu, ms));
  }
  EXPECT_TRUE(b.all_finite(gu) && b.all_finite(dx) && b.all_finite(y) && b.all_finite(gA) && b.all_finite(out));
}

// Attention at the Qwen3.5 shape (T=4096 one sequence, nH 8, nKV 2, head_dim 256), forward and backward
// timed separately, on the tensor-core kernels (the FMA kernels take F32 inputs). Causal flops:
// forward 2 products · 2·T²/2·hd·nH, backward 2.5x that (FA2's count: 5 products).
TEST(BackendTiming, DISABLED_AttentionHd256) {
  if (!cuda_backend_available()) GTEST_SKIP();
  // Both kernel policies ("auto": on a Hopper the wgmma forward; "portable": the mma.sync kernels), at the
  // 2B (nH 8, nKV 2) and 9B (nH 16, nKV 4) attention heads.
  for (const std::string kernels : {"auto", "portable"})
    for (const int nH : {8, 16}) {
      auto gpu = make_cuda_backend(0, DType::BF16, kernels);
      Backend& b = *gpu;
      const DType BF = DType::BF16;
      const int T = 4096, nKV = nH / 4, hd = 256;
      SeqLayout s = one_seq(b, T);
      Tensor q = rand_dev(b, {T, nH, hd}, BF, -1, 1, 3), k = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 4),
             v = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 5), dout = rand_dev(b, {T, nH, hd}, BF, -1, 1, 6);
      Tensor o = b.alloc({T, nH, hd}, BF), lse = b.alloc({T, nH}, DType::F32);
      Tensor dq = b.alloc(q.shape, BF), dk = b.alloc(k.shape, BF), dv = b.alloc(v.shape, BF);
      const double flops = 2.0 * 2.0 * double(T) * T / 2 * hd * nH;
      const float scale = 0.0625f;
      const std::string path = "kernels: " + kernels;
      const double f = median_ms(b, [&] { b.attention_fwd(q, k, v, s, scale, o, lse); });
      const double bw = median_ms(b, [&] { b.attention_bwd(dout, q, k, v, o, lse, s, scale, dq, dk, dv); });
      std::printf("attention %-18s T=%d nH=%d nKV=%d hd=%d  fwd %8.3f ms (%6.1f TFLOP/s)  bwd %8.3f ms (%6.1f TFLOP/s)\n",
                  path.c_str(), T, nH, nKV, hd, f, flops / f / 1e9, bw, 2.5 * flops / bw / 1e9);
      EXPECT_TRUE(b.all_finite(o) && b.all_finite(lse) && b.all_finite(dq) && b.all_finite(dk) &&
                  b.all_finite(dv));
    }
}

// Attention at hd 256 with 4096 tokens packed in one row (auto policy): one sequence, 4 x 1024, 8 x 512 and
// ragged lengths (odd tile counts), at the 2B and 9B heads. The dK/dV kernel's clusters share Q / dO tiles only
// between key tiles of one sequence (attention_tile_list.h pairs them). Causal flops as above, per sequence.
TEST(BackendTiming, DISABLED_AttentionHd256Packed) {
  if (!cuda_backend_available()) GTEST_SKIP();
  const std::vector<std::pair<const char*, std::vector<int32_t>>> layouts = {
      {"1x4096", {4096}},
      {"4x1024", {1024, 1024, 1024, 1024}},
      {"8x512", {512, 512, 512, 512, 512, 512, 512, 512}},
      {"ragged", {1000, 700, 1500, 896}}};  // 16, 11, 24, 14 tiles
  auto gpu = make_cuda_backend(0, DType::BF16, "auto");
  Backend& b = *gpu;
  const DType BF = DType::BF16;
  for (const int nH : {8, 16}) {
    const int T = 4096, nKV = nH / 4, hd = 256;
    Tensor q = rand_dev(b, {T, nH, hd}, BF, -1, 1, 3), k = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 4),
           v = rand_dev(b, {T, nKV, hd}, BF, -1, 1, 5), dout = rand_dev(b, {T, nH, hd}, BF, -1, 1, 6);
    Tensor o = b.alloc({T, nH, hd}, BF), lse = b.alloc({T, nH}, DType::F32);
    Tensor dq = b.alloc(q.shape, BF), dk = b.alloc(k.shape, BF), dv = b.alloc(v.shape, BF);
    const float scale = 0.0625f;
    for (const auto& [name, lens] : layouts) {
      SeqLayout s = packed_seqs(b, lens);
      double flops = 0;
      for (int32_t l : lens) flops += 2.0 * 2.0 * double(l) * l / 2 * hd * nH;
      constexpr int kReps = 4;  // launches per timed run
      const double f = median_ms(b, [&] {
        for (int r = 0; r < kReps; ++r) b.attention_fwd(q, k, v, s, scale, o, lse);
      }) / kReps;
      const double bw = median_ms(b, [&] {
        for (int r = 0; r < kReps; ++r) b.attention_bwd(dout, q, k, v, o, lse, s, scale, dq, dk, dv);
      }) / kReps;
      std::printf("attention packed %-7s T=%d nH=%d nKV=%d hd=%d  fwd %8.3f ms (%6.1f TFLOP/s)  bwd %8.3f ms (%6.1f TFLOP/s)\n",
                  name, T, nH, nKV, hd, f, flops / f / 1e9, bw, 2.5 * flops / bw / 1e9);
      EXPECT_TRUE(b.all_finite(o) && b.all_finite(lse) && b.all_finite(dq) && b.all_finite(dk) &&
                  b.all_finite(dv));
    }
  }
}

// Gated DeltaNet core at the training shape (T=8192 as 2 sequences of 4096, HK 16, HV 32, dk = dv = 128),
// forward and backward (which recomputes the forward's chunk quantities), on the tensor-core chunk kernels
// under both kernel policies (`kernels: auto` and `portable`). Per-kernel times: nsys/ncu on this test or
// bench/gdn.
TEST(BackendTiming, DISABLED_GdnChunked) {
  if (!cuda_backend_available()) GTEST_SKIP();
  for (const std::string kernels : {"auto", "portable"}) {
    auto gpu = make_cuda_backend(0, DType::BF16, kernels);
    Backend& b = *gpu;
    const DType BF = DType::BF16;
    const int T = 8192, HK = 16, HV = 32, dk = 128, dv = 128;
    SeqLayout s = one_seq(b, T);
    s.host_cu_seqlens = {0, T / 2, T};
    Tensor hc = host_tensor({3}, DType::I32);
    hc.ptr<int32_t>()[0] = 0, hc.ptr<int32_t>()[1] = T / 2, hc.ptr<int32_t>()[2] = T;
    s.cu_seqlens = b.upload(hc, DType::I32);
    Tensor hp = host_tensor({T}, DType::I32);
    for (int32_t t = 0; t < T; ++t) hp.ptr<int32_t>()[t] = t % (T / 2);
    s.positions = b.upload(hp, DType::I32);
    s.max_seqlen = T / 2;
    Tensor q = rand_dev(b, {T, HK, dk}, BF, -1, 1, 3), k = rand_dev(b, {T, HK, dk}, BF, -1, 1, 4);
    Tensor v = rand_dev(b, {T, HV, dv}, BF, -1, 1, 5), dout = rand_dev(b, {T, HV, dv}, BF, -1, 1, 6);
    Tensor g = rand_dev(b, {T, HV}, DType::F32, -1, 0, 7), beta = rand_dev(b, {T, HV}, BF, 0.05f, 1, 8);
    Tensor o = b.alloc({T, HV, dv}, BF), dq = b.alloc(q.shape, BF), dk_ = b.alloc(k.shape, BF);
    Tensor dv_ = b.alloc(v.shape, BF);
    Tensor dg = b.alloc(g.shape, DType::F32), db = b.alloc(beta.shape, BF);
    const float scale = 1.f / std::sqrt(float(dk));
    std::printf("%s\n", b.name().c_str());
    {
      const std::string path = "kernels: " + kernels;
      const double f = median_ms(b, [&] { b.gdn_fwd(q, k, v, g, beta, s, scale, o); });
      const double bw =
          median_ms(b, [&] { b.gdn_bwd(dout, q, k, v, g, beta, s, scale, dq, dk_, dv_, dg, db); });
      std::printf("gdn %-20s T=%d (2 seqs) HK=%d HV=%d dk=dv=%d  fwd %8.3f ms  bwd %8.3f ms\n", path.c_str(),
                  T, HK, HV, dk, f, bw);
      EXPECT_TRUE(b.all_finite(o) && b.all_finite(dq) && b.all_finite(dk_) && b.all_finite(dv_) &&
                  b.all_finite(dg) && b.all_finite(db));
    }
  }
}

}  // namespace
}  // namespace deltatune::test
