// Classic ML jobs as files and as `trainplan job` runs them. Oracles: closed forms from the
// SageMaker phases (billed seconds = instances x billed phases; a warm-pool start skips the
// starting, preparing and image-download phases for the documented warm start; a sweep bills
// slots cold + the rest warm + every pool's keep-alive), the round trip of the job file, and
// the objective's definition (fastest / cheapest / within a deadline or budget) by brute force.
#include <algorithm>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/planner/classic_plan.hpp"

using namespace trainplan;

namespace {

const hw::Catalog& catalog() { return hw::Catalog::builtin(); }
const hw::CpuInstanceType& ml_m5_large() { return catalog().cpu_instance("ml.m5.large"); }
const sim::LifecycleFacts& facts() { return sim::LifecycleFacts::builtin(); }

planner::ClassicRequest lesson() {
  planner::ClassicRequest r;
  r.spec = {.rows = 892, .features = 8, .rounds = 100};
  r.instances = {&ml_m5_large(), &catalog().cpu_instance("ml.c5.xlarge")};
  r.counts = {1, 2, 4};
  return r;
}

planner::ClassicPlan plan_of(int count) {
  planner::ClassicPlan p;
  p.spec = lesson().spec;
  p.instance_type = "ml.m5.large";
  p.count = count;
  return p;
}

}  // namespace

TEST_CASE("planner: classic job billed seconds are instances x the billed phases", "[planner][classic]") {
  for (int n : {1, 2, 4}) {
    const auto a = planner::analyze_classic_job(plan_of(n), catalog(), {}, false);
    const auto& f = facts();
    const double input = a.job.phases.input_download_s;  // depends on the rows: taken from the job
    const double billed = input + f.sagemaker_xgboost_image_download_s + f.sagemaker_xgboost_algorithm_start_s +
                          a.job.phases.training_s + f.sagemaker_model_upload_s;
    INFO(n);
    CHECK(a.job.billed_s_per_instance == Approx(billed));
    CHECK(a.job.billed_s_total == Approx(n * billed));
    CHECK(a.job.wall_s == Approx(f.sagemaker_cpu_starting_s + f.sagemaker_cpu_preparing_s + billed));
    CHECK_FALSE(a.spot_result);
    CHECK_FALSE(a.sweep);
  }
}

TEST_CASE("planner: a classic job on a warm pool saves the provisioning and image-download phases", "[planner][classic]") {
  planner::JobRequest r;
  r.warm_pool = true;
  const auto a = planner::analyze_classic_job(plan_of(2), catalog(), r, false);
  const auto& f = facts();
  REQUIRE(a.job.warm_start);
  CHECK_FALSE(a.cold.warm_start);
  CHECK(a.cold.wall_s - a.job.wall_s ==
        Approx(f.sagemaker_cpu_starting_s + f.sagemaker_cpu_preparing_s - f.sagemaker_warm_pool_start_s +
               f.sagemaker_xgboost_image_download_s));
  CHECK(a.cold.billed_s_total - a.job.billed_s_total == Approx(2 * f.sagemaker_xgboost_image_download_s));
}

TEST_CASE("planner: a classic sweep bills its slots cold, the rest warm, and every pool's keep-alive", "[planner][classic]") {
  planner::JobRequest r;
  r.repeat = 20;
  r.parallel = 4;
  r.keep_alive = "10min";
  const auto a = planner::analyze_classic_job(plan_of(2), catalog(), r, false);
  REQUIRE(a.sweep);
  const auto cold = planner::xgboost_job(plan_of(2).spec, ml_m5_large(), 2, false);
  const auto warm = planner::xgboost_job(plan_of(2).spec, ml_m5_large(), 2, true);
  CHECK(a.sweep->waves == 5);
  CHECK(a.sweep->warm_starts == 16);
  CHECK(a.sweep->billed_s == Approx(4 * cold.billed_s_total + 16 * warm.billed_s_total + 4 * 2 * 600.0));
  CHECK(a.sweep->wall_s == Approx(cold.wall_s + 4 * warm.wall_s));
  CHECK(a.sweep->cold_billed_s == Approx(20 * cold.billed_s_total));
}

TEST_CASE("planner: classic managed spot with max_wait reports how often the job exceeds it", "[planner][classic]") {
  planner::JobRequest r;
  r.purchase = "spot";
  r.max_wait = "4min";
  r.runs = 200;
  const auto a = planner::analyze_classic_job(plan_of(1), catalog(), r, true);
  REQUIRE(a.spot_result);
  REQUIRE(a.spot_result->monte_carlo.p_exceed_max_wait);
  CHECK(*a.spot_result->monte_carlo.p_exceed_max_wait >= 0);
  CHECK(*a.spot_result->monte_carlo.p_exceed_max_wait <= 1);
  // Never faster than the uninterrupted job.
  CHECK(a.spot_result->monte_carlo.time_s.p50 >= a.job.wall_s * (1 - 1e-9));
  // A warm first start is shorter than a cold one when nothing interrupts the job.
  r.warm_pool = true;
  const auto w = planner::analyze_classic_job(plan_of(1), catalog(), r, true);
  CHECK(w.spot_result->monte_carlo.time_s.p50 < a.spot_result->monte_carlo.time_s.p50);
}

TEST_CASE("planner: classic job options that do not go together are refused by name", "[planner][classic]") {
  planner::JobRequest r;
  r.max_wait = "1h";
  REQUIRE_ERROR_CONTAINS(planner::analyze_classic_job(plan_of(1), catalog(), r, false), "--max-wait");
  r = {};
  r.purchase = "spot";
  r.repeat = 3;
  REQUIRE_ERROR_CONTAINS(planner::analyze_classic_job(plan_of(1), catalog(), r, true), "--repeat");
  r = {};
  r.purchase = "blend:1";
  REQUIRE_ERROR_CONTAINS(planner::analyze_classic_job(plan_of(2), catalog(), r, true), "--purchase");
  r = {};
  r.keep_alive = "10min";
  REQUIRE_ERROR_CONTAINS(planner::analyze_classic_job(plan_of(1), catalog(), r, false), "--keep-alive");
}

TEST_CASE("planner: the classic job file round-trips and names bad fields by JSON pointer", "[planner][classic]") {
  const auto rows = planner::compare_classic(lesson());
  const auto& row = rows[1];
  const json::Json doc = planner::classic_plan_json(lesson().spec, row, plan::Purchase::spot);
  CHECK(planner::is_classic_plan(doc));
  const planner::ClassicPlan p = planner::parse_classic_plan(doc, "job.json");
  CHECK(p.spec.rows == 892);
  CHECK(p.spec.features == 8);
  CHECK(p.spec.rounds == 100);
  CHECK(p.instance_type == row.job.instance);
  CHECK(p.count == row.job.count);
  CHECK(p.purchase == plan::Purchase::spot);
  // The job the file describes is the row's job.
  const auto a = planner::analyze_classic_job(p, catalog(), {}, false);
  CHECK(a.job.wall_s == Approx(row.job.wall_s));

  json::Json bad = doc;
  bad["xgboost"]["rows"] = -4;
  REQUIRE_ERROR_CONTAINS(planner::parse_classic_plan(bad, "job.json"), "/xgboost/rows");
  bad = doc;
  bad["cluster"]["counts"] = 2;
  REQUIRE_ERROR_CONTAINS(planner::parse_classic_plan(bad, "job.json"), "/cluster");
  // A GPU plan reader refuses the file with what to do instead.
  REQUIRE_ERROR_CONTAINS(plan::parse_plan(doc, "job.json"), "trainplan job");
}

TEST_CASE("planner: the classic job written is the objective's best row", "[planner][classic]") {
  planner::ClassicRequest req = lesson();
  req.spec.rows = 20'000'000;  // large enough that more instances finish sooner
  const auto rows = planner::compare_classic(req);
  auto fastest = std::min_element(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.job.wall_s < b.job.wall_s; });
  auto cheapest = std::min_element(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.job.cost_usd < b.job.cost_usd; });
  CHECK(&planner::best_classic_row(rows, "time") == &*fastest);
  CHECK(&planner::best_classic_row(rows, "cost") == &*cheapest);
  // Cheapest within a deadline between the two: brute force over the rows.
  const double deadline = (fastest->job.wall_s + cheapest->job.wall_s) / 2;
  const planner::ClassicRow* within = nullptr;
  for (const auto& r : rows)
    if (r.job.wall_s <= deadline && (!within || r.job.cost_usd < within->job.cost_usd)) within = &r;
  REQUIRE(within);
  CHECK(&planner::best_classic_row(rows, "cost-under-deadline", deadline) == within);
  // No row meets an impossible deadline: the fastest.
  CHECK(&planner::best_classic_row(rows, "cost-under-deadline", 1.0) == &*fastest);
  // No row within an impossible budget: the cheapest.
  CHECK(&planner::best_classic_row(rows, "time-under-budget", 0, 1e-9) == &*cheapest);
}
