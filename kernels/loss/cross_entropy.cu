// Cross-entropy over rows of logits (T, V), fp32 math, one block per row:
//   lse = log Σ_v exp(x_v);  loss_acc (+=) Σ_rows (lse − x_label)  (ignored rows skipped)
//   dlogits (=) grad_scale·(exp(x − lse) − onehot(label)), 0 for ignored rows.
// Memory: pass 1 reads the row once with an online (max, sum) pair per thread; pass 2 reads and writes it
// once. dlogits may alias logits: every element is read and written by the same thread, and the label's
// logit is read before the barrier that precedes pass 2.
#include <cooperative_groups.h>

#include "common/device.cuh"
#include "loss/loss.cuh"

namespace deltatune::kernels {
namespace {

constexpr int kThreads = 256;

// exp in the natural (B2 false) or the base-2 domain (B2 true: the pairs and logits scaled by log2(e); exp2f is
// one MUFU.EX2 where expf first needs a range reduction).
template <bool B2>
__device__ __forceinline__ float ex(float x) {
  return B2 ? exp2f(x) : expf(x);
}
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <bool B2 = false>
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * ex<B2>(m - mn) + s2 * ex<B2>(m2 - mn);
  m = mn;
}

// Online (max, sum) update of one thread's pair with four logits (B2: the pair in the base-2 domain).
template <bool B2 = false>
__device__ __forceinline__ void lse_update4(float& m, float& s, float4 v) {
  if (B2) v = make_float4(v.x * kLog2e, v.y * kLog2e, v.z * kLog2e, v.w * kLog2e);
  const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
  if (vm > m) {
    s *= ex<B2>(m - vm);
    m = vm;
  }
  s += ex<B2>(v.x - m) + ex<B2>(v.y - m) + ex<B2>(v.z - m) + ex<B2>(v.w - m);
}

// The gradient of four logits starting at column col0: grad_scale·(softmax − onehot(label)), 0 for ignored
// rows.
__device__ __forceinline__ void ce_grad4(float (&g)[4], float4 v, int64_t col0, float lse, int32_t lab,
                                         bool ignored, float grad_scale) {
  const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    g[j] = ignored ? 0.f : grad_scale * (expf(e[j] - lse) - (col0 + j == lab ? 1.f : 0.f));
}
// The same with lse2 = lse·log2(e): exp(x − lse) = exp2(x·log2(e) − lse2), one FFMA + exp2f.
__device__ __forceinline__ void ce_grad4_b2(float (&g)[4], float4 v, int64_t col0, float lse2, int32_t lab,
                                            bool ignored, float grad_scale) {
  const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    g[j] = ignored ? 0.f : grad_scale * (exp2f(fmaf(e[j], kLog2e, -lse2)) - (col0 + j == lab ? 1.f : 0.f));
}

// Block-wide (max, sum) merge; every thread gets the result.
template <bool B2 = false>
__device__ void block_lse(float& m, float& s, float* sm, float* ss) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge<B2>(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < nw; ++w) lse_merge<B2>(m, s, sm[w], ss[w]);
}

__global__ void ce_kernel(KIn x, int64_t V, const int32_t* labels, float grad_scale,
                          const float* grad_scale_dev, KOut d, double* loss_acc) {
  __shared__ float sm[32], ss[32];
  __shared__ float xlab;
  const int64_t row = blockIdx.x, base = row * V;
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex;
  const bool bad = !ignored && (lab < 0 || lab >= V);
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    const float v = ld(x, base + c);
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else
      s += expf(v - m);
  }
  if (threadIdx.x == 0) xlab = (!ignored && !bad) ? ld(x, base + lab) : 0.f;
  block_lse(m, s, sm, ss);  // contains barriers: xlab visible, all reads of pass 1 done
  const float lse = m + logf(s);
  if (threadIdx.x == 0 && !ignored) atomicAdd(loss_acc, bad ? double(NAN) : double(lse - xlab));
  if (d.p == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    float g = 0.f;
    if (!ignored) g = grad_scale * (expf(ld(x, base + c) - lse) - (c == lab ? 1.f : 0.f));
    st(d, base + c, g);
  }
}

// The same for F32 logits with V % 4 == 0 (the linear cross-entropy's chunks): 16-byte loads and 1024 threads
// per row (a 248K-vocabulary row is 1 MB: more loads in flight per block). A thread
// writes exactly the elements it read, so dlogits may alias logits here too.
__global__ void ce_f32x4_kernel(const float* x, int64_t V, const int32_t* labels, float grad_scale,
                                const float* grad_scale_dev, KOut d, double* loss_acc) {
  __shared__ float sm[32], ss[32];
  __shared__ float xlab;
  const int64_t row = blockIdx.x, base = row * V;
  const float4* x4 = reinterpret_cast<const float4*>(x + base);
  const int64_t V4 = V / 4;
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex;
  const bool bad = !ignored && (lab < 0 || lab >= V);
  float m = -INFINITY, s = 0.f;
  for (int64_t c = threadIdx.x; c < V4; c += blockDim.x) {
    lse_update4(m, s, x4[c]);
  }
  if (threadIdx.x == 0) xlab = (!ignored && !bad) ? x[base + lab] : 0.f;
  block_lse(m, s, sm, ss);
  const float lse = m + logf(s);
  if (threadIdx.x == 0 && !ignored) atomicAdd(loss_acc, bad ? double(NAN) : double(lse - xlab));
  if (d.p == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  for (int64_t c = threadIdx.x; c < V4; c += blockDim.x) {
    float g[4];
    ce_grad4(g, x4[c], 4 * c, lse, lab, ignored, grad_scale);
#pragma unroll
    for (int j = 0; j < 4; ++j) st(d, base + 4 * c + j, g[j]);
  }
}

// Hopper (sm_90 thread-block clusters): a row split over a cluster of C blocks, each holding its slice of the
// row in shared memory, so the row is read from memory once instead of twice (ce_f32x4 re-reads a 1 MB row in
// pass 2: with 264 rows in flight they do not stay in L2). The slices' (max, sum) pairs are merged through
// distributed shared memory in the base-2 domain (exp2f is one MUFU.EX2; expf's range reduction made the kernel
// 12% slower, ce35); pass 2 reads the slice from shared memory and writes the gradient in 8- or 16-byte
// stores, row r at d + r·ldd. Every block has read its slice before the cluster barrier after which
// any block writes, so dlogits may alias logits: in place in F32 (ldd = V), or in bf16 over the first half of
// each F32 row (ldd = 2V: launch_cross_entropy_bf16_in_place).
constexpr int kClusterThreads = 512;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// After block_lse, in both cluster kernels: the row's lse in the base-2 domain (lse·log2 e), merged from the C
// blocks' (m, s) pairs through the cluster's shared memory (part, lse_sh: each block's own __shared__ slots);
// every block gets it. The first barrier also means every block has read its slice (the gradient may then be
// written over the row).
template <int C>
__device__ __forceinline__ float cluster_row_lse2(cooperative_groups::cluster_group& cluster, float m, float s,
                                                  float2& part, float& lse_sh) {
  if (threadIdx.x == 0) part = make_float2(m, s);
  cluster.sync();  // every block's pair written (and its slice read)
  if (threadIdx.x < 32) {
    float M = -INFINITY, S = 0.f;
    if (threadIdx.x < C) {
      const float2 p = *cluster.map_shared_rank(&part, threadIdx.x);
      M = p.x;
      S = p.y;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, M, o), s2 = __shfl_xor_sync(0xffffffffu, S, o);
      lse_merge<true>(M, S, m2, s2);
    }
    if (threadIdx.x == 0) lse_sh = M + log2f(S);  // lse·log2(e)
  }
  cluster.sync();  // the pairs read (no block leaves while another reads its shared memory); lse_sh visible
  return lse_sh;
}
#endif

template <int C>
__global__ void __launch_bounds__(kClusterThreads)
    ce_cluster_kernel(const float* x, int64_t V, int64_t slice4, const int32_t* labels, float grad_scale,
                      const float* grad_scale_dev, KOut d, int64_t ldd, double* loss_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  extern __shared__ float4 slice_smem[];
  __shared__ float sm[32], ss[32];
  __shared__ float2 part;
  __shared__ float lse_sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / C, V4 = V / 4;
  const int64_t c0 = rank * slice4, c1 = c0 + slice4 < V4 ? c0 + slice4 : V4;
  const float4* x4 = reinterpret_cast<const float4*>(x + row * V);
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex, bad = !ignored && (lab < 0 || lab >= V);
  // The label's logit, read before the cluster barrier after which blocks may overwrite the row in place.
  const float xlab = rank == 0 && threadIdx.x == 0 && !ignored && !bad ? x[row * V + lab] : 0.f;
  float m = -INFINITY, s = 0.f;
  for (int64_t c = c0 + threadIdx.x; c < c1; c += kClusterThreads) {
    const float4 v = __ldcs(x4 + c);  // read once: evict first
    slice_smem[c - c0] = v;
    lse_update4<true>(m, s, v);
  }
  block_lse<true>(m, s, sm, ss);
  const float lse2 = cluster_row_lse2<C>(cluster, m, s, part, lse_sh);
  if (rank == 0 && threadIdx.x == 0 && !ignored)
    atomicAdd(loss_acc, bad ? double(NAN) : double(lse2 * kLn2 - xlab));
  if (d.p == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  for (int64_t c = c0 + threadIdx.x; c < c1; c += kClusterThreads) {
    float g[4];
    ce_grad4_b2(g, slice_smem[c - c0], 4 * c, lse2, lab, ignored, grad_scale);
    if (d.t == KType::BF16) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(g[0], g[1]), hi = __floats2bfloat162_rn(g[2], g[3]);
      uint2 u;
      u.x = *reinterpret_cast<const uint32_t*>(&lo);
      u.y = *reinterpret_cast<const uint32_t*>(&hi);
      reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(d.p) + row * ldd)[c] = u;
    } else {
      reinterpret_cast<float4*>(static_cast<float*>(d.p) + row * ldd)[c] = make_float4(g[0], g[1], g[2], g[3]);
    }
  }
#endif
}

// The cluster kernel on bf16 logits (the linear cross-entropy with LossLogits::BF16: the logits GEMM writes bf16,
// as HF and Liger do; the math is fp32): 8 logits a 16-byte load (a 248K-vocabulary slice is 31 KB), the bf16
// gradient written over them or to its own buffer (row r at d + r·V). Same phases and base-2 arithmetic as
// ce_cluster_kernel (session 33, ce36-lab).
__device__ __forceinline__ void unpack_bf16x8(uint4 u, float4& a, float4& b) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  float2 f[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) f[j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[j]));
  a = make_float4(f[0].x, f[0].y, f[1].x, f[1].y);
  b = make_float4(f[2].x, f[2].y, f[3].x, f[3].y);
}

template <int C>
__global__ void __launch_bounds__(kClusterThreads)
    ce_cluster_bf16_kernel(const __nv_bfloat16* x, int64_t V, int64_t slice8, const int32_t* labels,
                           float grad_scale, const float* grad_scale_dev, __nv_bfloat16* d, double* loss_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  extern __shared__ uint4 slice8_smem[];
  __shared__ float sm[32], ss[32];
  __shared__ float2 part;
  __shared__ float lse_sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / C, V8 = V / 8;
  const int64_t c0 = rank * slice8, c1 = c0 + slice8 < V8 ? c0 + slice8 : V8;
  const uint4* x8 = reinterpret_cast<const uint4*>(x + row * V);
  const int32_t lab = labels[row];
  const bool ignored = lab == kIgnoreIndex, bad = !ignored && (lab < 0 || lab >= V);
  const float xlab = rank == 0 && threadIdx.x == 0 && !ignored && !bad ? __bfloat162float(x[row * V + lab]) : 0.f;
  float m = -INFINITY, s = 0.f;
  for (int64_t c = c0 + threadIdx.x; c < c1; c += kClusterThreads) {
    const uint4 u = __ldcs(x8 + c);
    slice8_smem[c - c0] = u;
    float4 a, b;
    unpack_bf16x8(u, a, b);
    lse_update4<true>(m, s, a);
    lse_update4<true>(m, s, b);
  }
  block_lse<true>(m, s, sm, ss);
  const float lse2 = cluster_row_lse2<C>(cluster, m, s, part, lse_sh);
  if (rank == 0 && threadIdx.x == 0 && !ignored)
    atomicAdd(loss_acc, bad ? double(NAN) : double(lse2 * kLn2 - xlab));
  if (d == nullptr) return;
  if (grad_scale_dev) grad_scale = *grad_scale_dev;
  uint4* d8 = reinterpret_cast<uint4*>(d + row * V);
  for (int64_t c = c0 + threadIdx.x; c < c1; c += kClusterThreads) {
    float4 a, b;
    unpack_bf16x8(slice8_smem[c - c0], a, b);
    float ga[4], gb[4];
    ce_grad4_b2(ga, a, 8 * c, lse2, lab, ignored, grad_scale);
    ce_grad4_b2(gb, b, 8 * c + 4, lse2, lab, ignored, grad_scale);
    const __nv_bfloat162 h[4] = {__floats2bfloat162_rn(ga[0], ga[1]), __floats2bfloat162_rn(ga[2], ga[3]),
                                 __floats2bfloat162_rn(gb[0], gb[1]), __floats2bfloat162_rn(gb[2], gb[3])};
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = *reinterpret_cast<const uint32_t*>(&h[j]);
    d8[c] = make_uint4(w[0], w[1], w[2], w[3]);
  }
#endif
}

// Blocks per row of the cluster kernel: 16 (a non-portable cluster size, allowed on sm_90) keeps a
// 248K-vocabulary slice at 62 KB, three blocks per SM.
constexpr int kClusterBlocks = 16;

// Shared memory of one block of the cluster kernel: its slice of a row, in float4s.
size_t cluster_slice_bytes(int64_t V) {
  return static_cast<size_t>((V / 4 + kClusterBlocks - 1) / kClusterBlocks) * 16;
}

// Whether the cluster kernel runs: Hopper policy, F32 logits of a wide row (at least 32K values: narrower
// rows stay in L2 between ce_f32x4's passes), 16-byte aligned, a BF16 or F32 gradient (or none) aligned for
// its stores.
bool use_cluster_kernel(const KernelPolicy& policy, KIn logits, int64_t V, KOut d) {
  if (!policy.hopper() || logits.t != KType::F32 || V % 4 != 0 || V < 32768) return false;
  if (reinterpret_cast<uintptr_t>(logits.p) % 16 != 0) return false;
  if (d.p && !(d.t == KType::F32 && reinterpret_cast<uintptr_t>(d.p) % 16 == 0) &&
      !(d.t == KType::BF16 && reinterpret_cast<uintptr_t>(d.p) % 8 == 0))
    return false;
  return policy.smem_fits(cluster_slice_bytes(V));
}

// One cluster of kClusterBlocks blocks a row, each block holding its slice of the row in `smem` bytes of
// shared memory (both cluster kernels).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_row_clusters(void (*kernel)(KernelArgs...), int64_t T, size_t smem, cudaStream_t s,
                                Args... args) {
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(T * kClusterBlocks));
  cfg.blockDim = dim3(kClusterThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kClusterBlocks;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

cudaError_t launch_ce_cluster(const float* x, int64_t T, int64_t V, const int32_t* labels, float grad_scale,
                              const float* grad_scale_dev, KOut d, int64_t ldd, double* loss_acc, cudaStream_t s) {
  const size_t smem = cluster_slice_bytes(V);
  const int64_t slice4 = static_cast<int64_t>(smem / 16);
  return launch_row_clusters(ce_cluster_kernel<kClusterBlocks>, T, smem, s, x, V, slice4, labels, grad_scale,
                             grad_scale_dev, d, ldd, loss_acc);
}

// Whether the bf16 cluster kernel runs: Hopper policy, bf16 logits of a wide row (as use_cluster_kernel), 16-byte
// aligned, the gradient none or bf16 16-byte aligned.
bool use_cluster_bf16_kernel(const KernelPolicy& policy, KIn logits, int64_t V, KOut d) {
  if (!policy.hopper() || logits.t != KType::BF16 || V % 8 != 0 || V < 32768) return false;
  if (reinterpret_cast<uintptr_t>(logits.p) % 16 != 0) return false;
  if (d.p && !(d.t == KType::BF16 && reinterpret_cast<uintptr_t>(d.p) % 16 == 0)) return false;
  return policy.smem_fits(static_cast<size_t>((V / 8 + kClusterBlocks - 1) / kClusterBlocks) * 16);
}

cudaError_t launch_ce_cluster_bf16(const __nv_bfloat16* x, int64_t T, int64_t V, const int32_t* labels,
                                   float grad_scale, const float* grad_scale_dev, __nv_bfloat16* d,
                                   double* loss_acc, cudaStream_t s) {
  const int64_t slice8 = (V / 8 + kClusterBlocks - 1) / kClusterBlocks;
  const size_t smem = static_cast<size_t>(slice8) * 16;
  return launch_row_clusters(ce_cluster_bf16_kernel<kClusterBlocks>, T, smem, s, x, V, slice8, labels, grad_scale,
                             grad_scale_dev, d, loss_acc);
}

}  // namespace

cudaError_t launch_cross_entropy(KIn logits, int64_t T, int64_t V, const int32_t* labels, float grad_scale,
                                 const float* grad_scale_dev, KOut dlogits, double* loss_acc,
                                 const KernelPolicy& policy, cudaStream_t s) {
  if (T <= 0) return cudaSuccess;
  if (use_cluster_bf16_kernel(policy, logits, V, dlogits))
    return launch_ce_cluster_bf16(static_cast<const __nv_bfloat16*>(logits.p), T, V, labels, grad_scale,
                                  grad_scale_dev, static_cast<__nv_bfloat16*>(dlogits.p), loss_acc, s);
  if (use_cluster_kernel(policy, logits, V, dlogits))
    return launch_ce_cluster(static_cast<const float*>(logits.p), T, V, labels, grad_scale, grad_scale_dev,
                             dlogits, V, loss_acc, s);
  const bool x4 = logits.t == KType::F32 && V % 4 == 0 && reinterpret_cast<uintptr_t>(logits.p) % 16 == 0;
  if (x4)
    ce_f32x4_kernel<<<static_cast<unsigned>(T), 4 * kThreads, 0, s>>>(
        static_cast<const float*>(logits.p), V, labels, grad_scale, grad_scale_dev, dlogits, loss_acc);
  else
    ce_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(logits, V, labels, grad_scale, grad_scale_dev,
                                                            dlogits, loss_acc);
  return cudaGetLastError();
}

bool cross_entropy_bf16_in_place(const KernelPolicy& policy, int64_t V) {
  // use_cluster_kernel's conditions; its alignment checks hold for any 16-byte aligned F32 buffer (rows of 4V
  // bytes, V % 4 == 0).
  return policy.hopper() && V % 4 == 0 && V >= 32768 && policy.smem_fits(cluster_slice_bytes(V));
}

cudaError_t launch_cross_entropy_bf16_in_place(float* logits, int64_t T, int64_t V, const int32_t* labels,
                                               float grad_scale, const float* grad_scale_dev, double* loss_acc,
                                               const KernelPolicy& policy, cudaStream_t s) {
  if (T <= 0) return cudaSuccess;
  if (!cross_entropy_bf16_in_place(policy, V) || reinterpret_cast<uintptr_t>(logits) % 16 != 0)
    return cudaErrorInvalidValue;
  KOut d{};
  d.p = logits;
  d.t = KType::BF16;
  return launch_ce_cluster(logits, T, V, labels, grad_scale, grad_scale_dev, d, 2 * V, loss_acc, s);
}

}  // namespace deltatune::kernels
