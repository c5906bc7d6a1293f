// LoRA's rank-r term folded into the base GEMM by K-concatenation (issue 33, lorak37): per module shape of the
// 2b / 9b models, the current path against the K-concatenated one, forward and backward, on 4096 tokens (bf16).
//   current fwd: u = x·Aᵀ (u GEMM) ; y (=) s·u·Bᵀ (+ res) (lora_up) ; y += x·Wᵀ (base GEMM, beta 1)
//   K-concat fwd: u written into the tail columns of x's buffer xp [T, in + R] (the u GEMM's ldc) ;
//                 y (=) xp·[W | s·B]ᵀ (one GEMM, K = in + R; the residual through cublasLt with C != D, or a copy
//                 of it into y and beta 1)
//   current bwd: du = s·dy·B, gB += s·dyᵀ·u (lora_dy) ; gA += duᵀ·x ; dx (=) du·A ; dx += dy·W (beta 1)
//   K-concat bwd: du written into the tail of dy's buffer [T, out + R] (lora_dy's lddu) ; gA += duᵀ·x ;
//                 dx (=) [dy | du]·[W ; A] (one GEMM, K = out + R)
// Modules that share an input (GDN qkv/z/b/a, attention q/k/v) have one stacked u [T, R = Σr]: module i reads
// [x | u] with zero blocks in its weight's tail where other modules' u lie (K = in + R, "zero"), or only up to its
// own block with the largest module first (K = in + (i+1)·r, "tri"). In the backward only the first (largest)
// module's dy carries du of every module (dx (=) [dy_0 | du]·[W_0 ; A], the others accumulate dy_i·W_i).
// Each variant's ops are captured `reps` times in a CUDA graph (buffer sets rotated so that L2 does not hold
// the operands of the next call) and the graph timed by events: launch rate is not what is measured.
// Usage: bench_lora_kcat [--tokens 4096] [--reps 24] [--shape 2b|9b|both] [--ckpt-2b 23] [--ckpt-9b 31]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/kernel_policy.h"
#include "../common/cuda_check.h"
#include "lora/lora.cuh"

#define CB(x)                                                                      \
  do {                                                                             \
    int s_ = static_cast<int>(x);                                                  \
    if (s_ != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, s_); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

namespace {

namespace dk = deltatune::kernels;
using bf16 = __nv_bfloat16;
constexpr int kR = 16;
constexpr float kScale = 2.f;

__global__ void fill_kernel(bf16* p, size_t n, uint32_t seed, float amp) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xFFFF) / 65535.f * 2.f - 1.f) * amp);
  }
}

// dst[i, j] (=) alpha·src[i, j] (rows x cols, row strides ldd, lds).
__global__ void copy2d_kernel(bf16* dst, int64_t ldd, const bf16* src, int64_t lds, int64_t rows, int64_t cols,
                              float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols; i += int64_t(gridDim.x) * blockDim.x)
    dst[(i / cols) * ldd + i % cols] = __float2bfloat16(alpha * __bfloat162float(src[(i / cols) * lds + i % cols]));
}

struct Gpu {
  cudaStream_t s;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void* ws = nullptr;
  size_t ws_bytes = size_t(32) << 20;
  void* dy_scratch = nullptr;  // lora_dy's partial sums: the cuBLAS workspace, as in CudaBackend
  size_t dy_scratch_bytes = 0;
  dk::KernelPolicy policy;
  std::vector<void*> allocs;
  uint32_t seed = 1;

  bf16* bf(size_t n, float amp = 0.05f) {
    void* p;
    CK(cudaMalloc(&p, std::max<size_t>(n, 8) * sizeof(bf16)));
    allocs.push_back(p);
    fill_kernel<<<1024, 256, 0, s>>>(static_cast<bf16*>(p), n, seed++ * 0x9E3779B9u, amp);
    return static_cast<bf16*>(p);
  }
  float* f32(size_t n) {
    void* p;
    CK(cudaMalloc(&p, std::max<size_t>(n, 8) * sizeof(float)));
    CK(cudaMemsetAsync(p, 0, n * sizeof(float), s));
    allocs.push_back(p);
    return static_cast<float*>(p);
  }
  void free_all() {
    CK(cudaStreamSynchronize(s));
    for (void* p : allocs) CK(cudaFree(p));
    allocs.clear();
  }
};

// Row-major C[M, N] (=) alpha·op(A)·op(B) + beta·C with row strides lda, ldb, ldc (as CudaBackend::gemm_cols).
void gemm(Gpu& g, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
          int64_t ldb, void* C, int64_t ldc, float alpha, float beta, cudaDataType ct = CUDA_R_16BF) {
  CB(cublasGemmEx(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M), int(K),
                  &alpha, B, CUDA_R_16BF, int(ldb), A, CUDA_R_16BF, int(lda), &beta, C, ct, int(ldc),
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Row-major D[M, N] = A[M, K]·B[N, K]ᵀ + C (C != D) through cublasLt; the plan is made once per shape, outside
// any capture (the heuristic's first algorithm).
struct LtPlan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
};
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, LtPlan> g_lt;

LtPlan& lt_plan(Gpu& g, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  auto key = std::make_tuple(M, N, K, lda, ldb, ldc);
  auto it = g_lt.find(key);
  if (it != g_lt.end()) return it->second;
  LtPlan p;
  CB(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
  CB(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof(tA)));
  CB(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof(tB)));
  // column-major: Dᵀ[N, M] = (B viewed [K, N], op T)·(A viewed [K, M]) + Cᵀ
  CB(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(K), uint64_t(N), ldb));
  CB(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(K), uint64_t(M), lda));
  CB(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, uint64_t(N), uint64_t(M), ldc));
  cublasLtMatmulPreference_t pref;
  CB(cublasLtMatmulPreferenceCreate(&pref));
  CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.ws_bytes,
                                          sizeof(g.ws_bytes)));
  cublasLtMatmulHeuristicResult_t r{};
  int n = 0;
  CB(cublasLtMatmulAlgoGetHeuristic(g.lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &r, &n));
  CB(cublasLtMatmulPreferenceDestroy(pref));
  if (n < 1) {
    std::fprintf(stderr, "cublasLt: no algorithm\n");
    std::exit(1);
  }
  p.algo = r.algo;
  return g_lt.emplace(key, p).first->second;
}

void lt_gemm(Gpu& g, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B, int64_t ldb,
             const void* C, void* D, int64_t ldc, float beta) {
  LtPlan& p = lt_plan(g, M, N, K, lda, ldb, ldc);
  const float one = 1.f;
  CB(cublasLtMatmul(g.lt, p.desc, &one, B, p.a, A, p.b, &beta, C, p.c, D, p.c, &p.algo, g.ws, g.ws_bytes, g.s));
}

void lora_up(Gpu& g, int64_t T, int64_t N, const bf16* u, int64_t ldu, const bf16* B, const bf16* res, bf16* y) {
  dk::LoraUpArgs a;
  a.u = u, a.B = B, a.res = res, a.y = y, a.T = T, a.N = N, a.ldu = ldu, a.ldres = N, a.ldy = N, a.r = kR;
  a.alpha = kScale;
  if (!dk::lora_up_takes(a)) {  // the backend's default: copy + GEMM
    if (res) CK(cudaMemcpyAsync(y, res, size_t(T) * N * 2, cudaMemcpyDeviceToDevice, g.s));
    gemm(g, false, true, T, N, kR, u, ldu, B, kR, y, N, kScale, res ? 1.f : 0.f);
    return;
  }
  CK(dk::launch_lora_up(a, g.s));
}

void lora_dy(Gpu& g, int64_t T, int64_t N, const bf16* dy, int64_t ldy, const bf16* B, const bf16* u, int64_t ldu,
             bf16* du, int64_t lddu, float* gB) {
  dk::LoraDyArgs a;
  a.dy = dy, a.B = B, a.u = u, a.du = du, a.gB = gB, a.T = T, a.N = N, a.ldy = ldy, a.ldu = ldu, a.lddu = lddu;
  a.r = kR, a.alpha = kScale;
  const size_t need = dk::lora_dy_scratch_bytes(a, g.policy);
  if (need == 0 || need > g.dy_scratch_bytes) {  // the backend's default: two GEMMs
    gemm(g, false, false, T, kR, N, dy, ldy, B, kR, du, lddu, kScale, 0.f);
    gemm(g, true, false, N, kR, T, dy, ldy, u, ldu, gB, kR, kScale, 1.f, CUDA_R_32F);
    return;
  }
  CK(dk::launch_lora_dy(a, g.dy_scratch, g.policy, g.s));
}

// Median microseconds a call of fn(set) over `reps` captured calls (sets rotated).
template <class F>
double time_graph(Gpu& g, int reps, int sets, F fn) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  fn(0);  // once outside the capture: cuBLAS / cublasLt set up their kernels and plans
  CK(cudaStreamSynchronize(g.s));
  CK(cudaStreamBeginCapture(g.s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) fn(i % sets);
  CK(cudaStreamEndCapture(g.s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int w = 0; w < 2; ++w) CK(cudaGraphLaunch(exec, g.s));
  std::vector<float> ms;
  for (int t = 0; t < 7; ++t) {
    CK(cudaEventRecord(e0, g.s));
    CK(cudaGraphLaunch(exec, g.s));
    CK(cudaEventRecord(e1, g.s));
    CK(cudaEventSynchronize(e1));
    float v;
    CK(cudaEventElapsedTime(&v, e0, e1));
    ms.push_back(v);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return 1000.0 * ms[ms.size() / 2] / reps;
}

// A module (or modules sharing an input): in features, each module's out features, whether the output adds the
// residual stream, whether its backward is measured (the MLP down's du·A already rides lora_swiglu_bwd), and how
// many times a step runs its forward (first + recompute) and backward.
struct Mod {
  std::string name;
  int64_t in;
  std::vector<int64_t> outs;
  bool res;
  bool bwd;
  int fwd_count, bwd_count;
};

struct Result {
  std::string shape, name;
  double fwd_cur, fwd_kcat, fwd_kcat_zero, fwd_kcat_copy, fwd_kcat_lt0;  // us a call
  double base_k, base_k16, base_k64;                                    // base GEMMs alone (largest module)
  double lora_up_us;                                                    // lora_up calls alone
  double fwd_one;  // modules sharing an input: one GEMM over all outputs (N = Σout, block-diagonal tail)
  double bwd_cur, bwd_kcat;
  double check_fwd, check_bwd;  // max |kcat - current| / max |current| on set 0
  int fwd_count, bwd_count;
  double saved_ms() const {
    const double f = fwd_kcat;
    return (fwd_count * (fwd_cur - f) + bwd_count * (bwd_cur - bwd_kcat)) / 1000.0;
  }
};

Result run_mod(Gpu& g, const std::string& shape, const Mod& m, int64_t T, int reps) {
  const int sets = 3;
  const int n = static_cast<int>(m.outs.size());
  const int64_t R = kR * n, in = m.in, ldp = in + R;
  struct Set {
    bf16 *x, *xp, *u, *A, *res;
    std::vector<bf16*> W, Wc, B, y, dy, dyp;
    bf16 *du, *dx;
    float *gA;
    std::vector<float*> gB;
  };
  std::vector<Set> S(sets);
  for (Set& s : S) {
    s.x = g.bf(size_t(T) * in, 1.f);
    s.xp = g.bf(size_t(T) * ldp, 1.f);
    s.u = g.bf(size_t(T) * R);
    s.A = g.bf(size_t(R) * in);
    s.res = g.bf(size_t(T) * m.outs[0], 1.f);
    s.du = g.bf(size_t(T) * R);
    s.dx = g.bf(size_t(T) * in);
    s.gA = g.f32(size_t(R) * in);
    for (int i = 0; i < n; ++i) {
      const int64_t o = m.outs[i];
      s.W.push_back(g.bf(size_t(o) * in, 0.02f));
      s.Wc.push_back(g.bf(size_t(o + R) * ldp, 0.02f));  // [W | s·B] over [A | 0] (rows o + R, cols in + R)
      s.B.push_back(g.bf(size_t(o) * kR));
      s.y.push_back(g.bf(size_t(T) * o));
      s.dy.push_back(g.bf(size_t(T) * o, 0.01f));
      s.dyp.push_back(g.bf(size_t(T) * (o + R), 0.01f));
      s.gB.push_back(g.f32(size_t(o) * kR));
    }
  }
  CK(cudaStreamSynchronize(g.s));
  auto copy2d = [&](bf16* dst, int64_t ldd, const bf16* src, int64_t lds, int64_t rows, int64_t cols, float a) {
    copy2d_kernel<<<1024, 256, 0, g.s>>>(dst, ldd, src, lds, rows, cols, a);
    CK(cudaGetLastError());
  };
  // Set 0 holds consistent operands (xp = [x | u], Wc_i = [W_i | s·B_i at its u block ; A]) for the check below.
  {
    Set& s = S[0];
    copy2d(s.xp, ldp, s.x, in, T, in, 1.f);
    for (int i = 0; i < n; ++i) {
      const int64_t o = m.outs[i];
      CK(cudaMemsetAsync(s.Wc[i], 0, size_t(o + R) * ldp * 2, g.s));
      copy2d(s.Wc[i], ldp, s.W[i], in, o, in, 1.f);
      copy2d(s.Wc[i] + in + i * kR, ldp, s.B[i], kR, o, kR, kScale);
      copy2d(s.Wc[i] + o * ldp, ldp, s.A, in, R, in, 1.f);
      copy2d(s.dyp[i], o + R, s.dy[i], o, T, o, 1.f);
    }
  }
  Result r{};
  r.shape = shape, r.name = m.name, r.fwd_count = m.fwd_count, r.bwd_count = m.bwd_count;
  const bool res = m.res;

  // ---- forward ----
  auto fwd_cur_once = [&](int k) {
    Set& s = S[k];
    gemm(g, false, true, T, R, in, s.x, in, s.A, in, s.u, R, 1.f, 0.f);
    for (int i = 0; i < n; ++i) lora_up(g, T, m.outs[i], s.u + i * kR, R, s.B[i], res ? s.res : nullptr, s.y[i]);
    for (int i = 0; i < n; ++i) gemm(g, false, true, T, m.outs[i], in, s.x, in, s.W[i], in, s.y[i], m.outs[i], 1.f, 1.f);
  };
  r.fwd_cur = time_graph(g, reps, sets, fwd_cur_once);
  // K-concat, module i reading K = in + (i+1)·r ("tri": the largest module first) or K = in + R ("zero").
  auto fwd_kcat_once = [&](int k, bool zero, int resmode) {  // resmode 0: cublasLt C != D, 1: copy + beta 1
    Set& s = S[k];
    gemm(g, false, true, T, R, in, s.xp, ldp, s.A, in, s.xp + in, ldp, 1.f, 0.f);
    for (int i = 0; i < n; ++i) {
      const int64_t o = m.outs[i], K = zero ? in + R : in + (i + 1) * kR;
      if (!res) {
        gemm(g, false, true, T, o, K, s.xp, ldp, s.Wc[i], ldp, s.y[i], o, 1.f, 0.f);
      } else if (resmode == 0) {
        lt_gemm(g, T, o, K, s.xp, ldp, s.Wc[i], ldp, s.res, s.y[i], o, 1.f);
      } else {
        CK(cudaMemcpyAsync(s.y[i], s.res, size_t(T) * o * 2, cudaMemcpyDeviceToDevice, g.s));
        gemm(g, false, true, T, o, K, s.xp, ldp, s.Wc[i], ldp, s.y[i], o, 1.f, 1.f);
      }
    }
  };
  auto kcat = [&](bool zero, int resmode) {
    return time_graph(g, reps, sets, [&](int k) { fwd_kcat_once(k, zero, resmode); });
  };
  r.fwd_kcat = kcat(false, 0);
  r.fwd_kcat_zero = n > 1 ? kcat(true, 0) : r.fwd_kcat;
  r.fwd_kcat_copy = res ? kcat(false, 1) : r.fwd_kcat;
  // cublasLt with beta 0 (no residual) at the same shape: whether Lt's algorithm alone differs from GemmEx's.
  r.fwd_kcat_lt0 = time_graph(g, reps, sets, [&](int k) {
    Set& s = S[k];
    lt_gemm(g, T, m.outs[0], in + kR, s.xp, ldp, s.Wc[0], ldp, s.y[0], s.y[0], m.outs[0], 0.f);
  });
  const int64_t o0 = m.outs[0];
  r.base_k = time_graph(g, reps, sets, [&](int k) {
    Set& s = S[k];
    gemm(g, false, true, T, o0, in, s.x, in, s.W[0], in, s.y[0], o0, 1.f, 0.f);
  });
  r.base_k16 = time_graph(g, reps, sets, [&](int k) {
    Set& s = S[k];
    gemm(g, false, true, T, o0, in + kR, s.xp, ldp, s.Wc[0], ldp, s.y[0], o0, 1.f, 0.f);
  });
  {  // K + 64 on its own operands (rows in + 64 long: a leading dimension is at least K)
    const int64_t ld64 = in + 64;
    bf16* x64 = g.bf(size_t(T) * ld64, 1.f);
    bf16* w64 = g.bf(size_t(o0) * ld64, 0.02f);
    r.base_k64 = time_graph(g, reps, 1, [&](int k) {
      gemm(g, false, true, T, o0, ld64, x64, ld64, w64, ld64, S[k].y[0], o0, 1.f, 0.f);
    });
  }
  // One GEMM for every module of the group: y_all [T, Σout] (=) xp·[W_all | blocks of s·B_i]ᵀ (informational:
  // the consumers would read their columns of y_all).
  int64_t osum = 0;
  for (int64_t o : m.outs) osum += o;
  if (n > 1) {
    bf16* wall = g.bf(size_t(osum) * ldp, 0.02f);
    bf16* yall = g.bf(size_t(T) * osum);
    r.fwd_one = time_graph(g, reps, sets, [&](int k) {
      Set& s = S[k];
      gemm(g, false, true, T, R, in, s.xp, ldp, s.A, in, s.xp + in, ldp, 1.f, 0.f);
      gemm(g, false, true, T, osum, ldp, s.xp, ldp, wall, ldp, yall, osum, 1.f, 0.f);
    });
  } else {
    r.fwd_one = r.fwd_kcat;
  }
  r.lora_up_us = time_graph(g, reps, sets, [&](int k) {
    Set& s = S[k];
    for (int i = 0; i < n; ++i) lora_up(g, T, m.outs[i], s.u + i * kR, R, s.B[i], res ? s.res : nullptr, s.y[i]);
  });

  // ---- backward (dx written, not accumulated, as in the blocks) ----
  auto bwd_cur_once = [&](int k) {
      Set& s = S[k];
      for (int i = 0; i < n; ++i)
        lora_dy(g, T, m.outs[i], s.dy[i], m.outs[i], s.B[i], s.u + i * kR, R, s.du + i * kR, R, s.gB[i]);
      gemm(g, true, false, R, in, T, s.du, R, s.x, in, s.gA, in, 1.f, 1.f, CUDA_R_32F);
      gemm(g, false, false, T, in, R, s.du, R, s.A, in, s.dx, in, 1.f, 0.f);
      for (int i = 0; i < n; ++i) gemm(g, false, false, T, in, m.outs[i], s.dy[i], m.outs[i], s.W[i], in, s.dx, in, 1.f, 1.f);
  };
  auto bwd_kcat_once = [&](int k) {
      Set& s = S[k];
      const int64_t ld0 = o0 + R;
      bf16* du = s.dyp[0] + o0;  // du of every module in the tail of the first module's dy
      for (int i = 0; i < n; ++i) {
        const bf16* dy = i == 0 ? s.dyp[0] : s.dy[i];
        const int64_t ldy = i == 0 ? ld0 : m.outs[i];
        lora_dy(g, T, m.outs[i], dy, ldy, s.B[i], s.xp + in + i * kR, ldp, du + i * kR, ld0, s.gB[i]);
      }
      gemm(g, true, false, R, in, T, du, ld0, s.xp, ldp, s.gA, in, 1.f, 1.f, CUDA_R_32F);
      gemm(g, false, false, T, in, o0 + R, s.dyp[0], ld0, s.Wc[0], ldp, s.dx, in, 1.f, 0.f);
      for (int i = 1; i < n; ++i)
        gemm(g, false, false, T, in, m.outs[i], s.dy[i], m.outs[i], s.Wc[i], ldp, s.dx, in, 1.f, 1.f);
  };
  if (m.bwd) {
    r.bwd_cur = time_graph(g, reps, sets, bwd_cur_once);
    r.bwd_kcat = time_graph(g, reps, sets, bwd_kcat_once);
  }
  // Check on set 0: each variant once more, K-concat against current (max |diff| / max |current|).
  auto download = [&](const bf16* p, size_t count) {
    std::vector<bf16> h(count);
    CK(cudaMemcpyAsync(h.data(), p, count * 2, cudaMemcpyDeviceToHost, g.s));
    CK(cudaStreamSynchronize(g.s));
    std::vector<float> f(count);
    for (size_t i = 0; i < count; ++i) f[i] = __bfloat162float(h[i]);
    return f;
  };
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, m = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i]))), m = std::max(m, double(std::fabs(a[i])));
    return m > 0 ? d / m : d;
  };
  {
    Set& s = S[0];
    fwd_cur_once(0);
    std::vector<std::vector<float>> ref;
    for (int i = 0; i < n; ++i) ref.push_back(download(s.y[i], size_t(T) * m.outs[i]));
    fwd_kcat_once(0, false, 0);
    for (int i = 0; i < n; ++i) r.check_fwd = std::max(r.check_fwd, rel(ref[i], download(s.y[i], size_t(T) * m.outs[i])));
    if (m.bwd) {
      bwd_cur_once(0);
      const std::vector<float> dref = download(s.dx, size_t(T) * in);
      bwd_kcat_once(0);
      r.check_bwd = rel(dref, download(s.dx, size_t(T) * in));
    }
  }
  g.free_all();
  return r;
}

std::vector<Mod> modules(const std::string& shape, int ckpt_layers) {
  // 2b: 24 layers (18 GDN, 6 attention), hidden 2048, intermediate 6144, GDN 16 k-heads / 16 v-heads x 128,
  // attention 8 heads x 256 (q+gate 4096), 2 kv heads. 9b: 32 layers (24 / 8), hidden 4096, intermediate 12288,
  // GDN 16 k-heads / 32 v-heads x 128, attention 16 heads x 256, 4 kv heads. Every 4th layer is attention.
  // Forward count: the first forward + the recompute of the checkpointed layers (the layer not checkpointed is
  // taken to be a GDN layer); the MLP down's recompute is skipped (nothing reads its output).
  const bool b2 = shape == "2b";
  const int L = b2 ? 24 : 32, La = L / 4, Lg = L - La;
  const int nock = L - ckpt_layers;
  const int gf = Lg + (Lg - nock), af = La + La;
  const int64_t H = b2 ? 2048 : 4096, I = b2 ? 6144 : 12288, HV = b2 ? 16 : 32, vd = HV * 128, kd = 16 * 128;
  const int64_t nh = b2 ? 8 : 16, nkv = b2 ? 2 : 4;
  return {
      {"gdn_in(qkv,z,b,a)", H, {2 * kd + vd, vd, HV, HV}, false, true, gf, Lg},
      {"gdn_out", vd, {H}, true, true, gf, Lg},
      {"attn_in(q,k,v)", H, {nh * 512, nkv * 256, nkv * 256}, false, true, af, La},
      {"attn_o", nh * 256, {H}, true, true, af, La},
      {"mlp_down", I, {H}, true, false, L, 0},
  };
}

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 4096;
  int reps = 24;
  std::string which = "both";
  int ck2 = 23, ck9 = 31;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") T = std::atoll(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else if (a == "--shape") which = v;
    else if (a == "--ckpt-2b") ck2 = std::atoi(v.c_str());
    else if (a == "--ckpt-9b") ck9 = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  Gpu g;
  CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  CB(cublasCreate(&g.blas));
  CB(cublasSetStream(g.blas, g.s));
  CB(cublasLtCreate(&g.lt));
  CK(cudaMalloc(&g.ws, g.ws_bytes));
  CB(cublasSetWorkspace(g.blas, g.ws, g.ws_bytes));
  g.dy_scratch = g.ws, g.dy_scratch_bytes = g.ws_bytes;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g.policy.path = prop.major == 9 && dk::kernels_built_for_hopper() ? dk::KernelPath::Hopper : dk::KernelPath::Portable;
  g.policy.cc_major = prop.major, g.policy.cc_minor = prop.minor, g.policy.sm_count = prop.multiProcessorCount;
  g.policy.smem_optin = prop.sharedMemPerBlockOptin;
  std::printf("device %s, T %lld, r %d, reps %d (graph-timed, 3 buffer sets rotated)\n", prop.name,
              static_cast<long long>(T), kR, reps);

  std::vector<Result> all;
  for (const std::string shape : {"2b", "9b"}) {
    if (which != "both" && which != shape) continue;
    for (const Mod& m : modules(shape, shape == "2b" ? ck2 : ck9)) {
      all.push_back(run_mod(g, shape, m, T, reps));
      std::fprintf(stderr, "done %s %s\n", shape.c_str(), m.name.c_str());
    }
  }
  std::printf("%-4s %-18s %3s %3s | %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s | %7s %7s | %7s | %7s %7s\n", "shp",
              "module", "nF", "nB", "fwd_cur", "kcat_lt", "kc_zero", "kc_copy", "kc_one", "lt_b0", "base_K", "K+16", "K+64",
              "loraup", "bwd_cur", "bwd_kc", "ms/step", "chk_f", "chk_b");
  std::map<std::string, double> step;
  for (const Result& r : all) {
    std::printf("%-4s %-18s %3d %3d | %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f | %7.3f |"
                " %7.1e %7.1e\n", r.shape.c_str(), r.name.c_str(), r.fwd_count, r.bwd_count, r.fwd_cur, r.fwd_kcat,
                r.fwd_kcat_zero, r.fwd_kcat_copy, r.fwd_one, r.fwd_kcat_lt0, r.base_k, r.base_k16, r.base_k64, r.lora_up_us,
                r.bwd_cur, r.bwd_kcat, r.saved_ms(), r.check_fwd, r.check_bwd);
    step[r.shape] += r.saved_ms();
  }
  for (auto& [s, v] : step)
    std::printf("projected saving a %s step (counts x (cur - kcat), fwd via cublasLt C != D): %.3f ms\n", s.c_str(), v);
  std::printf("{\"bench\":\"lora_kcat\",\"tokens\":%lld,\"modules\":[", static_cast<long long>(T));
  for (size_t i = 0; i < all.size(); ++i) {
    const Result& r = all[i];
    std::printf("%s{\"shape\":\"%s\",\"module\":\"%s\",\"nf\":%d,\"nb\":%d,\"fwd_cur\":%.2f,\"fwd_kcat\":%.2f,"
                "\"fwd_kcat_zero\":%.2f,\"fwd_kcat_copy\":%.2f,\"fwd_one\":%.2f,\"lt_b0\":%.2f,\"base_k\":%.2f,\"base_k16\":%.2f,"
                "\"base_k64\":%.2f,\"lora_up\":%.2f,\"bwd_cur\":%.2f,\"bwd_kcat\":%.2f,\"saved_ms\":%.3f,"
                "\"check_fwd\":%.2e,\"check_bwd\":%.2e}",
                i ? "," : "", r.shape.c_str(), r.name.c_str(), r.fwd_count, r.bwd_count, r.fwd_cur, r.fwd_kcat,
                r.fwd_kcat_zero, r.fwd_kcat_copy, r.fwd_one, r.fwd_kcat_lt0, r.base_k, r.base_k16, r.base_k64,
                r.lora_up_us, r.bwd_cur, r.bwd_kcat, r.saved_ms(), r.check_fwd, r.check_bwd);
  }
  std::printf("],\"saved_ms\":{");
  bool first = true;
  for (auto& [s, v] : step) std::printf("%s\"%s\":%.3f", first ? "" : ",", s.c_str(), v), first = false;
  std::printf("}}\n");
  return 0;
}
