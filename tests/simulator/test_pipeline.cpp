#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;
using trainplan::testing::build_pipeline;
using trainplan::testing::exact_options;
using trainplan::testing::PipelineSpec;
using trainplan::testing::test_gpu;

namespace {

sim::StepResult run(const PipelineSpec& s) {
  auto topo = sim::make_switch_topology(s.stages, 1e11, 0);
  return sim::simulate_step(build_pipeline(s), topo, test_gpu(), exact_options());
}

}  // namespace

TEST_CASE("simulator: GPipe and 1F1B bubble fraction is (p-1)/(m+p-1)", "[simulator]") {
  Rng rng(41);
  for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b}) {
    for (int trial = 0; trial < 6; ++trial) {
      PipelineSpec s;
      s.schedule = schedule;
      s.stages = 2 + static_cast<int>(rng.below(7));
      s.micro_batches = 1 + static_cast<int>(rng.below(24));
      s.forward_s = 1e-3 * (1 + rng.uniform());
      s.backward_s = s.forward_s * (1.5 + rng.uniform());
      auto r = run(s);
      const int p = s.stages, m = s.micro_batches;
      INFO(plan::schedule_name(schedule) << " p=" << p << " m=" << m);
      CHECK(r.step_time_s == Approx((m + p - 1) * (s.forward_s + s.backward_s)).epsilon(1e-9));
      CHECK(r.breakdown.bubble_s / r.step_time_s == Approx((p - 1.0) / (m + p - 1.0)).epsilon(1e-9));
      CHECK(r.breakdown.compute_s == Approx(m * (s.forward_s + s.backward_s)).epsilon(1e-9));
      CHECK(r.breakdown.other_s == Approx(0).margin(1e-12));
      CHECK(r.breakdown.exposed_comm_total_s() == Approx(0).margin(1e-12));
    }
  }
}

TEST_CASE("simulator: interleaved 1F1B bubble is (p-1)/(v*m) of the ideal time", "[simulator]") {
  Rng rng(42);
  for (int trial = 0; trial < 6; ++trial) {
    PipelineSpec s;
    s.schedule = plan::Schedule::interleaved_1f1b;
    s.stages = 2 + static_cast<int>(rng.below(4));
    s.chunks = 2 + static_cast<int>(rng.below(3));
    s.micro_batches = s.stages * (1 + static_cast<int>(rng.below(4)));  // a multiple of p
    s.forward_s = 1e-3;
    s.backward_s = 2e-3;
    auto r = run(s);
    const int p = s.stages, m = s.micro_batches, v = s.chunks;
    INFO("p=" << p << " m=" << m << " v=" << v);
    CHECK(r.breakdown.compute_s == Approx(m * (s.forward_s + s.backward_s)).epsilon(1e-9));
    CHECK(r.breakdown.bubble_s / r.breakdown.compute_s == Approx((p - 1.0) / (v * m)).epsilon(1e-9));
    CHECK(r.breakdown.compute_s + r.breakdown.bubble_s == Approx(r.step_time_s).epsilon(1e-9));
  }
}

TEST_CASE("simulator: pipeline peak memory is p-s micro-batches for 1F1B, m for GPipe", "[simulator]") {
  Rng rng(43);
  const double act = 1e9 * (1 + rng.uniform());
  PipelineSpec s;
  s.stages = 4;
  s.micro_batches = 9;
  s.saved_bytes = act;
  for (auto schedule : {plan::Schedule::gpipe, plan::Schedule::one_f_one_b}) {
    s.schedule = schedule;
    auto prog = build_pipeline(s);
    const double static_bytes = 7e9;
    for (auto& rp : prog.ranks) rp.static_bytes = static_bytes + rp.rank;
    auto topo = sim::make_switch_topology(s.stages, 1e11, 0);
    auto r = sim::simulate_step(prog, topo, test_gpu(), exact_options());
    for (int stage = 0; stage < s.stages; ++stage) {
      const int live = schedule == plan::Schedule::gpipe ? s.micro_batches : s.stages - stage;
      CHECK(r.peak_memory_bytes[static_cast<size_t>(stage)] == Approx(static_bytes + stage + live * act).epsilon(1e-12));
      CHECK(r.timeline.peak_memory_bytes[static_cast<size_t>(stage)] == r.peak_memory_bytes[static_cast<size_t>(stage)]);
    }
  }
}

TEST_CASE("simulator: pipeline transfers show as exposed pp communication", "[simulator]") {
  // Two stages, one micro-batch: forward, send, backward, send back. The two transfers are
  // exposed on stage 0 (the critical rank) and the rest of its idle time is pipeline wait.
  PipelineSpec s;
  s.stages = 2;
  s.micro_batches = 1;
  s.forward_s = 1e-3;
  s.backward_s = 2e-3;
  s.activation_bytes = 1e8;
  const double bw = 1e11;
  auto topo = sim::make_switch_topology(2, bw, 0);
  auto r = sim::simulate_step(build_pipeline(s), topo, test_gpu(), exact_options());
  const double xfer = s.activation_bytes / bw;
  CHECK(r.step_time_s == Approx(2 * (s.forward_s + s.backward_s) + 2 * xfer).epsilon(1e-12));
  CHECK(r.breakdown.critical_rank == 0);
  CHECK(r.breakdown.exposed_comm(plan::CommPurpose::pp) == Approx(2 * xfer).epsilon(1e-9));
  CHECK(r.breakdown.bubble_s == Approx(s.forward_s + s.backward_s).epsilon(1e-9));
}
