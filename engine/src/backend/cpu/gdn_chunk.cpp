// Gated delta rule core, chunked (spec §4.2 forward, §4.3 backward), per (sequence, value head) task.
// Chunks of C = 64 tokens never straddle a sequence; the last chunk of a sequence may be partial.
// Notation per chunk (i, j < n ≤ C): G = local cumsum of g, γ = e^G, Γ = γ_last, R_ij = e^{G_i − G_j} (i ≥ j),
//   A_ij = β_i (k̂_i·k̂_j) R_ij (i > j),  T = (I + A)⁻¹,  W = T diag(βγ) K̂,  U = T diag(β) V,
//   V' = U − W S,  M_ij = (q̂_i·k̂_j) R_ij (i ≥ j),  O = s (diag(γ) Q̂ S + M V'),
//   S ← Γ S + K̂ᵀ diag(Γ/γ) V'.
// Decay ratios are only ever formed as e^{G_i − G_j} with i ≥ j (never γ_i/γ_j), so strongly negative
// g underflows harmlessly to 0 instead of producing 0/0. G is accumulated in double: with g ≈ −10 per
// token, G reaches −640 in a chunk and fp32 G_i − G_j would lose ~4e-5 relative accuracy in R.
// Backward: recompute the chunk-start states with a forward scan, then the reverse scan of §4.3 (steps
// 2–6) per value head; dq̂/dk̂ per value head are summed over the value heads sharing a key head (GVA),
// then pushed through the L2 norm: dx = ρ (dŷ − ŷ Σ dŷ⊙ŷ).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {

constexpr int64_t kChunk = 64;
constexpr float kL2Eps = 1e-6f;

struct GdnDims {
  int64_t T, HK, HV, dk, dv, r;
};

GdnDims gdn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const SeqLayout& seq, const char* op) {
  GdnDims d{};
  d.T = seq.tokens();
  d.dk = q.dim(-1);
  d.dv = v.dim(-1);
  const std::string where = std::string("cpu backend: ") + op + ": ";
  check(d.T > 0 && d.dk > 0 && d.dv > 0 && q.numel() % (d.T * d.dk) == 0 && v.numel() % (d.T * d.dv) == 0,
        where + "q " + shape_str(q.shape) + " / v " + shape_str(v.shape) + " are not [T, heads, dim] for T=" +
            std::to_string(d.T));
  d.HK = q.numel() / (d.T * d.dk);
  d.HV = v.numel() / (d.T * d.dv);
  check(d.HK > 0 && d.HV % d.HK == 0, where + "value heads " + std::to_string(d.HV) +
                                          " must be a multiple of key heads " + std::to_string(d.HK));
  d.r = d.HV / d.HK;
  cpu::check_same(k, q, op);
  cpu::check_numel(g, d.T * d.HV, "gdn g");
  cpu::check_numel(beta, d.T * d.HV, "gdn beta");
  return d;
}

// x̂ = x·ρ, ρ = 1/sqrt(Σx² + 1e-6), per row of dk.
void l2norm_rows(ThreadPool& pool, const float* x, int64_t rows, int64_t dk, float* xh, float* rho) {
  pool.parallel_for(rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      double ss = 0;
      for (int64_t d = 0; d < dk; ++d) ss += double(x[r * dk + d]) * x[r * dk + d];
      const float p = static_cast<float>(1.0 / std::sqrt(ss + double(kL2Eps)));
      rho[r] = p;
      for (int64_t d = 0; d < dk; ++d) xh[r * dk + d] = x[r * dk + d] * p;
    }
  });
}

inline float dotf(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Contiguous copies of one chunk's inputs for one value head and everything the forward derives from
// them and the chunk-start state S.
struct Chunk {
  int64_t n = 0, dk = 0, dv = 0;
  std::vector<float> Q, K, V, B, gam, R, KK, QK, A, Tm, W, U, Vp, M;
  std::vector<double> G;
  float Gam = 1.f;

  // Rows [a, a+n) of value head j (key head h) from the normalised q̂, k̂ and raw v, g, β.
  void load(const GdnDims& d, const float* qh, const float* kh, const float* v, const float* g, const float* beta,
            int64_t a, int64_t len, int64_t j) {
    n = len;
    dk = d.dk;
    dv = d.dv;
    const int64_t h = j / d.r;
    Q.resize(n * dk);
    K.resize(n * dk);
    V.resize(n * dv);
    B.resize(n);
    G.resize(n);
    gam.resize(n);
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = a + i;
      std::copy_n(qh + (t * d.HK + h) * dk, dk, Q.data() + i * dk);
      std::copy_n(kh + (t * d.HK + h) * dk, dk, K.data() + i * dk);
      std::copy_n(v + (t * d.HV + j) * dv, dv, V.data() + i * dv);
      B[i] = beta[t * d.HV + j];
      acc += g[t * d.HV + j];
      G[i] = acc;
      gam[i] = static_cast<float>(std::exp(acc));
    }
    Gam = gam[n - 1];
  }

  // R, KK, QK, A, T, W, U, V', M from the loaded inputs and chunk-start state S [dk, dv].
  void derive(const float* S) {
    const size_t nn = static_cast<size_t>(n * n);
    R.assign(nn, 0.f);
    KK.assign(nn, 0.f);
    QK.assign(nn, 0.f);
    A.assign(nn, 0.f);
    Tm.assign(nn, 0.f);
    M.assign(nn, 0.f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t ij = i * n + j;
        R[ij] = static_cast<float>(std::exp(G[i] - G[j]));
        KK[ij] = dotf(&K[i * dk], &K[j * dk], dk);
        QK[ij] = dotf(&Q[i * dk], &K[j * dk], dk);
        if (j < i) A[ij] = B[i] * KK[ij] * R[ij];
        M[ij] = QK[ij] * R[ij];
      }
    // T = (I + A)⁻¹ by forward substitution: row i of (I + A)·T = e_i gives T_i = e_i − Σ_{m<i} A_im T_m.
    for (int64_t i = 0; i < n; ++i) {
      Tm[i * n + i] = 1.f;
      for (int64_t j = 0; j < i; ++j) {
        float s = 0.f;
        for (int64_t m = j; m < i; ++m) s += A[i * n + m] * Tm[m * n + j];
        Tm[i * n + j] = -s;
      }
    }
    W.assign(n * dk, 0.f);
    U.assign(n * dv, 0.f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t m = 0; m <= i; ++m) {
        const float tw = Tm[i * n + m] * B[m] * gam[m], tu = Tm[i * n + m] * B[m];
        for (int64_t c = 0; c < dk; ++c) W[i * dk + c] += tw * K[m * dk + c];
        for (int64_t c = 0; c < dv; ++c) U[i * dv + c] += tu * V[m * dv + c];
      }
    Vp = U;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dk; ++c) {
        const float w = W[i * dk + c];
        if (w == 0.f) continue;
        for (int64_t e = 0; e < dv; ++e) Vp[i * dv + e] -= w * S[c * dv + e];
      }
  }

  // O rows (scaled by s) into o (stride ostride between rows).
  void output(const float* S, float s, float* o, int64_t ostride) const {
    std::vector<float> acc(static_cast<size_t>(dv));
    for (int64_t i = 0; i < n; ++i) {
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t c = 0; c < dk; ++c) {
        const float qg = Q[i * dk + c] * gam[i];
        for (int64_t e = 0; e < dv; ++e) acc[e] += qg * S[c * dv + e];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const float m = M[i * n + j];
        for (int64_t e = 0; e < dv; ++e) acc[e] += m * Vp[j * dv + e];
      }
      for (int64_t e = 0; e < dv; ++e) o[i * ostride + e] = s * acc[e];
    }
  }

  // S ← Γ S + K̂ᵀ diag(Γ/γ) V'  (Γ/γ_j = R_{last, j}).
  void advance(float* S) const {
    for (int64_t x = 0; x < dk * dv; ++x) S[x] *= Gam;
    for (int64_t j = 0; j < n; ++j) {
      const float f = R[(n - 1) * n + j];
      for (int64_t c = 0; c < dk; ++c) {
        const float kf = K[j * dk + c] * f;
        for (int64_t e = 0; e < dv; ++e) S[c * dv + e] += kf * Vp[j * dv + e];
      }
    }
  }
};

}  // namespace

void CpuBackend::gdn_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                         const SeqLayout& seq, float scale, Tensor& o) {
  const GdnDims d = gdn_dims(q, k, v, g, beta, seq, "gdn_fwd");
  const auto& cu = cpu::seq_bounds(seq, d.T, "gdn_fwd");
  cpu::check_same(o, v, "gdn_fwd o");
  const float* pv = cpu::f32(v, "gdn_fwd v");
  const float* pg = cpu::f32(g, "gdn_fwd g");
  const float* pb = cpu::f32(beta, "gdn_fwd beta");
  float* po = cpu::f32(o, "gdn_fwd o");
  const int64_t krows = d.T * d.HK;
  std::vector<float> qh(krows * d.dk), kh(krows * d.dk), rq(krows), rk(krows);
  l2norm_rows(pool_, cpu::f32(q, "gdn_fwd q"), krows, d.dk, qh.data(), rq.data());
  l2norm_rows(pool_, cpu::f32(k, "gdn_fwd k"), krows, d.dk, kh.data(), rk.data());
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  pool_.parallel_for(N * d.HV, 1, [&](int64_t b, int64_t e) {
    Chunk ch;
    std::vector<float> S(static_cast<size_t>(d.dk * d.dv));
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / d.HV, j = task % d.HV;
      std::fill(S.begin(), S.end(), 0.f);
      for (int64_t a = cu[n]; a < cu[n + 1]; a += kChunk) {
        const int64_t len = std::min<int64_t>(kChunk, cu[n + 1] - a);
        ch.load(d, qh.data(), kh.data(), pv, pg, pb, a, len, j);
        ch.derive(S.data());
        ch.output(S.data(), scale, po + (a * d.HV + j) * d.dv, d.HV * d.dv);
        ch.advance(S.data());
      }
    }
  });
}

void CpuBackend::gdn_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const SeqLayout& seq, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
                         Tensor& dg, Tensor& dbeta) {
  const GdnDims d = gdn_dims(q, k, v, g, beta, seq, "gdn_bwd");
  const auto& cu = cpu::seq_bounds(seq, d.T, "gdn_bwd");
  cpu::check_same(dout, v, "gdn_bwd dout");
  cpu::check_same(dq, q, "gdn_bwd dq");
  cpu::check_same(dk, k, "gdn_bwd dk");
  cpu::check_same(dv, v, "gdn_bwd dv");
  cpu::check_same(dg, g, "gdn_bwd dg");
  cpu::check_same(dbeta, beta, "gdn_bwd dbeta");
  const float* pdo = cpu::f32(dout, "gdn_bwd dout");
  const float* pq = cpu::f32(q, "gdn_bwd q");
  const float* pk = cpu::f32(k, "gdn_bwd k");
  const float* pv = cpu::f32(v, "gdn_bwd v");
  const float* pg = cpu::f32(g, "gdn_bwd g");
  const float* pb = cpu::f32(beta, "gdn_bwd beta");
  float* pdq = cpu::f32(dq, "gdn_bwd dq");
  float* pdk = cpu::f32(dk, "gdn_bwd dk");
  float* pdv = cpu::f32(dv, "gdn_bwd dv");
  float* pdg = cpu::f32(dg, "gdn_bwd dg");
  float* pdb = cpu::f32(dbeta, "gdn_bwd dbeta");
  const int64_t DK = d.dk, DV = d.dv, HV = d.HV;
  const int64_t krows = d.T * d.HK;
  std::vector<float> qh(krows * DK), kh(krows * DK), rq(krows), rk(krows);
  l2norm_rows(pool_, pq, krows, DK, qh.data(), rq.data());
  l2norm_rows(pool_, pk, krows, DK, kh.data(), rk.data());
  // Gradients w.r.t. q̂ and k̂ per value head (summed over each key head's value heads afterwards).
  std::vector<float> dqh(d.T * HV * DK), dkh(d.T * HV * DK);
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  const float s = scale;

  pool_.parallel_for(N * HV, 1, [&](int64_t tb, int64_t te) {
    Chunk ch;
    std::vector<float> states, dSend(DK * DV), dS(DK * DV);
    std::vector<float> dO, dVp, D, dQ, dKst, dK, dW, dG, Xw, Xu, dT, Y, dA;
    for (int64_t task = tb; task < te; ++task) {
      const int64_t sn = task / HV, j = task % HV;
      const int64_t t0 = cu[sn], t1 = cu[sn + 1];
      const int64_t nchunks = (t1 - t0 + kChunk - 1) / kChunk;
      // Step 1: chunk-start states S_n by re-running the forward scan.
      states.assign(static_cast<size_t>(std::max<int64_t>(1, nchunks) * DK * DV), 0.f);
      for (int64_t c = 0; c + 1 < nchunks; ++c) {
        const int64_t a = t0 + c * kChunk;
        ch.load(d, qh.data(), kh.data(), pv, pg, pb, a, std::min<int64_t>(kChunk, t1 - a), j);
        ch.derive(&states[c * DK * DV]);
        std::copy_n(&states[c * DK * DV], DK * DV, &states[(c + 1) * DK * DV]);
        ch.advance(&states[(c + 1) * DK * DV]);
      }
      std::fill(dSend.begin(), dSend.end(), 0.f);
      for (int64_t c = nchunks - 1; c >= 0; --c) {
        const int64_t a = t0 + c * kChunk, n = std::min<int64_t>(kChunk, t1 - a);
        const float* S = &states[c * DK * DV];
        ch.load(d, qh.data(), kh.data(), pv, pg, pb, a, n, j);
        ch.derive(S);
        const auto& Q = ch.Q;
        const auto& K = ch.K;
        const auto& V = ch.V;
        const auto& B = ch.B;
        const auto& gam = ch.gam;
        const auto& R = ch.R;
        const float Gam = ch.Gam;
        dO.resize(n * DV);
        for (int64_t i = 0; i < n; ++i) std::copy_n(pdo + ((a + i) * HV + j) * DV, DV, &dO[i * DV]);

        // Steps 2-3: dV' = s Mᵀ dO + diag(Γ/γ) K̂ dS^end;  dS = Γ dS^end + s (diag(γ) Q̂)ᵀ dO − Wᵀ dV'.
        dVp.assign(n * DV, 0.f);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t m = i; m < n; ++m) {
            const float f = s * ch.M[m * n + i];
            for (int64_t e = 0; e < DV; ++e) dVp[i * DV + e] += f * dO[m * DV + e];
          }
          const float f = R[(n - 1) * n + i];
          for (int64_t c2 = 0; c2 < DK; ++c2) {
            const float kf = K[i * DK + c2] * f;
            for (int64_t e = 0; e < DV; ++e) dVp[i * DV + e] += kf * dSend[c2 * DV + e];
          }
        }
        for (int64_t x = 0; x < DK * DV; ++x) dS[x] = Gam * dSend[x];
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c2 = 0; c2 < DK; ++c2) {
            const float qf = s * gam[i] * Q[i * DK + c2], wf = ch.W[i * DK + c2];
            for (int64_t e = 0; e < DV; ++e) dS[c2 * DV + e] += qf * dO[i * DV + e] - wf * dVp[i * DV + e];
          }

        // Step 4: D_ij = s (dO_i·V'_j) R_ij (i ≥ j); dQ̂, dK̂ (state part + intra part), dW, dG.
        D.assign(n * n, 0.f);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t jj = 0; jj <= i; ++jj) D[i * n + jj] = s * dotf(&dO[i * DV], &ch.Vp[jj * DV], DV) * R[i * n + jj];
        dQ.assign(n * DK, 0.f);
        dKst.assign(n * DK, 0.f);
        dK.assign(n * DK, 0.f);
        dW.assign(n * DK, 0.f);
        for (int64_t i = 0; i < n; ++i) {
          const float fo = s * gam[i], fk = R[(n - 1) * n + i];
          for (int64_t c2 = 0; c2 < DK; ++c2) {
            const float* Srow = S + c2 * DV;
            const float* dSrow = &dSend[c2 * DV];
            dQ[i * DK + c2] = fo * dotf(&dO[i * DV], Srow, DV);
            dKst[i * DK + c2] = fk * dotf(&ch.Vp[i * DV], dSrow, DV);
            dW[i * DK + c2] = -dotf(&dVp[i * DV], Srow, DV);
          }
          for (int64_t jj = 0; jj <= i; ++jj) {
            const float f = D[i * n + jj];
            for (int64_t c2 = 0; c2 < DK; ++c2) {
              dQ[i * DK + c2] += f * K[jj * DK + c2];
              dK[jj * DK + c2] += f * Q[i * DK + c2];
            }
          }
        }
        for (int64_t x = 0; x < n * DK; ++x) dK[x] += dKst[x];
        dG.assign(n, 0.f);
        for (int64_t i = 0; i < n; ++i)
          dG[i] = dotf(&dQ[i * DK], &Q[i * DK], DK) - dotf(&dK[i * DK], &K[i * DK], DK);
        {
          double sd = 0, kd = 0;
          for (int64_t x = 0; x < DK * DV; ++x) sd += double(S[x]) * dSend[x];
          for (int64_t x = 0; x < n * DK; ++x) kd += double(dKst[x]) * K[x];
          dG[n - 1] += static_cast<float>(Gam * sd + kd);
        }

        // Step 5: WY backward with dU = dV'.  X_w = Tᵀ dW, X_u = Tᵀ dU.
        const auto& Tm = ch.Tm;
        Xw.assign(n * DK, 0.f);
        Xu.assign(n * DV, 0.f);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t m = i; m < n; ++m) {
            const float t = Tm[m * n + i];
            for (int64_t c2 = 0; c2 < DK; ++c2) Xw[i * DK + c2] += t * dW[m * DK + c2];
            for (int64_t e = 0; e < DV; ++e) Xu[i * DV + e] += t * dVp[m * DV + e];
          }
        for (int64_t i = 0; i < n; ++i) {
          const float xk = dotf(&Xw[i * DK], &K[i * DK], DK);
          const int64_t t = (a + i) * HV + j;
          for (int64_t e = 0; e < DV; ++e) pdv[t * DV + e] = B[i] * Xu[i * DV + e];
          pdb[t] = dotf(&Xu[i * DV], &V[i * DV], DV) + gam[i] * xk;
          const float f = B[i] * gam[i];
          for (int64_t c2 = 0; c2 < DK; ++c2) dK[i * DK + c2] += f * Xw[i * DK + c2];
          dG[i] += f * xk;
        }
        // dT (strictly lower part only: the rest cannot reach A's strictly-lower entries),
        // dA = −Tᵀ dT Tᵀ = −Tᵀ Y with Y = dT Tᵀ.
        dT.assign(n * n, 0.f);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t m = 0; m < i; ++m)
            dT[i * n + m] = B[m] * (gam[m] * dotf(&dW[i * DK], &K[m * DK], DK) + dotf(&dVp[i * DV], &V[m * DV], DV));
        Y.assign(n * n, 0.f);
        for (int64_t x = 0; x < n; ++x)
          for (int64_t jj = 0; jj < n; ++jj) {
            float acc = 0.f;
            for (int64_t b2 = 0; b2 <= std::min(jj, x - 1); ++b2) acc += dT[x * n + b2] * Tm[jj * n + b2];
            Y[x * n + jj] = acc;
          }
        dA.assign(n * n, 0.f);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t jj = 0; jj < i; ++jj) {
            float acc = 0.f;
            for (int64_t x = i; x < n; ++x) acc += Tm[x * n + i] * Y[x * n + jj];
            dA[i * n + jj] = -acc;
          }
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t jj = 0; jj < i; ++jj) {
            const float dA_ij = dA[i * n + jj], dAh = dA_ij * R[i * n + jj];
            if (dA_ij == 0.f) continue;
            // A_ij = β_i (k̂_i·k̂_j) R_ij
            for (int64_t c2 = 0; c2 < DK; ++c2) {
              dK[i * DK + c2] += B[i] * dAh * K[jj * DK + c2];
              dK[jj * DK + c2] += dAh * B[i] * K[i * DK + c2];
            }
            pdb[(a + i) * HV + j] += dAh * ch.KK[i * n + jj];
            const float dAA = dA_ij * ch.A[i * n + jj];
            dG[i] += dAA;
            dG[jj] -= dAA;
          }
        }

        // Step 6: dg = reverse cumsum of dG within the chunk.
        float run = 0.f;
        for (int64_t i = n - 1; i >= 0; --i) {
          run += dG[i];
          pdg[(a + i) * HV + j] = run;
        }
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(&dQ[i * DK], DK, &dqh[((a + i) * HV + j) * DK]);
          std::copy_n(&dK[i * DK], DK, &dkh[((a + i) * HV + j) * DK]);
        }
        dSend.swap(dS);
      }
    }
  });

  // Steps 7-8: sum over the value heads of each key head, then the L2-norm backward.
  pool_.parallel_for(krows, 64, [&](int64_t b, int64_t e) {
    std::vector<float> gq(DK), gk(DK);
    for (int64_t row = b; row < e; ++row) {
      const int64_t t = row / d.HK, h = row % d.HK;
      std::fill(gq.begin(), gq.end(), 0.f);
      std::fill(gk.begin(), gk.end(), 0.f);
      for (int64_t jv = h * d.r; jv < (h + 1) * d.r; ++jv)
        for (int64_t c2 = 0; c2 < DK; ++c2) {
          gq[c2] += dqh[(t * HV + jv) * DK + c2];
          gk[c2] += dkh[(t * HV + jv) * DK + c2];
        }
      const float* yq = &qh[row * DK];
      const float* yk = &kh[row * DK];
      const float sq = dotf(gq.data(), yq, DK), sk = dotf(gk.data(), yk, DK);
      for (int64_t c2 = 0; c2 < DK; ++c2) {
        pdq[row * DK + c2] = rq[row] * (gq[c2] - yq[c2] * sq);
        pdk[row * DK + c2] = rk[row] * (gk[c2] - yk[c2] * sk);
      }
    }
  });
}

}  // namespace deltatune
