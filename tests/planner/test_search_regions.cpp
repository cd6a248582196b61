// Plan search in another AWS region (`--region`, issue 15 §4): prices come from the region,
// the step time does not change, so the cost scales by exactly the price ratio (closed form);
// a type the region does not offer is left out with a note naming where it is offered.
#include <algorithm>

#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

namespace {

planner::SearchRequest request(std::vector<std::string> types) {
  planner::SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 2e9;
  req.instance_types = std::move(types);
  req.instance_counts = {1};
  req.micro_batches = {16};
  req.zero_stages = {1};
  req.recomputes = {plan::Recompute::none};
  req.dp_algorithms = {plan::DpAlgorithm::ring};
  req.objective = planner::Objective::cost;
  req.threads = 2;
  return req;
}

hw::Catalog in_region(const std::string& region) {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.select_region(region);
  return cat;
}

}  // namespace

TEST_CASE("search: --region scales every cost by exactly the region's price ratio at the same step time", "[planner][regions]") {
  const auto req = request({"p4d.24xlarge"});
  const hw::Catalog eu = in_region("eu-west-1");
  const auto home = planner::search(req, hw::Catalog::builtin());
  const auto away = planner::search(req, eu);
  REQUIRE_FALSE(home.ranked.empty());
  REQUIRE(home.ranked.size() == away.ranked.size());
  const double ratio = *eu.instance("p4d.24xlarge").prices.ec2_on_demand /
                       *hw::Catalog::builtin().instance("p4d.24xlarge").prices.ec2_on_demand;  // 35.39655 / 21.957642
  CHECK(ratio == Approx(35.39655 / 21.957642).epsilon(1e-15));
  for (size_t i = 0; i < home.ranked.size(); ++i) {
    const auto& a = home.ranked[i];
    const auto& b = away.ranked[i];
    CHECK(json::dump(plan::to_json(a.plan)["parallelism"]) == json::dump(plan::to_json(b.plan)["parallelism"]));
    CHECK(a.step.step_time_s == b.step.step_time_s);
    CHECK(a.time_to_train_s == b.time_to_train_s);
    REQUIRE(a.cost_on_demand_usd);
    REQUIRE(b.cost_on_demand_usd);
    CHECK(*b.cost_on_demand_usd == Approx(*a.cost_on_demand_usd * ratio).epsilon(1e-12));
    CHECK(a.plan.region.empty());           // the catalog's own prices: not recorded
    CHECK(b.plan.region == "eu-west-1");    // plans record the region that priced them
  }
  CHECK(away.region == "eu-west-1");
  CHECK(away.not_offered.empty());
}

TEST_CASE("search: a type the region does not offer is left out with the regions that offer it", "[planner][regions]") {
  const auto req = request({"p4d.24xlarge", "p5.48xlarge"});
  const auto res = planner::search(req, in_region("eu-west-1"));
  REQUIRE_FALSE(res.ranked.empty());
  CHECK(std::none_of(res.ranked.begin(), res.ranked.end(), [](const auto& c) { return c.plan.instance_type == "p5.48xlarge"; }));
  REQUIRE(res.not_offered.size() == 1);
  CHECK(res.not_offered[0].instance_type == "p5.48xlarge");
  CHECK(planner::not_offered_note(res.region, res.not_offered) ==
        "note: left out, not offered in eu-west-1: p5.48xlarge (offered in us-east-1, us-east-2, us-west-2, ap-northeast-1)");
  CHECK(res.unpriced.empty());
  // Nothing left: an error at --region.
  REQUIRE_ERROR_CONTAINS(planner::search(request({"p5.48xlarge"}), in_region("eu-west-1")),
                         "--region: left out, not offered in eu-west-1: p5.48xlarge");
  // The same types in us-east-1 (the catalog's own region): nothing is left out.
  CHECK(planner::search(req, in_region("us-east-1")).not_offered.empty());
}

TEST_CASE("search: a type the region table does not list is unpriced there, never ranked as free", "[planner][regions]") {
  // p6-b200 priced in us-east-1 by a price file (the built-in catalog has no on-demand price for
  // it); the region table does not list it, so in ap-northeast-1 it has no price.
  hw::Catalog cat = hw::Catalog::builtin();
  cat.apply_price_json(json::Json::parse(R"({"region": "us-east-1", "prices": {"p6-b200.48xlarge": {"ec2_on_demand": 113.9}}})"), "b200.json");
  cat.select_region("ap-northeast-1");
  const auto res = planner::search(request({"p4d.24xlarge", "p6-b200.48xlarge"}), cat);
  REQUIRE(res.unpriced.size() == 1);
  CHECK(res.unpriced[0].instance_type == "p6-b200.48xlarge");
  CHECK(res.not_offered.empty());
  REQUIRE_FALSE(res.ranked.empty());
  for (const auto& c : res.ranked) {
    CHECK(c.plan.instance_type == "p4d.24xlarge");
    CHECK(*c.objective_cost_usd > 0);
  }
}
