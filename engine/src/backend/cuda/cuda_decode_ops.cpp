// CudaBackend generation ops (backend.h "generation"): shape checks, then one launcher of kernels/decode each.
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"
#include "decode/decode.cuh"

namespace deltatune::cuda {

namespace {
const int32_t* dev_i32(const Tensor& t, const char* what) {
  check(t.dtype == DType::I32 && t.device == Device::CUDA, [&] {
    return std::string(what) + " must be an I32 CUDA tensor, got " + dtype_name(t.dtype) + " " +
           shape_str(t.shape);
  });
  return static_cast<const int32_t*>(t.data);
}
void check_numel(const Tensor& t, int64_t n, const std::string& what) {
  check(t.numel() == n, [&] {
    return what + " has shape " + shape_str(t.shape) + ", expected " + std::to_string(n) + " elements";
  });
}
}  // namespace

void CudaBackend::conv1d_silu_step(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& conv_state,
                                   Tensor& y) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols(), N = seq.num_seqs();
  check(w.rows() == C && K >= 1 && K <= 8, [&] {
    return "conv1d_silu_step: weight " + shape_str(w.shape) + " for " + std::to_string(C) +
           " channels (K at most 8)";
  });
  check(seq.tokens() == T, [&] {
    return "conv1d_silu_step: the layout has " + std::to_string(seq.tokens()) + " tokens, x " +
           shape_str(x.shape);
  });
  check_numel(y, T * C, "conv1d_silu_step y");
  check_numel(conv_state, N * (K - 1) * C, "conv1d_silu_step conv_state [N, K-1, C]");
  cuda_check(kernels::launch_conv1d_silu_step(kin(x, "conv x"), kin(w, "conv w"), dev_i32(seq.cu_seqlens, "cu_seqlens"),
                                              static_cast<int>(N), kout(conv_state, "conv state"), kout(y, "conv y"),
                                              C, static_cast<int>(K), stream()),
             "conv1d_silu_step");
}

void CudaBackend::gdn_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                const SeqLayout& seq, float scale, Tensor& state, Tensor& o) {
  const int64_t T = seq.tokens(), N = seq.num_seqs(), dk = q.dim(-1), dv = v.dim(-1);
  check(T > 0 && q.numel() % (T * dk) == 0 && v.numel() % (T * dv) == 0, [&] {
    return "gdn_recurrent: q " + shape_str(q.shape) + " / v " + shape_str(v.shape) +
           " do not match T=" + std::to_string(T);
  });
  const int64_t HK = q.numel() / (T * dk), HV = v.numel() / (T * dv);
  check(HK > 0 && HV % HK == 0 && dk <= 256, "gdn_recurrent: value heads must be a multiple of key heads, dk <= 256");
  check_numel(k, q.numel(), "gdn_recurrent k");
  check_numel(o, v.numel(), "gdn_recurrent o");
  check_numel(g, T * HV, "gdn_recurrent g");
  check_numel(beta, T * HV, "gdn_recurrent beta");
  check_numel(state, N * HV * dk * dv, "gdn_recurrent state [N, HV, dk, dv]");
  check(state.dtype == DType::F32, "gdn_recurrent: the state must be F32");
  cuda_check(kernels::launch_gdn_recurrent(kin(q, "q"), kin(k, "k"), kin(v, "v"), kin(g, "g"), kin(beta, "beta"),
                                           dev_i32(seq.cu_seqlens, "cu_seqlens"), static_cast<int>(N),
                                           static_cast<float*>(state.data), kout(o, "o"), static_cast<int>(HK),
                                           static_cast<int>(HV), static_cast<int>(dk), static_cast<int>(dv), scale,
                                           stream()),
             "gdn_recurrent");
}

void CudaBackend::kv_cache_write(const Tensor& k, const Tensor& v, const SeqLayout& seq, Tensor& k_cache,
                                 Tensor& v_cache) {
  check(k_cache.ndim() == 4 && v_cache.shape == k_cache.shape, [&] {
    return "kv_cache_write: caches must be [N, L, nKV, hd], got " + shape_str(k_cache.shape) + " / " +
           shape_str(v_cache.shape);
  });
  const int64_t T = seq.tokens(), N = k_cache.dim(0), L = k_cache.dim(1), row = k_cache.dim(2) * k_cache.dim(3);
  check(seq.num_seqs() == N, [&] {
    return "kv_cache_write: " + std::to_string(seq.num_seqs()) + " sequences for a cache of " +
           std::to_string(N);
  });
  check_numel(k, T * row, "kv_cache_write k");
  check_numel(v, T * row, "kv_cache_write v");
  cuda_check(kernels::launch_kv_cache_write(kin(k, "k"), kin(v, "v"), dev_i32(seq.cu_seqlens, "cu_seqlens"),
                                            static_cast<int>(N), dev_i32(seq.positions, "positions"),
                                            kout(k_cache, "k_cache"), kout(v_cache, "v_cache"), T, L, row, stream()),
             "kv_cache_write");
}

void CudaBackend::attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const SeqLayout& seq,
                                   float scale, Tensor& o) {
  check(k_cache.ndim() == 4 && v_cache.shape == k_cache.shape,
        [&] { return "attention_cached: caches must be [N, L, nKV, hd], got " + shape_str(k_cache.shape); });
  const int64_t T = seq.tokens(), L = k_cache.dim(1), nKV = k_cache.dim(2), hd = k_cache.dim(3);
  check(T > 0 && q.numel() % (T * hd) == 0 && hd <= 256, [&] {
    return "attention_cached: q " + shape_str(q.shape) + " does not match T=" + std::to_string(T) +
           ", head_dim " + std::to_string(hd) + " (at most 256)";
  });
  const int64_t nH = q.numel() / (T * hd);
  check(nH % nKV == 0, "attention_cached: query heads must be a multiple of kv heads");
  check(seq.num_seqs() == k_cache.dim(0), "attention_cached: sequences and cache rows differ");
  check_numel(o, q.numel(), "attention_cached o");
  cuda_check(kernels::launch_attention_cached(kin(q, "q"), kin(k_cache, "k_cache"), kin(v_cache, "v_cache"),
                                              dev_i32(seq.cu_seqlens, "cu_seqlens"), static_cast<int>(seq.num_seqs()),
                                              dev_i32(seq.positions, "positions"), kout(o, "o"), T,
                                              static_cast<int>(nH), static_cast<int>(nKV), static_cast<int>(hd), L,
                                              scale, stream()),
             "attention_cached");
}

}  // namespace deltatune::cuda

namespace deltatune::cuda {

// A CUDA graph of the ops recorded between begin_capture and end_capture, with every tensor allocated while
// recording (the graph's buffers must not go back to the allocator's cache while it may run).
// A training step's recording also owns the pool its tensors came from, and holds the layout tables the graph
// reads (they are made before recording and could otherwise be evicted while the recording lives).
struct CudaRecording : Backend::Recording {
  std::vector<Tensor> keep;
  std::shared_ptr<DevicePool> pool;
  cudaGraphExec_t exec = nullptr;
  ~CudaRecording() override {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

void CudaBackend::keep_for_recording(const Tensor& t) { recording_->keep.push_back(t); }

bool CudaBackend::begin_capture() {
  check(!recording_, "internal: begin_capture while recording");
  // Relaxed: the allocator may still cudaMalloc a new block while recording.
  if (cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  recording_ = std::make_shared<CudaRecording>();
  return true;
}

bool CudaBackend::begin_step_capture() {
  check(!recording_, "internal: begin_step_capture while recording");
  if (cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  recording_ = std::make_shared<CudaRecording>();
  recording_->pool = std::make_shared<DevicePool>(alloc_);
  step_refused_ = false;
  layout_tables_.keep(recording_->keep);
  step_pool_ = recording_->pool;
  return true;
}

std::unique_ptr<Backend::Recording> CudaBackend::end_capture() {
  check(recording_ != nullptr, "internal: end_capture without begin_capture");
  auto rec = std::make_unique<CudaRecording>();
  rec->keep = std::move(recording_->keep);
  rec->pool = std::move(recording_->pool);
  recording_.reset();
  step_pool_.reset();
  const bool refused = step_refused_;
  step_refused_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream(), &graph);
  if (e != cudaSuccess || !graph || refused) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return nullptr;
  }
  const cudaError_t ei = cudaGraphInstantiate(&rec->exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ei != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return rec;
}

void CudaBackend::replay(Recording& r) {
  auto* rec = dynamic_cast<CudaRecording*>(&r);
  check(rec && rec->exec, "internal: replay of a recording not made by this backend");
  cuda_check(cudaGraphLaunch(rec->exec, stream()), "cudaGraphLaunch");
}

namespace {

// write_i32 / write_f32: `values` into the CUDA tensor dst (of dtype `dt`, as many elements), in stream order.
template <typename T>
void write_device_values(Tensor& dst, const std::vector<T>& values, DType dt, const char* op, cudaStream_t s) {
  check(dst.dtype == dt && dst.device == Device::CUDA && dst.numel() == static_cast<int64_t>(values.size()),
        [&] {
          return std::string(op) + ": " + std::to_string(values.size()) + " values into " +
                 dtype_name(dst.dtype) + " " + shape_str(dst.shape);
        });
  if (values.empty()) return;
  // Pageable source: the copy is staged before cudaMemcpyAsync returns, so `values` may go right after.
  cuda_check(cudaMemcpyAsync(dst.data, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, s),
             (std::string("cudaMemcpyAsync (") + op + ")").c_str());
}

}  // namespace

void CudaBackend::write_i32(Tensor& dst, const std::vector<int32_t>& values) {
  write_device_values(dst, values, DType::I32, "write_i32", stream());
}

void CudaBackend::write_f32(Tensor& dst, const std::vector<float>& values) {
  write_device_values(dst, values, DType::F32, "write_f32", stream());
}

}  // namespace deltatune::cuda
