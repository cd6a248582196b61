// The option parsers front ends share (planner::search_request, planner::analyze_job,
// sim::plan_sim_options): the bounds and choices of the CLI's flags hold for values set
// without the CLI (the Python module's keywords), with the CLI's error text. Oracle: the same
// value parsed as flag text by checked::parse_int / parse_real (what the CLI's add_int /
// add_real do), and core's flag_choice.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>

#include "plan_fixture.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;

namespace {

planner::SearchOptions small_search() {
  planner::SearchOptions o;
  o.model = "gpt2-124m";
  o.tokens = "1e9";
  return o;
}

// The error checked::parse_int gives for `text` in [min, max], located at `flag`.
std::string cli_int_error(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  try {
    at_flag(flag, [&] { return checked::parse_int(text, min, max); });
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("parse_int accepted " << text);
  return "";
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no Error");
  return "";
}

using Resolved = trainplan::testing::ResolvedPlan;

Resolved small_plan() {
  plan::Plan p;
  p.model = "gpt2-124m";
  p.instance_type = "p3.8xlarge";
  p.instance_count = 1;
  p.dp = 4;
  p.global_batch = 64;
  p.micro_batch = 4;
  p.training_tokens = 1e9;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return {p, std::move(ctx)};
}

}  // namespace

TEST_CASE("planner: search_request takes the CLI's defaults and refuses out-of-range numbers with the CLI's text", "[planner]") {
  const planner::SearchRequest req = planner::search_request(small_search());
  CHECK(req.simulate_top == 32);
  CHECK(req.tokens == 1e9);
  CHECK(req.max_gpus == 1024);

  planner::SearchOptions o = small_search();
  o.max_gpus = 100000;
  CHECK(error_of([&] { planner::search_request(o); }) == cli_int_error("--max-gpus", "100000", 1, planner::kMaxSearchGpus));
  o = small_search();
  o.top = 0;
  CHECK(error_of([&] { planner::search_request(o); }) == cli_int_error("--top", "0", 1, limits::kMaxRows));
  o = small_search();
  o.threads = -1;
  CHECK(error_of([&] { planner::search_request(o); }) == cli_int_error("--threads", "-1", 0, limits::kMaxThreads));
  o = small_search();
  o.spot_runs = static_cast<size_t>(-5);  // a negative keyword stored in an unsigned field
  CHECK(error_of([&] { planner::search_request(o); }) == cli_int_error("--spot-runs", "-5", 1, limits::kMaxRuns));
}

TEST_CASE("planner: search_request refuses unknown choices and bad quantities naming the flag", "[planner]") {
  planner::SearchOptions o = small_search();
  o.platform = "ec3";
  CHECK(error_of([&] { planner::search_request(o); }) ==
        error_of([] { flag_choice("--platform", "ec3", {"ec2", "sagemaker"}); }));
  o = small_search();
  o.tokens = "-5";
  CHECK(error_of([&] { planner::search_request(o); }).rfind("--tokens: ", 0) == 0);
  for (const char* fraction : {"0.5", "1e-300"}) {  // fewer than one token or sample is no training job
    o = small_search();
    o.tokens = fraction;
    CHECK(error_of([&] { planner::search_request(o); }) ==
          fmt::format("--tokens: must be at least one, got \"{}\" \xE2\x80\x94 give the number of tokens (at least 1)", fraction));
    o = small_search();
    o.tokens.clear();
    o.model = "resnet-50";
    o.samples = fraction;
    CHECK(error_of([&] { planner::search_request(o); }).rfind("--samples: must be at least one", 0) == 0);
  }
  o = small_search();
  o.tokens = "1";
  CHECK(planner::search_request(o).tokens == 1);
  o = small_search();
  o.model = "gpt3-175b";
  o.tokens = "300B";
  o.max_gpus = planner::kMaxSearchGpus;  // the largest search the bound allows is accepted
  CHECK(planner::search_request(o).max_gpus == planner::kMaxSearchGpus);
}

TEST_CASE("planner: a --deadline or --budget is never dropped: it implies its objective or is an error", "[planner]") {
  planner::SearchOptions o = small_search();
  CHECK(planner::effective_objective(o) == "time");
  CHECK(planner::search_request(o).objective == planner::Objective::time);
  o.budget = "$2M";  // alone: the fastest plan within it
  CHECK(planner::effective_objective(o) == "time-under-budget");
  CHECK(planner::search_request(o).objective == planner::Objective::time_under_budget);
  CHECK(planner::search_request(o).budget_usd == 2e6);
  o = small_search();
  o.deadline = "30d";  // alone: the cheapest plan within it
  CHECK(planner::search_request(o).objective == planner::Objective::cost_under_deadline);
  CHECK(planner::search_request(o).deadline_s == 30 * 86400.0);
  o.budget = "2M";  // both, no objective: which one the user meant is not guessed
  CHECK(error_of([&] { planner::search_request(o); }).rfind("--objective: --deadline and --budget both given", 0) == 0);
  o.objective = "cost-under-deadline";  // named, but the budget would be ignored
  CHECK(error_of([&] { planner::search_request(o); }) ==
        "--budget: applies to --objective time-under-budget; --objective cost-under-deadline would ignore it \xE2\x80\x94 "
        "drop --budget or use --objective time-under-budget");
  for (const char* objective : {"time", "cost", "time-under-budget"}) {
    o = small_search();
    o.objective = objective;
    o.deadline = "1h";
    CHECK(error_of([&] { planner::search_request(o); }).rfind("--deadline: applies to --objective cost-under-deadline", 0) == 0);
  }
  o = small_search();
  o.objective = "time-under-budget";
  o.budget = "100k";
  CHECK(planner::effective_objective(o) == "time-under-budget");
}

TEST_CASE("planner: analyze_job checks the job flags' bounds and choices", "[planner]") {
  const Resolved r = small_plan();
  planner::JobRequest j;
  j.runs = 0;
  CHECK(error_of([&] { planner::analyze_job(r.plan, r.ctx, j); }) == cli_int_error("--runs", "0", 1, limits::kMaxRuns));
  j = {};
  j.data_input = "s4";
  CHECK(error_of([&] { planner::analyze_job(r.plan, r.ctx, j); }) ==
        error_of([] { flag_choice("--data-input", "s4", sim::data_source_names()); }));
  j = {};
  j.epochs = 0;
  CHECK(error_of([&] { planner::analyze_job(r.plan, r.ctx, j); }).rfind("--epochs: ", 0) == 0);
  j = {};
  j.purchase = "blend:0";
  CHECK(error_of([&] { planner::analyze_job(r.plan, r.ctx, j); }) == cli_int_error("--purchase", "0", 1, limits::kMaxInstances));
}

TEST_CASE("simulator: plan_sim_options checks the simulate flags and picks the timeline ranks", "[simulator]") {
  const Resolved r = small_plan();
  sim::SimulateRequest s;
  s.straggler_stddev = 2;
  CHECK(error_of([&] { sim::plan_sim_options(s, r.plan, r.ctx, false); }) ==
        error_of([] { at_flag("--straggler-stddev", [] { return checked::parse_real("2", 0, sim::kMaxStragglerStddev); }); }));
  s = {};
  s.fidelity = "fast";
  CHECK(error_of([&] { sim::plan_sim_options(s, r.plan, r.ctx, false); }).rfind("--fidelity: unknown value \"fast\"", 0) == 0);
  s = {};
  s.trace_ranks = "1-2,0";
  std::string shown;
  const sim::PlanSimOptions o = sim::plan_sim_options(s, r.plan, r.ctx, true, &shown);
  CHECK(o.sim.record_timeline);
  CHECK(o.sim.timeline_ranks == std::vector<int>{0, 1, 2});
  CHECK(shown == "3 of 4 ranks (--trace-ranks)");
  s.trace_ranks = "4";
  CHECK(error_of([&] { sim::plan_sim_options(s, r.plan, r.ctx, true); }).rfind("--trace-ranks: rank 4 is outside", 0) == 0);
}
