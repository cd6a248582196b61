// Plan search: the best plan is valid and fits; ranking; determinism; infeasible requests.
#include "test_support.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

TEST_CASE("search: the best plan is valid, fits, and the table is sorted by the objective", "[planner]") {
  planner::SearchRequest req;
  req.model = "gpt2-355m";
  req.tokens = 10e9;
  req.instance_types = {"p3.16xlarge", "p4d.24xlarge", "g5.12xlarge"};
  req.max_gpus = 32;
  req.threads = 2;
  auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE_FALSE(res.ranked.empty());
  CHECK(res.enumerated >= res.ranked.size());
  for (size_t i = 1; i < res.ranked.size(); ++i) CHECK(res.ranked[i - 1].time_to_train_s <= res.ranked[i].time_to_train_s);
  plan::Plan best = res.ranked.front().plan;
  auto ctx = plan::resolve(best, hw::Catalog::builtin(), "best");
  plan::validate(best, ctx, "best");
  CHECK(plan::peak_memory(best, ctx).fits());
  // Cost objective: sorted by on-demand cost.
  req.objective = planner::Objective::cost;
  auto by_cost = planner::search(req, hw::Catalog::builtin());
  for (size_t i = 1; i < by_cost.ranked.size(); ++i)
    CHECK(*by_cost.ranked[i - 1].cost_on_demand_usd <= *by_cost.ranked[i].cost_on_demand_usd);
}

TEST_CASE("search: results do not depend on the thread count", "[planner]") {
  planner::SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 1e9;
  req.instance_types = {"g4dn.12xlarge", "p3.8xlarge"};
  req.max_gpus = 16;
  req.threads = 1;
  auto a = planner::search(req, hw::Catalog::builtin());
  req.threads = 3;
  auto b = planner::search(req, hw::Catalog::builtin());
  REQUIRE(a.ranked.size() == b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    CHECK(json::dump(plan::to_json(a.ranked[i].plan)) == json::dump(plan::to_json(b.ranked[i].plan)));
    CHECK(a.ranked[i].step.step_time_s == b.ranked[i].step.step_time_s);
  }
}

TEST_CASE("search: nothing fits -> empty ranking with the closest attempt", "[planner]") {
  planner::SearchRequest req;
  req.model = "gpt3-175b";
  req.tokens = 1e9;
  req.instance_types = {"g4dn.12xlarge"};
  req.max_gpus = 8;
  auto res = planner::search(req, hw::Catalog::builtin());
  CHECK(res.ranked.empty());
  REQUIRE(res.closest.size() == 1);
  // 175B parameters x 16 bytes / 8 GPUs with ZeRO-3 is still ~350 GB per GPU.
  CHECK(res.closest[0].needed_bytes > 300e9);
  CHECK(res.closest[0].plan.world_size() == 8);
}

TEST_CASE("search: bad requests are errors with a hint", "[planner]") {
  planner::SearchRequest req;
  req.model = "gpt3-13b";
  req.tokens = 0;
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "give --tokens");
  req.tokens = 1e9;
  req.instance_types = {"p4d.24xl"};
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "p4d.24xlarge");
  req.instance_types = {};
  req.model = "gpt-9";
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "gpt-9");
}

TEST_CASE("search: each candidate's estimate is its plan's own, whatever was estimated before it", "[planner]") {
  // The estimate cache shares unit costs between candidates that differ only in what the costs
  // do not depend on. Under a stack that gathers ZeRO-3 parameters tensor by tensor
  // (deepspeed-2021) the costs list the tensors for ZeRO-3 only: a ZeRO-3 candidate must not
  // reuse a ZeRO-0 candidate's costs (nor the reverse), or its estimate would depend on which
  // was estimated first (and so on the thread count).
  planner::SearchRequest req;
  req.model = "gpt2-355m";
  req.tokens = 1e9;
  req.software = "deepspeed-2021";
  req.instance_types = {"p4d.24xlarge"};
  req.max_gpus = 16;
  req.tp_degrees = {1};
  req.pp_degrees = {1};
  req.micro_batches = {4};
  req.recomputes = {plan::Recompute::none};
  req.threads = 1;
  const auto res = planner::search(req, hw::Catalog::builtin());
  int zero3 = 0, others = 0;
  for (const auto& c : res.ranked) {
    plan::Plan p = c.plan;
    const auto ctx = plan::resolve(p, hw::Catalog::builtin(), "candidate");
    INFO(json::dump(plan::to_json(p)));
    CHECK(c.step.step_time_s == Approx(planner::estimate_step(p, ctx).step_time_s).epsilon(1e-12));
    (p.zero_stage == 3 ? zero3 : others) += 1;
  }
  CHECK(zero3 > 0);
  CHECK(others > 0);
}
