// One prediction per plan: the README job (`trainplan plan --model gpt3-13b --tokens 300e9`)
// through every path that prints a step time for its best plan — the search's ranking (`plan`),
// the plan file it writes (`plan -o`), `trainplan simulate plan.json` and
// `trainplan report --plan plan.json` — agrees within 1 %.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/reports/report.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;
using namespace trainplan::planner;
using namespace trainplan::reports;

namespace {

// What `trainplan plan` sends to the search for the README job (cli/src/search_options.cpp).
SearchRequest readme_request() {
  SearchRequest req;
  req.model = "gpt3-13b";
  req.tokens = 300e9;
  req.simulate_top = 32;  // the CLI's default
  req.threads = 0;
  return req;
}

}  // namespace

TEST_CASE("reports: the README job's best plan has one step time in plan, plan -o, simulate and report") {
  const hw::Catalog& catalog = hw::Catalog::builtin();
  const SearchRequest req = readme_request();
  const SearchResult res = search(req, catalog);
  REQUIRE(!res.ranked.empty());
  const Candidate& best = res.ranked.front();
  REQUIRE(best.simulated);  // ranked by simulation
  const double ranked_s = best.step_time_s();

  // plan -o: the plan file round trip (what `trainplan simulate` and `report --plan` read).
  const plan::Plan from_file = plan::parse_plan(plan::to_json(best.plan), "plan.json");

  // trainplan simulate plan.json: simulate_plan with its automatic choices and memory events.
  plan::Plan p = from_file;
  const plan::PlanContext ctx = plan::resolve(p, catalog, "plan.json");
  plan::validate(p, ctx, "plan.json");
  sim::PlanSimOptions so;
  so.sim.record_timeline = false;
  const double simulate_s = sim::simulate_plan(p, ctx, so).step.step_time_s;
  CHECK(std::abs(simulate_s / ranked_s - 1.0) < 0.01);

  // trainplan report --plan plan.json: its plan row and its simulated step.
  ReportOptions ro;
  ro.spot_runs = 20;
  ro.spot_plans = 1;
  const Report r = build_plan_report(from_file, catalog, ro, req.tokens, "plan.json");
  REQUIRE(r.plans.size() == 1);
  CHECK(std::abs(r.plans.front().candidate.step_time_s() / ranked_s - 1.0) < 0.01);
  REQUIRE(r.simulated);
  CHECK(std::abs(r.simulated->step_time_s / ranked_s - 1.0) < 0.01);

  // Time to train and cost follow the same step time.
  CHECK(std::abs(best.time_to_train_s / (best.steps * ranked_s) - 1.0) < 1e-9);
  CHECK(std::abs(r.plans.front().candidate.time_to_train_s / best.time_to_train_s - 1.0) < 0.01);
}

TEST_CASE("reports: memory events never change a simulated step's timing") {
  const hw::Catalog& catalog = hw::Catalog::builtin();
  SearchRequest req = readme_request();
  req.instance_types = {"p5en.48xlarge"};
  req.instance_counts = {128};  // 1024 GPUs, dp up to 128: the buckets' frees sit between collectives
  req.simulate_top = 4;
  const SearchResult res = search(req, catalog);
  REQUIRE(res.ranked.size() >= 4);
  for (size_t i = 0; i < 4; ++i) {
    plan::Plan p = res.ranked[i].plan;
    const plan::PlanContext ctx = plan::resolve(p, catalog, "plan.json");
    sim::PlanSimOptions with, without;
    with.sim.record_timeline = without.sim.record_timeline = false;
    without.memory_events = false;
    const auto a = sim::simulate_plan(p, ctx, with);
    const auto b = sim::simulate_plan(p, ctx, without);
    CHECK(a.step.step_time_s == Approx(b.step.step_time_s).epsilon(1e-9));
    CHECK(a.step.peak_memory_bytes.front() > 0);
  }
}
