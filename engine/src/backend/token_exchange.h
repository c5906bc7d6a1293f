// The all-to-all of expert parallel (model/expert_parallel.h): token rows travel to the rank that holds their
// expert and the expert outputs travel back. NCCL send/recv on CUDA (backend/cuda/nccl_exchange.cpp); threads of one process
// for CPU tests (dist/expert_exchange.h).
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
  // Every rank's `mine` (the same length on every rank), in rank order; on the host.
  virtual std::vector<std::vector<int64_t>> all_gather_counts(const std::vector<int64_t>& mine) = 0;
  // Sends send_bytes[d] bytes (consecutive in `send`, destinations in rank order) to each rank d and receives
  // recv_bytes[s] bytes from each rank s into `recv` (sources in rank order); both on the backend's device. The
  // sizes must agree pairwise. Ordered after the compute work enqueued so far; the work after it sees `recv`.
  virtual void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                          const std::vector<int64_t>& recv_bytes) = 0;
  // Ends the exchange for good (a peer failed): an exchange in flight or a later one throws instead of waiting.
  virtual void abort() noexcept {}
};

}  // namespace deltatune
