// The CUDA backend's token exchange for expert parallel (backend/token_exchange.h): the counts travel by an NCCL
// all-gather of a small device buffer, the rows by ncclSend / ncclRecv to every peer in one group (a copy for
// the rank's own rows), on a communicator and stream of their own, ordered after the compute stream by an event;
// the host waits for the exchange polling for faults (nccl_comm.h) and the compute stream is ordered after it.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

#ifdef DT_HAVE_NCCL
#include "backend/cuda/nccl_comm.h"
#endif

namespace deltatune::cuda {

#ifdef DT_HAVE_NCCL
namespace {

class NcclTokenExchange final : public TokenExchange {
 public:
  NcclTokenExchange(int device, cudaStream_t compute, const ReducerSetup& s)
      : device_(device), compute_(compute), comm_(device, s, "deltatune-expert-parallel") {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate (NCCL exchange)");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate (NCCL exchange)");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate (NCCL exchange)");
  }

  ~NcclTokenExchange() override {
    cudaSetDevice(device_);
    comm_.abort();
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void abort() noexcept override { comm_.abort(); }

  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }

  std::vector<std::vector<int64_t>> all_gather_counts(const std::vector<int64_t>& mine) override {
    comm_.check_alive("counts all-gather");
    const size_t n = mine.size(), W = static_cast<size_t>(world());
    void* d = nullptr;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaMallocAsync(&d, sizeof(int64_t) * n * (W + 1), stream_), "cudaMallocAsync (NCCL counts)");
    int64_t* own = static_cast<int64_t*>(d) + n * W;
    cuda_check(cudaMemcpyAsync(own, mine.data(), sizeof(int64_t) * n, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (NCCL counts)");
    comm_.call(ncclAllGather(own, d, n, ncclInt64, comm_.get(), stream_), "ncclAllGather (counts)");
    std::vector<int64_t> flat(n * W);
    cuda_check(cudaMemcpyAsync(flat.data(), d, sizeof(int64_t) * n * W, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (NCCL counts)");
    cuda_check(cudaFreeAsync(d, stream_), "cudaFreeAsync (NCCL counts)");
    wait_done("the expert counts all-gather");
    std::vector<std::vector<int64_t>> all;
    for (size_t r = 0; r < W; ++r) all.emplace_back(flat.begin() + r * n, flat.begin() + (r + 1) * n);
    return all;
  }

  void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override {
    comm_.check_alive("all-to-all");
    const int W = world(), me = rank();
    check(static_cast<int>(send_bytes.size()) == W && static_cast<int>(recv_bytes.size()) == W,
          "internal: all_to_all with sizes for another world");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(ready_, compute_), "cudaEventRecord (NCCL exchange)");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent (NCCL exchange)");
    std::vector<int64_t> soff(static_cast<size_t>(W), 0), roff(static_cast<size_t>(W), 0);
    for (int p = 1; p < W; ++p) {
      soff[p] = soff[p - 1] + send_bytes[p - 1];
      roff[p] = roff[p - 1] + recv_bytes[p - 1];
    }
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    if (send_bytes[me])
      cuda_check(cudaMemcpyAsync(r + roff[me], s + soff[me], static_cast<size_t>(send_bytes[me]),
                                 cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync (own rows)");
    comm_.call(ncclGroupStart(), "ncclGroupStart");
    for (int p = 0; p < W; ++p) {
      if (p == me) continue;
      if (send_bytes[p])
        comm_.call(ncclSend(s + soff[p], static_cast<size_t>(send_bytes[p]), ncclUint8, p, comm_.get(), stream_),
                   "ncclSend");
      if (recv_bytes[p])
        comm_.call(ncclRecv(r + roff[p], static_cast<size_t>(recv_bytes[p]), ncclUint8, p, comm_.get(), stream_),
                   "ncclRecv");
    }
    comm_.call(ncclGroupEnd(), "ncclGroupEnd");
    wait_done("the expert all-to-all");
  }

 private:
  // Waits on the host (polling for faults) for the work enqueued on the exchange stream, then orders the compute
  // stream after it.
  void wait_done(const char* what) {
    cuda_check(cudaEventRecord(done_, stream_), "cudaEventRecord (NCCL exchange done)");
    comm_.wait_for([this] {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaErrorNotReady) return false;
      cuda_check(e, "waiting for the NCCL exchange");
      return true;
    }, what);
    cuda_check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (NCCL exchange done)");
  }

  int device_;
  cudaStream_t compute_;
  NcclComm comm_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

}  // namespace

std::unique_ptr<TokenExchange> CudaBackend::create_token_exchange(const ReducerSetup& setup) {
  return std::make_unique<NcclTokenExchange>(device_, stream_, setup);
}

#else

std::unique_ptr<TokenExchange> CudaBackend::create_token_exchange(const ReducerSetup&) { return nullptr; }

#endif

}  // namespace deltatune::cuda
