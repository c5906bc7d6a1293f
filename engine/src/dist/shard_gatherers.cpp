#include "dist/shard_gatherers.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace deltatune {

namespace {

class HostShardGatherer final : public ShardGatherer {
 public:
  explicit HostShardGatherer(Rendezvous& rv) : rv_(rv) {}
  int rank() const override { return rv_.rank(); }
  int world() const override { return rv_.world(); }
  uint64_t start_all_gather(const void* shard, void* full, size_t shard_bytes) override {
    const auto all = rv_.all_gather(std::string(static_cast<const char*>(shard), shard_bytes));
    for (size_t r = 0; r < all.size(); ++r) {
      check(all[r].size() == shard_bytes, "internal: host shard gather: rank " + std::to_string(r) + " sent " +
                                              std::to_string(all[r].size()) + " bytes, expected " +
                                              std::to_string(shard_bytes));
      std::memcpy(static_cast<char*>(full) + r * shard_bytes, all[r].data(), shard_bytes);
    }
    return 0;
  }
  void ready(uint64_t) override {}

 private:
  Rendezvous& rv_;
};

}  // namespace

std::unique_ptr<ShardGatherer> make_host_shard_gatherer(Rendezvous& rv) {
  return std::make_unique<HostShardGatherer>(rv);
}

class InProcessShardGroup::Rank final : public ShardGatherer {
 public:
  Rank(InProcessShardGroup& group, int r) : group_(group), r_(r) {}
  int rank() const override { return r_; }
  int world() const override { return static_cast<int>(group_.slots_.size()); }
  uint64_t start_all_gather(const void* shard, void* full, size_t shard_bytes) override {
    group_.slots_[static_cast<size_t>(r_)] = shard;
    group_.barrier_.arrive_and_wait();  // every shard published
    for (size_t s = 0; s < group_.slots_.size(); ++s)
      if (shard_bytes) std::memcpy(static_cast<char*>(full) + s * shard_bytes, group_.slots_[s], shard_bytes);
    group_.barrier_.arrive_and_wait();  // every rank done reading before a shard may change
    return 0;
  }
  void ready(uint64_t) override {}

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

}  // namespace deltatune
