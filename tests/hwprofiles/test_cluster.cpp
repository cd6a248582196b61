// The Cluster topology graph: structure, routes and rings against closed-form facts of the
// hardware and against an exhaustive search over all simple paths.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/core/thread_pool.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/hwprofiles/placement.hpp"

using namespace trainplan;

namespace {

const hw::Catalog& cat() { return hw::Catalog::builtin(); }

hw::Cluster make(const std::string& type, int count) { return hw::Cluster::build(cat().instance(type), count, cat()); }

const hw::Link& link(const hw::Cluster& c, int id) { return c.links()[static_cast<size_t>(id)]; }
const hw::Vertex& vertex(const hw::Cluster& c, int id) { return c.vertices()[static_cast<size_t>(id)]; }

// Every vertex a route passes through, in order (source and destination included).
std::vector<int> route_vertices(const hw::Cluster& c, const hw::Route& r) {
  std::vector<int> out;
  for (int id : r.links) {
    if (out.empty()) out.push_back(link(c, id).src);
    REQUIRE(out.back() == link(c, id).src);  // links chain
    out.push_back(link(c, id).dst);
  }
  return out;
}

// Exhaustive oracle: the best (widest, then fewest hops) over all simple paths between two
// GPUs that pass through no other GPU, stay in the two nodes and cross the fabric at most once.
struct Best {
  double bandwidth = 0;
  int hops = std::numeric_limits<int>::max();
};
Best exhaustive_best(const hw::Cluster& c, int gpu_a, int gpu_b) {
  const int src = c.gpu_vertex(gpu_a), dst = c.gpu_vertex(gpu_b);
  const int na = c.node_of(gpu_a), nb = c.node_of(gpu_b);
  std::vector<std::vector<int>> out(c.vertices().size());
  for (const auto& l : c.links()) out[static_cast<size_t>(l.src)].push_back(l.id);
  Best best;
  std::vector<char> on_path(c.vertices().size(), 0);
  std::function<void(int, double, int)> dfs = [&](int u, double width, int hops) {
    if (u == dst) {
      if (width > best.bandwidth || (width == best.bandwidth && hops < best.hops)) best = {width, hops};
      return;
    }
    on_path[static_cast<size_t>(u)] = 1;
    for (int id : out[static_cast<size_t>(u)]) {
      const hw::Link& l = link(c, id);
      const hw::Vertex& v = vertex(c, l.dst);
      if (on_path[static_cast<size_t>(l.dst)]) continue;
      if (v.kind == hw::VertexKind::gpu && l.dst != dst) continue;
      if (v.kind == hw::VertexKind::fabric ? na == nb : (v.node != na && v.node != nb)) continue;
      dfs(l.dst, std::min(width, l.bandwidth_bytes_per_s), hops + 1);
    }
    on_path[static_cast<size_t>(u)] = 0;
  };
  dfs(src, std::numeric_limits<double>::infinity(), 0);
  return best;
}

}  // namespace

TEST_CASE("hwprofiles: p3.16xlarge GPUs have 6 NVLink lanes and 3 GPUs without NVLink", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3.16xlarge", 1);
  const double lane = 25e9;  // NVLink2, per direction
  for (int g = 0; g < 8; ++g) {
    INFO("GPU " << g);
    double lanes = 0;
    std::set<int> peers;
    for (const auto& l : c.links())
      if (l.kind == hw::LinkKind::nvlink && l.src == c.gpu_vertex(g)) {
        lanes += l.bandwidth_bytes_per_s / lane;
        peers.insert(vertex(c, l.dst).local_index);
      }
    CHECK(lanes == Approx(6.0));        // V100: 6 NVLink2 links
    CHECK(7 - peers.size() == 3);       // hybrid cube-mesh: not all-to-all
  }
}

TEST_CASE("hwprofiles: p3.16xlarge GPU 0 -> 3 is one NV2 hop at 50 GB/s", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3.16xlarge", 1);
  const hw::Route& r = c.route(0, 3);
  CHECK(r.hops == 1);
  CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(2 * 25e9));
  CHECK(r.latency_s == Approx(1e-6));
  CHECK(link(c, r.links[0]).kind == hw::LinkKind::nvlink);
  CHECK(c.route(0, 1).bottleneck_bandwidth_bytes_per_s == Approx(25e9));  // NV1
}

TEST_CASE("hwprofiles: p3.16xlarge GPU 0 -> 5 has no NVLink: it avoids GPUs and crosses sockets", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3.16xlarge", 1);
  const hw::Route& r = c.route(0, 5);
  auto path = route_vertices(c, r);
  for (size_t i = 1; i + 1 < path.size(); ++i) CHECK(vertex(c, path[i]).kind != hw::VertexKind::gpu);
  bool crosses = false;
  for (int id : r.links) crosses = crosses || link(c, id).kind == hw::LinkKind::inter_socket;
  CHECK(crosses);
  // GPU -> PCIe switch -> CPU0 -> CPU1 -> PCIe switch -> GPU, limited by PCIe Gen3 (12 GB/s).
  CHECK(r.hops == 5);
  CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(12e9));
}

TEST_CASE("hwprofiles: p4d GPU pairs are 2 hops over the NVSwitch at 300 GB/s", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p4d.24xlarge", 1);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      const hw::Route& r = c.route(a, b);
      CHECK(r.hops == 2);
      CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(12 * 25e9));
      CHECK(vertex(c, link(c, r.links[0]).dst).kind == hw::VertexKind::nvswitch);
    }
  const hw::Route& self = c.route(3, 3);
  CHECK(self.hops == 0);
  CHECK(self.bottleneck_bandwidth_bytes_per_s == std::numeric_limits<double>::infinity());
}

TEST_CASE("hwprofiles: p4d across nodes is capped by one 100 Gbps EFA NIC (12.5 GB/s)", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p4d.24xlarge", 2);
  for (int a = 0; a < 8; ++a)
    for (int b = 8; b < 16; ++b) {
      const hw::Route& r = c.route(a, b);
      CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(100e9 / 8));
      std::vector<hw::VertexKind> kinds;
      for (int v : route_vertices(c, r)) kinds.push_back(vertex(c, v).kind);
      using K = hw::VertexKind;
      // GPUDirect RDMA: GPU -> PCIe switch -> NIC -> fabric -> NIC -> PCIe switch -> GPU.
      CHECK(kinds == std::vector<K>{K::gpu, K::pcie_switch, K::nic, K::fabric, K::nic, K::pcie_switch, K::gpu});
      // The NICs serve the end GPUs (2 GPUs per NIC): rail-aligned.
      CHECK(vertex(c, route_vertices(c, r)[2]).local_index == a / 2);
      CHECK(vertex(c, route_vertices(c, r)[4]).local_index == (b - 8) / 2);
      // 4 PCIe hops of 1 us + 15 us EFA node-to-node (estimates of the catalog).
      CHECK(r.latency_s == Approx(4e-6 + 15e-6));
    }
}

TEST_CASE("hwprofiles: 2x p4d has 39 vertices and 116 directed links", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p4d.24xlarge", 2);
  // Per node: 8 GPUs, 1 NVSwitch, 4 PCIe switches, 2 sockets, 4 NICs; plus one fabric.
  CHECK(c.vertices().size() == 2 * (8 + 1 + 4 + 2 + 4) + 1);
  // Per node: 8 GPU-NVSwitch, 8 GPU-PCIe, 4 switch-CPU, 1 CPU-CPU, 4 NIC-PCIe, 4 NIC-fabric,
  // each full duplex = 2 directed links.
  CHECK(c.links().size() == 2 * 2 * (8 + 8 + 4 + 1 + 4 + 4));
  std::map<hw::VertexKind, int> kinds;
  for (const auto& v : c.vertices()) kinds[v.kind]++;
  CHECK(kinds[hw::VertexKind::gpu] == 16);
  CHECK(kinds[hw::VertexKind::fabric] == 1);
  CHECK(c.vertices().back().kind == hw::VertexKind::fabric);
  for (size_t i = 0; i < c.links().size(); i += 2) {  // the two directions of each link are adjacent
    CHECK(c.links()[i].src == c.links()[i + 1].dst);
    CHECK(c.links()[i].bandwidth_bytes_per_s == c.links()[i + 1].bandwidth_bytes_per_s);
  }
  CHECK(c.num_gpus() == 16);
  CHECK(c.node_of(9) == 1);
  REQUIRE_ERROR_CONTAINS(c.route(0, 16), "GPU 16 is out of range");
}

TEST_CASE("hwprofiles: g4dn.12xlarge GPU pairs go through PCIe and the CPU", "[hwprofiles][cluster]") {
  hw::Cluster c = make("g4dn.12xlarge", 1);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      const hw::Route& r = c.route(a, b);
      for (int id : r.links) CHECK(link(c, id).kind == hw::LinkKind::pcie);
      CHECK(r.hops == 2);
      CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(12e9));
    }
  // Without GPUDirect RDMA, traffic to another node is staged through the CPU socket.
  hw::Cluster two = make("g4dn.12xlarge", 2);
  auto path = route_vertices(two, two.route(1, 6));
  CHECK(vertex(two, path[1]).kind == hw::VertexKind::cpu);
  CHECK(vertex(two, path[path.size() - 2]).kind == hw::VertexKind::cpu);
  CHECK(two.route(1, 6).bottleneck_bandwidth_bytes_per_s == Approx(50e9 / 8));
}

TEST_CASE("hwprofiles: p5 NICs of one GPU form one 4-device vertex of 50 GB/s", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p5.48xlarge", 2);
  int nics = 0;
  for (const auto& v : c.vertices())
    if (v.kind == hw::VertexKind::nic) {
      ++nics;
      CHECK(v.devices == 4);
    }
  CHECK(nics == 16);
  for (const auto& l : c.links())
    if (l.kind == hw::LinkKind::network) CHECK(l.bandwidth_bytes_per_s == Approx(4 * 100e9 / 8));
  // Each GPU uses its own rail; the GPU's PCIe Gen5 link (48 GB/s, an estimate) is the cap.
  for (int a = 0; a < 8; ++a) {
    const hw::Route& r = c.route(a, 8 + a);
    auto path = route_vertices(c, r);
    CHECK(vertex(c, path[2]).local_index == a);
    CHECK(vertex(c, path[4]).local_index == a);
    CHECK(r.bottleneck_bandwidth_bytes_per_s == Approx(48e9));
  }
}

TEST_CASE("hwprofiles: routes are the widest, then shortest, of all simple paths", "[hwprofiles][cluster]") {
  Rng rng(2026);
  for (const char* type : {"p3.16xlarge", "p3dn.24xlarge", "g4dn.metal", "p4d.24xlarge", "g6.48xlarge", "dgx-h100"}) {
    INFO(type);
    hw::Cluster c = make(type, 3);
    for (int trial = 0; trial < 12; ++trial) {
      int a = static_cast<int>(rng.below(static_cast<uint64_t>(c.num_gpus())));
      int b = static_cast<int>(rng.below(static_cast<uint64_t>(c.num_gpus())));
      if (a == b) continue;
      INFO(a << " -> " << b);
      const hw::Route& r = c.route(a, b);
      Best best = exhaustive_best(c, a, b);
      CHECK(r.bottleneck_bandwidth_bytes_per_s == best.bandwidth);
      CHECK(r.hops == best.hops);
      // Symmetric hardware: the way back is as wide and as long.
      CHECK(c.route(b, a).bottleneck_bandwidth_bytes_per_s == r.bottleneck_bandwidth_bytes_per_s);
      CHECK(c.route(b, a).hops == r.hops);
    }
  }
}

TEST_CASE("hwprofiles: routes are deterministic, translated consistently, and thread-safe", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3dn.24xlarge", 4);
  hw::Cluster again = make("p3dn.24xlarge", 4);
  const int n = c.num_gpus();
  std::vector<std::vector<int>> serial(static_cast<size_t>(n * n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      serial[static_cast<size_t>(a * n + b)] = c.route(a, b).links;
      CHECK(again.route(a, b).links == c.route(a, b).links);
    }
  // A route between nodes 2 and 3 is the node 0 -> 1 route shifted by two nodes' links.
  const int per_node = static_cast<int>(c.links().size()) / 4;
  const auto& r01 = c.route(1, 13);
  const auto& r23 = c.route(17, 29);
  REQUIRE(r01.links.size() == r23.links.size());
  for (size_t i = 0; i < r01.links.size(); ++i) CHECK(r23.links[i] == r01.links[i] + 2 * per_node);
  // Many threads asking at once get the same answers (fresh cluster: empty cache).
  hw::Cluster fresh = make("p3dn.24xlarge", 4);
  std::vector<std::vector<int>> parallel(static_cast<size_t>(n * n));
  ThreadPool pool(4);
  pool.parallel_for(static_cast<size_t>(n * n), [&](size_t i) {
    const int a = static_cast<int>(i) % n, b = static_cast<int>(i) / n;  // column order: contention on rows
    parallel[static_cast<size_t>(a * n + b)] = fresh.route(a, b).links;
  });
  CHECK(parallel == serial);
  hw::Cluster copy = fresh;
  CHECK(copy.route(5, 30).links == fresh.route(5, 30).links);
}

TEST_CASE("hwprofiles: route_into gives route()'s answer without keeping it", "[hwprofiles][cluster]") {
  // Every pair of a multi-AZ cluster and of an NVLink-domain (UltraServer) one: templates,
  // translated routes within and across domains and zones.
  for (const auto& [type, count, azs] : {std::tuple{"p4d.24xlarge", 6, 3}, std::tuple{"p6e-gb200.36xlarge", 4, 1}}) {
    const hw::Catalog& cat = hw::Catalog::builtin();
    hw::Placement placement;
    placement.azs = azs;
    const hw::Cluster c = hw::Cluster::build(*cat.find_instance(type), count, cat, placement);
    const int n = c.num_gpus();
    hw::Route scratch;
    for (int a = 0; a < n; a += 3)
      for (int b = 0; b < n; b += 2) {
        const hw::Route& fresh = c.route_into(a, b, scratch);
        const hw::Route& kept = c.route(a, b);
        INFO(type << " " << a << " -> " << b);
        CHECK(fresh.links == kept.links);
        CHECK(fresh.hops == kept.hops);
        CHECK(fresh.latency_s == kept.latency_s);
        CHECK(fresh.bottleneck_bandwidth_bytes_per_s == kept.bottleneck_bandwidth_bytes_per_s);
      }
  }
}

TEST_CASE("hwprofiles: ring_order finds an all-NVLink ring on p3.16xlarge", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3.16xlarge", 1);
  std::vector<int> ring = c.ring_order({7, 6, 5, 4, 3, 2, 1, 0});
  REQUIRE(ring.size() == 8);
  CHECK(std::set<int>(ring.begin(), ring.end()).size() == 8);
  double slowest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < 8; ++i) {
    const hw::Route& r = c.route(ring[i], ring[(i + 1) % 8]);
    CHECK(r.hops == 1);
    CHECK(link(c, r.links[0]).kind == hw::LinkKind::nvlink);
    slowest = std::min(slowest, r.bottleneck_bandwidth_bytes_per_s);
  }
  CHECK(slowest >= 25e9);
  // Oracle: the NV2 pairs of the cube-mesh each GPU has exactly two, and they form one
  // 8-cycle, so the best ring runs at 2 lanes = 50 GB/s.
  const auto& lanes = cat().instance("p3.16xlarge").topology.nvlink_lanes;
  std::vector<std::vector<int>> nv2(8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if (lanes[i][j] == 2) nv2[i].push_back(j);
  int prev = -1, cur = 0, length = 0;
  do {
    REQUIRE(nv2[cur].size() == 2);
    int next = nv2[cur][0] != prev ? nv2[cur][0] : nv2[cur][1];
    prev = cur;
    cur = next;
    ++length;
  } while (cur != 0 && length < 9);
  REQUIRE(length == 8);
  CHECK(slowest == Approx(50e9));
  CHECK(ring.front() == 0);
  CHECK(c.ring_order({0, 1, 2, 3, 4, 5, 6, 7}) == ring);  // input order does not matter
}

TEST_CASE("hwprofiles: ring_order across nodes keeps each node contiguous", "[hwprofiles][cluster]") {
  hw::Cluster c = make("p3.16xlarge", 3);
  std::vector<int> all(24);
  for (int i = 0; i < 24; ++i) all[static_cast<size_t>(i)] = 23 - i;
  std::vector<int> ring = c.ring_order(all);
  REQUIRE(ring.size() == 24);
  for (int k = 0; k < 3; ++k) {
    std::set<int> node(ring.begin() + 8 * k, ring.begin() + 8 * (k + 1));
    CHECK(*node.begin() == 8 * k);
    CHECK(*node.rbegin() == 8 * k + 7);
    // Inside a node, consecutive GPUs are NVLink neighbours (a Hamiltonian NVLink path).
    for (int i = 8 * k; i + 1 < 8 * (k + 1); ++i) CHECK(c.route(ring[i], ring[i + 1]).hops == 1);
  }
  CHECK(c.ring_order({9, 2}) == std::vector<int>{2, 9});
  REQUIRE_ERROR_CONTAINS(c.ring_order({1, 1}), "appears twice");
}

TEST_CASE("hwprofiles: intra-node matrix of p3.16xlarge is the DGX-1V nvidia-smi topology", "[hwprofiles][cluster]") {
  // `nvidia-smi topo -m` as commonly reported on p3.16xlarge (golden).
  const std::vector<std::vector<std::string>> expected = {
      {"X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"}, {"NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"},
      {"NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"}, {"NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"},
      {"NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"}, {"SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"},
      {"SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"}, {"SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"}};
  CHECK(make("p3.16xlarge", 1).intra_node_matrix() == expected);
  CHECK(make("p3dn.24xlarge", 2).intra_node_matrix() == expected);
  auto p4d = make("p4d.24xlarge", 1).intra_node_matrix();
  CHECK(p4d[0][7] == "NVS");
  CHECK(p4d[5][5] == "X");
  auto metal = make("g4dn.metal", 1).intra_node_matrix();
  CHECK(metal[0][3] == "NODE");
  CHECK(metal[0][4] == "SYS");
  CHECK(make("g4dn.xlarge", 1).intra_node_matrix() == std::vector<std::vector<std::string>>{{"X"}});
}

TEST_CASE("hwprofiles: Cluster::build rejects bad counts and malformed instance types", "[hwprofiles][cluster]") {
  REQUIRE_ERROR_CONTAINS(make("p4d.24xlarge", 0), "at least 1 instance");
  hw::InstanceType bad = cat().instance("p3.8xlarge");
  bad.topology.nvlink_lanes[0][1] = 3;
  REQUIRE_ERROR_CONTAINS(hw::Cluster::build(bad, 1, cat()), "/topology/nvlink_lanes/0/1: not symmetric");
  hw::InstanceType unknown_gpu = cat().instance("p4d.24xlarge");
  unknown_gpu.gpu = "B200";
  REQUIRE_ERROR_CONTAINS(hw::Cluster::build(unknown_gpu, 1, cat()), "unknown GPU \"B200\"");
}

TEST_CASE("hwprofiles: every catalog instance builds a connected cluster", "[hwprofiles][cluster]") {
  for (const auto& name : cat().instance_names()) {
    INFO(name);
    hw::Cluster c = make(name, 2);
    const int n = c.num_gpus();
    for (int b = 1; b < n; ++b) {
      const hw::Route& r = c.route(0, b);
      CHECK(r.hops >= 1);
      CHECK(r.bottleneck_bandwidth_bytes_per_s > 0);
      CHECK(r.latency_s > 0);
    }
    CHECK(c.gpu_spec().name == c.instance().gpu);
  }
}

TEST_CASE("hwprofiles: part of a node keeps its GPUs' links, sockets and NICs", "[hwprofiles][cluster]") {
  hw::Catalog cat = hw::Catalog::builtin();
  const hw::InstanceType& p4d = cat.instance("p4d.24xlarge");
  const std::string four = cat.add_partial_instance("p4d.24xlarge", 4);
  CHECK(four == "p4d.24xlarge:4gpu");
  CHECK(cat.add_partial_instance("p4d.24xlarge", 4) == four);  // added once
  const hw::InstanceType& part = cat.instance(four);
  CHECK(part.gpu_count == 4);
  CHECK(part.topology.kind == hw::IntraNodeKind::nvswitch);
  CHECK(part.topology.sockets == 1);               // 4 GPUs per socket: the first socket
  CHECK(part.network.nics == 2);                   // 2 GPUs per EFA device
  CHECK(part.network.bandwidth_bytes_per_s == Approx(p4d.network.bandwidth_bytes_per_s / 2));
  CHECK(*part.prices.ec2_on_demand == Approx(*p4d.prices.ec2_on_demand / 2));
  const hw::Cluster c = hw::Cluster::build(part, 1, cat);
  CHECK(c.num_gpus() == 4);
  // p3.16xlarge: the first two GPUs keep the NVLink lanes between them.
  const hw::InstanceType& p3 = cat.instance("p3.16xlarge");
  const hw::InstanceType& two = cat.instance(cat.add_partial_instance("p3.16xlarge", 2));
  REQUIRE(two.topology.nvlink_lanes.size() == 2);
  CHECK(two.topology.nvlink_lanes[0][1] == p3.topology.nvlink_lanes[0][1]);
  // One GPU is a single-GPU instance.
  CHECK(cat.instance(cat.add_partial_instance("p4d.24xlarge", 1)).topology.kind == hw::IntraNodeKind::single);
  // Whole nodes, nothing, and parts that split a PCIe switch pair are refused.
  REQUIRE_ERROR_CONTAINS(cat.add_partial_instance("p4d.24xlarge", 8), "must be 1 to 7 GPUs");
  REQUIRE_ERROR_CONTAINS(cat.add_partial_instance("p4d.24xlarge", 0), "must be 1 to 7 GPUs");
  REQUIRE_ERROR_CONTAINS(cat.add_partial_instance("p4d.24xlarge", 3), "would split");
  REQUIRE_ERROR_CONTAINS(cat.add_partial_instance("no-such", 1), "unknown instance type");
}

TEST_CASE("hwprofiles: a network variant keeps the node and takes the stated NICs", "[hwprofiles][cluster]") {
  // nccl-tests#119: DGX A100-class nodes with 4 x 200 Gb/s HDR instead of the DGX's 8.
  hw::Catalog cat = hw::Catalog::builtin();
  const hw::InstanceType& dgx = cat.instance("dgx-a100-40gb");
  const std::string v = cat.add_network_variant("dgx-a100-40gb", 4, 200e9 / 8, "test");
  CHECK(v == "dgx-a100-40gb:4x200Gbps");
  CHECK(cat.add_network_variant("dgx-a100-40gb", 4, 200e9 / 8, "test") == v);  // added once
  const hw::InstanceType& t = cat.instance(v);
  CHECK(t.network.nics == 4);
  CHECK(t.network.bandwidth_bytes_per_s == Approx(100e9));
  CHECK(t.network.nic_bandwidth_bytes_per_s() == Approx(25e9));
  CHECK(t.gpu_count == dgx.gpu_count);
  CHECK(t.topology.kind == dgx.topology.kind);
  CHECK(t.network.fabric == dgx.network.fabric);
  // Two GPUs per NIC in the cluster: 4 NIC vertices of 25 GB/s each to the fabric.
  const hw::Cluster c = hw::Cluster::build(t, 2, cat);
  int to_fabric = 0;
  for (const hw::Link& l : c.links())
    if (l.kind == hw::LinkKind::network && c.vertices()[static_cast<size_t>(l.src)].kind == hw::VertexKind::nic &&
        c.vertices()[static_cast<size_t>(l.src)].node == 0 &&
        c.vertices()[static_cast<size_t>(l.src)].name.find("ena") == std::string::npos) {
      ++to_fabric;
      CHECK(l.bandwidth_bytes_per_s == Approx(25e9));
    }
  CHECK(to_fabric == 4);
  REQUIRE_ERROR_CONTAINS(cat.add_network_variant("dgx-a100-40gb", 0, 25e9, "test"), "1 to 64 NICs");
  REQUIRE_ERROR_CONTAINS(cat.add_network_variant("dgx-a100-40gb", 4, 0, "test"), "bandwidth > 0");
  REQUIRE_ERROR_CONTAINS(cat.add_network_variant("no-such", 4, 25e9, "test"), "unknown instance type");
}
