// ShardedUnitStore over InProcessShardGroup (threads as ranks, a CPU backend each): every rank keeps 1/N of each
// unit, gathers give back the exact bytes in forward and backward order with prefetch, and at most two units are
// held.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "dist/shard_gatherers.h"
#include "model/sharded_units.h"

namespace deltatune {
namespace {

std::vector<std::vector<uint8_t>> random_units() {
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> units;
  // Sizes that do and do not divide by 2, 3, 4 or 256; an empty unit; one smaller than the world.
  for (size_t n : {4096u, 1001u, 0u, 3u, 777u, 12288u, 5u}) {
    std::vector<uint8_t> u(n);
    for (auto& b : u) b = static_cast<uint8_t>(rng());
    units.push_back(std::move(u));
  }
  return units;
}

Tensor bytes_tensor(const std::vector<uint8_t>& u) {
  Tensor t = host_tensor({static_cast<int64_t>(u.size())}, DType::U8);
  if (!u.empty()) std::memcpy(t.data, u.data(), u.size());
  return t;
}

bool same_bytes(const Tensor& t, const std::vector<uint8_t>& u) {
  return t.nbytes() == u.size() && (u.empty() || std::memcmp(t.data, u.data(), u.size()) == 0);
}

TEST(ShardedUnits, GathersGiveTheUnitsBackWithTwoInFlight) {
  const auto units = random_units();
  for (int world : {1, 2, 3, 4}) {
    InProcessShardGroup group(world);
    std::vector<std::string> failures(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        std::string& fail = failures[static_cast<size_t>(r)];
        auto be = make_cpu_backend(1);
        ShardedUnitStore store(*be, group.rank(r));
        for (const auto& u : units) store.add(bytes_tensor(u));
        size_t expect_resident = 0;  // per unit: ceil(size / world) rounded up to 256 bytes
        for (const auto& u : units) expect_resident += (u.size() + world * 256 - 1) / (world * 256) * 256;
        if (store.resident_bytes() != expect_resident) fail += "resident bytes; ";
        const size_t n = units.size();
        // Forward: unit i with i+1 prefetched, freed after use.
        for (size_t i = 0; i < n; ++i) {
          const Tensor& full = store.acquire(i, i + 1 < n ? std::optional<size_t>(i + 1) : std::nullopt);
          if (!same_bytes(full, units[i])) fail += "forward unit " + std::to_string(i) + " differs; ";
          store.release(i);
        }
        // Backward: last to first, the previous one prefetched.
        for (size_t i = n; i-- > 0;) {
          const Tensor& full = store.acquire(i, i > 0 ? std::optional<size_t>(i - 1) : std::nullopt);
          if (!same_bytes(full, units[i])) fail += "backward unit " + std::to_string(i) + " differs; ";
          store.release(i);
        }
        if (store.gathered_now() != 0) fail += "units left gathered; ";
        if (store.gathered_peak() != (n > 1 ? 2u : 1u)) fail += "peak " + std::to_string(store.gathered_peak()) + "; ";
        if (store.gathers() != 2 * n) fail += "gathers " + std::to_string(store.gathers()) + "; ";
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "world " << world << " rank " << r;
  }
}

TEST(ShardedUnits, UnknownUnitIsAnError) {
  InProcessShardGroup group(1);
  auto be = make_cpu_backend(1);
  ShardedUnitStore store(*be, group.rank(0));
  for (const auto& u : random_units()) store.add(bytes_tensor(u));
  EXPECT_THROW(store.acquire(99), Error);
  EXPECT_THROW(store.release(99), Error);
  EXPECT_THROW(InProcessShardGroup(0), Error);
}

}  // namespace
}  // namespace deltatune
