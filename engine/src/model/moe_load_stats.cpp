#include "model/moe_load_stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace deltatune {

MoeLoadStats moe_load_stats(const Tensor& load) {
  MoeLoadStats s;
  if (!load.defined() || load.numel() == 0) return s;
  check(load.device == Device::CPU && load.dtype == DType::F32 && load.ndim() == 2,
        "moe_load_stats: expected a host F32 [layers, experts] tensor, got " + shape_str(load.shape));
  const int64_t L = load.dim(0), E = load.dim(1);
  double ratio_sum = 0, cv_sum = 0;
  int64_t layers = 0;
  for (int64_t l = 0; l < L; ++l) {
    const float* c = load.ptr<float>() + l * E;
    double sum = 0, mx = 0;
    for (int64_t e = 0; e < E; ++e) {
      sum += c[e];
      mx = std::max(mx, double(c[e]));
    }
    if (sum <= 0) continue;
    const double mean = sum / double(E);
    double var = 0;
    for (int64_t e = 0; e < E; ++e) var += (c[e] - mean) * (c[e] - mean);
    var /= double(E);
    ratio_sum += mx / mean;
    cv_sum += std::sqrt(var) / mean;
    ++layers;
  }
  if (layers == 0) return s;
  s.max_ratio = ratio_sum / double(layers);
  s.cv = cv_sum / double(layers);
  return s;
}

}  // namespace deltatune
