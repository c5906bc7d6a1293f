#ifdef DT_HAVE_NCCL
#include "backend/cuda/nccl_comm.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/lazy_check.h"

namespace deltatune::cuda {

NcclComm::NcclComm(int device, const ReducerSetup& setup, const char* name) : s_(setup) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id{};
  std::string mine;
  if (s_.rank == 0) {
    call(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mine.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  const std::string shared = s_.share_from_rank0(mine);
  check(shared.size() == sizeof id, "NCCL: rank 0 sent a unique id of the wrong size (different NCCL builds?)");
  std::memcpy(&id, shared.data(), sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = name;
  call(ncclCommInitRankConfig(&comm_, s_.world, id, s_.rank, &cfg), "ncclCommInitRankConfig");
}

void NcclComm::check_alive(const char* op) const {
  check(comm_ != nullptr,
        [&] { return std::string("NCCL ") + op + ": the communicator was aborted after an earlier fault"; });
}

void NcclComm::call(ncclResult_t r, const char* what) {
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

void NcclComm::abort() noexcept {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclComm::check_faults(const char* what, double waited_s) {
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
  if (waited_s > s_.timeout_s) {
    abort();
    throw DistFault(std::string("NCCL: ") + what + " did not complete in " +
                    std::to_string(static_cast<int>(s_.timeout_s)) + " s on rank " + std::to_string(s_.rank) +
                    " (DELTATUNE_DIST_TIMEOUT): another worker hangs or its GPU is unreachable");
  }
}

void NcclComm::fail_nccl(ncclResult_t r, const char* what) {
  std::string detail = comm_ ? ncclGetLastError(comm_) : "";
  const std::string msg = std::string("NCCL error on rank ") + std::to_string(s_.rank) + " in " + what + ": " +
                          ncclGetErrorString(r) + (detail.empty() ? "" : " (" + detail + ")") +
                          " (NCCL_DEBUG=WARN shows NCCL's own account)";
  abort();
  throw DistFault(msg);
}

}  // namespace deltatune::cuda
#endif
