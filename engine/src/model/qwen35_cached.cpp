// Qwen35Model's generation forward (spec §3.9): the decoder of qwen35_model.cpp with the mixers reading and
// updating an InferenceCache (conv history and delta-rule state per linear attention layer, KV cache per full
// attention layer), so a prompt is prefilled once and every new token costs one token's forward.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/blocks.h"
#include "model/qwen35_model.h"

namespace deltatune {

struct Qwen35Model::DeviceLayer : DeviceLayerWeights {};

namespace {

Tensor attention_cached_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                            InferenceCache::Layer& st, bool from_empty) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), nH = cfg.num_heads, nKV = cfg.num_kv_heads, hd = cfg.head_dim;
  const DType dt = be.compute_dtype();
  const float eps = static_cast<float>(cfg.rms_eps), scale = 1.f / std::sqrt(static_cast<float>(hd));
  LinearCache lc;

  Tensor qg = be.alloc({T, nH * 2 * hd}, dt);
  linear_fwd(be, x, w.q_proj, l.q, c.rt, c.salt(0), qg, lc);
  Tensor qg2 = qg.view({T * nH, 2 * hd});
  Tensor q = be.alloc({T * nH, hd}, dt), gate = be.alloc({T * nH, hd}, dt);
  be.copy_cols(q, 0, qg2, 0, hd);
  be.copy_cols(gate, 0, qg2, hd, hd);
  Tensor k = be.alloc({T, nKV * hd}, dt), v = be.alloc({T, nKV * hd}, dt);
  linear_fwd(be, x, w.k_proj, l.k, c.rt, c.salt(1), k, lc);
  linear_fwd(be, x, w.v_proj, l.v, c.rt, c.salt(2), v, lc);

  Tensor qn = be.alloc({T * nH, hd}, dt), rq = be.alloc({T * nH}, DType::F32);
  be.rmsnorm_fwd(q, w.q_norm, eps, true, qn, rq);
  Tensor kn = be.alloc({T * nKV, hd}, dt), rk = be.alloc({T * nKV}, DType::F32);
  be.rmsnorm_fwd(k.view({T * nKV, hd}), w.k_norm, eps, true, kn, rk);
  qn = qn.view({T, nH, hd});
  kn = kn.view({T, nKV, hd});
  be.rope(qn, c.seq.positions, cfg.rotary_dim(), static_cast<float>(cfg.rope_theta), false);
  be.rope(kn, c.seq.positions, cfg.rotary_dim(), static_cast<float>(cfg.rope_theta), false);
  const Tensor v3 = v.view({T, nKV, hd});
  be.kv_cache_write(kn, v3, c.seq, st.k, st.v);

  Tensor o = be.alloc({T, nH, hd}, dt);
  if (from_empty) {  // the prompt attends to itself only: the training kernels (flash attention on CUDA)
    Tensor lse = be.alloc({T, nH}, DType::F32);
    be.attention_fwd(qn, kn, v3, c.seq, scale, o, lse);
  } else {
    be.attention_cached(qn, st.k, st.v, c.seq, scale, o);
  }
  Tensor og = be.alloc({T, nH * hd}, dt);
  be.sigmoid_mul_fwd(o.view({T, nH * hd}), gate.view({T, nH * hd}), og);
  Tensor out = be.alloc({T, cfg.hidden_size}, dt);
  linear_fwd(be, og, w.o_proj, l.o, c.rt, c.salt(3), out, lc);
  return out;
}

// from_empty: the prompt's pass (every sequence starts at position 0): the training kernels (tiled conv, chunked
// delta rule) with the conv history and the delta-rule state left for the decode steps.
Tensor gdn_cached_fwd(const BlockContext& c, const DeviceLayerWeights& w, const LayerLora& l, const Tensor& x,
                      InferenceCache::Layer& st, bool from_empty) {
  Backend& be = c.be;
  const auto& cfg = c.cfg;
  const int64_t T = x.rows(), HK = cfg.lin_k_heads, HV = cfg.lin_v_heads, dk = cfg.lin_k_dim,
                dv = cfg.lin_v_dim, kd = cfg.key_dim(), vd = cfg.value_dim(), C = cfg.conv_dim();
  const DType dt = be.compute_dtype();
  LinearCache lc;

  Tensor p = be.alloc({T, C}, dt), z = be.alloc({T, vd}, dt), bl = be.alloc({T, HV}, dt), al = be.alloc({T, HV}, dt);
  linear_fwd(be, x, w.in_qkv, l.qkv, c.rt, c.salt(4), p, lc);
  linear_fwd(be, x, w.in_z, l.z, c.rt, c.salt(5), z, lc);
  linear_fwd(be, x, w.in_b, l.b, c.rt, c.salt(6), bl, lc);
  linear_fwd(be, x, w.in_a, l.a, c.rt, c.salt(7), al, lc);

  Tensor y = be.alloc({T, C}, dt);
  const int64_t K = w.conv.cols(), N = c.seq.num_seqs();
  const auto& cu = c.seq.host_cu_seqlens;
  bool history_in_prompt = from_empty;  // every prompt holds the K-1 inputs its conv history keeps
  for (int64_t n = 0; n < N && history_in_prompt; ++n) history_in_prompt = cu[n + 1] - cu[n] >= K - 1;
  if (history_in_prompt) {
    be.conv1d_silu_fwd(p, w.conv, c.seq, y);
    if (K > 1) {
      std::vector<int32_t> rows;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = K - 1; j >= 1; --j) rows.push_back(cu[n + 1] - static_cast<int32_t>(j));
      Tensor hist = st.conv.view({N * (K - 1), C});
      be.gather_rows(p, be.upload_i32(rows), hist);
    }
  } else {
    be.conv1d_silu_step(p, w.conv, c.seq, st.conv, y);
  }
  Tensor q = be.alloc({T, kd}, dt), k = be.alloc({T, kd}, dt), v = be.alloc({T, vd}, dt);
  be.copy_cols(q, 0, y, 0, kd);
  be.copy_cols(k, 0, y, kd, kd);
  be.copy_cols(v, 0, y, 2 * kd, vd);

  Tensor g = be.alloc({T, HV}, DType::F32), beta = be.alloc({T, HV}, DType::F32);
  be.gdn_gates_fwd(al, bl, w.A_log, w.dt_bias, g, beta);
  Tensor o = be.alloc({T, HV, dv}, dt);
  const float scale = 1.f / std::sqrt(static_cast<float>(dk));
  if (from_empty)
    be.gdn_prefill(q.view({T, HK, dk}), k.view({T, HK, dk}), v.view({T, HV, dv}), g, beta, c.seq, scale,
                   st.recurrent, o);
  else
    be.gdn_recurrent(q.view({T, HK, dk}), k.view({T, HK, dk}), v.view({T, HV, dv}), g, beta, c.seq, scale,
                     st.recurrent, o);

  Tensor yn = be.alloc({T * HV, dv}, dt), rstd = be.alloc({T * HV}, DType::F32);
  be.gated_rmsnorm_fwd(o.view({T * HV, dv}), z.view({T * HV, dv}), w.lin_norm, static_cast<float>(cfg.rms_eps), yn,
                       rstd);
  Tensor out = be.alloc({T, cfg.hidden_size}, dt);
  linear_fwd(be, yn.view({T, vd}), w.out_proj, l.out, c.rt, c.salt(8), out, lc);
  return out;
}

}  // namespace

InferenceCache Qwen35Model::new_inference_cache(int64_t batch, int64_t capacity) {
  check(batch > 0 && capacity > 0, "internal: inference cache of " + std::to_string(batch) + " x " +
                                       std::to_string(capacity));
  InferenceCache c;
  c.batch = batch;
  c.capacity = capacity;
  const DType dt = be_.compute_dtype();
  for (size_t i = 0; i < layer_count(); ++i) {
    InferenceCache::Layer st;
    if (layer_kind(i) == LayerKind::FullAttention) {
      st.k = be_.zeros({batch, capacity, cfg_.num_kv_heads, cfg_.head_dim}, dt);
      st.v = be_.zeros({batch, capacity, cfg_.num_kv_heads, cfg_.head_dim}, dt);
    } else {
      st.conv = be_.zeros({batch, cfg_.conv_kernel - 1, cfg_.conv_dim()}, dt);
      st.recurrent = be_.zeros({batch, cfg_.lin_v_heads, cfg_.lin_k_dim, cfg_.lin_v_dim}, DType::F32);
    }
    c.layers.push_back(std::move(st));
  }
  return c;
}

Tensor Qwen35Model::forward_cached(const Tensor& ids, const SeqLayout& seq, InferenceCache& cache, LoraAdapter* lora,
                                   bool prefill_from_empty, const Tensor* rows) {
  check(seq.num_seqs() == cache.batch, "internal: forward_cached with " + std::to_string(seq.num_seqs()) +
                                           " sequences for a cache of " + std::to_string(cache.batch));
  const int64_t T = ids.numel(), H = cfg_.hidden_size;
  const DType dt = be_.compute_dtype();
  const float eps = static_cast<float>(cfg_.rms_eps);
  const LoraRuntime rt;
  Tensor x = be_.alloc({T, H}, dt);
  embed_tokens(ids, x);
  for (size_t i = 0; i < layer_count(); ++i) {
    BlockContext ctx{be_, cfg_, seq, rt, static_cast<int>(i)};
    ctx.ep = ep_;
    const DeviceLayerWeights& w = layer_weights(i, i + 1);
    const LayerLora l = layer_lora_find(lora, static_cast<int>(i));
    Tensor a = be_.alloc({T, H}, dt), r1 = be_.alloc({T}, DType::F32);
    be_.rmsnorm_fwd(x, w.input_norm, eps, true, a, r1);
    Tensor mix = w.kind == LayerKind::FullAttention
                     ? attention_cached_fwd(ctx, w, l, a, cache.layers[i], prefill_from_empty)
                     : gdn_cached_fwd(ctx, w, l, a, cache.layers[i], prefill_from_empty);
    be_.add(x, mix, 1.f);
    Tensor m = be_.alloc({T, H}, dt), r2 = be_.alloc({T}, DType::F32);
    be_.rmsnorm_fwd(x, w.post_norm, eps, true, m, r2);
    Tensor mlp;
    if (cfg_.is_moe()) {
      MoeCache mc;
      mlp = moe_block_fwd(ctx, w, l, m, mc);
    } else {
      MlpCache mc;
      mlp = mlp_fwd(ctx, w.gate_proj, w.up_proj, w.down_proj, l.gate, l.up, l.down, 9, m, mc);
    }
    be_.add(x, mlp, 1.f);
    layer_done(i);
  }
  if (ep_) ep_->finish();
  Tensor last = x;
  if (rows) {
    last = be_.alloc({rows->numel(), H}, dt);
    be_.gather_rows(x, *rows, last);
  }
  Tensor h = be_.alloc({last.rows(), H}, dt), rstd = be_.alloc({last.rows()}, DType::F32);
  be_.rmsnorm_fwd(last, final_norm_, eps, true, h, rstd);
  return h;
}

void Qwen35Model::lm_logits(const Tensor& h, Tensor& logits) { be_.gemm(h, false, lm_head_, true, logits, 1.f, 0.f); }

}  // namespace deltatune
