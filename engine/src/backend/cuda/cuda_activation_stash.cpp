// CudaBackend's activation stash (backend/activation_stash.h): page-locked host slots and one copy stream of the
// stash's own. Each copy is forked from the backend's stream by an event recorded there (so it follows every op
// enqueued before it: a fetched tensor's block may be one those ops freed) and joined back by an event the
// backend's stream waits for (settle / take) before the device memory is reused or read. Recorded steps capture
// the forks, copies and joins into their graph (the copy stream joins the capture through the fork events).
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "backend/activation_stash.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace deltatune::cuda {

namespace {

class CudaActivationStash final : public ActivationStash {
 public:
  CudaActivationStash(Backend& be, int device, cudaStream_t compute) : be_(be), device_(device), compute_(compute) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate (activation stash)");
  }
  ~CudaActivationStash() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(copy_);
    for (Slot& s : slots_) {
      if (s.host) cudaFreeHost(s.host);
      if (s.fork) cudaEventDestroy(s.fork);
      if (s.done) cudaEventDestroy(s.done);
    }
    cudaStreamDestroy(copy_);
  }

  void put(int slot, const Tensor& t) override {
    Slot& s = at(slot);
    if (s.held.defined() || s.fetched.defined()) {  // left by a step that failed part-way
      // Its copies ran outside any recording: a recorded step may not wait for them (the event would come from
      // outside the capture), so it is refused (op by op runs it); op by op waits for them here.
      check(!capturing(), "activation stash: slot " + std::to_string(slot) + " still busy while a step is recorded");
      cuda_check(cudaStreamSynchronize(copy_), "cudaStreamSynchronize (activation stash)");
      s.held = Tensor();
      s.fetched = Tensor();
    }
    reserve(s, slot, t.nbytes());
    s.shape = t.shape;
    s.dtype = t.dtype;
    s.held = t;
    fork(s);
    cuda_check(cudaMemcpyAsync(s.host, t.data, t.nbytes(), cudaMemcpyDeviceToHost, copy_), "cudaMemcpyAsync (stash put)");
    cuda_check(cudaEventRecord(s.done, copy_), "cudaEventRecord (stash put)");
  }

  void settle(int slot) override {
    Slot& s = at(slot);
    if (!s.held.defined()) return;
    cuda_check(cudaStreamWaitEvent(compute_, s.done, 0), "cudaStreamWaitEvent (stash settle)");
    s.held = Tensor();
  }

  void fetch(int slot) override {
    Slot& s = at(slot);
    check(s.host && !s.held.defined() && !s.fetched.defined(),
          "internal: activation stash slot " + std::to_string(slot) + " has nothing settled to fetch");
    s.fetched = be_.alloc(s.shape, s.dtype);
    fork(s);
    cuda_check(cudaMemcpyAsync(s.fetched.data, s.host, s.fetched.nbytes(), cudaMemcpyHostToDevice, copy_),
               "cudaMemcpyAsync (stash fetch)");
    cuda_check(cudaEventRecord(s.done, copy_), "cudaEventRecord (stash fetch)");
  }

  Tensor take(int slot) override {
    Slot& s = at(slot);
    check(s.fetched.defined(), "internal: activation stash slot " + std::to_string(slot) + " was not fetched");
    cuda_check(cudaStreamWaitEvent(compute_, s.done, 0), "cudaStreamWaitEvent (stash take)");
    Tensor t = std::move(s.fetched);
    s.fetched = Tensor();  // a moved-from Tensor keeps its data pointer (defined())
    return t;
  }

  int64_t host_bytes() const override {
    int64_t b = 0;
    for (const Slot& s : slots_) b += static_cast<int64_t>(s.capacity);
    return b;
  }

 private:
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t fork = nullptr, done = nullptr;
    Shape shape;
    DType dtype = DType::BF16;
    Tensor held, fetched;
  };

  Slot& at(int slot) {
    check(slot >= 0, "internal: activation stash slot " + std::to_string(slot));
    if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (!s.fork) {
      cuda_check(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming), "cudaEventCreate (activation stash)");
      cuda_check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate (activation stash)");
    }
    return s;
  }

  // The slot's host memory grown to `bytes` (only outside a recorded step: a recording's copies keep reading and
  // writing the memory they were recorded with).
  void reserve(Slot& s, int slot, size_t bytes) {
    if (s.capacity >= bytes) return;
    check(!capturing(), "activation stash: slot " + std::to_string(slot) + " would grow while a step is recorded");
    cuda_check(cudaStreamSynchronize(copy_), "cudaStreamSynchronize (activation stash)");
    if (s.host) cuda_check(cudaFreeHost(s.host), "cudaFreeHost (activation stash)");
    s.host = nullptr;
    s.capacity = 0;
    const cudaError_t e = cudaHostAlloc(&s.host, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();
      s.host = nullptr;
      throw Error("host offload (inputs_on_host): cudaHostAlloc of " + std::to_string(bytes) +
                  " page-locked bytes for the input of layer " + std::to_string(slot) + " failed: " +
                  cudaGetErrorString(e) + " (" + std::to_string(host_bytes()) +
                  " bytes held already; free host memory, or set activation_offload: false in the run file)");
    }
    s.capacity = bytes;
  }

  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(compute_, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }

  void fork(Slot& s) {
    cuda_check(cudaEventRecord(s.fork, compute_), "cudaEventRecord (stash fork)");
    cuda_check(cudaStreamWaitEvent(copy_, s.fork, 0), "cudaStreamWaitEvent (stash fork)");
  }

  Backend& be_;
  int device_;
  cudaStream_t compute_, copy_ = nullptr;
  std::vector<Slot> slots_;
};

}  // namespace

std::unique_ptr<ActivationStash> CudaBackend::create_activation_stash() {
  return std::make_unique<CudaActivationStash>(*this, device_, stream());
}

}  // namespace deltatune::cuda
