// File: trainplan/simulator/topology.hpp
//
// The network as the simulator sees it: directed links (bandwidth and latency per direction)
// and, for every pair of GPUs, the route (the list of link ids a transfer crosses). This is
// the seam between the simulator and the hardware library: in production `ClusterTopology`
// reads an hw::Cluster (NVLink, NVSwitch, PCIe, NIC/EFA, inter-node fabric); tests and
// what-if studies build a `TableTopology` by hand.
//
//   sim::TableTopology t = sim::make_switch_topology(/*gpus=*/8, /*bw=*/300e9, /*lat=*/1e-6);
//   t.route(0, 5);              // {up link of GPU 0, down link of GPU 5}
//
//   sim::TableTopology two = sim::make_two_level_topology(
//       {.nodes = 4, .gpus_per_node = 8, .intra_bandwidth_bytes_per_s = 300e9,
//        .intra_latency_s = 1e-6, .nic_bandwidth_bytes_per_s = 50e9, .nic_latency_s = 5e-6});
//   two.route(0, 9);            // GPU 0 -> switch -> node 0 NIC -> node 1 NIC -> GPU 9
//
//   sim::ClusterTopology ct(cluster);   // hw::Cluster links, routes and ring order
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace trainplan::hw {
class Cluster;
}

namespace trainplan::sim {

/// What a link is, as NCCL's latency model sees it: NVLink (direct or through NVSwitch),
/// PCIe (including the inter-socket hop), or the network (NIC and fabric). Hand-built
/// topologies leave it `other`: their collectives keep the plain per-hop latency model.
enum class LinkClass : uint8_t { other, nvlink, pcie, net };

/// One directed link.
struct LinkSpec {
  double bandwidth_bytes_per_s = 0;  // this direction
  double latency_s = 0;              // one hop
  std::string name;
  LinkClass cls = LinkClass::other;
};

/// Links and routes between GPUs (global GPU indices 0 .. num_gpus()-1).
class Topology {
 public:
  virtual ~Topology() = default;
  virtual int num_gpus() const = 0;
  virtual const std::vector<LinkSpec>& links() const = 0;
  /// Link ids from `gpu_a` to `gpu_b` in order; empty when a == b. Throws Error when there is
  /// no route. The reference stays valid for the topology's lifetime.
  virtual const std::vector<int>& route(int gpu_a, int gpu_b) const = 0;
  /// The same route for a caller that reads it once: either a route the topology keeps (as
  /// route()) or `scratch` filled with it (its capacity reused); valid until `scratch` changes
  /// or the topology goes. ClusterTopology fills `scratch` for routes its cluster would
  /// otherwise translate and keep under a lock (every pair of a 1024-GPU cluster's groups),
  /// so threads building patterns of one cluster neither wait for each other nor grow it.
  virtual const std::vector<int>& route_scratch(int gpu_a, int gpu_b, std::vector<int>& /*scratch*/) const {
    return route(gpu_a, gpu_b);
  }
  /// Instance (node) index of a GPU; hierarchical collectives group ranks by it.
  virtual int node_of(int gpu) const = 0;
  /// Availability Zone of a GPU's instance (0 .. azs-1); bytes between two AZs are billed
  /// (StepResult::inter_az_bytes). The default: one AZ.
  virtual int zone_of(int /*gpu*/) const { return 0; }
  /// The order in which a ring collective visits `gpus` (a permutation of them).
  virtual std::vector<int> ring_order(const std::vector<int>& gpus) const = 0;
  /// Links between GPU `gpu` and the host memory (CPUs) of node `node`: GPU -> host when
  /// `to_host`, host -> GPU otherwise. Parameter servers run there (the TensorFlow parameter
  /// server, SMDDP's servers). The default throws Error: a topology without hosts cannot run
  /// those algorithms.
  virtual const std::vector<int>& host_route(int gpu, int node, bool to_host) const;
  /// Sum of link latencies along route(a, b).
  double route_latency_s(int gpu_a, int gpu_b) const;
  /// What NCCL's tuning model reads from the host: the GPU architecture (compute capability
  /// x 10: 70, 80, 90, 100; 0 unknown) and whether the host CPUs are AMD (NCCL charges 2 us
  /// of network-post overhead per step there, 1 us on Intel).
  /// `simple_only`: the network plugin limits NCCL to the Simple protocol (AWS EFA: the
  /// aws-ofi-nccl plugin sets NCCL_PROTO=simple, as EFA does not keep LL/LL128's ordering).
  /// `channels_in_node` / `channels_across_nodes`: thread blocks (one per channel, each
  /// holding an SM for the whole collective) NCCL launches for a ring or tree collective
  /// inside one node / across nodes (nccl_channels()); 0: no SM contention modelled.
  struct NcclHost {
    int compute_capability = 0;
    bool amd_cpu = false;
    bool simple_only = false;
    int channels_in_node = 0;
    int channels_across_nodes = 0;
    /// NVLink SHARP: the node's NVSwitch reduces in the switch (NVSwitch 3, sm_90 and later),
    /// so NCCL can run NVLS / NVLSTree (collectives.hpp).
    bool nvls = false;
    /// The per-message latency the network plugin reports to NCCL (hw::NetworkSpec
    /// nccl_net_latency_s): NCCL's tuning model adds it to each network step, twice under Simple.
    double net_latency_s = 0;
    /// The network is EFA (hw::NetworkSpec efa): aws-ofi-nccl's tuner model gives NCCL's tree
    /// half the ring's network bandwidth there (collectives.cpp, kEfaTreeShare).
    bool efa = false;
  };
  virtual NcclHost nccl_host() const { return {}; }
};

/// A topology given link by link and route by route. ring_order keeps the given order.
class TableTopology final : public Topology {
 public:
  /// `gpus_per_node` <= 0 means all GPUs in one node.
  explicit TableTopology(int num_gpus, int gpus_per_node = 0);

  /// Adds a directed link; returns its id (0, 1, 2, ...).
  int add_link(double bandwidth_bytes_per_s, double latency_s, std::string name = {});
  /// Sets the route a -> b (link ids in order). Throws Error on unknown GPUs or links.
  void set_route(int gpu_a, int gpu_b, std::vector<int> links);

  int num_gpus() const override { return num_gpus_; }
  const std::vector<LinkSpec>& links() const override { return links_; }
  const std::vector<int>& route(int gpu_a, int gpu_b) const override;
  int node_of(int gpu) const override { return gpu / gpus_per_node_; }
  std::vector<int> ring_order(const std::vector<int>& gpus) const override { return gpus; }
  /// Sets host_route(gpu, node, to_host). Throws Error on an unknown GPU, node or link.
  void set_host_route(int gpu, int node, bool to_host, std::vector<int> links);
  const std::vector<int>& host_route(int gpu, int node, bool to_host) const override;

 private:
  int num_gpus_;
  int gpus_per_node_;
  std::vector<LinkSpec> links_;
  std::unordered_map<uint64_t, std::vector<int>> routes_;
  std::unordered_map<uint64_t, std::vector<int>> host_routes_;
  std::vector<int> empty_;
};

/// `gpus` GPUs on one non-blocking switch: GPU g has an up link (g -> switch, id 2g) and a
/// down link (switch -> g, id 2g+1), each of `bandwidth_bytes_per_s` and `latency_s`, so
/// route(a, b) = {2a, 2b+1} with latency 2 * latency_s. The NVSwitch shape.
TableTopology make_switch_topology(int gpus, double bandwidth_bytes_per_s, double latency_s);

struct TwoLevelSpec {
  int nodes = 1;
  int gpus_per_node = 1;
  double intra_bandwidth_bytes_per_s = 0;  // per GPU, per direction, to the node switch
  double intra_latency_s = 0;              // per hop
  double nic_bandwidth_bytes_per_s = 0;    // per node, per direction (all NICs together)
  double nic_latency_s = 0;                // per hop (node -> fabric, fabric -> node)
};

/// `nodes` switch nodes joined by a non-blocking fabric. Links: per GPU an up and a down
/// link to its node switch; per node one NIC up link (node -> fabric) and one NIC down link
/// (fabric -> node), which every inter-node transfer of the node shares (the per-instance NIC
/// cap). Intra-node route: {gpu up, gpu down}; inter-node: {gpu up, nic up, nic down, gpu down}.
/// The host of a node sits at its switch: host routes are the GPU routes without the far GPU's
/// link ({gpu up} to its own host, {gpu up, nic up, nic down} to another node's; back alike).
TableTopology make_two_level_topology(const TwoLevelSpec& spec);

/// An hw::Cluster seen through the simulator's seam. Keeps a reference to the cluster, which
/// must outlive it.
class ClusterTopology final : public Topology {
 public:
  explicit ClusterTopology(const hw::Cluster& cluster);
  int num_gpus() const override;
  const std::vector<LinkSpec>& links() const override { return links_; }
  const std::vector<int>& route(int gpu_a, int gpu_b) const override;
  const std::vector<int>& route_scratch(int gpu_a, int gpu_b, std::vector<int>& scratch) const override;
  int node_of(int gpu) const override;
  int zone_of(int gpu) const override;
  std::vector<int> ring_order(const std::vector<int>& gpus) const override;
  NcclHost nccl_host() const override;
  /// Between a GPU and the CPU socket its PCIe path leads to (its own node), or the socket the
  /// route to the node's GPU of the same local index passes (another node: where the NIC's
  /// traffic lands in host memory; with GPUDirect RDMA the NIC's PCIe switch's uplink to it).
  const std::vector<int>& host_route(int gpu, int node, bool to_host) const override;

 private:
  const hw::Cluster& cluster_;
  std::vector<LinkSpec> links_;
  std::vector<std::vector<int>> out_links_;  // per vertex
  mutable std::mutex host_mutex_;
  mutable std::unordered_map<uint64_t, std::vector<int>> host_routes_;  // (gpu, node, to_host), built on first use
};

}  // namespace trainplan::sim
