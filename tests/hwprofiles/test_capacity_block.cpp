// EC2 Capacity Blocks for ML: the reservation arithmetic (whole days up to 14 days, whole weeks
// up to 182 days, consecutive blocks beyond), the catalog's published block prices by region,
// and price files. Oracles: the EC2 User Guide's rules and the AWS pricing page's figures.
#include <fmt/format.h>

#include "test_support.hpp"
#include "trainplan/hwprofiles/capacity_block.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;
using trainplan::testing::source_path;

namespace {

hw::Catalog catalog_with_blocks(const std::string& blocks) {
  return hw::Catalog::from_texts({{"sources.json", json::read_text_file(source_path("hwprofiles/catalog/sources.json"))},
                                  {"gpus.json", json::read_text_file(source_path("hwprofiles/catalog/gpus.json"))},
                                  {"p5.json", json::read_text_file(source_path("hwprofiles/catalog/p5.json"))},
                                  {"blocks.json", blocks}});
}

const char* kRules = R"("rules": {"day_steps_up_to_days": 14, "week_steps_up_to_days": 182, "max_instances_per_block": 64,
                                  "max_start_lead_days": 56, "source": "capacity_block_pricing"})";

}  // namespace

TEST_CASE("hwprofiles: a Capacity Block reserves whole days up to 14 days, whole weeks to 182, then more blocks",
          "[hwprofiles]") {
  const hw::CapacityBlockRules rules = hw::Catalog::builtin().capacity_block_rules();
  REQUIRE(rules.day_steps_up_to_days == 14);
  REQUIRE(rules.week_steps_up_to_days == 182);
  const double day = 24, week = 7 * day;
  CHECK(hw::capacity_block_reserved_hours(0.1, rules) == day);
  CHECK(hw::capacity_block_reserved_hours(24, rules) == day);
  CHECK(hw::capacity_block_reserved_hours(24.5, rules) == 2 * day);
  CHECK(hw::capacity_block_reserved_hours(14 * day, rules) == 14 * day);
  CHECK(hw::capacity_block_reserved_hours(14 * day + 1, rules) == 3 * week);  // 15 days: the 7-day steps
  CHECK(hw::capacity_block_reserved_hours(22 * day, rules) == 4 * week);
  CHECK(hw::capacity_block_reserved_hours(182 * day, rules) == 182 * day);
  CHECK(hw::capacity_block_reserved_hours(182 * day + 1, rules) == 183 * day);  // a second block of 1 day
  CHECK(hw::capacity_block_reserved_hours(200 * day, rules) == 182 * day + 3 * week);

  // 4 x p5.48xlarge for 50 h: 3 days reserved = 4 x 72 x 39.33 USD.
  const hw::CapacityBlockOffer p5{"p5.48xlarge", "us-east-1", 39.33, "capacity_block_pricing"};
  auto c = hw::capacity_block_cost(p5, rules, 4, 50);
  CHECK(c.reserved_hours == 72);
  CHECK(c.usd == Approx(4 * 72 * 39.33));
  CHECK(c.blocks_in_parallel == 1);
  CHECK(c.blocks_in_sequence == 1);
  // 100 instances take two blocks side by side (64 at most each); 190 days two in a row.
  c = hw::capacity_block_cost(p5, rules, 100, 190 * day);
  CHECK(c.blocks_in_parallel == 2);
  CHECK(c.blocks_in_sequence == 2);
  CHECK(c.usd == Approx(100 * 190 * day * 39.33));
}

TEST_CASE("hwprofiles: the catalog's Capacity Block prices are the published ones, by region", "[hwprofiles]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  // AWS Capacity Blocks pricing page: p5.48xlarge 39.33 in US East (N. Virginia) and (Ohio),
  // p5e.48xlarge 43.26 in Ohio, p4d.24xlarge 14.75 in Ohio and Oregon, trn1.32xlarge 15.49 in Melbourne.
  CHECK(cat.capacity_block_offer("p5.48xlarge", "us-east-1")->usd_per_instance_hour == Approx(39.33));
  CHECK(cat.capacity_block_offer("p5e.48xlarge", "us-east-2")->usd_per_instance_hour == Approx(43.26));
  CHECK(cat.capacity_block_offer("p4d.24xlarge", "us-west-2")->usd_per_instance_hour == Approx(14.75));
  CHECK(cat.capacity_block_offer("trn1.32xlarge", "ap-southeast-4")->usd_per_instance_hour == Approx(15.49));
  CHECK(cat.capacity_block_offer("p4d.24xlarge", "us-east-1") == nullptr);
  // An instance carries the block price of its price region (us-east-1) with its source.
  const auto& p5 = cat.instance("p5.48xlarge");
  CHECK(p5.prices.capacity_block == Approx(39.33));
  CHECK(p5.sources.at("capacity_block") == "capacity_block_pricing");
  CHECK(to_json(p5)["prices"]["capacity_block_usd_per_hour"] == Approx(39.33));
  CHECK_FALSE(cat.instance("p4d.24xlarge").prices.capacity_block);
  CHECK_FALSE(cat.instance("p6-b200.48xlarge").prices.capacity_block);  // sold as blocks, no price found
  for (const auto& o : cat.capacity_block_offers()) CHECK(cat.source(o.source).verified);
}

TEST_CASE("hwprofiles: a price file moving an instance to another region takes that region's block price",
          "[hwprofiles]") {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.apply_price_json(json::parse_text(R"({"region": "us-west-2", "prices": {"p4d.24xlarge": {"ec2_on_demand": 22.0}}})", "p.json"),
                       "p.json");
  CHECK(cat.instance("p4d.24xlarge").prices.capacity_block == Approx(14.75));
  cat.apply_price_json(json::parse_text(R"({"prices": {"p4d.24xlarge": {"capacity_block": 12.5}}})", "q.json"), "q.json");
  CHECK(cat.instance("p4d.24xlarge").prices.capacity_block == Approx(12.5));
  CHECK(cat.instance("p4d.24xlarge").sources.at("capacity_block") == "user:q.json");
  cat.apply_price_json(json::parse_text(R"({"region": "eu-west-1", "prices": {"p5.48xlarge": {"ec2_on_demand": 60.0}}})", "r.json"),
                       "r.json");
  CHECK_FALSE(cat.instance("p5.48xlarge").prices.capacity_block);  // none published in eu-west-1
}

TEST_CASE("hwprofiles: bad Capacity Block tables fail with file, pointer and hint", "[hwprofiles]") {
  REQUIRE_ERROR_CONTAINS(
      catalog_with_blocks(fmt::format(R"({{"capacity_blocks": {{{}, "offers": [{{"instance": "p9.48xlarge", "region": "us-east-1",
          "usd_per_instance_hour": 10, "source": "capacity_block_pricing"}}]}}}})", kRules)),
      "blocks.json: /capacity_blocks/offers/0/instance: Capacity Block offer for unknown instance \"p9.48xlarge\"");
  REQUIRE_ERROR_CONTAINS(
      catalog_with_blocks(fmt::format(R"({{"capacity_blocks": {{{}, "offers": [{{"instance": "p5.48xlarge", "region": "us-east-1",
          "usd_per_instance_hour": 0, "source": "capacity_block_pricing"}}]}}}})", kRules)),
      "/capacity_blocks/offers/0/usd_per_instance_hour");
  REQUIRE_ERROR_CONTAINS(
      catalog_with_blocks(fmt::format(R"({{"capacity_blocks": {{{}, "offers": [
          {{"instance": "p5.48xlarge", "region": "us-east-1", "usd_per_instance_hour": 30, "source": "capacity_block_pricing"}},
          {{"instance": "p5.48xlarge", "region": "us-east-1", "usd_per_instance_hour": 31, "source": "capacity_block_pricing"}}]}}}})",
                                      kRules)),
      "a second Capacity Block price for p5.48xlarge in us-east-1");
  REQUIRE_ERROR_CONTAINS(
      catalog_with_blocks(fmt::format(R"({{"capacity_blocks": {{{}, "offers": [{{"instance": "p5.48xlarge", "region": "us-east-1",
          "usd_per_instance_hour": 30, "source": "no_such_source"}}]}}}})", kRules)),
      "unknown source id \"no_such_source\"");
}
