// The FMA prep kernel of chunk_fwd.cu alone (launch_gdn_chunk_fwd also runs the scan), for
// prep_mma_check.cpp. Its own translation unit: chunk_fwd.cu and chunk_prep_mma.cu both define C in an
// anonymous namespace.
#include "gdn/chunk_fwd.cu"

namespace deltatune::kernels {
cudaError_t devcheck_fma_prep(const float* qn, const float* kn, KIn v, const float* g, KIn beta,
                              const int32_t* chunks, int nchunks, float* W, float* U, float* M, float* Gc,
                              float* Tout, int64_t HK, int64_t HV, int dk, int dv, cudaStream_t s) {
  const size_t smem = gdn_chunk_prep_smem(dk, dv);
  cudaError_t e = cudaFuncSetAttribute(gdn_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  gdn_chunk_prep_kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(HV)), kThreads, smem,
                          s>>>(qn, kn, v, g, beta, chunks, W, U, M, Gc, Tout, HK, HV, dk, dv);
  return cudaGetLastError();
}
}  // namespace deltatune::kernels
