// The production side of the topology seam: an hw::Cluster's links, routes and ring order.
#include <cmath>
#include <mutex>
#include <cstdlib>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim {

namespace {

LinkClass link_class(hw::LinkKind k) {
  switch (k) {
    case hw::LinkKind::nvlink:
    case hw::LinkKind::nvswitch: return LinkClass::nvlink;
    case hw::LinkKind::pcie:
    case hw::LinkKind::inter_socket: return LinkClass::pcie;
    case hw::LinkKind::nic:
    case hw::LinkKind::network:
    case hw::LinkKind::inter_az: return LinkClass::net;  // TCP between AZs: NCCL's net transport (sockets)
  }
  return LinkClass::other;
}

}  // namespace

namespace {

// Outgoing links of every vertex.
std::vector<std::vector<int>> out_links(const hw::Cluster& c) {
  std::vector<std::vector<int>> out(c.vertices().size());
  for (const hw::Link& l : c.links()) out[static_cast<size_t>(l.src)].push_back(l.id);
  return out;
}

// GPU `gpu` up its PCIe tree to the CPU socket (GPU -> PCIe switch -> CPU, or GPU -> CPU).
std::vector<int> up_to_cpu(const hw::Cluster& c, const std::vector<std::vector<int>>& out_of, int gpu) {
  const auto& v = c.vertices();
  std::vector<int> out;
  int at = c.gpu_vertex(gpu);
  while (v[static_cast<size_t>(at)].kind != hw::VertexKind::cpu) {
    // Up the tree: a PCIe link to a CPU, else to a PCIe switch (never down to a GPU).
    int next = -1;
    for (int id : out_of[static_cast<size_t>(at)]) {
      const hw::Link& l = c.links()[static_cast<size_t>(id)];
      const hw::VertexKind k = v[static_cast<size_t>(l.dst)].kind;
      if (l.kind != hw::LinkKind::pcie || k == hw::VertexKind::gpu || (!out.empty() && l.dst == c.links()[static_cast<size_t>(out.back())].src))
        continue;
      if (k == hw::VertexKind::cpu) {
        next = id;
        break;
      }
      if (next < 0 && k == hw::VertexKind::pcie_switch) next = id;
    }
    TP_ASSERT_MSG(next >= 0 && out.size() < 8, "a GPU's PCIe tree does not reach a CPU");
    out.push_back(next);
    at = c.links()[static_cast<size_t>(next)].dst;
  }
  return out;
}

// The reverse of a path: each link's other direction (the two directions of a physical link
// have consecutive ids, hw/cluster.hpp), in reverse order.
std::vector<int> reversed(const hw::Cluster& c, const std::vector<int>& path) {
  std::vector<int> out;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const int back = *it ^ 1;
    TP_ASSERT(c.links()[static_cast<size_t>(back)].src == c.links()[static_cast<size_t>(*it)].dst);
    out.push_back(back);
  }
  return out;
}

// GPU `gpu` to the host memory of another node: the route to that node's GPU of the same local
// index, cut where it reaches a CPU of that node (the NIC hangs off the socket: no GPUDirect
// RDMA), else where it reaches that node's NIC switch, continued up that switch to its CPU.
std::vector<int> to_remote_host(const hw::Cluster& c, const std::vector<std::vector<int>>& out_of, int gpu, int node) {
  const auto& v = c.vertices();
  const int peer = node * c.gpus_per_node() + gpu % c.gpus_per_node();
  std::vector<int> out;
  for (int id : c.route(gpu, peer).links) {
    const hw::Link& l = c.links()[static_cast<size_t>(id)];
    const hw::Vertex& dst = v[static_cast<size_t>(l.dst)];
    out.push_back(id);
    if (dst.node == node && dst.kind == hw::VertexKind::cpu) return out;
    if (dst.node == node && dst.kind == hw::VertexKind::pcie_switch && v[static_cast<size_t>(l.src)].kind == hw::VertexKind::nic)
      for (int up : out_of[static_cast<size_t>(l.dst)])
        if (v[static_cast<size_t>(c.links()[static_cast<size_t>(up)].dst)].kind == hw::VertexKind::cpu) {
          out.push_back(up);
          return out;
        }
  }
  TP_ASSERT_MSG(false, "an inter-node route passes no CPU or NIC switch of its destination node");
  return out;
}

}  // namespace

ClusterTopology::ClusterTopology(const hw::Cluster& cluster) : cluster_(cluster), out_links_(out_links(cluster)) {
  const auto& links = cluster.links();
  links_.reserve(links.size());
  const std::string& cc = cluster.gpu_spec().compute_capability;
  for (size_t i = 0; i < links.size(); ++i) {
    const hw::Link& l = links[i];
    TP_ASSERT(l.id == static_cast<int>(i));
    // NVLink carries what NCCL's kernels move, not the signalling rate (nccl_nvlink_share).
    const bool nvl = l.kind == hw::LinkKind::nvlink || l.kind == hw::LinkKind::nvswitch;
    const double share = nvl ? nccl_nvlink_share(cc, l.kind == hw::LinkKind::nvswitch) : 1.0;
    links_.push_back({l.bandwidth_bytes_per_s * share, l.latency_s, l.name, link_class(l.kind)});
  }
}

const std::vector<int>& ClusterTopology::host_route(int gpu, int node, bool to_host) const {
  if (node < 0 || node >= cluster_.num_nodes())
    throw Error("node " + std::to_string(node) + " is out of range: the cluster has " + std::to_string(cluster_.num_nodes()) +
                " nodes")
        .hint("use 0.." + std::to_string(cluster_.num_nodes() - 1));
  (void)cluster_.gpu_vertex(gpu);  // range check
  const uint64_t key = (static_cast<uint64_t>(gpu) << 32) | (static_cast<uint64_t>(node) << 1) | (to_host ? 1u : 0u);
  std::lock_guard lock(host_mutex_);
  auto it = host_routes_.find(key);
  if (it != host_routes_.end()) return it->second;
  std::vector<int> r;
  if (cluster_.node_of(gpu) == node) r = up_to_cpu(cluster_, out_links_, gpu);
  else r = to_remote_host(cluster_, out_links_, gpu, node);
  if (!to_host) r = reversed(cluster_, r);  // host -> GPU: the same links, other direction
  return host_routes_.emplace(key, std::move(r)).first->second;
}

int ClusterTopology::num_gpus() const { return cluster_.num_gpus(); }

const std::vector<int>& ClusterTopology::route(int gpu_a, int gpu_b) const {
  return cluster_.route(gpu_a, gpu_b).links;
}

const std::vector<int>& ClusterTopology::route_scratch(int gpu_a, int gpu_b, std::vector<int>& scratch) const {
  hw::Route r;
  r.links.swap(scratch);  // hw::Cluster::route_into fills r, reusing scratch's capacity
  const hw::Route& got = cluster_.route_into(gpu_a, gpu_b, r);
  scratch.swap(r.links);
  return &got == &r ? scratch : got.links;
}

int ClusterTopology::node_of(int gpu) const { return cluster_.node_of(gpu); }

int ClusterTopology::zone_of(int gpu) const { return cluster_.az_of_gpu(gpu); }

std::vector<int> ClusterTopology::ring_order(const std::vector<int>& gpus) const { return cluster_.ring_order(gpus); }

Topology::NcclHost ClusterTopology::nccl_host() const {
  NcclHost h;
  h.compute_capability = static_cast<int>(std::lround(std::atof(cluster_.gpu_spec().compute_capability.c_str()) * 10));
  h.amd_cpu = cluster_.instance().cpu.find("AMD") != std::string::npos;
  h.simple_only = cluster_.instance().network.nccl_simple_only;
  h.channels_in_node = nccl_channels(cluster_, false);
  h.channels_across_nodes = nccl_channels(cluster_, true);
  h.nvls = h.compute_capability >= 90 && cluster_.instance().topology.kind == hw::IntraNodeKind::nvswitch;
  h.net_latency_s = cluster_.instance().network.nccl_net_latency_s;
  h.efa = cluster_.instance().network.efa;
  return h;
}

}  // namespace trainplan::sim
