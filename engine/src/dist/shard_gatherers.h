// ShardGatherers for host memory (the CPU backend): through the workers' host connections (one process per
// rank), and threads of one process as ranks (tests of the sharded model without GPUs or processes). Both
// gather at once; start_all_gather returns when `full` holds every shard.
#pragma once
#include <barrier>
#include <memory>
#include <vector>

#include "backend/shard_gatherer.h"
#include "dist/rendezvous.h"

namespace deltatune {

// CPU workers of a job: the shards travel over the rendezvous connections.
std::unique_ptr<ShardGatherer> make_host_shard_gatherer(Rendezvous& rv);

// The ranks of one process (threads), for tests: rank(r) is the gatherer thread r uses.
class InProcessShardGroup {
 public:
  explicit InProcessShardGroup(int world);
  ~InProcessShardGroup();
  ShardGatherer& rank(int r);

 private:
  class Rank;
  std::vector<const void*> slots_;
  std::barrier<> barrier_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace deltatune
