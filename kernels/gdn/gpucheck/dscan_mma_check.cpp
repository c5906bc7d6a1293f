// GPU check of the tensor-core reverse state scan (chunk_dscan_mma.cu) against the FMA dscan of
// launch_gdn_chunk_bwd on the same forward recompute, and its time. Not part of the build (CMake globs
// kernels/**/*.cu only); build and run on a GPU machine from the repository root:
//   nvcc -std=c++20 -O3 -arch=sm_90a -I kernels -I engine/src kernels/gdn/gpucheck/dscan_mma_check.cpp \
//       kernels/gdn/chunk_fwd.cu kernels/gdn/chunk_bwd.cu kernels/gdn/chunk_bwd_mma.cu \
//       kernels/gdn/chunk_dscan_mma.cu -o /tmp/dscan_mma_check && /tmp/dscan_mma_check
// Prints dh and dvn nmse per case (fails above 2e-5) and the median time of the tensor-core scan at
// T = 8192 (2 sequences), HK 16, HV 32 (the FMA kernel: 8.2 ms there, ncu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gdn/gdn.cuh"

using namespace deltatune::kernels;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

template <class T>
T* dev(const std::vector<T>& h) {
  T* p = nullptr;
  CK(cudaMalloc(&p, sizeof(T) * std::max<size_t>(h.size(), 1)));
  CK(cudaMemcpy(p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
  return p;
}
template <class T>
std::vector<T> host(const T* p, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost));
  return h;
}
static double nmse(const std::vector<float>& a, const std::vector<float>& r, int* bad) {
  double num = 0, den = 0;
  *bad = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!std::isfinite(a[i])) ++*bad;
    num += double(a[i] - r[i]) * (a[i] - r[i]);
    den += double(r[i]) * r[i];
  }
  return num / std::max(den, 1e-300);
}

struct Case {
  const char* name;
  std::vector<int32_t> cu;
  int64_t HK, HV;
  float gmin;
  bool time;
};

static int run(const Case& cs) {
  constexpr int dk = 128, dv = 128, C = kGdnChunk;
  std::vector<int32_t> chunks, off{0};
  for (size_t n = 0; n + 1 < cs.cu.size(); ++n) {
    for (int32_t t = cs.cu[n]; t < cs.cu[n + 1]; t += C)
      chunks.insert(chunks.end(), {t, std::min(C, cs.cu[n + 1] - t)});
    off.push_back(int32_t(chunks.size() / 2));
  }
  const int nchunks = int(chunks.size() / 2), nseq = int(cs.cu.size() - 1);
  const int64_t T = cs.cu.back(), HK = cs.HK, HV = cs.HV;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto normed = [&](float scale) {
    std::vector<float> x(T * HK * dk);
    for (int64_t r = 0; r < T * HK; ++r) {
      double ss = 0;
      for (int d = 0; d < dk; ++d) ss += double(x[r * dk + d] = u(rng)) * x[r * dk + d];
      for (int d = 0; d < dk; ++d) x[r * dk + d] = float(scale * x[r * dk + d] / std::sqrt(ss + 1e-6));
    }
    return x;
  };
  auto bf = [&](int64_t n, float lo, float hi) {
    std::vector<__nv_bfloat16> b(n);
    for (auto& x : b) x = __float2bfloat16_rn(lo + (hi - lo) * 0.5f * (u(rng) + 1.f));
    return b;
  };
  std::vector<float> g(T * HV);
  for (auto& x : g) x = 0.5f * cs.gmin * (u(rng) + 1.f);
  float* qn = dev(normed(1.f / std::sqrt(float(dk))));
  float* kn = dev(normed(1.f));
  float* gd = dev(g);
  __nv_bfloat16* v = dev(bf(T * HV * dv, -1.f, 1.f));
  __nv_bfloat16* dout = dev(bf(T * HV * dv, -1.f, 1.f));
  __nv_bfloat16* beta = dev(bf(T * HV, 0.05f, 1.f));
  int32_t* ch_d = dev(chunks);
  int32_t* off_d = dev(off);
  const KIn vi{v, KType::BF16}, di{dout, KType::BF16}, bi{beta, KType::BF16};
  auto zeros = [](size_t n) { return dev(std::vector<float>(n, 0.f)); };
  const size_t nst = size_t(nchunks) * HV * dk * dv;
  float *W = zeros(T * HV * dk), *U = zeros(T * HV * dv), *M = zeros(size_t(nchunks) * HV * C * C),
        *Gc = zeros(T * HV), *states = zeros(nst), *Tm = zeros(size_t(nchunks) * HV * C * C),
        *vnew = zeros(T * HV * dv), *o = zeros(T * HV * dv);
  CK(launch_gdn_chunk_fwd(qn, kn, vi, gd, bi, ch_d, nchunks, off_d, nseq, KOut{o, KType::F32}, W, U, M, Gc,
                          states, HK, HV, dk, dv, nullptr, Tm, vnew));
  float* W0 = zeros(T * HV * dk);  // the backward overwrites W with dW
  CK(cudaMemcpy(W0, W, sizeof(float) * T * HV * dk, cudaMemcpyDeviceToDevice));
  float *dh = zeros(nst), *dvn = zeros(T * HV * dv), *gsum = zeros(size_t(nchunks) * HV),
        *dqh = zeros(T * HV * dk), *dkh = zeros(T * HV * dk), *dvo = zeros(T * HV * dv), *dg = zeros(T * HV),
        *db = zeros(T * HV);
  CK(launch_gdn_chunk_bwd(di, qn, kn, vi, bi, ch_d, nchunks, off_d, nseq, W, M, Gc, Tm, states, vnew, dh, dvn,
                          gsum, dqh, dkh, KOut{dvo, KType::F32}, dg, db, HK, HV, dk, dv, nullptr));
  float *dh2 = zeros(nst), *dvn2 = zeros(T * HV * dv);
  CK(cudaMemset(dh2, 0xff, sizeof(float) * nst));  // NaN: every element must be written
  CK(cudaMemset(dvn2, 0xff, sizeof(float) * T * HV * dv));
  CK(launch_gdn_chunk_dscan_mma(di, qn, kn, W0, M, Gc, ch_d, off_d, nseq, dh2, dvn2, HK, HV, dk, dv,
                                nullptr));
  CK(cudaDeviceSynchronize());
  int bh = 0, bv = 0;
  const double eh = nmse(host(dh2, nst), host(dh, nst), &bh);
  const double ev = nmse(host(dvn2, T * HV * dv), host(dvn, T * HV * dv), &bv);
  const bool fail = !(eh <= 2e-5) || !(ev <= 2e-5) || bh || bv;
  std::printf("%-44s bv %d: dh nmse %.3e  dvn nmse %.3e  nonfinite %d/%d%s\n", cs.name,
              gdn_scan_tile_cols(nseq * HV, dv), eh, ev, bh, bv, fail ? "  FAIL" : "");
  if (cs.time) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int it = 0; it < 21; ++it) {
      CK(cudaEventRecord(a));
      CK(launch_gdn_chunk_dscan_mma(di, qn, kn, W0, M, Gc, ch_d, off_d, nseq, dh2, dvn2, HK, HV, dk, dv,
                                    nullptr));
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float t = 0;
      CK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  tensor-core dscan: median %.3f ms (min %.3f) over 21 runs\n", ms[10], ms[0]);
  }
  for (void* p :
       std::initializer_list<void*>{qn,   kn, gd, v,  dout, beta, ch_d, off_d, W,   U,  M,  Gc,  states, Tm,
                                    vnew, o,  W0, dh, dvn,  gsum, dqh,  dkh,   dvo, dg, db, dh2, dvn2})
    CK(cudaFree(p));
  return fail;
}

int main() {
  const std::vector<Case> cases = {
      {"T 8192 (2 x 4096), HK 16, HV 32, g>=-0.1", {0, 4096, 8192}, 16, 32, -0.1f, true},
      {"T 8192 (2 x 4096), HK 16, HV 32, g>=-0.002", {0, 4096, 8192}, 16, 32, -0.002f, false},
      {"3 seqs 1000+3+1497, HK 4, HV 8, g>=-0.05", {0, 1000, 1003, 2500}, 4, 8, -0.05f, false},
      {"1 seq 37, HK 2, HV 2, g>=-1", {0, 37}, 2, 2, -1.f, false},
  };
  int fails = 0;
  for (const Case& c : cases) fails += run(c);
  std::printf("%s\n", fails ? "FAIL" : "OK");
  return fails ? 1 : 0;
}
