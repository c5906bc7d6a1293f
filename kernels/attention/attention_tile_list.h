// The tensor-core attention kernels' tile lists (host): kAttnMmaTile-token tiles that never straddle a sequence,
// each as (sequence index, first token), built from cu_seqlens by CudaBackend::attention_tiles_mma and by
// dev/emu/attention.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/attention.cuh"

namespace deltatune::kernels {

// I32 (2·ntiles, 2) flattened: the first ntiles rows (the forward's and dQ's list) ordered by query-side cost
// (keys before the tile), the next ntiles (the dK/dV list) by key-side cost (queries after it), most expensive
// first so the longest blocks start in the first wave. Both are permutations of the same tiles.
// The dK/dV list comes in pairs of one sequence: entries 2m and 2m+1 are tiles 2i and 2i+1 of one sequence (the
// Hopper dK/dV kernel runs them as a cluster that shares each Q / dO tile), pairs ordered by their first tile's
// cost. The last tile of a sequence with an odd tile count (the cheapest, causal) pairs with another such tile,
// most expensive first; those pairs and an odd list's last entry load their own tiles. No padding entries: a
// padding block would hold its SM for its partner's whole walk. One sequence gives the plain cost order.
inline std::vector<int32_t> attention_mma_tile_list(const std::vector<int32_t>& cu) {
  struct Tile {
    int32_t seq, t0, before, after;  // tokens of the sequence before the tile start / from it on
  };
  struct Pair {
    Tile a, b;
  };
  std::vector<Tile> tiles, rest;  // rest: the odd last tiles
  std::vector<Pair> pairs;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    const size_t first = tiles.size();
    for (int32_t t = cu[n]; t < cu[n + 1]; t += kAttnMmaTile)
      tiles.push_back({static_cast<int32_t>(n), t, t - cu[n], cu[n + 1] - t});
    size_t i = first;
    for (; i + 1 < tiles.size(); i += 2) pairs.push_back({tiles[i], tiles[i + 1]});
    if (i < tiles.size()) rest.push_back(tiles[i]);
  }
  std::vector<int32_t> flat;
  if (tiles.empty()) return flat;
  flat.reserve(tiles.size() * 4);
  auto put = [&](const Tile& t) { flat.insert(flat.end(), {t.seq, t.t0}); };
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.before > b.before; });
  for (const Tile& t : tiles) put(t);
  std::stable_sort(rest.begin(), rest.end(), [](const Tile& a, const Tile& b) { return a.after > b.after; });
  for (size_t i = 0; i + 1 < rest.size(); i += 2) pairs.push_back({rest[i], rest[i + 1]});
  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) { return x.a.after > y.a.after; });
  for (const Pair& p : pairs) put(p.a), put(p.b);
  if (rest.size() % 2) put(rest.back());
  return flat;
}

}  // namespace deltatune::kernels
