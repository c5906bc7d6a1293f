// Data parallelism's pure parts: which micro-batches each worker trains, how the LoRA gradients are laid out
// and cut into buckets, the launcher's environment variables, --gpus and the run file's gpus key.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "deltatune/distributed.h"
#include "deltatune/run_config.h"
#include "dist/grad_buckets.h"
#include "dist/shard.h"

namespace deltatune {
namespace {

TEST(DistShard, WorkersTogetherTrainExactlyTheOneGpuStep) {
  for (int world : {1, 2, 3, 4, 8})
    for (int64_t per_worker : {1, 2, 5}) {
      const int64_t global = per_worker * world;
      std::vector<int> owner(static_cast<size_t>(global), -1);
      for (int r = 0; r < world; ++r) {
        const auto mine = shard_positions(global, r, world);
        EXPECT_EQ(static_cast<int64_t>(mine.size()), per_worker) << "world " << world << " rank " << r;
        EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
        for (int64_t p : mine) {
          ASSERT_GE(p, 0);
          ASSERT_LT(p, global);
          EXPECT_EQ(owner[static_cast<size_t>(p)], -1) << "position " << p << " trained twice";
          owner[static_cast<size_t>(p)] = r;
        }
      }
      for (int64_t p = 0; p < global; ++p) EXPECT_EQ(owner[static_cast<size_t>(p)], static_cast<int>(p % world));
    }
}

TEST(DistShard, GlobalBatchStaysThatOfTheRunOnResume) {
  EXPECT_EQ(global_micro_batches(4, 2, 0), 8);   // new run: accumulation x workers
  EXPECT_EQ(global_micro_batches(0, 3, 0), 3);   // accumulation < 1 counts as 1
  EXPECT_EQ(global_micro_batches(4, 1, 8), 8);   // resumed on 1 GPU from a 2-GPU checkpoint
  EXPECT_EQ(per_worker_accumulation(8, 1), 8);
  EXPECT_EQ(per_worker_accumulation(8, 4), 2);
  try {
    per_worker_accumulation(6, 4);
    FAIL() << "6 micro-batches cannot be shared by 4 GPUs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divides 6"), std::string::npos) << e.what();
  }
}

std::vector<GradSlot> slots_of(const std::vector<std::pair<int, int64_t>>& v) {
  std::vector<GradSlot> s;
  for (auto [layer, n] : v) s.push_back({layer, n});
  return s;
}

TEST(DistBuckets, LayoutIsAlignedAscendingAndDisjoint) {
  const auto slots = slots_of({{0, 10}, {0, 64}, {1, 65}, {3, 1}});
  const GradLayout l = layout_gradients(slots, 64);
  EXPECT_EQ(l.offset, (std::vector<int64_t>{0, 64, 128, 256}));
  EXPECT_EQ(l.total, 320);
  EXPECT_THROW(layout_gradients(slots_of({{2, 4}, {1, 4}}), 1), Error);
}

TEST(DistBuckets, EverySlotInOneBucketReadyWhenItsLowestLayerIsDone) {
  // 6 layers, 2 slots each of different sizes; caps from tiny (a bucket per slot) to huge (one bucket).
  std::vector<std::pair<int, int64_t>> v;
  for (int layer = 0; layer < 6; ++layer) {
    v.push_back({layer, 100 + 37 * layer});
    v.push_back({layer, 300 - 11 * layer});
  }
  const auto slots = slots_of(v);
  const GradLayout l = layout_gradients(slots, 16);
  for (int64_t cap : {1, 200, 500, 1000, 1 << 30}) {
    const auto buckets = plan_buckets(slots, l, cap);
    ASSERT_FALSE(buckets.empty());
    // Buckets tile [0, total) from the top down, in the order the backward completes them.
    EXPECT_EQ(buckets.front().end, l.total);
    EXPECT_EQ(buckets.back().begin, 0);
    for (size_t b = 1; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].end, buckets[b - 1].begin);
      EXPECT_LE(buckets[b].ready_after_layer, buckets[b - 1].ready_after_layer);
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      int holders = 0;
      for (const auto& b : buckets) {
        if (l.offset[k] >= b.begin && l.offset[k] + slots[k].numel <= b.end) {
          ++holders;
          // Ready only once this slot's layer is done: the bucket's lowest layer is at most the slot's.
          EXPECT_LE(b.ready_after_layer, slots[k].layer);
        }
      }
      EXPECT_EQ(holders, 1) << "slot " << k << " cap " << cap;
    }
    for (const auto& b : buckets) {
      // Over the cap only when a single slot is larger than it.
      const bool single = std::count_if(l.offset.begin(), l.offset.end(),
                                        [&](int64_t o) { return o >= b.begin && o < b.end; }) == 1;
      EXPECT_TRUE(b.end - b.begin <= cap || single) << "cap " << cap;
    }
    if (cap == 1) EXPECT_EQ(buckets.size(), slots.size());
    if (cap == (1 << 30)) EXPECT_EQ(buckets.size(), 1u);
  }
}

const char* from(const std::map<std::string, std::string>& m, const char* k) {
  const auto it = m.find(k);
  return it == m.end() ? nullptr : it->second.c_str();
}

DistWorld world_of(const std::map<std::string, std::string>& env) {
  return dist_world_from_env([&](const char* k) { return from(env, k); });
}

TEST(DistEnv, TorchrunSlurmAndNone) {
  EXPECT_FALSE(world_of({}).active());
  const DistWorld t = world_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.master_addr, "node0");
  EXPECT_EQ(t.master_port, 29500);
  // Slurm's own variables when torchrun's are absent; torchrun's win when both are there.
  const DistWorld s = world_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "1234"},
                                {"DELTATUNE_DIST_TIMEOUT", "30"}});
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 8);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 1);  // a list, not a number: not taken
  EXPECT_EQ(s.timeout_s, 30);
  EXPECT_EQ(world_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})
                .rank,
            1);
  // A single task needs no master.
  EXPECT_FALSE(world_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).active());
}

TEST(DistEnv, IncompleteOrInconsistentSetsNameTheVariable) {
  auto message = [](const std::map<std::string, std::string>& env) {
    try {
      world_of(env);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK='2'"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "x"}})
                .find("MASTER_PORT='x'"),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).find("scontrol show hostnames"),
            std::string::npos);
}

TEST(DistEnv, GpuListsAndTheWorkersGpu) {
  EXPECT_EQ(parse_gpu_list("0,1,3").ids, (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(parse_gpu_list("all").all);
  for (const char* bad : {"", "0,,1", "a", "0,-1", "1,1", "0 1"}) EXPECT_THROW(parse_gpu_list(bad), Error) << bad;
  DistWorld w;
  w.world_size = 2;
  w.local_rank = 1;
  EXPECT_EQ(worker_gpu(w, {2, 3}, 4), 3);
  EXPECT_EQ(worker_gpu(w, {}, 4), 1);
  EXPECT_EQ(worker_gpu(w, {2, 3}, 1), 0);  // the launcher gave this worker its own GPU only
  EXPECT_THROW(worker_gpu(w, {2}, 4), Error);
}

TEST(DistConfig, GpusKeyParsesValidatesAndRoundTrips) {
  const RunConfig a = run_config_from_yaml_string("gpus: [0, 2]\n");
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 2}));
  EXPECT_FALSE(a.gpus_all);
  const RunConfig b = run_config_from_yaml_string("gpus: all\n");
  EXPECT_TRUE(b.gpus_all);
  EXPECT_EQ(run_config_from_yaml_string("gpus: 1\n").gpus, (std::vector<int>{1}));
  for (const RunConfig& c : {a, b, RunConfig{}}) {
    const RunConfig back = run_config_from_yaml_string(run_config_to_yaml(c));
    EXPECT_EQ(back.gpus, c.gpus);
    EXPECT_EQ(back.gpus_all, c.gpus_all);
  }
  EXPECT_NE(run_config_to_yaml(b).find("gpus: all"), std::string::npos);
  EXPECT_NE(run_config_to_yaml(a).find("gpus: [0, 2]"), std::string::npos);
  auto message = [](const std::string& yaml) {
    try {
      run_config_from_yaml_string(yaml);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("gpus: [0, 0]\n").find("listed twice"), std::string::npos);
  EXPECT_NE(message("gpus: [0, -1]\n").find("gpus[1]"), std::string::npos);
  EXPECT_NE(message("gpus: [0, x]\n").find("gpus[1]"), std::string::npos);
  EXPECT_NE(message("gpus: some\n").find("gpus"), std::string::npos);
  EXPECT_NE(message("gpu: 1\ngpus: [0, 1]\n").find("both set"), std::string::npos);
}

}  // namespace
}  // namespace deltatune
