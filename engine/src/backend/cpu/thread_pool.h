// A small fork-join pool owned by one CpuBackend (no global state). parallel_for splits [0, n) into
// chunks and runs them on the workers and the calling thread; it returns when all chunks are done and
// rethrows the first exception a chunk threw. A parallel_for issued while the pool is busy (a nested
// call from inside a chunk, or a second thread using the same backend) runs inline on the caller, so
// nesting can never deadlock.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltatune {

class ThreadPool {
 public:
  // num_threads counts the caller too; <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over chunks of [0, n); chunks hold at least `grain` items (except the last).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // held by the caller for the duration of one parallel_for

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_workers_ = 0;

  // The current job (valid while run_mutex_ is held).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, num_chunks_ = 0;
  int64_t next_chunk_ = 0;  // guarded by mu_
  std::exception_ptr error_;
};

}  // namespace deltatune
