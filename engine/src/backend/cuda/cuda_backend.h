// The CUDA backend (internal header; the rest of the engine only sees make_cuda_backend()).
// One device, one non-blocking stream, one cuBLAS handle, one caching allocator. Every op enqueues on the
// stream and returns; ops that return host values (sum_squares, all_finite, losses) synchronise.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "backend/activation_stash.h"
#include "backend/backend.h"
#include "backend/lora_kcat_ops.h"
#include "backend/quant_ops.h"
#include "backend/cuda/device_allocator.h"
#include "backend/cuda/layout_tables.h"
#include "common/kernel_policy.h"
#include "common/kptr.h"

namespace deltatune::kernels {
struct GdnNormOut;  // gdn/gdn.cuh
struct GdnGates;    // gdn/gdn.cuh
}
namespace deltatune::cuda {

struct CudaGdnSaved;
struct CudaRecording;  // cuda_decode_ops.cpp
class Fp8BlockGemm;    // fp8_block_gemm.h
struct GdnDims {
  int64_t T, HK, HV;
  int dk, dv;
};

// Chunks of 64 tokens per sequence (the last one partial), for the chunked GDN kernels.
struct GdnChunks {
  Tensor chunks, off;  // I32 (n, 2): first token, length; I32 (nseq + 1): first chunk of each sequence
  int64_t n = 0;
};

class CudaBackend final : public Backend, public QuantOps, public ActivationStashMaker, public LoraKcatOps {
 public:
  // kernels: the run config's `kernels` setting ("auto" | "portable"), which picks the kernel policy.
  CudaBackend(int device_index, DType compute, const std::string& kernels = "auto");
  // Tests: `limit` narrows the device's policy (the portable path, a smaller shared-memory limit, fewer SMs);
  // it never widens it past what the device reports.
  CudaBackend(int device_index, DType compute, const kernels::KernelPolicy& limit);
  const kernels::KernelPolicy& kernel_policy() const { return policy_; }
  ~CudaBackend() override;

  Device device() const override { return Device::CUDA; }
  std::string name() const override { return name_; }
  DType compute_dtype() const override { return compute_; }
  DType weight_dtype() const override { return compute_; }

  Tensor alloc(Shape shape, DType dtype) override;
  void fill(Tensor& t, float value) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor download(const Tensor& t, DType dtype) override;
  // QuantOps (cuda_quant.cpp)
  std::shared_ptr<const QuantizedWeight> upload_quantized(const Tensor& host, QuantFormat format) override;
  std::shared_ptr<const QuantizedWeight> upload_quantized(const QuantizedWeight& host) override;
  void dequantize(const QuantizedWeight& w, Tensor& out) override;
  bool fp8_gemm_takes(const QuantizedWeight& w) override;
  Tensor host_resident_table(const Tensor& host, DType dtype) override;
  bool fp8_gemm_shared(const Tensor& x, std::span<const QuantizedWeight* const> ws, std::span<Tensor* const> ys,
                       float beta) override;
  bool fp8_gemm_sum(std::span<const Tensor* const> xs, std::span<const QuantizedWeight* const> ws, Tensor& y,
                    float beta) override;
  // LoraKcatOps (cuda_lora_kcat.cpp)
  void rmsnorm_fwd_into(const Tensor& x, const Tensor& w, float eps, bool zero_centred, const Cols& y,
                        Tensor& rstd) override;
  void scaled_copies_into(std::span<const Tensor* const> srcs, std::span<const float> alphas,
                          std::span<const Cols> dsts) override;
  void release_cached_memory() override;
  void copy(Tensor& dst, const Tensor& src) override;
  void copy_cols(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t ncols) override;
  MemoryStats memory_stats() const override;
  void synchronize() override;

  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
            float beta) override;
  void lora_dy_products(const Tensor& dy, const Tensor& B, const Cols& u, float alpha, const Cols& du,
                        Tensor& gB) override;
  void lora_up(const Cols& u, const Tensor& B, float alpha, const Tensor* residual, Tensor& y) override;
  bool lora_swiglu_fwd(const Cols& ug, const Tensor& Bg, float ag, const Cols& uu, const Tensor& Bu, float au,
                       Tensor& g, Tensor& u, Tensor& h, bool keep_sums) override;
  void lora_swiglu_bwd(Tensor& dh, const Tensor& dr, const Tensor& A, const Tensor& g, const Tensor& u, Tensor& dg,
                       Tensor& du, const GateUpTerms* terms) override;
  void gemm_cols(const Cols& a, bool trans_a, const Cols& b, bool trans_b, const Cols& c, float alpha,
                 float beta) override;

  void add(Tensor& y, const Tensor& x, float alpha) override;
  void scale(Tensor& y, float alpha) override;
  double sum_squares(const Tensor& x) override;
  bool all_finite(const Tensor& x) override;
  void copy_many(const std::vector<CopyPair>& pairs) override;
  double sum_squares_many(const std::vector<const Tensor*>& xs) override;
  bool all_finite_many(const std::vector<const Tensor*>& xs) override;
  void dropout(const Tensor& x, float p, uint64_t seed, Tensor& y) override;

  void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) override;

  void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor& y, Tensor& rstd) override;
  void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, bool zero_centred,
                   Tensor& dx) override;
  void rmsnorm_bwd_add(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, bool zero_centred,
                       const Tensor& residual, Tensor& dx) override;
  void rmsnorm_fwd_cols(const Cols& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                        Tensor& rstd) override;
  void rmsnorm_bwd_cols(const Tensor& dy, const Cols& x, const Tensor& w, const Tensor& rstd,
                        bool zero_centred, const Cols& dx) override;
  void gated_rmsnorm_fwd(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y,
                         Tensor& rstd) override;
  void gated_rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd,
                         Tensor& dx, Tensor& dz) override;

  void swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) override;
  void sigmoid_mul_fwd(const Tensor& x, const Tensor& gate, Tensor& out) override;
  void sigmoid_mul_bwd(const Tensor& dout, const Tensor& x, const Tensor& gate, Tensor& dx, Tensor& dgate) override;
  void sigmoid_mul_fwd_cols(const Tensor& x, const Cols& gate, Tensor& out) override;
  void sigmoid_mul_bwd_cols(const Tensor& dout, const Tensor& x, const Cols& gate, Tensor& dx,
                            const Cols& dgate) override;

  void rope(Tensor& x, const Tensor& positions, int rot_dim, float theta, bool inverse) override;
  // cuda_ops_vision.cpp
  void layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean,
                      Tensor& rstd) override;
  void layer_norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                      Tensor& dx) override;
  void gelu_fwd(const Tensor& x, bool tanh_approx, Tensor& y) override;
  void gelu_bwd(const Tensor& dy, const Tensor& x, bool tanh_approx, Tensor& dx) override;
  void rope_2d(Tensor& x, const Tensor& positions, float theta, bool inverse) override;
  void rope_multimodal(Tensor& x, const Tensor& positions, int rot_dim, float theta,
                       const std::array<int64_t, 3>& section, bool inverse) override;
  void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq, float scale, Tensor& o,
                     Tensor& lse) override;
  void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                     Tensor& dv) override;

  void conv1d_silu_fwd(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& y) override;
  void conv1d_silu_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& dx) override;
  void conv1d_silu_fwd_split(const Tensor& x, const Tensor& w, const SeqLayout& seq,
                             std::span<Tensor* const> ys) override;
  void conv1d_silu_bwd_split(std::span<const Tensor* const> dys, const Tensor& x, const Tensor& w,
                             const SeqLayout& seq, Tensor& dx) override;
  void gdn_gates_fwd(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& g,
                     Tensor& beta) override;
  void gdn_gates_bwd(const Tensor& dg, const Tensor& dbeta, const Tensor& a, const Tensor& b, const Tensor& A_log,
                     const Tensor& dt_bias, Tensor& da, Tensor& db) override;
  void gdn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
               const SeqLayout& seq, float scale, Tensor& o) override;
  void gdn_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
               const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dg,
               Tensor& dbeta) override;
  std::shared_ptr<GdnSaved> gdn_fwd_keep(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                         const Tensor& beta, const SeqLayout& seq, float scale, Tensor& o,
                                         GdnKeep what) override;
  void gdn_bwd_saved(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& g, const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                     Tensor& dv, Tensor& dg, Tensor& dbeta) override;
  std::shared_ptr<GdnSaved> gdn_gated_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const GdnGateInputs& gates, const SeqLayout& seq, float scale,
                                          Tensor& o, std::optional<GdnKeep> keep) override;
  void gdn_gated_bwd(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                     const GdnGateInputs& gates, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                     Tensor& dv, Tensor& da, Tensor& db) override;

  void moe_router_fwd(const Tensor& logits, int k, Tensor& idx, Tensor& w) override;
  void moe_router_bwd(const Tensor& dw, const Tensor& idx, const Tensor& w, Tensor& dlogits) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) override;
  void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor& scale, Tensor& dst) override;
  void row_dot(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale_rows(const Tensor& x, const Tensor& s, Tensor& y) override;
  void sigmoid(const Tensor& x, Tensor& y) override;

  // cuda_ops_moe.cpp
  void moe_dispatch(const Tensor& idx, int num_experts, Tensor& offsets, Tensor& row_token, Tensor& row_slot,
                    Tensor& slot_row, Tensor* load) override;
  void moe_combine(const Tensor& y, const Tensor& slot_row, const Tensor& w, Tensor& out) override;
  void grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, Tensor& y, float alpha,
                    float beta) override;
  void grouped_gemm_lora(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, const Tensor& u,
                         const Tensor& l, float lscale, Tensor& y, float alpha, float beta) override;
  void grouped_lora_linear_fwd(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& offsets,
                               const Tensor& l, float lscale, Tensor& u, Tensor& y) override;
  void swiglu_packed_fwd(const Tensor& gu, Tensor& h) override;
  void swiglu_packed_bwd(const Tensor& dh, const Tensor& gu, Tensor& dgu) override;
  void grouped_gemm_wgrad(const Tensor& a, const Tensor& b, const Tensor& offsets, Tensor& g, float alpha,
                          float beta) override;
  void permute3(const Tensor& src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2,
                Tensor& dst) override;

  double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits) override;
  double linear_cross_entropy(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale, Tensor* dh,
                              int64_t chunk_rows, LossLogits logits) override;
  void linear_cross_entropy_into(const Tensor& h, const Tensor& w, const Tensor& labels, const Tensor& grad_scale,
                                 Tensor* dh, int64_t chunk_rows, LossLogits logits, Tensor& loss_sum) override;

  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) override;
  void sgd_step(Tensor& param, const Tensor& grad, float lr, float weight_decay) override;
  void adamw_step_many(const std::vector<AdamWSlot>& slots, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t step, float grad_scale) override;

  // cuda_decode_ops.cpp (generation state ops; kernels/decode)
  void conv1d_silu_step(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& conv_state,
                        Tensor& y) override;
  void gdn_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                     const SeqLayout& seq, float scale, Tensor& state, Tensor& o) override;
  // cuda_ops_seq.cpp (it reads the chunked forward's chunk-start states)
  void gdn_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                   const SeqLayout& seq, float scale, Tensor& state, Tensor& o) override;
  void kv_cache_write(const Tensor& k, const Tensor& v, const SeqLayout& seq, Tensor& k_cache,
                      Tensor& v_cache) override;
  void attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const SeqLayout& seq,
                        float scale, Tensor& o) override;
  bool begin_capture() override;
  bool begin_step_capture() override;
  std::unique_ptr<Recording> end_capture() override;
  void replay(Recording& r) override;
  void write_i32(Tensor& dst, const std::vector<int32_t>& values) override;
  void write_f32(Tensor& dst, const std::vector<float>& values) override;

  // nccl_reducer.cpp: NCCL on a stream of its own, ordered after this backend's stream by events.
  std::unique_ptr<GradientReducer> create_gradient_reducer(const ReducerSetup& setup) override;
  // nccl_gatherer.cpp: NCCL all-gather of frozen-weight shards on a communicator and stream of its own.
  std::unique_ptr<ShardGatherer> create_shard_gatherer(const ReducerSetup& setup) override;
  // nccl_exchange.cpp: expert parallel's all-to-all (NCCL send/recv) on a communicator and stream of its own.
  std::unique_ptr<TokenExchange> create_token_exchange(const ReducerSetup& setup) override;
  // cuda_activation_stash.cpp: page-locked host slots and a copy stream (backend/activation_stash.h).
  std::unique_ptr<ActivationStash> create_activation_stash() override;

 private:
  // cuda_quant.cpp: the row count the FP8 products of these [m, k] problems run at (n, or n padded with zero rows
  // to 16 or 128 where cuBLASLt takes no algorithm for n; 0 where it takes none), and one product into y.
  int64_t fp8_run_rows(int64_t n, std::span<const std::pair<int64_t, int64_t>> mk, bool accumulate);
  void fp8_product(const uint8_t* w, const float* w_scales, const Tensor& xq, const Tensor& xs, int64_t n_run,
                   int64_t m, int64_t k, Tensor& y, float beta);
  // The stream, after making this backend's device current on the calling thread.
  cudaStream_t stream() const;
  // Device double accumulator zeroed on the stream; read back (synchronising) with read_acc().
  double* zero_acc();
  double read_acc();
  // Device copy of cu_seqlens checked against the host copy.
  void check_layout(const SeqLayout& seq, int64_t T, const char* op) const;
  // I32 (ntiles, 2) tile list for the attention kernels.
  Tensor attention_tiles(const SeqLayout& seq);
  // I32 (2·ntiles, 2) tile list for the tensor-core attention kernels (kAttnMmaTile tokens per tile): the
  // first ntiles rows ordered by query-side cost (keys before the tile), the next ntiles by key-side cost
  // (queries after it) in pairs of one sequence, most expensive first (kernels::attention_mma_tile_list).
  Tensor attention_tiles_mma(const SeqLayout& seq);
  // [T, H, hd] -> zeroed [T, H, padded_hd] with x in the first hd columns, and back (tensor-core attention at
  // head dims the kernels do not take).
  Tensor attention_pad_head_dim(const Tensor& x, int padded_hd);
  void attention_unpad_head_dim(const Tensor& padded, Tensor& x);
  GdnChunks gdn_chunks(const SeqLayout& seq);
  void gdn_check(const char* op, const GdnDims& d, const SeqLayout& seq);
  // q̂ = scale·q/‖q‖, k̂ = k/‖k‖ (fp32) and their rstd into r; values false: only the rstd (the tensor-core
  // backward reads bf16 q, k with it).
  void gdn_l2norms(const Tensor& q, const Tensor& k, float scale, CudaGdnSaved& r, bool values = true);
  // What gdn_forward_core writes besides o: nothing, everything the backward reads, or the chunk-start states.
  enum class GdnScratch { None, ForBackward, States };
  // gates: g and β tensors, or the gate inputs (tensor-core path only: its kernels form the gates).
  std::unique_ptr<CudaGdnSaved> gdn_forward_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const kernels::GdnGates& gates, const SeqLayout& seq,
                                                 float scale, Tensor* o, GdnScratch scratch);
  std::shared_ptr<GdnSaved> gdn_keep_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const kernels::GdnGates& gates, const GdnDims& d,
                                          const SeqLayout& seq, float scale, Tensor& o, GdnKeep what);
  // The backward's chunk quantities from the states and T GdnScratch::States kept (tensor-core path): W, M,
  // G, V', and ρ (q̂, k̂ too for inputs that are not bf16).
  void gdn_scratch_from_states(const Tensor& q, const Tensor& k, const Tensor& v,
                               const kernels::GdnGates& gates, float scale, const GdnDims& d,
                               CudaGdnSaved& f);
  // The backward's gate gradients: dg, dβ (gates given as tensors) or da, db (gate inputs).
  struct GdnGateGradOut {
    Tensor* dg = nullptr;
    Tensor* dbeta = nullptr;
    Tensor* da = nullptr;
    Tensor* db = nullptr;
  };
  void gdn_bwd_core(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                    const kernels::GdnGates& gates, const GdnDims& d, const SeqLayout& seq, float scale,
                    Tensor& dq, Tensor& dk, Tensor& dv, const GdnGateGradOut& gout);
  // The tensor-core prep's L2 norm settings; with r, r->rq, rk (and, with values, r->qn, kn) allocated as its
  // outputs.
  kernels::GdnNormOut gdn_norm_outputs(const GdnDims& d, CudaGdnSaved* r, bool values);
  // The fused loss's chunks with Σ CE added into the device double `acc` (zeroed by the caller); the gradient
  // scale is *grad_scale_dev when that is non-null (read on the device), else grad_scale.
  void linear_cross_entropy_acc(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                const float* grad_scale_dev, Tensor* dh, int64_t chunk_rows, LossLogits logits,
                                double* acc);
  // linear_cross_entropy_acc with bf16 logits (a bf16 weight): chunks of up to `rows` rows.
  void linear_cross_entropy_bf16_logits(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                        const float* grad_scale_dev, Tensor* dh, int64_t rows, double* acc);
  // Copy of a host buffer on the device (pageable copy: the host buffer may die after return).
  Tensor upload_bytes(const void* data, Shape shape, DType dtype);
  // t itself when it is BF16, else a BF16 copy (tensor-core operands of the grouped GEMMs).
  Tensor as_bf16(const Tensor& t);
  // t itself when its data is 16-byte aligned, else a copy (the GDN kernels load rows with 16-byte vector
  // loads and cp.async; a caller's tensor may be a view at any element offset).
  Tensor aligned16(const Tensor& t);

  int device_ = 0;
  std::string name_;
  kernels::KernelPolicy policy_;  // chosen once in the constructor (kernel_policy_select.h)
  DType compute_ = DType::BF16;
  std::shared_ptr<DeviceAllocator> alloc_;
  cudaStream_t stream_ = nullptr;
  // While recording (cuda_decode_ops.cpp): the recording being made; alloc() keeps its tensors in it.
  std::shared_ptr<CudaRecording> recording_;
  void keep_for_recording(const Tensor& t);
  // While recording a training step (begin_step_capture): alloc() takes its blocks from this pool, and uploads
  // and host reads throw.
  std::shared_ptr<DevicePool> step_pool_;
  bool step_refused_ = false;  // an op was refused while recording a step: end_capture returns null
  void check_not_recording_step(const char* what);
  cublasHandle_t cublas_ = nullptr;
  Tensor cublas_ws_;
  std::unique_ptr<Fp8BlockGemm> fp8_gemm_;  // made on the first FP8 product (shares cublas_ws_: one stream)
  Tensor scalars_;  // 16 bytes: one double accumulator + one int flag
  LayoutTables layout_tables_;  // after alloc_: its tensors go back to the allocator first
};

// Typed views for the kernel launchers; throw Error naming `what` for dtypes the kernels cannot take.
kernels::KIn kin(const Tensor& t, const char* what);
kernels::KOut kout(Tensor& t, const char* what);

}  // namespace deltatune::cuda
