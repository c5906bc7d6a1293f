// Full attention pieces (spec §3.5, §3.6): NeoX partial RoPE and causal softmax attention within each
// packed sequence, with GQA (query head h reads kv head h / (nH/nKV)); the vision tower's 2-D RoPE and full
// (non-causal, seq.causal false) attention.
//   forward:  s_ij = scale·q_i·k_j (j ≤ i or all j, same sequence), lse_i = log Σ_j e^{s_ij}, o_i = Σ_j e^{s_ij−lse_i} v_j
//   backward: P_ij = e^{s_ij−lse_i}, D_i = dO_i·o_i, dS_ij = P_ij(dO_i·v_j − D_i),
//             dq_i = scale Σ_j dS_ij k_j, dk_j = scale Σ_i dS_ij q_i, dv_j = Σ_i P_ij dO_i
// The backward runs two passes (rows for dq, then kv columns for dk/dv, recomputing P) so that no two
// tasks write the same output row: no atomics and a thread-count independent result.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {

struct AttnDims {
  int64_t T, nH, nKV, hd, group;
};

AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq, const char* op) {
  AttnDims d{};
  d.T = seq.tokens();
  d.hd = q.dim(-1);
  check(d.T > 0 && d.hd > 0 && q.numel() % (d.T * d.hd) == 0 && k.numel() % (d.T * d.hd) == 0,
        std::string("cpu backend: ") + op + ": q " + shape_str(q.shape) + " / k " + shape_str(k.shape) +
            " do not match T=" + std::to_string(d.T) + " tokens");
  d.nH = q.numel() / (d.T * d.hd);
  d.nKV = k.numel() / (d.T * d.hd);
  check(d.nKV > 0 && d.nH % d.nKV == 0 && v.numel() == k.numel(),
        std::string("cpu backend: ") + op + ": query heads " + std::to_string(d.nH) +
            " must be a multiple of kv heads " + std::to_string(d.nKV) + " and v must match k");
  d.group = d.nH / d.nKV;
  return d;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// inv_freq as HF builds it: 1 / theta^(2i/rot_dim) evaluated in fp32.
std::vector<float> rope_inv_freq(int rot_dim, float theta) {
  std::vector<float> inv_freq(size_t(std::max(rot_dim / 2, 0)));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = 1.f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
  return inv_freq;
}

// Rotates x [T, heads, hd] in place; frequency slot i of token t turns by pos[row_of_slot[i] * T + t]·inv_freq[i]
// (fp32 angle).
void rope_rows(ThreadPool& pool, Tensor& x, const int32_t* pos, int64_t T, const std::vector<int>& row_of_slot,
               int rot_dim, const std::vector<float>& inv_freq, bool inverse) {
  const int64_t hd = x.dim(-1);
  check(T > 0 && x.numel() % (T * hd) == 0, "cpu backend: rope x " + shape_str(x.shape) +
                                                " is not [T, heads, head_dim] for T=" + std::to_string(T));
  check(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= hd,
        "cpu backend: rope rot_dim " + std::to_string(rot_dim) + " must be even and <= head_dim " + std::to_string(hd));
  const int64_t heads = x.numel() / (T * hd), half = rot_dim / 2;
  float* px = cpu::f32(x, "rope x");
  const float sign = inverse ? -1.f : 1.f;
  pool.parallel_for(T, 16, [&](int64_t b, int64_t e) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(pos[row_of_slot[size_t(i)] * T + t]) * inv_freq[i];
        c[i] = static_cast<float>(std::cos(double(ang)));
        s[i] = sign * static_cast<float>(std::sin(double(ang)));
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* r = px + (t * heads + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = r[i], x2 = r[i + half];
          r[i] = x1 * c[i] - x2 * s[i];
          r[i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::rope(Tensor& x, const Tensor& positions, int rot_dim, float theta, bool inverse) {
  rope_rows(pool_, x, cpu::i32(positions, "rope positions"), positions.numel(),
            std::vector<int>(size_t(std::max(rot_dim / 2, 0)), 0), rot_dim, rope_inv_freq(rot_dim, theta), inverse);
}

void CpuBackend::rope_multimodal(Tensor& x, const Tensor& positions, int rot_dim, float theta,
                                 const std::array<int64_t, 3>& section, bool inverse) {
  check(positions.ndim() == 2 && positions.dim(0) == 3,
        "cpu backend: rope_multimodal positions " + shape_str(positions.shape) + " is not [3, T]");
  std::vector<int> row_of_slot(size_t(std::max(rot_dim / 2, 0)), 0);
  for (size_t i = 0; i < row_of_slot.size(); ++i) {
    if (i % 3 == 1 && int64_t(i) < 3 * section[1]) row_of_slot[i] = 1;
    else if (i % 3 == 2 && int64_t(i) < 3 * section[2]) row_of_slot[i] = 2;
  }
  rope_rows(pool_, x, cpu::i32(positions, "rope_multimodal positions"), positions.dim(1), row_of_slot, rot_dim,
            rope_inv_freq(rot_dim, theta), inverse);
}

void CpuBackend::rope_2d(Tensor& x, const Tensor& positions, float theta, bool inverse) {
  check(positions.ndim() == 2 && positions.dim(0) == 2,
        "cpu backend: rope_2d positions " + shape_str(positions.shape) + " is not [2, T]");
  const int64_t hd = x.dim(-1);
  check(hd % 4 == 0, "cpu backend: rope_2d head_dim " + std::to_string(hd) + " is not a multiple of 4");
  const int64_t q = hd / 4;
  const std::vector<float> axis = rope_inv_freq(int(hd / 2), theta);  // q frequencies over hd/2
  std::vector<float> inv_freq(size_t(hd / 2));
  std::vector<int> row_of_slot(size_t(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i) {
    inv_freq[size_t(i)] = axis[size_t(i % q)];
    row_of_slot[size_t(i)] = i < q ? 0 : 1;
  }
  rope_rows(pool_, x, cpu::i32(positions, "rope_2d positions"), positions.dim(1), row_of_slot, int(hd), inv_freq,
            inverse);
}

void CpuBackend::attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const SeqLayout& seq, float scale,
                               Tensor& o, Tensor& lse) {
  const AttnDims d = attn_dims(q, k, v, seq, "attention_fwd");
  const auto& cu = cpu::seq_bounds(seq, d.T, "attention_fwd");
  cpu::check_same(o, q, "attention_fwd o");
  cpu::check_numel(lse, d.T * d.nH, "attention_fwd lse");
  const float* pq = cpu::f32(q, "attention_fwd q");
  const float* pk = cpu::f32(k, "attention_fwd k");
  const float* pv = cpu::f32(v, "attention_fwd v");
  float* po = cpu::f32(o, "attention_fwd o");
  float* pl = cpu::f32(lse, "attention_fwd lse");
  std::vector<int32_t> lo, hi;
  cpu::seq_token_ranges(cu, lo, hi);
  const int64_t hd = d.hd;
  pool_.parallel_for(d.T * d.nH, 8, [&](int64_t b, int64_t e) {
    std::vector<float> p;
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / d.nH, h = task % d.nH, g = h / d.group;
      const float* qi = pq + (t * d.nH + h) * hd;
      const int64_t j0 = lo[t], n = (seq.causal ? t + 1 : hi[t]) - j0;
      p.resize(static_cast<size_t>(n));
      float m = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = scale * dot(qi, pk + ((j0 + j) * d.nKV + g) * hd, hd);
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const float* vj = pv + ((j0 + j) * d.nKV + g) * hd;
        for (int64_t c = 0; c < hd; ++c) acc[c] += p[j] * vj[c];
      }
      const float inv = static_cast<float>(1.0 / sum);
      float* oi = po + (t * d.nH + h) * hd;
      for (int64_t c = 0; c < hd; ++c) oi[c] = acc[c] * inv;
      pl[t * d.nH + h] = m + static_cast<float>(std::log(sum));
    }
  });
}

void CpuBackend::attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& o, const Tensor& lse, const SeqLayout& seq, float scale, Tensor& dq,
                               Tensor& dk, Tensor& dv) {
  const AttnDims d = attn_dims(q, k, v, seq, "attention_bwd");
  const auto& cu = cpu::seq_bounds(seq, d.T, "attention_bwd");
  cpu::check_same(dout, q, "attention_bwd dout");
  cpu::check_same(o, q, "attention_bwd o");
  cpu::check_same(dq, q, "attention_bwd dq");
  cpu::check_same(dk, k, "attention_bwd dk");
  cpu::check_same(dv, v, "attention_bwd dv");
  cpu::check_numel(lse, d.T * d.nH, "attention_bwd lse");
  const float* pdo = cpu::f32(dout, "attention_bwd dout");
  const float* pq = cpu::f32(q, "attention_bwd q");
  const float* pk = cpu::f32(k, "attention_bwd k");
  const float* pv = cpu::f32(v, "attention_bwd v");
  const float* po = cpu::f32(o, "attention_bwd o");
  const float* pl = cpu::f32(lse, "attention_bwd lse");
  float* pdq = cpu::f32(dq, "attention_bwd dq");
  float* pdk = cpu::f32(dk, "attention_bwd dk");
  float* pdv = cpu::f32(dv, "attention_bwd dv");
  std::vector<int32_t> lo, hi;
  cpu::seq_token_ranges(cu, lo, hi);
  const int64_t hd = d.hd, nH = d.nH, nKV = d.nKV;
  std::vector<float> D(static_cast<size_t>(d.T * nH));
  pool_.parallel_for(d.T * nH, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) D[r] = dot(pdo + r * hd, po + r * hd, hd);
  });
  // Pass 1: dq rows.
  pool_.parallel_for(d.T * nH, 8, [&](int64_t b, int64_t e) {
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / nH, h = task % nH, g = h / d.group;
      const float* qi = pq + task * hd;
      const float* doi = pdo + task * hd;
      std::fill(acc.begin(), acc.end(), 0.f);
      const int64_t j1 = seq.causal ? t + 1 : hi[t];
      for (int64_t j = lo[t]; j < j1; ++j) {
        const float* kj = pk + (j * nKV + g) * hd;
        const float P = std::exp(scale * dot(qi, kj, hd) - pl[task]);
        const float dS = P * (dot(doi, pv + (j * nKV + g) * hd, hd) - D[task]);
        for (int64_t c = 0; c < hd; ++c) acc[c] += dS * kj[c];
      }
      for (int64_t c = 0; c < hd; ++c) pdq[task * hd + c] = scale * acc[c];
    }
  });
  // Pass 2: dk, dv rows of each kv head, summed over the query heads of its group.
  pool_.parallel_for(d.T * nKV, 8, [&](int64_t b, int64_t e) {
    std::vector<float> ak(static_cast<size_t>(hd)), av(static_cast<size_t>(hd));
    for (int64_t task = b; task < e; ++task) {
      const int64_t j = task / nKV, g = task % nKV;
      const float* kj = pk + task * hd;
      const float* vj = pv + task * hd;
      std::fill(ak.begin(), ak.end(), 0.f);
      std::fill(av.begin(), av.end(), 0.f);
      for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
        for (int64_t i = seq.causal ? j : lo[j]; i < hi[j]; ++i) {
          const int64_t r = i * nH + h;
          const float* qi = pq + r * hd;
          const float* doi = pdo + r * hd;
          const float P = std::exp(scale * dot(qi, kj, hd) - pl[r]);
          const float dS = P * (dot(doi, vj, hd) - D[r]);
          for (int64_t c = 0; c < hd; ++c) {
            av[c] += P * doi[c];
            ak[c] += dS * qi[c];
          }
        }
      }
      for (int64_t c = 0; c < hd; ++c) {
        pdk[task * hd + c] = scale * ak[c];
        pdv[task * hd + c] = av[c];
      }
    }
  });
}

}  // namespace deltatune
