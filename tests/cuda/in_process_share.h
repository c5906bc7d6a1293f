// Rank 0's bytes to the other threads of a one-process multi-GPU test (what the rendezvous connection does
// between processes): the share_from_rank0 of a ReducerSetup.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>

namespace deltatune::test {

class InProcessShare {
 public:
  std::string share(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    if (rank == 0) {
      value_ = mine;
      set_ = true;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return set_; });
    }
    return value_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string value_;
  bool set_ = false;
};

}  // namespace deltatune::test
