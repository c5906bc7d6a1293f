#include "dist/sharded_weights.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace deltatune {

class InProcessShardGroup::Rank : public ShardGatherer {
 public:
  Rank(InProcessShardGroup& group, int r) : group_(group), r_(r) {}
  int rank() const override { return r_; }
  int world() const override { return static_cast<int>(group_.slots_.size()); }
  void all_gather(const uint8_t* shard, uint8_t* full, size_t shard_bytes) override {
    group_.slots_[static_cast<size_t>(r_)] = shard;
    group_.barrier_.arrive_and_wait();  // every shard published
    for (size_t s = 0; s < group_.slots_.size(); ++s)
      if (shard_bytes) std::memcpy(full + s * shard_bytes, group_.slots_[s], shard_bytes);
    group_.barrier_.arrive_and_wait();  // every rank done reading before a shard may change
  }

 private:
  InProcessShardGroup& group_;
  int r_;
};

InProcessShardGroup::InProcessShardGroup(int world)
    : slots_(static_cast<size_t>(std::max(world, 1))), barrier_(std::max<std::ptrdiff_t>(world, 1)) {
  check(world >= 1, "InProcessShardGroup: world must be at least 1, got " + std::to_string(world));
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessShardGroup::~InProcessShardGroup() = default;

ShardGatherer& InProcessShardGroup::rank(int r) {
  check(r >= 0 && r < static_cast<int>(ranks_.size()), "InProcessShardGroup: no rank " + std::to_string(r));
  return *ranks_[static_cast<size_t>(r)];
}

ShardedUnitStore::ShardedUnitStore(const std::vector<std::vector<uint8_t>>& units, ShardGatherer& gatherer)
    : g_(gatherer) {
  const size_t n = static_cast<size_t>(g_.world()), r = static_cast<size_t>(g_.rank());
  for (const auto& u : units) {
    const size_t shard = (u.size() + n - 1) / n;
    std::vector<uint8_t> mine(shard, 0);  // the last rank's shard is zero-padded
    const size_t begin = std::min(u.size(), r * shard), end = std::min(u.size(), begin + shard);
    std::copy(u.begin() + static_cast<std::ptrdiff_t>(begin), u.begin() + static_cast<std::ptrdiff_t>(end),
              mine.begin());
    sizes_.push_back(u.size());
    shard_bytes_.push_back(shard);
    shards_.push_back(std::move(mine));
  }
  full_.resize(units.size());
}

void ShardedUnitStore::gather(size_t unit) {
  check(unit < sizes_.size(), "ShardedUnitStore: no unit " + std::to_string(unit));
  if (full_[unit]) return;
  std::vector<uint8_t> full(shard_bytes_[unit] * static_cast<size_t>(g_.world()));
  g_.all_gather(shards_[unit].data(), full.data(), shard_bytes_[unit]);
  full.resize(sizes_[unit]);  // drop the padding
  full_[unit] = std::move(full);
  ++gathers_;
  peak_ = std::max(peak_, gathered_now());
}

const std::vector<uint8_t>& ShardedUnitStore::acquire(size_t unit, std::optional<size_t> prefetch) {
  gather(unit);
  if (prefetch && *prefetch < sizes_.size()) gather(*prefetch);
  return *full_[unit];
}

void ShardedUnitStore::release(size_t unit) {
  check(unit < sizes_.size(), "ShardedUnitStore: no unit " + std::to_string(unit));
  full_[unit].reset();
}

size_t ShardedUnitStore::resident_bytes() const {
  size_t s = 0;
  for (const auto& sh : shards_) s += sh.size();
  return s;
}

size_t ShardedUnitStore::gathered_now() const {
  return static_cast<size_t>(std::count_if(full_.begin(), full_.end(), [](const auto& f) { return f.has_value(); }));
}

}  // namespace deltatune
