// Picks the next token of one sequence from its logits, as Hugging Face's generate orders the steps:
// repetition penalty, then (sampling only) temperature, top-k, top-p, and a draw from the softmax.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <unordered_set>

#include "deltatune/generate.h"

namespace deltatune {

class TokenSampler {
 public:
  TokenSampler(const SamplingParams& p, std::span<const int32_t> prompt);
  // The next token; `logits` (one row of V) is modified in place. Remembers the token for the penalty.
  int32_t next(std::span<float> logits) {
    const int32_t t = pick(logits);
    remember(t);
    return t;
  }
  // next() in two halves, for callers that may replace the pick (workers that generate together take rank 0's).
  int32_t pick(std::span<float> logits);
  void remember(int32_t token) { seen_.insert(token); }

 private:
  SamplingParams p_;
  std::unordered_set<int32_t> seen_;
  std::mt19937_64 rng_;
};

}  // namespace deltatune
