// The tensor-core attention tile lists (kernels/attention/attention_tile_list.h), on the host: both halves
// hold every 64-token tile once; the dK/dV half pairs tiles 2i, 2i+1 of one sequence (the Hopper dK/dV
// clusters share Q / dO tiles only then) with odd last tiles paired across sequences; one sequence keeps the
// plain cost order.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "attention/attention_tile_list.h"

namespace {

using deltatune::kernels::attention_mma_tile_list;
using deltatune::kernels::kAttnMmaTile;
using Tile = std::pair<int32_t, int32_t>;  // (sequence, first token)

std::vector<Tile> all_tiles(const std::vector<int32_t>& cu) {
  std::vector<Tile> t;
  for (size_t n = 0; n + 1 < cu.size(); ++n)
    for (int32_t x = cu[n]; x < cu[n + 1]; x += kAttnMmaTile) t.push_back({int32_t(n), x});
  return t;
}

// The q half and the k half of the flat list.
std::pair<std::vector<Tile>, std::vector<Tile>> halves(const std::vector<int32_t>& flat) {
  std::vector<Tile> q, k;
  const size_t n = flat.size() / 4;
  for (size_t i = 0; i < n; ++i) q.push_back({flat[2 * i], flat[2 * i + 1]});
  for (size_t i = n; i < 2 * n; ++i) k.push_back({flat[2 * i], flat[2 * i + 1]});
  return {q, k};
}

// Checks the permutations and returns the number of dK/dV pairs whose tiles lie in two sequences.
int check(const std::vector<int32_t>& cu) {
  const std::vector<int32_t> flat = attention_mma_tile_list(cu);
  const std::vector<Tile> want = all_tiles(cu);
  EXPECT_EQ(flat.size(), 4 * want.size());
  const auto [q, k] = halves(flat);
  const std::set<Tile> w(want.begin(), want.end());
  EXPECT_EQ(std::set<Tile>(q.begin(), q.end()), w);
  EXPECT_EQ(std::set<Tile>(k.begin(), k.end()), w);
  EXPECT_EQ(q.size(), want.size());
  EXPECT_EQ(k.size(), want.size());
  int split = 0;
  for (size_t i = 0; i + 1 < k.size(); i += 2) {
    if (k[i].first != k[i + 1].first) {
      ++split;
      continue;
    }
    EXPECT_EQ(k[i + 1].second, k[i].second + kAttnMmaTile) << "pair " << i / 2;  // tiles 2j, 2j+1
    EXPECT_EQ((k[i].second - cu[k[i].first]) / kAttnMmaTile % 2, 0) << "pair " << i / 2;
  }
  return split;
}

TEST(AttentionTileList, OneSequenceInOrder) {
  for (int32_t T : {1, 64, 65, 300, 4096}) {
    const std::vector<int32_t> cu = {0, T};
    EXPECT_EQ(check(cu), 0);
    const auto [q, k] = halves(attention_mma_tile_list(cu));
    const std::vector<Tile> want = all_tiles(cu);
    EXPECT_EQ(k, want);  // most queries after the tile first
    EXPECT_EQ(q, std::vector<Tile>(want.rbegin(), want.rend()));  // most keys before the tile first
  }
}

TEST(AttentionTileList, PackedPairsShareASequence) {
  EXPECT_EQ(check({0, 1024, 2048, 3072, 4096}), 0);                    // 4 x 16 tiles
  EXPECT_EQ(check({0, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4096}), 0);  // 8 x 8 tiles
  EXPECT_EQ(check({0, 1000, 1700, 3200, 4096}), 0);  // 16, 11, 24, 14 tiles: the odd last tile is the list's last
  EXPECT_EQ(check({0, 192, 384, 576, 700}), 1);       // 3, 3, 3, 2 tiles: one pair across, one last entry
  EXPECT_EQ(check({0, 1, 16, 80, 145, 345, 678}), 1);  // 1, 1, 1, 2, 4, 6 tiles
  EXPECT_EQ(check({}), 0);
  EXPECT_EQ(check({0}), 0);
}

TEST(AttentionTileList, PairsInCostOrder) {
  // Pairs by their first tile's queries after it, most first: (0, 1) of every sequence before (2, 3).
  const std::vector<int32_t> cu = {0, 256, 512};
  const auto [q, k] = halves(attention_mma_tile_list(cu));
  const std::vector<Tile> want = {{0, 0}, {0, 64}, {1, 256}, {1, 320}, {0, 128}, {0, 192}, {1, 384}, {1, 448}};
  EXPECT_EQ(k, want);
}

}  // namespace
