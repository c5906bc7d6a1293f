// Deterministic shuffling and packing of tokenized examples into micro-batches.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "data/batch.h"

namespace deltatune {

// Uniform integer in [0, n) from a 64-bit engine (Lemire's method with rejection), so results do not
// depend on the standard library's distribution implementation.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n);
// Fisher-Yates permutation of 0..n-1 seeded by (seed, stream).
std::vector<size_t> shuffled_indices(size_t n, uint64_t seed, uint64_t stream);

// First-fit-decreasing bin packing of the given example lengths (each <= capacity) into rows of
// `capacity` tokens. Ties in length keep the input order. Returns rows of indices into `lengths`.
std::vector<std::vector<size_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                           int64_t capacity);

struct EpochPlan {
  std::vector<std::vector<size_t>> batches;  // example indices per micro-batch, in order
  std::vector<int64_t> rows_per_batch;       // packed rows (or examples) per micro-batch
  int64_t rows = 0;
  int64_t tokens = 0;
};

// Epoch order: examples shuffled with (seed, epoch); with packing they are packed (FFD) into rows of
// sequence_len, the rows shuffled and grouped micro_batch_size at a time; without packing the
// shuffled examples are grouped micro_batch_size at a time. The last micro-batch may be smaller.
EpochPlan plan_epoch(const std::vector<int64_t>& lengths, int64_t sequence_len, bool packing,
                     int64_t micro_batch_size, uint64_t seed, int64_t epoch);

}  // namespace deltatune
