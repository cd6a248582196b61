// User price files: overrides, re-derived estimates, and errors with file + pointer.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  // The process id keeps concurrent test runs (other build directories) apart.
  auto path = std::filesystem::temp_directory_path() / ("trainplan-hw-" + std::to_string(::getpid()) + "-" + name);
  json::write_text_file(path.string(), text);
  return path.string();
}

json::Json parse(const char* text) { return json::Json::parse(text); }

}  // namespace

TEST_CASE("hwprofiles: a price file overrides EC2, SageMaker, spot and the interruption bucket", "[hwprofiles][prices]") {
  Rng rng(11);
  const double ec2 = 10.0 + 10.0 * rng.uniform();
  const double spot = 2.0 + 3.0 * rng.uniform();
  const double sm = ec2 * (1.1 + 0.2 * rng.uniform());
  hw::Catalog cat = hw::Catalog::builtin();
  json::Json doc = {{"source", "our EDP quote"},
                    {"date", "2026-10-01"},
                    {"prices", {{"p4d.24xlarge", {{"ec2_on_demand", ec2}, {"spot", spot}, {"sagemaker_on_demand", sm},
                                                  {"interruption_bucket", "5-10%"}}}}}};
  cat.apply_price_json(doc, "quote.json");
  const auto& p = cat.instance("p4d.24xlarge").prices;
  CHECK(*p.ec2_on_demand == ec2);
  CHECK(*p.spot == spot);
  CHECK_FALSE(p.spot_estimated);
  CHECK_FALSE(p.spot_min);
  CHECK(*p.sagemaker_on_demand == sm);
  CHECK_FALSE(p.sagemaker_estimated);
  CHECK(p.interruption_bucket == "5-10%");
  CHECK(p.region == "us-east-1");
  const auto& sources = cat.instance("p4d.24xlarge").sources;
  for (const char* group : {"ec2_on_demand", "spot", "sagemaker", "interruption"}) CHECK(sources.at(group) == "user:quote.json");
  CHECK(cat.source("user:quote.json").description == "our EDP quote");
  CHECK(cat.source("user:quote.json").date == "2026-10-01");
  // Other instances and the built-in catalog are untouched.
  CHECK(*cat.instance("p5.48xlarge").prices.ec2_on_demand == Approx(55.04));
  CHECK(*hw::Catalog::builtin().instance("p4d.24xlarge").prices.ec2_on_demand == Approx(21.957642));
}

TEST_CASE("hwprofiles: a new EC2 price re-derives estimated SageMaker and spot prices", "[hwprofiles][prices]") {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.apply_price_json(parse(R"({"prices": {"p3dn.24xlarge": {"ec2_on_demand": 20.0},
                                            "g5.8xlarge": {"ec2_on_demand": 2.0}}})"),
                       "p.json");
  const auto& p3dn = cat.instance("p3dn.24xlarge").prices;
  CHECK(p3dn.sagemaker_estimated);
  CHECK(*p3dn.sagemaker_on_demand == Approx(20.0 * 1.15));
  CHECK(*p3dn.spot == Approx(0.5 * (3.2632 + 3.8094)));  // a sampled spot price stays
  const auto& g5 = cat.instance("g5.8xlarge").prices;
  CHECK(g5.spot_estimated);
  CHECK(*g5.spot == Approx(2.0 * (1.0 - 0.58)));
  CHECK(*g5.sagemaker_on_demand == Approx(2.0 * 1.4));
  CHECK(cat.instance("g5.8xlarge").sources.at("ec2_on_demand") == "user:p.json");
  CHECK(cat.source("user:p.json").date == "undated");
}

TEST_CASE("hwprofiles: prices for another region replace the catalog's us-east-1 figures", "[hwprofiles][prices]") {
  hw::Catalog cat = hw::Catalog::builtin();
  cat.apply_price_json(parse(R"({"region": "eu-west-1", "prices": {"p4d.24xlarge": {"ec2_on_demand": 24.0},
                                                                   "g5.12xlarge": {"spot": 2.5}}})"),
                       "eu.json");
  const auto& p4d = cat.instance("p4d.24xlarge").prices;
  CHECK(p4d.region == "eu-west-1");
  CHECK(*p4d.ec2_on_demand == 24.0);
  CHECK_FALSE(p4d.spot);  // the us-east-1 samples do not apply; p4d has no discount factor
  CHECK(p4d.sagemaker_estimated);  // the old third-party us-east-1 SageMaker price is dropped
  CHECK(*p4d.sagemaker_on_demand == Approx(24.0 * 1.15));
  const auto& g5 = cat.instance("g5.12xlarge").prices;
  CHECK_FALSE(g5.ec2_on_demand);  // not given for eu-west-1: unknown rather than wrong
  CHECK(*g5.spot == 2.5);
  CHECK(cat.instance("p5.48xlarge").prices.region == "us-east-1");
}

TEST_CASE("hwprofiles: price file errors name the file and pointer, nothing is half-applied", "[hwprofiles][prices]") {
  hw::Catalog cat = hw::Catalog::builtin();
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlage": {"spot": 7}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlage: unknown instance type \"p4d.24xlage\" \xE2\x80\x94 did you mean \"p4d.24xlarge\"?");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlarge": {"spot": -7}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlarge/spot: must be positive, got -7");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlarge": {"spot": 0}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlarge/spot: must be positive, got 0");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlarge": {"ec2_on_demand": "19.5"}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlarge/ec2_on_demand: must be a number, got a string");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlarge": {"spto": 7}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlarge/spto: unknown field \"spto\" \xE2\x80\x94 did you mean \"spot\"?");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p4d.24xlarge": {"interruption_bucket": "7%"}}})"), "u.json"),
                         "u.json: /prices/p4d.24xlarge/interruption_bucket: unknown value \"7%\"");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"regoin": "x", "prices": {}})"), "u.json"),
                         "u.json: /regoin: unknown field \"regoin\" \xE2\x80\x94 did you mean \"region\"?");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"date": "last week", "prices": {}})"), "u.json"),
                         "u.json: /date: \"last week\" is not a date");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"region": "eu-west-1"})"), "u.json"),
                         "u.json: /: missing required field \"prices\"");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"([1, 2])"), "u.json"), "u.json: /: must be an object");
  // The first entry was valid, the second not: the first must not have been applied.
  REQUIRE_ERROR_CONTAINS(cat.apply_price_json(parse(R"({"prices": {"p5.48xlarge": {"spot": 1.0}, "p4d.24xlarge": {"spot": -1}}})"),
                                              "u.json"),
                         "must be positive");
  CHECK(*cat.instance("p5.48xlarge").prices.spot == Approx(0.5 * (20.9934 + 30.326)));
}

TEST_CASE("hwprofiles: a truncated price file is a JSON error naming the file", "[hwprofiles][prices]") {
  std::string path = temp_file("truncated.json", R"({"prices": {"p4d.24xlarge": {"spot": 7)");
  hw::Catalog cat = hw::Catalog::builtin();
  REQUIRE_ERROR_CONTAINS(cat.apply_price_file(path), path + ": invalid JSON at line 1");
  REQUIRE_ERROR_CONTAINS(cat.apply_price_file(path), "truncated");
  std::filesystem::remove(path);
  REQUIRE_ERROR_CONTAINS(cat.apply_price_file(path), "cannot open the file");
}

TEST_CASE("hwprofiles: load_catalog applies the user price file", "[hwprofiles][prices]") {
  std::string path = temp_file("prices.json", R"({"source": "negotiated", "prices": {"p5.48xlarge": {"ec2_on_demand": 40.0}}})");
  hw::Catalog cat = hw::load_catalog("", path);
  CHECK(*cat.instance("p5.48xlarge").prices.ec2_on_demand == 40.0);
  CHECK(cat.instance("p5.48xlarge").sources.at("ec2_on_demand") == "user:" + path);
  std::filesystem::remove(path);
}
