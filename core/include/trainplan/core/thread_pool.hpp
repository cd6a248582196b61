// File: trainplan/core/thread_pool.hpp
//
// A fixed pool of worker threads for data-parallel loops. Work is handed out in chunks by an
// atomic counter; each index's result goes to its own slot, so results do not depend on the
// thread count or on scheduling.
//
//   ThreadPool pool(4);
//   std::vector<double> out(n);
//   pool.parallel_for(n, [&](size_t i) { out[i] = evaluate(candidates[i]); });
//
// The first exception thrown by any task is rethrown in the caller after all workers stop.
// A cancellation flag (e.g. set by SIGINT) makes workers skip the remaining indices.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trainplan {

class ThreadPool {
 public:
  /// `threads` = 0 means std::thread::hardware_concurrency(). One thread runs inline.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  /// Calls fn(i) for i in [0, n), spread over the pool and the calling thread.
  /// `cancel`, if given, is polled between indices: once true, remaining indices are skipped.
  /// `on_done`, if given, is called (from any thread, serialized) after each index.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn,
                    const std::atomic<bool>* cancel = nullptr,
                    const std::function<void(size_t done)>& on_done = {});

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  bool stop_ = false;
  size_t generation_ = 0;
  size_t active_ = 0;

  // The current job.
  const std::function<void(size_t)>* fn_ = nullptr;
  const std::function<void(size_t)>* on_done_ = nullptr;
  const std::atomic<bool>* cancel_ = nullptr;
  size_t n_ = 0;
  size_t chunk_ = 1;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  std::mutex done_mutex_;
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace trainplan
