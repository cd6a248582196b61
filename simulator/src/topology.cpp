// TableTopology and the fake topologies tests and what-if studies build by hand.
#include "trainplan/simulator/topology.hpp"

#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::sim {
namespace {

std::string node_name(int node) { return std::string("n").append(std::to_string(node)); }

uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

}  // namespace

double Topology::route_latency_s(int gpu_a, int gpu_b) const {
  double total = 0;
  const auto& all = links();
  std::vector<int> scratch;
  for (int l : route_scratch(gpu_a, gpu_b, scratch)) total += all[static_cast<size_t>(l)].latency_s;
  return total;
}

TableTopology::TableTopology(int num_gpus, int gpus_per_node)
    : num_gpus_(num_gpus), gpus_per_node_(gpus_per_node > 0 ? gpus_per_node : (num_gpus > 0 ? num_gpus : 1)) {
  if (num_gpus < 1) throw Error("a topology needs at least one GPU, got " + std::to_string(num_gpus));
}

int TableTopology::add_link(double bandwidth_bytes_per_s, double latency_s, std::string name) {
  if (!(bandwidth_bytes_per_s > 0))
    throw Error("link bandwidth must be positive, got " + std::to_string(bandwidth_bytes_per_s));
  if (!(latency_s >= 0)) throw Error("link latency must be >= 0, got " + std::to_string(latency_s));
  int id = static_cast<int>(links_.size());
  if (name.empty()) name = "link" + std::to_string(id);
  links_.push_back({bandwidth_bytes_per_s, latency_s, std::move(name)});
  return id;
}

void TableTopology::set_route(int gpu_a, int gpu_b, std::vector<int> links) {
  if (gpu_a < 0 || gpu_a >= num_gpus_ || gpu_b < 0 || gpu_b >= num_gpus_)
    throw Error("route between unknown GPUs " + std::to_string(gpu_a) + " -> " + std::to_string(gpu_b));
  for (int l : links)
    if (l < 0 || l >= static_cast<int>(links_.size()))
      throw Error("route " + std::to_string(gpu_a) + " -> " + std::to_string(gpu_b) + " names unknown link " +
                  std::to_string(l));
  routes_[pair_key(gpu_a, gpu_b)] = std::move(links);
}

const std::vector<int>& TableTopology::route(int gpu_a, int gpu_b) const {
  if (gpu_a == gpu_b) return empty_;
  auto it = routes_.find(pair_key(gpu_a, gpu_b));
  if (it == routes_.end())
    throw Error("no route from GPU " + std::to_string(gpu_a) + " to GPU " + std::to_string(gpu_b))
        .hint("set_route() every pair that communicates");
  return it->second;
}

const std::vector<int>& Topology::host_route(int gpu, int node, bool /*to_host*/) const {
  throw Error("this topology has no host memory to route GPU " + std::to_string(gpu) + " to node " + std::to_string(node))
      .hint("parameter-server and SMDDP collectives need a topology with hosts (a catalog cluster, or set_host_route)");
}

void TableTopology::set_host_route(int gpu, int node, bool to_host, std::vector<int> links) {
  if (gpu < 0 || gpu >= num_gpus_ || node < 0 || node >= (num_gpus_ + gpus_per_node_ - 1) / gpus_per_node_)
    throw Error("host route between unknown GPU " + std::to_string(gpu) + " and node " + std::to_string(node));
  for (int l : links)
    if (l < 0 || l >= static_cast<int>(links_.size()))
      throw Error("host route of GPU " + std::to_string(gpu) + " names unknown link " + std::to_string(l));
  host_routes_[pair_key(gpu, 2 * node + (to_host ? 1 : 0))] = std::move(links);
}

const std::vector<int>& TableTopology::host_route(int gpu, int node, bool to_host) const {
  auto it = host_routes_.find(pair_key(gpu, 2 * node + (to_host ? 1 : 0)));
  if (it == host_routes_.end()) return Topology::host_route(gpu, node, to_host);
  return it->second;
}

TableTopology make_switch_topology(int gpus, double bandwidth_bytes_per_s, double latency_s) {
  TableTopology t(gpus);
  for (int g = 0; g < gpus; ++g) {
    const std::string gpu = std::string("gpu").append(std::to_string(g));
    t.add_link(bandwidth_bytes_per_s, latency_s, gpu + "->switch");
    t.add_link(bandwidth_bytes_per_s, latency_s, std::string("switch->").append(gpu));
  }
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b)
      if (a != b) t.set_route(a, b, {2 * a, 2 * b + 1});
  return t;
}

TableTopology make_two_level_topology(const TwoLevelSpec& spec) {
  if (spec.nodes < 1 || spec.gpus_per_node < 1)
    throw Error("two-level topology needs nodes >= 1 and gpus_per_node >= 1");
  const int k = spec.gpus_per_node;
  const int gpus = spec.nodes * k;
  TableTopology t(gpus, k);
  std::vector<int> up(static_cast<size_t>(gpus)), down(static_cast<size_t>(gpus));
  for (int g = 0; g < gpus; ++g) {
    const std::string name = node_name(g / k) + ".gpu" + std::to_string(g % k);
    up[static_cast<size_t>(g)] = t.add_link(spec.intra_bandwidth_bytes_per_s, spec.intra_latency_s, name + "->switch");
    down[static_cast<size_t>(g)] = t.add_link(spec.intra_bandwidth_bytes_per_s, spec.intra_latency_s, std::string("switch->").append(name));
  }
  std::vector<int> nic_up(static_cast<size_t>(spec.nodes)), nic_down(static_cast<size_t>(spec.nodes));
  if (spec.nodes > 1) {
    for (int n = 0; n < spec.nodes; ++n) {
      const std::string name = node_name(n) + ".nic";
      nic_up[static_cast<size_t>(n)] = t.add_link(spec.nic_bandwidth_bytes_per_s, spec.nic_latency_s, name + "->fabric");
      nic_down[static_cast<size_t>(n)] = t.add_link(spec.nic_bandwidth_bytes_per_s, spec.nic_latency_s, std::string("fabric->").append(name));
    }
  }
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
      if (a / k == b / k)
        t.set_route(a, b, {up[ua], down[ub]});
      else
        t.set_route(a, b, {up[ua], nic_up[static_cast<size_t>(a / k)], nic_down[static_cast<size_t>(b / k)], down[ub]});
    }
  for (int g = 0; g < gpus; ++g)
    for (int n = 0; n < spec.nodes; ++n) {
      const auto ug = static_cast<size_t>(g), un = static_cast<size_t>(n), own = static_cast<size_t>(g / k);
      if (n == g / k) {
        t.set_host_route(g, n, true, {up[ug]});
        t.set_host_route(g, n, false, {down[ug]});
      } else {
        t.set_host_route(g, n, true, {up[ug], nic_up[own], nic_down[un]});
        t.set_host_route(g, n, false, {nic_up[un], nic_down[own], down[ug]});
      }
    }
  return t;
}

}  // namespace trainplan::sim
