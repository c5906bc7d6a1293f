// The CUDA backend's gradient reducer: NCCL all-reduce / broadcast on a communication stream of its own,
// ordered after the compute stream by an event, so a bucket's sum runs while the backward continues. Waits and
// faults as nccl_comm.h describes.
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

class NcclReducer final : public GradientReducer {
 public:
  NcclReducer(int device, cudaStream_t compute, const ReducerSetup& s)
      : device_(device), compute_(compute), comm_(device, s, "deltatune-data-parallel") {
    cuda_check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "cudaStreamCreate (NCCL)");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate (NCCL)");
  }

  ~NcclReducer() override {
    cudaSetDevice(device_);
    comm_.abort();  // every operation was waited for (or the job failed): nothing to finalize with the peers
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
  }

  void start_sum(Tensor& t) override {
    check_tensor(t, "all-reduce");
    after_compute();
    comm_.call(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat, ncclSum, comm_.get(),
                             comm_stream_),
               "ncclAllReduce");
    pending_ = true;
  }

  void broadcast(Tensor& t) override {
    check_tensor(t, "broadcast");
    after_compute();
    comm_.call(ncclBroadcast(t.data, t.data, static_cast<size_t>(t.numel()), ncclFloat, 0, comm_.get(),
                             comm_stream_),
               "ncclBroadcast");
    pending_ = true;
  }

  void finish() override {
    if (!pending_) return;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(done_, comm_stream_), "cudaEventRecord (NCCL done)");
    comm_.wait_for([this] {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaErrorNotReady) return false;
      cuda_check(e, "waiting for NCCL");
      return true;
    }, "the gradient all-reduce");
    // Complete already: the compute stream only records the dependency.
    cuda_check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (NCCL done)");
    pending_ = false;
  }

  void abort() noexcept override { comm_.abort(); }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    comm_.check_alive(op);
    check(t.device == Device::CUDA && t.dtype == DType::F32,
          [&] { return std::string("internal: NCCL ") + op + " of a tensor that is not F32 on the GPU"; });
  }

  void after_compute() {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(ready_, compute_), "cudaEventRecord (NCCL ready)");
    cuda_check(cudaStreamWaitEvent(comm_stream_, ready_, 0), "cudaStreamWaitEvent (NCCL ready)");
  }

  int device_;
  cudaStream_t compute_;
  NcclComm comm_;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
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
