#include "data/packing.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace deltatune {

uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  if (n <= 1) return 0;
  unsigned __int128 m = static_cast<unsigned __int128>(rng()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(rng()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<size_t> shuffled_indices(size_t n, uint64_t seed, uint64_t stream) {
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  // Different streams (epochs, the validation split) must not share a sequence: mix them into the seed.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull);
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(rng, i));
    std::swap(idx[i - 1], idx[j]);
  }
  return idx;
}

std::vector<std::vector<size_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                           int64_t capacity) {
  check(capacity > 0, "packing needs a positive sequence_len");
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  // Segment tree over rows (max free space) finds the first row with room in O(log n).
  size_t size = 1;
  while (size < std::max<size_t>(lengths.size(), 1)) size <<= 1;
  std::vector<int64_t> tree(2 * size, -1);  // -1: row not opened yet
  std::vector<std::vector<size_t>> rows;
  auto update = [&](size_t row, int64_t free_space) {
    size_t k = row + size;
    tree[k] = free_space;
    for (k >>= 1; k >= 1; k >>= 1) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
  };
  for (size_t i : order) {
    const int64_t len = lengths[i];
    check(len <= capacity, "internal: example longer than the packing capacity");
    size_t row;
    if (tree[1] >= len) {
      size_t k = 1;
      while (k < size) k = tree[2 * k] >= len ? 2 * k : 2 * k + 1;
      row = k - size;
    } else {
      row = rows.size();
      rows.emplace_back();
      update(row, capacity);
    }
    rows[row].push_back(i);
    update(row, tree[row + size] - len);
  }
  return rows;
}

EpochPlan plan_epoch(const std::vector<int64_t>& lengths, int64_t sequence_len, bool packing,
                     int64_t micro_batch_size, uint64_t seed, int64_t epoch) {
  check(micro_batch_size > 0, "micro_batch_size must be positive");
  EpochPlan plan;
  const auto order = shuffled_indices(lengths.size(), seed, static_cast<uint64_t>(epoch) + 1);
  for (int64_t l : lengths) plan.tokens += l;
  std::vector<std::vector<size_t>> rows;
  if (packing) {
    std::vector<int64_t> shuffled_lengths(order.size());
    for (size_t i = 0; i < order.size(); ++i) shuffled_lengths[i] = lengths[order[i]];
    auto packed = pack_first_fit_decreasing(shuffled_lengths, sequence_len);
    // FFD leaves rows sorted by their longest example; shuffle the rows so batches mix lengths.
    const auto row_order = shuffled_indices(packed.size(), seed, (static_cast<uint64_t>(epoch) + 1) << 32);
    for (size_t r : row_order) {
      std::vector<size_t> row;
      for (size_t k : packed[r]) row.push_back(order[k]);
      rows.push_back(std::move(row));
    }
  } else {
    for (size_t i : order) rows.push_back({i});
  }
  plan.rows = static_cast<int64_t>(rows.size());
  for (size_t r = 0; r < rows.size(); r += static_cast<size_t>(micro_batch_size)) {
    std::vector<size_t> batch;
    const size_t end = std::min(rows.size(), r + static_cast<size_t>(micro_batch_size));
    for (size_t k = r; k < end; ++k) batch.insert(batch.end(), rows[k].begin(), rows[k].end());
    plan.batches.push_back(std::move(batch));
    plan.rows_per_batch.push_back(static_cast<int64_t>(end - r));
  }
  return plan;
}

}  // namespace deltatune
