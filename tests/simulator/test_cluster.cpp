// The simulator on real hw::Cluster topologies from the built-in catalog.
#include <numeric>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/hwprofiles/placement.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;
using trainplan::testing::build_hybrid;
using trainplan::testing::HybridSpec;
using trainplan::testing::ProgramBuilder;

namespace {

// Bus bandwidth of one ring all-reduce of `bytes` over GPUs `ranks` of `cluster` (the others idle).
double ring_allreduce_busbw(const hw::Cluster& cluster, std::vector<int> ranks, double bytes) {
  ProgramBuilder b(cluster.num_gpus());
  const int n = static_cast<int>(ranks.size());
  b.collective(b.group(std::move(ranks), plan::CommPurpose::dp), plan::CollectiveKind::all_reduce, bytes);
  sim::SimOptions opt;
  opt.dp_algorithm = plan::DpAlgorithm::ring;
  auto r = sim::simulate_step(b.program(), cluster, opt);
  return bytes / r.step_time_s * sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, n);
}

double ring_allreduce_busbw(const hw::Cluster& cluster, int n, double bytes) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ring_allreduce_busbw(cluster, std::move(ranks), bytes);
}

}  // namespace

TEST_CASE("simulator: ring all-reduce on p4d reaches NVSwitch and EFA line rates", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::InstanceType& p4d = cat.instance("p4d.24xlarge");
  const double gib = 1024.0 * 1024 * 1024;
  // One node: bus bandwidth approaches NCCL's share of the per-GPU NVSwitch bandwidth (12
  // NVLinks x 20 GB/s of 300 GB/s) for large messages.
  hw::Cluster one = hw::Cluster::build(p4d, 1, cat);
  const double nvs = p4d.topology.nvswitch_bandwidth_bytes_per_s * sim::nccl_nvlink_share("8.0", true);
  const double busbw1 = ring_allreduce_busbw(one, 8, gib);
  CHECK(busbw1 <= nvs);
  CHECK(busbw1 > 0.95 * nvs);
  // Two nodes: the ring's channels spread over all four EFA NICs; bus bandwidth approaches the
  // instance's network bandwidth (50 GB/s), not one NIC's quarter of it.
  hw::Cluster two = hw::Cluster::build(p4d, 2, cat);
  const double net = p4d.network.bandwidth_bytes_per_s;
  const double busbw2 = ring_allreduce_busbw(two, 16, gib);
  CHECK(busbw2 <= net * 1.0000001);
  CHECK(busbw2 > 0.9 * net);
}

TEST_CASE("simulator: symmetric and full fidelity agree on a p4d cluster", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  HybridSpec h;
  h.dp = 4;
  h.tp = 4;
  h.pp = 2;
  h.micro_batches = 4;
  hw::Cluster cluster = hw::Cluster::build(cat.instance("p4d.24xlarge"), h.dp * h.tp * h.pp / 8, cat);
  auto prog = build_hybrid(h);
  sim::SimOptions opt;
  auto full = sim::simulate_step(prog, cluster, opt);
  opt.fidelity = sim::Fidelity::symmetric;
  auto sym = sim::simulate_step(prog, cluster, opt);
  CHECK(sym.step_time_s == Approx(full.step_time_s).epsilon(1e-9));
  CHECK(sym.breakdown.exposed_comm_total_s() == Approx(full.breakdown.exposed_comm_total_s()).epsilon(1e-9));
  CHECK(sym.stats.ranks_simulated == h.tp * h.pp);
  CHECK(full.timeline.meta["gpu"] == "A100-SXM4-40GB");
}

TEST_CASE("simulator: ring all-reduce over 4 UltraServer instances reaches NVLink, across UltraServers EFA", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::InstanceType& p6e = cat.instance("p6e-gb200.36xlarge");
  const double gib = 1024.0 * 1024 * 1024;
  hw::Cluster c = hw::Cluster::build(p6e, 19, cat);  // UltraServer #0 (GPUs 0-71) and one instance of #1
  // tp x pp inside the 72-GPU domain: 16 GPUs on instances 14-17, one ring over NVLink; NVLS on
  // Blackwell behind NVSwitch moves the full link rate (nccl_nvlink_share = 1).
  std::vector<int> in_domain(16);
  std::iota(in_domain.begin(), in_domain.end(), 56);
  const double nvl = p6e.topology.nvswitch_bandwidth_bytes_per_s * sim::nccl_nvlink_share("10.0", true);
  const double busbw1 = ring_allreduce_busbw(c, in_domain, gib);
  CHECK(busbw1 <= nvl * 1.0000001);
  CHECK(busbw1 > 0.95 * nvl);
  // Instances 17 and 18 belong to two UltraServers: the ring crosses EFA (4 x 400 Gbps).
  std::vector<int> across(8);
  std::iota(across.begin(), across.end(), 68);
  const double net = p6e.network.bandwidth_bytes_per_s;
  const double busbw2 = ring_allreduce_busbw(c, across, gib);
  CHECK(busbw2 <= net * 1.0000001);
  CHECK(busbw2 > 0.9 * net);
}

TEST_CASE("simulator: a cluster topology's routes read once (route_scratch) are its kept routes, pair by pair", "[simulator]") {
  // The pattern builders read each pair once into a scratch vector: the same link ids as
  // route(), on 2-node clusters (searched routes), larger ones (translated templates), across
  // UltraServers and over two AZs, and with one scratch reused for every pair.
  const auto& cat = hw::Catalog::builtin();
  struct Case {
    std::string type;
    int count;
    int azs;
  };
  for (const Case& k : {Case{"p4d.24xlarge", 2, 1}, Case{"p5.48xlarge", 5, 1}, Case{"p3.16xlarge", 3, 1},
                        Case{"p6e-gb200.36xlarge", 20, 1}, Case{"p4d.24xlarge", 4, 2}}) {
    INFO(k.type << " x " << k.count << " over " << k.azs << " AZ");
    hw::Placement placement;
    placement.azs = k.azs;
    const hw::Cluster cluster = hw::Cluster::build(cat.instance(k.type), k.count, cat, placement);
    const sim::ClusterTopology topo(cluster);
    std::vector<int> scratch;
    size_t compared = 0;
    for (int a = 0; a < topo.num_gpus(); ++a)
      for (int b = 0; b < topo.num_gpus(); ++b) {
        const std::vector<int> once = topo.route_scratch(a, b, scratch);
        REQUIRE(once == topo.route(a, b));
        ++compared;
      }
    CHECK(compared == static_cast<size_t>(topo.num_gpus() * topo.num_gpus()));
  }
}
