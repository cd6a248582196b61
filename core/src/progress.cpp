#include "trainplan/core/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace trainplan {

bool Progress::enabled() {
  static const bool kEnabled = isatty(STDERR_FILENO) && std::getenv("TRAINPLAN_NO_PROGRESS") == nullptr;
  return kEnabled;
}

Progress::Progress(std::string label, size_t total, double delay_s)
    : label_(std::move(label)),
      total_(total),
      delay_s_(delay_s),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(size_t done) {
  if (!enabled() || total_ == 0) return;
  std::lock_guard lock(mutex_);
  if (finished_) return;
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < delay_s_) return;
  if (drawn_ && std::chrono::duration<double>(now - last_draw_).count() < 0.1 && done < total_) return;
  last_draw_ = now;
  drawn_ = true;
  const int width = 30;
  double frac = static_cast<double>(done) / static_cast<double>(total_);
  int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
  std::fprintf(stderr, "\r%s [%s] %zu/%zu  %.0fs left ", label_.c_str(), bar.c_str(), done, total_, eta);
  std::fflush(stderr);
}

void Progress::finish() {
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

}  // namespace trainplan
