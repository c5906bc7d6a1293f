// The CUDA backend's token exchange for expert parallel (backend/token_exchange.h): the routing offsets travel
// by an NCCL all-gather into a device buffer and one copy to pinned host memory (the one host wait of a layer),
// the rows by ncclSend / ncclRecv to every peer in one group (a copy for the rank's own rows), on a communicator
// and stream of their own, ordered after the compute stream by an event. Nothing else waits on the host: the
// compute stream waits for the exchange stream at join(), and pace() / finish() poll for faults (nccl_comm.h)
// while the host waits for older exchanges.
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
    cuda_check(cudaEventCreateWithFlags(&paced_, cudaEventDisableTiming), "cudaEventCreate (NCCL exchange)");
    cuda_check(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming), "cudaEventCreate (NCCL exchange)");
  }

  ~NcclTokenExchange() override {
    cudaSetDevice(device_);
    comm_.abort();
    for (cudaEvent_t e : {ready_, done_, paced_, gathered_})
      if (e) cudaEventDestroy(e);
    if (gather_dev_) cudaFree(gather_dev_);
    if (gather_host_) cudaFreeHost(gather_host_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void abort() noexcept override { comm_.abort(); }

  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }

  void gather_offsets_start(const void* offsets, int64_t n) override {
    comm_.check_alive("offsets all-gather");
    check(gather_n_ == 0, "internal: an offsets gather is already in flight");
    const size_t W = static_cast<size_t>(world()), bytes = sizeof(int32_t) * static_cast<size_t>(n) * W;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    if (bytes > gather_cap_) {  // grown once (the expert count is fixed per model)
      if (gather_dev_) cuda_check(cudaFree(gather_dev_), "cudaFree (NCCL offsets)");
      if (gather_host_) cuda_check(cudaFreeHost(gather_host_), "cudaFreeHost (NCCL offsets)");
      gather_dev_ = gather_host_ = nullptr;
      cuda_check(cudaMalloc(&gather_dev_, bytes), "cudaMalloc (NCCL offsets)");
      cuda_check(cudaMallocHost(&gather_host_, bytes), "cudaMallocHost (NCCL offsets)");
      gather_cap_ = bytes;
    }
    after_compute();
    comm_.call(ncclAllGather(offsets, gather_dev_, static_cast<size_t>(n), ncclInt32, comm_.get(), stream_),
               "ncclAllGather (expert offsets)");
    cuda_check(cudaMemcpyAsync(gather_host_, gather_dev_, bytes, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (NCCL offsets)");
    cuda_check(cudaEventRecord(gathered_, stream_), "cudaEventRecord (NCCL offsets)");
    gather_n_ = n;
  }

  std::vector<std::vector<int32_t>> gather_offsets_wait() override {
    check(gather_n_ > 0, "internal: no offsets gather in flight");
    wait_event(gathered_, "the expert offsets all-gather");
    const size_t n = static_cast<size_t>(gather_n_);
    gather_n_ = 0;
    const int32_t* h = static_cast<const int32_t*>(gather_host_);
    std::vector<std::vector<int32_t>> all;
    for (size_t r = 0; r < static_cast<size_t>(world()); ++r) all.emplace_back(h + r * n, h + (r + 1) * n);
    return all;
  }

  void all_to_all(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                  const std::vector<int64_t>& recv_bytes) override {
    comm_.check_alive("all-to-all");
    const int W = world(), me = rank();
    check(static_cast<int>(send_bytes.size()) == W && static_cast<int>(recv_bytes.size()) == W,
          "internal: all_to_all with sizes for another world");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    after_compute();
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
    pending_ = true;
  }

  void join() override {
    if (!pending_) return;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(done_, stream_), "cudaEventRecord (NCCL exchange done)");
    cuda_check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent (NCCL exchange done)");
    pending_ = false;
  }

  void pace() override {
    comm_.check_alive("pace");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    if (paced_once_) wait_event(paced_, "an earlier expert all-to-all");
    cuda_check(cudaEventRecord(paced_, stream_), "cudaEventRecord (NCCL exchange pace)");
    paced_once_ = true;
  }

  void finish() override {
    comm_.check_alive("finish");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaEventRecord(done_, stream_), "cudaEventRecord (NCCL exchange done)");
    wait_event(done_, "the expert all-to-alls");
  }

 private:
  // The exchange stream's next work comes after the compute work enqueued so far.
  void after_compute() {
    cuda_check(cudaEventRecord(ready_, compute_), "cudaEventRecord (NCCL exchange)");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent (NCCL exchange)");
  }

  // Waits on the host for `e` (recorded on the exchange stream), polling for faults.
  void wait_event(cudaEvent_t e, const char* what) {
    comm_.wait_for([e] {
      const cudaError_t st = cudaEventQuery(e);
      if (st == cudaErrorNotReady) return false;
      cuda_check(st, "waiting for the NCCL exchange");
      return true;
    }, what);
  }

  int device_;
  cudaStream_t compute_;
  NcclComm comm_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr, paced_ = nullptr, gathered_ = nullptr;
  void *gather_dev_ = nullptr, *gather_host_ = nullptr;
  size_t gather_cap_ = 0;
  int64_t gather_n_ = 0;  // offsets per rank of the gather in flight, 0: none
  bool pending_ = false;  // an all-to-all not joined yet
  bool paced_once_ = false;
};

}  // namespace

std::unique_ptr<TokenExchange> CudaBackend::create_token_exchange(const ReducerSetup& setup) {
  return std::make_unique<NcclTokenExchange>(device_, stream_, setup);
}

#else

std::unique_ptr<TokenExchange> CudaBackend::create_token_exchange(const ReducerSetup&) { return nullptr; }

#endif

}  // namespace deltatune::cuda
