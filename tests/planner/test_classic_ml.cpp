// XGBoost on SageMaker CPU instances. Oracles: the Carpentries "ML with AWS SageMaker" lesson's
// measured runs (XGBoost, Titanic table of 892 rows, ml.m5.large: 130 billable s and 198.0 s of
// wall time on one instance, 270 billable s (135 each) and 197.7 s on two), which no constant was
// fitted to; and closed forms (billing = count x per instance, the ring all-reduce, the
// break-even row count of two affine wall times, sweep waves and warm-pool billing).
#include <cmath>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/planner/classic_ml.hpp"
#include "trainplan/planner/job.hpp"

using namespace trainplan;

namespace {

const hw::CpuInstanceType& m5_large() { return hw::Catalog::builtin().cpu_instance("ml.m5.large"); }
planner::XgboostSpec titanic() { return {.rows = 892, .features = 8, .rounds = 100}; }

// The lesson's figures, and the tolerance the issue asks for.
constexpr double kLessonBilled1 = 130, kLessonWall1 = 198.0, kLessonBilled2 = 270, kLessonWall2 = 197.7;
constexpr double kLessonTolerance = 0.20;

}  // namespace

TEST_CASE("planner: xgboost on ml.m5.large reproduces the lesson's one-instance job within 20%", "[planner][classic]") {
  const auto one = planner::xgboost_job(titanic(), m5_large(), 1);
  CHECK(one.billed_s_total == Approx(kLessonBilled1).epsilon(kLessonTolerance));
  CHECK(one.wall_s == Approx(kLessonWall1).epsilon(kLessonTolerance));
  // Almost all of it is start-up: training 892 rows is milliseconds.
  CHECK(one.phases.training_s < 0.01 * one.wall_s);
}

TEST_CASE("planner: xgboost on two ml.m5.large: the lesson's same wall time and twice the billing, within 20%",
          "[planner][classic]") {
  const auto one = planner::xgboost_job(titanic(), m5_large(), 1);
  const auto two = planner::xgboost_job(titanic(), m5_large(), 2);
  CHECK(two.billed_s_total == Approx(kLessonBilled2).epsilon(kLessonTolerance));
  CHECK(two.billed_s_per_instance == Approx(kLessonBilled2 / 2).epsilon(kLessonTolerance));
  CHECK(two.wall_s == Approx(kLessonWall2).epsilon(kLessonTolerance));
  // No speedup (the lesson: 197.7 s vs 198.0 s), about twice the cost (270 vs 130 s).
  CHECK(two.wall_s / one.wall_s == Approx(kLessonWall2 / kLessonWall1).epsilon(0.05));
  CHECK(two.billed_s_total / one.billed_s_total == Approx(kLessonBilled2 / kLessonBilled1).epsilon(0.05));
}

TEST_CASE("planner: xgboost billing is count x per instance, cost is billed seconds x the SageMaker price", "[planner][classic]") {
  for (int n : {1, 2, 3, 8}) {
    const auto j = planner::xgboost_job(titanic(), m5_large(), n);
    INFO(n);
    CHECK(j.billed_s_total == Approx(n * j.billed_s_per_instance));
    CHECK(j.billed_s_per_instance == Approx(j.phases.billed_s()));
    CHECK(j.wall_s == Approx(j.phases.unbilled_s() + j.billed_s_per_instance));
    CHECK(j.cost_usd == Approx(j.billed_s_total / 3600.0 * 0.115));
  }
}

TEST_CASE("planner: xgboost histogram all-reduce is the ring formula over the levels' histograms", "[planner][classic]") {
  const auto& inst = m5_large();
  planner::XgboostSpec s = titanic();
  s.max_depth = 3;
  s.bins = 256;
  for (int n : {2, 4}) {
    const auto r = planner::xgboost_round(s, inst, n);
    // Levels 0, 1, 2 build 1, 1, 2 node histograms of 8 features x 256 bins x 16 bytes.
    const double level_bytes[] = {8 * 256 * 16.0, 8 * 256 * 16.0, 2 * 8 * 256 * 16.0};
    double expected = 0;
    for (double b : level_bytes) expected += 2.0 * (n - 1) * 25e-6 + 2.0 * (n - 1) / n * b / (0.75e9 / 8);
    INFO(n);
    CHECK(r.allreduce_bytes == Approx(4 * 8 * 256 * 16.0));
    CHECK(r.allreduce_s == Approx(expected));
  }
  CHECK(planner::xgboost_round(s, inst, 1).allreduce_s == 0);
  // Histogram construction: t_u x F x R/n x (1 + (D-1)/2) / cores.
  CHECK(planner::xgboost_round(s, inst, 2).hist_s == Approx(planner::kHistUpdateSeconds * 8 * 446 * 2.0 / 1));
}

TEST_CASE("planner: xgboost break-even rows solve wall(2, R) = wall(1, R), and more instances never bill less",
          "[planner][classic]") {
  const auto& inst = m5_large();
  const planner::XgboostSpec s = titanic();
  const auto rows = planner::break_even_rows(s, inst, 2);
  REQUIRE(rows);
  // Closed form from the model's terms: the fixed difference (Rabit start-up, rounds x all-reduce)
  // over the per-row saving (half the histogram work and half the download of a row).
  const double per_row_1 = s.rounds * planner::kHistUpdateSeconds * s.features * (1 + (s.max_depth - 1) / 2.0) / inst.cores +
                           (s.features + 1) * 8.0 / std::min(inst.burst_bandwidth_bytes_per_s * 0.5, 8003e6);
  const double fixed = planner::kRabitInitSeconds + s.rounds * planner::xgboost_round(s, inst, 2).allreduce_s;
  CHECK(*rows == Approx(fixed / (per_row_1 / 2)).epsilon(1e-6));
  planner::XgboostSpec below = s, above = s;
  below.rows = static_cast<int64_t>(*rows * 0.9);
  above.rows = static_cast<int64_t>(*rows * 1.1);
  CHECK(planner::xgboost_job(below, inst, 2).wall_s > planner::xgboost_job(below, inst, 1).wall_s);
  CHECK(planner::xgboost_job(above, inst, 2).wall_s < planner::xgboost_job(above, inst, 1).wall_s);
  CHECK(planner::xgboost_job(above, inst, 2).cost_usd > planner::xgboost_job(above, inst, 1).cost_usd);
  CHECK_FALSE(planner::break_even_rows(s, inst, 1));
}

TEST_CASE("planner: a tuning sweep runs ceil(N/P) waves, warm pools skip provisioning and the image, bill the keep-alive",
          "[planner][classic]") {
  const auto& inst = m5_large();
  const auto cold = planner::xgboost_job(titanic(), inst, 1);
  const auto warm = planner::xgboost_job(titanic(), inst, 1, /*warm_start=*/true);
  CHECK(warm.phases.image_download_s == 0);
  CHECK(warm.phases.starting_s == 0);
  CHECK(warm.billed_s_per_instance == Approx(cold.billed_s_per_instance - cold.phases.image_download_s));

  const auto none = planner::sweep(titanic(), inst, 1, {.repeat = 10, .parallel = 3});
  CHECK(none.waves == 4);
  CHECK(none.wall_s == Approx(4 * cold.wall_s));
  CHECK(none.billed_s == Approx(10 * cold.billed_s_total));
  CHECK(none.warm_starts == 0);

  const auto pool = planner::sweep(titanic(), inst, 2, {.repeat = 10, .parallel = 3, .keep_alive_s = 600});
  const auto cold2 = planner::xgboost_job(titanic(), inst, 2);
  const auto warm2 = planner::xgboost_job(titanic(), inst, 2, true);
  CHECK(pool.warm_starts == 7);
  CHECK(pool.wall_s == Approx(cold2.wall_s + 3 * warm2.wall_s));
  CHECK(pool.keep_alive_billed_s == Approx(3 * 2 * 600.0));
  CHECK(pool.billed_s == Approx(3 * cold2.billed_s_total + 7 * warm2.billed_s_total + 3 * 2 * 600.0));
  CHECK(pool.cost_usd == Approx(pool.billed_s / 3600 * 0.115));
  CHECK(pool.wall_s < pool.cold_wall_s);

  REQUIRE_ERROR_CONTAINS(planner::sweep(titanic(), inst, 1, {.repeat = 2, .parallel = 1, .keep_alive_s = 3601}), "--keep-alive");
  REQUIRE_ERROR_CONTAINS(planner::sweep(titanic(), inst, 1, {.repeat = 0}), "--repeat");
}

TEST_CASE("planner: managed spot fails the jobs that outlast max_wait, as often as the spot model says", "[planner][classic]") {
  const auto& inst = m5_large();
  const auto job = planner::xgboost_job(titanic(), inst, 1);
  // A max_wait shorter than the uninterrupted job fails every run; a day never does for a 3-minute job.
  const auto short_wait = planner::spot_job(titanic(), inst, 1, {.max_wait_s = job.wall_s / 2, .runs = 200});
  REQUIRE(short_wait.monte_carlo.p_exceed_max_wait);
  CHECK(*short_wait.monte_carlo.p_exceed_max_wait == 1.0);
  const auto day = planner::spot_job(titanic(), inst, 1, {.max_wait_s = 86400.0, .runs = 200});
  CHECK(*day.monte_carlo.p_exceed_max_wait == 0.0);
  CHECK(day.spot_price_usd_per_hour == Approx(0.115 * 0.4));
  // A long job (a large table) is interrupted: P(exceed) grows as max_wait nears its duration.
  planner::XgboostSpec big = titanic();
  big.rows = 2'000'000'000;
  big.features = 50;
  big.rounds = 1000;
  const double hours = planner::xgboost_job(big, hw::Catalog::builtin().cpu_instance("ml.m5.24xlarge"), 1).wall_s / 3600;
  REQUIRE(hours > 1);
  const auto& m5_24 = hw::Catalog::builtin().cpu_instance("ml.m5.24xlarge");
  const auto tight = planner::spot_job(big, m5_24, 1, {.max_wait_s = hours * 3600 * 1.05, .runs = 400});
  const auto loose = planner::spot_job(big, m5_24, 1, {.max_wait_s = hours * 3600 * 4, .runs = 400});
  CHECK(*tight.monte_carlo.p_exceed_max_wait > *loose.monte_carlo.p_exceed_max_wait);
  CHECK(*tight.monte_carlo.p_exceed_max_wait > 0.05);
}

TEST_CASE("planner: xgboost refuses bad sizes naming the flag", "[planner][classic]") {
  planner::XgboostSpec s = titanic();
  s.rows = 0;
  REQUIRE_ERROR_CONTAINS(planner::check(s), "--rows");
  s = titanic();
  s.max_depth = 0;
  REQUIRE_ERROR_CONTAINS(planner::check(s), "--max-depth");
  s = titanic();
  s.bins = 1;
  REQUIRE_ERROR_CONTAINS(planner::check(s), "--bins");
  REQUIRE_ERROR_CONTAINS(planner::xgboost_job(titanic(), m5_large(), 0), "--counts");
  REQUIRE_ERROR_CONTAINS(planner::xgboost_job(titanic(), m5_large(), 65), "--counts");
}

TEST_CASE("planner: xgboost data that does not fit an instance's memory is flagged, and sharding fixes it", "[planner][classic]") {
  planner::XgboostSpec s = titanic();
  s.rows = 500'000'000;
  s.features = 10;
  CHECK_FALSE(planner::xgboost_job(s, m5_large(), 1).fits_memory);
  const auto& r5 = hw::Catalog::builtin().cpu_instance("r5.24xlarge");
  CHECK(planner::xgboost_job(s, r5, 1).fits_memory);
  CHECK(planner::xgboost_job(s, m5_large(), 64).memory_bytes_per_instance ==
        Approx(planner::xgboost_job(s, m5_large(), 1).memory_bytes_per_instance / 64));
}

TEST_CASE("planner: trainplan job --repeat costs a sweep of a GPU plan's jobs, cold and with a warm pool", "[planner][classic]") {
  plan::Plan p;
  p.model = "gpt2-124m";
  p.instance_type = "p3.8xlarge";
  p.instance_count = 2;
  p.dp = 8;
  p.global_batch = 64;
  p.micro_batch = 4;
  p.training_tokens = 1e8;
  const auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  planner::JobRequest r;
  r.step_time = "1s";
  r.platform = "sagemaker";
  r.no_hardware_failures = true;
  const auto single = planner::analyze_job(p, ctx, r);
  r.repeat = 6;
  r.parallel = 4;
  r.keep_alive = "5min";
  const auto a = planner::analyze_job(p, ctx, r);
  REQUIRE(a.sweep);
  CHECK(a.sweep->waves == 2);
  CHECK(a.sweep->warm_starts == 2);
  CHECK(a.sweep->cold_wall_s == Approx(2 * single.estimate.total_s));
  CHECK(a.sweep->cold_billed_s == Approx(6 * 2 * single.estimate.billed_s_per_node));
  // A warm start skips provisioning and the image pull; 4 pools of 2 instances kept 5 minutes.
  CHECK(a.sweep->wall_s < a.sweep->cold_wall_s);
  CHECK(a.sweep->keep_alive_billed_s == Approx(4 * 2 * 300.0));
  r.platform = "ec2";
  REQUIRE_ERROR_CONTAINS(planner::analyze_job(p, ctx, r), "--keep-alive: warm pools are a SageMaker feature");
  r.platform = "sagemaker";
  r.repeat = 0;
  REQUIRE_ERROR_CONTAINS(planner::analyze_job(p, ctx, r), "add --repeat");
}
