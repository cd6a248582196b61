// calibration: robust log-time fit against closed forms, profile JSON, bench statistics, and
// the simulator seam (a fitted profile reproduces the tasks it was fitted to).


#include <cmath>
#include <set>

#include "test_support.hpp"
#include "trainplan/calibration/fit.hpp"
#include "trainplan/calibration/measurements.hpp"
#include "trainplan/calibration/profile.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/simulator/compute_model.hpp"

using namespace trainplan;

TEST_CASE("calibration: fit_log_linear recovers known positive parameters exactly from noiseless data", "[calibration]") {
  // t = 3e-6 * 1 + 2e-9 * bytes: latency + bytes / 500 MB/s.
  std::vector<std::vector<double>> X;
  std::vector<double> t;
  for (double b = 1024; b <= 1 << 26; b *= 2) {
    X.push_back({1.0, b});
    t.push_back(3e-6 + 2e-9 * b);
  }
  const auto f = calibration::fit_log_linear(X, t, {1e-5, 1e-10});
  CHECK(f.converged);
  CHECK(f.params[0] == Approx(3e-6).epsilon(1e-6));
  CHECK(f.params[1] == Approx(2e-9).epsilon(1e-6));
}

TEST_CASE("calibration: the Huber loss keeps one preempted point from dragging the fit", "[calibration]") {
  std::vector<std::vector<double>> X;
  std::vector<double> t;
  for (int i = 1; i <= 40; ++i) {
    X.push_back({static_cast<double>(i)});
    t.push_back(0.5 * i);
  }
  t[10] *= 20;  // one repetition ran while the core was taken
  const auto f = calibration::fit_log_linear(X, t, {1.0});
  // Huber bounds one point's pull to delta / n in the log: 0.1 / 40 = 0.25 %; plain least
  // squares on log time would move by log(20) / 40 = 7.5 %.
  CHECK(f.params[0] == Approx(0.5).epsilon(3e-3));
}

TEST_CASE("calibration: a fit with fewer points than parameters is refused", "[calibration]") {
  CHECK_THROWS_AS(calibration::fit_log_linear({{1.0, 2.0}}, {1.0}, {1.0, 1.0}), Error);
}

TEST_CASE("calibration: relative_errors gives median and worst absolute error", "[calibration]") {
  const auto e = calibration::relative_errors({1.1, 0.8, 2.0}, {1.0, 1.0, 2.0});
  CHECK(e.points == 3);
  CHECK(e.median_abs == Approx(0.1));
  CHECK(e.worst_abs == Approx(0.2));
}

TEST_CASE("calibration: summarize_times: median, MAD and outliers", "[calibration]") {
  calibration::BenchPoint p;
  calibration::summarize_times({1.0, 1.1, 0.9, 1.0, 10.0}, p);
  CHECK(p.median_s == Approx(1.0));
  CHECK(p.mad_s == Approx(0.1));
  CHECK(p.outliers == 1);
  CHECK(p.min_s == Approx(0.9));
  CHECK(p.max_s == Approx(10.0));
  // nccl-tests: busbw = algbw * 2 (n - 1) / n for all-reduce.
  calibration::BenchPoint ar;
  ar.kind = "all_reduce", ar.bytes = 8e6, ar.ranks = 4, ar.median_s = 1e-3;
  CHECK(ar.algbw() == Approx(8e9));
  CHECK(ar.busbw() == Approx(12e9));
}

namespace {
calibration::BenchResult synthetic_bench() {
  calibration::BenchResult b;
  b.machine = "test", b.hardware = "cpu:Test CPU", b.backend = "cpu", b.date = "2026-11-25T00:00:00Z";
  calibration::BenchPoint mm;
  mm.kind = "matmul", mm.m = mm.n = mm.k = 256, mm.flops = 2.0 * 256 * 256 * 256, mm.median_s = mm.flops / 1e10;
  calibration::BenchPoint mem;
  mem.kind = "memory", mem.bytes = 1.2e7, mem.median_s = 1.2e7 / 5e9;
  b.points = {mm, mem};
  for (double bytes = 1024; bytes <= 1 << 24; bytes *= 4) {
    calibration::BenchPoint ar;
    ar.kind = "all_reduce", ar.bytes = bytes, ar.ranks = 2, ar.median_s = 2e-5 + bytes / 1e9;
    b.points.push_back(ar);
  }
  return b;
}
}  // namespace

TEST_CASE("calibration: roofline from a bench: best rates and the all-reduce fit", "[calibration]") {
  const auto r = calibration::roofline(synthetic_bench(), "bench.json");
  CHECK(r.peak_flops_per_s == Approx(1e10));
  CHECK(r.memory_bytes_per_s == Approx(5e9));
  CHECK(r.comm_latency_s == Approx(2e-5).epsilon(1e-4));
  CHECK(r.comm_busbw_bytes_per_s == Approx(1e9).epsilon(1e-4));  // 2 ranks: busbw factor 1
  auto b = synthetic_bench();
  b.points.erase(b.points.begin());
  CHECK_THROWS_WITH(calibration::roofline(b, "bench.json"), Catch::Contains("no matmul point"));
}

TEST_CASE("calibration: bench JSON round trip and errors", "[calibration]") {
  const auto b = synthetic_bench();
  const auto j = calibration::to_json(b);
  const auto back = calibration::bench_from_json(j, "m.json");
  CHECK(back.hardware == b.hardware);
  REQUIRE(back.points.size() == b.points.size());
  CHECK(back.points[0].median_s == Approx(b.points[0].median_s));
  auto bad = j;
  bad["schema_version"] = 7;
  CHECK_THROWS_WITH(calibration::bench_from_json(bad, "m.json"), Catch::Contains("/schema_version"));
  bad = j;
  bad["points"][0]["median_s"] = -1;
  CHECK_THROWS_WITH(calibration::bench_from_json(bad, "m.json"), Catch::Contains("/points/0/median_s"));
}

TEST_CASE("calibration: a profile applies to its hardware only, unless overridden", "[calibration]") {
  calibration::Profile p = calibration::fit_profile(synthetic_bench(), "bench.json", {});
  CHECK(p.efficiency.empty());  // no timelines: roofline only
  CHECK_NOTHROW(calibration::check_profile_applies(p, "cpu:Test CPU", false, "p.json"));
  CHECK_THROWS_WITH(calibration::check_profile_applies(p, "A100-SXM4-40GB", false, "p.json"),
                    Catch::Contains("fitted on cpu:Test CPU, the plan runs on A100-SXM4-40GB"));
  CHECK_NOTHROW(calibration::check_profile_applies(p, "A100-SXM4-40GB", true, "p.json"));
}

TEST_CASE("calibration: profile JSON round trip, and the simulator reads its efficiencies and overhead", "[calibration]") {
  calibration::Profile p = calibration::fit_profile(synthetic_bench(), "bench.json", {});
  p.efficiency[static_cast<int>(models::OpKind::linear)] = 0.5;
  p.efficiency[sim::kOpKindOptimizer] = 0.25;
  p.kernel_overhead_s = 3e-6;
  p.inputs.push_back({"bench.json", "bench", "0123456789abcdef"});
  const auto back = calibration::profile_from_json(calibration::to_json(p), "p.json");
  CHECK(back.efficiency == p.efficiency);
  CHECK(back.kernel_overhead_s == Approx(3e-6));
  CHECK(back.inputs.size() == 1);

  // One linear forward of 2e8 FLOPs (compute-bound on the 1e10 FLOP/s device) at efficiency
  // 0.5 plus one kernel of overhead: 2e8 / (1e10 * 0.5) + 3e-6.
  const auto opt = calibration::apply_profile(back, {});
  sim::ComputeModel m(calibration::device_spec(back), Precision::fp32, opt.compute, opt.calibration.get());
  plan::OpCost c;
  c.op_kind = static_cast<int>(models::OpKind::linear);
  c.flops_fwd = 2e8;
  c.mem_fwd_bytes = 1e3;
  c.gemm_m = c.gemm_n = c.gemm_k = 464;
  CHECK(m.op_duration_s(c, plan::Phase::forward) == Approx(2e8 / 5e9 + 3e-6));

  auto bad = calibration::to_json(back);
  bad["compute"]["efficiency"]["linear"] = 1.5;
  CHECK_THROWS_WITH(calibration::profile_from_json(bad, "p.json"), Catch::Contains("/compute/efficiency/linear"));
  bad = calibration::to_json(back);
  bad["schema_version"] = 2;
  CHECK_THROWS_WITH(calibration::profile_from_json(bad, "p.json"), Catch::Contains("schema version 2"));
}

TEST_CASE("calibration: fit_profile recovers the efficiencies and overhead that generated a timeline", "[calibration]") {
  // The "measurement" is the simulator's own compute model with known parameters on the bench's
  // device; the fit must give them back and predict the step the simulator predicts with them.
  plan::Plan p;
  p.model = "gpt-tiny";
  p.instance_type = "g5.xlarge";
  p.instance_count = 2;
  p.tp = 2;
  p.global_batch = 4;
  p.micro_batch = 2;
  p.precision = Precision::fp32;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");

  calibration::Profile truth = calibration::fit_profile(synthetic_bench(), "bench.json", {});
  truth.kernel_overhead_s = 4e-6;
  const plan::StepProgram prog = plan::lower(p, ctx);
  std::set<int> kinds;
  for (const auto& c : prog.op_costs) kinds.insert(c.op_kind);
  kinds.insert(sim::kOpKindOptimizer);
  double e = 0.15;
  for (int k : kinds) truth.efficiency[k] = (e += 0.1) > 1 ? 0.9 : e;
  const sim::StepResult predicted = calibration::predict_on_profile_hardware(prog, p, truth);
  plan::Timeline tl = predicted.timeline;
  tl.source = "measured (cpu)";
  calibration::MeasuredRun run = calibration::measured_run("synthetic.json", p, ctx, tl);

  const calibration::Profile fitted = calibration::fit_profile(synthetic_bench(), "bench.json", {run});
  CHECK(fitted.kernel_overhead_s == Approx(4e-6).epsilon(1e-3));
  for (const auto& [k, v] : fitted.efficiency) {
    INFO(sim::calibration_op_kind_name(k));
    CHECK(v == Approx(truth.efficiency.at(k)).epsilon(1e-3));
  }
  const sim::StepResult again = calibration::predict_on_profile_hardware(prog, p, fitted);
  CHECK(again.step_time_s == Approx(predicted.step_time_s).epsilon(1e-3));
  for (const auto& g : fitted.fit) {
    INFO(g.group);
    if (g.group.rfind("compute/", 0) == 0 && g.heldout_points > 0) CHECK(g.heldout_median_error < 1e-3);
  }
  // A run measured on another machine than the benchmark is refused.
  run.timeline.meta["hardware"] = "cpu:Other CPU";
  CHECK_THROWS_WITH(calibration::fit_profile(synthetic_bench(), "bench.json", {run}),
                    Catch::Contains("measured on cpu:Other CPU, the benchmark on cpu:Test CPU"));
}
