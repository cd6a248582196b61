// Placement over Availability Zones: the catalog's facts, the split of instances into AZ blocks,
// the inter-AZ links and routes of a cluster, and the data-transfer prices.
#include <set>

#include "test_support.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/hwprofiles/placement.hpp"

using namespace trainplan;

namespace {

const hw::Catalog& builtin_catalog() { return hw::Catalog::builtin(); }

hw::Cluster zoned(const std::string& type, int count, int azs) {
  hw::Placement p;
  p.azs = azs;
  return hw::Cluster::build(builtin_catalog().instance(type), count, builtin_catalog(), p);
}

// The kinds of the links a route uses.
std::set<hw::LinkKind> kinds(const hw::Cluster& c, int a, int b) {
  std::set<hw::LinkKind> out;
  for (int id : c.route(a, b).links) out.insert(c.links()[static_cast<size_t>(id)].kind);
  return out;
}

}  // namespace

TEST_CASE("hwprofiles: instances split over AZs in contiguous blocks, larger blocks first", "[hwprofiles]") {
  CHECK(hw::az_of_nodes(4, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(hw::az_of_nodes(4, 2) == std::vector<int>{0, 0, 1, 1});
  CHECK(hw::az_of_nodes(5, 2) == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(hw::az_of_nodes(7, 3) == std::vector<int>{0, 0, 0, 1, 1, 2, 2});
  CHECK(hw::az_of_nodes(3, 3) == std::vector<int>{0, 1, 2});
}

TEST_CASE("hwprofiles: the catalog's placement facts are the documented ones, each with a source", "[hwprofiles]") {
  const hw::PlacementFacts& f = builtin_catalog().placement();
  REQUIRE(f.present());
  CHECK(f.single_flow_bandwidth_bytes_per_s == Approx(5e9 / 8));  // EC2: 5 Gbps per flow outside a cluster placement group
  CHECK(f.nccl_socket_flows == 2 * 8);                            // NCCL on an AWS NIC: 2 threads x 8 sockets
  CHECK(f.inter_az_latency_s == Approx(0.5e-3));
  CHECK(f.inter_az_usd_per_gb == Approx(0.01));
  CHECK(f.sources.size() == 5);
  for (const auto& [fact, ids] : f.sources)
    for (const auto& id : split(ids, '+')) {
      INFO(fact << ": " << id);
      CHECK(builtin_catalog().sources().count(id) == 1);
    }
  for (const auto& p : f.inter_region)
    for (const auto& id : split(p.source, '+')) CHECK(builtin_catalog().sources().count(id) == 1);
  // Between AZs a p4d gets one NCCL socket connection's 16 x 5 Gbit/s = 10 GB/s, less than its
  // 400 Gbit/s; an instance slower than 80 Gbit/s keeps its own bandwidth.
  CHECK(hw::inter_az_bandwidth_bytes_per_s(builtin_catalog().instance("p4d.24xlarge"), f) == Approx(10e9));
  const hw::InstanceType& g5 = builtin_catalog().instance("g5.12xlarge");
  CHECK(hw::inter_az_bandwidth_bytes_per_s(g5, f) == Approx(std::min(g5.network.bandwidth_bytes_per_s, 10e9)));
}

TEST_CASE("hwprofiles: inter-region transfer is priced by the source region", "[hwprofiles]") {
  const hw::PlacementFacts& f = builtin_catalog().placement();
  CHECK(hw::inter_region_usd_per_gb(f, "us-east-1", "us-east-1") == 0.0);
  CHECK(hw::inter_region_usd_per_gb(f, "us-east-1", "us-east-2") == Approx(0.01));
  CHECK(hw::inter_region_usd_per_gb(f, "us-east-2", "us-east-1") == Approx(0.01));
  CHECK(hw::inter_region_usd_per_gb(f, "us-east-1", "eu-west-1") == Approx(0.02));
  CHECK(hw::inter_region_usd_per_gb(f, "eu-west-1", "us-east-1") == Approx(0.02));
  CHECK(hw::inter_region_usd_per_gb(f, "us-west-2", "us-east-1") == Approx(0.02));
  CHECK(hw::inter_region_usd_per_gb(f, "ap-northeast-1", "us-east-1") == Approx(0.09));
  CHECK_THROWS_WITH(hw::inter_region_usd_per_gb(f, "mars-north-1", "us-east-1"),
                    Catch::Contains("mars-north-1") && Catch::Contains("known regions: us-east-1"));
  // 1 TB between AZs: 1000 GB x $0.01 leaving one AZ + $0.01 entering the other.
  CHECK(hw::inter_az_transfer_usd(1e12, f) == Approx(20.0));
}

TEST_CASE("hwprofiles: one AZ has no inter-AZ links, two AZs route over ENA at the inter-AZ bandwidth and latency", "[hwprofiles]") {
  const hw::InstanceType& p4d = builtin_catalog().instance("p4d.24xlarge");
  const hw::Cluster one = hw::Cluster::build(p4d, 2, builtin_catalog());
  CHECK(one.placement().azs == 1);
  for (const auto& l : one.links()) CHECK(l.kind != hw::LinkKind::inter_az);
  CHECK(kinds(one, 0, 8).count(hw::LinkKind::network) == 1);

  const hw::Cluster two = zoned("p4d.24xlarge", 2, 2);
  CHECK(two.az_of_node(0) == 0);
  CHECK(two.az_of_node(1) == 1);
  const hw::Route& r = two.route(0, 8);
  CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(10e9));
  CHECK(kinds(two, 0, 8).count(hw::LinkKind::inter_az) == 1);
  CHECK(kinds(two, 0, 8).count(hw::LinkKind::network) == 0);  // EFA does not cross AZs
  // Latency: the two inter-AZ links carry the catalog's one-way inter-AZ latency between them.
  double inter_az = 0;
  for (int id : r.links)
    if (two.links()[static_cast<size_t>(id)].kind == hw::LinkKind::inter_az) inter_az += two.links()[static_cast<size_t>(id)].latency_s;
  CHECK(inter_az == Approx(0.5e-3));
  CHECK(r.latency_s > inter_az);
  // Inside one node nothing changes.
  CHECK(two.route(0, 5).bottleneck_bandwidth_bytes_per_s == one.route(0, 5).bottleneck_bandwidth_bytes_per_s);
  CHECK(two.route(0, 5).links == one.route(0, 5).links);
}

TEST_CASE("hwprofiles: four instances over two AZs: EFA inside each AZ, ENA between them (translated routes)", "[hwprofiles]") {
  const hw::Cluster c = zoned("p4d.24xlarge", 4, 2);
  const hw::Cluster pair = zoned("p4d.24xlarge", 2, 2);
  CHECK(c.az_of_gpu(8) == 0);
  CHECK(c.az_of_gpu(16) == 1);
  for (auto [a, b] : {std::pair{0, 8}, std::pair{16, 24}, std::pair{27, 19}}) {
    INFO(a << " -> " << b);
    CHECK(kinds(c, a, b).count(hw::LinkKind::network) == 1);
    CHECK(kinds(c, a, b).count(hw::LinkKind::inter_az) == 0);
    CHECK(c.route(a, b).bottleneck_bandwidth_bytes_per_s == Approx(12.5e9));  // one 100 Gbit/s EFA NIC
  }
  for (auto [a, b] : {std::pair{8, 16}, std::pair{24, 0}, std::pair{3, 30}}) {
    INFO(a << " -> " << b);
    CHECK(kinds(c, a, b).count(hw::LinkKind::inter_az) == 1);
    CHECK(kinds(c, a, b).count(hw::LinkKind::network) == 0);
    CHECK(c.route(a, b).bottleneck_bandwidth_bytes_per_s == Approx(10e9));
    CHECK(c.route(a, b).latency_s == Approx(pair.route(a % 8, 8 + b % 8).latency_s));
    CHECK(c.route(a, b).hops == pair.route(a % 8, 8 + b % 8).hops);
    // The route ends at b and its links chain.
    const auto& links = c.route(a, b).links;
    CHECK(c.links()[static_cast<size_t>(links.back())].dst == c.gpu_vertex(b));
    for (size_t i = 1; i < links.size(); ++i)
      CHECK(c.links()[static_cast<size_t>(links[i])].src == c.links()[static_cast<size_t>(links[i - 1])].dst);
  }
}

TEST_CASE("hwprofiles: an impossible placement is an Error with a hint", "[hwprofiles]") {
  CHECK_THROWS_WITH(zoned("p4d.24xlarge", 2, 3), Catch::Contains("cannot place 2 instances in 3 Availability Zones"));
  CHECK_THROWS_WITH(zoned("p4d.24xlarge", 8, 7), Catch::Contains("use 1 to 6 AZs"));
  CHECK_THROWS_WITH(zoned("p6e-gb200.36xlarge", 36, 2), Catch::Contains("lie in one AZ"));
}
