// One NCCL communicator of a job's ranks, non-blocking (config.blocking = 0): no NCCL call ever blocks the
// host, and every wait is a poll that also watches the peers (the rendezvous connections), NCCL's asynchronous
// error and the timeout; on a fault the communicator is aborted (its kernels stop) and the wait throws
// DistFault with one message. The gradient reducer and the shard gatherer each own one (their collectives run
// on streams of their own and must not interleave). Only compiled with NCCL (DT_HAVE_NCCL).
#pragma once
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "backend/gradient_reducer.h"

namespace deltatune::cuda {

class NcclComm {
 public:
  // Joins the communicator: rank 0 makes the unique id, setup.share_from_rank0 hands it to the others.
  NcclComm(int device, const ReducerSetup& setup, const char* name);
  ~NcclComm() { abort(); }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int rank() const { return s_.rank; }
  int world() const { return s_.world; }
  // Throws when an earlier fault aborted the communicator; `op` names the collective.
  void check_alive(const char* op) const;
  // An NCCL call on the communicator: returns once it is issued (ncclInProgress polled away). Throws DistFault.
  void call(ncclResult_t r, const char* what);
  // Ends the communicator at once; operations in flight are dropped. Never throws.
  void abort() noexcept;

  // Polls `done` (spinning briefly, then sleeping 100 µs); in between checks NCCL's asynchronous error, the
  // peers and the timeout. Any of those aborts the communicator and throws DistFault.
  template <class Done>
  void wait_for(Done done, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto next_check = start;
    for (int spins = 0;; ++spins) {
      if (done()) return;
      const auto now = Clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(2);
        check_faults(what, std::chrono::duration<double>(now - start).count());
      }
      if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  void check_faults(const char* what, double waited_s);
  [[noreturn]] void fail_nccl(ncclResult_t r, const char* what);

  ReducerSetup s_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace deltatune::cuda
