// Expert parallelism's all-to-all time (sim::all_to_all_s) against closed forms.
#include "test_support.hpp"
#include "trainplan/simulator/expert_parallel.hpp"

using namespace trainplan;

TEST_CASE("simulator: an intra-node all-to-all takes S (n-1)/n / B + route latency", "[simulator][moe]") {
  const int n = 8;
  const double bytes = 4e8, bw = 2e11, hop = 1e-6;
  const auto topo = sim::make_switch_topology(n, bw, hop);
  std::vector<int> group(n);
  for (int i = 0; i < n; ++i) group[static_cast<size_t>(i)] = i;
  // Each GPU's uplink carries its n-1 flows of S/n.
  CHECK(sim::all_to_all_s(bytes, {group}, topo, 0.0) == Approx((n - 1.0) / n * bytes / bw + topo.route_latency_s(0, 1)).epsilon(1e-12));
  CHECK(sim::all_to_all_s(bytes, {group}, topo, 5e-6) == Approx((n - 1.0) / n * bytes / bw + topo.route_latency_s(0, 1) + 5e-6).epsilon(1e-12));
  CHECK(sim::all_to_all_s(bytes, {{0}}, topo) == 0);
  CHECK(sim::all_to_all_s(0, {group}, topo) == 0);
}

TEST_CASE("simulator: all-to-alls across nodes share each node's NIC among the node's groups", "[simulator][moe]") {
  // 4 nodes x 8 GPUs; ep = 4 groups {g, g+8, g+16, g+24}: one member per node, all 8 at once.
  sim::TwoLevelSpec spec;
  spec.nodes = 4;
  spec.gpus_per_node = 8;
  spec.intra_bandwidth_bytes_per_s = 3e11;
  spec.intra_latency_s = 1e-6;
  spec.nic_bandwidth_bytes_per_s = 5e10;
  spec.nic_latency_s = 5e-6;
  const auto topo = sim::make_two_level_topology(spec);
  const double bytes = 2e8;
  const int n = 4, g = 8;
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < g; ++i) groups.push_back({i, i + 8, i + 16, i + 24});
  const double latency = topo.route_latency_s(0, 8);
  // One group alone: its member's n-1 flows of S/n leave through the node's NIC.
  CHECK(sim::all_to_all_s(bytes, {groups[0]}, topo, 0.0) ==
        Approx((n - 1.0) / n * bytes / spec.nic_bandwidth_bytes_per_s + latency).epsilon(1e-12));
  // All eight: the NIC carries g (n-1) flows, g times slower.
  CHECK(sim::all_to_all_s(bytes, groups, topo, 0.0) ==
        Approx(g * (n - 1.0) / n * bytes / spec.nic_bandwidth_bytes_per_s + latency).epsilon(1e-12));
}
