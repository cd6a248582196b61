// Plan search: an instance type without a price for the purchase option is never ranked as
// free (issue 15 §4). The oracle is the catalog's own price fields: p5e.48xlarge has spot
// samples but no on-demand listing; p5.48xlarge has both.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

namespace {

// gpt2-124m on one or two nodes of p5 and p5e, narrow axes (the ranking, not the space, is tested).
planner::SearchRequest p5_request(planner::Objective objective) {
  planner::SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 2e9;
  req.instance_types = {"p5.48xlarge", "p5e.48xlarge"};
  req.max_gpus = 16;
  req.micro_batches = {16};
  req.zero_stages = {1};
  req.recomputes = {plan::Recompute::none};
  req.dp_algorithms = {plan::DpAlgorithm::ring};
  req.objective = objective;
  req.threads = 2;
  return req;
}

bool any_of_type(const planner::SearchResult& res, const std::string& type) {
  return std::any_of(res.ranked.begin(), res.ranked.end(), [&](const auto& c) { return c.plan.instance_type == type; });
}

}  // namespace

TEST_CASE("search: missing_price names the price an instance lacks for the platform and purchase option", "[planner]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  const auto& p5e = cat.instance("p5e.48xlarge");
  const auto& p5 = cat.instance("p5.48xlarge");
  // The catalog facts the answers follow from.
  REQUIRE_FALSE(p5e.prices.ec2_on_demand);
  REQUIRE(p5e.prices.spot);
  REQUIRE(p5.prices.ec2_on_demand);
  REQUIRE(p5.prices.spot);

  planner::SearchRequest req = p5_request(planner::Objective::cost);
  CHECK(planner::missing_price(req, p5e) == "EC2 on-demand");
  CHECK_FALSE(planner::missing_price(req, p5));
  req.purchase = plan::Purchase::spot;
  CHECK_FALSE(planner::missing_price(req, p5e));  // its spot price prices it
  req.both_purchases = true;
  CHECK_FALSE(planner::missing_price(req, p5e));  // one of the two is enough
  req.both_purchases = false;
  req.platform = plan::Platform::sagemaker;  // managed spot is derived from the on-demand prices
  CHECK(planner::missing_price(req, p5e) == "SageMaker managed spot");
  req.purchase = plan::Purchase::on_demand;
  CHECK(planner::missing_price(req, p5e) == "SageMaker on-demand");
  CHECK_FALSE(planner::missing_price(req, p5));
}

TEST_CASE("search: a cost objective leaves out an instance without a price and says so", "[planner]") {
  for (auto objective : {planner::Objective::cost, planner::Objective::time_under_budget, planner::Objective::cost_under_deadline}) {
    CAPTURE(planner::objective_name(objective));
    auto req = p5_request(objective);
    req.budget_usd = 1e6;
    req.deadline_s = 1e6;
    const auto res = planner::search(req, hw::Catalog::builtin());
    REQUIRE_FALSE(res.ranked.empty());
    CHECK_FALSE(any_of_type(res, "p5e.48xlarge"));
    for (const auto& c : res.ranked) CHECK(c.objective_cost_usd);
    REQUIRE(res.unpriced.size() == 1);
    CHECK(res.unpriced[0].instance_type == "p5e.48xlarge");
    CHECK(res.unpriced[0].missing == "EC2 on-demand");
    const std::string note = planner::unpriced_note(req, res.unpriced);
    CHECK(note.find("left out of the cost ranking") != std::string::npos);
    CHECK(note.find("EC2 on-demand") != std::string::npos);
    CHECK(note.find("p5e.48xlarge") != std::string::npos);
  }
}

TEST_CASE("search: priced like p5, p5e (H200) wins the cost ranking it is left out of without a price", "[planner]") {
  // With a price the same search ranks it first: same hourly price, faster memory.
  hw::Catalog cat = hw::Catalog::builtin();
  const double p5_price = *cat.instance("p5.48xlarge").prices.ec2_on_demand;
  cat.apply_price_json(json::parse_text(fmt::format(R"({{"source": "test", "prices": {{"p5e.48xlarge": {{"ec2_on_demand": {}}}}}}})",
                                                    p5_price),
                                        "p5e.json"),
                       "p5e.json");
  const auto req = p5_request(planner::Objective::cost);
  const auto priced = planner::search(req, cat);
  CHECK(priced.unpriced.empty());
  REQUIRE_FALSE(priced.ranked.empty());
  CHECK(priced.ranked.front().plan.instance_type == "p5e.48xlarge");
  const auto unpriced = planner::search(req, hw::Catalog::builtin());
  REQUIRE_FALSE(unpriced.ranked.empty());
  CHECK(unpriced.ranked.front().plan.instance_type == "p5.48xlarge");
}

TEST_CASE("search: a time objective ranks an unpriced instance with no cost, never as free", "[planner]") {
  const auto req = p5_request(planner::Objective::time);
  const auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(any_of_type(res, "p5e.48xlarge"));
  for (const auto& c : res.ranked) {
    if (c.plan.instance_type != "p5e.48xlarge") continue;
    CHECK_FALSE(c.cost_on_demand_usd);
    CHECK_FALSE(c.objective_cost_usd);
    CHECK(c.cost_spot_usd);  // its spot price is known
  }
  // Never on the (time, cost) frontier.
  for (size_t i : res.pareto) CHECK(res.ranked[i].plan.instance_type == "p5.48xlarge");
  const std::string note = planner::unpriced_note(req, res.unpriced);
  CHECK(note.find("no EC2 on-demand price for p5e.48xlarge") != std::string::npos);
  CHECK(planner::unpriced_note(req, {}).empty());
}

TEST_CASE("search: a cost objective over unpriced instances only is an error naming them", "[planner]") {
  auto req = p5_request(planner::Objective::cost);
  req.instance_types = {"p5e.48xlarge"};
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "p5e.48xlarge");
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "--prices");
  req.purchase = plan::Purchase::spot;  // its spot price is enough for a spot ranking
  CHECK_FALSE(planner::search(req, hw::Catalog::builtin()).ranked.empty());
}

TEST_CASE("search: a Capacity Block purchase pays whole reserved days and leaves out types without a block price",
          "[planner]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  auto req = p5_request(planner::Objective::cost);
  req.instance_types = {"p5.48xlarge", "p4d.24xlarge"};
  req.purchase = plan::Purchase::capacity_block;
  CHECK_FALSE(planner::missing_price(req, cat.instance("p5.48xlarge")));
  CHECK(planner::missing_price(req, cat.instance("p4d.24xlarge")) == "EC2 Capacity Block");  // none in us-east-1
  const auto res = planner::search(req, cat);
  REQUIRE_FALSE(res.ranked.empty());
  REQUIRE(res.unpriced.size() == 1);
  CHECK(res.unpriced[0].instance_type == "p4d.24xlarge");
  CHECK(planner::unpriced_note(req, res.unpriced).find("no EC2 Capacity Block price: p4d.24xlarge") != std::string::npos);
  const double price = *cat.instance("p5.48xlarge").prices.capacity_block;  // 39.33 USD per instance-hour
  for (const auto& c : res.ranked) {
    CHECK(c.purchase == plan::Purchase::capacity_block);
    CHECK(c.plan.purchase == plan::Purchase::capacity_block);
    REQUIRE(c.objective_cost_usd);
    // Closed form: instances x whole days (the run is under 14 days) x 24 h x price.
    const double hours = c.time_to_train_s / 3600.0;
    REQUIRE(hours < 14 * 24);
    CHECK(*c.objective_cost_usd == Approx(c.plan.instance_count * std::ceil(hours / 24) * 24 * price));
    CHECK(c.cost_capacity_block_usd == c.objective_cost_usd);
    CHECK(*c.objective_cost_usd >= c.plan.instance_count * hours * price);
  }
  req.platform = plan::Platform::sagemaker;  // an EC2 purchase
  CHECK(planner::missing_price(req, cat.instance("p5.48xlarge")) == "EC2 Capacity Block");
}
