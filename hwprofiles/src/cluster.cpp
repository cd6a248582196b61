#include "trainplan/hwprofiles/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "cluster_graph.hpp"
#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::hw {

std::string_view vertex_kind_name(VertexKind k) {
  switch (k) {
    case VertexKind::gpu: return "gpu";
    case VertexKind::nvswitch: return "nvswitch";
    case VertexKind::pcie_switch: return "pcie_switch";
    case VertexKind::cpu: return "cpu";
    case VertexKind::nic: return "nic";
    case VertexKind::fabric: return "fabric";
    case VertexKind::nvlink_domain: return "nvlink_domain";
    case VertexKind::region: return "region";
  }
  return "?";
}

std::string_view link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::nvswitch: return "nvswitch";
    case LinkKind::pcie: return "pcie";
    case LinkKind::inter_socket: return "inter_socket";
    case LinkKind::nic: return "nic";
    case LinkKind::network: return "network";
    case LinkKind::inter_az: return "inter_az";
  }
  return "?";
}

namespace {

// Where everything sits inside one node (local vertex offsets, identical for every node).
struct NodeLayout {
  int gpus = 0;
  int nvswitch = -1;        // local vertex of the NVSwitch, -1 if none
  int first_switch = 0;     // local vertex of PCIe switch 0
  int switches = 0;
  int first_cpu = 0;
  int sockets = 1;
  int first_nic = 0;
  int nic_vertices = 0;
  int devices_per_nic_vertex = 1;
  int ena = -1;             // local vertex of the ENA (TCP to other AZs), -1 if none
  int vertices = 0;         // per node
  std::vector<int> gpu_socket;  // per local GPU
  std::vector<int> gpu_switch;  // per local GPU: PCIe switch index, -1 if on a root port
  std::vector<int> gpu_nic;     // per local GPU: the NIC vertex index that serves it
  std::vector<int> nic_first_gpu;  // per NIC vertex: first GPU it serves
};

NodeLayout make_layout(const InstanceType& t, bool zoned) {
  NodeLayout L;
  const int g = t.gpu_count;
  L.gpus = g;
  int next = g;
  if (t.topology.kind == IntraNodeKind::nvswitch) L.nvswitch = next++;
  L.switches = t.topology.gpus_per_pcie_switch > 0 ? g / t.topology.gpus_per_pcie_switch : 0;
  L.first_switch = next;
  next += L.switches;
  L.sockets = t.topology.sockets;
  L.first_cpu = next;
  next += L.sockets;
  const int nics = t.network.nics;
  L.nic_vertices = nics >= g ? g : nics;
  L.devices_per_nic_vertex = nics >= g ? nics / g : 1;
  L.first_nic = next;
  next += L.nic_vertices;
  if (zoned) L.ena = next++;
  L.vertices = next;
  const int per_socket = g > 1 ? g / L.sockets : 1;
  for (int i = 0; i < g; ++i) {
    L.gpu_socket.push_back(g > 1 ? i / per_socket : 0);
    L.gpu_switch.push_back(L.switches > 0 ? i / t.topology.gpus_per_pcie_switch : -1);
    L.gpu_nic.push_back(nics >= g ? i : i / (g / nics));
  }
  for (int j = 0; j < L.nic_vertices; ++j) L.nic_first_gpu.push_back(nics >= g ? j : j * (g / nics));
  return L;
}

}  // namespace

struct Cluster::Impl {
  InstanceType type;
  GpuSpec gpu;
  int count = 0;
  // Instances per NVLink switch domain (UltraServer) in this graph; 1 = the domain ends at the
  // instance. Domain vertices exist whenever the type's nvlink_domain_instances > 1, so that
  // every node's link block is the same whatever the grouping.
  int domain = 1;
  Placement placement;
  PlacementFacts facts;
  std::vector<int> node_az;     // AZ per node
  std::vector<int> az_fabric;   // fabric vertex per AZ (az_fabric[0] == fabric)
  int region = -1;              // the region vertex joining the nodes' ENAs (zoned graphs)
  double inter_az_bandwidth = 0;
  double inter_az_latency = 0;
  NodeLayout layout;
  int links_per_node = 0;
  int fabric = 0;
  std::vector<Vertex> vertices;
  std::vector<Link> links;
  detail::Graph graph;  // built only for count <= 2 (the route templates' search)
  // Route templates (every node is identical): inside node 0, node 0 -> 1 and node 1 -> 0,
  // indexed [a * gpus_per_node + b] by local GPU indices.
  std::vector<Route> intra, up, down;
  // Node 0 -> 1 and 1 -> 0 when the two are in different NVLink domains (only when domain > 1
  // and the cluster spans several domains): the EFA routes.
  std::vector<Route> up_x, down_x;
  // Node 0 -> 1 and 1 -> 0 when the two are in different AZs (zoned graphs): over the ENAs.
  std::vector<Route> up_z, down_z;
  // Routes between other nodes, translated from the templates on first use.
  mutable std::shared_mutex mutex;
  mutable std::unordered_map<uint64_t, Route> cache;
  // Best ring order of a node's GPU subset (local indices, whether the ring stays in one
  // node), shared by every ring_order() call: searches ask for the same subsets many times.
  mutable std::mutex ring_mutex;
  mutable std::map<std::pair<std::vector<int>, bool>, std::vector<int>> ring_memo;

  Impl() = default;
  Impl(const Impl& o)
      : type(o.type), gpu(o.gpu), count(o.count), domain(o.domain), placement(o.placement), facts(o.facts), node_az(o.node_az),
        az_fabric(o.az_fabric), region(o.region), inter_az_bandwidth(o.inter_az_bandwidth),
        inter_az_latency(o.inter_az_latency), layout(o.layout), links_per_node(o.links_per_node),
        fabric(o.fabric), vertices(o.vertices), links(o.links), graph(o.graph), intra(o.intra),
        up(o.up), down(o.down), up_x(o.up_x), down_x(o.down_x), up_z(o.up_z), down_z(o.down_z) {}

  bool zoned() const { return layout.ena >= 0; }

  bool has_domains() const { return type.topology.nvlink_domain_instances > 1; }
  // Vertex of the NVLink domain that node k belongs to (after the fabric vertex).
  int domain_vertex(int k) const { return fabric + 1 + k / domain; }

  int vertex(int node, int local) const { return node * layout.vertices + local; }

  void add_vertex(VertexKind kind, int node, int local_index, std::string name, int devices = 0) {
    Vertex v;
    v.id = static_cast<int>(vertices.size());
    v.kind = kind;
    v.node = node;
    v.local_index = local_index;
    v.name = std::move(name);
    v.devices = devices;
    vertices.push_back(std::move(v));
  }

  // One physical full-duplex link = two directed links with consecutive ids, u -> v first.
  void add_link(int u, int v, LinkKind kind, double bandwidth, double latency, const std::string& suffix = "") {
    TP_ASSERT(u < v);
    for (auto [a, b] : {std::pair{u, v}, std::pair{v, u}}) {
      Link l;
      l.id = static_cast<int>(links.size());
      l.kind = kind;
      l.src = a;
      l.dst = b;
      l.bandwidth_bytes_per_s = bandwidth;
      l.latency_s = latency;
      l.name = fmt::format("{}->{} {}{}", vertices[static_cast<size_t>(a)].name, vertices[static_cast<size_t>(b)].name,
                           link_kind_name(kind), suffix);
      links.push_back(std::move(l));
    }
  }

  void build_node(int k) {
    const NodeLayout& L = layout;
    const std::string n = fmt::format("n{}.", k);
    for (int i = 0; i < L.gpus; ++i) add_vertex(VertexKind::gpu, k, i, n + fmt::format("gpu{}", i));
    if (L.nvswitch >= 0) add_vertex(VertexKind::nvswitch, k, 0, n + "nvswitch");
    for (int s = 0; s < L.switches; ++s) add_vertex(VertexKind::pcie_switch, k, s, n + fmt::format("pcie{}", s));
    for (int s = 0; s < L.sockets; ++s) add_vertex(VertexKind::cpu, k, s, n + fmt::format("cpu{}", s));
    for (int j = 0; j < L.nic_vertices; ++j)
      add_vertex(VertexKind::nic, k, j, n + fmt::format("nic{}", j), L.devices_per_nic_vertex);
    if (L.ena >= 0) add_vertex(VertexKind::nic, k, L.nic_vertices, n + "ena", 1);
  }

  void link_node(int k) {
    const IntraNodeTopology& t = type.topology;
    const NetworkSpec& net = type.network;
    const NodeLayout& L = layout;
    if (t.kind == IntraNodeKind::nvlink_mesh)
      for (int i = 0; i < L.gpus; ++i)
        for (int j = i + 1; j < L.gpus; ++j)
          if (int lanes = t.nvlink_lanes[i][j]; lanes > 0)
            add_link(vertex(k, i), vertex(k, j), LinkKind::nvlink, lanes * t.nvlink_lane_bandwidth_bytes_per_s,
                     t.nvlink_latency_s, fmt::format(" x{}", lanes));
    if (L.nvswitch >= 0)
      for (int i = 0; i < L.gpus; ++i)
        add_link(vertex(k, i), vertex(k, L.nvswitch), LinkKind::nvswitch, t.nvswitch_bandwidth_bytes_per_s,
                 t.nvlink_latency_s);
    for (int i = 0; i < L.gpus; ++i) {
      int parent = L.gpu_switch[i] >= 0 ? L.first_switch + L.gpu_switch[i] : L.first_cpu + L.gpu_socket[i];
      add_link(vertex(k, i), vertex(k, parent), LinkKind::pcie, t.pcie_bandwidth_bytes_per_s, t.pcie_latency_s);
    }
    for (int s = 0; s < L.switches; ++s) {
      int socket = L.gpu_socket[s * t.gpus_per_pcie_switch];
      add_link(vertex(k, L.first_switch + s), vertex(k, L.first_cpu + socket), LinkKind::pcie,
               t.pcie_switch_uplink_bytes_per_s, t.pcie_latency_s);
    }
    for (int a = 0; a < L.sockets; ++a)
      for (int b = a + 1; b < L.sockets; ++b)
        add_link(vertex(k, L.first_cpu + a), vertex(k, L.first_cpu + b), LinkKind::inter_socket,
                 t.inter_socket_bandwidth_bytes_per_s, t.inter_socket_latency_s);
    // NICs hang off the PCIe switch of the first GPU they serve when GPUDirect RDMA lets the
    // GPU reach them directly; otherwise data is staged in host memory, so they hang off the
    // CPU socket and GPU traffic crosses it.
    for (int j = 0; j < L.nic_vertices; ++j) {
      int first = L.nic_first_gpu[j];
      int attach = net.gpudirect_rdma && L.gpu_switch[first] >= 0 ? L.first_switch + L.gpu_switch[first]
                                                                   : L.first_cpu + L.gpu_socket[first];
      add_link(vertex(k, attach), vertex(k, L.first_nic + j), LinkKind::nic,
               t.pcie_bandwidth_bytes_per_s * L.devices_per_nic_vertex, t.pcie_latency_s);
    }
    for (int j = 0; j < L.nic_vertices; ++j)
      add_link(vertex(k, L.first_nic + j), az_fabric[static_cast<size_t>(node_az[static_cast<size_t>(k)])], LinkKind::network,
               net.nic_bandwidth_bytes_per_s() * L.devices_per_nic_vertex, 0.5 * net.latency_s);
    // Other AZs: TCP from host memory (socket 0) over the ENA, then the Region's network.
    if (L.ena >= 0) {
      add_link(vertex(k, L.first_cpu), vertex(k, L.ena), LinkKind::nic, inter_az_bandwidth, t.pcie_latency_s, " ena");
      add_link(vertex(k, L.ena), region, LinkKind::inter_az, inter_az_bandwidth, 0.5 * inter_az_latency);
    }
    // The node's NVSwitch joins its UltraServer's NVLink switch domain: wide enough for every
    // GPU's full NVLink bandwidth and without latency of its own, since the NVLink switch
    // trays are one tier (a GPU reaches any GPU of the domain in the same two NVLink hops as
    // one of its own instance).
    if (has_domains())
      add_link(vertex(k, L.nvswitch), domain_vertex(k), LinkKind::nvswitch, L.gpus * t.nvswitch_bandwidth_bytes_per_s, 0.0,
               " domain");
  }

  // Best route from local GPU a of node na to local GPU b of node nb. Between nodes, a route
  // that uses the NICs serving a and b (rail-aligned, as NCCL picks them) wins among routes
  // of equal width and length.
  Route search(int na, int a, int nb, int b) const {
    const int src = vertex(na, a), dst = vertex(nb, b);
    detail::RouteScope scope{na, nb, {}};
    // Two nodes of one AZ talk over EFA only: their ENAs are for other AZs.
    if (zoned() && na != nb && node_az[static_cast<size_t>(na)] == node_az[static_cast<size_t>(nb)]) {
      scope.excluded.assign(vertices.size(), 0);
      scope.excluded[static_cast<size_t>(vertex(na, layout.ena))] = 1;
      scope.excluded[static_cast<size_t>(vertex(nb, layout.ena))] = 1;
    }
    auto best = detail::search_route(graph, vertices, links, src, dst, scope);
    TP_ASSERT_MSG(best.has_value(), "cluster graph is disconnected");
    if (na == nb) return *best;
    if (scope.excluded.empty()) scope.excluded.assign(vertices.size(), 0);
    for (int j = 0; j < layout.nic_vertices; ++j) {
      if (j != layout.gpu_nic[a]) scope.excluded[static_cast<size_t>(vertex(na, layout.first_nic + j))] = 1;
      if (j != layout.gpu_nic[b]) scope.excluded[static_cast<size_t>(vertex(nb, layout.first_nic + j))] = 1;
    }
    auto aligned = detail::search_route(graph, vertices, links, src, dst, scope);
    if (aligned && aligned->bottleneck_bandwidth_bytes_per_s == best->bottleneck_bandwidth_bytes_per_s &&
        aligned->hops == best->hops)
      return *aligned;
    return *best;
  }

  // A template route moved to other nodes: links of template node `from_a` go to node `na`,
  // those of `from_b` to `nb` (each node's link block is node 0's, shifted).
  Route translate(const Route& r, int from_a, int na, int nb) const {
    Route out;
    translate_into(r, from_a, na, nb, out);
    return out;
  }
  void translate_into(const Route& r, int from_a, int na, int nb, Route& out) const {
    out.hops = r.hops;
    out.bottleneck_bandwidth_bytes_per_s = r.bottleneck_bandwidth_bytes_per_s;
    out.latency_s = r.latency_s;
    out.links.assign(r.links.begin(), r.links.end());
    for (int& id : out.links) {
      const int owner = id / links_per_node;
      const int local = id % links_per_node;
      id = (owner == from_a ? na : nb) * links_per_node + local;
    }
  }
};

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Cluster::Cluster(Cluster&&) noexcept = default;
Cluster& Cluster::operator=(Cluster&&) noexcept = default;
Cluster::Cluster(const Cluster& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Cluster::~Cluster() = default;

Cluster Cluster::build(const InstanceType& type, int count, const Catalog& catalog) {
  return build(type, count, catalog, Placement{});
}

Cluster Cluster::build(const InstanceType& type, int count, const Catalog& catalog, const Placement& placement) {
  const int azs = placement.azs;
  if (count >= 1 && (azs < 1 || azs > kMaxAzs || azs > count))
    throw Error(fmt::format("cannot place {} instance{} in {} Availability Zones", count, count == 1 ? "" : "s", azs))
        .hint(fmt::format("use 1 to {} AZs (at most one per instance; a Region has at most {})", std::min(count, kMaxAzs), kMaxAzs));
  if (azs > 1 && !catalog.placement().present())
    throw Error("the catalog has no placement facts (inter-AZ latency and bandwidth)")
        .hint("add a \"placement\" table to the catalog (as hwprofiles/catalog/placement.json) or use one AZ");
  if (azs > 1 && type.topology.nvlink_domain_instances > 1)
    throw Error(fmt::format("{} instances form NVLink domains of {} (UltraServers) that lie in one AZ", type.name,
                            type.topology.nvlink_domain_instances))
        .hint("place the job in one AZ");
  // count < 1: build_grouped says so.
  return build_grouped(type, count, catalog, type.topology.nvlink_domain_instances, placement,
                       count >= 1 ? az_of_nodes(count, azs) : std::vector<int>{});
}

Cluster Cluster::build_grouped(const InstanceType& type, int count, const Catalog& catalog, int domain,
                               const Placement& placement, const std::vector<int>& node_az) {
  if (count < 1)
    throw Error(fmt::format("a cluster needs at least 1 instance, got {}", count)).hint("use an instance count of 1 or more");
  if (static_cast<int64_t>(count) * type.gpu_count > limits::kMaxGpus)
    throw Error(fmt::format("{} x {} is {} GPUs, more than the {} trainplan models", count, type.name,
                            static_cast<int64_t>(count) * type.gpu_count, limits::kMaxGpus))
        .hint("use fewer instances (the limit lies far beyond any real training job)");
  try {
    check_instance(type);
  } catch (Error& e) {
    e.at(type.file.empty() ? type.name : type.file + " (" + type.name + ")", e.pointer());
    throw;
  }
  auto impl = std::make_unique<Impl>();
  impl->type = type;
  impl->gpu = catalog.gpu(type.gpu);
  impl->count = count;
  impl->domain = domain;
  impl->placement = placement;
  impl->facts = catalog.placement();
  impl->node_az = node_az;
  const bool zoned = placement.azs > 1;
  impl->layout = make_layout(type, zoned);
  if (zoned) {
    impl->inter_az_bandwidth = inter_az_bandwidth_bytes_per_s(type, catalog.placement());
    impl->inter_az_latency = catalog.placement().inter_az_latency_s;
  }
  const int vn = impl->layout.vertices;
  impl->fabric = count * vn;
  for (int k = 0; k < count; ++k) impl->build_node(k);
  impl->add_vertex(VertexKind::fabric, -1, 0, "fabric");
  impl->az_fabric.push_back(impl->fabric);
  if (impl->has_domains())
    for (int d = 0; d * domain < count; ++d) impl->add_vertex(VertexKind::nvlink_domain, -1, d, fmt::format("nvl_domain{}", d));
  if (zoned) {
    // AZ 0's fabric is "fabric"; the other AZs' fabrics and the region follow.
    for (int z = 1; z < placement.azs; ++z) {
      impl->az_fabric.push_back(static_cast<int>(impl->vertices.size()));
      impl->add_vertex(VertexKind::fabric, -1, z, fmt::format("fabric_az{}", z));
    }
    impl->region = static_cast<int>(impl->vertices.size());
    impl->add_vertex(VertexKind::region, -1, 0, "region");
  }
  for (int k = 0; k < count; ++k) {
    impl->link_node(k);
    if (k == 0) impl->links_per_node = static_cast<int>(impl->links.size());
  }
  TP_ASSERT(static_cast<int>(impl->links.size()) == count * impl->links_per_node);

  // The graph is searched only for the route templates, which clusters of more than two nodes
  // take from a 2-node cluster (below): theirs would never be read.
  if (count <= 2) {
    impl->graph = detail::Graph(impl->vertices.size());
    for (const Link& l : impl->links)
      boost::add_edge(static_cast<size_t>(l.src), static_cast<size_t>(l.dst), detail::EdgeProps{l.id}, impl->graph);
  }

  if (impl->has_domains() && domain > 1 && count > domain) {
    // Nodes in different NVLink domains: the routes of a 2-node cluster whose nodes are in
    // domains of their own (same link ids: every node's link block is the same).
    Cluster apart = build_grouped(type, 2, catalog, 1, placement, {0, 0});
    impl->up_x = std::move(apart.impl_->up);
    impl->down_x = std::move(apart.impl_->down);
  }
  if (zoned && count > 2) {
    // Nodes in different AZs: the routes of a 2-node cluster whose nodes are in two AZs.
    Cluster apart = build_grouped(type, 2, catalog, domain, placement, {0, 1});
    impl->up_z = std::move(apart.impl_->up);
    impl->down_z = std::move(apart.impl_->down);
  }
  if (count > 2) {
    // Nodes 0 and 1 and their link ids are the same in a 2-node cluster, whose graph is far
    // smaller to search: take the route templates from there.
    Cluster pair = build_grouped(type, 2, catalog, domain, placement, {0, 0});
    impl->intra = std::move(pair.impl_->intra);
    impl->up = std::move(pair.impl_->up);
    impl->down = std::move(pair.impl_->down);
    return Cluster(std::move(impl));
  }
  const int g = type.gpu_count;
  impl->intra.resize(static_cast<size_t>(g * g));
  for (int a = 0; a < g; ++a)
    for (int b = 0; b < g; ++b) {
      Route& r = impl->intra[static_cast<size_t>(a * g + b)];
      if (a == b) r.bottleneck_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
      else r = impl->search(0, a, 0, b);
    }
  if (count == 2) {
    impl->up.resize(static_cast<size_t>(g * g));
    impl->down.resize(static_cast<size_t>(g * g));
    for (int a = 0; a < g; ++a)
      for (int b = 0; b < g; ++b) {
        impl->up[static_cast<size_t>(a * g + b)] = impl->search(0, a, 1, b);
        impl->down[static_cast<size_t>(a * g + b)] = impl->search(1, a, 0, b);
      }
    if (zoned && node_az[0] != node_az[1]) {
      impl->up_z = impl->up;
      impl->down_z = impl->down;
    }
  }
  return Cluster(std::move(impl));
}

const InstanceType& Cluster::instance() const { return impl_->type; }
const GpuSpec& Cluster::gpu_spec() const { return impl_->gpu; }
int Cluster::num_nodes() const { return impl_->count; }
int Cluster::gpus_per_node() const { return impl_->type.gpu_count; }
const Placement& Cluster::placement() const { return impl_->placement; }
const PlacementFacts& Cluster::placement_facts() const { return impl_->facts; }
int Cluster::az_of_node(int node) const {
  TP_ASSERT(node >= 0 && node < impl_->count);
  return impl_->node_az[static_cast<size_t>(node)];
}
const std::vector<Vertex>& Cluster::vertices() const { return impl_->vertices; }
const std::vector<Link>& Cluster::links() const { return impl_->links; }

int Cluster::gpu_vertex(int gpu) const {
  if (gpu < 0 || gpu >= num_gpus())
    throw Error(fmt::format("GPU {} is out of range: the cluster has {} GPUs", gpu, num_gpus()))
        .hint(fmt::format("use 0..{}", num_gpus() - 1));
  return impl_->vertex(node_of(gpu), gpu % gpus_per_node());
}

// Where the route between two GPUs comes from: a template (node 0 to itself or to node 1 without
// a domain or AZ boundary), or a template translated to other nodes (key: the cache's).
struct Cluster::RouteSource {
  const Route* route;       // the route itself (translated: false) or the template to translate
  bool translated = false;
  int from_a = 0, na = 0, nb = 0;
  uint64_t key = 0;
};

Cluster::RouteSource Cluster::route_source(int gpu_a, int gpu_b) const {
  (void)gpu_vertex(gpu_a);  // range checks
  (void)gpu_vertex(gpu_b);
  static const Route kSelf = [] {
    Route r;
    r.bottleneck_bandwidth_bytes_per_s = std::numeric_limits<double>::infinity();
    return r;
  }();
  if (gpu_a == gpu_b) return {&kSelf};
  const int g = gpus_per_node();
  const int na = gpu_a / g, nb = gpu_b / g, a = gpu_a % g, b = gpu_b % g;
  const size_t index = static_cast<size_t>(a * g + b);
  const int d = impl_->domain;
  const bool apart = d > 1 && na / d != nb / d;  // different NVLink domains: over EFA
  const bool zones = impl_->zoned() && impl_->node_az[static_cast<size_t>(na)] != impl_->node_az[static_cast<size_t>(nb)];
  if (na == 0 && nb == 0) return {&impl_->intra[index]};
  if (!apart && !zones && na == 0 && nb == 1) return {&impl_->up[index]};
  if (!apart && !zones && na == 1 && nb == 0) return {&impl_->down[index]};
  const auto& up = zones ? impl_->up_z : apart ? impl_->up_x : impl_->up;
  const auto& down = zones ? impl_->down_z : apart ? impl_->down_x : impl_->down;
  RouteSource s{na == nb ? &impl_->intra[index] : na < nb ? &up[index] : &down[index]};
  s.translated = true;
  s.from_a = na < nb || na == nb ? 0 : 1;
  s.na = na;
  s.nb = nb;
  s.key = (static_cast<uint64_t>(gpu_a) << 32) | static_cast<uint32_t>(gpu_b);
  return s;
}

const Route& Cluster::route(int gpu_a, int gpu_b) const {
  const RouteSource s = route_source(gpu_a, gpu_b);
  if (!s.translated) return *s.route;
  {
    std::shared_lock lock(impl_->mutex);
    auto it = impl_->cache.find(s.key);
    if (it != impl_->cache.end()) return it->second;
  }
  Route r = impl_->translate(*s.route, s.from_a, s.na, s.nb);
  std::unique_lock lock(impl_->mutex);
  return impl_->cache.emplace(s.key, std::move(r)).first->second;  // keeps an entry another thread added first
}

const Route& Cluster::route_into(int gpu_a, int gpu_b, Route& scratch) const {
  const RouteSource s = route_source(gpu_a, gpu_b);
  if (!s.translated) return *s.route;
  impl_->translate_into(*s.route, s.from_a, s.na, s.nb, scratch);
  return scratch;
}

namespace {

struct RingScore {
  double bandwidth = std::numeric_limits<double>::infinity();
  int hops = 0;
  bool better_than(const RingScore& o) const {
    if (bandwidth != o.bandwidth) return bandwidth > o.bandwidth;
    return hops < o.hops;
  }
};

// Bandwidth and hops between local GPUs, from the node-0 templates.
struct LocalCosts {
  int g = 0;
  const std::vector<Route>* intra = nullptr;
  const Route& at(int a, int b) const { return (*intra)[static_cast<size_t>(a * g + b)]; }
};

RingScore score(const std::vector<int>& order, const LocalCosts& c, bool closed) {
  RingScore s;
  const size_t n = order.size();
  const size_t edges = closed ? n : n - 1;
  for (size_t i = 0; i < edges; ++i) {
    const Route& r = c.at(order[i], order[(i + 1) % n]);
    s.bandwidth = std::min(s.bandwidth, r.bottleneck_bandwidth_bytes_per_s);
    s.hops += r.hops;
  }
  return s;
}

// Best order of `locals` (sorted, distinct local GPU indices) as a closed ring or an open
// path. Exhaustive up to kMaxBrute GPUs (the ring fixes its first GPU), greedy beyond.
std::vector<int> best_local_order(const std::vector<int>& locals, const LocalCosts& c, bool closed) {
  constexpr size_t kMaxBrute = 9;
  if (locals.size() <= 2) return locals;
  if (locals.size() <= kMaxBrute) {
    std::vector<int> perm = locals;
    std::vector<int> best = locals;
    RingScore best_score = score(best, c, closed);
    auto first = closed ? perm.begin() + 1 : perm.begin();
    while (std::next_permutation(first, perm.end())) {
      RingScore s = score(perm, c, closed);
      if (s.better_than(best_score)) {  // strict: the first (lexicographically smallest) order wins ties
        best_score = s;
        best = perm;
      }
    }
    return best;
  }
  std::vector<int> out{locals.front()};
  std::vector<int> left(locals.begin() + 1, locals.end());
  while (!left.empty()) {
    size_t pick = 0;
    for (size_t i = 1; i < left.size(); ++i) {
      const Route& r = c.at(out.back(), left[i]);
      const Route& p = c.at(out.back(), left[pick]);
      if (r.bottleneck_bandwidth_bytes_per_s > p.bottleneck_bandwidth_bytes_per_s ||
          (r.bottleneck_bandwidth_bytes_per_s == p.bottleneck_bandwidth_bytes_per_s && r.hops < p.hops))
        pick = i;
    }
    out.push_back(left[pick]);
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return out;
}

}  // namespace

std::vector<int> Cluster::ring_order(const std::vector<int>& gpus) const {
  std::vector<int> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    (void)gpu_vertex(sorted[i]);
    if (i > 0 && sorted[i] == sorted[i - 1])
      throw Error(fmt::format("GPU {} appears twice in the ring", sorted[i])).hint("list each GPU once");
  }
  const int g = gpus_per_node();
  std::map<int, std::vector<int>> by_node;  // node -> sorted local indices
  for (int gpu : sorted) by_node[gpu / g].push_back(gpu % g);
  LocalCosts costs{g, &impl_->intra};
  const bool one_node = by_node.size() == 1;
  std::vector<int> out;
  for (const auto& [node, locals] : by_node) {
    const auto key = std::make_pair(locals, one_node);
    std::vector<int> order;
    {
      std::lock_guard lock(impl_->ring_mutex);
      auto it = impl_->ring_memo.find(key);
      if (it != impl_->ring_memo.end()) order = it->second;
    }
    if (order.empty()) {
      order = best_local_order(locals, costs, one_node);
      std::lock_guard lock(impl_->ring_mutex);
      impl_->ring_memo.emplace(key, order);
    }
    for (int local : order) out.push_back(node * g + local);
  }
  return out;
}

std::vector<std::vector<std::string>> Cluster::intra_node_matrix() const {
  const int g = gpus_per_node();
  const NodeLayout& L = impl_->layout;
  const IntraNodeTopology& t = impl_->type.topology;
  std::vector<std::vector<std::string>> m(static_cast<size_t>(g), std::vector<std::string>(static_cast<size_t>(g)));
  // Direct GPU-GPU NVLinks and GPUs attached to the NVSwitch, read from node 0's links.
  std::map<std::pair<int, int>, double> nvlink;
  std::vector<char> on_nvswitch(static_cast<size_t>(g), 0);
  for (int id = 0; id < impl_->links_per_node; ++id) {  // node 0's block
    const Link& l = impl_->links[static_cast<size_t>(id)];
    const Vertex& s = impl_->vertices[static_cast<size_t>(l.src)];
    const Vertex& d = impl_->vertices[static_cast<size_t>(l.dst)];
    if (l.kind == LinkKind::nvlink) nvlink[{s.local_index, d.local_index}] = l.bandwidth_bytes_per_s;
    if (l.kind == LinkKind::nvswitch && s.kind == VertexKind::gpu) on_nvswitch[static_cast<size_t>(s.local_index)] = 1;
  }
  for (int i = 0; i < g; ++i)
    for (int j = 0; j < g; ++j) {
      std::string& cell = m[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (i == j) cell = "X";
      else if (auto it = nvlink.find({i, j}); it != nvlink.end())
        cell = fmt::format("NV{}", static_cast<int>(std::lround(it->second / t.nvlink_lane_bandwidth_bytes_per_s)));
      else if (on_nvswitch[static_cast<size_t>(i)] && on_nvswitch[static_cast<size_t>(j)]) cell = "NVS";
      else if (L.gpu_switch[static_cast<size_t>(i)] >= 0 && L.gpu_switch[static_cast<size_t>(i)] == L.gpu_switch[static_cast<size_t>(j)]) cell = "PIX";
      else if (L.gpu_socket[static_cast<size_t>(i)] == L.gpu_socket[static_cast<size_t>(j)]) cell = "NODE";
      else cell = "SYS";
    }
  return m;
}

}  // namespace trainplan::hw
