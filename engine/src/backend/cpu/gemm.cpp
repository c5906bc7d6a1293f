// C[M,N] (=) alpha·op(A)·op(B) + beta·C in fp32, cache-blocked in the usual BLIS way:
//   for each KC-deep slice of K and NC-wide slice of N: pack op(B) into NR-wide panels (k-major), then in
//   parallel over (MC-row block of C, group of NR panels): pack alpha·op(A) into MR-tall panels and run an
//   MR×NR register-tile micro-kernel over the packed panels, accumulating into C.
// Packing makes both micro-kernel operands contiguous whatever trans_a/trans_b are, and zero-pads the
// ragged edges so the micro-kernel has no bounds checks. Each C element is owned by exactly one task for
// a given K slice, and K slices run in order, so the result does not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

// On x86-64 the macro-kernel is compiled twice (AVX2+FMA and baseline SSE2) and picked per call from
// the CPU's feature bits, so the same binary is fast on current CPUs and still runs on old ones.
// (target_clones("arch=haswell") would dispatch on the CPU *model* and skip AMD parts.)
#if defined(__x86_64__) && defined(__GNUC__)
#define DT_GEMM_X86_DISPATCH 1
#endif

namespace deltatune {

namespace {

constexpr int64_t kMR = 6, kNR = 16;        // register tile: 12 AVX accumulators
constexpr int64_t kKC = 256, kMC = 96, kNC = 2048;
constexpr int64_t kNTask = 256;             // columns per task (16 panels)

struct Operand {
  const float* p;
  bool trans;
  int64_t ld;  // row length of the stored matrix
  // element (r, c) of op(X)
  float at(int64_t r, int64_t c) const { return trans ? p[c * ld + r] : p[r * ld + c]; }
};

// ap[panel][k][r] = alpha·op(A)(i0 + panel·MR + r, k0 + k), zero beyond mc.
void pack_a(const Operand& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float alpha, float* ap) {
  for (int64_t p0 = 0; p0 < mc; p0 += kMR) {
    float* dst = ap + p0 * kc;
    const int64_t rows = std::min(kMR, mc - p0);
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < rows; ++r) dst[k * kMR + r] = alpha * a.at(i0 + p0 + r, k0 + k);
      for (int64_t r = rows; r < kMR; ++r) dst[k * kMR + r] = 0.f;
    }
  }
}

// bp[panel][k][j] = op(B)(k0 + k, j0 + panel·NR + j), zero beyond nc. Panels [pb, pe) only.
void pack_b(const Operand& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t pb, int64_t pe, float* bp) {
  for (int64_t pnl = pb; pnl < pe; ++pnl) {
    float* dst = bp + pnl * kNR * kc;
    const int64_t jj = pnl * kNR, cols = std::min(kNR, nc - jj);
    if (!b.trans && cols == kNR) {
      for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kNR, b.p + (k0 + k) * b.ld + j0 + jj, kNR * sizeof(float));
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t j = 0; j < cols; ++j) dst[k * kNR + j] = b.at(k0 + k, j0 + jj + j);
      for (int64_t j = cols; j < kNR; ++j) dst[k * kNR + j] = 0.f;
    }
  }
}

// Eight floats as one value: GCC/Clang vector extension. The micro-kernel below is written with it
// because auto-vectorising the plain 6×16 loop nest spilled the accumulators to the stack (~1 GFLOP/s);
// on the baseline target each v8f op becomes two SSE ops.
typedef float v8f __attribute__((vector_size(32)));

__attribute__((always_inline)) inline void load8(v8f& v, const float* p) { std::memcpy(&v, p, sizeof v); }

// C block (mc × panels of NR) += packed A · packed B.
__attribute__((always_inline)) inline void macro_kernel_impl(int64_t kc, int64_t mc, int64_t nc, const float* ap, const float* bp, float* c, int64_t ldc) {
  static_assert(kNR == 16 && kMR == 6, "micro-kernel is written for a 6x16 tile");
  for (int64_t jj = 0; jj < nc; jj += kNR) {
    const float* b = bp + (jj / kNR) * kNR * kc;
    const int64_t cols = std::min(kNR, nc - jj);
    for (int64_t ii = 0; ii < mc; ii += kMR) {
      const float* a = ap + ii * kc;
      v8f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {}, c40 = {}, c41 = {},
          c50 = {}, c51 = {};
      for (int64_t k = 0; k < kc; ++k) {
        v8f b0, b1;
        load8(b0, b + k * kNR);
        load8(b1, b + k * kNR + 8);
        const float* ak = a + k * kMR;
        c00 += ak[0] * b0; c01 += ak[0] * b1;
        c10 += ak[1] * b0; c11 += ak[1] * b1;
        c20 += ak[2] * b0; c21 += ak[2] * b1;
        c30 += ak[3] * b0; c31 += ak[3] * b1;
        c40 += ak[4] * b0; c41 += ak[4] * b1;
        c50 += ak[5] * b0; c51 += ak[5] * b1;
      }
      alignas(32) float acc[kMR][kNR];
      const v8f* rows_acc[kMR][2] = {{&c00, &c01}, {&c10, &c11}, {&c20, &c21}, {&c30, &c31}, {&c40, &c41}, {&c50, &c51}};
      for (int64_t r = 0; r < kMR; ++r) {
        std::memcpy(&acc[r][0], rows_acc[r][0], sizeof(v8f));
        std::memcpy(&acc[r][8], rows_acc[r][1], sizeof(v8f));
      }
      const int64_t rows = std::min(kMR, mc - ii);
      for (int64_t r = 0; r < rows; ++r) {
        float* crow = c + (ii + r) * ldc + jj;
        for (int64_t j = 0; j < cols; ++j) crow[j] += acc[r][j];
      }
    }
  }
}

void macro_kernel_base(int64_t kc, int64_t mc, int64_t nc, const float* ap, const float* bp, float* c,
                       int64_t ldc) {
  macro_kernel_impl(kc, mc, nc, ap, bp, c, ldc);
}

#ifdef DT_GEMM_X86_DISPATCH
__attribute__((target("avx2,fma"))) void macro_kernel_avx2(int64_t kc, int64_t mc, int64_t nc, const float* ap,
                                                           const float* bp, float* c, int64_t ldc) {
  macro_kernel_impl(kc, mc, nc, ap, bp, c, ldc);
}
#endif

using MacroKernel = void (*)(int64_t, int64_t, int64_t, const float*, const float*, float*, int64_t);

MacroKernel pick_macro_kernel() {
#ifdef DT_GEMM_X86_DISPATCH
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return macro_kernel_avx2;
#endif
  return macro_kernel_base;
}

}  // namespace

void CpuBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                      float beta) {
  const float* pa = cpu::f32(a, "gemm A");
  const float* pb = cpu::f32(b, "gemm B");
  float* pc = cpu::f32(c, "gemm C");
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  check(K == Kb && c.rows() == M && c.cols() == N,
        "cpu backend: gemm shapes do not match: A " + shape_str(a.shape) + (trans_a ? "ᵀ" : "") + " · B " +
            shape_str(b.shape) + (trans_b ? "ᵀ" : "") + " -> C " + shape_str(c.shape));
  // beta == 0 must ignore C's old content, NaN included.
  if (beta != 1.f) {
    pool_.parallel_for(M * N, 1 << 15, [&](int64_t s, int64_t e) {
      if (beta == 0.f) std::fill(pc + s, pc + e, 0.f);
      else for (int64_t i = s; i < e; ++i) pc[i] *= beta;
    });
  }
  if (M == 0 || N == 0 || K == 0 || alpha == 0.f) return;

  const Operand A{pa, trans_a, a.cols()}, B{pb, trans_b, b.cols()};
  const MacroKernel macro_kernel = pick_macro_kernel();
  const int64_t nc_max = std::min(kNC, (N + kNR - 1) / kNR * kNR);
  std::vector<float> bpack(static_cast<size_t>(std::min(kKC, K) * nc_max));
  for (int64_t j0 = 0; j0 < N; j0 += kNC) {
    const int64_t nc = std::min(kNC, N - j0), npanels = (nc + kNR - 1) / kNR;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      float* bp = bpack.data();
      pool_.parallel_for(npanels, 4, [&](int64_t pb_, int64_t pe_) { pack_b(B, k0, kc, j0, nc, pb_, pe_, bp); });
      const int64_t mblocks = (M + kMC - 1) / kMC, nblocks = (nc + kNTask - 1) / kNTask;
      pool_.parallel_for(mblocks * nblocks, 1, [&](int64_t tb, int64_t te) {
        std::vector<float> apack(static_cast<size_t>(kMC * kc));
        int64_t packed_block = -1;
        for (int64_t task = tb; task < te; ++task) {
          const int64_t mb = task / nblocks, nb = task % nblocks;
          const int64_t i0 = mb * kMC, mc = std::min(kMC, M - i0);
          if (mb != packed_block) {
            pack_a(A, i0, mc, k0, kc, alpha, apack.data());
            packed_block = mb;
          }
          const int64_t jj = nb * kNTask, ncols = std::min(kNTask, nc - jj);
          macro_kernel(kc, mc, ncols, apack.data(), bp + (jj / kNR) * kNR * kc, pc + i0 * N + j0 + jj, N);
        }
      });
    }
  }
}

}  // namespace deltatune
