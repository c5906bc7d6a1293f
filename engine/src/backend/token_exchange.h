// The all-to-all of expert parallel (model/expert_parallel.h): token rows travel to the rank that holds their
// expert and the expert outputs travel back. NCCL send/recv on CUDA (backend/cuda/nccl_exchange.cpp); threads of one process
// for CPU tests (dist/expert_exchange.h).
//
// Host waits. Only gather_offsets_wait waits on the host for the device (the sizes of a layer's exchange come
// from its routing); an all-to-all is enqueued and the compute work after join() sees it. pace() and finish()
// wait for exchanges enqueued earlier, polling for faults on the way, so a dead peer is noticed: the host never
// blocks on a hung exchange inside a plain CUDA call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace deltatune {

class TokenExchange {
 public:
  virtual ~TokenExchange() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Starts gathering every rank's `offsets` (I32 [n] on the backend's device, the same n on every rank) after
  // the compute work enqueued so far; gather_offsets_wait returns them on the host, in rank order. One gather in
  // flight at a time; compute work may be enqueued in between.
  virtual void gather_offsets_start(const void* offsets, int64_t n) = 0;
  virtual std::vector<std::vector<int32_t>> gather_offsets_wait() = 0;
  // Sends send_bytes[d] bytes (consecutive in `send`, destinations in rank order) to each rank d and receives
  // recv_bytes[s] bytes from each rank s into `recv` (sources in rank order); both on the backend's device. The
  // sizes must agree pairwise. Ordered after the compute work enqueued so far; compute work enqueued after the
  // next join() sees `recv`. Until then `send` and `recv` must stay allocated and untouched.
  virtual void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes) = 0;
  // The compute work enqueued from now on comes after every all-to-all started so far.
  virtual void join() {}
  // Keeps the host at most about one call ahead: waits (polling for faults) for the exchanges enqueued before
  // the previous pace(). Called once per expert-parallel layer pass.
  virtual void pace() {}
  // Waits (polling for faults) for every exchange enqueued so far: before the host reads results of the step.
  virtual void finish() {}
  // Ends the exchange for good (a peer failed): an exchange in flight or a later one throws instead of waiting.
  virtual void abort() noexcept {}
};

}  // namespace deltatune
