#include "decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deltatune {

TokenSampler::TokenSampler(const SamplingParams& p, std::span<const int32_t> prompt)
    : p_(p), seen_(prompt.begin(), prompt.end()), rng_(p.seed) {}

int32_t TokenSampler::pick(std::span<float> logits) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (p_.repetition_penalty != 1.0) {
    const float pen = static_cast<float>(p_.repetition_penalty);
    for (int32_t id : seen_)
      if (id >= 0 && id < V) logits[id] = logits[id] < 0 ? logits[id] * pen : logits[id] / pen;
  }
  int32_t pick = 0;
  if (p_.temperature <= 0) {
    // Argmax; ties take the lowest id (torch.argmax).
    pick = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    const float inv_t = static_cast<float>(1.0 / p_.temperature);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    // Descending by logit, ties by id, so the kept set does not depend on the sort's stability.
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    int64_t keep = V;
    if (p_.top_k > 0 && p_.top_k < V) {
      keep = p_.top_k;
      std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    } else {
      std::sort(order.begin(), order.end(), by_logit);
    }
    const float mx = logits[order[0]] * inv_t;
    std::vector<double> prob(static_cast<size_t>(keep));
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(double(logits[order[i]]) * inv_t - mx);
    if (p_.top_p < 1.0) {
      // The smallest prefix whose probability reaches top_p (at least one token).
      double acc = 0;
      int64_t n = 0;
      while (n < keep) {
        acc += prob[n++] / sum;
        if (acc >= p_.top_p) break;
      }
      keep = n;
      sum = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
    }
    std::uniform_real_distribution<double> u(0.0, sum);
    double r = u(rng_), acc = 0;
    pick = order[keep - 1];
    for (int64_t i = 0; i < keep; ++i) {
      acc += prob[i];
      if (r < acc) {
        pick = order[i];
        break;
      }
    }
  }
  return pick;
}

}  // namespace deltatune
