#include <algorithm>
#include <vector>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/event_queue.hpp"

using trainplan::Rng;
using trainplan::sim::Event;
using trainplan::sim::EventQueue;

TEST_CASE("simulator: event queue pops by time, then insertion order", "[simulator]") {
  Rng rng(11);
  EventQueue q;
  struct Pushed {
    double t;
    int a;
  };
  std::vector<Pushed> pushed;
  for (int i = 0; i < 5000; ++i) {
    // Few distinct times, so ties are common.
    double t = static_cast<double>(rng.below(50)) * 0.25;
    q.push(t, 0, i);
    pushed.push_back({t, i});
  }
  // Oracle: stable sort by time keeps insertion order among equal times.
  std::stable_sort(pushed.begin(), pushed.end(), [](const Pushed& x, const Pushed& y) { return x.t < y.t; });
  for (const Pushed& want : pushed) {
    REQUIRE(!q.empty());
    Event e = q.pop();
    REQUIRE(e.time_s == want.t);
    REQUIRE(e.a == want.a);
  }
  REQUIRE(q.empty());
}

TEST_CASE("simulator: event queue interleaves pushes and pops like a sorted list", "[simulator]") {
  Rng rng(12);
  EventQueue q;
  std::vector<std::pair<double, uint64_t>> oracle;  // (time, seq) of pending events
  double now = 0;
  for (int step = 0; step < 20000; ++step) {
    if (oracle.empty() || rng.uniform() < 0.55) {
      double t = now + rng.uniform() * 3.0;
      uint64_t seq = q.push(t, 1, step);
      oracle.push_back({t, seq});
    } else {
      auto it = std::min_element(oracle.begin(), oracle.end());
      Event e = q.pop();
      REQUIRE(e.time_s == it->first);
      REQUIRE(e.seq == it->second);
      now = e.time_s;
      oracle.erase(it);
    }
    REQUIRE(q.size() == oracle.size());
  }
}

TEST_CASE("simulator: handling the top in place keeps the queue order", "[simulator]") {
  // Same random workload twice: pop + push versus take_top + push (replace) / release_top.
  auto run = [](bool in_place) {
    Rng rng(13);
    EventQueue q;
    std::vector<std::pair<double, int32_t>> order;
    for (int i = 0; i < 200; ++i) q.push(rng.uniform(), 0, i);
    for (int step = 0; step < 20000 && !q.empty(); ++step) {
      const int pushes = static_cast<int>(rng.below(3));  // 0, 1 or 2 follow-ups
      const double dt = rng.uniform();
      Event e = in_place ? q.take_top() : q.pop();
      order.push_back({e.time_s, e.a});
      for (int k = 0; k < pushes; ++k) q.push(e.time_s + dt * (k + 1), 0, e.a + 1000 * (k + 1));
      if (in_place) q.release_top();
    }
    return order;
  };
  CHECK(run(true) == run(false));
}
