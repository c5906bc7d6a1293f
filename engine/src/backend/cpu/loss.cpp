// Cross-entropy over rows of logits (fp32, sums in double), labels already shifted, -100 ignored:
//   loss_t = logsumexp(l_t) − l_t[y_t],  dl_t = grad_scale·(softmax(l_t) − onehot(y_t)), 0 for ignored rows.
// Each row is read completely before its gradient is written, so dlogits may alias logits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace deltatune {

namespace {
constexpr int32_t kIgnoreIndex = -100;
}

double CpuBackend::cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor* dlogits) {
  const int64_t T = logits.rows(), V = logits.cols();
  cpu::check_numel(labels, T, "cross_entropy labels");
  const float* pl = cpu::f32(logits, "cross_entropy logits");
  const int32_t* py = cpu::i32(labels, "cross_entropy labels");
  float* pd = nullptr;
  if (dlogits) {
    cpu::check_same(*dlogits, logits, "cross_entropy dlogits");
    pd = cpu::f32(*dlogits, "cross_entropy dlogits");
  }
  for (int64_t t = 0; t < T; ++t)
    check(py[t] == kIgnoreIndex || (py[t] >= 0 && py[t] < V),
          "label " + std::to_string(py[t]) + " at position " + std::to_string(t) + " is outside the vocabulary of " +
              std::to_string(V) + " (use -100 to ignore a position)");
  std::vector<double> row_loss(static_cast<size_t>(T), 0.0);
  pool_.parallel_for(T, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, V)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* l = pl + t * V;
      float* d = pd ? pd + t * V : nullptr;
      if (py[t] == kIgnoreIndex) {
        if (d) std::fill(d, d + V, 0.f);
        continue;
      }
      float m = -INFINITY;
      for (int64_t i = 0; i < V; ++i) m = std::max(m, l[i]);
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i]) - m);
      const double lse = double(m) + std::log(sum);
      row_loss[t] = lse - double(l[py[t]]);
      if (d) {
        for (int64_t i = 0; i < V; ++i) d[i] = grad_scale * static_cast<float>(std::exp(double(l[i]) - lse));
        d[py[t]] -= grad_scale;
      }
    }
  });
  double total = 0;
  for (double v : row_loss) total += v;
  return total;
}

}  // namespace deltatune
