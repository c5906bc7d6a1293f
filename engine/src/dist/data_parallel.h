// One worker's side of a data-parallel run (see deltatune/distributed.h for the design): the connections to
// the other workers, the gradient reducer of its backend (NCCL on CUDA, the host connections on the CPU),
// and the LoRA gradients in one flat buffer whose buckets are summed as the backward completes them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dist/grad_buckets.h"
#include "dist/rendezvous.h"
#include "lora/lora.h"

namespace deltatune {

class DataParallel {
 public:
  // Joins the other workers (blocking up to world.join_timeout_s). Throws DistFault.
  explicit DataParallel(const DistWorld& world);
  ~DataParallel();

  int rank() const { return rv_.rank(); }
  int world() const { return rv_.world(); }
  bool root() const { return rv_.rank() == 0; }
  Rendezvous& host() { return rv_; }

  // Creates the gradient reducer of `be` (NCCL's communicator joins here). Throws Error when the backend
  // cannot sum across workers (a CUDA build without NCCL).
  void connect_backend(Backend& be);
  // The all-gather of sharded frozen weights (weight_layout: sharded): NCCL on CUDA (a communicator of its
  // own, joined at the first call), the host connections on the CPU. Every worker must call it.
  ShardGatherer& shard_gatherer();
  // The token exchange of expert parallel (model/expert_parallel.h): NCCL send/recv on CUDA (a communicator of
  // its own), the host connections on the CPU. Every worker must call it. From then on attach() leaves the
  // expert LoRA out of the summed gradients (each worker holds its own experts' slice, dist/expert_lora.h).
  TokenExchange& token_exchange();
  bool expert_parallel() const { return exchange_ != nullptr; }
  // Gives the adapter's gradients one flat zeroed buffer (gA/gB become views of it) and plans the buckets. Under
  // expert parallel the expert modules keep gradients of their own, zeroed with the others and never summed.
  void attach(LoraAdapter& adapter, int64_t bucket_bytes);
  // Zeroes every gradient (the whole flat buffer) for a new step.
  void zero_gradients();
  // Called after the backward of `layer` in the step's last micro-batch: starts the sum of every bucket the
  // backward has completed.
  void layer_done(int layer);
  // Starts the buckets not started yet and waits for all: afterwards every worker holds the summed gradients.
  void finish_gradients();
  // Rank 0's A, B and AdamW moments on every worker (moments only where rank 0 has them). Under expert
  // parallel the expert modules are left out: each worker holds its own slice already (scatter_expert_lora).
  void broadcast_adapter(LoraAdapter& adapter);
  // Expert parallel, on the host before the adapter goes to the backend: every expert module of `host` becomes
  // this worker's slice of rank 0's module (A, B and the moments where rank 0 has them): rank 0 slices its
  // modules (expert_lora_slice) and sends each worker its own slice through the host connections, one module
  // at a time. Other modules stay as they are (broadcast_adapter sends them once on the backend).
  void scatter_expert_lora(LoraAdapter& host);
  // Expert parallel: the gradient norm² of the whole adapter, given this worker's (non-expert LoRA summed
  // already, its own experts' slice): Σ over the workers of their expert part plus one non-expert part.
  double expert_parallel_grad_sq(LoraAdapter& adapter, double mine_sq);
  // Expert parallel: the full adapter (A, B, and the moments where defined) on rank 0's host, every worker's
  // expert slices joined (a collective through the host connections); other workers get an empty adapter.
  LoraAdapter gather_adapter_to_root(const LoraAdapter& adapter);
  // In place: Σ over the workers of an F32 tensor of the backend (blocking; small tensors).
  void sum_tensor(Tensor& t);
  // Ends the job for every worker: tells the peers why (best effort) and aborts the communicator.
  void fail(const std::string& why) noexcept;

 private:
  ReducerSetup comm_setup();  // a communicator's join through the host connections, faults, timeout

  Rendezvous rv_;
  Backend* be_ = nullptr;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<ShardGatherer> gatherer_;
  std::unique_ptr<TokenExchange> exchange_;
  Tensor flat_;
  std::vector<Tensor> own_grads_;  // expert parallel: the expert LoRA gradients, outside flat_
  std::vector<GradBucket> buckets_;
  size_t next_bucket_ = 0;
};

// The CPU backend's reducer: sums through the host connections (rank order on rank 0), synchronously.
std::unique_ptr<GradientReducer> make_host_reducer(Rendezvous& rv);

}  // namespace deltatune
