// Spot interruptions: the Monte Carlo against closed forms (Daly's renewal argument), Young/Daly
// against the Monte Carlo minimum, SageMaker limits, trace replay and determinism.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/spot.hpp"

using namespace trainplan;
using sim::InterruptionModel;
using sim::JobSpec;

namespace {

constexpr double kHour = 3600.0;

// A spot job of `work_h` hours of work with checkpoints of `checkpoint_s` every `interval_s`.
JobSpec spot_job(double work_h, double interval_s, double checkpoint_s, int nodes) {
  JobSpec j;
  j.step_time_s = 1.0;
  j.steps = static_cast<int64_t>(work_h * kHour);
  j.nodes = nodes;
  j.gpus_per_node = 8;
  j.purchase = sim::PurchaseOption::spot;
  j.startup = {.provisioning_s = 120, .container_pull_s = 60, .data_staging_s = 0, .framework_init_s = 30};
  j.restart = j.startup;
  j.checkpoint.total_bytes = checkpoint_s * 1e9 * nodes;
  j.checkpoint.write_bytes_per_node = checkpoint_s * 1e9;
  j.checkpoint.write_bytes_per_s_per_node = 1e9;
  j.checkpoint.read_bytes_per_node = 0.5 * checkpoint_s * 1e9;
  j.checkpoint.read_bytes_per_s_per_node = 1e9;
  j.checkpoint_interval_s = interval_s;
  j.prices = {.on_demand_usd_per_hour = 30, .spot_usd_per_hour = 9, .minimum_billed_s = 0};
  return j;
}

// |mc - expected| within `z` standard errors, and the standard error small enough to matter.
void check_within(const sim::MonteCarloStats& mc, double expected, double z = 4.0) {
  const double se = mc.ci95 / 1.96;
  INFO("mc mean " << mc.mean << " +- " << se << " (se), closed form " << expected);
  CHECK(std::abs(mc.mean - expected) <= z * se);
  CHECK(se < 0.02 * expected);
}

}  // namespace

TEST_CASE("simulator: Monte Carlo of exponential interruptions matches the closed-form expected completion time", "[simulator][spot]") {
  Rng rng(21);
  for (int trial = 0; trial < 6; ++trial) {
    const int nodes = 1 + static_cast<int>(rng.below(4));
    const double rate_h = 0.05 + 0.3 * rng.uniform();
    const double correlation = rng.uniform();
    JobSpec j = spot_job(5 + 15 * rng.uniform(), 900 + 3600 * rng.uniform(), 30 + 120 * rng.uniform(), nodes);
    j.hardware_failure_rate_per_gpu_per_s = trial % 2 ? 1e-4 / kHour : 0;
    const auto wait = trial % 3 == 0 ? sim::CapacityWait::exponential(600 + 1200 * rng.uniform())
                                     : sim::CapacityWait::lognormal(600, 600 + 3000 * rng.uniform());
    const auto model = InterruptionModel::exponential(rate_h / kHour, correlation, wait);
    const sim::ClosedForm cf = sim::closed_form(j, model);
    // Λ of the common-shock model and E[R] by hand.
    const double spot_rate = (nodes * (1 - correlation) + correlation) * rate_h / kHour;
    const double hw_rate = nodes * 8 * j.hardware_failure_rate_per_gpu_per_s;
    CHECK(cf.rate_per_s == Approx(spot_rate + hw_rate));
    const double restart = 120 + 60 + 30 + j.checkpoint.read_bytes_per_node / 1e9;
    CHECK(cf.mean_restart_s == Approx(restart + spot_rate / (spot_rate + hw_rate) * wait.mean_s()));
    sim::MonteCarloOptions mc;
    mc.runs = 4000;
    mc.seed = 100 + trial;
    const auto r = sim::run_monte_carlo(j, model, mc);
    INFO("trial " << trial << " nodes " << nodes << " rate/h " << rate_h << " rho " << correlation);
    check_within(r.time_s, cf.expected_time_s);
    check_within(r.interruptions, cf.expected_interruptions);
    check_within(r.cost_usd, cf.expected_cost_usd);
    CHECK(cf.expected_interruptions > 1.0);  // the test exercises restarts
  }
}

TEST_CASE("simulator: closed form of one segment is (1/L + R)(e^{L s} - 1)", "[simulator][spot]") {
  // Independent check of the formula by numerical integration of its renewal equation:
  // E = P(success)·s + P(fail)·(E[X | X < s] + R + E).
  const double rate = 1.0 / 5000, s = 7000, r = 900;
  const double p = std::exp(-rate * s);
  const double mean_fail_x = 1 / rate - s * p / (1 - p);
  const double e = (p * s + (1 - p) * (mean_fail_x + r)) / p;
  CHECK(sim::expected_segment_time_s(s, rate, r) == Approx(e).epsilon(1e-12));
  CHECK(sim::expected_segment_time_s(s, 0, r) == s);
}

TEST_CASE("simulator: a blend loses only its spot instances but rolls back the whole job", "[simulator][spot]") {
  JobSpec j = spot_job(10, 1800, 60, 4);
  j.purchase = sim::PurchaseOption::blend;
  j.on_demand_nodes = 1;
  const auto model = InterruptionModel::exponential(0.2 / kHour, 0.0, sim::CapacityWait::fixed(1200));
  const auto cf = sim::closed_form(j, model);
  CHECK(cf.rate_per_s == Approx(3 * 0.2 / kHour));  // 3 spot instances, independent
  sim::MonteCarloOptions mc;
  mc.runs = 4000;
  const auto r = sim::run_monte_carlo(j, model, mc);
  check_within(r.time_s, cf.expected_time_s);
  check_within(r.cost_usd, cf.expected_cost_usd);
  // The on-demand node is billed while the job waits for spot capacity; the spot nodes are not.
  const auto od = sim::estimate_job(j);
  CHECK(cf.expected_cost_usd > od.cost_usd);
}

TEST_CASE("simulator: Young/Daly interval lies within the Monte Carlo minimum's confidence interval", "[simulator][spot]") {
  JobSpec j = spot_job(24, 0, 90, 1);
  const auto model = InterruptionModel::exponential(0.5 / kHour, 0.0, sim::CapacityWait::fixed(300));
  sim::MonteCarloOptions mc;
  mc.runs = 2000;
  mc.seed = 7;
  mc.threads = 2;
  const auto s = sim::study_checkpoint_interval(j, model, mc);
  const double mtbf = kHour / 0.5;
  CHECK(s.mtbf_s == Approx(mtbf));
  CHECK(s.young_s == Approx(std::sqrt(2 * 90 * mtbf)));
  REQUIRE(s.closed_form_optimum_s);
  // Daly's refinement is close to the exact optimum of the model, Young's a little further.
  CHECK(std::abs(s.daly_s - *s.closed_form_optimum_s) <= std::abs(s.young_s - *s.closed_form_optimum_s) + 1.0);
  INFO("young " << s.young_s << " best row " << s.rows[s.best_row].interval_s << " diff " << s.young_minus_best_s
                << " +- " << s.young_minus_best_ci95_s);
  CHECK(s.young_within_ci);
  // The curve is U-shaped: far from the optimum the Monte Carlo is significantly worse, so the
  // test would notice an optimum in the wrong place.
  const auto& young = s.rows[s.young_row];
  for (size_t k : {size_t{0}, s.rows.size() - 1}) {
    const auto& row = s.rows[k];
    CHECK(row.mc_mean_s - young.mc_mean_s > 2 * (row.mc_ci95_s + young.mc_ci95_s));
    REQUIRE(row.closed_form_s);
    CHECK(row.mc_mean_s == Approx(*row.closed_form_s).epsilon(0.02));
  }
  CHECK(s.chosen_interval_s == s.young_s);
  // Never interrupted: no optimum to study.
  REQUIRE_ERROR_CONTAINS(sim::study_checkpoint_interval(j, InterruptionModel::none(), mc), "never interrupted");
}

TEST_CASE("simulator: P(miss deadline) of one segment is 1 - e^{-L s}", "[simulator][spot]") {
  JobSpec j = spot_job(3, 0, 60, 2);
  const auto model = InterruptionModel::exponential(0.1 / kHour, 0.5, sim::CapacityWait::fixed(600));
  const double s = j.work_s() + j.checkpoint.write_s();
  const double uninterrupted = j.startup.total_s() + s;
  sim::MonteCarloOptions mc;
  mc.runs = 5000;
  mc.seed = 3;
  mc.deadline_s = uninterrupted + 1.0;  // any interruption costs more than a second
  const auto r = sim::run_monte_carlo(j, model, mc);
  const double rate = (2 * 0.5 + 0.5) * 0.1 / kHour;
  const double p = 1 - std::exp(-rate * s);
  REQUIRE(r.p_miss_deadline);
  const double se = std::sqrt(p * (1 - p) / mc.runs);
  CHECK(std::abs(*r.p_miss_deadline - p) <= 4 * se);
  CHECK(r.time_s.min == Approx(uninterrupted));
}

TEST_CASE("simulator: SageMaker max_wait fails the job and bills it until then", "[simulator][spot]") {
  JobSpec j = spot_job(2, 0, 60, 2);
  j.platform = plan::Platform::sagemaker;
  sim::MonteCarloOptions mc;
  mc.runs = 100;
  mc.keep_runs = true;
  // No interruptions: every run takes the same time; a max_wait below it fails them all.
  const auto total = sim::estimate_job(j).total_s;
  mc.max_wait_s = total - 1800;
  auto r = sim::run_monte_carlo(j, InterruptionModel::none(), mc);
  REQUIRE(r.p_exceed_max_wait);
  CHECK(*r.p_exceed_max_wait == 1.0);
  const double billed_at_limit = *mc.max_wait_s - j.startup.provisioning_s;
  CHECK(*r.mean_cost_of_failed_usd == Approx(2 * billed_at_limit * 9 / 3600.0));
  // Interrupted runs exceed it exactly when their completion time does.
  const auto model = InterruptionModel::exponential(0.5 / kHour, 0.0, sim::CapacityWait::exponential(1800));
  mc.runs = 2000;
  mc.max_wait_s = total + 3600;
  r = sim::run_monte_carlo(j, model, mc);
  size_t over = 0;
  for (const auto& o : r.outcomes) over += o.time_s > *mc.max_wait_s;
  CHECK(*r.p_exceed_max_wait == Approx(static_cast<double>(over) / mc.runs));
  CHECK(*r.p_exceed_max_wait > 0.05);
  CHECK(*r.p_exceed_max_wait < 0.95);
  mc.max_run_s = *mc.max_wait_s + 1;
  REQUIRE_ERROR_CONTAINS(sim::run_monte_carlo(j, model, mc), "must be >= max_run");
  j.purchase = sim::PurchaseOption::on_demand;
  mc.max_run_s.reset();
  REQUIRE_ERROR_CONTAINS(sim::run_monte_carlo(j, model, mc), "max_wait applies to spot jobs only");
}

TEST_CASE("simulator: Monte Carlo results depend on the seed only, not on threads", "[simulator][spot]") {
  JobSpec j = spot_job(8, 1800, 60, 3);
  const auto model = InterruptionModel::exponential(0.3 / kHour, 0.4, sim::CapacityWait::lognormal(900, 3000));
  sim::MonteCarloOptions mc;
  mc.runs = 500;
  mc.seed = 42;
  mc.keep_runs = true;
  mc.threads = 1;
  const auto a = sim::run_monte_carlo(j, model, mc);
  mc.threads = 3;
  const auto b = sim::run_monte_carlo(j, model, mc);
  CHECK(json::dump(sim::to_json(a)) == json::dump(sim::to_json(b)));
  for (size_t i = 0; i < a.outcomes.size(); ++i) REQUIRE(a.outcomes[i].time_s == b.outcomes[i].time_s);
  mc.seed = 43;
  const auto c = sim::run_monte_carlo(j, model, mc);
  CHECK(c.time_s.mean != a.time_s.mean);
}

TEST_CASE("simulator: trace replay interrupts when capacity drops and waits until it returns", "[simulator][spot]") {
  // A periodic trace: 50 ticks of capacity, then 10 without, 60 s ticks.
  sim::SpotTrace t;
  t.name = "periodic";
  t.gap_s = 60;
  t.instances = 2;
  for (int rep = 0; rep < 20; ++rep) {
    for (int i = 0; i < 50; ++i) t.counts.push_back(2);
    for (int i = 0; i < 10; ++i) t.counts.push_back(rep % 2 ? 1 : 0);
  }
  JobSpec j = spot_job(0, 0, 0, 2);
  j.steps = 1200;  // 20 minutes of work, no checkpoint cost, instant restarts
  j.startup = {};
  j.restart = {};
  j.checkpoint = {};
  sim::MonteCarloOptions mc;
  mc.runs = 4000;
  mc.keep_runs = true;
  const auto r = sim::run_monte_carlo(j, InterruptionModel::replay(t), mc);
  // A run starts at a uniform offset; it first waits out a gap it starts in, then needs 1200 s
  // of capacity. It finishes untouched unless the window meets a gap:
  // P(no interruption) = (50 - 20 + 10) / 60 ticks.
  size_t clean = 0;
  for (const auto& o : r.outcomes) clean += o.interruptions == 0;
  const double p = 40.0 / 60.0;
  CHECK(std::abs(static_cast<double>(clean) / mc.runs - p) <= 4 * std::sqrt(p * (1 - p) / mc.runs));
  // Interrupted runs wait out the whole 10-tick gap (600 s) and lose the work done.
  for (const auto& o : r.outcomes) {
    if (o.interruptions == 1) {
      CHECK(o.time_s == Approx(o.wait_s + 1200 + o.lost_work_s).margin(1e-6));
      CHECK(o.wait_s >= 600 - 1e-6);
    }
  }
  // The job needs both instances: a 1-instance dip interrupts it as well.
  REQUIRE_ERROR_CONTAINS(sim::closed_form(j, InterruptionModel::replay(t)), "no closed form for trace replay");
  JobSpec big = j;
  big.nodes = 3;
  REQUIRE_ERROR_CONTAINS(sim::run_monte_carlo(big, InterruptionModel::replay(t), mc), "trace requested only 2");
}
