// The one interface between the model code (engine/src/model) and a compute device. The CPU backend
// (backend/cpu) is the plain fp32 reference; the CUDA backend (backend/cuda) is the fast one. Both must
// give the same results within the per-op tolerances of tests/cuda/backend_ops.
//
// Conventions
// - Tensors are contiguous, row-major, on this backend's device (see alloc/upload).
// - "T" is the number of tokens of a packed batch (all rows flattened), sequences given by SeqLayout.
// - Outputs marked (=) are overwritten; (+=) are accumulated into (caller zeroes them first).
// - Weights may be F32 (CPU) or BF16 (CUDA); activations F32 (CPU) or BF16/F32 (CUDA). Every op accepts
//   the dtypes its backend allocates; statistics (rstd, lse, g) are always F32.
// - Backward functions produce gradients w.r.t. inputs only (base weights are frozen); LoRA weight
//   gradients come from gemm calls in the model code.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/gradient_reducer.h"
#include "backend/shard_gatherer.h"
#include "backend/token_exchange.h"
#include "core/tensor.h"
#include "deltatune/loss_logits.h"

namespace deltatune {

// Packed sequences: sequence n occupies tokens [cu_seqlens[n], cu_seqlens[n+1]).
struct SeqLayout {
  std::vector<int32_t> host_cu_seqlens;  // N+1 entries, host copy
  Tensor cu_seqlens;                     // I32 [N+1] on the device
  Tensor positions;                      // I32 [T] on the device: position within its sequence
  // I32 [3, T] on the device: multimodal RoPE positions (temporal, height, width) of a batch with images;
  // undefined otherwise (every row then equals `positions`).
  Tensor mrope_positions;
  int32_t max_seqlen = 0;
  // Attention sees keys j <= i of its sequence (text) or every key of its sequence (false: the vision
  // tower's full attention within each image frame).
  bool causal = true;
  int64_t tokens() const { return host_cu_seqlens.empty() ? 0 : host_cu_seqlens.back(); }
  int64_t num_seqs() const { return host_cu_seqlens.empty() ? 0 : int64_t(host_cu_seqlens.size()) - 1; }
};

struct MemoryStats {
  int64_t allocated_bytes = 0;  // live tensors
  int64_t reserved_bytes = 0;   // held by the caching allocator
  int64_t peak_allocated_bytes = 0;
  int64_t total_bytes = 0;      // device capacity (0 if unknown)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;   // "cpu", "cuda:0 (NVIDIA H100 ...)"
  // Activation dtype this backend computes in (F32 on CPU, BF16 on CUDA).
  virtual DType compute_dtype() const = 0;
  // Dtype frozen base weights are stored in on this backend.
  virtual DType weight_dtype() const = 0;

  // ---- memory --------------------------------------------------------------------------------
  virtual Tensor alloc(Shape shape, DType dtype) = 0;             // uninitialised
  Tensor zeros(Shape shape, DType dtype);                          // alloc + fill 0
  Tensor upload_i32(const std::vector<int32_t>& values);           // I32 [n] device tensor
  virtual void fill(Tensor& t, float value) = 0;
  // Device tensor with the content of a host tensor, converted to `dtype`.
  virtual Tensor upload(const Tensor& host, DType dtype) = 0;
  // Host tensor with the content of a device tensor, converted to `dtype`.
  virtual Tensor download(const Tensor& t, DType dtype) = 0;
  // dst (=) src, same numel, any float dtypes.
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // Strided column block copy between 2-D views: dst[r, dst_col + c] (=) src[r, src_col + c] for
  // c < ncols, r < rows. src is [rows, src_cols], dst is [rows, dst_cols] (last dim = cols).
  virtual void copy_cols(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t ncols) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void synchronize() {}

  // ---- linear algebra --------------------------------------------------------------------------
  // C[M,N] = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ, 2-D row-major (leading dims of A, B, C
  // flattened into rows). beta == 0 ignores C's old content (even NaN).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                    float beta) = 0;
  // A column block of a 2-D row-major tensor: columns [col, col + ncols) of t, rows t.rows(), row stride
  // t.cols(); ncols < 0 means every column from col on.
  struct Cols {
    Tensor t;
    int64_t col = 0, ncols = -1;
    Cols(Tensor whole) : t(std::move(whole)) {}  // NOLINT: a whole tensor is its own column block
    Cols(Tensor whole, int64_t first, int64_t n) : t(std::move(whole)), col(first), ncols(n) {}
    int64_t width() const { return ncols < 0 ? t.cols() - col : ncols; }
  };
  // gemm on column blocks (the LoRA products of modules that share an input read and write their own columns
  // of one [T, Σr] tensor). The default copies the blocks through contiguous tensors (copy_cols).
  virtual void gemm_cols(const Cols& a, bool trans_a, const Cols& b, bool trans_b, const Cols& c, float alpha,
                         float beta);
  // The two products of a LoRA backward that read the module's output gradient dy [T, N]: du (=) alpha·dy·B and
  // gB (+=) alpha·dyᵀ·u (B [N, r], u and du [T, r] column blocks, gB F32 [N, r]). The default runs them as two
  // gemm_cols; backends may read dy once.
  virtual void lora_dy_products(const Tensor& dy, const Tensor& B, const Cols& u, float alpha, const Cols& du,
                                Tensor& gB);
  // The rank-r term of a LoRA forward: y (=) alpha·u·Bᵀ, plus residual when given (u [T, r] column block, B [N, r],
  // y and residual [T, N]; residual may be y itself). The default runs copy + gemm_cols.
  virtual void lora_up(const Cols& u, const Tensor& B, float alpha, const Tensor* residual, Tensor& y);
  // SwiGLU on the gate/up base products with their LoRA rank-r terms added on the way (the MLP forward):
  // h (=) silu(g + ag·ug·Bgᵀ) ⊙ (u + au·uu·Buᵀ). g, u, h [T, N]; ug, uu [T, r] column blocks; Bg, Bu [N, r].
  // With keep_sums g and u are left holding the two sums (what swiglu_bwd reads); without, either the sums or the
  // base products. Returns whether they hold the sums (else a backward passes the terms to lora_swiglu_bwd). The
  // default runs lora_up (in place) twice and swiglu_fwd (true); backends may read g and u once.
  virtual bool lora_swiglu_fwd(const Cols& ug, const Tensor& Bg, float ag, const Cols& uu, const Tensor& Bu, float au,
                               Tensor& g, Tensor& u, Tensor& h, bool keep_sums);
  // The gate/up rank-r terms of lora_swiglu_fwd's operands, for a backward whose g and u hold the base products.
  struct GateUpTerms {
    Cols ug, uu;
    Tensor Bg, Bu;
    float ag = 1.f, au = 1.f;
  };
  // swiglu_bwd with the down projection's LoRA rank-r term of dout added on the way (the MLP backward): dh' = dh +
  // dr·A, then dg (=) dh'·u·silu'(g), du (=) dh'·silu(g). dh, g, u, dg, du [T, N]; dr [T, r] (or undefined: no
  // term); A [r, N]. With terms, g and u are the base products and the sums g + ag·ug·Bgᵀ, u + au·uu·Buᵀ (rounded
  // as lora_swiglu_fwd rounds them) stand for g and u. dh may be left holding dh'. The default runs a gemm (+=) into
  // dh, lora_up into temporaries for the terms, and swiglu_bwd; backends may skip writing dh'.
  virtual void lora_swiglu_bwd(Tensor& dh, const Tensor& dr, const Tensor& A, const Tensor& g, const Tensor& u,
                               Tensor& dg, Tensor& du, const GateUpTerms* terms);

  // ---- elementwise -----------------------------------------------------------------------------
  virtual void add(Tensor& y, const Tensor& x, float alpha) = 0;  // y += alpha * x
  virtual void scale(Tensor& y, float alpha) = 0;                 // y *= alpha
  virtual double sum_squares(const Tensor& x) = 0;                // Σ x² in fp64/fp32 accumulation
  virtual bool all_finite(const Tensor& x) = 0;
  // copy() on every pair (dst[i] (=) src[i] in dst's type): device backends convert many tensors per launch.
  struct CopyPair {
    Tensor* dst;
    const Tensor* src;
  };
  virtual void copy_many(const std::vector<CopyPair>& pairs);
  // Σ x² over all tensors / whether every element of every tensor is finite: one host round trip on
  // device backends (the per-tensor forms above synchronise once per call).
  virtual double sum_squares_many(const std::vector<const Tensor*>& xs);
  virtual bool all_finite_many(const std::vector<const Tensor*>& xs);
  // Inverted dropout with a counter-based RNG, identical on every backend:
  // keep(i) = hash(seed, i) >= p; y = keep ? x / (1-p) : 0. Backward: same call on dy.
  virtual void dropout(const Tensor& x, float p, uint64_t seed, Tensor& y) = 0;

  // ---- embedding -------------------------------------------------------------------------------
  // out[t] (=) table[ids[t]]; ids I32 [T], table [V, H], out [T, H].
  virtual void embedding_fwd(const Tensor& ids, const Tensor& table, Tensor& out) = 0;

  // ---- norms -----------------------------------------------------------------------------------
  // Per row of length n = w.numel(): rstd = 1/sqrt(mean(x²) + eps); y (=) x·rstd·(1+w) if zero_centred
  // else x·rstd·w. rstd F32 [rows] (=).
  virtual void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                           Tensor& rstd) = 0;
  // dx (=) gradient w.r.t. x.
  virtual void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                           bool zero_centred, Tensor& dx) = 0;
  // dx (=) rmsnorm_bwd(dy, ...) + residual (the gradient arriving along the residual stream), rounded as the two
  // ops in turn; backends may fuse them. dx must not alias residual or dy.
  virtual void rmsnorm_bwd_add(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                               bool zero_centred, const Tensor& residual, Tensor& dx);
  // rmsnorm_fwd / rmsnorm_bwd with x (and dx) a column block of wider rows (Cols, width w.numel()): the
  // attention block's q read, and its gradient written, in place in q_proj's [q | gate] rows. y, dy, rstd
  // contiguous. The defaults go through contiguous copies (copy_cols).
  virtual void rmsnorm_fwd_cols(const Cols& x, const Tensor& w, float eps, bool zero_centred, Tensor& y,
                                Tensor& rstd);
  virtual void rmsnorm_bwd_cols(const Tensor& dy, const Cols& x, const Tensor& w, const Tensor& rstd,
                                bool zero_centred, const Cols& dx);
  // GDN output norm, rows of dv = w.numel(): y (=) (x·rstd·w) ⊙ silu(z); rstd F32 [rows] (=).
  virtual void gated_rmsnorm_fwd(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y,
                                 Tensor& rstd) = 0;
  virtual void gated_rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& w,
                                 const Tensor& rstd, Tensor& dx, Tensor& dz) = 0;  // (=)

  // LayerNorm per row of n = w.numel() (the vision tower): mean, rstd = 1/sqrt(var + eps) F32 [rows] (=);
  // y (=) (x − mean)·rstd·w + b. Backward: dx (=) gradient w.r.t. x (w, b frozen).
  virtual void layer_norm_fwd(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean,
                              Tensor& rstd) = 0;
  virtual void layer_norm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, Tensor& dx) = 0;

  // ---- activations -----------------------------------------------------------------------------
  // y (=) gelu(x): tanh approximation (gelu_pytorch_tanh) when tanh_approx, else the exact erf form.
  virtual void gelu_fwd(const Tensor& x, bool tanh_approx, Tensor& y) = 0;
  virtual void gelu_bwd(const Tensor& dy, const Tensor& x, bool tanh_approx, Tensor& dx) = 0;  // (=)
  // out (=) silu(gate) ⊙ up; all same shape.
  virtual void swiglu_fwd(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                          Tensor& dup) = 0;  // (=)
  // out (=) x ⊙ σ(gate); same shape.
  virtual void sigmoid_mul_fwd(const Tensor& x, const Tensor& gate, Tensor& out) = 0;
  virtual void sigmoid_mul_bwd(const Tensor& dout, const Tensor& x, const Tensor& gate, Tensor& dx,
                               Tensor& dgate) = 0;  // (=)
  // The same with gate (and dgate) a column block of wider rows (the attention output gate in q_proj's [q |
  // gate] rows); x, out, dout, dx contiguous with gate.t.rows() x gate.width() elements. The defaults copy
  // (copy_cols).
  virtual void sigmoid_mul_fwd_cols(const Tensor& x, const Cols& gate, Tensor& out);
  virtual void sigmoid_mul_bwd_cols(const Tensor& dout, const Tensor& x, const Cols& gate, Tensor& dx,
                                    const Cols& dgate);  // (=)

  // ---- full attention --------------------------------------------------------------------------
  // In place on x [T, heads, head_dim]: NeoX rotate-half on the first rot_dim dims of each head with
  // angle positions[t]·theta^(-2i/rot_dim); inverse=true rotates by the negative angle (= backward).
  virtual void rope(Tensor& x, const Tensor& positions, int rot_dim, float theta, bool inverse) = 0;
  // Multimodal RoPE of Qwen3.5 (interleaved sections, transformers' Qwen3_5TextRotaryEmbedding): as rope, but
  // frequency slot i < rot_dim/2 takes its position from row r(i) of positions I32 [3, T] (temporal, height,
  // width): r = 1 when i % 3 == 1 and i < 3·section[1], r = 2 when i % 3 == 2 and i < 3·section[2], else 0.
  // Three equal rows give rope's result.
  virtual void rope_multimodal(Tensor& x, const Tensor& positions, int rot_dim, float theta,
                               const std::array<int64_t, 3>& section, bool inverse) = 0;
  // 2-D rotary of the vision tower (transformers' Qwen3_5VisionRotaryEmbedding + apply_rotary_pos_emb_vision), in
  // place on x [T, heads, hd], NeoX rotate-half over the whole head: with q = hd/4 frequencies
  // f_j = theta^(−2j/(hd/2)), slot i < hd/2 turns by positions[0, t]·f_i (row) for i < q and by
  // positions[1, t]·f_(i−q) (column) otherwise; positions I32 [2, T]. inverse = the negative angle (= backward).
  virtual void rope_2d(Tensor& x, const Tensor& positions, float theta, bool inverse) = 0;
  // Causal (seq.causal; else full) attention within each sequence of `seq`; q [T, nH, hd], k/v [T, nKV, hd],
  // query head h uses
  // kv head h / (nH/nKV). o (=) [T, nH, hd]; lse (=) F32 [T, nH] (log-sum-exp of the scaled scores).
  virtual void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq,
                             float scale, Tensor& o, Tensor& lse) = 0;
  virtual void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& o, const Tensor& lse, const SeqLayout& seq, float scale,
                             Tensor& dq, Tensor& dk, Tensor& dv) = 0;  // (=)

  // ---- Gated DeltaNet --------------------------------------------------------------------------
  // Depthwise causal conv + SiLU per sequence (zero history at each sequence start):
  // y[t,c] (=) silu(Σ_j w[c,j]·x[t-(K-1)+j, c]); x, y [T, C]; w [C, K].
  virtual void conv1d_silu_fwd(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& y) = 0;
  virtual void conv1d_silu_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const SeqLayout& seq,
                               Tensor& dx) = 0;  // (=)
  // The same conv with y (dy) held as contiguous column blocks side by side, ys[i] [T, C_i], ΣC_i = C (at
  // most 4): the GDN layer's q | k | v come out as their own tensors and their gradients go in as they are,
  // with no copies. The defaults go through one [T, C] tensor and copy_cols.
  virtual void conv1d_silu_fwd_split(const Tensor& x, const Tensor& w, const SeqLayout& seq,
                                     std::span<Tensor* const> ys);
  virtual void conv1d_silu_bwd_split(std::span<const Tensor* const> dys, const Tensor& x, const Tensor& w,
                                     const SeqLayout& seq, Tensor& dx);  // (=)
  static constexpr int kMaxColumnParts = 4;
  // Refuses, naming `op`, parts that are not 1 to kMaxColumnParts [T, C_i] tensors (C_i > 0) covering C columns.
  static void check_column_parts(const char* op, int64_t T, int64_t C, std::span<const Tensor* const> parts);
  // beta (=) σ(b); g (=) -exp(A_log)·softplus(a + dt_bias) (F32). a, b [T, HV]; A_log, dt_bias [HV].
  virtual void gdn_gates_fwd(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                             Tensor& g, Tensor& beta) = 0;
  virtual void gdn_gates_bwd(const Tensor& dg, const Tensor& dbeta, const Tensor& a, const Tensor& b,
                             const Tensor& A_log, const Tensor& dt_bias, Tensor& da, Tensor& db) = 0;  // (=)
  // Gated delta rule (spec §3.4 steps 6-8) per sequence from a zero state: q, k [T, HK, dk] (before L2
  // norm; normalised inside with eps 1e-6), v [T, HV, dv], g F32 [T, HV], beta [T, HV];
  // value head j uses key head j / (HV/HK). o (=) [T, HV, dv]. `scale` multiplies q̂.
  virtual void gdn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                       const SeqLayout& seq, float scale, Tensor& o) = 0;
  virtual void gdn_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                       const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk,
                       Tensor& dv, Tensor& dg, Tensor& dbeta) = 0;  // (=)
  // The same pair, with what the forward computed kept for the backward that follows it (same inputs, the
  // inputs unchanged in between) so the backward need not recompute the forward's chunk quantities.
  // `saved` is consumed by one gdn_bwd_saved. Backends that keep nothing return null and recompute.
  // GdnKeep::All keeps everything the backward would recompute (fastest backward: for a backward that follows
  // at once, as after a checkpointed layer's recompute); GdnKeep::States only the chunk-start states and each
  // chunk's 64 x 64 solve T, so the backward recomputes the chunk-parallel parts but not the serial scan nor
  // the solve (for activations that live through the rest of the forward: ~1/2 of All's memory at
  // dk = dv = 128).
  struct GdnSaved {
    virtual ~GdnSaved() = default;
  };
  enum class GdnKeep { All, States };
  virtual std::shared_ptr<GdnSaved> gdn_fwd_keep(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                                 const Tensor& beta, const SeqLayout& seq, float scale, Tensor& o,
                                                 GdnKeep what) {
    (void)what;
    gdn_fwd(q, k, v, g, beta, seq, scale, o);
    return nullptr;
  }
  virtual void gdn_bwd_saved(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& g, const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq,
                             Tensor& dk, Tensor& dv, Tensor& dg, Tensor& dbeta) {
    (void)saved;
    gdn_bwd(dout, q, k, v, g, beta, seq, scale, dq, dk, dv, dg, dbeta);
  }
  // The gated delta rule fed the gate inputs in place of g and β: gdn_gates_fwd, then gdn_fwd (keep: none) or
  // gdn_fwd_keep, and gdn_bwd_saved, then gdn_gates_bwd, as one op each way, so that a backend may form the
  // gates inside the core (the CUDA tensor-core path does, while loading them: no g/β tensors, no gate
  // kernels). a, b [T, HV]; A_log, dt_bias [HV]. The backward returns da, db (=) [T, HV]. The defaults
  // compose the separate ops.
  struct GdnGateInputs {
    const Tensor& a;
    const Tensor& b;
    const Tensor& A_log;
    const Tensor& dt_bias;
  };
  virtual std::shared_ptr<GdnSaved> gdn_gated_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const GdnGateInputs& gates, const SeqLayout& seq,
                                                  float scale, Tensor& o, std::optional<GdnKeep> keep);
  virtual void gdn_gated_bwd(GdnSaved* saved, const Tensor& dout, const Tensor& q, const Tensor& k,
                             const Tensor& v, const GdnGateInputs& gates, const SeqLayout& seq, float scale,
                             Tensor& dq, Tensor& dk, Tensor& dv, Tensor& da, Tensor& db);

  // ---- generation: prefill and decode with per-sequence state kept between calls ---------------------
  // Sequence n of `seq` continues row n of every state tensor; seq.positions[t] is token t's absolute position
  // in its sequence (the tokens already in the state come before it). Backends without these ops throw.
  // Causal depthwise conv + SiLU that reads its history from conv_state [N, K-1, C] (the last K-1 inputs of
  // sequence n, zeros before its start) and leaves the last K-1 inputs there (history included when a
  // sequence has fewer than K-1 new tokens). x, y (=) [T, C]; w [C, K].
  virtual void conv1d_silu_step(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& conv_state,
                                Tensor& y);
  // Gated delta rule continuing from state (F32 [N, HV, dk, dv]: S_n before the sequence's first new token; left
  // as after its last). Same q, k, v, g, beta, scale contract as gdn_fwd (which is this op from a zero state).
  virtual void gdn_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const SeqLayout& seq, float scale, Tensor& state, Tensor& o);
  // The prompt's pass: gdn_fwd (from a zero state; o (=) [T, HV, dv]) that also leaves each sequence's final
  // state in `state` (F32 [N, HV, dk, dv], overwritten), for gdn_recurrent to continue. The default runs
  // gdn_recurrent from a zero state; the CUDA backend runs the chunked forward and continues the last chunk's
  // start state over that chunk's tokens (at most 64 per sequence).
  virtual void gdn_prefill(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                           const SeqLayout& seq, float scale, Tensor& state, Tensor& o);
  // KV cache k_cache, v_cache [N, L, nKV, hd]: cache[n, positions[t]] (=) k[t], v[t] for token t of sequence n
  // (k, v [T, nKV, hd]; positions < L).
  virtual void kv_cache_write(const Tensor& k, const Tensor& v, const SeqLayout& seq, Tensor& k_cache,
                              Tensor& v_cache);
  // o[t] (=) softmax(scale·q[t]·K_nᵀ)·V_n over the cache rows 0..positions[t] (inclusive) of t's sequence n;
  // q, o [T, nH, hd]; query head h reads kv head h / (nH/nKV).
  virtual void attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const SeqLayout& seq,
                                float scale, Tensor& o);

  // Recorded replays (the decode step): ops issued between begin_capture() and end_capture() are recorded, not
  // run; replay() runs them again on the same tensors (inputs rewritten in place, e.g. with write_i32, outputs
  // read after). Every tensor the backend allocates while recording stays allocated until the recording is
  // dropped. Backends that cannot record return false from begin_capture (the caller runs the ops itself);
  // end_capture returns null when the recording failed (an op that cannot be recorded), and must be called once
  // begin_capture returned true, also when an op threw.
  struct Recording {
    virtual ~Recording() = default;
  };
  virtual bool begin_capture() { return false; }
  // A training step's recording: as begin_capture, but the tensors allocated while recording come from a pool
  // the recording owns and go back to it when dropped (reused in stream order as in an op-by-op run, so the
  // memory is one run's, not the sum of every allocation). Host uploads and reads are refused while recording
  // (end_capture then returns null): inputs are written into tensors made before, results read after replay.
  virtual bool begin_step_capture() { return false; }
  virtual std::unique_ptr<Recording> end_capture() { return nullptr; }
  virtual void replay(Recording& r);
  // dst (=) values; dst an I32 tensor of values.size() elements on this backend.
  virtual void write_i32(Tensor& dst, const std::vector<int32_t>& values);
  // dst (=) values; dst an F32 tensor of values.size() elements on this backend.
  virtual void write_f32(Tensor& dst, const std::vector<float>& values);

  // ---- MoE -------------------------------------------------------------------------------------
  // logits [T, E] -> softmax (fp32) -> top-k -> renormalised weights. idx I32 [T, k] (=), w F32 [T, k] (=).
  // Ties pick the lower expert index (as torch.topk on CPU).
  virtual void moe_router_fwd(const Tensor& logits, int k, Tensor& idx, Tensor& w) = 0;
  // dlogits (=) [T, E] from dw F32 [T, k] (softmax restricted to the selected logits).
  virtual void moe_router_bwd(const Tensor& dw, const Tensor& idx, const Tensor& w, Tensor& dlogits) = 0;
  // dst[i] (=) src[rows[i]]; rows I32 [n] (device); src [T, H]; dst [n, H].
  virtual void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) = 0;
  // dst[rows[i]] (+=) scale[i]·src[i] (scale F32 [n], may be undefined = 1).
  virtual void scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor& scale, Tensor& dst) = 0;
  // out[i] (=) Σ_c a[i,c]·b[i,c] (F32 [rows]); used for the gradient of per-row scales.
  virtual void row_dot(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // y[i, :] (=) x[i, :]·s[i] (s F32 [rows]).
  virtual void scale_rows(const Tensor& x, const Tensor& s, Tensor& y) = 0;
  virtual void sigmoid(const Tensor& x, Tensor& y) = 0;  // (=)

  // ---- MoE: device-side dispatch and grouped expert GEMMs (no host sync on expert counts) ----------
  // Sorts the T·K routing slots s = t·K + j (idx I32 [T, K], values in [0, E)) by (expert, s), stably:
  //   offsets   I32 [E+1] (=): exclusive scan of the per-expert counts (offsets[E] = T·K)
  //   row_token I32 [T·K] (=): token of each permuted row;  row_slot I32 [T·K] (=): its slot s
  //   slot_row  I32 [T·K] (=): inverse permutation, permuted row of each slot
  // load (may be null): F32 [E] (+=) tokens routed to each expert (router statistics).
  virtual void moe_dispatch(const Tensor& idx, int num_experts, Tensor& offsets, Tensor& row_token,
                            Tensor& row_slot, Tensor& slot_row, Tensor* load) = 0;
  // out[t] (=) Σ_{j<K} w[t, j]·y[slot_row[t·K + j]], j in increasing order (deterministic, no atomics).
  // y [T·K, H] in permuted order; w F32 [T, K] (undefined = all ones); out [T, H].
  virtual void moe_combine(const Tensor& y, const Tensor& slot_row, const Tensor& w, Tensor& out) = 0;
  // Grouped GEMM over experts with device-side row ranges: for each expert e and rows
  // r in [offsets[e], offsets[e+1]) of x [M, K]:
  //   y[r] (=) alpha·x[r]·W_eᵀ + beta·y[r]   (trans_w: w is [E, N, K])
  //   y[r] (=) alpha·x[r]·W_e  + beta·y[r]   (!trans_w: w is [E, K, N])
  // y [M, N]. offsets I32 [E+1] on the device, offsets[0] = 0, offsets[E] <= M; rows past offsets[E]
  // are not written. beta == 0 ignores y's old content. CUDA, as gemm: F32·F32 in fp32; otherwise tensor cores
  // with bf16 operands (an F32 operand rounded to bf16 first) and fp32 accumulation.
  virtual void grouped_gemm(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets, Tensor& y,
                            float alpha, float beta) = 0;
  // grouped_gemm with the expert LoRA up-projection added before beta·y (backends may fuse it into one rounding):
  //   y[r] (=) alpha·x[r]·op(W_e) + lscale·u[r]·op(L_e) + beta·y[r], op as for W (trans_w: L [E, N, r], else
  //   L [E, r, N]); u [M, r]. The default runs grouped_gemm twice (the LoRA product F32·F32 in fp32 on CUDA).
  virtual void grouped_gemm_lora(const Tensor& x, const Tensor& w, bool trans_w, const Tensor& offsets,
                                 const Tensor& u, const Tensor& l, float lscale, Tensor& y, float alpha, float beta);
  // The forward of an expert LoRA linear: u (=) x·A_eᵀ (F32 [M, r], a [E, r, K]) and y (=) x·W_eᵀ + lscale·u·L_eᵀ
  // (w [E, N, K], l [E, N, r]). The default runs grouped_gemm and grouped_gemm_lora; backends may form u in the
  // expert GEMM itself (one read of x).
  virtual void grouped_lora_linear_fwd(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& offsets,
                                       const Tensor& l, float lscale, Tensor& u, Tensor& y);
  // SwiGLU of rows packed as [gate | up] (the experts' gate_up output): gu [n, 2I]; h (=) silu(gate)·up [n, I];
  // backward dgu (=) [dgate | dup] [n, 2I]. Same values as swiglu_fwd / swiglu_bwd on the split halves (the
  // defaults split them with copy_cols).
  virtual void swiglu_packed_fwd(const Tensor& gu, Tensor& h);
  virtual void swiglu_packed_bwd(const Tensor& dh, const Tensor& gu, Tensor& dgu);
  // Weight-gradient form: G_e (=) alpha·Σ_{r in expert e's rows} a[r]ᵀ·b[r] + beta·G_e for every expert
  // (experts without rows get beta·G_e). a [M, N], b [M, K], g [E, N, K], offsets as above.
  virtual void grouped_gemm_wgrad(const Tensor& a, const Tensor& b, const Tensor& offsets, Tensor& g, float alpha,
                                  float beta) = 0;
  // 3-D permutation (torch.permute): src viewed as [d0, d1, d2]; dst (=) its axes reordered so that dst
  // axis i is src axis p_i (dst shape [d_p0, d_p1, d_p2]); any float dtypes. Expert LoRA B [out, r·E]
  // -> per-expert [E, out, r] is (d0, d1, d2) = (out, r, E), p = (2, 0, 1); the way back is p = (1, 2, 0).
  virtual void permute3(const Tensor& src, int64_t d0, int64_t d1, int64_t d2, int p0, int p1, int p2,
                        Tensor& dst) = 0;

  // ---- loss ------------------------------------------------------------------------------------
  // Cross-entropy over rows of logits [T, V] (computed in fp32) against labels I32 [T] (targets already
  // shifted; -100 = ignored). Returns Σ CE over non-ignored rows. If dlogits is given (may alias
  // logits): dlogits (=) grad_scale·(softmax - onehot) for non-ignored rows, 0 for ignored ones.
  virtual double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale,
                               Tensor* dlogits) = 0;
  // Same loss from hidden states h [T, H] and head weight W [V, H] without materialising [T, V] logits
  // at once (chunks of `chunk_rows` tokens). dh (=) gradient w.r.t. h if given. logits: the precision the
  // chunks' logits are formed in (LossLogits::BF16: the GEMM writes bf16 logits, as HF and Liger; the
  // cross-entropy's math stays fp32); a backend may form them in fp32 whatever it says (the CPU, the fp32
  // reference; a weight that is not bf16). The base version chunks gemm + cross_entropy in the compute dtype;
  // backends may fuse.
  virtual double linear_cross_entropy(const Tensor& h, const Tensor& w, const Tensor& labels, float grad_scale,
                                      Tensor* dh, int64_t chunk_rows, LossLogits logits);
  // The same with the loss left on the device (nothing read back, so it may be recorded): loss_sum (=) Σ CE
  // as one double in an 8-byte tensor (U8 [8]); the gradient scale is read from grad_scale (F32 [1] on this
  // backend) when the ops run, so a recorded step replays with each step's 1/targets. The base version reads
  // it, runs linear_cross_entropy and uploads the loss.
  virtual void linear_cross_entropy_into(const Tensor& h, const Tensor& w, const Tensor& labels,
                                         const Tensor& grad_scale, Tensor* dh, int64_t chunk_rows, LossLogits logits,
                                         Tensor& loss_sum);

  // ---- optimizers (fp32 params/moments) ---------------------------------------------------------
  // AdamW (decoupled weight decay, torch semantics, bias-corrected with `step` starting at 1).
  virtual void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int64_t step) = 0;
  // SGD: param -= lr·(grad + weight_decay·param).
  virtual void sgd_step(Tensor& param, const Tensor& grad, float lr, float weight_decay) = 0;
  // adamw_step on every slot with each gradient read as grad_scale·grad (gradient clipping; the gradient
  // tensors are not modified). Device backends update many tensors per launch.
  struct AdamWSlot {
    Tensor* param;
    const Tensor* grad;
    Tensor* m;
    Tensor* v;
  };
  virtual void adamw_step_many(const std::vector<AdamWSlot>& slots, float lr, float beta1, float beta2, float eps,
                               float weight_decay, int64_t step, float grad_scale);

  // ---- data parallel -----------------------------------------------------------------------------
  // This device's reducer for a data-parallel job (NCCL on CUDA), or null when the backend has none (the CPU
  // backend: the job sums through its host connections).
  virtual std::unique_ptr<GradientReducer> create_gradient_reducer(const ReducerSetup& setup) { return nullptr; }
  // This device's all-gather of frozen-weight shards (NCCL on CUDA; a communicator of its own), or null when
  // the backend has none (the CPU backend: the job gathers through its host connections).
  virtual std::unique_ptr<ShardGatherer> create_shard_gatherer(const ReducerSetup& setup) { return nullptr; }
  // This device's token exchange for expert parallel (NCCL send/recv on CUDA), or null when the backend has none.
  virtual std::unique_ptr<TokenExchange> create_token_exchange(const ReducerSetup& setup) { return nullptr; }
};

// The reference backend (always available).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);
// The CUDA backend, defined in the GPU module (backend/cuda, loaded at run time; see cuda_module.h): code
// outside it reaches it through backend_create(). Throws Error if no device is usable. `compute` is the
// activation and frozen-weight dtype: BF16 for training; F32 runs every op in fp32 (a diagnostic that
// separates formula errors from bf16 rounding in tests).
std::unique_ptr<Backend> make_cuda_backend(int device_index = 0, DType compute = DType::BF16);
bool cuda_backend_available();

// Counter-based hash used by dropout on every backend: uniform in [0, 1).
inline float dropout_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace deltatune
