// MoE dispatch without a host sync: a stable counting sort of the routing slots s = t·K + j by expert.
//   1. count: the slots are cut into units of kUnit consecutive slots, one warp per unit; each warp counts
//      its unit's slots per expert (shared-memory counters, order-free) -> hist[unit][e].
//   2. scan (one block, one thread per expert): per expert, an exclusive prefix of hist over the units (the
//      rank of the unit's first slot among the expert's slots), the expert total (-> load), and a block scan
//      of the totals -> offsets.
//   3. place: each warp walks its unit in order, 32 slots at a time; lanes holding the same expert find each
//      other with __match_any_sync and take consecutive rows in lane order, then the group's lowest lane
//      advances the warp's running counter for that expert.
// Every slot's row depends only on the slots before it (never on atomic order): the result is
// deterministic and stable (rows of one expert in increasing slot order), as the CPU reference.
#include "common/device.cuh"
#include "moe/moe.cuh"
#include "moe/scan.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kUnit = 256;  // slots per warp
constexpr int kWarps = 8;   // warps per block in the count and place kernels

__global__ void dispatch_count_kernel(const int32_t* idx, int64_t n, int E, int64_t units, int32_t* hist) {
  extern __shared__ int32_t cnt[];  // (kWarps, E)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < kWarps * E; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  const int64_t unit = int64_t(blockIdx.x) * kWarps + warp;
  if (unit < units) {
    const int64_t s0 = unit * kUnit, s1 = min(n, s0 + kUnit);
    for (int64_t s = s0 + lane; s < s1; s += 32) {
      const int e = idx[s];
      if (e >= 0 && e < E) atomicAdd(&cnt[warp * E + e], 1);
    }
  }
  __syncthreads();
  if (unit < units)
    for (int e = lane; e < E; e += 32) hist[unit * E + e] = cnt[warp * E + e];
}

// One block of >= E threads (multiple of 32). hist (=) per-unit base within the expert; offsets (=) [E+1];
// load (+=) per-expert counts.
__global__ void dispatch_scan_kernel(int32_t* hist, int64_t units, int E, int32_t* offsets, float* load) {
  const int e = threadIdx.x;
  int run = 0;
  if (e < E) {
#pragma unroll 8
    for (int64_t u = 0; u < units; ++u) {
      const int c = hist[u * E + e];
      hist[u * E + e] = run;
      run += c;
    }
    if (load) load[e] += float(run);
  }
  int total = 0;
  const int base = block_exclusive_scan(run, &total);
  if (e < E) offsets[e] = base;
  if (threadIdx.x == 0) offsets[E] = total;
}

__global__ void dispatch_place_kernel(const int32_t* idx, int64_t n, int K, int E, int64_t units, const int32_t* hist,
                                      const int32_t* offsets, int32_t* row_token, int32_t* row_slot,
                                      int32_t* slot_row) {
  extern __shared__ int32_t next[];  // (kWarps, E): next free row per expert, per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t unit = int64_t(blockIdx.x) * kWarps + warp;
  if (unit >= units) return;  // whole warps only; no block barrier below
  int32_t* my = next + warp * E;
  for (int e = lane; e < E; e += 32) my[e] = offsets[e] + hist[unit * E + e];
  __syncwarp();
  const int64_t s0 = unit * kUnit, s1 = min(n, s0 + kUnit);
  const unsigned lower = (1u << lane) - 1u;
  for (int64_t sb = s0; sb < s1; sb += 32) {
    const int64_t s = sb + lane;
    int key = s < s1 ? idx[s] : -1;
    if (key < 0 || key >= E) key = -1 - lane;  // tail or invalid: a group of its own, never written
    const unsigned grp = __match_any_sync(0xffffffffu, key);
    if (key >= 0) {
      const int32_t r = my[key] + __popc(grp & lower);
      row_token[r] = static_cast<int32_t>(s / K);
      row_slot[r] = static_cast<int32_t>(s);
      slot_row[s] = r;
    }
    __syncwarp();  // every lane has read my[key] before the leader advances it
    if (key >= 0 && (grp & lower) == 0) my[key] += __popc(grp);
    __syncwarp();
  }
}

}  // namespace

#ifndef DT_ATTN_EMU  // launchers: not part of the host emulation build (emu/dispatch_emu.cpp)
int64_t moe_dispatch_scratch_ints(int64_t n, int E) { return ((n + kUnit - 1) / kUnit) * E; }

cudaError_t launch_moe_dispatch(const KernelPolicy& pol, const int32_t* idx, int64_t n, int K, int E, int32_t* offsets, int32_t* row_token,
                                int32_t* row_slot, int32_t* slot_row, float* load, int32_t* scratch,
                                cudaStream_t s) {
  if (E < 1 || E > kMaxDispatchExperts || K < 1) return cudaErrorInvalidValue;
  const int64_t units = (n + kUnit - 1) / kUnit;
  const unsigned blocks = static_cast<unsigned>((units + kWarps - 1) / kWarps);
  const size_t smem = sizeof(int32_t) * kWarps * E;
  if (!default_smem_fits(pol, smem)) return cudaErrorInvalidConfiguration;
  if (units > 0) dispatch_count_kernel<<<blocks, kWarps * 32, smem, s>>>(idx, n, E, units, scratch);
  const int scan_threads = (E + 31) / 32 * 32;
  dispatch_scan_kernel<<<1, scan_threads, 0, s>>>(scratch, units, E, offsets, load);
  if (units > 0)
    dispatch_place_kernel<<<blocks, kWarps * 32, smem, s>>>(idx, n, K, E, units, scratch, offsets, row_token,
                                                           row_slot, slot_row);
  return cudaGetLastError();
}
#endif  // DT_ATTN_EMU

}  // namespace deltatune::kernels
