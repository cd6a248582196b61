// NCCL's latency and protocol model on catalog clusters, against closed forms of NCCL's tuning
// model (src/graph/tuning.cc: base latency + per-step latency by link class, protocol shares).
#include <numeric>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;
using trainplan::testing::ProgramBuilder;

namespace {

std::vector<int> first_gpus(int n) {
  std::vector<int> g(static_cast<size_t>(n));
  std::iota(g.begin(), g.end(), 0);
  return g;
}

sim::CommPattern pattern(const hw::Cluster& cluster, plan::CollectiveKind kind, sim::CollectiveAlgorithm a, int n) {
  const sim::ClusterTopology topo(cluster);
  return sim::build_pattern(kind, a, {topo.ring_order(first_gpus(n))}, topo);
}

constexpr double kUs = 1e-6;

}  // namespace

TEST_CASE("simulator: NCCL ring latencies on one NVSwitch node follow tuning.cc", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster one = hw::Cluster::build(cat.instance("dgx-a100-80gb"), 1, cat);
  const auto p = pattern(one, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 8);
  REQUIRE(p.nccl);
  // 2(n-1) = 14 NVLink steps: base + 14 x per-step latency, per protocol.
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::ll, 1e3) == Approx((6.6 + 14 * 0.6) * kUs));
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::ll128, 1e3) == Approx((14.0 + 14 * 1.9) * kUs));
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::simple, 1e3) == Approx((8.4 + 14 * 3.4) * kUs));
  // LL moves half the bandwidth but at most 87.7 GB/s of bus bandwidth on one Ampere node (the
  // ring's 240 GB/s: a share of 87.7/240); LL128 0.92 (120 of 128 bytes); Simple all of it.
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll, 1e3) == Approx(87.7 / 240.0));
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll128, 1e3) == Approx(0.92));
  CHECK(p.bandwidth_share(sim::NcclProtocol::simple, 1e3) == Approx(1.0));
  // Small messages take LL, large ones Simple; the time is the chosen protocol's.
  CHECK(p.protocol_for(4096) == sim::NcclProtocol::ll);
  CHECK(p.protocol_for(1 << 30) == sim::NcclProtocol::simple);
  CHECK(p.uncontended_time_s(4096) == Approx(p.uncontended_time_s(4096, sim::NcclProtocol::ll)));
  // All-gather: n-1 steps.
  const auto ag = pattern(one, plan::CollectiveKind::all_gather, sim::CollectiveAlgorithm::ring, 8);
  CHECK(ag.phase_latency_s(0, sim::NcclProtocol::simple, 1e3) == Approx((8.4 + 7 * 3.4) * kUs));
}

TEST_CASE("simulator: NCCL ring across nodes pays network steps and the ring plateau", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  // DGX A100 (InfiniBand, AMD hosts): 2 us network-post overhead per step, x3 for Simple.
  const hw::Cluster two = hw::Cluster::build(cat.instance("dgx-a100-80gb"), 2, cat);
  const auto p = pattern(two, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 16);
  REQUIRE(p.nccl);
  // 30 steps, 2(nodes-1) = 2 of them over the network (14 us each for Simple); an intra-node
  // Simple step costs max(3.4, 3 x 2) us.
  const double simple = (8.4 + 28 * 6.0 + 2 * 14.0) * kUs;
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::simple, 1e3) == Approx(simple));
  // Plateau (sm_80): Simple all-reduce latency x 1.4 once each rank's channel share reaches
  // 64 bytes: 16 ranks x 8 channels x 64 B = 8 KiB.
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::simple, 8192) == Approx(1.4 * simple));
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::ll, 1e3) == Approx((6.6 + 28 * 2.0 + 2 * 2.7) * kUs));
  // Tree: 2 x ((ppn - 1) x NVLink + log2(nodes) x network) of the tree's step latencies.
  const auto tree = pattern(two, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::tree, 16);
  REQUIRE(tree.nccl);
  CHECK(tree.phase_latency_s(0, sim::NcclProtocol::ll, 1e3) == Approx((6.8 + 2 * (7 * 0.6 + 1 * 5.0)) * kUs));
  CHECK(tree.bandwidth_share(sim::NcclProtocol::simple, 1 << 30) == Approx(0.92));
}

TEST_CASE("simulator: on EFA NCCL runs Simple only where aws-ofi-nccl forces it, and every network step pays the plugin's latency",
          "[simulator]") {
  // aws-ofi-nccl sets NCCL_PROTO=simple on p4d (EFA v1 keeps no 128-byte write order); on p5
  // with the RDMA protocol it leaves LL and LL128 on (aws-ofi-nccl#280).
  const auto& cat = hw::Catalog::builtin();
  REQUIRE(cat.instance("p4d.24xlarge").network.nccl_simple_only);
  REQUIRE_FALSE(cat.instance("p5.48xlarge").network.nccl_simple_only);
  const hw::Cluster p4d = hw::Cluster::build(cat.instance("p4d.24xlarge"), 1, cat);
  const auto p = pattern(p4d, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 8);
  REQUIRE(p.nccl);
  CHECK(p.protocol_for(4096) == sim::NcclProtocol::simple);
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll, 4096) == 0.0);
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll128, 4096) == 0.0);
  // The latency the plugin reports to NCCL (aws-ofi-nccl platform table: 75 us on p4d and p5)
  // joins every network step of NCCL's model, twice under Simple (the flush); none inside a node.
  const double plugin = 75.0;
  REQUIRE(cat.instance("p5.48xlarge").network.nccl_net_latency_s == Approx(plugin * kUs));
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::simple, 1e3) == Approx((8.4 + 14 * 3.4) * kUs));
  // p5 (AMD hosts), 2 nodes, all-gather: 15 steps, 1 over the network; an intra-node step
  // across nodes costs the network post, 2 us (x 3 for Simple).
  const hw::Cluster p5 = hw::Cluster::build(cat.instance("p5.48xlarge"), 2, cat);
  const auto q = pattern(p5, plan::CollectiveKind::all_gather, sim::CollectiveAlgorithm::ring, 16);
  REQUIRE(q.nccl);
  CHECK(q.phase_latency_s(0, sim::NcclProtocol::simple, 1e3) == Approx((8.4 + 14 * 6.0 + 1 * (14.0 + 2 * plugin)) * kUs));
  CHECK(q.phase_latency_s(0, sim::NcclProtocol::ll128, 1e3) == Approx((14.0 + 14 * 2.0 + 1 * (4.0 + plugin)) * kUs));
  CHECK(q.phase_latency_s(0, sim::NcclProtocol::ll, 1e3) == Approx((6.6 + 14 * 2.0 + 1 * (2.7 + plugin)) * kUs));
  CHECK(q.bandwidth_share(sim::NcclProtocol::ll128, 1 << 30) == Approx(0.92));
  // A small message runs LL (lowest latency), a large one Simple.
  CHECK(q.protocol_for(1e3) == sim::NcclProtocol::ll);
  CHECK(q.protocol_for(8.0 * (1 << 30)) == sim::NcclProtocol::simple);
  // InfiniBand (NCCL's own transport) reports no latency: DGX H100's steps keep the table's
  // (Intel hosts: an intra-node LL128 step stays at its 1.9 us, above the 1 us network post).
  const hw::Cluster dgx = hw::Cluster::build(cat.instance("dgx-h100"), 2, cat);
  REQUIRE(cat.instance("dgx-h100").network.nccl_net_latency_s == 0.0);
  const auto d = pattern(dgx, plan::CollectiveKind::all_gather, sim::CollectiveAlgorithm::ring, 16);
  REQUIRE(d.nccl);
  CHECK(d.phase_latency_s(0, sim::NcclProtocol::ll128, 1e3) == Approx((14.0 + 14 * 1.9 + 1 * 4.0) * kUs));
}

TEST_CASE("simulator: NVLink carries NCCL's per-link rate, NVSwitch Hoppers the full rate", "[simulator]") {
  CHECK(sim::nccl_nvlink_share("7.0", false) == Approx(0.8));
  CHECK(sim::nccl_nvlink_share("8.0", true) == Approx(0.8));
  CHECK(sim::nccl_nvlink_share("9.0", false) == Approx(20.6 / 25.0));
  CHECK(sim::nccl_nvlink_share("9.0", true) == 1.0);
  CHECK(sim::nccl_nvlink_share("10.0", false) == Approx(40.1 / 50.0));
  // On one p4d (NVSwitch, 300 GB/s per GPU and direction), a 1 GiB ring all-reduce reaches
  // NCCL's 12 links x 20 GB/s = 240 GB/s of bus bandwidth, less its latency.
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster one = hw::Cluster::build(cat.instance("p4d.24xlarge"), 1, cat);
  const double bytes = 1024.0 * 1024 * 1024;
  ProgramBuilder b(8);
  b.collective(b.group(first_gpus(8), plan::CommPurpose::dp), plan::CollectiveKind::all_reduce, bytes);
  sim::SimOptions opt;
  opt.dp_algorithm = plan::DpAlgorithm::ring;
  const auto r = sim::simulate_step(b.program(), one, opt);
  const double busbw = bytes / r.step_time_s * sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, 8);
  const double nvs = cat.instance("p4d.24xlarge").topology.nvswitch_bandwidth_bytes_per_s;
  CHECK(busbw <= 0.8 * nvs);
  CHECK(busbw > 0.78 * nvs);
}

TEST_CASE("simulator: hand-built topologies keep the per-hop latency model", "[simulator]") {
  const auto topo = sim::make_switch_topology(8, 300e9, 1e-6);
  const auto p = sim::build_pattern(plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, {first_gpus(8)}, topo);
  CHECK_FALSE(p.nccl);
  CHECK(p.protocol_for(1e3) == sim::NcclProtocol::simple);
  // Closed form: 2(n-1)/n S / B + 2(n-1) x 2 hops x 1 us.
  CHECK(p.uncontended_time_s(64e6) == Approx(2.0 * 7 / 8 * 64e6 / 300e9 + 14 * 2e-6));
}

namespace {

// busbw of one uncontended all-reduce of `bytes` over the first n GPUs of `cluster`, the
// algorithm as the simulator's automatic choice (NCCL's tuner) picks it.
double automatic_busbw(const hw::Cluster& cluster, int n, double bytes) {
  ProgramBuilder b(n);
  b.collective(b.group(first_gpus(n), plan::CommPurpose::none), plan::CollectiveKind::all_reduce, bytes);
  sim::SimOptions opt;
  opt.other_algorithm = sim::CollectiveAlgorithm::automatic;
  const auto r = sim::simulate_step(b.program(), cluster, opt);
  return bytes / r.step_time_s * sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, n);
}

}  // namespace

TEST_CASE("simulator: NVLSTree on two p5 nodes: one pipelined coflow, NVLink-bound, beyond the NICs", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster two = hw::Cluster::build(cat.instance("p5.48xlarge"), 2, cat);
  const auto p = pattern(two, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::nvls_tree, 16);
  REQUIRE(p.algorithm == sim::CollectiveAlgorithm::nvls_tree);
  REQUIRE(p.nccl);
  REQUIRE(p.phases.size() == 1);
  // k = 8 heads per node, S/(2k) per flow.
  CHECK(p.phases[0].bytes_factor == Approx(1.0 / 16));
  // Each GPU's NVSwitch port carries 4 x 7 flows (2(k-1)/k x S, the single-node all-reduce at
  // the NVLS link rate); each GPU's NIC (p5: 4 x 100G = 50 GB/s per GPU) 2 (tree 0 up, tree 1
  // down). NVLink binds: rate = 450 GB/s / 28.
  CHECK(p.phases[0].uncontended_rate_bytes_per_s == Approx(450e9 / 28));
  // Closed form: busbw = 2(n-1)/n x k/(2(k-1)) x B_nvlink = 1.875 x 8/14 x 450 = 482 GB/s, above
  // the 400 GB/s of the node's NICs (what a ring across nodes can reach): NCCL's NVLSTree "can
  // go beyond the network bottleneck" on two nodes (NVIDIA/nccl-tests#196).
  const double s = 8.0 * (1 << 30);
  const double busbw_bound = 2.0 * 15 / 16 * 8.0 / 14 * 450e9;
  const double t_data = p.uncontended_time_s(s) - p.phase_latency_s(0, sim::NcclProtocol::simple, s);
  CHECK(s / t_data * 2.0 * 15 / 16 == Approx(busbw_bound));
  CHECK(busbw_bound > 400e9);
  // NCCL's NVLSTree latency (tuning.cc, Simple only): 25 us in the node + 2 log2(nodes) network
  // steps of 14 us plus twice the plugin's 75 us (aws-ofi-nccl on p5).
  CHECK(p.phase_latency_s(0, sim::NcclProtocol::simple, s) == Approx((25.0 + 2 * (14.0 + 150.0)) * kUs));
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll, s) == 0.0);
  CHECK(p.bandwidth_share(sim::NcclProtocol::ll128, s) == 0.0);
  CHECK(p.protocol_for(1e3) == sim::NcclProtocol::simple);
  // 4 nodes: two tree levels, 2 x 2 x (14 + 150) us.
  const hw::Cluster four = hw::Cluster::build(cat.instance("p5.48xlarge"), 4, cat);
  const auto q = pattern(four, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::nvls_tree, 32);
  CHECK(q.phase_latency_s(0, sim::NcclProtocol::simple, s) == Approx((25.0 + 2 * 2 * (14.0 + 150.0)) * kUs));
}

TEST_CASE("simulator: NVLSTree only where NCCL runs it: all-reduce across NVSwitch-3 nodes", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  auto effective = [&](const char* inst, int nodes, plan::CollectiveKind kind) {
    const hw::Cluster c = hw::Cluster::build(cat.instance(inst), nodes, cat);
    const sim::ClusterTopology topo(c);
    const int n = nodes * c.gpus_per_node();
    return sim::effective_algorithm(kind, sim::CollectiveAlgorithm::nvls_tree, topo.ring_order(first_gpus(n)), topo);
  };
  using A = sim::CollectiveAlgorithm;
  using K = plan::CollectiveKind;
  CHECK(effective("p5.48xlarge", 2, K::all_reduce) == A::nvls_tree);
  CHECK(effective("dgx-h100", 4, K::all_reduce) == A::nvls_tree);
  CHECK(effective("p5.48xlarge", 1, K::all_reduce) == A::ring);   // disabled on one node
  CHECK(effective("p5.48xlarge", 2, K::all_gather) == A::ring);   // all-reduce only
  CHECK(effective("p4d.24xlarge", 2, K::all_reduce) == A::ring);  // A100: no NVLink SHARP
  CHECK(effective("p3dn.24xlarge", 2, K::all_reduce) == A::ring);
  // automatic's candidates: NVLSTree wherever NCCL runs it.
  auto candidates = [&](const char* inst, int nodes) {
    const hw::Cluster c = hw::Cluster::build(cat.instance(inst), nodes, cat);
    const sim::ClusterTopology topo(c);
    const int n = nodes * c.gpus_per_node();
    return sim::automatic_candidates(K::all_reduce, topo.ring_order(first_gpus(n)), topo);
  };
  CHECK(candidates("p5.48xlarge", 2) == std::vector<A>{A::ring, A::tree, A::nvls_tree});
  CHECK(candidates("p5.48xlarge", 4) == std::vector<A>{A::ring, A::tree, A::nvls_tree});
  CHECK(candidates("p4d.24xlarge", 2) == std::vector<A>{A::ring, A::tree});
  CHECK(sim::parse_collective_algorithm("nvls-tree") == A::nvls_tree);
}

TEST_CASE("simulator: NCCL's choice on p5: NVLSTree beyond the NICs on two nodes, the ring's NIC bound on four", "[simulator]") {
  // Published: with NVLS on, 8 x H100 nodes with 8 x 400G NICs reach ~430 GB/s of all-reduce
  // busbw on 1 and 2 nodes, and no more than without NVLS (~320) beyond 2 (NVIDIA/nccl#1221,
  // NCCL 2.19.3, 4-8 GiB).
  const auto& cat = hw::Catalog::builtin();
  const double s = 4.0 * (1 << 30);
  const double two = automatic_busbw(hw::Cluster::build(cat.instance("p5.48xlarge"), 2, cat), 16, s);
  const double four = automatic_busbw(hw::Cluster::build(cat.instance("p5.48xlarge"), 4, cat), 32, s);
  const double nics = cat.instance("p5.48xlarge").network.bandwidth_bytes_per_s;  // 400 GB/s
  CHECK(two > nics);
  CHECK(two == Approx(430e9).epsilon(0.15));
  CHECK(four <= nics);
  CHECK(four < two);
}

TEST_CASE("simulator: NVLSTree beyond two nodes at half NCCL's network bandwidth, its log-depth latency winning small all-reduces",
          "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  // NCCL (tuning.cc): bw = min(bwIntra, nNodes <= 2 ? bwInter : bwInter / 2) for NVLSTree.
  const auto on = [&](int nodes) {
    return pattern(hw::Cluster::build(cat.instance("p5.48xlarge"), nodes, cat), plan::CollectiveKind::all_reduce,
                   sim::CollectiveAlgorithm::nvls_tree, 8 * nodes);
  };
  CHECK(on(2).bandwidth_share(sim::NcclProtocol::simple, 1 << 30) == Approx(1.0));
  CHECK(on(4).bandwidth_share(sim::NcclProtocol::simple, 1 << 30) == Approx(0.5));
  CHECK(on(32).bandwidth_share(sim::NcclProtocol::simple, 1 << 30) == Approx(0.5));
  // 32 p5 nodes, 256 MiB: the ring's 62 network steps of NCCL latency against NVLSTree's 10
  // tree levels. crazyguitar/aws-gpu-communication-benchmark measured 138 GB/s there and 86 GB/s
  // for the all-gather of the same size (a ring): automatic lands above the ring, below the
  // measurement (the plugin's tuner, which picks Tree LL128 there, is not modelled).
  const hw::Cluster c32 = hw::Cluster::build(cat.instance("p5.48xlarge"), 32, cat);
  const double s = 256.0 * (1 << 20);
  const double automatic = automatic_busbw(c32, 256, s);
  const double ring = s / pattern(c32, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 256).uncontended_time_s(s) *
                      sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, 256);
  CHECK(automatic > 1.2 * ring);
  CHECK(automatic < 138e9);
  CHECK(automatic > 0.7 * 138e9);
  // At 4 GiB the halved bandwidth loses to the ring: automatic is the ring's time there.
  const double big = 4.0 * (1 << 30);
  const double ring_big = big / pattern(c32, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 256).uncontended_time_s(big) *
                          sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, 256);
  CHECK(automatic_busbw(c32, 256, big) == Approx(ring_big).epsilon(0.05));
}

TEST_CASE("simulator: NCCL's node-aware tree across p5 nodes: a ring's NIC load at half the bandwidth on EFA, winning 256 MiB on 32 nodes",
          "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster c = hw::Cluster::build(cat.instance("p5.48xlarge"), 16, cat);
  const auto tree = pattern(c, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::tree, 128);
  const auto ring = pattern(c, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 128);
  REQUIRE(tree.phases.size() == 1);
  // 8 channels of S/8; every GPU's NIC carries two of them each way (parent and first child of
  // its own channel, or its own parent and its neighbour's second child): a flow gets half the
  // rate a ring's flow gets on the same NIC, and each GPU moves 2 S/8 across the network, as in
  // the ring (2(n-1)/n x S/8).
  CHECK(tree.phases[0].bytes_factor == Approx(1.0 / 8));
  CHECK(tree.phases[0].uncontended_rate_bytes_per_s == Approx(ring.phases[0].uncontended_rate_bytes_per_s / 2));
  // On EFA aws-ofi-nccl's tuner model gives the tree half the ring's bandwidth: Simple 0.92 x 0.5.
  CHECK(tree.bandwidth_share(sim::NcclProtocol::simple, 1e10) == Approx(0.46));
  // Published (crazyguitar/aws-gpu-communication-benchmark, p5 HyperPod, nccl-tests all_reduce):
  // 138 GB/s at 256 MiB on 32 nodes (the tree's region in aws-ofi-nccl's p5 tuner) and 321 GB/s at
  // 8 GiB (the ring's). The tree's latency wins the first, the ring's bandwidth the second.
  const hw::Cluster c32 = hw::Cluster::build(cat.instance("p5.48xlarge"), 32, cat);
  const auto t32 = pattern(c32, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::tree, 256);
  const auto r32 = pattern(c32, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::ring, 256);
  const double small = 256.0 * (1 << 20), large = 8192.0 * (1 << 20);
  CHECK(t32.uncontended_time_s(small) < r32.uncontended_time_s(small));
  CHECK(r32.uncontended_time_s(large) < t32.uncontended_time_s(large));
  CHECK(automatic_busbw(c32, 256, small) == Approx(138e9).epsilon(0.10));
  CHECK(automatic_busbw(c32, 256, large) == Approx(321e9).epsilon(0.10));
  // Not on InfiniBand: a DGX H100 tree keeps NCCL's 0.92.
  const hw::Cluster dgx = hw::Cluster::build(cat.instance("dgx-h100"), 4, cat);
  CHECK(pattern(dgx, plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::tree, 32).bandwidth_share(sim::NcclProtocol::simple, 1e10) ==
        Approx(0.92));
}
