// The workers' TCP connections (a star around rank 0 at MASTER_ADDR:MASTER_PORT): joining, small host
// collectives in rank order (identical results on every rank), and liveness. The connections stay open for
// the whole run; a worker that ends closes them and its peers see that at their next poll.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "backend/gradient_reducer.h"  // DistFault
#include "deltatune/distributed.h"

namespace deltatune {

class Rendezvous {
 public:
  // Rank 0 listens on master_port, the others connect to master_addr:master_port (retrying while rank 0 is
  // not up yet); waits at most world.join_timeout_s. Throws DistFault naming the address and missing ranks.
  explicit Rendezvous(const DistWorld& world);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  // "rank 1 (node7, pid 4242)".
  std::string describe(int rank) const;

  // Rank 0's `bytes` on every rank.
  std::string broadcast(const std::string& bytes);
  // Every rank's bytes, in rank order.
  std::vector<std::string> all_gather(const std::string& mine);
  // Rank 0's parts[r] on rank r (rank 0 passes one part per rank; the others pass nothing): each rank receives
  // its own part only.
  std::string scatter(const std::vector<std::string>& parts);
  // In place: element-wise sums over the ranks, added in rank order on rank 0 (every rank gets the same bits).
  void sum(std::span<double> values);
  void sum(std::span<float> values);
  // Returns once every rank has called it.
  void barrier() { all_gather(""); }

  // Non-blocking: "" while every peer is connected and well, else what happened (sticky).
  std::string poll_fault();
  // Best effort, never blocks or throws: tells the peers that this rank is failing and why.
  void announce_failure(const std::string& why) noexcept;

  // Seconds a host exchange may wait for a peer (the job's collective timeout).
  double timeout_s() const { return timeout_s_; }

 private:
  enum class Kind : uint32_t { Data = 1, Fail = 2 };
  void send(int peer, Kind kind, const std::string& payload);
  std::string recv(int peer);                // throws DistFault on a fault or the timeout
  void pump(int timeout_ms);                 // reads whatever arrived into the inboxes
  bool read_message(int peer);               // false: the peer closed or failed (fault_ set)
  void set_fault(const std::string& why);
  template <class T>
  void sum_values(std::span<T> values);      // both sum()s: gather on rank 0, add in rank order, broadcast
  int fd_of(int peer) const { return fds_[static_cast<size_t>(peer)]; }

  int rank_ = 0, world_ = 1;
  double timeout_s_ = 600;
  std::vector<int> fds_;                     // rank 0: one per worker; workers: fds_[0] to rank 0
  std::vector<std::deque<std::string>> inbox_;
  std::vector<std::string> names_;           // "host, pid N" per rank
  std::string fault_;
};

}  // namespace deltatune
