// The workers' connections, with each "worker" a thread of this test: joining, host collectives that give
// every rank the same bits, a failure announced by one rank reaching the others, a closed connection seen as
// a fault, a silent peer ending in the timeout, and a rank that never comes.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "dist/rendezvous.h"
#include "loopback_world.h"

namespace deltatune {
namespace {

using testing_loopback::free_port;
using testing_loopback::world;

// Runs fn(rank) on `size` threads (rank 0 on this one last, so the workers start connecting first).
template <class Fn>
void on_ranks(int size, Fn fn) {
  std::vector<std::future<void>> others;
  for (int r = 1; r < size; ++r) others.push_back(std::async(std::launch::async, fn, r));
  fn(0);
  for (auto& f : others) f.get();
}

TEST(DistRendezvous, CollectivesGiveEveryRankTheSameResult) {
  const int port = free_port(), size = 3;
  on_ranks(size, [&](int rank) {
    Rendezvous rv(world(rank, size, port));
    EXPECT_EQ(rv.rank(), rank);
    EXPECT_EQ(rv.broadcast(rank == 0 ? "from zero" : "ignored"), "from zero");
    const auto all = rv.all_gather("r" + std::to_string(rank));
    EXPECT_EQ(all, (std::vector<std::string>{"r0", "r1", "r2"}));
    const std::vector<std::string> parts{"to 0", "to 1", "to 2"};  // each rank receives its own part only
    EXPECT_EQ(rv.scatter(rank == 0 ? parts : std::vector<std::string>{}), parts[static_cast<size_t>(rank)]);
    // Sums added in rank order on rank 0: 0.1 + 0.2 + 0.3 exactly as a loop would add them, on every rank.
    std::vector<double> d{0.1 * (rank + 1), static_cast<double>(rank)};
    rv.sum(d);
    EXPECT_EQ(d[0], (0.1 * 1 + 0.1 * 2) + 0.1 * 3);
    EXPECT_EQ(d[1], 3.0);
    std::vector<float> f(1000, 1.f + static_cast<float>(rank));
    rv.sum(f);
    for (float x : f) ASSERT_EQ(x, 6.f);
    EXPECT_EQ(rv.poll_fault(), "");  // before the last exchange: after it a finished peer may be gone
    rv.barrier();
    EXPECT_NE(rv.describe(1).find("rank 1 ("), std::string::npos);
  });
}

TEST(DistRendezvous, AnnouncedFailureReachesEveryRank) {
  const int port = free_port(), size = 3;
  on_ranks(size, [&](int rank) {
    Rendezvous rv(world(rank, size, port));
    rv.barrier();
    if (rank == 2) {
      rv.announce_failure("rank 2: out of GPU memory");
      return;
    }
    // Ranks 0 and 1 wait in an exchange rank 2 never joins: the announcement ends it, not the timeout.
    const auto t0 = std::chrono::steady_clock::now();
    try {
      rv.barrier();
      ADD_FAILURE() << "the barrier should fail";
    } catch (const DistFault& e) {
      EXPECT_EQ(std::string(e.what()), "rank 2: out of GPU memory");
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  });
}

TEST(DistRendezvous, ClosedConnectionIsAFaultNamingTheRank) {
  const int port = free_port(), size = 2;
  on_ranks(size, [&](int rank) {
    auto rv = std::make_unique<Rendezvous>(world(rank, size, port));
    rv->barrier();
    if (rank == 1) {
      rv.reset();  // as a killed process: the kernel closes its sockets
      return;
    }
    std::string fault;
    for (int i = 0; i < 200 && fault.empty(); ++i) {
      fault = rv->poll_fault();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_NE(fault.find("rank 1 ("), std::string::npos) << fault;
    EXPECT_NE(fault.find("closed its connection"), std::string::npos) << fault;
    EXPECT_THROW(rv->barrier(), DistFault);
  });
}

TEST(DistRendezvous, SilentPeerEndsInTheTimeout) {
  const int port = free_port(), size = 2;
  std::promise<void> release;
  auto released = release.get_future().share();
  on_ranks(size, [&](int rank) {
    Rendezvous rv(world(rank, size, port, /*timeout=*/0.5));
    if (rank == 1) {
      released.wait();  // connected but never answering, until rank 0 has given up
      return;
    }
    try {
      rv.barrier();
      ADD_FAILURE() << "the barrier should time out";
    } catch (const DistFault& e) {
      EXPECT_NE(std::string(e.what()).find("no answer from rank 1"), std::string::npos) << e.what();
    }
    release.set_value();
  });
}

TEST(DistRendezvous, MissingRankIsNamedAfterTheJoinTimeout) {
  const int port = free_port();
  try {
    Rendezvous rv(world(0, 3, port, 20, /*join=*/0.5));
    FAIL() << "nobody joined";
  } catch (const DistFault& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2"), std::string::npos) << e.what();
  }
  try {
    Rendezvous rv(world(1, 2, port, 20, 0.5));
    FAIL() << "rank 0 is not there";
  } catch (const DistFault& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltatune
