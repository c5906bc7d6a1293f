#include "backend/cpu/gdn_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace deltatune {

namespace {

template <class R>
void recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
               const std::vector<int32_t>& cu, float scale, int64_t HK, int64_t HV, int64_t dk, int64_t dv,
               float* o) {
  const int64_t r = HV / HK;
  std::vector<R> S(static_cast<size_t>(dk * dv)), qh(static_cast<size_t>(dk)), kh(static_cast<size_t>(dk)),
      u(static_cast<size_t>(dv));
  auto l2 = [&](const float* x, std::vector<R>& out) {
    R ss = 0;
    for (int64_t d = 0; d < dk; ++d) ss += R(x[d]) * R(x[d]);
    const R rho = R(1) / std::sqrt(ss + R(1e-6));
    for (int64_t d = 0; d < dk; ++d) out[d] = R(x[d]) * rho;
  };
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int64_t j = 0; j < HV; ++j) {
      const int64_t h = j / r;
      std::fill(S.begin(), S.end(), R(0));
      for (int64_t t = cu[n]; t < cu[n + 1]; ++t) {
        l2(q + (t * HK + h) * dk, qh);
        l2(k + (t * HK + h) * dk, kh);
        const R decay = std::exp(R(g[t * HV + j])), b = R(beta[t * HV + j]);
        for (auto& s : S) s *= decay;
        std::fill(u.begin(), u.end(), R(0));
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t c = 0; c < dv; ++c) u[c] += S[d * dv + c] * kh[d];
        const float* vt = v + (t * HV + j) * dv;
        for (int64_t c = 0; c < dv; ++c) u[c] = b * (R(vt[c]) - u[c]);  // δ
        for (int64_t d = 0; d < dk; ++d)
          for (int64_t c = 0; c < dv; ++c) S[d * dv + c] += kh[d] * u[c];
        float* ot = o + (t * HV + j) * dv;
        for (int64_t c = 0; c < dv; ++c) {
          R acc = 0;
          for (int64_t d = 0; d < dk; ++d) acc += S[d * dv + c] * (R(scale) * qh[d]);
          ot[c] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace

void gdn_recurrent_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                             const std::vector<int32_t>& cu_seqlens, float scale, Tensor& o, bool fp64) {
  check(!cu_seqlens.empty(), "gdn_recurrent_reference: empty cu_seqlens");
  const int64_t T = cu_seqlens.back(), dk = q.dim(-1), dv = v.dim(-1);
  check(T > 0 && q.numel() % (T * dk) == 0 && v.numel() % (T * dv) == 0, "gdn_recurrent_reference: bad shapes");
  const int64_t HK = q.numel() / (T * dk), HV = v.numel() / (T * dv);
  check(HV % HK == 0 && k.numel() == q.numel() && g.numel() == T * HV && beta.numel() == T * HV &&
            o.numel() == v.numel(),
        "gdn_recurrent_reference: bad shapes");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &g, &beta, &o})
    check(t->dtype == DType::F32 && t->device == Device::CPU, "gdn_recurrent_reference: host F32 tensors only");
  if (fp64)
    recurrent<double>(q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), g.ptr<float>(), beta.ptr<float>(), cu_seqlens,
                      scale, HK, HV, dk, dv, o.ptr<float>());
  else
    recurrent<float>(q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), g.ptr<float>(), beta.ptr<float>(), cu_seqlens,
                     scale, HK, HV, dk, dv, o.ptr<float>());
}

}  // namespace deltatune
