// Bad catalog files: every error names the file, the JSON pointer, what is wrong and a hint.
#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;
using trainplan::testing::source_path;

namespace {

// A small valid family file; each test breaks one thing in it.
const char* kFamily = R"({
 "order": 1,
 "defaults": {
  "family": "x1",
  "gpu": "A100-SXM4-40GB",
  "topology": {"kind": "nvswitch", "nvswitch_bandwidth": "300GBps", "nvlink_latency": "0.5us",
               "pcie_bandwidth": "24GBps", "pcie_latency": "1us"},
  "network": {"bandwidth": "400Gbps", "nics": 4, "efa": true, "latency": "15us", "fabric": "EFA"},
  "sources": {"hardware": "p4d_blog", "topology": "p4d_blog", "pcie": "estimate_pcie", "network": "p4d_blog",
              "efa": "p4d_blog", "network_latency": "estimate_latency", "storage": "p4d_blog"}
 },
 "instances": [
  {"name": "x1.big", "gpu_count": 8, "vcpus": 96, "host_memory": "1152GiB",
   "prices": {"ec2_on_demand": 20.0}, "sources": {"ec2_on_demand": "price_list_2026"}}
 ]
})";

const char* kFamilyFile = "test/x1.json";

std::string catalog_text(const std::string& name) {
  return json::read_text_file(source_path("hwprofiles/catalog/" + name));
}

hw::Catalog load(const std::string& family_text, const std::string& sources_text = catalog_text("sources.json")) {
  return hw::Catalog::from_texts({{"sources.json", sources_text},
                                  {"gpus.json", catalog_text("gpus.json")},
                                  {kFamilyFile, family_text}});
}

// kFamily with the value at `pointer` replaced (or added).
std::string with(const std::string& pointer, const json::Json& value) {
  json::Json doc = json::Json::parse(kFamily);
  doc[json::Json::json_pointer(pointer)] = value;
  return doc.dump();
}

// kFamily without the field at `pointer`.
std::string without(const std::string& pointer) {
  json::Json doc = json::Json::parse(kFamily);
  json::Json::json_pointer p(pointer);
  doc[p.parent_pointer()].erase(p.back());
  return doc.dump();
}

}  // namespace

TEST_CASE("hwprofiles: the small test family loads (the error cases below start from it)", "[hwprofiles][errors]") {
  hw::Catalog c = load(kFamily);
  const auto& x = c.instance("x1.big");
  CHECK(x.gpu_count == 8);
  CHECK(x.network.nic_bandwidth_bytes_per_s() == Approx(12.5e9));
  CHECK(*x.prices.ec2_on_demand == Approx(20.0));
  CHECK(x.file == kFamilyFile);
}

TEST_CASE("hwprofiles: a wrong type gives the full file: pointer: what — hint message", "[hwprofiles][errors]") {
  try {
    load(with("/instances/0/gpu_count", "8"));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "test/x1.json: /instances/0/gpu_count: must be an integer, got a string (\"8\") \xE2\x80\x94 "
          "write a whole number without quotes");
  }
}

TEST_CASE("hwprofiles: bad catalog values are errors at their JSON pointer", "[hwprofiles][errors]") {
  struct Case {
    const char* pointer;
    json::Json value;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"/instances/0/vcpus", -4, "test/x1.json: /instances/0/vcpus: must be a positive integer, got -4"},
      {"/instances/0/vcpus", 0, "/instances/0/vcpus: must be a positive integer, got 0"},
      {"/instances/0/host_memory", "0GiB", "/instances/0/host_memory: must be positive"},
      {"/defaults/network/bandwidth", "-100Gbps", "/defaults/network/bandwidth: must not be negative"},
      {"/defaults/network/bandwidth", "100Gbx", "/defaults/network/bandwidth: unknown unit \"Gbx\""},
      {"/defaults/network/latency", "15 parsecs", "/defaults/network/latency: unknown unit \"parsecs\""},
      {"/defaults/topology/nvswitch_bandwidth", 0, "/defaults/topology/nvswitch_bandwidth: must be positive"},
      {"/instances/0/gpu", "A100-SXM4-40G",
       "/instances/0/gpu: unknown GPU \"A100-SXM4-40G\" \xE2\x80\x94 did you mean \"A100-SXM4-40GB\"?"},
      {"/defaults/topology/kind", "nvswich", "/defaults/topology/kind: unknown value \"nvswich\" \xE2\x80\x94 did you mean \"nvswitch\"?"},
      {"/instances/0/sources/hardware", "p4d_blg",
       "/instances/0/sources/hardware: unknown source id \"p4d_blg\" \xE2\x80\x94 did you mean \"p4d_blog\"?"},
      {"/instances/0/sources/hardware", "p4d_blog+nope", "/instances/0/sources/hardware: unknown source id \"nope\""},
      {"/instances/0/prices/ec2_on_demand", -3, "/instances/0/prices/ec2_on_demand: must be positive, got -3"},
      {"/instances/0/prices/ec2_on_demand", "20", "/instances/0/prices/ec2_on_demand: must be a number"},
      {"/instances/0/prices/interruption_bucket", "5-15%", "/instances/0/prices/interruption_bucket: unknown value \"5-15%\""},
      {"/instances/0/prices/spot_discount", "140%", "/instances/0/prices/spot_discount: must be a fraction between 0 and 1"},
      {"/instances/0/network", "fast", "/instances/0/network: must be an object"},
      {"/defaults/network/nics", 3, "/instances/0/network/nics: 3 NICs cannot be shared evenly by 8 GPUs"},
      {"/instances/0/vcpuz", 96, "/instances/0/vcpuz: unknown field \"vcpuz\" \xE2\x80\x94 did you mean \"vcpus\"?"},
      {"/defaults/topology/nvswitch_bandwith", "300GBps", "/defaults/topology/nvswitch_bandwith: unknown field"},
      {"/instances/0/topology/nvlink_lanes", json::Json::array(), "/instances/0/topology/nvlink_lanes: \"nvlink_lanes\" does not apply here"},
      {"/instances/0/sources/spot", "skypilot_v7",
       "/instances/0/sources/spot: names a source for \"spot\" but the instance has no such value"},
      {"/instances/0/sources/speed", "p4d_blog", "/instances/0/sources/speed: unknown field \"speed\""},
      {"/instances/0/gpu_count", 1, "/instances/0/topology/kind: an instance with 1 GPU has kind \"single\""},
      {"/instances/0/family", "x2", "/instances/0/family: AWS instance \"x1.big\" is not in family \"x2\""},
      {"/instances/0/aws", false, "/instances/0/prices/ec2_on_demand: a generic (non-AWS) cluster has no AWS prices"},
      {"/defaults/network/nccl_net_latency", "1s", "/defaults/network/nccl_net_latency: must be a duration from 0 to 10 ms"},
      {"/defaults/network/nccl_net_latency", "75us", "/instances/0/sources: no source for \"nccl_net_latency\""},
      {"/defaults/network/nccl_simple_only", false, "/instances/0/sources: no source for \"nccl_protocols\""},
      {"/defaults/network/nccl_simple_only", "no", "/defaults/network/nccl_simple_only: must be"},
  };
  for (const auto& c : cases) {
    INFO(c.pointer << " = " << c.value.dump());
    REQUIRE_ERROR_CONTAINS(load(with(c.pointer, c.value)), c.expected);
  }
}

TEST_CASE("hwprofiles: missing fields and sources are errors naming where to add them", "[hwprofiles][errors]") {
  REQUIRE_ERROR_CONTAINS(load(without("/instances/0/vcpus")), "test/x1.json: /instances/0: missing required field \"vcpus\"");
  REQUIRE_ERROR_CONTAINS(load(without("/instances/0/sources/ec2_on_demand")),
                         "/instances/0/sources: no source for \"ec2_on_demand\"");
  REQUIRE_ERROR_CONTAINS(load(without("/defaults/sources/pcie")), "/instances/0/sources: no source for \"pcie\"");
  REQUIRE_ERROR_CONTAINS(load(without("/defaults/topology/nvswitch_bandwidth")),
                         "/instances/0/topology: missing required field \"nvswitch_bandwidth\"");
}

TEST_CASE("hwprofiles: NCCL's protocols and the plugin's latency on EFA: defaults, sources, and no Simple-only without EFA",
          "[hwprofiles][errors]") {
  // EFA without a stated protocol set: aws-ofi-nccl's NCCL_PROTO=simple; no plugin latency.
  const hw::Catalog plain = load(kFamily);
  CHECK(plain.instance("x1.big").network.nccl_simple_only);
  CHECK(plain.instance("x1.big").network.nccl_net_latency_s == 0.0);
  // Stated with their sources.
  json::Json doc = json::Json::parse(kFamily);
  doc["defaults"]["network"]["nccl_net_latency"] = "75us";
  doc["defaults"]["network"]["nccl_simple_only"] = false;
  doc["defaults"]["sources"]["nccl_net_latency"] = "aws_ofi_nccl_net_latency";
  doc["defaults"]["sources"]["nccl_protocols"] = "aws_ofi_nccl_protocols";
  const hw::Catalog stated = load(doc.dump());
  CHECK_FALSE(stated.instance("x1.big").network.nccl_simple_only);
  CHECK(stated.instance("x1.big").network.nccl_net_latency_s == Approx(75e-6));
  // Simple-only is the EFA plugin's: stated on a network without EFA it is an error.
  json::Json ib = json::Json::parse(kFamily);
  ib["defaults"]["network"]["efa"] = false;
  ib["defaults"]["network"]["nccl_simple_only"] = true;
  REQUIRE_ERROR_CONTAINS(load(ib.dump()), "nccl_simple_only: is true on a network without EFA");
}

TEST_CASE("hwprofiles: a truncated catalog file is a JSON error naming the file", "[hwprofiles][errors]") {
  std::string text = kFamily;
  REQUIRE_ERROR_CONTAINS(load(text.substr(0, text.size() / 2)), "test/x1.json: invalid JSON at line");
  REQUIRE_ERROR_CONTAINS(load(text.substr(0, text.size() / 2)), "truncated");
}

TEST_CASE("hwprofiles: an asymmetric NVLink matrix is rejected at the offending cell", "[hwprofiles][errors]") {
  json::Json doc = json::Json::parse(kFamily);
  doc["instances"][0]["gpu_count"] = 2;
  doc["instances"][0]["topology"] = {{"kind", "nvlink_mesh"}, {"nvlink_lanes", {{0, 2}, {1, 0}}},
                                     {"nvlink_lane_bandwidth", "25GBps"}};
  doc["defaults"]["network"]["nics"] = 1;
  doc["defaults"]["topology"].erase("nvswitch_bandwidth");
  REQUIRE_ERROR_CONTAINS(load(doc.dump()), "test/x1.json: /instances/0/topology/nvlink_lanes/0/1: not symmetric");
  doc["instances"][0]["topology"]["nvlink_lanes"] = {{0, 2}, {2, 0}, {1, 1}};
  REQUIRE_ERROR_CONTAINS(load(doc.dump()), "/instances/0/topology/nvlink_lanes: must have 2 rows");
  doc["instances"][0]["topology"]["nvlink_lanes"] = {{0, 2}, {2, 0}};
  CHECK(load(doc.dump()).instance("x1.big").topology.nvlink_lanes[1][0] == 2);
}

TEST_CASE("hwprofiles: every source needs a date, a bad date or duplicate is an error", "[hwprofiles][errors]") {
  json::Json sources = json::Json::parse(catalog_text("sources.json"));
  json::Json undated = sources;
  undated["sources"]["p4d_blog"].erase("date");
  REQUIRE_ERROR_CONTAINS(load(kFamily, undated.dump()), "sources.json: /sources/p4d_blog: missing required field \"date\"");
  json::Json bad_date = sources;
  bad_date["sources"]["p4d_blog"]["date"] = "Nov 2020";
  REQUIRE_ERROR_CONTAINS(load(kFamily, bad_date.dump()), "/sources/p4d_blog/date: \"Nov 2020\" is not a date");
  // The same family twice defines x1.big twice.
  REQUIRE_ERROR_CONTAINS(hw::Catalog::from_texts({{"sources.json", catalog_text("sources.json")},
                                                  {"gpus.json", catalog_text("gpus.json")},
                                                  {"a.json", kFamily},
                                                  {"b.json", kFamily}}),
                         "instance \"x1.big\" is defined twice");
}
