// The fp32 reference backend: plain loops, cache-blocked multi-threaded gemm, one thread pool per
// backend object. Every tensor it allocates is F32 (or I32 for ids/indices); upload converts BF16/F16
// host tensors to F32. Op families live in separate files (gemm.cpp, norm.cpp, activation.cpp,
// attention.cpp, gdn.cpp, gdn_chunk.cpp, moe.cpp, loss.cpp); this header declares all of them.
#pragma once
#include <atomic>
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace deltatune {

// Live/peak byte counters shared with the deleters of allocated tensors (tensors may outlive the backend).
struct CpuMemoryCounters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads);

  Device device() const override { return Device::CPU; }
  std::string name() const override;
  DType compute_dtype() const override { return DType::F32; }
  DType weight_dtype() const override { return DType::F32; }
  ThreadPool& pool() { return pool_; }
  int num_threads() const { return pool_.size(); }

  // memory (cpu_backend.cpp)
  Tensor alloc(Shape shape, DType dtype) override;
  void fill(Tensor& t, float value) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor download(const Tensor& t, DType dtype) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void copy_cols(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t ncols) override;
  MemoryStats memory_stats() const override;

  // gemm.cpp
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
            float beta) override;

  // cpu_backend.cpp
  void add(Tensor& y, const Tensor& x, float alpha) override;
  void scale(Tensor& y, float alpha) override;
  double sum_squares(const Tensor& x) override;
  bool all_finite(const Tensor& x) override;
  void dropout(const Tensor& x, float p, uint64_t seed, Tensor& y) override;
  void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step) override;
  void sgd_step(Tensor& param, const Tensor& grad, float lr, float weight_decay) override;

  // norm.cpp
  void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                   Tensor& rstd) override;
  void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, bool zero_centred,
                   Tensor& dx) override;
  void gated_rmsnorm_fwd(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y,
                         Tensor& rstd) override;
  void gated_rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w, const Tensor& rstd,
                         Tensor& dx, Tensor& dz) override;
  void layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean,
                      Tensor& rstd) override;
  void layer_norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                      Tensor& dx) override;

  // activation.cpp
  void swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) override;
  void sigmoid_mul_fwd(const Tensor& x, const Tensor& gate, Tensor& out) override;
  void sigmoid_mul_bwd(const Tensor& dout, const Tensor& x, const Tensor& gate, Tensor& dx,
                       Tensor& dgate) override;
  void sigmoid(const Tensor& x, Tensor& y) override;
  void gelu_fwd(const Tensor& x, bool tanh_approx, Tensor& y) override;
  void gelu_bwd(const Tensor& dy, const Tensor& x, bool tanh_approx, Tensor& dx) override;

  // attention.cpp
  void rope(Tensor& x, const Tensor& positions, int rot_dim, float theta, bool inverse) override;
  void rope_multimodal(Tensor& x, const Tensor& positions, int rot_dim, float theta,
                       const std::array<int64_t, 3>& section, bool inverse) override;
  void rope_2d(Tensor& x, const Tensor& positions, float theta, bool inverse) override;
  void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq, float scale,
                     Tensor& o, Tensor& lse) override;
  void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                     const Tensor& lse, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                     Tensor& dv) override;

  // gdn.cpp (conv, gates) and gdn_chunk.cpp (core)
  void conv1d_silu_fwd(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& y) override;
  void conv1d_silu_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const SeqLayout& seq,
                       Tensor& dx) override;
  void gdn_gates_fwd(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, Tensor& g,
                     Tensor& beta) override;
  void gdn_gates_bwd(const Tensor& dg, const Tensor& dbeta, const Tensor& a, const Tensor& b, const Tensor& A_log,
                     const Tensor& dt_bias, Tensor& da, Tensor& db) override;
  void gdn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
               const SeqLayout& seq, float scale, Tensor& o) override;
  void gdn_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
               const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
               Tensor& dg, Tensor& dbeta) override;

  // decode.cpp (generation state ops)
  void conv1d_silu_step(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& conv_state,
                        Tensor& y) override;
  void gdn_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                     const SeqLayout& seq, float scale, Tensor& state, Tensor& o) override;
  void kv_cache_write(const Tensor& k, const Tensor& v, const SeqLayout& seq, Tensor& k_cache,
                      Tensor& v_cache) override;
  void attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const SeqLayout& seq,
                        float scale, Tensor& o) override;

  // moe.cpp
  void moe_router_fwd(const Tensor& logits, int k, Tensor& idx, Tensor& w) override;
  void moe_router_bwd(const Tensor& dw, const Tensor& idx, const Tensor& w, Tensor& dlogits) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) override;
  void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor& scale, Tensor& dst) override;
  void row_dot(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale_rows(const Tensor& x, const Tensor& s, Tensor& y) override;

  // moe_grouped.cpp
  void moe_dispatch(const Tensor& idx, int num_experts, Tensor& offsets, Tensor& row_token, Tensor& row_slot,
                    Tensor& slot_row, Tensor* load) override;
  void moe_combine(const Tensor& y, const Tensor& slot_row, const Tensor& w, Tensor& out) override;
  void grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, Tensor& y, float alpha,
                    float beta) override;
  void grouped_gemm_wgrad(const Tensor& a, const Tensor& b, const Tensor& offsets, Tensor& g, float alpha,
                          float beta) override;
  void permute3(const Tensor& src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2,
                Tensor& dst) override;

  // loss.cpp
  double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits) override;

 private:
  ThreadPool pool_;
  std::shared_ptr<CpuMemoryCounters> mem_;
};

}  // namespace deltatune
