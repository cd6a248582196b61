#include "breakdown.hpp"

#include <algorithm>
#include <array>

namespace trainplan::sim::detail {
namespace {

// Counter slots: compute, optimizer, pp_wait, then one per purpose.
constexpr int kCompute = 0, kOptimizer = 1, kPpWait = 2, kFirstPurpose = 3;
constexpr int kSlots = kFirstPurpose + kNumPurposes;

struct Edge {
  double t;
  int slot;
  int delta;
};

int slot_of(const Interval& iv) {
  switch (iv.kind) {
    case IntervalKind::compute: return kCompute;
    case IntervalKind::optimizer: return kOptimizer;
    case IntervalKind::pp_wait: return kPpWait;
    case IntervalKind::comm: return kFirstPurpose + static_cast<int>(iv.purpose);
  }
  return kCompute;
}

}  // namespace

Breakdown classify(const std::vector<Interval>& intervals, double step_time_s, int rank) {
  Breakdown b;
  b.critical_rank = rank;
  b.step_time_s = step_time_s;
  std::vector<Edge> edges;
  edges.reserve(intervals.size() * 2);
  for (const Interval& iv : intervals) {
    const double s = std::clamp(iv.start_s, 0.0, step_time_s);
    const double e = std::clamp(iv.end_s, 0.0, step_time_s);
    if (!(e > s)) continue;
    const int slot = slot_of(iv);
    edges.push_back({s, slot, +1});
    edges.push_back({e, slot, -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) {
    return x.t < y.t || (x.t == y.t && (x.slot < y.slot || (x.slot == y.slot && x.delta < y.delta)));
  });
  std::array<int, kSlots> count{};
  double t = 0;
  auto attribute = [&](double dt) {
    if (dt <= 0) return;
    if (count[kCompute] > 0) {
      b.compute_s += dt;
    } else if (count[kOptimizer] > 0) {
      b.optimizer_s += dt;
    } else {
      int moving = 0;
      for (int p = 0; p < kNumPurposes; ++p) moving += count[static_cast<size_t>(kFirstPurpose + p)] > 0 ? 1 : 0;
      if (moving > 0) {
        for (int p = 0; p < kNumPurposes; ++p)
          if (count[static_cast<size_t>(kFirstPurpose + p)] > 0) b.exposed_comm_s[static_cast<size_t>(p)] += dt / moving;
      } else if (count[kPpWait] > 0) {
        b.bubble_s += dt;
      } else {
        b.other_s += dt;
      }
    }
  };
  for (const Edge& e : edges) {
    attribute(e.t - t);
    t = e.t;
    count[static_cast<size_t>(e.slot)] += e.delta;
  }
  attribute(step_time_s - t);
  return b;
}

}  // namespace trainplan::sim::detail
