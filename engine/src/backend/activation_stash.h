// Host offload of what a training step keeps for its backward, beside the Backend interface (as QuantOps): the
// checkpointed layers' inputs (RecomputeKeep::inputs_on_host) wait in page-locked host memory between the
// forward and their layer's recompute instead of in device memory. A backend that has no such copies (the CPU
// backend: its "device" memory is host memory) gives no stash and the model keeps the tensors where they are.
//
// Ordering (CUDA: a copy stream of the stash's own, joined to the backend's stream by events, so a recorded step
// captures the copies in its graph): every call is enqueued after the ops enqueued before it and returns at once.
//   put(slot, t)   starts copying t to the slot's host memory; the stash holds t until settle(slot)
//   settle(slot)   ops enqueued after it wait for the slot's copy; t's memory may then serve later allocations
//   fetch(slot)    allocates a device tensor (Backend::alloc) and starts copying the slot back into it
//   take(slot)     ops enqueued after it wait for that copy; returns the tensor
// Call fetch a layer ahead of take (the copy then overlaps the layer between) and settle a layer after put.
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace deltatune {

class ActivationStash {
 public:
  virtual ~ActivationStash() = default;
  // Slot host memory grows to the largest tensor put there (growing never happens while a step is recorded:
  // it throws instead) and is kept for later steps (a recorded step's copies read and write it on every replay).
  virtual void put(int slot, const Tensor& t) = 0;
  virtual void settle(int slot) = 0;
  virtual void fetch(int slot) = 0;
  virtual Tensor take(int slot) = 0;
  // Page-locked host bytes the stash holds.
  virtual int64_t host_bytes() const = 0;
};

// Implemented by a backend that can stash (CudaBackend).
class ActivationStashMaker {
 public:
  virtual ~ActivationStashMaker() = default;
  virtual std::unique_ptr<ActivationStash> create_activation_stash() = 0;
};

// A stash on `be`, or null where the backend has none (CPU).
std::unique_ptr<ActivationStash> make_activation_stash(Backend& be);

}  // namespace deltatune
