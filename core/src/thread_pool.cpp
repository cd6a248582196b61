#include "trainplan/core/thread_pool.hpp"

#include <algorithm>

namespace trainplan {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    size_t begin = next_.fetch_add(chunk_);
    if (begin >= n_) return;
    size_t end = std::min(n_, begin + chunk_);
    for (size_t i = begin; i < end; ++i) {
      if (cancel_ && cancel_->load(std::memory_order_relaxed)) return;
      {
        std::lock_guard lock(error_mutex_);
        if (error_) return;
      }
      try {
        (*fn_)(i);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        return;
      }
      size_t d = done_.fetch_add(1) + 1;
      if (on_done_ && *on_done_) {
        std::lock_guard lock(done_mutex_);
        (*on_done_)(d);
      }
    }
  }
}

void ThreadPool::worker_loop() {
  size_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(mutex_);
      if (--active_ == 0) finished_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn,
                              const std::atomic<bool>* cancel,
                              const std::function<void(size_t)>& on_done) {
  if (n == 0) return;
  fn_ = &fn;
  on_done_ = &on_done;
  cancel_ = cancel;
  n_ = n;
  // Small chunks keep the load balanced; at least 1.
  chunk_ = std::max<size_t>(1, n / (size() * 16));
  next_ = 0;
  done_ = 0;
  error_ = nullptr;
  {
    std::lock_guard lock(mutex_);
    active_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  run_chunks();
  {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return active_ == 0; });
  }
  fn_ = nullptr;
  on_done_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace trainplan
