#include "backend/cpu/thread_pool.h"

#include <algorithm>

namespace deltatune {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_chunk_ >= num_chunks_ || error_) return;
      c = next_chunk_++;
    }
    const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
    try {
      (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_workers_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_workers_;
    }
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  // A few chunks per thread balance uneven work (e.g. causal attention rows) without much overhead.
  const int64_t want = std::min<int64_t>(max_chunks, int64_t(size()) * 4);
  std::unique_lock<std::mutex> run(run_mutex_, std::try_to_lock);
  if (workers_.empty() || want <= 1 || !run.owns_lock()) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + want - 1) / want;
    num_chunks_ = (n + chunk_ - 1) / chunk_;
    next_chunk_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Wait until every chunk has been taken and every worker that joined this generation has left.
    done_.wait(lock, [&] { return (next_chunk_ >= num_chunks_ || error_) && active_workers_ == 0; });
    err = error_;
    error_ = nullptr;
    // No chunk of this job is left to take: after an exception some were never taken, and a worker that wakes
    // only now would otherwise take one (error_ is clear again) and call the fn_ cleared below.
    next_chunk_ = num_chunks_;
    fn_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace deltatune
