// CPU instances in the catalog: sizes against AWS's naming rules (vCPUs = 2 per "large" step,
// memory per vCPU by family), prices linear in size, derived SageMaker and spot prices by the
// documented rule, every figure with a dated source, and GPU paths refusing CPU names.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

using namespace trainplan;
using trainplan::testing::kGiB;

namespace {

// AWS size names: large = 2 vCPUs, xlarge = 4, Nxlarge = 4N.
int vcpus_of_size(const std::string& name) {
  const std::string size = name.substr(name.find('.') + 1);
  if (size == "large") return 2;
  if (size == "xlarge") return 4;
  return 4 * std::stoi(size.substr(0, size.find("xlarge")));
}

}  // namespace

TEST_CASE("hwprofiles: CPU families m5, m6i, c5, c6i, r5 from large up, vCPUs by size name, memory per vCPU by family",
          "[hwprofiles][cpu]") {
  const auto& cat = hw::Catalog::builtin();
  const std::map<std::string, double> gib_per_vcpu = {{"m5", 4}, {"m6i", 4}, {"c5", 2}, {"c6i", 2}, {"r5", 8}};
  std::map<std::string, int> per_family;
  for (const auto& name : cat.cpu_instance_names()) {
    const auto& c = cat.cpu_instance(name);
    INFO(name);
    ++per_family[c.family];
    CHECK(c.vcpus == vcpus_of_size(name));
    CHECK(c.cores * 2 == c.vcpus);
    CHECK(c.host_memory_bytes == gib_per_vcpu.at(c.family) * c.vcpus * kGiB);
    CHECK(c.network.bandwidth_bytes_per_s > 0);
    CHECK(c.burst_bandwidth_bytes_per_s >= c.network.bandwidth_bytes_per_s);
    CHECK(c.network.burstable == (c.burst_bandwidth_bytes_per_s > c.network.bandwidth_bytes_per_s));
  }
  for (const auto& [family, n] : gib_per_vcpu) CHECK(per_family[family] >= 6);
  CHECK(cat.cpu_instance("m5.large").network.bandwidth_bytes_per_s == Approx(0.75e9 / 8));
  CHECK(cat.cpu_instance("m5.large").burst_bandwidth_bytes_per_s == Approx(10e9 / 8));
}

TEST_CASE("hwprofiles: CPU prices are linear in vCPUs within a family and derived prices follow the rule",
          "[hwprofiles][cpu]") {
  const auto& cat = hw::Catalog::builtin();
  for (const auto& name : cat.cpu_instance_names()) {
    const auto& c = cat.cpu_instance(name);
    const auto& large = cat.cpu_instance(c.family + ".large");
    INFO(name);
    REQUIRE(c.prices.ec2_on_demand);
    CHECK(*c.prices.ec2_on_demand == Approx(*large.prices.ec2_on_demand * c.vcpus / 2).epsilon(1e-9));
    REQUIRE(c.prices.sagemaker_on_demand);
    if (c.prices.sagemaker_estimated)
      CHECK(*c.prices.sagemaker_on_demand == Approx(*c.prices.ec2_on_demand * *c.prices.sagemaker_uplift));
    else  // listed SageMaker prices are within a cent of 1.2 x EC2 per 2 vCPUs
      CHECK(*c.prices.sagemaker_on_demand == Approx(*c.prices.ec2_on_demand * 1.2).epsilon(0.01));
    REQUIRE(c.prices.spot);
    CHECK(c.prices.spot_estimated);
    CHECK(*c.prices.spot == Approx(*c.prices.ec2_on_demand * (1 - *c.prices.spot_discount)));
    CHECK(c.prices.region == "us-east-1");
  }
  CHECK(*cat.cpu_instance("ml.m5.large").prices.sagemaker_on_demand == 0.115);
}

TEST_CASE("hwprofiles: every CPU figure names a dated source of the catalog", "[hwprofiles][cpu]") {
  const auto& cat = hw::Catalog::builtin();
  for (const auto& name : cat.cpu_instance_names()) {
    const auto& c = cat.cpu_instance(name);
    for (const char* group : {"hardware", "network", "network_latency", "ec2_on_demand", "sagemaker", "spot"}) {
      INFO(name << " " << group);
      REQUIRE(c.sources.count(group));
      for (const auto& id : split(c.sources.at(group), '+')) CHECK(!cat.source(id).date.empty());
    }
  }
}

TEST_CASE("hwprofiles: GPU paths refuse a CPU instance by name, CPU lookups refuse a GPU one", "[hwprofiles][cpu]") {
  const auto& cat = hw::Catalog::builtin();
  REQUIRE_ERROR_CONTAINS(cat.instance("ml.m5.large"), "is a CPU instance (no GPU)");
  REQUIRE_ERROR_CONTAINS(hw::Cluster::build(cat.instance("m5.large"), 2, cat), "is a CPU instance");
  REQUIRE_ERROR_CONTAINS(cat.cpu_instance("p4d.24xlarge"), "is a GPU instance");
  REQUIRE_ERROR_CONTAINS(cat.cpu_instance("m5.larg"), "m5.large");
  CHECK(cat.find_cpu_instance("ml.c6i.32xlarge") == cat.find_cpu_instance("c6i.32xlarge"));
  CHECK(cat.find_instance("m5.large") == nullptr);
}

TEST_CASE("hwprofiles: a CPU family's errors name the file and pointer", "[hwprofiles][cpu]") {
  const std::string base = R"({"sources": {"s": {"description": "d", "date": "2026"}},
    "cpu_families": {"m5": {"threads_per_core": 2, "network_latency": "25us",
      "sources": {"hardware": "s", "network": "s", "network_latency": "s", "ec2_on_demand": "s"},
      "sizes": [SIZE]}}})";
  auto with = [&](const std::string& size) {
    std::string t = base;
    t.replace(t.find("SIZE"), 4, size);
    return hw::Catalog::from_texts({{"cpu.json", t}});
  };
  CHECK(with(R"({"name": "m5.large", "vcpus": 2, "memory": "8GiB", "network": "1Gbps", "ec2_on_demand": 0.1})")
            .cpu_instance("m5.large")
            .cores == 1);
  REQUIRE_ERROR_CONTAINS(with(R"({"name": "m5.large", "vcpus": 3, "memory": "8GiB", "network": "1Gbps"})"), "cpu.json: /cpu_families/m5/sizes/0/vcpus: 3 vCPUs are not whole cores");
  REQUIRE_ERROR_CONTAINS(with(R"({"name": "c5.large", "vcpus": 2, "memory": "8GiB", "network": "1Gbps"})"), "is not in family \"m5\"");
  REQUIRE_ERROR_CONTAINS(with(R"({"name": "m5.large", "vcpus": 2, "memory": "8GiB", "network": "1Gbps", "sagemaker_on_demand": 0.1})"), "no source for \"sagemaker\"");
  REQUIRE_ERROR_CONTAINS(with(R"({"name": "m5.large", "vcpus": 2, "memory": "8GiB", "network": "1Gbps", "network_burst": "0.5Gbps"})"), "below the baseline");
  REQUIRE_ERROR_CONTAINS(with(R"({"name": "m5.large", "vcpus": 2, "memory": "8GiB", "netwrk": "1Gbps"})"), "network");
}

TEST_CASE("hwprofiles: every CPU price names a dated source, and the unverified ones are reported", "[hwprofiles][cpu]") {
  const auto& cat = hw::Catalog::builtin();
  for (const auto& name : cat.cpu_instance_names()) {
    const auto& c = cat.cpu_instance(name);
    for (const char* group : {"ec2_on_demand", "sagemaker", "spot"}) {
      INFO(name << " " << group);
      REQUIRE(c.sources.count(group));
      bool all_verified = true;
      for (const auto& id : split(c.sources.at(group), '+')) {
        const auto& s = cat.source(id);
        CHECK(s.date.size() >= 4);
        CHECK(std::isdigit(static_cast<unsigned char>(s.date[0])));
        CHECK(!s.description.empty());
        all_verified = all_verified && s.verified;
      }
      if (!all_verified) {
        const bool spot = std::string(group) == "spot";
        if (spot || std::string(group) == "sagemaker") CHECK(!cat.unverified_price_sources(c, spot).empty());
      }
    }
  }
  // Recalled prices stay unverified until someone reads them on AWS's pages.
  const auto ids = cat.unverified_price_sources(cat.cpu_instance("m5.large"), false);
  CHECK(std::find(ids.begin(), ids.end(), "sagemaker_cpu_prices") != ids.end());
}

TEST_CASE("hwprofiles: unverified_price_sources follows derived prices to their factors", "[hwprofiles][cpu]") {
  auto catalog = [](bool ec2_ok, bool uplift_ok, bool spot_ok) {
    const std::string text = fmt::format(R"({{"sources": {{
        "ec2": {{"description": "d", "date": "2026", "verified": {}}},
        "up": {{"description": "d", "date": "2026", "verified": {}}},
        "sd": {{"description": "d", "date": "2026", "verified": {}}},
        "hw": {{"description": "d", "date": "2026"}}}},
      "cpu_families": {{"m5": {{"threads_per_core": 2, "network_latency": "25us", "sagemaker_uplift": 1.2, "spot_discount": 0.6,
        "sources": {{"hardware": "hw", "network": "hw", "network_latency": "hw", "ec2_on_demand": "ec2",
                    "sagemaker_uplift": "up", "spot_discount": "sd"}},
        "sizes": [{{"name": "m5.large", "vcpus": 2, "memory": "8GiB", "network": "1Gbps", "ec2_on_demand": 0.1}}]}}}}}})",
                                         ec2_ok, uplift_ok, spot_ok);
    return hw::Catalog::from_texts({{"cpu.json", text}});
  };
  {
    const auto cat = catalog(true, true, true);
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), false).empty());
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), true).empty());
  }
  {
    const auto cat = catalog(false, true, true);  // the EC2 price under both derived prices
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), false) == std::vector<std::string>{"ec2"});
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), true) == std::vector<std::string>{"ec2"});
  }
  {
    const auto cat = catalog(true, false, true);  // the SageMaker uplift: on-demand and managed spot
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), false) == std::vector<std::string>{"up"});
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), true) == std::vector<std::string>{"up"});
  }
  {
    const auto cat = catalog(true, true, false);  // the spot discount: managed spot only
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), false).empty());
    CHECK(cat.unverified_price_sources(cat.cpu_instance("m5.large"), true) == std::vector<std::string>{"sd"});
  }
}

TEST_CASE("hwprofiles: m5 and c5 sizes match the EC2 User Guide's hardware tables", "[hwprofiles][cpu]") {
  // Amazon EC2 User Guide, 'General purpose instances' / 'Compute optimized instances',
  // 'Hardware specifications' (source ec2_userguide_m5_c5): vCPUs, GiB.
  const std::map<std::string, std::pair<int, double>> table = {
      {"m5.large", {2, 8}},     {"m5.xlarge", {4, 16}},   {"m5.2xlarge", {8, 32}},  {"m5.4xlarge", {16, 64}},
      {"m5.12xlarge", {48, 192}}, {"m5.24xlarge", {96, 384}}, {"c5.large", {2, 4}},   {"c5.xlarge", {4, 8}},
      {"c5.2xlarge", {8, 16}},  {"c5.4xlarge", {16, 32}}, {"c5.9xlarge", {36, 72}}, {"c5.12xlarge", {48, 96}},
      {"c5.18xlarge", {72, 144}}, {"c5.24xlarge", {96, 192}}};
  const auto& cat = hw::Catalog::builtin();
  for (const auto& [name, spec] : table) {
    INFO(name);
    const auto& c = cat.cpu_instance(name);
    CHECK(c.vcpus == spec.first);
    CHECK(c.host_memory_bytes == spec.second * kGiB);
    CHECK(c.sources.at("hardware") == "ec2_userguide_m5_c5");
  }
  CHECK(cat.source("ec2_userguide_m5_c5").verified);
  for (const auto& name : cat.cpu_instance_names())
    if (cat.cpu_instance(name).family == "m5" || cat.cpu_instance(name).family == "c5") CHECK(table.count(name));
}
