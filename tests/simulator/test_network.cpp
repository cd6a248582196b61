#include <cmath>
#include <vector>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/network.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;
using trainplan::testing::exact_options;
using trainplan::testing::ProgramBuilder;
using trainplan::testing::test_gpu;

namespace {

// GPUs 0,1 send to 2,3; both routes share link `shared`; private links are 100x faster.
sim::TableTopology shared_link_topology(double shared_bw, double latency_s) {
  sim::TableTopology t(4);
  const int shared = t.add_link(shared_bw, latency_s, "shared");
  for (int src : {0, 1}) {
    const int in = t.add_link(shared_bw * 100, 0, "in" + std::to_string(src));
    const int out = t.add_link(shared_bw * 100, 0, "out" + std::to_string(src));
    t.set_route(src, src + 2, {in, shared, out});
  }
  return t;
}

double end_of(const sim::StepResult& r, int rank, int task) {
  for (const auto& e : r.timeline.events)
    if (e.rank == rank && e.task == task) return e.end_s;
  FAIL("no such event");
  return 0;
}

}  // namespace

TEST_CASE("simulator: one flow on one link takes S/B + latency", "[simulator]") {
  Rng rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    const double bytes = 1e6 + rng.uniform() * 1e9;
    const double bw = 1e9 + rng.uniform() * 1e11;
    const double lat = rng.uniform() * 1e-5;
    sim::TableTopology topo(2);
    topo.set_route(0, 1, {topo.add_link(bw, lat)});
    ProgramBuilder b(2);
    const int64_t id = b.fresh_comm_id();
    b.send(0, 1, bytes, id);
    b.recv(1, 0, bytes, id);
    auto r = sim::simulate_step(b.program(), topo, test_gpu(), exact_options());
    CHECK(r.step_time_s == Approx(bytes / bw + lat).epsilon(1e-12));
    CHECK(r.bytes_sent[0] == bytes);
    CHECK(r.bytes_received[1] == bytes);
  }
}

TEST_CASE("simulator: two flows on one link get half the bandwidth each", "[simulator]") {
  Rng rng(22);
  const double bytes = 2e8 * (1 + rng.uniform());
  const double bw = 5e10 * (1 + rng.uniform());
  auto topo = shared_link_topology(bw, 0);
  ProgramBuilder b(4);
  for (int src : {0, 1}) {
    const int64_t id = b.fresh_comm_id();
    b.send(src, src + 2, bytes, id);
    b.recv(src + 2, src, bytes, id);
  }
  auto r = sim::simulate_step(b.program(), topo, test_gpu(), exact_options());
  CHECK(end_of(r, 2, 0) == Approx(2 * bytes / bw).epsilon(1e-12));
  CHECK(end_of(r, 3, 0) == Approx(2 * bytes / bw).epsilon(1e-12));
}

TEST_CASE("simulator: a flow joining later shares the link from then on", "[simulator]") {
  Rng rng(23);
  const double bytes = 1e9;
  const double bw = 1e11;
  const double t0 = bytes / bw * (0.2 + 0.5 * rng.uniform());  // second flow starts at t0
  auto topo = shared_link_topology(bw, 0);
  ProgramBuilder b(4);
  const int64_t a = b.fresh_comm_id(), c = b.fresh_comm_id();
  b.send(0, 2, bytes, a);
  b.recv(2, 0, bytes, a);
  const int delay = b.compute(1, t0);
  b.send(1, 3, bytes, c, {delay});
  b.recv(3, 1, bytes, c);
  auto r = sim::simulate_step(b.program(), topo, test_gpu(), exact_options());
  // Alone for t0, then half each; the first finishes at t1, the second runs alone after.
  const double t1 = t0 + 2 * (bytes - bw * t0) / bw;
  CHECK(end_of(r, 2, 0) == Approx(t1).epsilon(1e-12));
  CHECK(end_of(r, 3, 0) == Approx(t1 + t0).epsilon(1e-12));
}

TEST_CASE("simulator: max-min rates on a two-link example", "[simulator]") {
  // Link 0 (10 B/s): f1, f2. Link 1 (4 B/s): f2, f3. Bottleneck link 1 gives f2 = f3 = 2;
  // f1 takes what is left of link 0: 8.
  sim::FlowNetwork net({10, 4});
  sim::SeqCounter seq;
  std::vector<sim::LinkUse> u1{{0, 1}}, u2{{0, 1}, {1, 1}}, u3{{1, 1}};
  int f1 = net.start(u1, 100, 0, 1), f2 = net.start(u2, 100, 0, 2), f3 = net.start(u3, 100, 0, 3);
  net.update_rates(0, seq);
  CHECK(net.rate(f1) == Approx(8));
  CHECK(net.rate(f2) == Approx(2));
  CHECK(net.rate(f3) == Approx(2));
  // A coflow crossing link 0 twice (multiplicity 2) takes two shares there.
  sim::FlowNetwork net2({9});
  std::vector<sim::LinkUse> twice{{0, 2}}, once{{0, 1}};
  int a = net2.start(twice, 100, 0, 1), b = net2.start(once, 100, 0, 2);
  net2.update_rates(0, seq);
  CHECK(net2.rate(a) == Approx(3));
  CHECK(net2.rate(b) == Approx(3));
}

TEST_CASE("simulator: random networks satisfy the max-min bottleneck property", "[simulator]") {
  // Max-min fair <=> feasible and every coflow has a saturated link on which no coflow has a
  // higher rate (Bertsekas & Gallager, Data Networks, 6.5.2).
  Rng rng(24);
  for (int trial = 0; trial < 50; ++trial) {
    const int links = 2 + static_cast<int>(rng.below(12));
    std::vector<double> cap;
    for (int l = 0; l < links; ++l) cap.push_back(1 + 99 * rng.uniform());
    sim::FlowNetwork net(cap);
    sim::SeqCounter seq;
    const int n = 1 + static_cast<int>(rng.below(25));
    std::vector<std::vector<sim::LinkUse>> uses(static_cast<size_t>(n));
    std::vector<int> ids;
    for (auto& u : uses) {
      for (int l = 0; l < links; ++l)
        if (rng.uniform() < 0.3) u.push_back({l, 1 + static_cast<int>(rng.below(3))});
      if (u.empty()) u.push_back({static_cast<int>(rng.below(static_cast<uint64_t>(links))), 1});
      ids.push_back(net.start(u, 1e6, 0, static_cast<int64_t>(ids.size())));
    }
    net.update_rates(0, seq);
    std::vector<double> load(static_cast<size_t>(links), 0), max_rate(static_cast<size_t>(links), 0);
    for (int i = 0; i < n; ++i)
      for (auto u : uses[static_cast<size_t>(i)]) {
        load[static_cast<size_t>(u.link)] += u.multiplicity * net.rate(ids[static_cast<size_t>(i)]);
        max_rate[static_cast<size_t>(u.link)] = std::max(max_rate[static_cast<size_t>(u.link)], net.rate(ids[static_cast<size_t>(i)]));
      }
    for (int l = 0; l < links; ++l) REQUIRE(load[static_cast<size_t>(l)] <= cap[static_cast<size_t>(l)] * (1 + 1e-9));
    for (int i = 0; i < n; ++i) {
      const double r = net.rate(ids[static_cast<size_t>(i)]);
      REQUIRE(r > 0);
      bool has_bottleneck = false;
      for (auto u : uses[static_cast<size_t>(i)]) {
        const auto l = static_cast<size_t>(u.link);
        if (load[l] >= cap[l] * (1 - 1e-9) && r >= max_rate[l] * (1 - 1e-9)) has_bottleneck = true;
      }
      REQUIRE(has_bottleneck);
    }
  }
}

TEST_CASE("simulator: rate updates touch only the component that changed", "[simulator]") {
  sim::FlowNetwork net({10, 10, 10});
  sim::SeqCounter seq;
  std::vector<sim::LinkUse> left{{0, 1}}, right{{2, 1}};
  net.start(left, 100, 0, 1);
  net.start(left, 100, 0, 2);
  net.start(right, 50, 0, 3);
  net.update_rates(0, seq);
  const int64_t rated = net.coflows_rated();
  CHECK(rated == 3);
  // The right link's coflow finishes first (50 bytes at 10 B/s = 5 s): only its component
  // (now empty) is revisited, the two coflows on link 0 are not re-rated.
  CHECK(net.next_time_s() == Approx(5));
  CHECK(net.pop_finished() == 3);
  net.update_rates(5, seq);
  CHECK(net.coflows_rated() == rated);
  CHECK(net.next_time_s() == Approx(20));
}
