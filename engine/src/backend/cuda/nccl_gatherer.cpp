// The CUDA backend's shard gatherer: ncclAllGather on a communicator and stream of its own. A gather is ordered
// after the compute work enqueued before it (its buffer may be memory that work just freed) and signals an
// event; ready() waits for that event on the host, polling for faults as nccl_comm.h describes, then orders the
// compute stream after it. Waiting on the host (rather than only making the compute stream wait) is what lets a
// dead or hung peer end the run instead of leaving the compute stream stuck; the prefetch still overlaps: layer
// i+1's gather is enqueued before layer i's kernels and runs beside them, so the host waits at most for what is
// left of it once layer i is enqueued.
#include <map>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"

#ifdef DT_HAVE_NCCL
#include "backend/cuda/nccl_comm.h"
#endif

namespace deltatune::cuda {

#ifdef DT_HAVE_NCCL
namespace {

class NcclGatherer final : public ShardGatherer {
 public:
  NcclGatherer(int device, cudaStream_t compute, const ReducerSetup& s)
      : device_(device), compute_(compute), comm_(device, s, "deltatune-shard-gather") {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate (NCCL gather)");
    cuda_check(cudaEventCreateWithFlags(&after_compute_, cudaEventDisableTiming), "cudaEventCreate (NCCL gather)");
  }

  ~NcclGatherer() override {
    cudaSetDevice(device_);
    comm_.abort();
    for (auto& [ticket, e] : pending_) cudaEventDestroy(e);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    if (after_compute_) cudaEventDestroy(after_compute_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }

  uint64_t start_all_gather(const void* shard, void* full, size_t shard_bytes) override {
    comm_.check_alive("all-gather");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(after_compute_, compute_), "cudaEventRecord (NCCL gather)");
    cuda_check(cudaStreamWaitEvent(stream_, after_compute_, 0), "cudaStreamWaitEvent (NCCL gather)");
    comm_.call(ncclAllGather(shard, full, shard_bytes, ncclUint8, comm_.get(), stream_), "ncclAllGather");
    cudaEvent_t done = nullptr;
    if (spare_.empty()) {
      cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate (NCCL gather)");
    } else {
      done = spare_.back();
      spare_.pop_back();
    }
    cuda_check(cudaEventRecord(done, stream_), "cudaEventRecord (NCCL gather done)");
    pending_[++last_ticket_] = done;
    return last_ticket_;
  }

  void ready(uint64_t ticket) override {
    const auto it = pending_.find(ticket);
    check(it != pending_.end(),
          [&] { return "internal: NCCL gather ticket " + std::to_string(ticket) + " is not pending"; });
    const cudaEvent_t done = it->second;
    pending_.erase(it);
    spare_.push_back(done);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    comm_.wait_for([done] {
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaErrorNotReady) return false;
      cuda_check(e, "waiting for the NCCL all-gather");
      return true;
    }, "the frozen-weight all-gather");
    cuda_check(cudaStreamWaitEvent(compute_, done, 0), "cudaStreamWaitEvent (NCCL gather done)");
  }

  void abort() noexcept override { comm_.abort(); }

 private:
  int device_;
  cudaStream_t compute_;
  NcclComm comm_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t after_compute_ = nullptr;
  std::map<uint64_t, cudaEvent_t> pending_;
  std::vector<cudaEvent_t> spare_;
  uint64_t last_ticket_ = 0;
};

}  // namespace

std::unique_ptr<ShardGatherer> CudaBackend::create_shard_gatherer(const ReducerSetup& setup) {
  return std::make_unique<NcclGatherer>(device_, stream_, setup);
}

#else

std::unique_ptr<ShardGatherer> CudaBackend::create_shard_gatherer(const ReducerSetup&) { return nullptr; }

#endif

}  // namespace deltatune::cuda
