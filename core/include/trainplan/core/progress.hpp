// File: trainplan/core/progress.hpp
//
// A progress bar on stderr for long operations. It draws only when stderr is a terminal and
// the operation has run for more than `delay_s` (default 1 s), so CI logs and pipes stay
// clean. Thread-safe: update() may be called from workers.
//
//   Progress bar("simulating", candidates.size());
//   pool.parallel_for(n, work, nullptr, [&](size_t done) { bar.update(done); });
//   bar.finish();
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

namespace trainplan {

class Progress {
 public:
  Progress(std::string label, size_t total, double delay_s = 1.0);
  ~Progress();
  void update(size_t done);
  /// Clears the bar (if drawn).
  void finish();
  /// Whether bars are drawn at all (stderr is a terminal and TRAINPLAN_NO_PROGRESS unset).
  static bool enabled();

 private:
  std::string label_;
  size_t total_;
  double delay_s_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
  bool finished_ = false;
  std::mutex mutex_;
};

}  // namespace trainplan
