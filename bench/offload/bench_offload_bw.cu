// Host offload on an H200 (issue 33, offload36): pinned D2H/H2D copies on a copy stream while bf16 GEMMs (cuBLAS)
// or a memory-bound kernel run on the compute stream. Prints each copy's GB/s alone and under load, and each
// GEMM's / kernel's time alone and with copies running; then the same fork/join copy captured in a CUDA graph.
// Usage: bench_offload_bw [--mb 16] [--m 4096 --n 6144 --k 2048] [--reps 40]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../common/cuda_check.h"

namespace {

__global__ void stream_copy(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) b[i] = a[i];
}

struct Ctx {
  cudaStream_t comp, d2h, h2d;
  cublasHandle_t blas;
  int m, n, k;
  __nv_bfloat16 *A, *B, *C;
  uint4 *big0, *big1;
  size_t big_n;
  char *dev_src, *dev_dst, *host_dst, *host_src;
  size_t bytes;
};

void gemm(Ctx& c) {
  const float one = 1.f, zero = 0.f;
  cublasGemmEx(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, c.n, c.m, c.k, &one, c.B, CUDA_R_16BF, c.k, c.A, CUDA_R_16BF, c.k,
               &zero, c.C, CUDA_R_16BF, c.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
void memk(Ctx& c) { stream_copy<<<132 * 8, 256, 0, c.comp>>>(c.big0, c.big1, c.big_n); }

// Runs `reps` of the compute op (kind 0 none, 1 GEMM, 2 memory-bound copy kernel) and, at the same time, `copies`
// copies on the copy streams (dir: 1 D2H, 2 H2D, 3 both). Returns ms per op and GB/s per direction.
struct Res {
  float op_ms = 0, d2h_gbs = 0, h2d_gbs = 0;
};
Res run(Ctx& c, int kind, int reps, int dir, int copies) {
  cudaEvent_t e0, e1, d0, d1, h0, h1;
  for (cudaEvent_t* e : {&e0, &e1, &d0, &d1, &h0, &h1}) CK(cudaEventCreate(e));
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(e0, c.comp));
  CK(cudaStreamWaitEvent(c.d2h, e0));
  CK(cudaStreamWaitEvent(c.h2d, e0));
  CK(cudaEventRecord(d0, c.d2h));
  CK(cudaEventRecord(h0, c.h2d));
  for (int i = 0; i < copies; ++i) {
    if (dir & 1) CK(cudaMemcpyAsync(c.host_dst, c.dev_src, c.bytes, cudaMemcpyDeviceToHost, c.d2h));
    if (dir & 2) CK(cudaMemcpyAsync(c.dev_dst, c.host_src, c.bytes, cudaMemcpyHostToDevice, c.h2d));
  }
  CK(cudaEventRecord(d1, c.d2h));
  CK(cudaEventRecord(h1, c.h2d));
  for (int i = 0; i < reps; ++i) kind == 1 ? gemm(c) : kind == 2 ? memk(c) : void();
  CK(cudaEventRecord(e1, c.comp));
  CK(cudaDeviceSynchronize());
  Res r;
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  r.op_ms = reps ? ms / reps : 0;
  if (dir & 1) {
    CK(cudaEventElapsedTime(&ms, d0, d1));
    r.d2h_gbs = copies * c.bytes / (ms * 1e6);
  }
  if (dir & 2) {
    CK(cudaEventElapsedTime(&ms, h0, h1));
    r.h2d_gbs = copies * c.bytes / (ms * 1e6);
  }
  for (cudaEvent_t e : {e0, e1, d0, d1, h0, h1}) cudaEventDestroy(e);
  return r;
}

// The engine's pattern in a CUDA graph: per "layer" a GEMM pair on the compute stream, the layer input copied
// D2H on the copy stream (forked by an event), joined back before the next layer's end. Replayed; time per replay
// with and without the copies.
float graph_ms(Ctx& c, int layers, bool copies, int replays) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaEvent_t fork[64], join[64];
  for (int i = 0; i < layers; ++i) {
    CK(cudaEventCreateWithFlags(&fork[i], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming));
  }
  CK(cudaStreamBeginCapture(c.comp, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < layers; ++i) {
    if (copies) {
      CK(cudaEventRecord(fork[i], c.comp));
      CK(cudaStreamWaitEvent(c.d2h, fork[i]));
      CK(cudaMemcpyAsync(c.host_dst, c.dev_src, c.bytes, cudaMemcpyDeviceToHost, c.d2h));
      CK(cudaEventRecord(join[i], c.d2h));
    }
    gemm(c);
    gemm(c);
    if (copies && i > 0) CK(cudaStreamWaitEvent(c.comp, join[i - 1]));
  }
  if (copies) CK(cudaStreamWaitEvent(c.comp, join[layers - 1]));
  CK(cudaStreamEndCapture(c.comp, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, c.comp));
  CK(cudaStreamSynchronize(c.comp));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, c.comp));
  for (int i = 0; i < replays; ++i) CK(cudaGraphLaunch(ge, c.comp));
  CK(cudaEventRecord(e1, c.comp));
  CK(cudaStreamSynchronize(c.comp));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms / replays;
}

}  // namespace

int main(int argc, char** argv) {
  Ctx c{};
  c.m = 4096;
  c.n = 6144;
  c.k = 2048;
  int reps = 40;
  double mb = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::atof(argv[i + 1]);
    else if (a == "--m") c.m = std::atoi(argv[i + 1]);
    else if (a == "--n") c.n = std::atoi(argv[i + 1]);
    else if (a == "--k") c.k = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  c.bytes = static_cast<size_t>(mb * 1024 * 1024);
  CK(cudaStreamCreateWithFlags(&c.comp, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&c.d2h, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&c.h2d, cudaStreamNonBlocking));
  if (cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(c.blas, c.comp);
  void* ws;
  CK(cudaMalloc(&ws, 32 << 20));
  cublasSetWorkspace(c.blas, ws, 32 << 20);
  CK(cudaMalloc(&c.A, size_t(c.m) * c.k * 2));
  CK(cudaMalloc(&c.B, size_t(c.n) * c.k * 2));
  CK(cudaMalloc(&c.C, size_t(c.m) * c.n * 2));
  CK(cudaMemset(c.A, 0x3c, size_t(c.m) * c.k * 2));
  CK(cudaMemset(c.B, 0x3c, size_t(c.n) * c.k * 2));
  c.big_n = (size_t(256) << 20) / 16;
  CK(cudaMalloc(&c.big0, c.big_n * 16));
  CK(cudaMalloc(&c.big1, c.big_n * 16));
  CK(cudaMemset(c.big0, 1, c.big_n * 16));
  CK(cudaMalloc(&c.dev_src, c.bytes));
  CK(cudaMalloc(&c.dev_dst, c.bytes));
  CK(cudaMemset(c.dev_src, 2, c.bytes));
  CK(cudaHostAlloc(reinterpret_cast<void**>(&c.host_dst), c.bytes, cudaHostAllocDefault));
  CK(cudaHostAlloc(reinterpret_cast<void**>(&c.host_src), c.bytes, cudaHostAllocDefault));
  std::memset(c.host_src, 3, c.bytes);
  std::memset(c.host_dst, 0, c.bytes);
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("device %s, copy %.0f MB pinned, GEMM bf16 m%d n%d k%d (%.1f GFLOP), mem kernel 256 MiB copy\n", p.name,
              c.bytes / 1048576.0, c.m, c.n, c.k, 2.0 * c.m * c.n * c.k / 1e9);
  for (int w = 0; w < 2; ++w) {  // warm-up
    run(c, 1, 10, 3, 4);
    run(c, 2, 10, 0, 0);
  }
  // Enough copies to cover the ops' time: measured op time alone / copy time alone.
  const Res g = run(c, 1, reps, 0, 0), mk = run(c, 2, reps, 0, 0);
  const Res d = run(c, 0, 0, 1, 20), h = run(c, 0, 0, 2, 20), b = run(c, 0, 0, 3, 20);
  std::printf("alone: GEMM %.3f ms (%.0f TFLOP/s), mem kernel %.3f ms (%.0f GB/s r+w)\n", g.op_ms,
              2.0 * c.m * c.n * c.k / (g.op_ms * 1e9), mk.op_ms, 2.0 * c.big_n * 16 / (mk.op_ms * 1e6));
  std::printf("alone: D2H %.1f GB/s, H2D %.1f GB/s, both at once D2H %.1f + H2D %.1f GB/s\n", d.d2h_gbs, h.h2d_gbs,
              b.d2h_gbs, b.h2d_gbs);
  for (int kind = 1; kind <= 2; ++kind) {
    const Res& alone = kind == 1 ? g : mk;
    for (int dir = 1; dir <= 3; ++dir) {
      // Copies spanning the ops' whole time.
      const double gbs = dir == 1 ? d.d2h_gbs : dir == 2 ? h.h2d_gbs : b.d2h_gbs;
      const int copies = std::max(1, static_cast<int>(alone.op_ms * reps * 1e6 * gbs / 1e9 / c.bytes * 1.0));
      const Res r = run(c, kind, reps, dir, copies);
      std::printf("%s + %s (%d copies): op %.3f ms (%+.1f%%), D2H %.1f GB/s, H2D %.1f GB/s\n",
                  kind == 1 ? "GEMM" : "mem kernel", dir == 1 ? "D2H" : dir == 2 ? "H2D" : "D2H+H2D", copies,
                  r.op_ms, 100.0 * (r.op_ms / alone.op_ms - 1), r.d2h_gbs, r.h2d_gbs);
    }
  }
  const float g0 = graph_ms(c, 24, false, 10), g1 = graph_ms(c, 24, true, 10);
  std::printf("graph of 24 layers x 2 GEMMs: %.3f ms plain, %.3f ms with a %.0f MB D2H a layer forked/joined (%+.1f%%)\n",
              g0, g1, c.bytes / 1048576.0, 100.0 * (g1 / g0 - 1));
  bool ok = true;
  for (size_t i = 0; i < c.bytes; i += 4096) ok &= c.host_dst[i] == 2;
  std::printf("graph copies landed: %s\n", ok ? "yes" : "NO");
  return 0;
}
