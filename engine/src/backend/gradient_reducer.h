// Sums of F32 tensors over the workers of a data-parallel job (engine/src/dist), done by the backend's own
// communication library (NCCL for CUDA) and queued behind the backend's compute work, so a bucket of LoRA
// gradients is summed while the backward goes on with earlier layers.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace deltatune {

// Another worker failed, went away or did not answer in time: the whole run ends (as crashed, resumable).
class DistFault : public Error {
 public:
  using Error::Error;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // t (=) Σ over the ranks of t, in place (F32, on this backend), ordered after the compute work enqueued so
  // far; returns at once.
  virtual void start_sum(Tensor& t) = 0;
  // t (=) rank 0's t on every rank; the compute work enqueued after it sees the result.
  virtual void broadcast(Tensor& t) = 0;
  // Waits until every started operation is done (checking for faults and the timeout while it waits); the
  // compute work enqueued afterwards sees the results. Throws DistFault.
  virtual void finish() = 0;
  // Ends the communicator at once (a peer failed); operations in flight are dropped. Never throws.
  virtual void abort() noexcept = 0;
};

struct ReducerSetup {
  int rank = 0, world = 1;
  // Rank 0's bytes to every rank (the rendezvous connection): how the communicator's id gets around.
  std::function<std::string(const std::string&)> share_from_rank0;
  // "" while every peer is well, else what happened; called while waiting.
  std::function<std::string()> peer_fault;
  double timeout_s = 600;
};

}  // namespace deltatune
