// The production side of the topology seam: an hw::Cluster's links, routes and ring order.
#include <cmath>
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
    case hw::LinkKind::network: return LinkClass::net;
  }
  return LinkClass::other;
}

}  // namespace

ClusterTopology::ClusterTopology(const hw::Cluster& cluster) : cluster_(cluster) {
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

int ClusterTopology::num_gpus() const { return cluster_.num_gpus(); }

const std::vector<int>& ClusterTopology::route(int gpu_a, int gpu_b) const {
  return cluster_.route(gpu_a, gpu_b).links;
}

int ClusterTopology::node_of(int gpu) const { return cluster_.node_of(gpu); }

std::vector<int> ClusterTopology::ring_order(const std::vector<int>& gpus) const { return cluster_.ring_order(gpus); }

Topology::NcclHost ClusterTopology::nccl_host() const {
  NcclHost h;
  h.compute_capability = static_cast<int>(std::lround(std::atof(cluster_.gpu_spec().compute_capability.c_str()) * 10));
  h.amd_cpu = cluster_.instance().cpu.find("AMD") != std::string::npos;
  h.simple_only = cluster_.instance().network.efa;
  return h;
}

}  // namespace trainplan::sim
