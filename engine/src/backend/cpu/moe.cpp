// MoE routing and the row movement ops around the experts (spec §3.8):
//   router: p = softmax_fp32(logits), top-k (ties -> lower expert index, as torch.topk on CPU),
//           w = p_sel / Σ p_sel;  backward (softmax restricted to the selected logits):
//           dl_j = w_j·(dw_j − Σ_i w_i dw_i) for selected j, 0 elsewhere.
//   gather_rows / scatter_add_rows / row_dot / scale_rows move token rows to and from expert batches.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

void CpuBackend::moe_router_fwd(const Tensor& logits, int k, Tensor& idx, Tensor& w) {
  const int64_t T = logits.rows(), E = logits.cols();
  check(k >= 1 && k <= E, "cpu backend: moe_router top-k " + std::to_string(k) + " must be in [1, " +
                              std::to_string(E) + "] (number of experts)");
  cpu::check_numel(idx, T * k, "moe_router_fwd idx");
  cpu::check_numel(w, T * k, "moe_router_fwd w");
  const float* pl = cpu::f32(logits, "moe_router_fwd logits");
  int32_t* pi = cpu::i32(idx, "moe_router_fwd idx");
  float* pw = cpu::f32(w, "moe_router_fwd w");
  pool_.parallel_for(T, 16, [&](int64_t b, int64_t e) {
    std::vector<float> p(static_cast<size_t>(E));
    std::vector<char> taken(static_cast<size_t>(E));
    for (int64_t t = b; t < e; ++t) {
      const float* l = pl + t * E;
      float m = -INFINITY;
      for (int64_t i = 0; i < E; ++i) m = std::max(m, l[i]);
      double sum = 0;
      for (int64_t i = 0; i < E; ++i) {
        p[i] = std::exp(l[i] - m);
        sum += p[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < E; ++i) p[i] *= inv;
      std::fill(taken.begin(), taken.end(), 0);
      float total = 0.f;
      for (int j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t i = 0; i < E; ++i)
          if (!taken[i] && (best < 0 || p[i] > p[best])) best = i;  // strict >: lower index wins ties
        taken[best] = 1;
        pi[t * k + j] = static_cast<int32_t>(best);
        pw[t * k + j] = p[best];
        total += p[best];
      }
      for (int j = 0; j < k; ++j) pw[t * k + j] /= total;
    }
  });
}

void CpuBackend::moe_router_bwd(const Tensor& dw, const Tensor& idx, const Tensor& w, Tensor& dlogits) {
  const int64_t T = dlogits.rows(), E = dlogits.cols();
  const int64_t k = T ? w.numel() / T : 0;
  check(T > 0 && k > 0 && w.numel() == T * k, "cpu backend: moe_router_bwd w " + shape_str(w.shape) +
                                                  " does not match dlogits " + shape_str(dlogits.shape));
  cpu::check_numel(dw, T * k, "moe_router_bwd dw");
  cpu::check_numel(idx, T * k, "moe_router_bwd idx");
  const float* pdw = cpu::f32(dw, "moe_router_bwd dw");
  const int32_t* pi = cpu::i32(idx, "moe_router_bwd idx");
  const float* pw = cpu::f32(w, "moe_router_bwd w");
  float* pd = cpu::f32(dlogits, "moe_router_bwd dlogits");
  pool_.parallel_for(T, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float s = 0.f;
      for (int64_t j = 0; j < k; ++j) s += pw[t * k + j] * pdw[t * k + j];
      std::fill(pd + t * E, pd + (t + 1) * E, 0.f);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t ex = pi[t * k + j];
        check(ex >= 0 && ex < E, "cpu backend: moe_router_bwd expert index " + std::to_string(ex) + " out of range");
        pd[t * E + ex] = pw[t * k + j] * (pdw[t * k + j] - s);
      }
    }
  });
}

void CpuBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  const int64_t n = rows.numel(), H = src.cols(), T = src.rows();
  cpu::check_numel(dst, n * H, "gather_rows dst");
  const float* ps = cpu::f32(src, "gather_rows src");
  const int32_t* pr = cpu::i32(rows, "gather_rows rows");
  float* pd = cpu::f32(dst, "gather_rows dst");
  for (int64_t i = 0; i < n; ++i)
    check(pr[i] >= 0 && pr[i] < T, "cpu backend: gather_rows row " + std::to_string(pr[i]) + " outside [0, " +
                                       std::to_string(T) + ")");
  pool_.parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, H)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::copy(ps + int64_t(pr[i]) * H, ps + int64_t(pr[i]) * H + H, pd + i * H);
  });
}

void CpuBackend::scatter_add_rows(const Tensor& src, const Tensor& rows, const Tensor& scale, Tensor& dst) {
  const int64_t n = rows.numel(), H = dst.cols(), T = dst.rows();
  cpu::check_numel(src, n * H, "scatter_add_rows src");
  const float* ps = cpu::f32(src, "scatter_add_rows src");
  const int32_t* pr = cpu::i32(rows, "scatter_add_rows rows");
  const float* psc = nullptr;
  if (scale.defined()) {
    cpu::check_numel(scale, n, "scatter_add_rows scale");
    psc = cpu::f32(scale, "scatter_add_rows scale");
  }
  float* pd = cpu::f32(dst, "scatter_add_rows dst");
  for (int64_t i = 0; i < n; ++i)
    check(pr[i] >= 0 && pr[i] < T, "cpu backend: scatter_add_rows row " + std::to_string(pr[i]) +
                                       " outside [0, " + std::to_string(T) + ")");
  // Rows may repeat, so threads split the columns, not the rows: every (row, column) has one writer
  // and the rows are added in index order whatever the thread count.
  pool_.parallel_for(H, 64, [&](int64_t cb, int64_t ce) {
    for (int64_t i = 0; i < n; ++i) {
      const float s = psc ? psc[i] : 1.f;
      float* d = pd + int64_t(pr[i]) * H;
      const float* x = ps + i * H;
      for (int64_t c = cb; c < ce; ++c) d[c] += s * x[c];
    }
  });
}

void CpuBackend::row_dot(const Tensor& a, const Tensor& b, Tensor& out) {
  cpu::check_same(a, b, "row_dot b");
  const int64_t R = a.rows(), C = a.cols();
  cpu::check_numel(out, R, "row_dot out");
  const float* pa = cpu::f32(a, "row_dot a");
  const float* pb = cpu::f32(b, "row_dot b");
  float* po = cpu::f32(out, "row_dot out");
  pool_.parallel_for(R, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, C)), [&](int64_t s, int64_t e) {
    for (int64_t r = s; r < e; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += double(pa[r * C + c]) * pb[r * C + c];
      po[r] = static_cast<float>(acc);
    }
  });
}

void CpuBackend::scale_rows(const Tensor& x, const Tensor& s, Tensor& y) {
  cpu::check_same(x, y, "scale_rows y");
  const int64_t R = x.rows(), C = x.cols();
  cpu::check_numel(s, R, "scale_rows s");
  const float* px = cpu::f32(x, "scale_rows x");
  const float* ps = cpu::f32(s, "scale_rows s");
  float* py = cpu::f32(y, "scale_rows y");
  pool_.parallel_for(R, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, C)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t c = 0; c < C; ++c) py[r * C + c] = px[r * C + c] * ps[r];
  });
}

}  // namespace deltatune
