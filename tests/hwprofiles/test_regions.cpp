// Regions: the per-region price and availability table (catalog/regions.json) against rows
// copied from its source, the SkyPilot snapshot of the AWS Price List
// (skypilot-org/skypilot-catalog catalogs/v7/aws/vms.csv at 001367d22a); select_region()
// (`trainplan --region`) and its errors.
#include <algorithm>
#include <cmath>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;
using trainplan::testing::source_path;

namespace {

const hw::RegionOffer& offer(const std::string& type, const std::string& region) {
  return hw::Catalog::builtin().region_table().instances.at(type).at(region);
}

}  // namespace

TEST_CASE("hwprofiles: the region table holds the snapshot's rows", "[hwprofiles][regions]") {
  const auto& rt = hw::Catalog::builtin().region_table();
  CHECK(rt.names == std::vector<std::string>{"us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-northeast-1"});
  CHECK(rt.source == "skypilot_v7_regions");
  // vms.csv: p4d.24xlarge,A100,...,35.39655,16.318200,eu-west-1,euw1-az2 (its only eu-west-1 row)
  const auto& p4d_eu = offer("p4d.24xlarge", "eu-west-1");
  CHECK(*p4d_eu.ec2_on_demand == 35.39655);
  CHECK(*p4d_eu.spot_min == 16.3182);
  CHECK(*p4d_eu.spot_max == 16.3182);
  CHECK(p4d_eu.zones == std::vector<std::string>{"euw1-az2"});
  // p4d.24xlarge,...,44.92215,14.052000,ap-northeast-1,apne1-az4
  const auto& p4d_ap = offer("p4d.24xlarge", "ap-northeast-1");
  CHECK(*p4d_ap.ec2_on_demand == 44.92215);
  CHECK(*p4d_ap.spot_min == 14.052);
  CHECK(p4d_ap.zones == std::vector<std::string>{"apne1-az4"});
  // p5.48xlarge in us-west-2: 98.32 in usw2-az1..az4, spot 33.2399, 30.9762, 31.737, 30.5798
  const auto& p5_w = offer("p5.48xlarge", "us-west-2");
  CHECK(*p5_w.ec2_on_demand == 98.32);
  CHECK(*p5_w.spot_min == 30.5798);
  CHECK(*p5_w.spot_max == 33.2399);
  CHECK(p5_w.zones.size() == 4);
  // Availability: no p5.48xlarge row in eu-west-1; trn2.48xlarge only in us-east-2 (no spot
  // sample); p5e.48xlarge rows without an on-demand price.
  CHECK(rt.instances.at("p5.48xlarge").count("eu-west-1") == 0);
  CHECK(rt.instances.at("trn2.48xlarge").size() == 1);
  CHECK(*offer("trn2.48xlarge", "us-east-2").ec2_on_demand == 85.964);
  CHECK_FALSE(offer("trn2.48xlarge", "us-east-2").spot_min);
  CHECK_FALSE(offer("p5e.48xlarge", "us-east-2").ec2_on_demand);
  CHECK(*offer("p5e.48xlarge", "us-east-2").spot_min == 14.4663);
  // g5.48xlarge,A10G,...,18.18233,7.862500,eu-west-1,euw1-az1 (and az2 7.9723, az3 7.9607); no
  // g6e row in eu-west-1.
  CHECK(*offer("g5.48xlarge", "eu-west-1").ec2_on_demand == 18.18233);
  CHECK(*offer("g5.48xlarge", "eu-west-1").spot_min == 7.8625);
  CHECK(*offer("g5.48xlarge", "eu-west-1").spot_max == 7.9723);
  CHECK(rt.instances.at("g6e.48xlarge").count("eu-west-1") == 0);
  // Types the table does not list have no regional figures (unknown, not "not offered"):
  // p6-b200 postdates the snapshot.
  CHECK_FALSE(hw::Catalog::builtin().offered_regions("p6-b200.48xlarge"));
  CHECK(*hw::Catalog::builtin().offered_regions("p5.48xlarge") ==
        std::vector<std::string>{"us-east-1", "us-east-2", "us-west-2", "ap-northeast-1"});
}

TEST_CASE("hwprofiles: us-east-1 keeps the catalog's own prices, unchanged by the region table", "[hwprofiles][regions]") {
  // The primary-source us-east-1 figures (price_list_2026, after the June-2025 P4/P5 cut), not
  // the older snapshot's 32.7726 / 98.32.
  const hw::Catalog& base = hw::Catalog::builtin();
  CHECK(*base.instance("p4d.24xlarge").prices.ec2_on_demand == 21.957642);
  CHECK(*base.instance("p5.48xlarge").prices.ec2_on_demand == 55.04);
  CHECK(*base.instance("p5en.48xlarge").prices.ec2_on_demand == 63.296);
  CHECK(base.region().empty());
  hw::Catalog east = hw::Catalog::builtin();
  east.select_region("us-east-1");
  CHECK(east.region() == "us-east-1");
  for (const auto& name : base.instance_names()) {
    CAPTURE(name);
    const auto& a = base.instance(name).prices;
    const auto& b = east.instance(name).prices;
    CHECK(a.ec2_on_demand == b.ec2_on_demand);
    CHECK(a.sagemaker_on_demand == b.sagemaker_on_demand);
    CHECK(a.spot == b.spot);
    CHECK(a.capacity_block == b.capacity_block);
    CHECK(a.region == b.region);
    CHECK(east.offered_in_selected_region(name));  // the catalog's own region: its primary sources decide
  }
}

TEST_CASE("hwprofiles: select_region prices every instance from the region table", "[hwprofiles][regions]") {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.select_region("eu-west-1");
  const auto& p4d = cat.instance("p4d.24xlarge");
  CHECK(p4d.prices.region == "eu-west-1");
  CHECK(*p4d.prices.ec2_on_demand == 35.39655);
  CHECK(*p4d.prices.spot == 16.3182);  // the midpoint of one sample
  CHECK_FALSE(p4d.prices.spot_estimated);
  // SageMaker: EC2 x the family's uplift (no regional SageMaker source).
  CHECK(p4d.prices.sagemaker_estimated);
  CHECK(*p4d.prices.sagemaker_on_demand == Approx(35.39655 * *p4d.prices.sagemaker_uplift).epsilon(1e-12));
  CHECK(p4d.sources.at("ec2_on_demand") == "skypilot_v7_regions");
  CHECK(p4d.sources.at("spot") == "skypilot_v7_regions");
  CHECK(std::any_of(p4d.notes.begin(), p4d.notes.end(), [](const std::string& n) { return n.find("June-2025") != std::string::npos; }));
  CHECK_FALSE(p4d.prices.capacity_block);  // no block price published for eu-west-1
  // Not offered: no price, and the regions that offer it.
  const auto& p5 = cat.instance("p5.48xlarge");
  CHECK_FALSE(p5.prices.ec2_on_demand);
  CHECK_FALSE(p5.prices.spot);
  CHECK_FALSE(cat.offered_in_selected_region("p5.48xlarge"));
  CHECK(cat.offered_in_selected_region("p4d.24xlarge"));
  // Not in the table: no price (availability unknown, so not left out), and a note.
  const auto& b200 = cat.instance("p6-b200.48xlarge");
  CHECK_FALSE(b200.prices.ec2_on_demand);
  CHECK_FALSE(b200.prices.spot);
  CHECK(cat.offered_in_selected_region("p6-b200.48xlarge"));
  CHECK(b200.notes.back().find("no price for eu-west-1") != std::string::npos);
  // Generic clusters have no AWS prices in any region.
  CHECK(cat.instance("dgx-a100-80gb").prices.region.empty());

  // The Capacity Block offer of the selected region: p4d in us-west-2 (14.75 USD/h).
  hw::Catalog west = hw::Catalog::builtin();
  west.select_region("us-west-2");
  CHECK(*west.instance("p4d.24xlarge").prices.capacity_block == 14.75);
  CHECK(*west.instance("p4d.24xlarge").prices.ec2_on_demand == 32.7726);
  CHECK_FALSE(west.instance("p4de.24xlarge").prices.capacity_block);
}

TEST_CASE("hwprofiles: an unknown region is an error listing the known ones", "[hwprofiles][regions]") {
  hw::Catalog cat = hw::Catalog::builtin();
  REQUIRE_ERROR_CONTAINS(cat.select_region("eu-west-9"), "unknown region \"eu-west-9\"");
  REQUIRE_ERROR_CONTAINS(cat.select_region("eu-west-9"), "us-east-1, us-east-2, us-west-2, eu-west-1, ap-northeast-1");
  REQUIRE_ERROR_CONTAINS(hw::load_catalog("", "", "mars-1"), "unknown region \"mars-1\"");
}

TEST_CASE("hwprofiles: a price file applies on top of the selected region", "[hwprofiles][regions]") {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.select_region("eu-west-1");
  cat.apply_price_json(json::Json::parse(R"({"region": "eu-west-1", "source": "quote",
      "prices": {"p5.48xlarge": {"ec2_on_demand": 60.5}, "p4d.24xlarge": {"ec2_on_demand": 30.0}}})"),
                       "quote.json");
  CHECK(*cat.instance("p5.48xlarge").prices.ec2_on_demand == 60.5);
  CHECK(cat.offered_in_selected_region("p5.48xlarge"));  // a type the user prices there counts as offered
  CHECK(*cat.instance("p4d.24xlarge").prices.ec2_on_demand == 30.0);
  CHECK(*cat.instance("p4d.24xlarge").prices.spot == 16.3182);  // the table's spot sample stays
}

TEST_CASE("hwprofiles: region table errors name the file and pointer", "[hwprofiles][regions]") {
  auto load_with = [](const std::string& instances) {
    return hw::Catalog::from_texts({{"sources.json", json::read_text_file(source_path("hwprofiles/catalog/sources.json"))},
                                    {"gpus.json", json::read_text_file(source_path("hwprofiles/catalog/gpus.json"))},
                                    {"p5.json", json::read_text_file(source_path("hwprofiles/catalog/p5.json"))},
                                    {"regions.json", R"({"regions": {"names": ["us-east-1", "eu-west-1"], "source": "skypilot_v7",
                                                         "instances": )" + instances + "}}"}});
  };
  const hw::Catalog ok = load_with(R"({"p5.48xlarge": {"us-east-1": {"ec2_on_demand": 98.32, "zones": ["use1-az1"]}}})");
  CHECK(*ok.offered_regions("p5.48xlarge") == std::vector<std::string>{"us-east-1"});
  REQUIRE_ERROR_CONTAINS(load_with(R"({"p5.48xlarge": {"eu-west-3": {"zones": ["euw3-az1"]}}})"),
                         "regions.json: /regions/instances/p5.48xlarge/eu-west-3: unknown region \"eu-west-3\"");
  REQUIRE_ERROR_CONTAINS(load_with(R"({"p9.48xlarge": {"us-east-1": {"zones": ["use1-az1"]}}})"),
                         "regions.json: /regions/instances/p9.48xlarge: region table entry for unknown instance \"p9.48xlarge\"");
  REQUIRE_ERROR_CONTAINS(load_with(R"({"p5.48xlarge": {"us-east-1": {"spot_min": 3, "spot_max": 2, "zones": ["a"]}}})"),
                         "is above spot_max");
  REQUIRE_ERROR_CONTAINS(load_with(R"({"p5.48xlarge": {"us-east-1": {"zones": []}}})"), "lists no zone");
  REQUIRE_ERROR_CONTAINS(load_with(R"({"p5.48xlarge": {"us-east-1": {"price": 3, "zones": ["a"]}}})"), "unknown field \"price\"");
}
