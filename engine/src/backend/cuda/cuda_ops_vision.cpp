// CudaBackend ops of the vision tower (LayerNorm, GELU, 2-D RoPE): shape checks, then one launcher call each
// (kernels/vit).
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "vit/vision_ops.cuh"

namespace deltatune::cuda {

namespace {
float* stat(Tensor& t, int64_t rows, const char* what) {
  check(t.dtype == DType::F32 && t.numel() == rows, [&] {
    return std::string(what) + " must be F32 [" + std::to_string(rows) + "], got " + shape_str(t.shape);
  });
  return static_cast<float*>(t.data);
}
const float* stat(const Tensor& t, int64_t rows, const char* what) {
  return stat(const_cast<Tensor&>(t), rows, what);  // NOLINT: the same check for a read-only statistic
}
}  // namespace

void CudaBackend::layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                                 Tensor& mean, Tensor& rstd) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && b.numel() == n && y.numel() == x.numel(), [&] {
    return "layer_norm_fwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", b " +
           shape_str(b.shape) + ", y " + shape_str(y.shape) + " (expected rows of w's length)";
  });
  cuda_check(kernels::launch_layer_norm_fwd(kin(x, "layer_norm x"), kin(w, "layer_norm w"), kin(b, "layer_norm b"),
                                            eps, kout(y, "layer_norm y"), stat(mean, rows, "layer_norm mean"),
                                            stat(rstd, rows, "layer_norm rstd"), rows, n, stream()),
             "layer_norm_fwd");
}

void CudaBackend::layer_norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                 const Tensor& rstd, Tensor& dx) {
  const int64_t n = w.numel(), rows = n ? x.numel() / n : 0;
  check(n > 0 && x.numel() == rows * n && dy.numel() == x.numel() && dx.numel() == x.numel(), [&] {
    return "layer_norm_bwd: x " + shape_str(x.shape) + ", w " + shape_str(w.shape) + ", dy " +
           shape_str(dy.shape) + ", dx " + shape_str(dx.shape);
  });
  cuda_check(kernels::launch_layer_norm_bwd(kin(dy, "layer_norm dy"), kin(x, "layer_norm x"), kin(w, "layer_norm w"),
                                            stat(mean, rows, "layer_norm mean"), stat(rstd, rows, "layer_norm rstd"),
                                            kout(dx, "layer_norm dx"), rows, n, stream()),
             "layer_norm_bwd");
}

void CudaBackend::gelu_fwd(const Tensor& x, bool tanh_approx, Tensor& y) {
  check(y.numel() == x.numel(),
        [&] { return "gelu_fwd: x " + shape_str(x.shape) + " and y " + shape_str(y.shape) + " differ"; });
  cuda_check(kernels::launch_gelu_fwd(kin(x, "gelu x"), tanh_approx, kout(y, "gelu y"), x.numel(), stream()),
             "gelu_fwd");
}

void CudaBackend::gelu_bwd(const Tensor& dy, const Tensor& x, bool tanh_approx, Tensor& dx) {
  check(dy.numel() == x.numel() && dx.numel() == x.numel(), [&] {
    return "gelu_bwd: dy " + shape_str(dy.shape) + ", x " + shape_str(x.shape) + ", dx " +
           shape_str(dx.shape) + " differ";
  });
  cuda_check(kernels::launch_gelu_bwd(kin(dy, "gelu dy"), kin(x, "gelu x"), tanh_approx, kout(dx, "gelu dx"),
                                      x.numel(), stream()),
             "gelu_bwd");
}

void CudaBackend::rope_2d(Tensor& x, const Tensor& positions, float theta, bool inverse) {
  check(x.ndim() == 3 && x.dim(2) % 4 == 0 && positions.ndim() == 2 && positions.dim(0) == 2 &&
            positions.dim(1) == x.dim(0) && positions.dtype == DType::I32 && positions.device == Device::CUDA,
        [&] {
          return "rope_2d: x must be [T, heads, head_dim] (head_dim a multiple of 4) with I32 CUDA positions "
                 "[2, T]; got x " +
                 shape_str(x.shape) + ", positions " + shape_str(positions.shape);
        });
  cuda_check(kernels::launch_rope_2d(kout(x, "rope_2d x"), static_cast<const int32_t*>(positions.data), x.dim(0),
                                     x.dim(1), x.dim(2), theta, inverse, stream()),
             "rope_2d");
}

}  // namespace deltatune::cuda
