// File: trainplan/hwprofiles/cluster.hpp
//
// A cluster: `count` instances of one type, as a graph of devices (GPUs, NVSwitches, PCIe
// switches, CPU sockets, NICs, the network fabric) joined by directed links (each physical
// full-duplex link is two directed links with their own bandwidth). The graph lives in a
// Boost.Graph inside src/; this facade exposes vertices, links and routes.
//
//   hw::Cluster c = hw::Cluster::build(cat.instance("p3dn.24xlarge"), 2, cat);
//   hw::Route r = c.route(0, 5);     // GPU 0 -> GPU 5: no direct NVLink, goes over PCIe/CPU
//   r.hops; r.bottleneck_bandwidth_bytes_per_s; r.latency_s; r.links (link ids in order)
//   c.route(0, 8);                   // node 0 -> node 1 over the NICs and the fabric
//
// GPUs never forward traffic for others: a route may start and end at a GPU but not pass
// through one (CUDA peer-to-peer and NCCL p2p behave this way). A route between two GPUs of
// one node stays inside that node; between nodes it crosses the fabric once. Among the paths
// allowed, the route is the one with the widest bottleneck, then the fewest hops, then (between
// nodes) the one through the NICs that serve its two GPUs (rail-aligned, as NCCL picks NICs),
// then the lexicographically lowest sequence of link ids (deterministic).
//
// Ids: vertices and links are numbered node by node (node k's block is the same as node 0's,
// shifted), each physical link's two directions are consecutive ids (forward = lower device
// first), and the fabric vertex follows the nodes.
//
// NVLink domains spanning instances (EC2 UltraServers, InstanceType::topology
// .nvlink_domain_instances = n > 1, p6e-gb200): after the fabric comes one `nvlink_domain`
// vertex per n consecutive instances, joined to each of their NVSwitches; GPUs of one domain
// route over NVLink (the same bandwidth and latency as inside an instance), GPUs of different
// domains over the NICs and the fabric.
//
// Availability Zones (Placement::azs = n > 1, placement.hpp): the instances are split into n
// contiguous blocks, one per AZ. Each AZ has its own fabric vertex (EFA does not cross AZs);
// every node gets one more NIC vertex, "ena" (TCP, hanging off CPU socket 0: NCCL's socket
// transport stages data in host memory), joined to one "region" vertex by an inter_az link of
// inter_az_bandwidth_bytes_per_s() and half the catalog's inter-AZ latency. GPUs of one AZ
// route over EFA as before; GPUs of two AZs only through their nodes' ENA and the region.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::hw {

enum class VertexKind { gpu, nvswitch, pcie_switch, cpu, nic, fabric, nvlink_domain, region };
enum class LinkKind { nvlink, nvswitch, pcie, inter_socket, nic, network, inter_az };
std::string_view vertex_kind_name(VertexKind k);
std::string_view link_kind_name(LinkKind k);

struct Vertex {
  int id = 0;
  VertexKind kind = VertexKind::gpu;
  int node = 0;         // instance index; the fabric and NVLink domains have node -1
  int local_index = 0;  // index among vertices of this kind in its node
  std::string name;     // "n0.gpu3", "n1.nic0", "fabric"
  /// NIC vertices: network devices bonded into this vertex. When an instance has more NICs
  /// than GPUs (p5: 32 EFA for 8 GPUs), the NICs local to one GPU are one vertex, since NCCL
  /// stripes that GPU's traffic over all of them (multi-rail). 0 for other kinds.
  int devices = 0;
};

struct Link {
  int id = 0;
  LinkKind kind = LinkKind::pcie;
  int src = 0;  // vertex ids
  int dst = 0;
  double bandwidth_bytes_per_s = 0;  // this direction
  double latency_s = 0;
  std::string name;     // "n0.gpu0->n0.gpu3 nvlink x2"
};

struct Route {
  std::vector<int> links;  // link ids from source to destination
  int hops = 0;
  double bottleneck_bandwidth_bytes_per_s = 0;
  double latency_s = 0;    // sum of link latencies
};

class Cluster {
 public:
  /// Builds `count` instances of `type`. Throws Error if count < 1 or the type is malformed.
  static Cluster build(const InstanceType& type, int count, const Catalog& catalog);
  /// The same placed over `placement.azs` AZs (placement.hpp). Throws Error when azs is not in
  /// [1, min(count, kMaxAzs)], when the catalog has no placement facts (azs > 1), or for an
  /// UltraServer type (its NVLink domain lies in one AZ) with azs > 1.
  static Cluster build(const InstanceType& type, int count, const Catalog& catalog, const Placement& placement);

  Cluster(Cluster&&) noexcept;
  Cluster& operator=(Cluster&&) noexcept;
  Cluster(const Cluster&);
  ~Cluster();

  const InstanceType& instance() const;
  const GpuSpec& gpu_spec() const;
  int num_nodes() const;
  int gpus_per_node() const;
  int num_gpus() const { return num_nodes() * gpus_per_node(); }
  const Placement& placement() const;
  /// The catalog's placement facts the cluster was built with (inter-AZ and inter-region
  /// prices for the job's cost; not present() when the catalog has none).
  const PlacementFacts& placement_facts() const;
  /// AZ index (0..azs-1) of instance `node` (contiguous blocks, placement.hpp).
  int az_of_node(int node) const;
  int az_of_gpu(int gpu) const { return az_of_node(node_of(gpu)); }
  /// Global GPU index g = node * gpus_per_node + local.
  int node_of(int gpu) const { return gpu / gpus_per_node(); }
  /// Vertex id of global GPU g.
  int gpu_vertex(int gpu) const;

  const std::vector<Vertex>& vertices() const;
  const std::vector<Link>& links() const;

  /// Route between two GPUs (global indices); cached, thread-safe (the reference stays valid
  /// as long as the Cluster). a == b gives an empty route with infinite bandwidth. Throws
  /// Error for an index out of range.
  const Route& route(int gpu_a, int gpu_b) const;
  /// The same route, not kept by the cluster: either a route the cluster holds anyway (returned
  /// as is) or `scratch` filled with it (its capacity reused, so a loop allocates nothing), for
  /// callers that read each pair once (a search visiting hundreds of cluster sizes would
  /// otherwise keep every ring pair of each). The reference is valid until `scratch` changes.
  const Route& route_into(int gpu_a, int gpu_b, Route& scratch) const;

  /// An order of `gpus` for a ring collective that maximizes the slowest ring link (ties: the
  /// fewest hops, then lexicographic). Within a node this finds NVLink rings in cube-meshes;
  /// across nodes it keeps each node's GPUs contiguous.
  std::vector<int> ring_order(const std::vector<int>& gpus) const;

  /// Intra-node link matrix for display, like `nvidia-smi topo -m`: "X", "NV2" (2 NVLink
  /// lanes), "NVS" (NVSwitch), "PIX" (same PCIe switch), "NODE" (same socket), "SYS" (across
  /// sockets). matrix[i][j] for local GPUs i, j.
  std::vector<std::vector<std::string>> intra_node_matrix() const;

 private:
  struct Impl;
  struct RouteSource;
  explicit Cluster(std::unique_ptr<Impl> impl);
  RouteSource route_source(int gpu_a, int gpu_b) const;
  // build() with `domain` instances per NVLink domain (the route templates of nodes in
  // different domains come from a 2-node graph built with domain 1).
  // `node_az`: AZ per node; `zoned`: the graph has the inter-AZ vertices (ENA per node, AZ
  // fabrics, region), so that a 2-node template graph has the same link blocks.
  static Cluster build_grouped(const InstanceType& type, int count, const Catalog& catalog, int domain,
                               const Placement& placement, const std::vector<int>& node_az);
  std::unique_ptr<Impl> impl_;
};

/// One instance type in detail, as `trainplan catalog NAME --json` writes it: {"instance",
/// "gpu", "link_matrix" (intra_node_matrix of one instance), "route_bandwidth_bytes_per_s"
/// (GPU x GPU bottleneck, null on the diagonal), "sources"}.
json::Json instance_detail_json(const Catalog& catalog, const InstanceType& instance);

/// A cluster's topology in numbers: instance type, nodes, GPUs, vertex and link counts by
/// kind (with the slowest and fastest directed link of each kind), and the route between the
/// first GPU and the farthest one (the next node's first GPU when there is one).
json::Json cluster_summary_json(const Cluster& cluster);

}  // namespace trainplan::hw
