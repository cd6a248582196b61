// Spot traces: the fitter recovers known parameters from synthetic traces, rejects malformed
// files, and gives sane numbers on the real AWS p3 traces in ../shared (which also back the
// default spot model in lifecycle.json).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"
#include "trainplan/simulator/spot.hpp"
#include "trainplan/simulator/spot_trace.hpp"

using namespace trainplan;

namespace {
constexpr double kHour = 3600.0;
}

TEST_CASE("simulator: trace fitter recovers a known per-instance rate and restart wait", "[simulator][spot]") {
  Rng rng(31);
  sim::SyntheticTraceSpec spec;
  spec.instances = 1;
  spec.rate_per_instance_per_s = 0.3 / kHour;
  spec.mean_wait_s = 0.5 * kHour;
  spec.gap_s = 30;
  spec.duration_s = 3000 * kHour;
  const sim::SpotTrace t = sim::make_synthetic_trace(spec, rng);
  const sim::TraceFit f = sim::fit_spot_trace(t);
  INFO("fitted " << f.rate_per_instance_hour << "/h [" << f.rate_ci95_low << ", " << f.rate_ci95_high << "], drops "
                 << f.drops << ", mean wait " << f.restart_wait.mean_s);
  REQUIRE(f.drops > 300);
  CHECK(f.rate_ci95_low <= 0.3);
  CHECK(f.rate_ci95_high >= 0.3);
  CHECK(f.rate_ci95_high - f.rate_ci95_low < 0.1);
  CHECK(f.job_rate_per_hour == Approx(f.rate_per_instance_hour));  // one instance: the same thing
  CHECK_FALSE(f.has_correlation);
  // The mean of ~n exponential waits has a standard error of mean/sqrt(n).
  const double se = spec.mean_wait_s / std::sqrt(static_cast<double>(f.restart_wait.count));
  CHECK(std::abs(f.restart_wait.mean_s - spec.mean_wait_s) <= 4 * se + spec.gap_s);
  // Unavailability of an alternating renewal process: wait / (1/rate + wait).
  const double unavailable = 0.5 / (1 / 0.3 + 0.5);
  CHECK(f.unavailable_fraction == Approx(unavailable).epsilon(0.1));
  // The exponential model built from the fit carries the fitted rate.
  const auto m = sim::InterruptionModel::from_fit(f);
  CHECK(m.rate_per_instance_per_s() * kHour == Approx(f.rate_per_instance_hour));
  CHECK(m.wait().mean_s() == Approx(f.restart_wait.mean_s));
}

TEST_CASE("simulator: trace fitter measures correlated losses as the common-shock share", "[simulator][spot]") {
  Rng rng(32);
  sim::SyntheticTraceSpec spec;
  spec.instances = 4;
  spec.rate_per_instance_per_s = 0.05 / kHour;  // independent losses per instance
  spec.common_rate_per_s = 0.15 / kHour;        // shocks that take all instances
  spec.mean_wait_s = 0.25 * kHour;
  spec.gap_s = 30;
  spec.duration_s = 5000 * kHour;
  const sim::TraceFit f = sim::fit_spot_trace(sim::make_synthetic_trace(spec, rng));
  // Per held instance: λ = independent + common; the job: Λ = 4·independent + common;
  // ρ = common / λ.
  INFO("rate " << f.rate_per_instance_hour << " job " << f.job_rate_per_hour << " rho " << f.correlation);
  REQUIRE(f.has_correlation);
  CHECK(f.rate_per_instance_hour == Approx(0.20).epsilon(0.08));
  CHECK(f.job_rate_per_hour == Approx(0.35).epsilon(0.08));
  CHECK(f.correlation == Approx(0.75).epsilon(0.08));
  CHECK(f.multi_drop_events > 0);
  // Independent instances give a correlation near zero.
  spec.rate_per_instance_per_s = 0.1 / kHour;
  spec.common_rate_per_s = 0;
  const sim::TraceFit g = sim::fit_spot_trace(sim::make_synthetic_trace(spec, rng));
  CHECK(g.correlation < 0.1);
  // The fitted model reproduces the job rate for the trace's instance count.
  const auto m = sim::InterruptionModel::from_fit(f);
  CHECK(m.job_rate_per_s(4) * kHour == Approx(f.job_rate_per_hour).epsilon(1e-9));
}

TEST_CASE("simulator: malformed traces are rejected with file and pointer", "[simulator][spot]") {
  auto parse = [](const std::string& text) { return sim::parse_spot_trace(json::parse_text(text, "t.json"), "t.json"); };
  REQUIRE_ERROR_CONTAINS(parse(R"({"metadata": {"gap_seconds": 300}, "data": [1, 1, -1]})"), "t.json: /data/2");
  REQUIRE_ERROR_CONTAINS(parse(R"({"metadata": {}, "data": [1, 1]})"), "/metadata: missing required field \"gap_seconds\"");
  REQUIRE_ERROR_CONTAINS(parse(R"({"metadata": {"gap_seconds": 300}, "data": [1]})"), "needs at least 2 ticks");
  REQUIRE_ERROR_CONTAINS(parse(R"({"metadata": {"gap_seconds": 300, "instances": 2}, "data": [3, 1]})"),
                         "/metadata/instances");
  REQUIRE_ERROR_CONTAINS(parse(R"({"metadata": {"gap_seconds": 300}, "data": [1, 0], "extra": 1})"), "unknown field");
  const auto t = parse(R"({"metadata": {"gap_seconds": 60}, "data": [2, 2, 1, 2]})");
  CHECK(t.instances == 2);
  CHECK(t.duration_s() == 240);
  REQUIRE_ERROR_CONTAINS(sim::fit_spot_trace(t, 3), "needs 3 instances but the trace requested only 2");
}

TEST_CASE("simulator: the AWS p3 spot traces fit to sane rates that match the default spot model", "[simulator][spot]") {
  namespace fs = std::filesystem;
  const fs::path root = testing::shared_path("traces/spot/preemption");
  if (!fs::exists(root)) {
    WARN("shared traces not found at " << root << "; skipping");
    return;
  }
  std::vector<sim::TraceFit> fits;
  for (const char* dir : {"1-node/aws-04-22-2023", "4-node/aws-08-03-2023"}) {
    for (const auto& entry : fs::directory_iterator(root / dir)) {
      if (entry.path().extension() != ".json") continue;
      const auto f = sim::fit_spot_trace(sim::read_spot_trace(entry.path().string()));
      std::printf("%-60s N=%d %.3f/h per instance [%.3f, %.3f], job %.3f/h, rho %s, mean restart wait %.2f h (p50 %.2f h, n=%zu), unavailable %.0f%%\n",
                  entry.path().filename().c_str(), f.instances, f.rate_per_instance_hour, f.rate_ci95_low,
                  f.rate_ci95_high, f.job_rate_per_hour, f.has_correlation ? std::to_string(f.correlation).c_str() : "-",
                  f.restart_wait.mean_s / kHour, f.restart_wait.p50_s / kHour, f.restart_wait.count,
                  100 * f.unavailable_fraction);
      CHECK(f.rate_per_instance_hour > 0.01);
      CHECK(f.rate_per_instance_hour < 5.0);
      CHECK(f.restart_wait.count > 10);
      CHECK(f.restart_wait.mean_s > 60);
      CHECK(f.restart_wait.mean_s < 24 * kHour);
      fits.push_back(f);
    }
  }
  REQUIRE(fits.size() == 7);
  const auto pooled = sim::pool_fits(fits, "p3 pooled");
  std::printf("pooled: %.4f/h per instance, correlation %.3f, restart wait mean %.3f h, p50 %.3f h\n",
              pooled.rate_per_instance_hour, pooled.correlation, pooled.restart_wait.mean_s / kHour,
              pooled.restart_wait.p50_s / kHour);
  // The 4-node traces lose instances together far more often than independence allows.
  REQUIRE(pooled.has_correlation);
  CHECK(pooled.correlation > 0.5);
  // lifecycle.json's default is this fit (rounded): the data file cannot drift from the traces.
  const auto& d = sim::LifecycleFacts::builtin().spot_default;
  CHECK(d.rate_per_instance_per_s * kHour == Approx(pooled.rate_per_instance_hour).epsilon(0.002));
  CHECK(d.correlation == Approx(pooled.correlation).epsilon(0.01));
  CHECK(d.restart_wait_mean_s == Approx(pooled.restart_wait.mean_s).epsilon(0.01));
  CHECK(d.restart_wait_median_s == Approx(pooled.restart_wait.p50_s).epsilon(0.01));
}
