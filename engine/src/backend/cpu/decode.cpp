// Generation ops with state kept between calls (backend.h "generation"): the conv with its history in
// conv_state, the gated delta rule continued from a recurrent state (spec §3.9, the naive rule of §4.1), and
// attention against a KV cache. Sequence n of the layout owns row n of every state tensor.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {

// Sequence index of every token of the layout.
std::vector<int32_t> token_seq(const std::vector<int32_t>& cu) {
  std::vector<int32_t> s(static_cast<size_t>(cu.back()));
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int32_t t = cu[n]; t < cu[n + 1]; ++t) s[t] = static_cast<int32_t>(n);
  return s;
}

}  // namespace

void CpuBackend::conv1d_silu_step(const Tensor& x, const Tensor& w, const SeqLayout& seq, Tensor& conv_state,
                                  Tensor& y) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols(), N = seq.num_seqs();
  check(w.rows() == C, "cpu backend: conv1d_silu_step weight " + shape_str(w.shape) + " does not match " +
                           std::to_string(C) + " channels of x " + shape_str(x.shape));
  cpu::check_same(y, x, "conv1d_silu_step y");
  cpu::check_numel(conv_state, N * (K - 1) * C, "conv1d_silu_step conv_state [N, K-1, C]");
  const auto& cu = cpu::seq_bounds(seq, T, "conv1d_silu_step");
  const float* px = cpu::f32(x, "conv1d_silu_step x");
  const float* pw = cpu::f32(w, "conv1d_silu_step w");
  float* ps = cpu::f32(conv_state, "conv1d_silu_step conv_state");
  float* py = cpu::f32(y, "conv1d_silu_step y");
  pool_.parallel_for(N, 1, [&](int64_t b, int64_t e) {
    std::vector<float> hist;
    for (int64_t n = b; n < e; ++n) {
      const int64_t t0 = cu[n], len = cu[n + 1] - cu[n];
      float* st = ps + n * (K - 1) * C;
      // The sequence's inputs with the K-1 earlier ones in front: row i is input number i - (K-1).
      hist.assign(static_cast<size_t>((K - 1 + len) * C), 0.f);
      std::copy(st, st + (K - 1) * C, hist.begin());
      std::copy(px + t0 * C, px + (t0 + len) * C, hist.begin() + (K - 1) * C);
      for (int64_t i = 0; i < len; ++i)
        for (int64_t c = 0; c < C; ++c) {
          float pre = 0.f;
          for (int64_t j = 0; j < K; ++j) pre += pw[c * K + j] * hist[(i + j) * C + c];
          py[(t0 + i) * C + c] = cpu::siluf(pre);
        }
      std::copy(hist.end() - (K - 1) * C, hist.end(), st);
    }
  });
}

void CpuBackend::gdn_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                               const Tensor& beta, const SeqLayout& seq, float scale, Tensor& state, Tensor& o) {
  const int64_t T = seq.tokens(), N = seq.num_seqs(), dk = q.dim(-1), dv = v.dim(-1);
  check(T > 0 && q.numel() % (T * dk) == 0 && v.numel() % (T * dv) == 0,
        "cpu backend: gdn_recurrent q " + shape_str(q.shape) + " / v " + shape_str(v.shape) + " do not match T=" +
            std::to_string(T));
  const int64_t HK = q.numel() / (T * dk), HV = v.numel() / (T * dv);
  check(HK > 0 && HV % HK == 0, "cpu backend: gdn_recurrent value heads must be a multiple of key heads");
  cpu::check_same(k, q, "gdn_recurrent k");
  cpu::check_same(o, v, "gdn_recurrent o");
  cpu::check_numel(g, T * HV, "gdn_recurrent g");
  cpu::check_numel(beta, T * HV, "gdn_recurrent beta");
  cpu::check_numel(state, N * HV * dk * dv, "gdn_recurrent state [N, HV, dk, dv]");
  const auto& cu = cpu::seq_bounds(seq, T, "gdn_recurrent");
  const float *pq = cpu::f32(q, "gdn_recurrent q"), *pk = cpu::f32(k, "gdn_recurrent k"),
              *pv = cpu::f32(v, "gdn_recurrent v"), *pg = cpu::f32(g, "gdn_recurrent g"),
              *pb = cpu::f32(beta, "gdn_recurrent beta");
  float* pS = cpu::f32(state, "gdn_recurrent state");
  float* po = cpu::f32(o, "gdn_recurrent o");
  const int64_t r = HV / HK;
  pool_.parallel_for(N * HV, 1, [&](int64_t b, int64_t e) {
    std::vector<float> qh(dk), kh(dk), u(dv);
    auto l2 = [&](const float* x, std::vector<float>& out) {
      float ss = 0.f;
      for (int64_t d = 0; d < dk; ++d) ss += x[d] * x[d];
      const float rho = 1.f / std::sqrt(ss + 1e-6f);
      for (int64_t d = 0; d < dk; ++d) out[d] = x[d] * rho;
    };
    for (int64_t nj = b; nj < e; ++nj) {
      const int64_t n = nj / HV, j = nj % HV, h = j / r;
      float* S = pS + nj * dk * dv;
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        l2(pq + (t * HK + h) * dk, qh);
        l2(pk + (t * HK + h) * dk, kh);
        const float decay = std::exp(pg[t * HV + j]), bt = pb[t * HV + j];
        for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
        std::fill(u.begin(), u.end(), 0.f);
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t c = 0; c < dv; ++c) u[c] += S[d * dv + c] * kh[d];
        const float* vt = pv + (t * HV + j) * dv;
        for (int64_t c = 0; c < dv; ++c) u[c] = bt * (vt[c] - u[c]);
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t c = 0; c < dv; ++c) S[d * dv + c] += kh[d] * u[c];
        float* ot = po + (t * HV + j) * dv;
        for (int64_t c = 0; c < dv; ++c) {
          float acc = 0.f;
          for (int64_t d = 0; d < dk; ++d) acc += S[d * dv + c] * qh[d];
          ot[c] = acc * scale;
        }
      }
    }
  });
}

void CpuBackend::kv_cache_write(const Tensor& k, const Tensor& v, const SeqLayout& seq, Tensor& k_cache,
                                Tensor& v_cache) {
  check(k_cache.ndim() == 4 && v_cache.shape == k_cache.shape,
        "cpu backend: kv_cache_write caches must be [N, L, nKV, hd], got " + shape_str(k_cache.shape) + " / " +
            shape_str(v_cache.shape));
  const int64_t T = seq.tokens(), N = k_cache.dim(0), L = k_cache.dim(1), row = k_cache.dim(2) * k_cache.dim(3);
  check(seq.num_seqs() == N, "cpu backend: kv_cache_write: " + std::to_string(seq.num_seqs()) +
                                 " sequences for a cache of " + std::to_string(N));
  cpu::check_numel(k, T * row, "kv_cache_write k");
  cpu::check_numel(v, T * row, "kv_cache_write v");
  const auto& cu = cpu::seq_bounds(seq, T, "kv_cache_write");
  const std::vector<int32_t> sq = token_seq(cu);
  const int32_t* pos = cpu::i32(seq.positions, "kv_cache_write positions");
  const float *pk = cpu::f32(k, "kv_cache_write k"), *pv = cpu::f32(v, "kv_cache_write v");
  float *pkc = cpu::f32(k_cache, "kv_cache_write k_cache"), *pvc = cpu::f32(v_cache, "kv_cache_write v_cache");
  for (int64_t t = 0; t < T; ++t) {
    check(pos[t] >= 0 && pos[t] < L, "cpu backend: kv_cache_write position " + std::to_string(pos[t]) +
                                         " is outside the cache of " + std::to_string(L) + " tokens");
    const int64_t dst = (sq[t] * L + pos[t]) * row;
    std::copy(pk + t * row, pk + (t + 1) * row, pkc + dst);
    std::copy(pv + t * row, pv + (t + 1) * row, pvc + dst);
  }
}

void CpuBackend::attention_cached(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const SeqLayout& seq, float scale, Tensor& o) {
  check(k_cache.ndim() == 4 && v_cache.shape == k_cache.shape,
        "cpu backend: attention_cached caches must be [N, L, nKV, hd], got " + shape_str(k_cache.shape));
  const int64_t T = seq.tokens(), L = k_cache.dim(1), nKV = k_cache.dim(2), hd = k_cache.dim(3);
  check(T > 0 && q.numel() % (T * hd) == 0, "cpu backend: attention_cached q " + shape_str(q.shape) +
                                                " does not match T=" + std::to_string(T) + ", head_dim " +
                                                std::to_string(hd));
  const int64_t nH = q.numel() / (T * hd);
  check(nH % nKV == 0, "cpu backend: attention_cached query heads must be a multiple of kv heads");
  check(seq.num_seqs() == k_cache.dim(0), "cpu backend: attention_cached: sequences and cache rows differ");
  cpu::check_same(o, q, "attention_cached o");
  const auto& cu = cpu::seq_bounds(seq, T, "attention_cached");
  const std::vector<int32_t> sq = token_seq(cu);
  const int32_t* pos = cpu::i32(seq.positions, "attention_cached positions");
  const float* pq = cpu::f32(q, "attention_cached q");
  const float *pkc = cpu::f32(k_cache, "attention_cached k_cache"), *pvc = cpu::f32(v_cache, "attention_cached v_cache");
  float* po = cpu::f32(o, "attention_cached o");
  for (int64_t t = 0; t < T; ++t)
    check(pos[t] >= 0 && pos[t] < L, "cpu backend: attention_cached position " + std::to_string(pos[t]) +
                                         " is outside the cache of " + std::to_string(L) + " tokens");
  const int64_t group = nH / nKV;
  pool_.parallel_for(T * nH, 1, [&](int64_t b, int64_t e) {
    std::vector<float> s;
    for (int64_t th = b; th < e; ++th) {
      const int64_t t = th / nH, h = th % nH, kvh = h / group, n = sq[t], len = pos[t] + 1;
      const float* qt = pq + th * hd;
      s.resize(static_cast<size_t>(len));
      float m = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        const float* kj = pkc + ((n * L + j) * nKV + kvh) * hd;
        float d = 0.f;
        for (int64_t c = 0; c < hd; ++c) d += qt[c] * kj[c];
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < len; ++j) {
        s[j] = std::exp(s[j] - m);
        sum += s[j];
      }
      float* ot = po + th * hd;
      std::fill(ot, ot + hd, 0.f);
      for (int64_t j = 0; j < len; ++j) {
        const float* vj = pvc + ((n * L + j) * nKV + kvh) * hd;
        const float p = s[j] / sum;
        for (int64_t c = 0; c < hd; ++c) ot[c] += p * vj[c];
      }
    }
  });
}

}  // namespace deltatune
