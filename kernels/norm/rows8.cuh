// Row-wise norms over bf16 rows with n % 8 == 0: a row is spread over a group of L lanes of one warp (L = 16 for
// rows of at most 128 values, else 32), each lane holding CH groups of 8 values in registers. A row is read once,
// and its reduction is a few shuffles inside the group (no shared memory, no block barrier). Used by the RMSNorm
// kernels when every row operand is bf16; the one-block-per-row kernels handle the rest.
#pragma once
#include <cstdint>
#include <type_traits>

#include "common/bf16x8.cuh"
#include "common/device.cuh"

namespace deltatune::kernels {

constexpr int kRows8Threads = 256;

// Sum over the L lanes of this lane's group (every lane of the warp must call it).
template <int L> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// This thread's row and lane within the row's group; valid = false past the last row (such lanes still take part
// in the shuffles).
template <int L> struct RowLane {
  int64_t row;
  int lane;
  bool valid;
  __device__ explicit RowLane(int64_t rows)
      : row(int64_t(blockIdx.x) * (kRows8Threads / L) + threadIdx.x / L), lane(threadIdx.x % L), valid(row < rows) {}
};

// Loads this lane's CH groups of 8 of row rl.row of x (rows of n8 groups, ldx8 groups apart) into xv and
// returns the row's Σx² (every lane gets it; groups past the row or rows past the end are left unread and
// count 0).
template <int L, int CH>
__device__ __forceinline__ float load_row_sumsq(const void* x, const RowLane<L>& rl, int n8, int64_t ldx8,
                                                Bf16x8 (&xv)[CH]) {
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (!rl.valid || j >= n8) continue;
    xv[k] = ld8(x, rl.row * ldx8 + j);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += xv[k].v[e] * xv[k].v[e];
  }
  return group_sum<L>(ss);
}

// load_row_sumsq holding the groups packed (4 registers a group, not 8).
template <int L, int CH>
__device__ __forceinline__ float load_row_sumsq(const void* x, const RowLane<L>& rl, int n8, int64_t ldx8,
                                                uint4 (&xv)[CH]) {
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (rl.valid && j < n8) xv[k] = ld8_raw(x, rl.row * ldx8 + j);
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (!rl.valid || j >= n8) continue;
    const Bf16x8 v = unpack8(xv[k]);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v.v[e] * v.v[e];
  }
  return group_sum<L>(ss);
}

// Packed groups made opaque between a kernel's passes: the output pass widens them again instead of the compiler
// keeping the first pass's fp32 copies alive across the reduction (8 registers a group).
template <int N> __device__ __forceinline__ void opaque(uint4 (&v)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) asm volatile("" : "+r"(v[k].x), "+r"(v[k].y), "+r"(v[k].z), "+r"(v[k].w));
}

// Rows of 64+ groups of 8 (n >= 512: CH >= 8) are read again in the output pass instead of being held: holding
// x (and dy) took 8·CH registers per operand per lane (116-255 registers at n = 2048-4096, spills at 4096), one
// block of 8 warps per SM, ~1.5 TB/s. The second read hits L1/L2 (the block read those rows just before).
template <int CH> constexpr bool kRereadRows = CH >= 8;

// The row's Σx² without holding the row (kRereadRows).
template <int L, int CH>
__device__ __forceinline__ float row_sumsq(const void* x, const RowLane<L>& rl, int n8, int64_t ldx8) {
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < CH; ++k) {
    const int j = rl.lane + L * k;
    if (!rl.valid || j >= n8) continue;
    const Bf16x8 xv = ld8(x, rl.row * ldx8 + j);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += xv.v[e] * xv.v[e];
  }
  return group_sum<L>(ss);
}

// Whether a norm weight vector takes w8<true>: F32 (as the model keeps them) and 16-byte aligned.
inline bool weight_f32x4(KIn w) { return w.t == KType::F32 && reinterpret_cast<uintptr_t>(w.p) % 16 == 0; }

// The 8 weights of group j: two 16-byte loads from an F32 vector (F32X4), else one typed load per value. The
// per-value path's type switch and scalar loads made the weight, not the row, the cost of a bf16 row.
template <bool F32X4> __device__ __forceinline__ void w8(KIn w, int j, float (&wv)[8]) {
  if constexpr (F32X4) {
    const float4* p = static_cast<const float4*>(w.p) + 2 * j;
    const float4 a = __ldg(p), b = __ldg(p + 1);
    wv[0] = a.x, wv[1] = a.y, wv[2] = a.z, wv[3] = a.w, wv[4] = b.x, wv[5] = b.y, wv[6] = b.z, wv[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) wv[e] = ld(w, 8 * j + e);
  }
}

// Calls launch(std::integral_constant<int, L>{}, std::integral_constant<int, CH>{}, grid) with the group size and
// chunks per lane for rows of n values; false (nothing launched) when n is not a multiple of 8 or over 4096.
template <class Launch> bool dispatch_rows8(int64_t rows, int64_t n, Launch&& launch) {
  if (n % 8 != 0 || n <= 0 || n > 4096) return false;
  const int64_t n8 = n / 8;
  const auto grid = [&](int lanes) { return grid_for(rows, kRows8Threads / lanes, int64_t(1) << 31); };
  using std::integral_constant;
  if (n8 <= 16) launch(integral_constant<int, 16>{}, integral_constant<int, 1>{}, grid(16));
  else if (n8 <= 32) launch(integral_constant<int, 32>{}, integral_constant<int, 1>{}, grid(32));
  else if (n8 <= 64) launch(integral_constant<int, 32>{}, integral_constant<int, 2>{}, grid(32));
  else if (n8 <= 128) launch(integral_constant<int, 32>{}, integral_constant<int, 4>{}, grid(32));
  else if (n8 <= 256) launch(integral_constant<int, 32>{}, integral_constant<int, 8>{}, grid(32));
  else launch(integral_constant<int, 32>{}, integral_constant<int, 16>{}, grid(32));
  return true;
}

}  // namespace deltatune::kernels
