// CudaBackend's LoraKcatOps (backend/lora_kcat_ops.h): the norm written into padded rows, the s·B tails.
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_allocator.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "lora/lora_tails.cuh"
#include "norm/norm.cuh"

namespace deltatune::cuda {

namespace {
void* col_ptr(const Backend::Cols& c) {
  return static_cast<char*>(c.t.data) + c.col * static_cast<int64_t>(dtype_size(c.t.dtype));
}
}  // namespace

void CudaBackend::rmsnorm_fwd_into(const Tensor& x, const Tensor& w, float eps, bool zc, const Cols& y,
                                   Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && y.t.ndim() == 2 && y.t.rows() == rows && y.width() == n && y.col >= 0 &&
            y.col + n <= y.t.cols() && rstd.numel() == rows && rstd.dtype == DType::F32,
        [&] {
          return "rmsnorm_fwd_into: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", y columns [" +
                 std::to_string(y.col) + ", +" + std::to_string(y.width()) + ") of " + shape_str(y.t.shape) +
                 ", rstd " + shape_str(rstd.shape);
        });
  Tensor yt = y.t;
  kernels::KOut out = kout(yt, "rmsnorm y");
  out.p = col_ptr(y);
  cuda_check(kernels::launch_rmsnorm_fwd_ld(kin(x, "rmsnorm x"), n, kin(w, "rmsnorm w"), eps, zc, out, y.t.cols(),
                                            static_cast<float*>(rstd.data), rows, n, stream()),
             "rmsnorm_fwd_into");
}

void CudaBackend::scaled_copies_into(std::span<const Tensor* const> srcs, std::span<const float> alphas,
                                     std::span<const Cols> dsts) {
  check(srcs.size() == dsts.size() && alphas.size() == dsts.size(), "scaled_copies_into: one alpha and dst per src");
  kernels::LoraTailsArgs a;
  auto flush = [&] {
    cuda_check(kernels::launch_lora_tails(a, stream()), "scaled_copies_into");
    a.n = 0;
  };
  for (size_t i = 0; i < srcs.size(); ++i) {
    const Tensor& s = *srcs[i];
    const Cols& d = dsts[i];
    const int64_t r = d.width();
    check(s.ndim() == 2 && s.cols() == r && d.t.ndim() == 2 && d.t.dtype == DType::BF16 && d.t.rows() == s.rows() &&
              d.col >= 0 && d.col + r <= d.t.cols(),
          [&] {
            return "scaled_copies_into: src " + shape_str(s.shape) + " into columns [" + std::to_string(d.col) +
                   ", +" + std::to_string(r) + ") of " + shape_str(d.t.shape) + " (" + dtype_name(d.t.dtype) + ")";
          });
    if (a.n == kernels::kLoraTailsMax || (a.n > 0 && a.r != r)) flush();
    a.r = static_cast<int>(r);
    a.m[a.n++] = {kin(s, "scaled_copies_into src"), col_ptr(d), s.rows(), d.t.cols(), alphas[i]};
  }
  flush();
}

void CudaBackend::release_cached_memory() {
  check(!recording_ && !step_pool_, "internal: release_cached_memory while a step is recorded");
  cuda_check(cudaStreamSynchronize(stream()), "release_cached_memory");
  alloc_->release_cache();
}

}  // namespace deltatune::cuda
