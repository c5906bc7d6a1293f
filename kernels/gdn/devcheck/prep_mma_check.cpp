// Device check of the tensor-core GDN forward prep (chunk_prep_mma.cu) against the FMA prep (chunk_fwd.cu):
// nmse of every output on the same inputs (several shapes), then the time of both at T = 8192 (2 sequences),
// HK 16, HV 32, dk = dv = 128. Not part of the CMake build (kernels/ globs *.cu only); on a GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -I kernels -I engine/src -x cu \
//       kernels/gdn/devcheck/prep_mma_check.cpp kernels/gdn/devcheck/prep_fma_ref.cpp \
//       kernels/gdn/chunk_bwd_mma.cu kernels/gdn/chunk_scan_mma.cu -o /tmp/prep_mma_check && /tmp/prep_mma_check
// Exit status 1 when an output misses its target (W, U, M nmse ≤ 2e-5; Gc, Tout ≤ 1e-10).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gdn/chunk_prep_mma.cu"

namespace deltatune::kernels {
cudaError_t devcheck_fma_prep(const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                              const int32_t* chunks, int nchunks, float* W, float* U, float* M, float* Gc,
                              float* Tout, int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s);
}

using namespace deltatune::kernels;
using F = std::vector<float>;

#define CK(x)                                                                                 \
  do {                                                                                        \
    const cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
static float* alloc(size_t n) {
  float* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(float)));
  CK(cudaMemset(d, 0xFF, n * sizeof(float)));  // NaN: unwritten elements show up
  return d;
}
static F download(const float* d, size_t n) {
  F h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
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

int main() {
  struct Case {
    const char* name;
    std::vector<int32_t> cu;
    int64_t HK, HV;
    bool hard, timed;
  };
  const Case cases[] = {{"4 seqs 101, 70, 1, 228; HV/HK 2", {0, 101, 171, 172, 400}, 1, 2, false, false},
                        {"1 seq of 37; HV/HK 1", {0, 37}, 4, 4, false, false},
                        {"corr. keys, β~1, weak decay", {0, 300}, 2, 4, true, false},
                        {"T 8192 (2 x 4096), HK 16, HV 32", {0, 4096, 8192}, 16, 32, false, true}};
  constexpr int dk = 128, dv = 128, C = 64;
  int fails = 0;
  for (const Case& cs : cases) {
    std::vector<int32_t> chunks;
    for (size_t n = 0; n + 1 < cs.cu.size(); ++n)
      for (int32_t t = cs.cu[n]; t < cs.cu[n + 1]; t += C)
        chunks.insert(chunks.end(), {t, std::min(C, cs.cu[n + 1] - t)});
    const int nchunks = int(chunks.size() / 2);
    const int64_t T = cs.cu.back(), HK = cs.HK, HV = cs.HV;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    F base(dk);
    for (auto& x : base) x = u(rng);
    auto normed = [&](float scale, float corr) {
      F x(T * HK * dk);
      for (int64_t r = 0; r < T * HK; ++r) {
        double ss = 0;
        for (int d = 0; d < dk; ++d) ss += double(x[r * dk + d] = corr * base[d] + u(rng)) * x[r * dk + d];
        for (int d = 0; d < dk; ++d) x[r * dk + d] = float(scale * x[r * dk + d] / std::sqrt(ss + 1e-6));
      }
      return x;
    };
    const F qn = normed(1.f / std::sqrt(float(dk)), 0.f), kn = normed(1.f, cs.hard ? 1.5f : 0.f);
    std::vector<__nv_bfloat16> vb(T * HV * dv), bb(T * HV);
    F g(T * HV);
    for (auto& x : vb) x = __float2bfloat16_rn(u(rng));
    for (auto& x : bb)
      x = __float2bfloat16_rn(cs.hard ? 0.9f + 0.05f * (u(rng) + 1.f) : 0.05f + 0.475f * (u(rng) + 1.f));
    for (auto& x : g) x = (cs.hard ? -0.01f : -0.5f) * (u(rng) + 1.f);
    const float *dq = upload(qn), *dk_ = upload(kn), *dg = upload(g);
    const int32_t* dch = upload(chunks);
    const KIn vi{upload(vb), KType::BF16}, bi{upload(bb), KType::BF16};
    const size_t nw = T * HV * dk, nu = T * HV * dv, nm = size_t(nchunks) * HV * C * C, ng = T * HV;
    struct Out {
      float *W, *U, *M, *Gc, *Tm;
    };
    auto outs = [&] { return Out{alloc(nw), alloc(nu), alloc(nm), alloc(ng), alloc(nm)}; };
    const Out ref = outs(), got = outs();
    auto fma = [&] {
      CK(devcheck_fma_prep(dq, dk_, vi, dg, bi, dch, nchunks, ref.W, ref.U, ref.M, ref.Gc, ref.Tm, HK, HV, dk,
                           dv, nullptr));
    };
    auto mma = [&] {
      CK(launch_gdn_chunk_prep_mma(dq, dk_, vi, dg, bi, dch, nchunks, got.W, got.U, got.M, got.Gc, got.Tm, HK,
                                   HV, dk, dv, nullptr));
    };
    fma();
    mma();
    CK(cudaDeviceSynchronize());
    std::printf("%s (%d chunks)\n", cs.name, nchunks);
    auto cmp = [&](const char* name, const float* a, const float* b, size_t n, double tol) {
      int bad = 0;
      const double e = nmse(download(a, n), download(b, n), &bad);
      const bool fail = !(e <= tol) || bad;
      std::printf("  %-5s nmse %.3e nonfinite %d%s\n", name, e, bad, fail ? "  FAIL" : "");
      fails += fail;
    };
    cmp("W", got.W, ref.W, nw, 2e-5);
    cmp("U", got.U, ref.U, nu, 2e-5);
    cmp("M", got.M, ref.M, nm, 2e-5);
    cmp("Gc", got.Gc, ref.Gc, ng, 1e-10);
    cmp("Tout", got.Tm, ref.Tm, nm, 1e-10);
    if (cs.timed) {
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      auto time_ms = [&](auto&& f) {
        for (int i = 0; i < 3; ++i) f();
        constexpr int iters = 20;
        CK(cudaEventRecord(e0));
        for (int i = 0; i < iters; ++i) f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return ms / iters;
      };
      const float tf = time_ms(fma), tm = time_ms(mma);
      std::printf("  time: FMA prep %.3f ms, tensor-core prep %.3f ms (%.1fx)\n", tf, tm, tf / tm);
    }
    for (const Out& o : {ref, got})
      for (float* p : {o.W, o.U, o.M, o.Gc, o.Tm}) CK(cudaFree(p));
    for (const void* p : {(const void*)dq, (const void*)dk_, (const void*)dg, (const void*)dch, vi.p, bi.p})
      CK(cudaFree(const_cast<void*>(p)));
  }
  std::printf("%s\n", fails ? "FAIL" : "OK");
  return fails ? 1 : 0;
}
