// The host CPU that issues a rank's kernels (SimOptions::host, a plan's software stack) against
// closed forms: a chain of kernels is host-bound below the issue cost and GPU-bound above it,
// layer hooks show only when host-bound, a sync before the optimizer drains the run-ahead.
#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;

namespace {

sim::StepResult run(testing::ProgramBuilder& b, const sim::SimOptions& o) {
  const sim::TableTopology topo = sim::make_switch_topology(b.program().world_size, 100e9, 1e-6);
  return sim::simulate_step(b.program(), topo, testing::test_gpu(), o);
}

sim::SimOptions host_options(double launch_s) {
  sim::SimOptions o = testing::exact_options();
  o.host.launch_s = launch_s;
  return o;
}

// N one-kernel tasks of d seconds in a chain on rank 0, unit u = i / per_unit.
testing::ProgramBuilder chain(int n, double d, int per_unit = 0) {
  testing::ProgramBuilder b(1);
  int prev = -1;
  for (int i = 0; i < n; ++i) {
    prev = b.compute(0, d, prev < 0 ? std::vector<int>{} : std::vector<int>{prev});
    if (per_unit > 0) b.rank(0).tasks.back().unit = i / per_unit;
  }
  return b;
}

}  // namespace

TEST_CASE("host: a chain of N kernels takes h + (N-1) max(d, h) + d: N h + d host-bound, h + N d GPU-bound", "[simulator]") {
  const int n = 50;
  const double h = 10e-6;
  for (double d : {1e-6, 4e-6, 9e-6, 11e-6, 40e-6, 1e-3}) {
    auto b = chain(n, d);
    const double step = run(b, host_options(h)).step_time_s;
    const double want = d < h ? n * h + d : h + n * d;
    INFO("d = " << d);
    CHECK(step == Approx(want).epsilon(1e-9));
  }
  // Without a host model the chain is N d, whatever the kernel size.
  auto b = chain(n, 1e-6);
  CHECK(run(b, testing::exact_options()).step_time_s == Approx(n * 1e-6).epsilon(1e-9));
}

TEST_CASE("host: per-layer hooks add L x hook on the host path and show only when host-bound", "[simulator]") {
  const int layers = 6, per = 4;
  const double h = 10e-6, hook = 50e-6;
  sim::SimOptions o = host_options(h);
  o.host.layer_hook_s = hook;
  {  // host-bound: kernels of 1 us
    const double d = 1e-6;
    auto b = chain(layers * per, d, per);
    CHECK(run(b, o).step_time_s == Approx(layers * hook + layers * per * h + d).epsilon(1e-9));
  }
  {  // GPU-bound: kernels of 1 ms hide every hook but the first
    const double d = 1e-3;
    auto b = chain(layers * per, d, per);
    CHECK(run(b, o).step_time_s == Approx(hook + h + layers * per * d).epsilon(1e-9));
  }
}

TEST_CASE("host: a sync before the optimizer drains the host run-ahead, without it the optimizer is hidden", "[simulator]") {
  const int n = 20;
  const double h = 10e-6, d = 1e-3, step_cost = 300e-6, d_opt = 2e-4;
  auto build = [&] {
    auto b = chain(n, d);
    b.compute(0, d_opt, {n - 1}, plan::Phase::optimizer, "optimizer");
    return b;
  };
  sim::SimOptions o = host_options(h);
  o.host.step_s = step_cost;
  o.host.sync_before_optimizer = true;
  auto synced = build();
  // The host waits for the last backward kernel, then spends the step cost and one launch.
  CHECK(run(synced, o).step_time_s == Approx(h + n * d + step_cost + h + d_opt).epsilon(1e-9));
  o.host.sync_before_optimizer = false;
  auto free_running = build();
  // The host issued the optimizer long before the GPU got there (n h + S + h < h + n d).
  CHECK(run(free_running, o).step_time_s == Approx(h + n * d + d_opt).epsilon(1e-9));
}

TEST_CASE("host: a merged task of k kernels starts after its first issue and ends no earlier than its last issue + D/k",
          "[simulator]") {
  const double h = 10e-6, total = 8e-6;
  for (int k : {1, 2, 4, 8}) {
    testing::ProgramBuilder b(1);
    b.compute(0, total);
    b.rank(0).tasks.back().ops.assign(static_cast<size_t>(k), 0);  // k merged ops: k kernels
    b.rank(0).tasks.back().op_kind = -1;
    INFO("k = " << k);
    CHECK(run(b, host_options(h)).step_time_s == Approx(k * h + total / k).epsilon(1e-9));
  }
}

TEST_CASE("host: per-micro-batch costs go on the host path once per micro-batch", "[simulator]") {
  const double h = 10e-6, mb_cost = 100e-6, d = 1e-6;
  testing::ProgramBuilder b(1);
  int prev = -1;
  for (int m = 0; m < 3; ++m)
    for (int i = 0; i < 5; ++i) {
      prev = b.compute(0, d, prev < 0 ? std::vector<int>{} : std::vector<int>{prev});
      b.rank(0).tasks.back().micro_batch = m;
    }
  sim::SimOptions o = host_options(h);
  o.host.micro_batch_s = mb_cost;
  CHECK(run(b, o).step_time_s == Approx(3 * mb_cost + 15 * h + d).epsilon(1e-9));
}

TEST_CASE("host: negative host costs are refused", "[simulator]") {
  auto b = chain(2, 1e-6);
  sim::SimOptions o = host_options(-1e-6);
  REQUIRE_ERROR_CONTAINS(run(b, o), "host model costs must be >= 0");
}
