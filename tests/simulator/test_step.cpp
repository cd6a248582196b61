#include <cmath>
#include <string>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;
using trainplan::testing::build_hybrid;
using trainplan::testing::exact_options;
using trainplan::testing::HybridSpec;
using trainplan::testing::ProgramBuilder;
using trainplan::testing::test_gpu;

namespace {

sim::TableTopology hybrid_topology(const HybridSpec& h) {
  return sim::make_two_level_topology({h.dp * h.pp, h.tp, 3e11, 1e-6, 2.5e10, 5e-6});
}

double sum_breakdown(const sim::Breakdown& b) {
  return b.compute_s + b.optimizer_s + b.bubble_s + b.other_s + b.exposed_comm_total_s();
}

}  // namespace

TEST_CASE("simulator: the breakdown sums to the critical rank's step time", "[simulator]") {
  Rng rng(51);
  for (int trial = 0; trial < 4; ++trial) {
    HybridSpec h;
    h.dp = 1 + static_cast<int>(rng.below(3));
    h.tp = 1 + static_cast<int>(rng.below(3));
    h.pp = 1 + static_cast<int>(rng.below(3));
    h.micro_batches = 1 + static_cast<int>(rng.below(6));
    h.tp_bytes = 1e6 * (1 + rng.below(100));
    auto opt = sim::SimOptions{};  // default compute and launch costs
    auto r = sim::simulate_step(build_hybrid(h), hybrid_topology(h), test_gpu(), opt);
    INFO("dp=" << h.dp << " tp=" << h.tp << " pp=" << h.pp << " m=" << h.micro_batches);
    CHECK(sum_breakdown(r.breakdown) == Approx(r.step_time_s).epsilon(1e-12));
    CHECK(r.breakdown.optimizer_s > 0);
    CHECK(r.breakdown.compute_s > 0);
    for (double u : r.gpu_utilization) CHECK((u > 0 && u <= 1));
  }
}

TEST_CASE("simulator: exposed communication is the part compute does not hide", "[simulator]") {
  // One rank computes for T while a dp all-reduce of duration X runs beside it (no deps):
  // fully hidden when X <= T. Then an all-reduce that depends on the compute is fully exposed.
  const double bw = 1e11, bytes = 4e8;
  const int n = 4;
  auto topo = sim::make_switch_topology(n, bw, 0);
  const double x = 2.0 * (n - 1) / n * bytes / bw;
  ProgramBuilder b(n);
  const int g = b.group({0, 1, 2, 3}, plan::CommPurpose::dp);
  std::vector<std::vector<int>> deps;
  for (int r = 0; r < n; ++r) deps.push_back({b.compute(r, 2 * x)});
  b.collective(g, plan::CollectiveKind::all_reduce, bytes);          // overlaps the compute
  b.collective(g, plan::CollectiveKind::all_reduce, bytes, deps);    // after it
  auto r = sim::simulate_step(b.program(), topo, test_gpu(), exact_options());
  CHECK(r.step_time_s == Approx(3 * x).epsilon(1e-12));
  CHECK(r.breakdown.compute_s == Approx(2 * x).epsilon(1e-12));
  CHECK(r.breakdown.exposed_comm(plan::CommPurpose::dp) == Approx(x).epsilon(1e-12));
}

TEST_CASE("simulator: compute slows while communication overlaps it", "[simulator]") {
  const double t = 1e-2, bytes = 2e8, bw = 5e10;
  const double x = bytes / bw;  // 4 ms of transfer, started with the compute
  auto topo = sim::make_switch_topology(2, bw, 0);
  ProgramBuilder b(2);
  b.compute(0, t);
  const int64_t id = b.fresh_comm_id();
  b.send(0, 1, bytes, id, {}, plan::CommPurpose::pp, trainplan::testing::kPpSend);
  b.recv(1, 0, bytes, id);
  for (double slowdown : {0.0, 0.25}) {
    auto opt = exact_options();
    opt.overlap_slowdown = slowdown;
    auto r = sim::simulate_step(b.program(), topo, test_gpu(), opt);
    // x seconds at 1/(1+s) speed, the rest at full speed.
    CHECK(r.timeline.events[0].end_s == Approx(x + (t - x / (1 + slowdown))).epsilon(1e-12));
  }
}

TEST_CASE("simulator: straggler jitter is deterministic per seed and off at stddev 0", "[simulator]") {
  HybridSpec h;
  auto prog = build_hybrid(h);
  auto topo = hybrid_topology(h);
  auto base = exact_options();
  const std::string plain = json::dump(to_json(sim::simulate_step(prog, topo, test_gpu(), base).timeline));
  auto zero = base;
  zero.straggler_stddev = 0;
  zero.straggler_seed = 99;
  CHECK(json::dump(to_json(sim::simulate_step(prog, topo, test_gpu(), zero).timeline)).size() > 0);
  {
    auto a = sim::simulate_step(prog, topo, test_gpu(), zero);
    auto tl = a.timeline;
    tl.meta = nullptr;  // options differ (seed); compare the events
    auto ref = sim::simulate_step(prog, topo, test_gpu(), base).timeline;
    ref.meta = nullptr;
    CHECK(json::dump(to_json(tl)) == json::dump(to_json(ref)));
  }
  auto jit = base;
  jit.straggler_stddev = 0.05;
  jit.straggler_seed = 7;
  auto a = sim::simulate_step(prog, topo, test_gpu(), jit);
  auto b = sim::simulate_step(prog, topo, test_gpu(), jit);
  CHECK(json::dump(to_json(a.timeline)) == json::dump(to_json(b.timeline)));
  CHECK(a.step_time_s != sim::simulate_step(prog, topo, test_gpu(), base).step_time_s);
  jit.straggler_seed = 8;
  CHECK(sim::simulate_step(prog, topo, test_gpu(), jit).step_time_s != a.step_time_s);
  // The first compute of rank 0 runs at its GPU's drawn speed.
  jit.straggler_seed = 7;
  const double speed = std::max(0.1, Rng(7).fork(0).normal(1.0, 0.05));
  const auto& e0 = a.timeline.events[1];  // rank 0: task 0 alloc, task 1 first compute
  REQUIRE(e0.kind == plan::TaskKind::compute);
  CHECK(e0.end_s - e0.start_s == Approx(h.forward_s / 2 / speed).epsilon(1e-12));
}

TEST_CASE("simulator: the same inputs give byte-identical results", "[simulator]") {
  HybridSpec h;
  h.dp = 3;
  h.tp = 2;
  h.pp = 2;
  auto prog = build_hybrid(h);
  auto topo = hybrid_topology(h);
  sim::SimOptions opt;
  opt.straggler_stddev = 0.03;
  opt.straggler_seed = 5;
  opt.overlap_slowdown = 0.1;
  auto a = sim::simulate_step(prog, topo, test_gpu(), opt);
  auto b = sim::simulate_step(prog, topo, test_gpu(), opt);
  CHECK(json::dump(to_json(a.timeline)) == json::dump(to_json(b.timeline)));
  CHECK(json::dump(sim::to_json(a)) == json::dump(sim::to_json(b)));
  CHECK(json::dump(plan::chrome_trace(a.timeline)) == json::dump(plan::chrome_trace(b.timeline)));
}

TEST_CASE("simulator: record_timeline off leaves the numbers unchanged", "[simulator]") {
  HybridSpec h;
  auto prog = build_hybrid(h);
  auto topo = hybrid_topology(h);
  sim::SimOptions opt;
  auto with = sim::simulate_step(prog, topo, test_gpu(), opt);
  opt.record_timeline = false;
  auto without = sim::simulate_step(prog, topo, test_gpu(), opt);
  CHECK(without.timeline.events.empty());
  CHECK(without.step_time_s == with.step_time_s);
  CHECK(json::dump(sim::to_json(without)) == json::dump(sim::to_json(with)));
  // Only some ranks: exactly their events, as in the full timeline.
  opt.record_timeline = true;
  opt.timeline_ranks = {5, 2};
  auto some = sim::simulate_step(prog, topo, test_gpu(), opt);
  std::vector<plan::TimelineEvent> want;
  for (const auto& e : with.timeline.events)
    if (e.rank == 2 || e.rank == 5) want.push_back(e);
  REQUIRE(some.timeline.events.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(some.timeline.events[i].rank == want[i].rank);
    CHECK(some.timeline.events[i].task == want[i].task);
    CHECK(some.timeline.events[i].start_s == want[i].start_s);
    CHECK(some.timeline.events[i].end_s == want[i].end_s);
  }
  CHECK(some.timeline.peak_memory_bytes.size() == prog.ranks.size());
}

TEST_CASE("simulator: malformed or stuck programs are reported with rank and task", "[simulator]") {
  auto topo = sim::make_switch_topology(2, 1e11, 0);
  {
    ProgramBuilder b(2);
    b.send(0, 1, 1e6, b.fresh_comm_id());
    REQUIRE_ERROR_CONTAINS(sim::simulate_step(b.program(), topo, test_gpu(), exact_options()), "send/recv pair needs 2");
  }
  {
    // Each rank waits for the other's send before sending: a deadlock.
    ProgramBuilder b(2);
    const int64_t a = b.fresh_comm_id(), c = b.fresh_comm_id();
    int r0 = b.recv(0, 1, 1e6, a);
    b.send(0, 1, 1e6, c, {r0});
    int r1 = b.recv(1, 0, 1e6, c);
    b.send(1, 0, 1e6, a, {r1});
    REQUIRE_ERROR_CONTAINS(sim::simulate_step(b.program(), topo, test_gpu(), exact_options()), "deadlock");
  }
  {
    ProgramBuilder b(2);
    b.compute(0, 1e-3, {0});
    REQUIRE_ERROR_CONTAINS(sim::simulate_step(b.program(), topo, test_gpu(), exact_options()), "not an earlier task");
  }
  {
    ProgramBuilder b(2, {0, 5});
    b.compute(1, 1e-3);
    REQUIRE_ERROR_CONTAINS(sim::simulate_step(b.program(), topo, test_gpu(), exact_options()), "runs on GPU 5");
  }
  {
    ProgramBuilder b(2);
    const int g = b.group({0, 1}, plan::CommPurpose::tp);
    auto ids = b.collective(g, plan::CollectiveKind::all_reduce, 1e6);
    b.rank(1).tasks[static_cast<size_t>(ids[1])].bytes = 2e6;
    REQUIRE_ERROR_CONTAINS(sim::simulate_step(b.program(), topo, test_gpu(), exact_options()), "differs from rank 0");
  }
}
