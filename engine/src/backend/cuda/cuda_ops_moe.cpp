// CudaBackend MoE dispatch, combine, grouped expert GEMMs and permute3: shape checks, then the launchers in
// kernels/moe. The grouped GEMMs follow gemm's precision rules: two F32 operands multiply in fp32 (FMA
// kernel: the LoRA products u·B_eᵀ, du·A_e, and everything in an F32-compute backend); otherwise both run
// as bf16 on tensor cores with fp32 accumulation, an F32 operand first rounded to a BF16 copy. grouped_gemm_lora
// runs the LoRA product u·L_e in the expert GEMM's epilogue (still fp32) where the kernel policy has such a kernel
// (kernels::grouped_gemm_lora_fusable), else as the two products of the default.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "moe/moe.cuh"

namespace deltatune::cuda {

namespace {
int32_t* i32w(Tensor& t, const char* what) {
  check(t.dtype == DType::I32 && (t.device == Device::CUDA || t.numel() == 0),
        [&] { return std::string(what) + " must be an I32 CUDA tensor, got " + dtype_name(t.dtype); });
  return static_cast<int32_t*>(t.data);
}
const int32_t* i32r(const Tensor& t, const char* what) {
  check(t.dtype == DType::I32 && (t.device == Device::CUDA || t.numel() == 0),
        [&] { return std::string(what) + " must be an I32 CUDA tensor, got " + dtype_name(t.dtype); });
  return static_cast<const int32_t*>(t.data);
}
}  // namespace

Tensor CudaBackend::as_bf16(const Tensor& t) {
  if (t.dtype == DType::BF16) return t;
  Tensor b = alloc(t.shape, DType::BF16);
  copy(b, t);
  return b;
}

void CudaBackend::moe_dispatch(const Tensor& idx, int num_experts, Tensor& offsets, Tensor& row_token,
                               Tensor& row_slot, Tensor& slot_row, Tensor* load) {
  const int64_t n = idx.numel(), K = idx.ndim() == 2 ? idx.cols() : 1;
  check(num_experts >= 1 && num_experts <= kernels::kMaxDispatchExperts, [&] {
    return "moe_dispatch: number of experts " + std::to_string(num_experts) + " must be in [1, " +
           std::to_string(kernels::kMaxDispatchExperts) + "]";
  });
  check(n < INT32_MAX && offsets.numel() == num_experts + 1 && row_token.numel() == n &&
            row_slot.numel() == n && slot_row.numel() == n && (!load || load->numel() == num_experts),
        [&] {
          return "moe_dispatch: idx " + shape_str(idx.shape) + ", offsets " + shape_str(offsets.shape) +
                 ", row_token " + shape_str(row_token.shape) + ", row_slot " + shape_str(row_slot.shape) +
                 ", slot_row " + shape_str(slot_row.shape) + " (expected offsets [E+1] and [T*K] row maps)";
        });
  float* pl = nullptr;
  if (load) {
    check(load->dtype == DType::F32, "moe_dispatch: load must be F32");
    pl = static_cast<float*>(load->data);
  }
  Tensor scratch = alloc({std::max<int64_t>(1, kernels::moe_dispatch_scratch_ints(n, num_experts))}, DType::I32);
  cuda_check(kernels::launch_moe_dispatch(policy_, i32r(idx, "moe_dispatch idx"), n, static_cast<int>(K), num_experts,
                                          i32w(offsets, "moe_dispatch offsets"), i32w(row_token, "moe_dispatch row_token"),
                                          i32w(row_slot, "moe_dispatch row_slot"), i32w(slot_row, "moe_dispatch slot_row"),
                                          pl, static_cast<int32_t*>(scratch.data), stream()),
             "moe_dispatch");
}

void CudaBackend::moe_combine(const Tensor& y, const Tensor& slot_row, const Tensor& w, Tensor& out) {
  const int64_t T = out.rows(), H = out.cols(), n = slot_row.numel();
  check(T > 0 && n % T == 0 && y.cols() == H && (!w.defined() || w.numel() == n), [&] {
    return "moe_combine: y " + shape_str(y.shape) + ", slot_row " + shape_str(slot_row.shape) + ", w " +
           shape_str(w.shape) + ", out " + shape_str(out.shape) +
           " (expected slot_row [T*K], w [T, K], out [T, H])";
  });
  const float* pw = nullptr;
  if (w.defined()) {
    check(w.dtype == DType::F32, "moe_combine: w must be F32");
    pw = static_cast<const float*>(w.data);
  }
  cuda_check(kernels::launch_moe_combine(kin(y, "moe_combine y"), i32r(slot_row, "moe_combine slot_row"), pw, T,
                                         static_cast<int>(n / T), H, kout(out, "moe_combine out"), stream()),
             "moe_combine");
}

void CudaBackend::grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, Tensor& y,
                               float alpha, float beta) {
  check(w.ndim() == 3, [&] { return "grouped_gemm: w must be 3-D [E, ., .], got " + shape_str(w.shape); });
  const int64_t E = w.dim(0), M = x.rows(), K = x.cols();
  const int64_t Kw = trans_w ? w.dim(2) : w.dim(1), N = trans_w ? w.dim(1) : w.dim(2);
  check(Kw == K && y.rows() == M && y.cols() == N && offsets.numel() == E + 1, [&] {
    return "grouped_gemm: x " + shape_str(x.shape) + " · w " + shape_str(w.shape) + (trans_w ? "ᵀ" : "") +
           " -> y " + shape_str(y.shape) + " with offsets " + shape_str(offsets.shape) + " do not match";
  });
  if (M == 0 || N == 0) return;
  const bool fp32 = x.dtype == DType::F32 && w.dtype == DType::F32;
  const Tensor xb = fp32 ? x : as_bf16(x), wb = fp32 ? w : as_bf16(w);
  Tensor tiles = alloc({E + 1}, DType::I32);
  cuda_check(kernels::launch_grouped_gemm(policy_, xb.data, wb.data, fp32, trans_w, i32r(offsets, "grouped_gemm offsets"),
                                          static_cast<int>(E), M, N, K, kout(y, "grouped_gemm y"), alpha, beta,
                                          static_cast<int32_t*>(tiles.data), stream()),
             "grouped_gemm");
}

void CudaBackend::grouped_gemm_lora(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets,
                                    const Tensor& u, const Tensor& l, float lscale, Tensor& y, float alpha, float beta) {
  check(w.ndim() == 3 && l.ndim() == 3, [&] {
    return "grouped_gemm_lora: w and l must be 3-D [E, ., .], got " + shape_str(w.shape) + " and " +
           shape_str(l.shape);
  });
  const int64_t E = w.dim(0), M = x.rows(), K = x.cols(), N = trans_w ? w.dim(1) : w.dim(2), r = u.cols();
  check(u.rows() == M && l.dim(0) == E &&
            (trans_w ? l.dim(1) == N && l.dim(2) == r : l.dim(1) == r && l.dim(2) == N),
        [&] {
          return "grouped_gemm_lora: u " + shape_str(u.shape) + ", l " + shape_str(l.shape) +
                 " do not match x " + shape_str(x.shape) + " · w " + shape_str(w.shape) +
                 (trans_w ? "ᵀ" : "");
        });
  const bool bf16 = x.dtype == DType::BF16 && w.dtype == DType::BF16 && u.dtype == DType::F32 && l.dtype == DType::F32;
  const kernels::GroupedLora lora{static_cast<const float*>(u.data), static_cast<const float*>(l.data), r, lscale};
  if (!bf16 || M == 0 || !kernels::grouped_gemm_lora_fusable(policy_, x.data, w.data, trans_w, N, K, lora)) {
    Backend::grouped_gemm_lora(x, w, trans_w, offsets, u, l, lscale, y, alpha, beta);  // two products
    return;
  }
  check(y.rows() == M && y.cols() == N && offsets.numel() == E + 1 && w.dim(trans_w ? 2 : 1) == K, [&] {
    return "grouped_gemm_lora: x " + shape_str(x.shape) + " · w " + shape_str(w.shape) +
           (trans_w ? "ᵀ" : "") + " -> y " + shape_str(y.shape) + " with offsets " +
           shape_str(offsets.shape) + " do not match";
  });
  Tensor tiles = alloc({E + 1}, DType::I32);
  cuda_check(kernels::launch_grouped_gemm(policy_, x.data, w.data, false, trans_w,
                                          i32r(offsets, "grouped_gemm_lora offsets"), static_cast<int>(E), M, N, K,
                                          kout(y, "grouped_gemm_lora y"), alpha, beta,
                                          static_cast<int32_t*>(tiles.data), stream(), &lora),
             "grouped_gemm_lora");
}

void CudaBackend::grouped_lora_linear_fwd(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& offsets,
                                          const Tensor& l, float lscale, Tensor& u, Tensor& y) {
  check(w.ndim() == 3 && a.ndim() == 3 && l.ndim() == 3, [&] {
    return "grouped_lora_linear_fwd: w, a, l must be 3-D [E, ., .], got " + shape_str(w.shape) + ", " +
           shape_str(a.shape) + ", " + shape_str(l.shape);
  });
  const int64_t E = w.dim(0), M = x.rows(), K = x.cols(), N = w.dim(1), r = a.dim(1);
  const bool fits = x.dtype == DType::BF16 && w.dtype == DType::BF16 && u.dtype == DType::F32 &&
                    l.dtype == DType::F32 && M > 0 && a.dim(0) == E && a.dim(2) == K && l.dim(0) == E &&
                    l.dim(1) == N && l.dim(2) == r && u.rows() == M && u.cols() == r && w.dim(2) == K &&
                    y.rows() == M && y.cols() == N && offsets.numel() == E + 1;
  if (!fits) {
    Backend::grouped_lora_linear_fwd(x, w, a, offsets, l, lscale, u, y);  // the op's checks and two kernels
    return;
  }
  const Tensor ab = as_bf16(a);
  const kernels::GroupedLora lora{nullptr, static_cast<const float*>(l.data), r, lscale, ab.data,
                                  static_cast<float*>(u.data)};
  if (!kernels::grouped_gemm_lora_fusable(policy_, x.data, w.data, true, N, K, lora)) {
    Backend::grouped_lora_linear_fwd(x, w, a, offsets, l, lscale, u, y);
    return;
  }
  Tensor tiles = alloc({E + 1}, DType::I32);
  cuda_check(kernels::launch_grouped_gemm(policy_, x.data, w.data, false, true,
                                          i32r(offsets, "grouped_lora_linear_fwd offsets"), static_cast<int>(E), M, N,
                                          K, kout(y, "grouped_lora_linear_fwd y"), 1.f, 0.f,
                                          static_cast<int32_t*>(tiles.data), stream(), &lora),
             "grouped_lora_linear_fwd");
}

void CudaBackend::swiglu_packed_fwd(const Tensor& gu, Tensor& h) {
  const int64_t n = gu.rows(), I = gu.cols() / 2;
  check(gu.ndim() == 2 && gu.cols() == 2 * I && h.rows() == n && h.cols() == I, [&] {
    return "swiglu_packed_fwd: gu " + shape_str(gu.shape) + ", h " + shape_str(h.shape) +
           " (expected [n, 2I], [n, I])";
  });
  cuda_check(kernels::launch_swiglu_packed_fwd(kin(gu, "swiglu_packed gu"), n, I, kout(h, "swiglu_packed h"), stream()),
             "swiglu_packed_fwd");
}

void CudaBackend::swiglu_packed_bwd(const Tensor& dh, const Tensor& gu, Tensor& dgu) {
  const int64_t n = gu.rows(), I = gu.cols() / 2;
  check(gu.ndim() == 2 && gu.cols() == 2 * I && dh.rows() == n && dh.cols() == I && dgu.rows() == n &&
            dgu.cols() == 2 * I,
        [&] {
          return "swiglu_packed_bwd: dh " + shape_str(dh.shape) + ", gu " + shape_str(gu.shape) + ", dgu " +
                 shape_str(dgu.shape) + " (expected [n, I], [n, 2I], [n, 2I])";
        });
  cuda_check(kernels::launch_swiglu_packed_bwd(kin(dh, "swiglu_packed dh"), kin(gu, "swiglu_packed gu"), n, I,
                                               kout(dgu, "swiglu_packed dgu"), stream()),
             "swiglu_packed_bwd");
}

void CudaBackend::grouped_gemm_wgrad(const Tensor& a, const Tensor& b, const Tensor& offsets, Tensor& g, float alpha,
                                     float beta) {
  check(g.ndim() == 3,
        [&] { return "grouped_gemm_wgrad: g must be 3-D [E, N, K], got " + shape_str(g.shape); });
  const int64_t E = g.dim(0), N = g.dim(1), K = g.dim(2), M = a.rows();
  check(a.cols() == N && b.cols() == K && b.rows() == M && offsets.numel() == E + 1, [&] {
    return "grouped_gemm_wgrad: a " + shape_str(a.shape) + ", b " + shape_str(b.shape) + " -> g " +
           shape_str(g.shape) + " with offsets " + shape_str(offsets.shape) + " do not match";
  });
  if (N == 0 || K == 0) return;
  const bool fp32 = a.dtype == DType::F32 && b.dtype == DType::F32;
  const Tensor ab = fp32 ? a : as_bf16(a), bb = fp32 ? b : as_bf16(b);
  cuda_check(kernels::launch_grouped_gemm_wgrad(policy_, ab.data, bb.data, fp32, i32r(offsets, "grouped_gemm_wgrad offsets"),
                                                static_cast<int>(E), M, N, K, kout(g, "grouped_gemm_wgrad g"), alpha,
                                                beta, stream()),
             "grouped_gemm_wgrad");
}

void CudaBackend::permute3(const Tensor& src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2,
                           Tensor& dst) {
  check(p0 != p1 && p1 != p2 && p0 != p2 && p0 >= 0 && p0 < 3 && p1 >= 0 && p1 < 3 && p2 >= 0 && p2 < 3, [&] {
    return "permute3: (" + std::to_string(p0) + ", " + std::to_string(p1) + ", " + std::to_string(p2) +
           ") is not a permutation of (0, 1, 2)";
  });
  check(src.numel() == d0 * d1 * d2 && dst.numel() == src.numel(), [&] {
    return "permute3: src " + shape_str(src.shape) + ", dst " + shape_str(dst.shape) + " for dims (" +
           std::to_string(d0) + ", " + std::to_string(d1) + ", " + std::to_string(d2) + ")";
  });
  cuda_check(kernels::launch_permute3(kin(src, "permute3 src"), d0, d1, d2, p0, p1, p2, kout(dst, "permute3 dst"),
                                      stream()),
             "permute3");
}

}  // namespace deltatune::cuda
