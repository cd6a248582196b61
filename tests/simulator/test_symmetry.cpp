#include <cmath>
#include <set>
#include <vector>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;
using trainplan::testing::build_hybrid;
using trainplan::testing::exact_options;
using trainplan::testing::HybridSpec;
using trainplan::testing::test_gpu;

namespace {

void require_same(const sim::StepResult& full, const sim::StepResult& sym) {
  const double tol = 1e-9;
  REQUIRE(sym.step_time_s == Approx(full.step_time_s).epsilon(tol));
  CHECK(sym.breakdown.critical_rank == full.breakdown.critical_rank);
  CHECK(sym.breakdown.compute_s == Approx(full.breakdown.compute_s).epsilon(tol));
  CHECK(sym.breakdown.bubble_s == Approx(full.breakdown.bubble_s).epsilon(tol).margin(1e-15));
  CHECK(sym.breakdown.other_s == Approx(full.breakdown.other_s).epsilon(tol).margin(1e-12));
  for (int p = 0; p < sim::kNumPurposes; ++p)
    CHECK(sym.breakdown.exposed_comm_s[static_cast<size_t>(p)] ==
          Approx(full.breakdown.exposed_comm_s[static_cast<size_t>(p)]).epsilon(tol).margin(1e-12));
  REQUIRE(sym.peak_memory_bytes.size() == full.peak_memory_bytes.size());
  for (size_t r = 0; r < full.peak_memory_bytes.size(); ++r) {
    CHECK(sym.peak_memory_bytes[r] == full.peak_memory_bytes[r]);
    CHECK(sym.gpu_utilization[r] == Approx(full.gpu_utilization[r]).epsilon(tol));
    CHECK(sym.bytes_sent[r] == Approx(full.bytes_sent[r]).epsilon(tol));
    CHECK(sym.bytes_received[r] == Approx(full.bytes_received[r]).epsilon(tol));
  }
  REQUIRE(sym.timeline.events.size() == full.timeline.events.size());
  for (size_t i = 0; i < full.timeline.events.size(); ++i) {
    const auto& a = full.timeline.events[i];
    const auto& b = sym.timeline.events[i];
    REQUIRE(a.rank == b.rank);
    REQUIRE(a.task == b.task);
    REQUIRE(b.start_s == Approx(a.start_s).epsilon(tol).margin(1e-15));
    REQUIRE(b.end_s == Approx(a.end_s).epsilon(tol).margin(1e-15));
  }
  CHECK(sym.stats.ranks_simulated < full.stats.ranks_simulated);
  CHECK(sym.stats.tasks_simulated < full.stats.tasks_simulated);
}

}  // namespace

TEST_CASE("simulator: symmetric and full fidelity agree on a symmetric dp x tp x pp program", "[simulator]") {
  HybridSpec h;
  h.dp = 4;
  h.tp = 2;
  h.pp = 3;
  h.micro_batches = 5;
  auto prog = build_hybrid(h);
  // One node per tp group: dp all-reduces and pp transfers cross the NICs and contend there.
  auto topo = sim::make_two_level_topology({h.dp * h.pp, h.tp, 3e11, 1e-6, 2.5e10, 5e-6});
  auto opt = exact_options();
  auto full = sim::simulate_step(prog, topo, test_gpu(), opt);
  opt.fidelity = sim::Fidelity::symmetric;
  auto sym = sim::simulate_step(prog, topo, test_gpu(), opt);
  CHECK(sym.stats.ranks_simulated == h.tp * h.pp);
  require_same(full, sym);
  CHECK(full.breakdown.exposed_comm(plan::CommPurpose::dp) > 0);  // the case exercises the network
}

TEST_CASE("simulator: symmetric fidelity keeps the contention of the replicas it does not simulate", "[simulator]") {
  // Four GPUs per node hold two dp replicas of a tp=2 group: their tp and dp traffic share
  // the node's NIC with replicas that symmetric fidelity does not simulate.
  HybridSpec h;
  h.dp = 4;
  h.tp = 2;
  h.pp = 2;
  h.micro_batches = 3;
  h.pp_bytes = 2e8;
  auto prog = build_hybrid(h);
  auto topo = sim::make_two_level_topology({4, 4, 3e11, 1e-6, 2.5e10, 5e-6});
  for (auto algo : {plan::DpAlgorithm::ring, plan::DpAlgorithm::hierarchical}) {
    auto opt = exact_options();
    opt.dp_algorithm = algo;
    auto full = sim::simulate_step(prog, topo, test_gpu(), opt);
    opt.fidelity = sim::Fidelity::symmetric;
    auto sym = sim::simulate_step(prog, topo, test_gpu(), opt);
    INFO(plan::dp_algorithm_name(algo));
    require_same(full, sym);
  }
}

TEST_CASE("simulator: a representatives-only program simulates like the full one", "[simulator]") {
  // Only dp_rank 0 of each (pp, tp) class has tasks; the others are renamed copies. The dp,
  // world and replica-local (tp, pp) traffic of the task-less ranks must still load the network.
  HybridSpec h;
  h.dp = 4;
  h.tp = 2;
  h.pp = 2;
  h.micro_batches = 3;
  h.world_all_reduce = true;
  auto prog = build_hybrid(h);
  auto reps = trainplan::testing::representatives_only(prog);
  auto topo = sim::make_two_level_topology({4, 4, 3e11, 1e-6, 2.5e10, 5e-6});
  auto opt = exact_options();
  auto full = sim::simulate_step(prog, topo, test_gpu(), opt);
  REQUIRE_ERROR_CONTAINS(sim::simulate_step(reps, topo, test_gpu(), opt), "representatives-only");
  opt.fidelity = sim::Fidelity::symmetric;
  auto sym = sim::simulate_step(reps, topo, test_gpu(), opt);
  require_same(full, sym);
}

TEST_CASE("simulator: symmetric fidelity rejects ranks that are not symmetric", "[simulator]") {
  HybridSpec h;
  auto prog = build_hybrid(h);
  prog.ranks[1].tasks[1].flops *= 2;  // rank 1 (dp 0, tp 1) differs from rank 3 (dp 1, tp 1)
  prog.ranks[3].tasks[1].flops *= 3;
  auto topo = sim::make_switch_topology(h.dp * h.tp * h.pp, 1e11, 0);
  auto opt = exact_options();
  opt.fidelity = sim::Fidelity::symmetric;
  REQUIRE_ERROR_CONTAINS(sim::simulate_step(prog, topo, test_gpu(), opt), "differs in flops");
}

TEST_CASE("simulator: timeline aliases store a class's events once and expand to the full timeline", "[simulator]") {
  HybridSpec h;
  h.dp = 4;
  h.tp = 2;
  h.pp = 2;
  h.micro_batches = 3;
  auto prog = build_hybrid(h);
  auto topo = sim::make_two_level_topology({h.dp * h.pp, h.tp, 3e11, 1e-6, 2.5e10, 5e-6});
  auto opt = exact_options();
  opt.fidelity = sim::Fidelity::symmetric;
  const auto materialized = sim::simulate_step(prog, topo, test_gpu(), opt);
  opt.timeline_aliases = true;
  const auto aliased = sim::simulate_step(prog, topo, test_gpu(), opt);
  // dp 4 replicas of 4 simulated ranks: 12 of the 16 ranks are aliases.
  CHECK(materialized.timeline.aliases.empty());
  REQUIRE(aliased.timeline.aliases.size() == 12);
  CHECK(aliased.timeline.events.size() * 4 == materialized.timeline.events.size());
  std::vector<plan::TimelineEvent> expanded;
  plan::for_each_event(aliased.timeline, [&](const plan::TimelineEvent& e) { expanded.push_back(e); });
  REQUIRE(expanded.size() == materialized.timeline.events.size());
  for (size_t i = 0; i < expanded.size(); ++i) {
    const auto& a = materialized.timeline.events[i];
    const auto& b = expanded[i];
    REQUIRE(a.rank == b.rank);
    REQUIRE(a.task == b.task);
    REQUIRE(a.start_s == b.start_s);
    REQUIRE(a.end_s == b.end_s);
    REQUIRE(a.label == b.label);
  }
  // The written documents are the same: timeline JSON and Chrome trace.
  CHECK(plan::to_json(aliased.timeline) == plan::to_json(materialized.timeline));
  CHECK(plan::chrome_trace(aliased.timeline) == plan::chrome_trace(materialized.timeline));
  // Only the ranks asked for: rank 5's representative is not shown, so rank 5 is stored.
  opt.timeline_ranks = {5, 9};
  const auto sampled = sim::simulate_step(prog, topo, test_gpu(), opt);
  std::set<int> ranks;
  plan::for_each_event(sampled.timeline, [&](const plan::TimelineEvent& e) { ranks.insert(e.rank); });
  CHECK(ranks == std::set<int>{5, 9});
}
