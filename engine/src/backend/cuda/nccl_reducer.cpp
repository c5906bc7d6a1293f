// The CUDA backend's gradient reducer: NCCL all-reduce / broadcast on a communication stream of its own,
// ordered after the compute stream by an event, so a bucket's sum runs while the backward continues. The
// communicator is non-blocking (config.blocking = 0): no NCCL call ever blocks the host, and every wait is a
// poll that also watches the peers (the rendezvous connections), NCCL's asynchronous error and the timeout;
// on a fault the communicator is aborted (its kernels stop) and the wait throws DistFault with one message.
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

#ifdef DT_HAVE_NCCL
#include <nccl.h>
#endif

namespace deltatune::cuda {

#ifdef DT_HAVE_NCCL
namespace {

using Clock = std::chrono::steady_clock;

class NcclReducer final : public GradientReducer {
 public:
  NcclReducer(int device, cudaStream_t compute, const ReducerSetup& s) : device_(device), compute_(compute), s_(s) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreate (NCCL)");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
    ncclUniqueId id{};
    std::string mine;
    if (s_.rank == 0) {
      nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      mine.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    const std::string shared = s_.share_from_rank0(mine);
    check(shared.size() == sizeof id, "NCCL: rank 0 sent a unique id of the wrong size (different NCCL builds?)");
    std::memcpy(&id, shared.data(), sizeof id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "deltatune-data-parallel";
    nccl(ncclCommInitRankConfig(&comm_, s_.world, id, s_.rank, &cfg), "ncclCommInitRankConfig");
  }

  ~NcclReducer() override {
    cudaSetDevice(device_);
    abort();  // every operation was waited for (or the job failed): nothing to finalize with the peers
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
  }

  void start_sum(Tensor& t) override {
    check_tensor(t, "all-reduce");
    after_compute();
    nccl(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat, ncclSum, comm_, comm_stream_),
         "ncclAllReduce");
    pending_ = true;
  }

  void broadcast(Tensor& t) override {
    check_tensor(t, "broadcast");
    after_compute();
    nccl(ncclBroadcast(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat, 0, comm_, comm_stream_),
         "ncclBroadcast");
    pending_ = true;
  }

  void finish() override {
    if (!pending_) return;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(done_, comm_stream_), "cudaEventRecord (NCCL done)");
    wait_for([this] {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaErrorNotReady) return false;
      cuda_check(e, "waiting for NCCL");
      return true;
    }, "the gradient all-reduce");
    // Complete already: the compute stream only records the dependency.
    cuda_check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (NCCL done)");
    pending_ = false;
  }

  void abort() noexcept override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    check(comm_ != nullptr, std::string("NCCL ") + op + ": the communicator was aborted after an earlier fault");
    check(t.device == Device::CUDA && t.dtype == DType::F32,
          std::string("internal: NCCL ") + op + " of a tensor that is not F32 on the GPU");
  }

  void after_compute() {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(ready_, compute_), "cudaEventRecord (NCCL ready)");
    cuda_check(cudaStreamWaitEvent(comm_stream_, ready_, 0), "cudaStreamWaitEvent (NCCL ready)");
  }

  // An NCCL call on the non-blocking communicator: returns once it is issued (ncclInProgress polled away).
  void nccl(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r != ncclInProgress) fail_nccl(r, what);
    wait_for([&] {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) fail_nccl(q, what);
      if (st == ncclInProgress) return false;
      if (st != ncclSuccess) fail_nccl(st, what);
      return true;
    }, what);
  }

  [[noreturn]] void fail_nccl(ncclResult_t r, const char* what) {
    std::string detail = comm_ ? ncclGetLastError(comm_) : "";
    const std::string msg = std::string("NCCL error on rank ") + std::to_string(s_.rank) + " in " + what + ": " +
                            ncclGetErrorString(r) + (detail.empty() ? "" : " (" + detail + ")") +
                            " (NCCL_DEBUG=WARN shows NCCL's own account)";
    abort();
    throw DistFault(msg);
  }

  // Polls `done` (spinning briefly, then sleeping 100 µs); in between checks NCCL's asynchronous error, the
  // peers and the timeout. Any of those aborts the communicator and throws.
  template <class Done>
  void wait_for(Done done, const char* what) {
    const auto start = Clock::now();
    auto next_check = start;
    for (int spins = 0;; ++spins) {
      if (done()) return;
      const auto now = Clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(2);
        if (comm_) {
          ncclResult_t st = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
            fail_nccl(st, what);
        }
        const std::string fault = s_.peer_fault ? s_.peer_fault() : "";
        if (!fault.empty()) {
          abort();
          throw DistFault(fault);
        }
        if (std::chrono::duration<double>(now - start).count() > s_.timeout_s) {
          abort();
          throw DistFault(std::string("NCCL: ") + what + " did not complete in " +
                          std::to_string(static_cast<int>(s_.timeout_s)) +
                          " s on rank " + std::to_string(s_.rank) +
                          " (DELTATUNE_DIST_TIMEOUT): another worker hangs or its GPU is unreachable");
        }
      }
      if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  int device_;
  cudaStream_t compute_;
  ReducerSetup s_;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool pending_ = false;
};

}  // namespace

std::unique_ptr<GradientReducer> CudaBackend::create_gradient_reducer(const ReducerSetup& setup) {
  return std::make_unique<NcclReducer>(device_, stream_, setup);
}

#else

std::unique_ptr<GradientReducer> CudaBackend::create_gradient_reducer(const ReducerSetup&) { return nullptr; }

#endif

}  // namespace deltatune::cuda
