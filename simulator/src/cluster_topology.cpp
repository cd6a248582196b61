// The production side of the topology seam: an hw::Cluster's links, routes and ring order.
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim {

ClusterTopology::ClusterTopology(const hw::Cluster& cluster) : cluster_(cluster) {
  const auto& links = cluster.links();
  links_.reserve(links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    const hw::Link& l = links[i];
    TP_ASSERT(l.id == static_cast<int>(i));
    links_.push_back({l.bandwidth_bytes_per_s, l.latency_s, l.name});
  }
}

int ClusterTopology::num_gpus() const { return cluster_.num_gpus(); }

const std::vector<int>& ClusterTopology::route(int gpu_a, int gpu_b) const {
  return cluster_.route(gpu_a, gpu_b).links;
}

int ClusterTopology::node_of(int gpu) const { return cluster_.node_of(gpu); }

std::vector<int> ClusterTopology::ring_order(const std::vector<int>& gpus) const { return cluster_.ring_order(gpus); }

}  // namespace trainplan::sim
