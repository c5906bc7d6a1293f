// CudaBackend: construction, memory, transfers and GEMM. The ops live in cuda_ops_*.cpp.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_block_gemm.h"
#include "backend/cuda/kernel_policy_select.h"
#include "backend/cuda_kernels_setting.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "elementwise/elementwise.cuh"
#include "lora/lora.cuh"

namespace deltatune {
namespace cuda {

using kernels::KIn;
using kernels::KOut;
using kernels::KType;

namespace {
constexpr size_t kCublasWorkspace = size_t(32) << 20;

KType ktype(DType d, const char* what) {
  switch (d) {
    case DType::F32: return KType::F32;
    case DType::BF16: return KType::BF16;
    case DType::F16: return KType::F16;
    default: break;
  }
  throw Error(std::string("CUDA backend: ") + what + " must be a float tensor (F32/BF16/F16), got " + dtype_name(d));
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

bool is_float(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }
}  // namespace

KIn kin(const Tensor& t, const char* what) {
  check(!t.defined() || t.device == Device::CUDA || t.numel() == 0,
        [&] { return std::string("CUDA backend: ") + what + " is not a CUDA tensor (upload it first)"; });
  return KIn{t.data, ktype(t.dtype, what)};
}
KOut kout(Tensor& t, const char* what) {
  check(!t.defined() || t.device == Device::CUDA || t.numel() == 0,
        [&] { return std::string("CUDA backend: ") + what + " is not a CUDA tensor (upload it first)"; });
  return KOut{t.data, ktype(t.dtype, what)};
}

CudaBackend::CudaBackend(int device_index, DType compute, const std::string& kernels)
    : device_(device_index), compute_(compute) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("no usable CUDA device: ") + cudaGetErrorString(e) +
                " (check the NVIDIA driver with nvidia-smi, or train with `device: cpu`)");
  }
  check(device_index >= 0 && device_index < count, [&] {
    return "CUDA device index " + std::to_string(device_index) + " out of range: " + std::to_string(count) +
           " device(s) present (set `device: cuda:N` with N < " + std::to_string(count) + ")";
  });
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  policy_ = choose_kernel_policy(prop, kernels);
  name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  alloc_ = std::make_shared<DeviceAllocator>(device_);
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cublas_check(cublasCreate(&cublas_), "cublasCreate");
  cublas_check(cublasSetStream(cublas_, stream_), "cublasSetStream");
  cublas_check(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  // Our own workspace, so cuBLAS never allocates during a step.
  cublas_ws_ = alloc({static_cast<int64_t>(kCublasWorkspace)}, DType::U8);
  cublas_check(cublasSetWorkspace(cublas_, cublas_ws_.data, kCublasWorkspace), "cublasSetWorkspace");
  scalars_ = alloc({16}, DType::U8);
}

CudaBackend::CudaBackend(int device_index, DType compute, const kernels::KernelPolicy& limit)
    : CudaBackend(device_index, compute, limit.hopper() ? "auto" : "portable") {
  policy_.smem_optin = std::min(policy_.smem_optin, limit.smem_optin);
  policy_.sm_count = std::max(1, std::min(policy_.sm_count, limit.sm_count));
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  fp8_gemm_.reset();
  if (cublas_) cublasDestroy(cublas_);
  cublas_ws_ = Tensor();
  scalars_ = Tensor();
  if (stream_) cudaStreamDestroy(stream_);
}

cudaStream_t CudaBackend::stream() const {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  return stream_;
}

void CudaBackend::synchronize() {
  check_not_recording_step("a host read or synchronize");
  cuda_check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

void CudaBackend::check_not_recording_step(const char* what) {
  if (!step_pool_) return;
  step_refused_ = true;
  throw Error(std::string("internal: ") + what + " while recording a training step");
}

MemoryStats CudaBackend::memory_stats() const { return alloc_->stats(); }

Tensor CudaBackend::alloc(Shape shape, DType dtype) {
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.device = Device::CUDA;
  for (int64_t d : t.shape)
    check(d >= 0, [&] { return "internal: negative dimension in alloc " + shape_str(t.shape); });
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  t.storage = step_pool_ ? step_pool_->allocate(t.nbytes()) : alloc_->allocate(t.nbytes());
  t.data = t.storage.get();
  if (recording_ && !step_pool_) keep_for_recording(t);  // a step recording's tensors live in its pool
  return t;
}

Tensor CudaBackend::upload_bytes(const void* data, Shape shape, DType dtype) {
  check_not_recording_step("a host upload");  // its source would be gone when the recording replays
  Tensor t = alloc(std::move(shape), dtype);
  if (t.nbytes() > 0)
    cuda_check(cudaMemcpyAsync(t.data, data, t.nbytes(), cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (upload)");
  return t;
}

void CudaBackend::fill(Tensor& t, float value) {
  if (t.numel() == 0) return;
  if (value == 0.f) {
    cuda_check(cudaMemsetAsync(t.data, 0, t.nbytes(), stream()), "cudaMemsetAsync (fill)");
    return;
  }
  if (t.dtype == DType::I32) {
    check_not_recording_step("an I32 fill (a host copy)");
    std::vector<int32_t> h(static_cast<size_t>(t.numel()), static_cast<int32_t>(value));
    cuda_check(cudaMemcpyAsync(t.data, h.data(), t.nbytes(), cudaMemcpyHostToDevice, stream()), "fill (I32)");
    return;
  }
  cuda_check(kernels::launch_fill(kout(t, "fill: tensor"), t.numel(), value, stream()), "fill");
}

Tensor CudaBackend::upload(const Tensor& host, DType dtype) {
  check(host.device == Device::CPU, "internal: upload of a tensor that is not on the host");
  Tensor h = host.dtype == dtype ? host : host_convert(host, dtype);
  return upload_bytes(h.data, host.shape, dtype);
}

Tensor CudaBackend::download(const Tensor& t, DType dtype) {
  check(t.device == Device::CUDA, "internal: download of a tensor that is not on the GPU");
  Tensor h = host_tensor(t.shape, t.dtype);
  if (t.nbytes() > 0) {
    cuda_check(cudaMemcpyAsync(h.data, t.data, t.nbytes(), cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (download)");
    synchronize();
  }
  return dtype == t.dtype ? h : host_convert(h, dtype);
}

void CudaBackend::copy(Tensor& dst, const Tensor& src) {
  check(dst.numel() == src.numel(), [&] {
    return "copy: dst " + shape_str(dst.shape) + " and src " + shape_str(src.shape) +
           " differ in element count";
  });
  if (src.numel() == 0) return;
  if (dst.dtype == src.dtype) {
    cuda_check(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream()), "copy");
    return;
  }
  check(is_float(dst.dtype) && is_float(src.dtype), [&] {
    return std::string("copy: cannot convert ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype);
  });
  cuda_check(kernels::launch_convert(kout(dst, "copy: dst"), kin(src, "copy: src"), src.numel(), stream()), "copy");
}

void CudaBackend::copy_cols(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t ncols) {
  const int64_t rows = src.rows();
  check(dst.rows() == rows && src_col >= 0 && dst_col >= 0 && src_col + ncols <= src.cols() &&
            dst_col + ncols <= dst.cols(),
        [&] {
          return "copy_cols: src " + shape_str(src.shape) + " cols [" + std::to_string(src_col) + ", +" +
                 std::to_string(ncols) + ") -> dst " + shape_str(dst.shape) + " col " +
                 std::to_string(dst_col);
        });
  cuda_check(kernels::launch_copy_cols(kout(dst, "copy_cols: dst"), dst.cols(), dst_col, kin(src, "copy_cols: src"),
                                       src.cols(), src_col, rows, ncols, stream()),
             "copy_cols");
}

// ---- GEMM ------------------------------------------------------------------------------------------
// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: a row-major X viewed column-major is Xᵀ
// with leading dimension X.cols(), so B goes first with transa = trans_b, A second with transb = trans_a.
void CudaBackend::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                       float beta) {
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  check(K == Kb && c.rows() == M && c.cols() == N, [&] {
    return "gemm: op(A) " + std::to_string(M) + "x" + std::to_string(K) + " · op(B) " + std::to_string(Kb) +
           "x" + std::to_string(N) + " does not match C " + shape_str(c.shape);
  });
  check(is_float(a.dtype) && is_float(b.dtype) && is_float(c.dtype), "gemm: operands must be float tensors");
  check(M < INT_MAX && N < INT_MAX && K < INT_MAX, "gemm: dimension over 2^31");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.f) fill(c, 0.f);
    else scale(c, beta);
    return;
  }
  // Mixed operand types: bring the F32 operand to the other's 16-bit type (bf16 operands, fp32 accumulate).
  // F32 operands into a 16-bit C (the LoRA up-projection added into a bf16 output) go to C's type as well:
  // a tensor-core product written straight into C instead of an FP32 GEMM through an F32 copy of C.
  Tensor A = a, B = b;
  auto to16 = [&](Tensor& t, DType to) {
    Tensor conv = alloc(t.shape, to);
    copy(conv, t);
    t = conv;
  };
  if (A.dtype != B.dtype) {
    Tensor& f32 = A.dtype == DType::F32 ? A : B;
    to16(f32, A.dtype == DType::F32 ? B.dtype : A.dtype);
  } else if (A.dtype == DType::F32 && c.dtype != DType::F32) {
    to16(A, c.dtype);
    to16(B, c.dtype);
  }
  // cuBLAS writes C in the operand type or F32; other combinations go through an F32 scratch.
  Tensor C = c;
  const bool via_scratch = !(c.dtype == DType::F32 || c.dtype == A.dtype);
  if (via_scratch) {
    C = alloc(c.shape, DType::F32);
    if (beta != 0.f) copy(C, c);
  }
  const cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int lda = static_cast<int>(B.cols()), ldb = static_cast<int>(A.cols()), ldc = static_cast<int>(N);
  stream();
  cublas_check(cublasGemmEx(cublas_, opa, opb, m, n, k, &alpha, B.data, cuda_type(B.dtype), lda, A.data,
                            cuda_type(A.dtype), ldb, &beta, C.data, cuda_type(C.dtype), ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "gemm (cublasGemmEx)");
  if (via_scratch) copy(c, C);
}

// Column blocks straight into cuBLAS (pointer offset, leading dimension = the tensor's row length) when the
// operand types need no conversion; otherwise the default's contiguous copies.
void CudaBackend::gemm_cols(const Cols& a, bool trans_a, const Cols& b, bool trans_b, const Cols& c, float alpha,
                            float beta) {
  const bool direct = a.t.dtype == b.t.dtype && a.t.dtype != DType::F32 &&
                      (c.t.dtype == DType::F32 || c.t.dtype == a.t.dtype);
  for (const Cols* m : {&a, &b, &c})
    check(m->t.ndim() == 2 && m->col >= 0 && m->width() >= 0 && m->col + m->width() <= m->t.cols(), [&] {
      return "gemm_cols: columns [" + std::to_string(m->col) + ", " + std::to_string(m->col + m->width()) +
             ") are not inside the 2-D tensor " + shape_str(m->t.shape);
    });
  if (!direct) {
    Backend::gemm_cols(a, trans_a, b, trans_b, c, alpha, beta);
    return;
  }
  const int64_t M = trans_a ? a.width() : a.t.rows(), K = trans_a ? a.t.rows() : a.width();
  const int64_t Kb = trans_b ? b.width() : b.t.rows(), N = trans_b ? b.t.rows() : b.width();
  check(K == Kb && c.t.rows() == M && c.width() == N, [&] {
    return "gemm_cols: op(A) " + std::to_string(M) + "x" + std::to_string(K) + " · op(B) " +
           std::to_string(Kb) + "x" + std::to_string(N) + " does not match C " + std::to_string(c.t.rows()) +
           "x" + std::to_string(c.width());
  });
  check(M < INT_MAX && N < INT_MAX && K < INT_MAX && a.t.cols() < INT_MAX && b.t.cols() < INT_MAX &&
            c.t.cols() < INT_MAX,
        "gemm_cols: dimension over 2^31");
  if (M == 0 || N == 0) return;
  check(K > 0, "gemm_cols: empty inner dimension");
  auto at = [](const Cols& m) {
    return static_cast<void*>(static_cast<char*>(m.t.data) + m.col * static_cast<int64_t>(dtype_size(m.t.dtype)));
  };
  const cublasOperation_t opa = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  stream();
  cublas_check(cublasGemmEx(cublas_, opa, opb, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                            at(b), cuda_type(b.t.dtype), static_cast<int>(b.t.cols()), at(a), cuda_type(a.t.dtype),
                            static_cast<int>(a.t.cols()), &beta, at(c), cuda_type(c.t.dtype),
                            static_cast<int>(c.t.cols()), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "gemm_cols (cublasGemmEx)");
}

// dy read once (kernels/lora/lora_dy.cu) for bf16 operands the kernel takes, its partial sums in the cuBLAS
// workspace (idle between cuBLAS calls on this one stream); otherwise the two GEMMs.
void CudaBackend::lora_dy_products(const Tensor& dy, const Tensor& B, const Cols& u, float alpha, const Cols& du,
                                   Tensor& gB) {
  const DType bf = DType::BF16;
  const bool types = dy.dtype == bf && B.dtype == bf && u.t.dtype == bf && du.t.dtype == bf &&
                     gB.dtype == DType::F32 && dy.ndim() == 2 && B.ndim() == 2 && gB.ndim() == 2 &&
                     u.t.ndim() == 2 && du.t.ndim() == 2;
  const int64_t T = dy.rows(), N = dy.cols(), r = B.ndim() == 2 ? B.cols() : 0;
  const bool shapes = types && B.rows() == N && u.t.rows() == T && du.t.rows() == T && u.width() == r &&
                      du.width() == r && gB.rows() == N && gB.cols() == r && u.col + r <= u.t.cols() &&
                      du.col + r <= du.t.cols();
  kernels::LoraDyArgs a;
  if (shapes) {
    const auto at = [](const Cols& m) { return static_cast<char*>(m.t.data) + m.col * int64_t(dtype_size(m.t.dtype)); };
    a.dy = dy.data, a.B = B.data, a.u = at(u), a.du = at(du), a.gB = static_cast<float*>(gB.data);
    a.T = T, a.N = N, a.ldy = N, a.ldu = u.t.cols(), a.lddu = du.t.cols(), a.r = static_cast<int>(r), a.alpha = alpha;
  }
  const size_t need = shapes ? kernels::lora_dy_scratch_bytes(a, policy_) : 0;
  if (need == 0 || need > cublas_ws_.nbytes()) {
    Backend::lora_dy_products(dy, B, u, alpha, du, gB);
    return;
  }
  cuda_check(kernels::launch_lora_dy(a, cublas_ws_.data, policy_, stream()), "lora_dy_products");
}

// The rank-r term as its own kernel (kernels/lora/lora_up.cu) for bf16 operands it takes, the residual read in
// place of a copy; otherwise the default (copy + GEMM).
void CudaBackend::lora_up(const Cols& u, const Tensor& B, float alpha, const Tensor* residual, Tensor& y) {
  const DType bf = DType::BF16;
  const bool ok = u.t.dtype == bf && B.dtype == bf && y.dtype == bf && (!residual || residual->dtype == bf) &&
                  u.t.ndim() == 2 && B.ndim() == 2 && u.t.rows() == y.rows() && B.rows() == y.cols() &&
                  B.cols() == u.width() && u.col + u.width() <= u.t.cols() &&
                  (!residual || (residual->rows() == y.rows() && residual->cols() == y.cols()));
  kernels::LoraUpArgs a;
  if (ok) {
    a.u = static_cast<const char*>(u.t.data) + u.col * int64_t(dtype_size(bf)), a.B = B.data;
    a.res = residual ? residual->data : nullptr, a.y = y.data;
    a.T = y.rows(), a.N = y.cols(), a.ldu = u.t.cols(), a.ldres = residual ? residual->cols() : 0, a.ldy = y.cols();
    a.r = static_cast<int>(u.width()), a.alpha = alpha;
  }
  if (!ok || !kernels::lora_up_takes(a)) {
    Backend::lora_up(u, B, alpha, residual, y);
    return;
  }
  cuda_check(kernels::launch_lora_up(a, stream()), "lora_up");
}

namespace {
// Whether ug, uu, Bg, Bu are the gate/up terms' operands lora_swiglu.cu reads for bf16 g [T, N] (then their
// pointers, row strides and ranks into out).
template <class Args>
bool gate_up_terms_args(const Backend::Cols& ug, const Tensor& Bg, float ag, const Backend::Cols& uu, const Tensor& Bu,
                        float au, const Tensor& g, Args& out) {
  const DType bf = DType::BF16;
  auto bf2 = [&](const Tensor& t) { return t.dtype == bf && t.ndim() == 2; };
  const bool ok = bf2(ug.t) && bf2(uu.t) && bf2(Bg) && bf2(Bu) && g.dtype == bf && g.ndim() == 2 &&
                  ug.t.rows() == g.rows() && uu.t.rows() == g.rows() && Bg.rows() == g.cols() &&
                  Bu.rows() == g.cols() && Bg.cols() == ug.width() && Bu.cols() == uu.width() &&
                  ug.col + ug.width() <= ug.t.cols() && uu.col + uu.width() <= uu.t.cols();
  if (!ok) return false;
  const int64_t es = int64_t(dtype_size(bf));
  out.ug = static_cast<const char*>(ug.t.data) + ug.col * es;
  out.uu = static_cast<const char*>(uu.t.data) + uu.col * es;
  out.Bg = Bg.data, out.Bu = Bu.data, out.ag = ag, out.au = au;
  out.ldug = ug.t.cols(), out.lduu = uu.t.cols();
  out.rg = static_cast<int>(ug.width()), out.ru = static_cast<int>(uu.width());
  return true;
}
}  // namespace

// SwiGLU with the gate/up rank-r terms (kernels/lora/lora_swiglu.cu) for the bf16 shapes it takes: g and u read
// once, the terms never written on their own, the sums written back only with keep_sums; otherwise the default
// (lora_up twice + swiglu_fwd).
bool CudaBackend::lora_swiglu_fwd(const Cols& ug, const Tensor& Bg, float ag, const Cols& uu, const Tensor& Bu,
                                  float au, Tensor& g, Tensor& u, Tensor& h, bool keep_sums) {
  const DType bf = DType::BF16;
  kernels::LoraSwigluArgs a;
  const bool ok = u.dtype == bf && h.dtype == bf && g.shape == u.shape && g.shape == h.shape &&
                  gate_up_terms_args(ug, Bg, ag, uu, Bu, au, g, a);
  if (ok) {
    a.g = g.data, a.u = u.data, a.h = h.data;
    a.T = g.rows(), a.N = g.cols(), a.keep_sums = keep_sums;
  }
  if (!ok || !kernels::lora_swiglu_fwd_takes(a))
    return Backend::lora_swiglu_fwd(ug, Bg, ag, uu, Bu, au, g, u, h, keep_sums);
  cuda_check(kernels::launch_lora_swiglu_fwd(a, stream()), "lora_swiglu_fwd");
  return keep_sums;
}

// swiglu_bwd with the down projection's rank-r term, and the gate/up terms when given (kernels/lora/lora_swiglu.cu),
// for the bf16 shapes it takes: dh' and the sums never written; otherwise the default (gemm into dh, lora_up into
// temporaries, swiglu_bwd).
void CudaBackend::lora_swiglu_bwd(Tensor& dh, const Tensor& dr, const Tensor& A, const Tensor& g, const Tensor& u,
                                  Tensor& dg, Tensor& du, const GateUpTerms* terms) {
  const DType bf = DType::BF16;
  bool ok = dr.defined() && dr.ndim() == 2 && A.ndim() == 2 && dh.ndim() == 2 && dr.rows() == dh.rows() &&
            A.rows() == dr.cols() && A.cols() == dh.cols();
  const Tensor* const all[] = {&dh, &dr, &A, &g, &u, &dg, &du};
  for (const Tensor* t : all) ok = ok && t->dtype == bf;
  for (const Tensor* t : {all[3], all[4], all[5], all[6]}) ok = ok && t->shape == dh.shape;
  kernels::LoraSwigluBwdArgs a;
  if (ok && terms) ok = gate_up_terms_args(terms->ug, terms->Bg, terms->ag, terms->uu, terms->Bu, terms->au, g, a);
  if (ok) {
    a.dh = dh.data, a.dr = dr.data, a.A = A.data, a.g = g.data, a.u = u.data, a.dg = dg.data, a.du = du.data;
    a.T = dh.rows(), a.N = dh.cols(), a.r = static_cast<int>(dr.cols());
  }
  if (!ok || !kernels::lora_swiglu_bwd_takes(a)) {
    Backend::lora_swiglu_bwd(dh, dr, A, g, u, dg, du, terms);
    return;
  }
  cuda_check(kernels::launch_lora_swiglu_bwd(a, stream()), "lora_swiglu_bwd");
}

// ---- small helpers ------------------------------------------------------------------------------------
double* CudaBackend::zero_acc() {
  cuda_check(cudaMemsetAsync(scalars_.data, 0, 16, stream()), "cudaMemsetAsync (accumulator)");
  return static_cast<double*>(scalars_.data);
}

double CudaBackend::read_acc() {
  double v = 0;
  cuda_check(cudaMemcpyAsync(&v, scalars_.data, sizeof(double), cudaMemcpyDeviceToHost, stream()), "read result");
  synchronize();
  return v;
}

void CudaBackend::check_layout(const SeqLayout& seq, int64_t T, const char* op) const {
  check(seq.tokens() == T, [&] {
    return std::string(op) + ": the sequence layout covers " + std::to_string(seq.tokens()) +
           " tokens but the tensors have " + std::to_string(T);
  });
  check(seq.cu_seqlens.defined() && seq.cu_seqlens.device == Device::CUDA &&
            seq.cu_seqlens.numel() == static_cast<int64_t>(seq.host_cu_seqlens.size()) &&
            seq.cu_seqlens.dtype == DType::I32,
        [&] {
          return std::string(op) +
                 ": SeqLayout.cu_seqlens must be an I32 CUDA tensor matching host_cu_seqlens";
        });
}

double CudaBackend::sum_squares(const Tensor& x) { return sum_squares_many({&x}); }

bool CudaBackend::all_finite(const Tensor& x) { return all_finite_many({&x}); }

namespace {
// The kernel views and element counts of a list of tensors (the many-tensor reductions).
struct KInList {
  std::vector<kernels::KIn> ins;
  std::vector<int64_t> ns;
  KInList(const std::vector<const Tensor*>& xs, const char* what) {
    for (const Tensor* x : xs) {
      ins.push_back(kin(*x, what));
      ns.push_back(x->numel());
    }
  }
};
}  // namespace

void CudaBackend::copy_many(const std::vector<CopyPair>& pairs) {
  std::vector<kernels::KOut> dst;
  std::vector<kernels::KIn> src;
  std::vector<int64_t> ns;
  for (const CopyPair& p : pairs) {
    check(p.dst->numel() == p.src->numel(), [&] {
      return "copy_many: dst " + shape_str(p.dst->shape) + " and src " + shape_str(p.src->shape) +
             " differ in element count";
    });
    if (p.dst->dtype == p.src->dtype || !is_float(p.dst->dtype) || !is_float(p.src->dtype)) {
      copy(*p.dst, *p.src);  // plain copies and non-float types keep copy()'s path and messages
      continue;
    }
    dst.push_back(kout(*p.dst, "copy_many: dst"));
    src.push_back(kin(*p.src, "copy_many: src"));
    ns.push_back(p.src->numel());
  }
  cuda_check(kernels::launch_convert_many(dst.data(), src.data(), ns.data(), static_cast<int>(dst.size()), stream()),
             "copy_many");
}

double CudaBackend::sum_squares_many(const std::vector<const Tensor*>& xs) {
  const KInList l(xs, "sum_squares: tensor");
  double* acc = zero_acc();
  cuda_check(kernels::launch_sum_squares_many(l.ins.data(), l.ns.data(), static_cast<int>(l.ins.size()), acc, stream()),
             "sum_squares_many");
  return read_acc();
}

bool CudaBackend::all_finite_many(const std::vector<const Tensor*>& xs) {
  const KInList l(xs, "all_finite: tensor");
  zero_acc();
  int32_t* flag = reinterpret_cast<int32_t*>(static_cast<char*>(scalars_.data) + 8);
  cuda_check(kernels::launch_any_nonfinite_many(l.ins.data(), l.ns.data(), static_cast<int>(l.ins.size()), flag,
                                                       stream()),
             "all_finite_many");
  int32_t h = 0;
  cuda_check(cudaMemcpyAsync(&h, flag, sizeof(h), cudaMemcpyDeviceToHost, stream()), "all_finite_many");
  synchronize();
  return h == 0;
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device_index, DType compute) {
  return make_cuda_backend(device_index, compute, "auto");
}
std::unique_ptr<Backend> make_cuda_backend(int device_index, DType compute, const std::string& kernels) {
  check(compute == DType::BF16 || compute == DType::F32, [&] {
    return std::string("CUDA backend: compute dtype must be BF16 or F32, got ") + dtype_name(compute);
  });
  return std::make_unique<cuda::CudaBackend>(device_index, compute, kernels);
}

bool cuda_backend_available() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace deltatune
