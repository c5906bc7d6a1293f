// Runs the tensor-core GDN chunk kernels (chunk_bwd_mma.cu: state products, intra, WY backward) on the
// host through the emulation of CUDA threads, barriers, ldmatrix and mma.sync in dev/emu/attention (built
// from the PTX ISA fragment definitions), next to the fp32 FMA kernels (chunk_fwd.cu, chunk_bwd.cu,
// emulated the same way) on the same inputs, and compares every output. A development check of fragment
// layouts, masking and tiling without a GPU; not part of the build:
//   g++ -std=c++20 -O2 -w -DDT_ATTN_EMU -I kernels -I dev -I /usr/local/cuda/include \
//       dev/emu/gdn/*.cpp -o /tmp/gdn_emu -lpthread && /tmp/gdn_emu
// (`/tmp/gdn_emu noout`: only the scan without output (the backward's recompute) vs the fused scan;
// `/tmp/gdn_emu b16`: only the prep's bf16 scan operands and the scan that copies them;
// `/tmp/gdn_emu dscan`: only the tensor-core reverse scan's checks;
// `/tmp/gdn_emu vnew`: only the backward's prep from kept chunk-start states;
// `/tmp/gdn_emu half`: only the even-states scan and the backward's prep from half the states and V';
// `/tmp/gdn_emu prep`: only the tensor-core prep vs the FMA prep;
// `/tmp/gdn_emu bwd`: only the tensor-core backward (state products + intra, WY) vs the FMA backward.)
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "emu/gdn/emu_api.h"
#include "gdn/gdn.cuh"

using namespace deltatune::kernels;
using F = std::vector<float>;

// FNV-1a of the values' bits: equal hashes across two builds of a kernel mean bit-identical outputs.
static unsigned long long bits_hash(const F& x) {
  unsigned long long h = 1469598103934665603ull;
  for (float f : x) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return h;
}

static double nmse(const F& got, const F& ref, int* nonfinite) {
  double num = 0, den = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) ++*nonfinite;
    num += double(got[i] - ref[i]) * (got[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / std::max(den, 1e-300);
}

// Seeded uniform(-1, 1) draws and the inputs the checks build from them.
struct Rand {
  std::mt19937 rng;
  std::uniform_real_distribution<float> u{-1.f, 1.f};
  explicit Rand(unsigned seed) : rng(seed) {}
  float operator()() { return u(rng); }
  // rows x n of corr·base + noise (base may be null), each L2-normalised, times scale.
  F normed(int64_t rows, int n, float scale, const F* base = nullptr, float corr = 0.f) {
    F x(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int d = 0; d < n; ++d)
        ss += double(x[r * n + d] = (base ? corr * (*base)[d] : 0.f) + u(rng)) * x[r * n + d];
      for (int d = 0; d < n; ++d) x[r * n + d] = float(scale * x[r * n + d] / std::sqrt(ss + 1e-6));
    }
    return x;
  }
  std::vector<__nv_bfloat16> bf(int64_t n, float lo, float hi) {
    std::vector<__nv_bfloat16> b(n);
    for (auto& x : b) x = __float2bfloat16_rn(lo + (hi - lo) * 0.5f * (u(rng) + 1.f));
    return b;
  }
};

// Chunks of C tokens that never cross a sequence end (the layout launch_gdn_chunk_* take).
struct ChunkList {
  std::vector<int32_t> chunks, off{0};
  int n() const { return int(chunks.size() / 2); }
};
static ChunkList chunk_list(const std::vector<int32_t>& cu, int C) {
  ChunkList l;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int32_t t = cu[n]; t < cu[n + 1]; t += C)
      l.chunks.insert(l.chunks.end(), {t, std::min(C, cu[n + 1] - t)});
    l.off.push_back(int32_t(l.chunks.size() / 2));
  }
  return l;
}

// The core's inputs: normalised q̂ (scaled) and k̂, bf16 v, dO and β in [0.05, 1], log decays in [gmin, 0].
struct Inputs {
  F q, k;    // before the L2 norm (what the tensor-core prep reads)
  F qn, kn;  // after it, exactly as the device computes it (gdn_emu::l2_rows)
  F g;
  std::vector<__nv_bfloat16> v, dout, beta;
  KIn vi() const { return {v.data(), KType::BF16}; }
  KIn di() const { return {dout.data(), KType::BF16}; }
  KIn bi() const { return {beta.data(), KType::BF16}; }
};
static Inputs make_inputs(Rand& u, int64_t T, int64_t HK, int64_t HV, int dk, int dv, float gmin) {
  Inputs in;
  in.q = u.normed(T * HK, dk, 1.f);
  in.k = u.normed(T * HK, dk, 1.f);
  for (F* x : {&in.q, &in.k})  // bf16-exact, as the model's q, k are (the prep's RAW path may read them so)
    for (float& e : *x) e = __bfloat162float(__float2bfloat16_rn(e));
  in.qn = gdn_emu::l2_rows(in.q, 1.f / std::sqrt(float(dk)));
  in.kn = gdn_emu::l2_rows(in.k, 1.f);
  in.v = u.bf(T * HV * dv, -1.f, 1.f);
  in.dout = u.bf(T * HV * dv, -1.f, 1.f);
  in.beta = u.bf(T * HV, 0.05f, 1.f);
  in.g.resize(T * HV);
  for (auto& x : in.g) x = 0.5f * gmin * (u() + 1.f);
  return in;
}

// ---- tensor-core forward prep (chunk_prep_mma.cu) vs the FMA prep (chunk_fwd.cu) ----
// Shapes: partial last chunks, a sequence shorter than a chunk, a 1-token sequence, HV/HK 1 and 2, BF16 and
// F32 values, correlated keys with β near 1 (large A) under weak and strong decay.
// Targets: W, U, M nmse ≤ 2e-5 (bf16 operands); Gc, Tout ≤ 1e-10 (fp32 either way: K̂K̂ᵀ as hi + lo).
static int prep_mma_check() {
  struct Case {
    const char* name;
    std::vector<int32_t> cu;
    int64_t HK, HV;
    bool v_f32;
    int hard;  // 1: correlated keys, β near 1, weak decay; 2: the same with strong decay
  };
  const Case cases[] = {{"2 seqs 64+37, 64+6; HV/HK 2", {0, 101, 171}, 1, 2, false, 0},
                        {"1 seq of 37; HV/HK 1", {0, 37}, 2, 2, false, 0},
                        {"3 seqs 64, 1, 135; F32 v", {0, 64, 65, 200}, 2, 2, true, 0},
                        {"corr. keys, β~1, weak decay", {0, 128, 150}, 1, 2, false, 1},
                        {"corr. keys, β~1, g ~ -3", {0, 100}, 1, 1, false, 2}};
  constexpr int dk = 128, dv = 128, C = 64;
  int fails = 0;
  for (int raw = 0; raw < 2; ++raw)  // raw: q, k in bf16 (the RAW kernel: no hi + lo split of K̂)
    for (const Case& cs : cases) {
      const ChunkList cl = chunk_list(cs.cu, C);
      const int nchunks = cl.n();
      const int64_t T = cs.cu.back(), HK = cs.HK, HV = cs.HV;
      gdn_emu::Shape s{cl.chunks.data(), nchunks, cl.off.data(), int(cs.cu.size() - 1), HK, HV, dk, dv};
      Rand u(7);
      F base(dk);
      for (auto& x : base) x = u();
      auto normed = [&](float scale, float corr) { return u.normed(T * HK, dk, scale, &base, corr); };
      const float qscale = 1.f / std::sqrt(float(dk));
      F q = normed(1.f, 0.f), k = normed(1.f, cs.hard ? 1.5f : 0.f);
      if (raw)
        for (F* x : {&q, &k})
          for (float& e : *x) e = __bfloat162float(__float2bfloat16_rn(e));
      F rq, rk;
      const F qn = gdn_emu::l2_rows(q, qscale, &rq), kn = gdn_emu::l2_rows(k, 1.f, &rk);
      F vf(T * HV * dv), g(T * HV);
      for (auto& x : vf) x = u();
      std::vector<__nv_bfloat16> vb(vf.size()), bb(T * HV);
      for (size_t i = 0; i < vf.size(); ++i) vb[i] = __float2bfloat16_rn(vf[i]);
      for (auto& x : bb)
        x = __float2bfloat16_rn(cs.hard ? 0.9f + 0.05f * (u() + 1.f) : 0.05f + 0.475f * (u() + 1.f));
      for (auto& x : g) x = (cs.hard == 2 ? -3.f : cs.hard == 1 ? -0.01f : -0.5f) * (u() + 1.f);
      const KIn vi = cs.v_f32 ? KIn{vf.data(), KType::F32} : KIn{vb.data(), KType::BF16};
      const KIn bi{bb.data(), KType::BF16};
      const float nan = std::nanf("");
      struct Out {
        F W, U, M, Gc, Tm;
      };
      auto run = [&](bool mma) {
        Out r{F(T * HV * dk, nan), F(T * HV * dv, nan), F(int64_t(nchunks) * HV * C * C, nan), F(T * HV, nan),
              F(int64_t(nchunks) * HV * C * C, nan)};
        if (mma) {  // with the L2 norm's outputs, which must equal the host's bit for bit
          F qn2(qn.size(), nan), kn2(kn.size(), nan), rq2(rq.size(), nan), rk2(rk.size(), nan);
          GdnNormOut no;
          if (!raw) no.qn = qn2.data(), no.kn = kn2.data();  // the RAW kernel writes ρ only
          no.rq = rq2.data(), no.rk = rk2.data();
          gdn_emu::prep_mma(s, q.data(), k.data(), qscale, &no, vi, g.data(), bi, r.W.data(), r.U.data(),
                            r.M.data(), r.Gc.data(), r.Tm.data(), nullptr, nullptr, nullptr, 0, raw);
          const bool same = (raw || (!std::memcmp(qn2.data(), qn.data(), 4 * qn.size()) &&
                                     !std::memcmp(kn2.data(), kn.data(), 4 * kn.size()))) &&
                            !std::memcmp(rq2.data(), rq.data(), 4 * rq.size()) &&
                            !std::memcmp(rk2.data(), rk.data(), 4 * rk.size());
          std::printf("  L2 norm outputs (q-hat, k-hat, rho) bit-identical to the host's: %s\n",
                      same ? "yes" : "NO  FAIL");
          fails += !same;
        } else
          gdn_emu::prep(s, qn.data(), kn.data(), vi, g.data(), bi, r.W.data(), r.U.data(), r.M.data(),
                        r.Gc.data(), r.Tm.data());
        return r;
      };
      const Out ref = run(false), got = run(true);
      double tmax = 0;  // largest off-diagonal |T_ij|: how far from the identity the solve goes
      for (size_t p = 0; p < ref.Tm.size(); ++p)
        if ((p / C) % C != p % C) tmax = std::max(tmax, double(std::fabs(ref.Tm[p])));
      std::printf("prep_mma%s: %s (T %lld, %d chunks, HK %lld, HV %lld; max |T_ij|, i != j: %.3g)\n",
                  raw ? " (bf16 q, k)" : "", cs.name, (long long)T, nchunks, (long long)HK, (long long)HV,
                  tmax);
      auto cmp = [&](const char* name, const F& a, const F& b, double tol) {
        int bad = 0;
        const double e = nmse(a, b, &bad);
        const bool fail = !(e <= tol) || bad;
        std::printf("  %-6s nmse %.3e nonfinite %d bits %016llx%s\n", name, e, bad, bits_hash(a),
                    fail ? "  FAIL" : "");
        fails += fail;
      };
      cmp("W", got.W, ref.W, 2e-5);
      cmp("U", got.U, ref.U, 2e-5);
      cmp("M", got.M, ref.M, 2e-5);
      cmp("Gc", got.Gc, ref.Gc, 1e-10);
      cmp("Tout", got.Tm, ref.Tm, 1e-10);
    }
  std::printf("prep_mma %s\n", fails ? "FAIL" : "OK");
  return fails;
}

// ---- tensor-core reverse state scan (chunk_dscan_mma.cu) vs the FMA dscan kernel
// ---------------------------- Shapes: partial last chunks, sequences shorter than a chunk, several
// sequences, HV/HK 1 and 2, slow decays (dS accumulates over many chunks) and the default fast ones. dh and
// dvn nmse target 2e-5.
static int dscan_mma_checks() {
  constexpr int dk = 128, dv = 128, C = 64;
  struct Case {
    const char* name;
    std::vector<int32_t> cu;
    int64_t HK, HV;
    float gmin;  // log decays uniform in [gmin, 0]
  };
  const std::vector<Case> cases = {
      {"2 seqs 101+70, HV/HK 2, g>=-1", {0, 101, 171}, 1, 2, -1.f},
      {"2 seqs 101+70, HV/HK 2, g>=-0.05", {0, 101, 171}, 1, 2, -0.05f},
      {"1 seq of 5 tokens, HV/HK 1", {0, 5}, 2, 2, -0.1f},
      {"3 seqs 200+3+127, HV/HK 1, g>=-0.02", {0, 200, 203, 330}, 1, 1, -0.02f},
      {"1 seq 640 (10 chunks), g>=-0.01", {0, 640}, 1, 1, -0.01f},
  };
  int fails = 0;
  for (const Case& cs : cases) {
    const ChunkList cl = chunk_list(cs.cu, C);
    const int nchunks = cl.n(), nseq = int(cs.cu.size() - 1);
    const int64_t T = cs.cu.back(), HK = cs.HK, HV = cs.HV;
    gdn_emu::Shape s{cl.chunks.data(), nchunks, cl.off.data(), nseq, HK, HV, dk, dv};
    Rand u(7);
    const Inputs in = make_inputs(u, T, HK, HV, dk, dv, cs.gmin);
    const F &qn = in.qn, &kn = in.kn, &g = in.g;
    const KIn vi = in.vi(), di = in.di(), bi = in.bi();
    F W(T * HV * dk), U(T * HV * dv), M(int64_t(nchunks) * HV * C * C), Gc(T * HV), Tm(M.size());
    gdn_emu::prep(s, qn.data(), kn.data(), vi, g.data(), bi, W.data(), U.data(), M.data(), Gc.data(),
                  Tm.data());
    F dh(int64_t(nchunks) * HV * dk * dv), dvn(T * HV * dv);
    gdn_emu::dscan(s, di, qn.data(), kn.data(), W.data(), M.data(), Gc.data(), dh.data(), dvn.data());
    std::printf("dscan_mma: %s (T %lld, %d chunks, HK %lld, HV %lld)\n", cs.name, (long long)T, nchunks,
                (long long)HK, (long long)HV);
    struct Variant {
      int bv;
      bool lo_s, lo_v;
      bool checked;         // the kernel's configuration (dh/dvn held to the target); others are printed only
      bool f32_do = false;  // dO passed as F32 (the kernel's non-bf16 path; same values)
    };
    F dout32(in.dout.size());
    for (size_t i = 0; i < dout32.size(); ++i) dout32[i] = __bfloat162float(in.dout[i]);
    // What the rest of the (FMA) backward makes of dh and dvn: dg is the cancelling sum to watch.
    F states(dh.size()), vnew(T * HV * dv), o(T * HV * dv);
    gdn_emu::scan(s, qn.data(), kn.data(), W.data(), U.data(), M.data(), Gc.data(),
                  KOut{o.data(), KType::F32}, states.data(), vnew.data());
    struct Grads {
      F dqh, dkh, dv, dg, dbeta;
    };
    auto rest = [&](const F& dh_in, const F& dvn_in) {
      Grads r{F(T * HV * dk), F(T * HV * dk), F(T * HV * dv), F(T * HV), F(T * HV)};
      F dW = W, gsum(int64_t(nchunks) * HV);
      gdn_emu::state_grad(s, di, kn.data(), Gc.data(), states.data(), dh_in.data(), vnew.data(),
                          dvn_in.data(), r.dqh.data(), r.dkh.data(), dW.data(), gsum.data());
      gdn_emu::intra_grad(s, di, qn.data(), kn.data(), Gc.data(), vnew.data(), gsum.data(), r.dqh.data(),
                          r.dkh.data(), r.dg.data());
      gdn_emu::wy_grad(s, kn.data(), vi, bi, Gc.data(), Tm.data(), dW.data(), dvn_in.data(), r.dkh.data(),
                       KOut{r.dv.data(), KType::F32}, r.dg.data(), r.dbeta.data());
      return r;
    };
    const Grads gref = rest(dh, dvn);
    for (const Variant& vr :
         {Variant{64, false, false, true}, Variant{32, false, false, true}, Variant{16, false, false, true},
          Variant{64, false, false, true, true}, Variant{64, true, true, false},
          Variant{64, false, true, false}, Variant{64, true, false, false}}) {
      const float nan = std::nanf("");
      F dh2(dh.size(), nan), dvn2(dvn.size(), nan);
      const KIn dov = vr.f32_do ? KIn{dout32.data(), KType::F32} : di;
      gdn_emu::dscan_mma(s, vr.bv, vr.lo_s, vr.lo_v, dov,
                         GdnQK{{qn.data(), KType::F32}, {kn.data(), KType::F32}}, W.data(), M.data(),
                         Gc.data(), dh2.data(), dvn2.data());
      int bad_h = 0, bad_v = 0, bad = 0;
      const double eh = nmse(dh2, dh, &bad_h), ev = nmse(dvn2, dvn, &bad_v);
      const bool fail = vr.checked && (!(eh <= 2e-5) || !(ev <= 2e-5) || bad_h || bad_v);
      std::printf("  bv %d lo(dS) %d lo(dV') %d%s: dh nmse %.3e  dvn nmse %.3e  nonfinite %d/%d%s\n", vr.bv,
                  vr.lo_s, vr.lo_v, vr.f32_do ? " F32 dO" : "", eh, ev, bad_h, bad_v, fail ? "  FAIL" : "");
      fails += fail;
      if (vr.checked && !vr.lo_s && !vr.lo_v) {  // the portable policy's one-set variant: the same bits
        F dh3(dh.size(), nan), dvn3(dvn.size(), nan);
        gdn_emu::dscan_mma(s, vr.bv, false, false, dov,
                           GdnQK{{qn.data(), KType::F32}, {kn.data(), KType::F32}}, W.data(), M.data(),
                           Gc.data(), dh3.data(), dvn3.data(), true);
        const bool same = std::memcmp(dh2.data(), dh3.data(), dh2.size() * 4) == 0 &&
                          std::memcmp(dvn2.data(), dvn3.data(), dvn2.size() * 4) == 0;
        std::printf("    one set of operands (portable): %s the two-set kernel%s\n",
                    same ? "bit-identical to" : "DIFFERS from", same ? "" : "  FAIL");
        fails += !same;
        // W and M as the forward prep's operand images (a recompute with output on Hopper): the same bits
        F dh4(dh.size(), nan), dvn4(dvn.size(), nan);
        gdn_emu::dscan_mma(s, vr.bv, false, false, dov,
                           GdnQK{{qn.data(), KType::F32}, {kn.data(), KType::F32}}, W.data(), M.data(),
                           Gc.data(), dh4.data(), dvn4.data(), false, true);
        const bool same_img = std::memcmp(dh2.data(), dh4.data(), dh2.size() * 4) == 0 &&
                              std::memcmp(dvn2.data(), dvn4.data(), dvn2.size() * 4) == 0;
        std::printf("    W, M as operand images: %s the row-major operands%s\n",
                    same_img ? "bit-identical to" : "DIFFERS from", same_img ? "" : "  FAIL");
        fails += !same_img;
      }
      if (vr.bv != 64 || vr.f32_do) continue;
      const Grads gg = rest(dh2, dvn2);
      std::printf("    then FMA bwd: dg %.3e  dbeta %.3e  dqh %.3e  dkh %.3e  dv %.3e\n",
                  nmse(gg.dg, gref.dg, &bad), nmse(gg.dbeta, gref.dbeta, &bad), nmse(gg.dqh, gref.dqh, &bad),
                  nmse(gg.dkh, gref.dkh, &bad), nmse(gg.dv, gref.dv, &bad));
    }
    // q, k before the norm as BF16 with ρ (the backend's path for bf16 inputs) must give the bits of the F32
    // q̂, k̂ that the prep forms from the same bf16 values.
    for (int bv : {64, 16}) {
      std::vector<__nv_bfloat16> qb(in.q.size()), kb(in.k.size());
      F qw(qb.size()), kw(kb.size()), rq, rk;
      for (size_t i = 0; i < qb.size(); ++i) {
        qb[i] = __float2bfloat16_rn(in.q[i]), kb[i] = __float2bfloat16_rn(in.k[i]);
        qw[i] = __bfloat162float(qb[i]), kw[i] = __bfloat162float(kb[i]);
      }
      const float qscale = 1.f / std::sqrt(float(dk));
      const F qn16 = gdn_emu::l2_rows(qw, qscale, &rq), kn16 = gdn_emu::l2_rows(kw, 1.f, &rk);
      const float nan = std::nanf("");
      F dhA(dh.size(), nan), dvnA(dvn.size(), nan), dhB(dh.size(), nan), dvnB(dvn.size(), nan);
      gdn_emu::dscan_mma(s, bv, false, false, di, GdnQK{{qn16.data(), KType::F32}, {kn16.data(), KType::F32}},
                         W.data(), M.data(), Gc.data(), dhA.data(), dvnA.data());
      gdn_emu::dscan_mma(
          s, bv, false, false, di,
          GdnQK{{qb.data(), KType::BF16}, {kb.data(), KType::BF16}, rq.data(), rk.data(), qscale}, W.data(),
          M.data(), Gc.data(), dhB.data(), dvnB.data());
      const bool same = std::memcmp(dhA.data(), dhB.data(), dhA.size() * 4) == 0 &&
                        std::memcmp(dvnA.data(), dvnB.data(), dvnA.size() * 4) == 0;
      std::printf("  bv %d bf16 q, k with rho: %s the F32 q-hat, k-hat path%s\n", bv,
                  same ? "bit-identical to" : "DIFFERS from", same ? "" : "  FAIL");
      fails += !same;
    }
  }
  return fails;
}
// ---- forward-scan checks: their shapes, and one shape's inputs with the FMA forward's outputs (the
// reference)
struct ScanShape {
  const char* name;
  std::vector<int32_t> cu;
  int64_t HK, HV;
  float gmin;
};
static const std::vector<ScanShape>& scan_shapes() {
  static const std::vector<ScanShape> shapes = {
      {"2 seqs 101+70, HV/HK 2, g>=-1", {0, 101, 171}, 1, 2, -1.f},
      {"1 seq of 5 tokens, HV/HK 1", {0, 5}, 2, 2, -0.1f},
      {"3 seqs 200+3+127, HV/HK 2, g>=-0.02", {0, 200, 203, 330}, 1, 2, -0.02f},
  };
  return shapes;
}
struct ScanRef {
  static constexpr int dk = 128, dv = 128, C = 64;
  ChunkList cl;  // before s: s points into it
  int nchunks;
  int64_t T, HK, HV;
  gdn_emu::Shape s;
  Inputs in;
  F W, U, M, Gc, Tm, o, states, vnew;
  ScanRef(const ScanShape& cs, unsigned seed)
      : cl(chunk_list(cs.cu, C)),
        nchunks(cl.n()),
        T(cs.cu.back()),
        HK(cs.HK),
        HV(cs.HV),
        s{cl.chunks.data(), nchunks, cl.off.data(), int(cs.cu.size() - 1), HK, HV, dk, dv},
        W(T * HV * dk),
        U(T * HV * dv),
        M(int64_t(nchunks) * HV * C * C),
        Gc(T * HV),
        Tm(M.size()),
        o(T * HV * dv),
        states(int64_t(nchunks) * HV * dk * dv),
        vnew(T * HV * dv) {
    Rand u(seed);
    in = make_inputs(u, T, HK, HV, dk, dv, cs.gmin);
    gdn_emu::prep(s, in.qn.data(), in.kn.data(), in.vi(), in.g.data(), in.bi(), W.data(), U.data(), M.data(),
                  Gc.data(), Tm.data());
    gdn_emu::scan(s, in.qn.data(), in.kn.data(), W.data(), U.data(), M.data(), Gc.data(),
                  KOut{o.data(), KType::F32}, states.data(), vnew.data());
  }
  ScanRef(const ScanRef&) = delete;
  ScanRef& operator=(const ScanRef&) = delete;
};

// ---- the scan without output (chunk_scan_mma.cu with o null: the backward's recompute): states and V' vs
// the FMA forward (nmse target 2e-5) and vs the scan with output (the same bf16 roundings: expected equal).
// Every scan variant (bv 32/16, prefetch or not, on the fp32 scratch; bv 64 (prefetch, 8 warps) on the
// tensor-core prep's bf16 operands, its only inputs).
static int no_output_scan_checks() {
  using bf = __nv_bfloat16;
  int fails = 0;
  for (const ScanShape& cs : scan_shapes()) {
    const ScanRef r(cs, 3);
    const gdn_emu::Shape& s = r.s;
    const Inputs& in = r.in;
    const F &o = r.o, &states = r.states, &vnew = r.vnew;
    std::printf("scan without output: %s (T %lld, %d chunks, HK %lld, HV %lld)\n", cs.name, (long long)r.T,
                r.nchunks, (long long)r.HK, (long long)r.HV);
    // The tensor-core prep's fp32 scratch and bf16 operands (bv 64).
    constexpr int dk = ScanRef::dk;
    const bf bnan = __float2bfloat16_rn(std::nanf(""));
    std::vector<bf> Wb(r.W.size(), bnan), Kb(r.W.size(), bnan), Qb(r.T * r.HK * dk, bnan),
        Mb(r.M.size(), bnan);
    GdnScanBf16 b16{Wb.data(), Kb.data(), Qb.data(), Mb.data()};
    F W2(r.W.size()), U2(r.U.size()), M2(r.M.size()), Gc2(r.Gc.size()), Tm2(r.Tm.size());
    gdn_emu::prep_mma(s, in.q.data(), in.k.data(), 1.f / std::sqrt(float(dk)), nullptr, in.vi(), in.g.data(),
                      in.bi(), W2.data(), U2.data(), M2.data(), Gc2.data(), Tm2.data(), &b16);
    for (int variant = 0; variant < 5; ++variant) {
      const bool v64 = variant == 4;
      const int bv = v64 ? 64 : variant & 1 ? 16 : 32;
      const bool pf = variant >= 2;
      const F &W = v64 ? W2 : r.W, &U = v64 ? U2 : r.U, &M = v64 ? M2 : r.M, &Gc = v64 ? Gc2 : r.Gc;
      const GdnScanBf16* ops = v64 ? &b16 : nullptr;
      const float nan = std::nanf("");
      F of(o.size(), nan), stf(states.size(), nan), vnf(vnew.size(), nan);  // fused
      F sts(states.size(), nan), vns(vnew.size(), nan);                     // without output
      gdn_emu::scan_mma(s, bv, pf, in.qn.data(), in.kn.data(), W.data(), U.data(), M.data(), Gc.data(),
                        KOut{of.data(), KType::F32}, stf.data(), vnf.data(), ops);
      gdn_emu::scan_mma(s, bv, pf, in.qn.data(), in.kn.data(), W.data(), U.data(), M.data(), Gc.data(),
                        KOut{}, sts.data(), vns.data(), ops);
      for (auto [name, got, fused, ref] :
           {std::tuple{"states", &sts, &stf, &states}, {"vnew", &vns, &vnf, &vnew}}) {
        int bad = 0, bad_f = 0;
        const double e = nmse(*got, *ref, &bad), ef = nmse(*got, *fused, &bad_f);
        double dmax = 0;
        for (size_t i = 0; i < got->size(); ++i)
          dmax = std::max(dmax, double(std::fabs((*got)[i] - (*fused)[i])));
        const bool fail = !(e <= 2e-5) || !(ef <= 1e-12) || bad;
        std::printf(
            "  bv %2d pf %d %-7s nmse vs FMA %.3e  vs fused mma %.3e (max |diff| %.2e)  nonfinite %d%s\n", bv,
            int(pf), name, e, ef, dmax, bad, fail ? "  FAIL" : "");
        fails += fail;
      }
    }
  }
  return fails;
}

// ---- the prep's bf16 scan operands (GdnScanBf16) and the scan that copies them into its tiles
// ---------------- The operands must equal the host's rounding of the prep's fp32 outputs (K̂ scaled by
// e^{G_last − G_i} from Gc); the scan reading them must give o, states and V' bit-identical to the
// fp32-staging scan on the same prep outputs (every variant: bv 32/16, prefetch or not, with and without
// output; bv 64, prefetching (its only form, 8 warps), with and without output, vs the fp32-staging bv 32
// with prefetch), and so within nmse 2e-5 of the FMA forward.
static int b16_scan_checks() {
  using bf = __nv_bfloat16;
  constexpr int dk = ScanRef::dk, C = ScanRef::C;
  auto bits = [](bf x) {
    uint16_t u;
    std::memcpy(&u, &x, 2);
    return u;
  };
  int fails = 0;
  for (int raw = 0; raw < 2; ++raw)  // raw: q, k passed as bf16 (the prep's RAW kernel)
    for (const ScanShape& cs : scan_shapes()) {
      ScanRef r(cs, 5);
      const gdn_emu::Shape& s = r.s;
      const Inputs& in = r.in;
      const ChunkList& cl = r.cl;
      const int nchunks = r.nchunks;
      const int64_t T = r.T, HK = r.HK, HV = r.HV;
      F &W = r.W, &U = r.U, &M = r.M, &Gc = r.Gc, &Tm = r.Tm;
      const F &o = r.o, &states = r.states, &vnew = r.vnew;
      std::printf("bf16 scan operands%s: %s (T %lld, %d chunks, HK %lld, HV %lld)\n",
                  raw ? " (bf16 q, k)" : "", cs.name, (long long)T, nchunks, (long long)HK, (long long)HV);
      // Tensor-core prep with the bf16 operands (NaN where not written).
      const bf bnan = __float2bfloat16_rn(std::nanf(""));
      std::vector<bf> Wb(T * HV * dk, bnan), Kb(T * HV * dk, bnan), Qb(T * HK * dk, bnan), Mb(M.size(), bnan);
      GdnScanBf16 b16{Wb.data(), Kb.data(), Qb.data(), Mb.data()};
      gdn_emu::prep_mma(s, in.q.data(), in.k.data(), 1.f / std::sqrt(float(dk)), nullptr, in.vi(),
                        in.g.data(), in.bi(), W.data(), U.data(), M.data(), Gc.data(), Tm.data(), &b16,
                        nullptr, nullptr, 0, raw);
      {
        int64_t bad_w = 0, bad_k = 0, bad_q = 0, bad_m = 0;
        for (int ch = 0; ch < nchunks; ++ch) {
          const int64_t t0 = cl.chunks[2 * ch];
          const int len = cl.chunks[2 * ch + 1];
          for (int64_t h = 0; h < HV; ++h) {
            const int64_t hk = h / (HV / HK);
            const float gl = Gc[(t0 + len - 1) * HV + h];
            for (int i = 0; i < len; ++i) {
              const float dc = std::exp(gl - Gc[(t0 + i) * HV + h]);
              for (int d = 0; d < dk; ++d) {
                const int64_t at = ((t0 + i) * HV + h) * dk + d, aq = ((t0 + i) * HK + hk) * dk + d;
                bad_w += bits(Wb[at]) != bits(__float2bfloat16_rn(W[at]));
                bad_k += bits(Kb[at]) != bits(__float2bfloat16_rn(in.kn[aq] * dc));
                bad_q += bits(Qb[aq]) != bits(__float2bfloat16_rn(in.qn[aq]));
              }
            }
            for (int e = 0; e < C * C; ++e) {
              const int64_t at = (int64_t(ch) * HV + h) * C * C + e;
              bad_m += bits(Mb[at]) != bits(__float2bfloat16_rn(M[at]));
            }
          }
        }
        const bool fail = bad_w || bad_k || bad_q || bad_m;
        std::printf("  prep operands vs host rounding: mismatches W %lld Kd %lld Q %lld M %lld%s\n",
                    (long long)bad_w, (long long)bad_k, (long long)bad_q, (long long)bad_m,
                    fail ? "  FAIL" : "");
        fails += fail;
      }
      for (int variant = 0; variant < 10; ++variant) {
        const bool v64 = variant >= 8;  // 8, 9: bv 64 with / without output
        const int bv = v64 ? 64 : variant & 1 ? 16 : 32, bv_ref = v64 ? 32 : bv;
        const bool pf = v64 || (variant & 2), with_o = v64 ? variant == 8 : !(variant & 4);
        const float nan = std::nanf("");
        F o1(o.size(), nan), st1(states.size(), nan), vn1(vnew.size(), nan);  // fp32 staging
        F o2(o.size(), nan), st2(states.size(), nan), vn2(vnew.size(), nan);  // bf16 operands
        const KOut ko1 = with_o ? KOut{o1.data(), KType::F32} : KOut{},
                   ko2 = with_o ? KOut{o2.data(), KType::F32} : KOut{};
        gdn_emu::scan_mma(s, bv_ref, pf, in.qn.data(), in.kn.data(), W.data(), U.data(), M.data(), Gc.data(),
                          ko1, st1.data(), vn1.data());
        gdn_emu::scan_mma(s, bv, pf, in.qn.data(), in.kn.data(), W.data(), U.data(), M.data(), Gc.data(), ko2,
                          st2.data(), vn2.data(), &b16);
        std::vector<std::tuple<const char*, F*, F*, const F*>> outs = {{"states", &st2, &st1, &states},
                                                                       {"vnew", &vn2, &vn1, &vnew}};
        if (with_o) outs.insert(outs.begin(), {"o", &o2, &o1, &o});
        for (auto [name, got, f32, ref] : outs) {
          int bad = 0;
          const double e = nmse(*got, *ref, &bad);
          int64_t ndiff = 0;
          for (size_t i = 0; i < got->size(); ++i) ndiff += std::memcmp(&(*got)[i], &(*f32)[i], 4) != 0;
          const bool fail = !(e <= 2e-5) || ndiff || bad;
          std::printf(
              "  bv %2d pf %d out %d %-7s nmse vs FMA %.3e  bits differing from fp32 staging %lld  nonfinite "
              "%d%s\n",
              bv, int(pf), int(with_o), name, e, (long long)ndiff, bad, fail ? "  FAIL" : "");
          fails += fail;
        }
      }
    }
  return fails;
}

// ---- the backward's prep with the forward's chunk-start states and bf16 T kept (V' chunk-parallel instead
// of a scan, no solve) ------ V' from the prep (U − bf16(W)·S with the kept bf16 S, W and U from bf16(T)) vs
// the scan's V' (fp32 T: differences of the order of T's bf16 rounding) and vs the FMA forward (nmse target
// 2e-5); the prep's bf16 M and Gc must not change with the mode, its W only by T's rounding.
static int vnew_prep_checks() {
  using bf = __nv_bfloat16;
  int fails = 0;
  for (int raw = 0; raw < 2; ++raw)  // raw: q, k passed as bf16 (the prep's RAW kernel)
    for (const ScanShape& cs : scan_shapes()) {
      ScanRef r(cs, 7);
      const gdn_emu::Shape& s = r.s;
      const Inputs& in = r.in;
      const int64_t T = r.T, HK = r.HK, HV = r.HV;
      constexpr int dk = ScanRef::dk;
      std::printf("prep with kept states%s: %s (T %lld, %d chunks, HK %lld, HV %lld)\n",
                  raw ? " (bf16 q, k)" : "", cs.name, (long long)T, r.nchunks, (long long)HK, (long long)HV);
      const bf bnan = __float2bfloat16_rn(std::nanf(""));
      auto bf16_set = [&] {
        return std::array<std::vector<bf>, 5>{
            std::vector<bf>(T * HV * dk, bnan), std::vector<bf>(T * HV * dk, bnan),
            std::vector<bf>(T * HK * dk, bnan), std::vector<bf>(r.M.size(), bnan),
            std::vector<bf>(r.M.size(), bnan)};
      };
      auto fw = bf16_set(), bw = bf16_set();
      GdnScanBf16 b16f{fw[0].data(), fw[1].data(), nullptr, fw[3].data(), fw[4].data()};
      GdnScanBf16 b16b{bw[0].data(), nullptr, nullptr, bw[3].data(), nullptr, fw[4].data()};
      F U(r.U.size()), Gc(r.Gc.size()), Gc2(r.Gc.size());
      const float nan = std::nanf("");
      F states(r.states.size(), nan), vscan(r.vnew.size(), nan), vprep(r.vnew.size(), nan);
      const float qscale = 1.f / std::sqrt(float(dk));
      gdn_emu::prep_mma(s, in.q.data(), in.k.data(), qscale, nullptr, in.vi(), in.g.data(), in.bi(), nullptr,
                        U.data(), nullptr, Gc.data(), nullptr, &b16f, nullptr, nullptr, 0, raw);
      gdn_emu::scan_mma(s, 32, false, in.qn.data(), in.kn.data(), nullptr, U.data(), nullptr, Gc.data(),
                        KOut{}, states.data(), vscan.data(), &b16f);
      gdn_emu::prep_mma(s, in.q.data(), in.k.data(), qscale, nullptr, in.vi(), in.g.data(), in.bi(), nullptr,
                        nullptr, nullptr, Gc2.data(), nullptr, &b16b, states.data(), vprep.data(), T, raw);
      int64_t changed = 0;
      for (size_t i = 0; i < fw[3].size(); ++i) changed += std::memcmp(&fw[3][i], &bw[3][i], 2) != 0;
      changed += std::memcmp(Gc.data(), Gc2.data(), Gc.size() * 4) != 0;
      auto widen = [](const std::vector<bf>& x) {
        F y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
        return y;
      };
      int bad = 0, bad2 = 0, bad3 = 0;
      const double e_fma = nmse(vprep, r.vnew, &bad), e_scan = nmse(vprep, vscan, &bad2);
      const double e_w = nmse(widen(bw[0]), widen(fw[0]), &bad3);
      const bool fail = !(e_fma <= 2e-5) || !(e_scan <= 2e-5) || !(e_w <= 1e-5) || bad || bad3 || changed;
      std::printf(
          "  vnew nmse vs FMA %.3e, vs the scan's %.3e; W vs the forward's %.3e; M/Gc changed %lld%s\n",
          e_fma, e_scan, e_w, (long long)changed, fail ? "  FAIL" : "");
      fails += fail;
    }
  return fails;
}

// ---- half states (GdnHalfStates): the forward scan keeping the even chunks' states only, and the backward's
// prep forming the odd ones from them and the kept V' ------ the even-only scan's states and V' must equal the
// full scan's bit for bit; the prep's odd states vs the FMA forward's (nmse target 2e-5: they carry the bf16
// roundings of the kept S_c and V'_c once more than the scan's own), zeros exactly where a sequence starts;
// its W and M as the prep's without half states (W vs the forward's ≤ 1e-5, M bit for bit).
static int half_states_checks() {
  using bf = __nv_bfloat16;
  int fails = 0;
  for (const ScanShape& cs : scan_shapes()) {
    ScanRef r(cs, 9);
    const gdn_emu::Shape& s = r.s;
    const Inputs& in = r.in;
    const int64_t T = r.T, HK = r.HK, HV = r.HV;
    const int nch = r.nchunks;
    constexpr int dk = ScanRef::dk;
    const int64_t mat = int64_t(dk) * dk;
    std::printf("half states: %s (T %lld, %d chunks, HK %lld, HV %lld)\n", cs.name, (long long)T, nch,
                (long long)HK, (long long)HV);
    const bf bnan = __float2bfloat16_rn(std::nanf(""));
    std::vector<bf> Wf(T * HV * dk, bnan), Kf(T * HV * dk, bnan), Mf(r.M.size(), bnan), Tf(r.M.size(), bnan);
    std::vector<bf> Wb(T * HV * dk, bnan), Mb(r.M.size(), bnan);
    GdnScanBf16 b16f{Wf.data(), Kf.data(), nullptr, Mf.data(), Tf.data()};
    const float nan = std::nanf(""), qscale = 1.f / std::sqrt(float(dk));
    F U(r.U.size()), Gc(r.Gc.size()), Gc2(r.Gc.size());
    gdn_emu::prep_mma(s, in.q.data(), in.k.data(), qscale, nullptr, in.vi(), in.g.data(), in.bi(), nullptr,
                      U.data(), nullptr, Gc.data(), nullptr, &b16f, nullptr, nullptr, 0, true);
    F st_all(r.states.size(), nan), vn_all(r.vnew.size(), nan);
    F st_even(r.states.size(), nan), vn_even(r.vnew.size(), nan);
    gdn_emu::scan_mma(s, 32, false, in.qn.data(), in.kn.data(), nullptr, U.data(), nullptr, Gc.data(), KOut{},
                      st_all.data(), vn_all.data(), &b16f);
    GdnScanBf16 b16e = b16f;
    b16e.states_even = true;
    gdn_emu::scan_mma(s, 32, false, in.qn.data(), in.kn.data(), nullptr, U.data(), nullptr, Gc.data(), KOut{},
                      st_even.data(), vn_even.data(), &b16e);
    int64_t scan_diff = std::memcmp(vn_all.data(), vn_even.data(), vn_all.size() * 4) != 0;
    for (int c = 0; c < nch; c += 2)
      scan_diff += std::memcmp(&st_all[c * HV * mat], &st_even[(c / 2) * HV * mat], HV * mat * 4) != 0;
    // The backward's prep with the kept T, the even states and V'.
    GdnScanBf16 b16b{Wb.data(), nullptr, nullptr, Mb.data(), nullptr, Tf.data()};
    F odd(std::max<int64_t>(nch / 2, 1) * HV * mat, nan);  // never empty: its pointer selects the variant
    gdn_emu::prep_mma(s, in.q.data(), in.k.data(), qscale, nullptr, in.vi(), in.g.data(), in.bi(), nullptr,
                      nullptr, nullptr, Gc2.data(), nullptr, &b16b, st_even.data(), nullptr, T, true,
                      vn_all.data(), odd.data());
    F got, ref;  // the odd chunks that continue a sequence
    int64_t zero_bad = 0;
    for (int c = 1; c < nch; c += 2) {
      bool first = false;
      for (int n = 0; n < s.nseq; ++n) first |= s.chunk_off[n] == c;
      for (int64_t e = 0; e < HV * mat; ++e) {
        const float x = odd[(c / 2) * HV * mat + e];
        if (first) zero_bad += x != 0.f;
        else got.push_back(x), ref.push_back(r.states[c * HV * mat + e]);
      }
    }
    int64_t mchanged = 0;
    for (size_t i = 0; i < Mf.size(); ++i) mchanged += std::memcmp(&Mf[i], &Mb[i], 2) != 0;
    mchanged += std::memcmp(Gc.data(), Gc2.data(), Gc.size() * 4) != 0;
    auto widen = [](const std::vector<bf>& x) {
      F y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
      return y;
    };
    int bad = 0, bad2 = 0;
    const double e_odd = got.empty() ? 0.0 : nmse(got, ref, &bad), e_w = nmse(widen(Wb), widen(Wf), &bad2);
    // For scale: the scan's own (bf16) states at the same chunks vs the FMA forward's.
    F own;
    for (int c = 1; c < nch; c += 2)
      for (int64_t e = 0; e < HV * mat; ++e) own.push_back(st_all[c * HV * mat + e]);
    int bad3 = 0;
    F ref_all;
    for (int c = 1; c < nch; c += 2)
      for (int64_t e = 0; e < HV * mat; ++e) ref_all.push_back(r.states[c * HV * mat + e]);
    const double e_own = own.empty() ? 0.0 : nmse(own, ref_all, &bad3);
    const bool fail = scan_diff || zero_bad || mchanged || bad || bad2 || !(e_odd <= 2e-5) || !(e_w <= 1e-5);
    std::printf("  even-only scan differs %lld; odd states nmse vs FMA %.3e (the scan's own %.3e, %zu values), "
                "non-zero at sequence starts %lld; W vs the forward's %.3e; M/Gc changed %lld%s\n",
                (long long)scan_diff, e_odd, e_own, got.size(), (long long)zero_bad, e_w, (long long)mchanged,
                fail ? "  FAIL" : "");
    fails += fail;
  }
  return fails;
}

// ---- tensor-core backward (chunk_bwd_mma.cu) vs the FMA backward (chunk_bwd.cu)
// ----------------------------
namespace bwd_mma {
struct In {  // one shape's inputs and forward recompute (FMA kernels), as launch_gdn_chunk_bwd gets them
  gdn_emu::Shape s;
  int64_t T;
  const float *qn, *kn, *Gc, *Tm, *W, *states, *vnew, *dh, *dvn;
  KIn v, dout, beta;
  const GdnQK* raw = nullptr;  // the tensor-core kernels read q, k before the norm with ρ instead
};
struct Out {
  F dqh, dkh, dW, gsum, dW_sg, dk_in, dg_in, dv, dg, dbeta;
};
static Out run(const In& in, bool mma) {
  const gdn_emu::Shape& s = in.s;
  const int64_t T = in.T, HV = s.HV;
  const float nan = std::nanf("");
  Out r;
  r.dqh.assign(T * HV * s.dk, nan), r.dkh.assign(T * HV * s.dk, nan), r.dW.assign(in.W, in.W + T * HV * s.dk);
  r.gsum.assign(s.nchunks * HV, nan), r.dv.assign(T * HV * s.dv, nan), r.dg.assign(T * HV, nan);
  r.dbeta.assign(T * HV, nan);
  (mma ? gdn_emu::state_grad_mma : gdn_emu::state_grad)(s, in.dout, in.kn, in.Gc, in.states, in.dh, in.vnew,
                                                        in.dvn, r.dqh.data(), r.dkh.data(), r.dW.data(),
                                                        r.gsum.data());
  if (mma)
    gdn_emu::intra_grad_mma(s, in.dout, in.qn, in.kn, in.Gc, in.vnew, r.gsum.data(), r.dqh.data(),
                            r.dkh.data(), r.dg.data(), in.raw);
  else
    gdn_emu::intra_grad(s, in.dout, in.qn, in.kn, in.Gc, in.vnew, r.gsum.data(), r.dqh.data(), r.dkh.data(),
                        r.dg.data());
  r.dW_sg = r.dW, r.dk_in = r.dkh, r.dg_in = r.dg;  // tensor cores: state products and intra are one kernel
  const KOut dvo{r.dv.data(), KType::F32};
  if (mma)
    gdn_emu::wy_grad_mma(s, in.kn, in.v, in.beta, in.Gc, in.Tm, r.dW.data(), in.dvn, r.dkh.data(), dvo,
                         r.dg.data(), r.dbeta.data(), in.raw);
  else
    gdn_emu::wy_grad(s, in.kn, in.v, in.beta, in.Gc, in.Tm, r.dW.data(), in.dvn, r.dkh.data(), dvo,
                     r.dg.data(), r.dbeta.data());
  return r;
}
// Every output within nmse 2e-5 of the fp32 FMA kernels (the bf16 operands' rounding; dg's cancelling sums
// are why the intra kernel splits K̂ and Q̂ into bf16 hi + lo).
static int compare(const char* tag, const In& in) {
  const Out ref = run(in, false);
  const Out got = run(in, true);
  int fails = 0;
  auto cmp = [&](const char* name, const F& a, const F& b) {
    int bad = 0;
    const double e = nmse(a, b, &bad);
    const bool fail = !(e <= 2e-5) || bad;
    std::printf("%s%-28s nmse %.3e nonfinite %d bits %016llx%s\n", tag, name, e, bad, bits_hash(a),
                fail ? "  FAIL" : "");
    fails += fail;
  };
  cmp("state_grad dW", got.dW_sg, ref.dW_sg);
  cmp("state_grad gsum", got.gsum, ref.gsum);
  cmp("intra dqh (final)", got.dqh, ref.dqh);
  cmp("intra dkh", got.dk_in, ref.dk_in);
  cmp("intra dg", got.dg_in, ref.dg_in);
  cmp("wy dkh (final)", got.dkh, ref.dkh);
  cmp("wy dv", got.dv, ref.dv);
  cmp("wy dg", got.dg, ref.dg);
  cmp("wy dbeta", got.dbeta, ref.dbeta);
  return fails;
}
// The state/intra kernel's fused L2 backward for q (bf16 q, k with ρ, bf16 dO) against the L2 norm's backward
// (l2norm.cu's formula, fp32 on the host) of the FMA kernels' dq̂ summed over the value heads of a key head.
static int fused_dq_check(const char* tag, const In& in) {
  const gdn_emu::Shape& s = in.s;
  const int64_t T = in.T, HK = s.HK, HV = s.HV, r = HV / HK, dk = s.dk;
  const Out ref = run(in, false);
  F dqh(T * HV * dk, 0.f), dkh(dqh.size(), 0.f), dW(in.W, in.W + T * HV * dk), gsum(s.nchunks * HV),
      dg(T * HV);
  F dq(T * HK * dk, std::nanf(""));
  gdn_emu::state_grad_mma(s, in.dout, in.kn, in.Gc, in.states, in.dh, in.vnew, in.dvn, dqh.data(), dkh.data(),
                          dW.data(), gsum.data());
  gdn_emu::intra_grad_mma(s, in.dout, in.qn, in.kn, in.Gc, in.vnew, gsum.data(), dqh.data(), dkh.data(),
                          dg.data(), in.raw, dq.data());
  const auto* qb = static_cast<const __nv_bfloat16*>(in.raw->q.p);
  F want(dq.size());
  for (int64_t row = 0; row < T * HK; ++row) {
    const int64_t t = row / HK, j = row % HK;
    const float rho = in.raw->rq[row], sc = in.raw->scale;
    float dot = 0.f;
    F d(dk, 0.f);
    for (int c = 0; c < dk; ++c) {
      for (int64_t m = 0; m < r; ++m) d[c] += ref.dqh[(t * HV + j * r + m) * dk + c];
      dot += sc * d[c] * __bfloat162float(qb[row * dk + c]) * rho;
    }
    for (int c = 0; c < dk; ++c)
      want[row * dk + c] = rho * (sc * d[c] - __bfloat162float(qb[row * dk + c]) * rho * dot);
  }
  int bad = 0;
  const double e = nmse(dq, want, &bad);
  const bool fail = !(e <= 2e-5) || bad;
  std::printf("%s%-28s nmse %.3e nonfinite %d bits %016llx%s\n", tag, "intra fused dq", e, bad, bits_hash(dq),
              fail ? "  FAIL" : "");
  return fail;
}
// One sequence of 200 tokens (3 full chunks + 8), HK 2, HV 4, g in [-3, 0], β in [0.05, 1], and dO in fp32
// (not bf16-exact: the kernels' lo tiles of dO).
static int long_case() {
  constexpr int dk = 128, dv = 128, C = 64;
  const int64_t HK = 2, HV = 4, T = 200;
  const std::vector<int32_t> chunks = {0, 64, 64, 64, 128, 64, 192, 8}, off = {0, 4};
  const int nchunks = 4;
  const gdn_emu::Shape s{chunks.data(), nchunks, off.data(), 1, HK, HV, dk, dv};
  Rand u(5);
  auto bf = [&](int64_t n, float lo, float hi) { return u.bf(n, lo, hi); };
  // q, k as bf16 before the norm; q̂, k̂ from them as the prep forms them (so that the kernels' BF16 q, k + ρ
  // path must give the bits of their F32 q̂, k̂ path)
  const float qscale = 1.f / std::sqrt(float(dk));
  const auto qb = bf(T * HK * dk, -1.f, 1.f), kb = bf(T * HK * dk, -1.f, 1.f);
  F qw(qb.size()), kw(kb.size()), rq, rk;
  for (size_t i = 0; i < qb.size(); ++i) qw[i] = __bfloat162float(qb[i]), kw[i] = __bfloat162float(kb[i]);
  const F qn = gdn_emu::l2_rows(qw, qscale, &rq), kn = gdn_emu::l2_rows(kw, 1.f, &rk);
  const auto v = bf(T * HV * dv, -1.f, 1.f), beta = bf(T * HV, 0.05f, 1.f);
  F dout(T * HV * dv), g(T * HV);
  for (auto& x : dout) x = u();
  for (auto& x : g) x = -1.5f * (u() + 1.f);
  const KIn vi{v.data(), KType::BF16}, di{dout.data(), KType::F32}, bi{beta.data(), KType::BF16};
  F W(T * HV * dk), U(T * HV * dv), M(int64_t(nchunks) * HV * C * C), Gc(T * HV), Tm(M.size()),
      o(T * HV * dv);
  F states(int64_t(nchunks) * HV * dk * dv), vnew(T * HV * dv), dh(states.size()), dvn(T * HV * dv);
  gdn_emu::prep(s, qn.data(), kn.data(), vi, g.data(), bi, W.data(), U.data(), M.data(), Gc.data(),
                Tm.data());
  gdn_emu::scan(s, qn.data(), kn.data(), W.data(), U.data(), M.data(), Gc.data(), KOut{o.data(), KType::F32},
                states.data(), vnew.data());
  gdn_emu::dscan(s, di, qn.data(), kn.data(), W.data(), M.data(), Gc.data(), dh.data(), dvn.data());
  std::printf("long case: T %lld, %d chunks, HK %lld, HV %lld, g >= -3, fp32 dO\n", (long long)T, nchunks,
              (long long)HK, (long long)HV);
  In in{s,           T,         qn.data(),  kn.data(), Gc.data(), Tm.data(), W.data(), states.data(),
        vnew.data(), dh.data(), dvn.data(), vi,        di,        bi};
  int fails = compare("long ", in);
  // The kernels' path for bf16 inputs: q, k before the norm with ρ (the intra products on q, k themselves,
  // no hi + lo tiles): the same targets against the FMA kernels.
  const GdnQK raw{{qb.data(), KType::BF16}, {kb.data(), KType::BF16}, rq.data(), rk.data(), qscale};
  In in16 = in;
  in16.raw = &raw;
  fails += compare("long bf16 q, k ", in16);
  // and with dO in bf16, the state/intra kernel's fused dq (two key heads of two value heads each)
  std::vector<__nv_bfloat16> d16(dout.size());
  for (size_t i = 0; i < d16.size(); ++i) d16[i] = __float2bfloat16_rn(dout[i]);
  In in16b = in16;
  in16b.dout = KIn{d16.data(), KType::BF16};
  return fails + fused_dq_check("long bf16 q, k, dO ", in16b);
}
}  // namespace bwd_mma


// ---- host study: the ungated solve with the gates put back elementwise (FlashQLA's kkt_solve) ----
// (I + A ⊙ e^{G_i−G_j})^{-1} = D·(I + A)^{-1}·D^{-1}, D = diag(e^G): T_gated = T_u ⊙ e^{G_i−G_j}. Exact in exact
// arithmetic; in fp32 / bf16 the ungated T_u can grow (no decay damps it) and the elementwise gate then scales
// its rounding error down with the value, or not. One 64-row chunk per case, k̂ unit rows, errors relative to
// max |T_gated| (double reference); "bf16 T_g" is what rounding the gated T itself costs (our kept T).
static int ungated_study() {
  constexpr int C = 64, dk = 128;
  struct Case {
    const char* name;
    float corr, blo, bhi, g;
  };
  const Case cases[] = {{"random keys, β 0.05..1, g -0.5", 0.f, 0.05f, 1.f, -0.5f},
                        {"random keys, β 0.9..1, g -0.01", 0.f, 0.9f, 1.f, -0.01f},
                        {"corr 1.5, β 0.9..1, g -0.01", 1.5f, 0.9f, 1.f, -0.01f},
                        {"corr 3, β 0.9..1, g -0.01", 3.f, 0.9f, 1.f, -0.01f},
                        {"corr 3, β 0.9..1, g -0.5", 3.f, 0.9f, 1.f, -0.5f},
                        {"corr 3, β 0.9..1, g -3", 3.f, 0.9f, 1.f, -3.f},
                        {"corr 8, β 1, g -0.001", 8.f, 1.f, 1.f, -0.001f},
                        {"alternating ±corr 3, β 1, g -0.001", -3.f, 1.f, 1.f, -0.001f},
                        {"alternating ±corr 8, β 1, g -0.5", -8.f, 1.f, 1.f, -0.5f}};
  for (const Case& cs : cases) {
    Rand u(5);
    F base(dk);
    for (auto& x : base) x = u();
    F k = u.normed(C, dk, 1.f, &base, std::fabs(cs.corr));
    if (cs.corr < 0)  // odd rows along −base: every pair of neighbours anti-correlated
      for (int i = 1; i < C; i += 2) {
        const F r = u.normed(1, dk, 1.f, &base, cs.corr);
        std::copy(r.begin(), r.end(), k.begin() + i * dk);
      }
    std::vector<double> b(C), G(C);
    double acc = 0;
    for (int i = 0; i < C; ++i) {
      b[i] = cs.blo + (cs.bhi - cs.blo) * 0.5 * (u() + 1.0);
      acc += cs.g * 0.5 * (u() + 1.0);
      G[i] = acc;
    }
    std::vector<double> Au(C * C, 0.0), Tg(C * C), Tu(C * C);
    std::vector<float> Tu32(C * C);
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < i; ++j) {
        double d = 0;
        for (int e = 0; e < dk; ++e) d += double(k[i * dk + e]) * k[j * dk + e];
        Au[i * C + j] = b[i] * d;
      }
    // forward substitution, column by column: x_i = δ_ic − Σ_{j<i} A_ij·x_j
    auto solve = [&](auto one, bool gated, auto& X) {
      using R = decltype(one);
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < C; ++i) {
          R s = 0;
          for (int j = c; j < i; ++j)
            s += R(Au[i * C + j] * (gated ? std::exp(G[i] - G[j]) : 1.0)) * R(X[j * C + c]);
          X[i * C + c] = i == c ? R(1) : i < c ? R(0) : -s;
        }
    };
    solve(double(0), true, Tg);
    solve(double(0), false, Tu);
    solve(float(0), false, Tu32);
    double tmax = 0, umax = 0, e64 = 0, e32 = 0, e16 = 0, eg16 = 0;
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) {
        tmax = std::max(tmax, std::fabs(Tg[i * C + j]));
        umax = std::max(umax, std::fabs(Tu[i * C + j]));
      }
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) {
        const double dec = std::exp(G[i] - G[j]), ref = Tg[i * C + j];
        const float u32 = Tu32[i * C + j];
        e64 = std::max(e64, std::fabs(Tu[i * C + j] * dec - ref));
        e32 = std::max(e32, std::fabs(double(u32) * dec - ref));
        e16 = std::max(e16, std::fabs(double(__bfloat162float(__float2bfloat16_rn(u32))) * dec - ref));
        eg16 = std::max(eg16, std::fabs(double(__bfloat162float(__float2bfloat16_rn(float(ref)))) - ref));
      }
    std::printf("ungated %-34s max|T_g| %.3g max|T_u| %.3g | error / max|T_g|: T_u(f64) %.1e T_u(f32) %.1e "
                "bf16(T_u) %.1e; bf16 T_g %.1e\n",
                cs.name, tmax, umax, e64 / tmax, e32 / tmax, e16 / tmax, eg16 / tmax);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "ungated") return ungated_study();
  if (argc > 1 && std::string(argv[1]) == "dscan") return dscan_mma_checks() ? 1 : 0;
  if (argc > 1 && std::string(argv[1]) == "noout") return no_output_scan_checks() ? 1 : 0;
  if (argc > 1 && std::string(argv[1]) == "b16") return b16_scan_checks() ? 1 : 0;
  if (argc > 1 && std::string(argv[1]) == "vnew") return vnew_prep_checks() ? 1 : 0;
  if (argc > 1 && std::string(argv[1]) == "half") return half_states_checks() ? 1 : 0;
  if (argc > 1 && std::string(argv[1]) == "prep") return prep_mma_check() ? 1 : 0;
  const bool bwd_only = argc > 1 && std::string(argv[1]) == "bwd";
  const int prep_fails = bwd_only ? 0 : prep_mma_check();
  constexpr int dk = 128, dv = 128, C = 64;
  const int64_t HK = 1, HV = 2;
  const std::vector<int32_t> cu = {0, 101, 171};  // two sequences: 64 + 37 and 64 + 6 tokens
  const ChunkList cl = chunk_list(cu, C);
  const int nchunks = cl.n(), nseq = int(cu.size() - 1);
  const int64_t T = cu.back();
  gdn_emu::Shape s{cl.chunks.data(), nchunks, cl.off.data(), nseq, HK, HV, dk, dv};

  Rand u(11);
  const Inputs in = make_inputs(u, T, HK, HV, dk, dv, -1.f);
  const F &qn = in.qn, &kn = in.kn, &g = in.g;
  const float nan0 = std::nanf("");
  const KIn vi = in.vi(), di = in.di(), bi = in.bi();

  // Forward recompute (FMA kernels), as launch_gdn_chunk_bwd's caller does.
  F W(T * HV * dk), U(T * HV * dv), M(int64_t(nchunks) * HV * C * C), Gc(T * HV),
      Tm(int64_t(nchunks) * HV * C * C);
  F o(T * HV * dv), states(int64_t(nchunks) * HV * dk * dv), vnew(T * HV * dv);
  gdn_emu::prep(s, qn.data(), kn.data(), vi, g.data(), bi, W.data(), U.data(), M.data(), Gc.data(),
                Tm.data());
  gdn_emu::scan(s, qn.data(), kn.data(), W.data(), U.data(), M.data(), Gc.data(), KOut{o.data(), KType::F32},
                states.data(), vnew.data());
  if (!bwd_only) {  // ---- tensor-core forward scan vs the FMA scan ----
    // bv 64 (prefetching, 8 warps) reads the tensor-core prep's bf16 operands (with its fp32 U and Gc).
    using bf = __nv_bfloat16;
    const bf bnan = __float2bfloat16_rn(nan0);
    std::vector<bf> Wb(W.size(), bnan), Kb(W.size(), bnan), Qb(T * HK * dk, bnan), Mb(M.size(), bnan);
    GdnScanBf16 b16{Wb.data(), Kb.data(), Qb.data(), Mb.data()};
    F W2(W.size()), U2(U.size()), M2(M.size()), Gc2(Gc.size()), Tm2(Tm.size());
    gdn_emu::prep_mma(s, in.q.data(), in.k.data(), 1.f / std::sqrt(float(dk)), nullptr, vi, g.data(), bi,
                      W2.data(), U2.data(), M2.data(), Gc2.data(), Tm2.data(), &b16);
    int scan_fails = 0;
    for (int variant = 0; variant < 5; ++variant) {
      const bool v64 = variant == 4;
      const int bv = v64 ? 64 : variant & 1 ? 16 : 32;
      const bool pf = variant >= 2;
      F o2(o.size(), nan0), st2(states.size(), nan0), vn2(vnew.size(), nan0);
      gdn_emu::scan_mma(s, bv, pf, qn.data(), kn.data(), (v64 ? W2 : W).data(), (v64 ? U2 : U).data(),
                        (v64 ? M2 : M).data(), (v64 ? Gc2 : Gc).data(), KOut{o2.data(), KType::F32},
                        st2.data(), vn2.data(), v64 ? &b16 : nullptr);
      for (auto [name, got, ref] :
           {std::tuple{"o", &o2, &o}, {"states", &st2, &states}, {"vnew", &vn2, &vnew}}) {
        int bad = 0;
        const double e = nmse(*got, *ref, &bad);
        const bool fail = !(e <= 2e-5) || bad;
        std::printf("scan_mma bv %2d pf %d %-7s nmse %.3e nonfinite %d%s\n", bv, int(pf), name, e, bad,
                    fail ? "  FAIL" : "");
        scan_fails += fail;
      }
    }
    if (scan_fails) return 1;
  }
  F dh(states.size()), dvn(T * HV * dv);
  gdn_emu::dscan(s, di, qn.data(), kn.data(), W.data(), M.data(), Gc.data(), dh.data(), dvn.data());
  std::printf("forward/dscan done (T %lld, %d chunks, HK %lld, HV %lld)\n", (long long)T, nchunks,
              (long long)HK, (long long)HV);

  // ---- tensor-core backward vs the FMA backward: the shape above (bf16 dO), then a longer one ----
  const bwd_mma::In bin{
      s,           T,         qn.data(),  kn.data(), Gc.data(), Tm.data(), W.data(), states.data(),
      vnew.data(), dh.data(), dvn.data(), vi,        di,        bi};
  int fails = bwd_mma::compare("", bin);
  {  // the same with bf16 q, k before the norm and ρ (make_inputs' q, k are bf16-exact)
    std::vector<__nv_bfloat16> qb(in.q.size()), kb(in.k.size());
    for (size_t i = 0; i < qb.size(); ++i)
      qb[i] = __float2bfloat16_rn(in.q[i]), kb[i] = __float2bfloat16_rn(in.k[i]);
    F rq, rk;
    gdn_emu::l2_rows(in.q, 1.f / std::sqrt(float(dk)), &rq), gdn_emu::l2_rows(in.k, 1.f, &rk);
    const GdnQK raw{
        {qb.data(), KType::BF16}, {kb.data(), KType::BF16}, rq.data(), rk.data(), 1.f / std::sqrt(float(dk))};
    bwd_mma::In bin16 = bin;
    bin16.raw = &raw;
    fails += bwd_mma::compare("bf16 q, k ", bin16);
    fails += bwd_mma::fused_dq_check("bf16 q, k ", bin16);
  }
  fails += bwd_mma::long_case();
  if (bwd_only) {
    std::printf("%s\n", fails ? "FAIL" : "OK");
    return fails ? 1 : 0;
  }
  fails += dscan_mma_checks();
  fails += no_output_scan_checks();
  fails += b16_scan_checks();
  fails += vnew_prep_checks();
  std::printf("%s\n", fails ? "FAIL" : "OK");
  return fails || prep_fails ? 1 : 0;
}
