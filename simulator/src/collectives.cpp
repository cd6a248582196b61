// Collective algorithms as phases of equal-sized flows over the topology's routes.
#include "trainplan/simulator/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

namespace trainplan::sim {
namespace {

using Kind = plan::CollectiveKind;

// Accumulates the flows of one phase (possibly of several group copies), then merges the
// per-link multiplicities and derives the phase's latency and uncontended rate.
class PhaseBuilder {
 public:
  PhaseBuilder(const Topology& topology, double bytes_factor, int steps)
      : topology_(topology), bytes_factor_(bytes_factor), steps_(steps), count_(topology.links().size(), 0) {}

  void flow(int src, int dst) {
    if (src == dst) return;
    links(src, dst, topology_.route_scratch(src, dst, route_));
  }
  // A flow between a GPU and a host: GPU -> host of `node` (to_host), else host -> GPU.
  void host_flow(int gpu, int node, bool to_host) {
    links(to_host ? gpu : -1, to_host ? -1 : gpu, topology_.host_route(gpu, node, to_host));
  }

  void links(int src, int dst, const std::vector<int>& route) {
    flows_.push_back({src, dst});
    double latency = 0;
    for (int l : route) {
      if (count_[static_cast<size_t>(l)]++ == 0) touched_.push_back(l);
      latency += topology_.links()[static_cast<size_t>(l)].latency_s;
    }
    max_latency_ = std::max(max_latency_, latency);
  }

  CommPhase finish() {
    CommPhase p;
    p.flows = std::move(flows_);
    p.bytes_factor = bytes_factor_;
    p.latency_s = steps_ * max_latency_;
    std::sort(touched_.begin(), touched_.end());  // ascending links: deterministic uses
    for (int link : touched_) {
      const int32_t mult = count_[static_cast<size_t>(link)];
      p.uses.push_back({link, mult});
      double rate = topology_.links()[static_cast<size_t>(link)].bandwidth_bytes_per_s / mult;
      p.uncontended_rate_bytes_per_s = std::min(p.uncontended_rate_bytes_per_s, rate);
    }
    return p;
  }

 private:
  const Topology& topology_;
  double bytes_factor_;
  int steps_;
  std::vector<FlowEnds> flows_;
  std::vector<int32_t> count_;  // link -> flows crossing it
  std::vector<int> touched_;     // links with a non-zero count
  std::vector<int> route_;       // scratch for routes read once (Topology::route_scratch)
  double max_latency_ = 0;
};

void ring_edges(PhaseBuilder& b, const std::vector<int>& ring) {
  const size_t n = ring.size();
  if (n < 2) return;
  for (size_t i = 0; i < n; ++i) b.flow(ring[i], ring[(i + 1) % n]);
}

void all_pairs(PhaseBuilder& b, const std::vector<int>& g) {
  for (int src : g)
    for (int dst : g) b.flow(src, dst);
}

int tree_height(const std::vector<int>& parent) {
  int height = 0;
  for (size_t i = 0; i < parent.size(); ++i) {
    int depth = 0;
    for (int p = parent[i]; p >= 0; p = parent[static_cast<size_t>(p)]) ++depth;
    height = std::max(height, depth);
  }
  return height;
}

// Splits a group (ring order) by node: the node groups in order of first appearance, and
// whether every node holds the same number of members.
std::vector<std::vector<int>> split_by_node(const std::vector<int>& ring, const Topology& topology) {
  std::vector<std::vector<int>> nodes;
  std::map<int, size_t> index;
  for (int g : ring) {
    auto [it, inserted] = index.emplace(topology.node_of(g), nodes.size());
    if (inserted) nodes.emplace_back();
    nodes[it->second].push_back(g);
  }
  return nodes;
}

bool hierarchical_applies(const std::vector<int>& gpus, const Topology& topology) {
  auto nodes = split_by_node(gpus, topology);
  if (nodes.size() < 2 || nodes[0].size() < 2) return false;
  for (const auto& n : nodes)
    if (n.size() != nodes[0].size()) return false;
  return true;
}

// The nodes of a group's members, in the group's order.
std::vector<int> nodes_of_members(const std::vector<int>& group, const Topology& topology) {
  std::vector<int> out;
  out.reserve(group.size());
  for (int g : group) out.push_back(topology.node_of(g));
  return out;
}

// Parameter-server traffic of one group copy: every GPU to (push) or from (pull) the host of
// every node the copy spans.
auto server_flows(const Topology& topology, bool to_host) {
  return [&topology, to_host](PhaseBuilder& b, const std::vector<int>& g) {
    const auto nodes = split_by_node(g, topology);
    for (int gpu : g)
      for (const auto& n : nodes) b.host_flow(gpu, topology.node_of(n[0]), to_host);
  };
}

// Per-kind phase builders over all copies. `each` is called once per copy and phase index.
template <typename Fn>
void add_phase(CommPattern& p, const Topology& topology, double factor, int steps,
               const std::vector<std::vector<int>>& groups, Fn each) {
  PhaseBuilder b(topology, factor, steps);
  for (const auto& g : groups) each(b, g);
  p.phases.push_back(b.finish());
}

// --- NCCL's latency and protocol model -------------------------------------------------------
// Constants of NCCL's tuning model (src/graph/tuning.cc, NCCL 2.2x): latencies in us.
// Index [algorithm][protocol] with algorithm 0 = tree, 1 = ring; protocol LL, LL128, Simple.
constexpr double kBaseLatUs[2][kNumNcclProtocols] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
// Per-step latency by hardware: [NVLink, PCIe, network][algorithm][protocol].
constexpr double kHwLatUs[3][2][kNumNcclProtocols] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}},  // NVLink
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}},   // PCIe
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}}, // network
};
// Tree all-reduce bandwidth correction by message size: powers of two of size/64 B, 64 B .. 256 MiB.
constexpr int kTreeCorrectionSizes = 23;
constexpr double kTreeCorrection[kNumNcclProtocols][kTreeCorrectionSizes] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
// LL's bus bandwidth cap (GB/s) [architecture or CPU][nodes 1, 2, more]: one node by GPU
// (Volta, Ampere, Hopper, Blackwell), several by host CPU (Intel, AMD).
constexpr double kLlMaxBusBw1Node[4] = {39.0, 87.7, 141.0, 282.0};
constexpr double kLlMaxBusBwIntel[2] = {39.0, 20.4}, kLlMaxBusBwAmd[2] = {22.5, 19.0};
// Network-post overhead per ring step across nodes (getNetOverhead): 1 us Intel, 2 us AMD, x3
// for Simple; an intra-node step never costs less.
constexpr double kNetOverheadIntelUs = 1.0, kNetOverheadAmdUs = 2.0;
// NVLSTree (Simple only; NCCL 2.2x tuning.cc): base latency 0, per-step latency 25 us on NVLink
// (the in-node NVLS step, once) and 14 us on the network (per tree level, up and down).
constexpr double kNvlsTreeIntraLatUs = 25.0, kNvlsTreeNetLatUs = 14.0;
// Tree all-reduce across EFA: half the ring's network bandwidth. aws-ofi-nccl's tuner model for
// p5/p5e and p5en (src/tuner/nccl_ofi_model.cpp, 2024-25: tree bw = internode_bw x rails x
// channels / 2, the ring's without the / 2); its measured regions (nccl_ofi_regions.cpp) run the
// tree on p5 only where its latency wins (up to ~300 MB at 16-32 nodes).
constexpr double kEfaTreeShare = 0.5;
// Protocol indices of the tables above (LL and LL128 name the other columns).
[[maybe_unused]] constexpr int kLL = 0, kLL128 = 1;
constexpr int kSimple = 2;
constexpr int kTree = 0, kRing = 1;
constexpr int kHwNvlink = 0, kHwPci = 1, kHwNet = 2;

int log2_floor(double x) { return x < 1 ? 0 : static_cast<int>(std::floor(std::log2(x))); }

// The link classes a pattern crosses: every link classified (hand-built topologies leave
// them `other`), whether the intra-node hops between ring neighbours are PCIe (else NVLink), and
// whether any use crosses the network (a group spanning the instances of one UltraServer's NVLink
// domain does not: NCCL's multi-node NVLink treats the domain as one node).
struct GroupLinks {
  bool classified = true;
  bool pcie_intra = false;
  bool network = false;
};

GroupLinks group_links(const CommPattern& p, const std::vector<int>& g, const Topology& topology) {
  GroupLinks out;
  std::vector<int> scratch;
  const auto& links = topology.links();
  for (const CommPhase& ph : p.phases)
    for (const LinkUse& u : ph.uses) {
      if (links[static_cast<size_t>(u.link)].cls == LinkClass::other) out.classified = false;
      if (links[static_cast<size_t>(u.link)].cls == LinkClass::net) out.network = true;
    }
  for (size_t i = 0; i < g.size(); ++i) {
    const int a = g[i], b = g[(i + 1) % g.size()];
    if (a == b || topology.node_of(a) != topology.node_of(b)) continue;
    for (int l : topology.route_scratch(a, b, scratch))
      if (links[static_cast<size_t>(l)].cls == LinkClass::pcie) out.pcie_intra = true;
  }
  return out;
}

// Bus bandwidth of a pattern with no other traffic (latency aside): S x bus factor / the time
// its phases take to move S.
double uncontended_busbw(const CommPattern& p, Kind kind, int n) {
  double t = 0;
  for (const CommPhase& ph : p.phases)
    if (!ph.uses.empty()) t += ph.bytes_factor / ph.uncontended_rate_bytes_per_s;
  return t > 0 ? bus_bandwidth_factor(kind, n) / t : std::numeric_limits<double>::infinity();
}

// Fills the NCCL timing of a ring, tree or hierarchical pattern (phases already built).
void apply_nccl_model(CommPattern& p, Kind kind, const std::vector<int>& group, const Topology& topology) {
  const GroupLinks links = group_links(p, group, topology);
  if (!links.classified || p.phases.empty()) return;
  const Topology::NcclHost host = topology.nccl_host();
  const int n = static_cast<int>(group.size());
  // NCCL's node count: NVLink domains (an instance, or an UltraServer's instances).
  const int nodes = links.network ? static_cast<int>(split_by_node(group, topology).size()) : 1;
  const double ppn = static_cast<double>(n) / nodes;
  const int intra_hw = links.pcie_intra ? kHwPci : kHwNvlink;
  const bool reduce_like = kind == Kind::all_reduce || kind == Kind::barrier;
  const bool chain = kind == Kind::broadcast || kind == Kind::reduce;
  const int algo = p.algorithm == CollectiveAlgorithm::tree ? kTree : kRing;
  const double net_overhead = (host.amd_cpu ? kNetOverheadAmdUs : kNetOverheadIntelUs);
  auto intra_lat = [&](int proto) {
    double lat = kHwLatUs[intra_hw][algo][proto];
    // Inter-node rings still launch every step's network post.
    if (algo == kRing && nodes > 1) lat = std::max(lat, net_overhead * (proto == kSimple ? 3.0 : 1.0));
    return lat * 1e-6;
  };
  // With one GPU per node the network latency is fully exposed: NCCL uses the tree's. NCCL
  // adds the latency the network plugin reports (graph latencyInter) to every network step,
  // and again under Simple for the flush (tuning.cc, NCCL 2.20+).
  auto plugin_lat = [&](int proto) { return (proto == kSimple ? 2.0 : 1.0) * host.net_latency_s; };
  auto inter_lat = [&](int proto) { return kHwLatUs[kHwNet][ppn == 1 ? kTree : algo][proto] * 1e-6 + plugin_lat(proto); };
  NcclTiming& t = p.timing;
  t.ranks = n;
  t.channels = std::max(1, static_cast<int>(ppn));
  t.sm_channels = nodes > 1 ? host.channels_across_nodes : host.channels_in_node;
  if (p.algorithm == CollectiveAlgorithm::nvls_tree) {
    // NCCL runs NVLS and NVLSTree with the Simple protocol only.
    p.phases[0].nccl_latency_s = {0.0, 0.0, kNvlsTreeIntraLatUs * 1e-6 +
                                                2.0 * log2_floor(nodes) * (kNvlsTreeNetLatUs * 1e-6 + plugin_lat(kSimple))};
    // Beyond two nodes NCCL's model gives NVLSTree half the network bandwidth it gives it on
    // two (tuning.cc: bw = min(bwIntra, nNodes <= 2 ? bwInter : bwInter / 2)).
    t.bandwidth_share = {0.0, 0.0, nodes <= 2 ? 1.0 : 0.5};
    p.nccl = true;
    return;
  }
  for (int proto = 0; proto < kNumNcclProtocols; ++proto) {
    const double base = kBaseLatUs[algo][proto] * 1e-6;
    auto& lat0 = p.phases[0].nccl_latency_s[static_cast<size_t>(proto)];
    if (p.algorithm == CollectiveAlgorithm::tree) {
      lat0 = base + 2.0 * ((ppn - 1.0) * kHwLatUs[intra_hw][kTree][proto] * 1e-6 + log2_floor(nodes) * inter_lat(proto));
    } else if (p.algorithm == CollectiveAlgorithm::hierarchical) {
      const int k = static_cast<int>(ppn);
      const int inter_steps = reduce_like ? 2 * (nodes - 1) : nodes - 1;
      for (size_t ph = 0; ph < p.phases.size(); ++ph) {
        const bool inter = (kind == Kind::all_gather) ? ph == 0 : ph == 1;
        p.phases[ph].nccl_latency_s[static_cast<size_t>(proto)] =
            (ph == 0 ? base : 0.0) + (inter ? inter_steps * inter_lat(proto) : (k - 1) * intra_lat(proto));
      }
    } else if (chain) {
      // Broadcast / reduce: n steps of one class; Simple pays a chunk (the tree's step latency).
      const int hw = nodes > 1 ? kHwNet : intra_hw;
      lat0 = base + n * kHwLatUs[hw][proto == kSimple ? kTree : kRing][proto] * 1e-6;
    } else {
      const int steps = reduce_like ? 2 * (n - 1) : n - 1;
      const int inter_steps = nodes == 1 ? 0 : reduce_like ? 2 * (nodes - 1) : nodes - 1;
      lat0 = base + (steps - inter_steps) * intra_lat(proto) + inter_steps * inter_lat(proto);
    }
  }
  // Bandwidth shares. LL128 runs only where the intra-node hops are NVLink on a GPU NCCL
  // enables it for (sm_70, sm_80, sm_90, sm_100, sm_120). LL's bus bandwidth is capped.
  const int cc = host.compute_capability;
  const bool ll128 = !links.pcie_intra && (cc == 70 || cc == 80 || cc == 90 || cc == 100 || cc == 120);
  const int arch = cc >= 100 ? 3 : cc >= 90 ? 2 : cc >= 80 ? 1 : 0;
  const double ll_cap = 1e9 * (nodes == 1 ? kLlMaxBusBw1Node[arch]
                                           : (host.amd_cpu ? kLlMaxBusBwAmd : kLlMaxBusBwIntel)[nodes <= 2 ? 0 : 1]);
  const double busbw = uncontended_busbw(p, kind, n);
  auto capped = [&](double share, double cap) { return std::isfinite(busbw) ? std::min(share, cap / busbw) : share; };
  const double efa_tree = p.algorithm == CollectiveAlgorithm::tree && links.network && host.efa ? kEfaTreeShare : 1.0;
  if (host.simple_only) {
    t.bandwidth_share = {0.0, 0.0, p.algorithm == CollectiveAlgorithm::tree ? 0.92 * efa_tree : 1.0};
    t.tree = p.algorithm == CollectiveAlgorithm::tree && reduce_like;
    t.ring_plateau = (p.algorithm == CollectiveAlgorithm::ring || p.algorithm == CollectiveAlgorithm::horovod) && reduce_like && nodes > 1;
    t.plateau_factor = cc > 0 && cc < 80 ? 1.9 : 1.4;
  } else if (p.algorithm == CollectiveAlgorithm::tree) {
    const double simple = 0.92 * efa_tree;
    t.bandwidth_share = {capped(simple / 3.8, ll_cap), ll128 ? simple * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0) : 0.0,
                         simple};
    t.tree = reduce_like;
  } else {
    t.bandwidth_share = {capped(0.5, ll_cap), ll128 ? 0.92 : 0.0, 1.0};
    t.ring_plateau = (p.algorithm == CollectiveAlgorithm::ring || p.algorithm == CollectiveAlgorithm::horovod) && reduce_like && nodes > 1;
    t.plateau_factor = cc > 0 && cc < 80 ? 1.9 : 1.4;
  }
  p.nccl = true;
}

}  // namespace

std::string_view collective_algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
    case CollectiveAlgorithm::hierarchical: return "hierarchical";
    case CollectiveAlgorithm::parameter_server: return "parameter-server";
    case CollectiveAlgorithm::automatic: return "auto";
    case CollectiveAlgorithm::smddp: return "smddp";
    case CollectiveAlgorithm::horovod: return "horovod";
    case CollectiveAlgorithm::nvls_tree: return "nvls-tree";
  }
  return "?";
}

CollectiveAlgorithm parse_collective_algorithm(std::string_view name) {
  for (auto a : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::hierarchical,
                 CollectiveAlgorithm::parameter_server, CollectiveAlgorithm::automatic, CollectiveAlgorithm::smddp,
                 CollectiveAlgorithm::horovod, CollectiveAlgorithm::nvls_tree})
    if (collective_algorithm_name(a) == name) return a;
  throw Error("unknown collective algorithm \"" + std::string(name) + "\"")
      .hint("one of ring, tree, hierarchical, parameter-server, auto, smddp, horovod, nvls-tree");
}

CollectiveAlgorithm from_dp_algorithm(plan::DpAlgorithm a) {
  switch (a) {
    case plan::DpAlgorithm::ring: return CollectiveAlgorithm::ring;
    case plan::DpAlgorithm::tree: return CollectiveAlgorithm::tree;
    case plan::DpAlgorithm::hierarchical: return CollectiveAlgorithm::hierarchical;
    case plan::DpAlgorithm::parameter_server: return CollectiveAlgorithm::parameter_server;
    case plan::DpAlgorithm::smddp: return CollectiveAlgorithm::smddp;
    case plan::DpAlgorithm::horovod: return CollectiveAlgorithm::horovod;
  }
  return CollectiveAlgorithm::ring;
}

double CommPattern::phase_latency_s(int phase, NcclProtocol p, double size_bytes) const {
  const CommPhase& ph = phases[static_cast<size_t>(phase)];
  if (!nccl) return ph.latency_s;
  double lat = ph.nccl_latency_s[static_cast<size_t>(p)];
  // NCCL: "plateau effect of ring" for large all-reduces across nodes.
  if (timing.ring_plateau && p == NcclProtocol::simple && size_bytes / (timing.channels * timing.ranks) >= 64)
    lat *= timing.plateau_factor;
  return lat;
}

double CommPattern::bandwidth_share(NcclProtocol p, double size_bytes) const {
  if (!nccl) return 1.0;
  double share = timing.bandwidth_share[static_cast<size_t>(p)];
  if (timing.tree) {
    const int log_size = log2_floor(size_bytes / 64.0);
    if (log_size < kTreeCorrectionSizes) share *= kTreeCorrection[static_cast<int>(p)][std::max(log_size, 0)];
  }
  return share;
}

double CommPattern::uncontended_time_s(double size_bytes, NcclProtocol p) const {
  const double share = bandwidth_share(p, size_bytes);
  if (!(share > 0)) return std::numeric_limits<double>::infinity();
  double t = start_delay_s;
  for (size_t i = 0; i < phases.size(); ++i) {
    const CommPhase& ph = phases[i];
    t += phase_latency_s(static_cast<int>(i), p, size_bytes);
    const double bytes = ph.bytes_factor * size_bytes;
    if (bytes > 0 && !ph.uses.empty()) t += bytes / (ph.uncontended_rate_bytes_per_s * share);
  }
  return t;
}

NcclProtocol CommPattern::protocol_for(double size_bytes) const {
  if (!nccl) return NcclProtocol::simple;
  NcclProtocol best = NcclProtocol::simple;
  double best_t = uncontended_time_s(size_bytes, best);
  for (NcclProtocol p : {NcclProtocol::ll, NcclProtocol::ll128}) {
    const double t = uncontended_time_s(size_bytes, p);
    if (t < best_t) best = p, best_t = t;
  }
  return best;
}

double CommPattern::uncontended_time_s(double size_bytes) const {
  return uncontended_time_s(size_bytes, protocol_for(size_bytes));
}

NcclRingLatency nccl_ring_simple_latency(bool pcie_intra, int nodes, bool amd_cpu, int compute_capability,
                                         double net_latency_s) {
  NcclRingLatency r;
  r.base_s = kBaseLatUs[kRing][kSimple] * 1e-6;
  double intra = kHwLatUs[pcie_intra ? kHwPci : kHwNvlink][kRing][kSimple];
  if (nodes > 1) intra = std::max(intra, 3.0 * (amd_cpu ? kNetOverheadAmdUs : kNetOverheadIntelUs));
  r.intra_step_s = intra * 1e-6;
  r.inter_step_s = kHwLatUs[kHwNet][kRing][kSimple] * 1e-6 + 2.0 * net_latency_s;
  r.plateau = nodes > 1 ? (compute_capability > 0 && compute_capability < 80 ? 1.9 : 1.4) : 1.0;
  return r;
}

// NCCL's channels by fabric (one thread block per channel on every member GPU):
// - NVSwitch nodes: 24. HGX A100 8-GPU, NCCL's ring log "Channel 23/24" (NVIDIA/nccl-tests#100);
//   H100 (132 SMs): ncclAllGather "launches 24 blocks" in Nsight Systems (NVIDIA developer forum
//   t/337991, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because
//   of Tail Effect"). NCCL doubles the rings its search finds (A100: 240 GB/s / 20 GB/s per ring
//   = 12, x2).
// - NVLink mesh: 12. The search finds 6 rings on a 4-GPU V100 mesh with 2 NVLinks per pair
//   (graph dump in NVIDIA/nccl#713), doubled.
// - PCIe: 2. The search finds one ring over PCIe (NVIDIA/nccl#1358: "Pattern 4, ... nChannels
//   1"), doubled.
// - Across nodes: two per NIC. DGX H100 class, 8 IB NICs: "Channel 00/16" on 2 and 3 nodes
//   (NVIDIA/nccl#1538, NVIDIA/nccl#1453); p4d, 4 EFA NICs: channels 00..07 (aws/aws-ofi-nccl#715).
namespace {
constexpr int kChannelsNvswitch = 24, kChannelsNvlinkMesh = 12, kChannelsPcie = 2, kChannelsPerNic = 2;
}  // namespace

int nccl_channels(hw::IntraNodeKind intra, int gpus_per_node, int nics_per_node, bool across_nodes) {
  int in_node = 0;
  switch (intra) {
    case hw::IntraNodeKind::nvswitch: in_node = kChannelsNvswitch; break;
    case hw::IntraNodeKind::nvlink_mesh: in_node = kChannelsNvlinkMesh; break;
    case hw::IntraNodeKind::pcie: in_node = kChannelsPcie; break;
    case hw::IntraNodeKind::single: in_node = kChannelsPcie; break;
  }
  if (!across_nodes) return in_node;
  const int nics = std::max(1, std::min(nics_per_node, std::max(1, gpus_per_node)));
  return std::min(in_node, kChannelsPerNic * nics);
}

int nccl_channels(const hw::Cluster& cluster, bool across_nodes) {
  if (std::atof(cluster.gpu_spec().compute_capability.c_str()) <= 0) return 0;
  const auto& inst = cluster.instance();
  return nccl_channels(inst.topology.kind, cluster.gpus_per_node(), inst.network.nics, across_nodes);
}

double nccl_nvlink_share(const std::string& compute_capability, bool nvswitch) {
  // NCCL's per-link NVLink bandwidth (topo.h SMxx_NVLINK_BW) over the link's signalling rate
  // per direction (NVLink 2, 3, 4: 25 GB/s per link; GA10x NVLink 3: 14.0625; NVLink 5: 50).
  if (compute_capability.empty()) return 1.0;  // not an NVIDIA GPU (Trainium's NeuronLink): no NCCL kernel share
  const double cc = std::atof(compute_capability.c_str());
  if (cc >= 9.0 && nvswitch) return 1.0;  // NVLS: reduction in the switch
  if (cc >= 10.0) return 40.1 / 50.0;
  if (cc >= 9.0) return 20.6 / 25.0;
  if (cc >= 8.6) return 12.0 / 14.0625;
  if (cc >= 7.0) return 20.0 / 25.0;
  return 18.0 / 20.0;  // sm_60 (P100, NVLink 1: 20 GB/s per link)
}

double bus_bandwidth_factor(plan::CollectiveKind kind, int n) {
  if (n < 1) return 0;
  const double nn = n;
  switch (kind) {
    case Kind::all_reduce: return 2.0 * (nn - 1) / nn;
    case Kind::reduce_scatter:
    case Kind::all_gather:
    case Kind::all_to_all: return (nn - 1) / nn;
    default: return 1.0;
  }
}

std::vector<std::vector<int>> double_binary_tree(int n) {
  std::vector<std::vector<int>> trees(2, std::vector<int>(static_cast<size_t>(std::max(n, 0)), -1));
  // NCCL's binary tree (graph/trees.cc): position 0 is the root; position r > 0 with lowest set
  // bit b hangs under (r ^ b) | 2b, or under r ^ b where that is out of range. Odd positions
  // are the leaves.
  auto parent0 = [n](int r) {
    if (r == 0) return -1;
    const int b = r & -r;
    const int up = (r ^ b) | (b << 1);
    return up < n ? up : r ^ b;
  };
  for (int r = 0; r < n; ++r) trees[0][static_cast<size_t>(r)] = parent0(r);
  // The second tree: the first mirrored (r -> n-1-r) for even n, so its inner positions are
  // the first's leaves; shifted by one for odd n (position r plays r - 1), as NCCL builds it.
  for (int r = 0; r < n; ++r) {
    const bool mirror = n % 2 == 0;
    const int as = mirror ? n - 1 - r : (r - 1 + n) % n;
    const int p = parent0(as);
    trees[1][static_cast<size_t>(r)] = p < 0 ? -1 : mirror ? n - 1 - p : (p + 1) % n;
  }
  return trees;
}

std::vector<CollectiveAlgorithm> automatic_candidates(plan::CollectiveKind kind, const std::vector<int>& group_gpus,
                                                      const Topology& topology) {
  std::vector<CollectiveAlgorithm> out{CollectiveAlgorithm::ring, CollectiveAlgorithm::tree};
  if (effective_algorithm(kind, CollectiveAlgorithm::nvls_tree, group_gpus, topology) == CollectiveAlgorithm::nvls_tree)
    out.push_back(CollectiveAlgorithm::nvls_tree);
  return out;
}

CollectiveAlgorithm effective_algorithm(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                                        const std::vector<int>& group_gpus, const Topology& topology) {
  TP_ASSERT(requested != CollectiveAlgorithm::automatic);
  const bool reduce_like = kind == Kind::all_reduce || kind == Kind::barrier;
  switch (requested) {
    case CollectiveAlgorithm::tree:
      return reduce_like && group_gpus.size() > 2 ? CollectiveAlgorithm::tree : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::hierarchical:
      if (!(reduce_like || kind == Kind::reduce_scatter || kind == Kind::all_gather)) return CollectiveAlgorithm::ring;
      return hierarchical_applies(group_gpus, topology) ? CollectiveAlgorithm::hierarchical : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::parameter_server:
      return reduce_like || kind == Kind::reduce_scatter || kind == Kind::all_gather ? CollectiveAlgorithm::parameter_server
                                                                                    : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::smddp: {
      // SMDDP's all-reduce needs the same number of GPUs on every node (its intra-node
      // reduce-scatter); other kinds and uneven groups run NCCL's ring.
      if (!reduce_like) return CollectiveAlgorithm::ring;
      const auto nodes = split_by_node(group_gpus, topology);
      for (const auto& n : nodes)
        if (n.size() != nodes[0].size()) return CollectiveAlgorithm::ring;
      return CollectiveAlgorithm::smddp;
    }
    case CollectiveAlgorithm::horovod: return reduce_like ? CollectiveAlgorithm::horovod : CollectiveAlgorithm::ring;
    case CollectiveAlgorithm::nvls_tree:
      // NCCL runs NVLSTree for all-reduces only, across nodes of NVSwitch-3 GPUs (it disables
      // it on one node); the ring otherwise.
      return reduce_like && topology.nccl_host().nvls && hierarchical_applies(group_gpus, topology)
                 ? CollectiveAlgorithm::nvls_tree
                 : CollectiveAlgorithm::ring;
    default: return CollectiveAlgorithm::ring;
  }
}

namespace {

CommPattern build_phases(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                         const std::vector<std::vector<int>>& groups, const Topology& topology);

}  // namespace

std::vector<std::vector<int>> channel_rings(const std::vector<int>& order, const std::vector<int>& member_nodes) {
  TP_ASSERT(order.size() == member_nodes.size());
  std::vector<std::vector<int>> nodes;  // the ring's runs of members on one node
  std::vector<int> ids;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || member_nodes[i] != member_nodes[i - 1]) {
      nodes.emplace_back();
      ids.push_back(member_nodes[i]);
    }
    nodes.back().push_back(order[i]);
  }
  std::sort(ids.begin(), ids.end());
  const bool contiguous = std::unique(ids.begin(), ids.end()) == ids.end();
  bool even = nodes.size() >= 2 && nodes[0].size() >= 2 && contiguous;
  for (const auto& n : nodes) even = even && n.size() == nodes[0].size();
  if (!even) return {order};
  std::vector<std::vector<int>> rings(nodes[0].size());
  for (size_t c = 0; c < rings.size(); ++c)
    for (const auto& n : nodes)
      for (size_t i = 0; i < n.size(); ++i) rings[c].push_back(n[(i + c) % n.size()]);
  return rings;
}

CommPattern build_pattern(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                          const std::vector<std::vector<int>>& groups, const Topology& topology) {
  CommPattern p = build_phases(kind, requested, groups, topology);
  const bool nccl_algorithm = p.algorithm == CollectiveAlgorithm::ring || p.algorithm == CollectiveAlgorithm::tree ||
                              p.algorithm == CollectiveAlgorithm::hierarchical || p.algorithm == CollectiveAlgorithm::horovod ||
                              p.algorithm == CollectiveAlgorithm::nvls_tree;
  if (nccl_algorithm && kind != Kind::all_to_all && groups[0].size() >= 2) apply_nccl_model(p, kind, groups[0], topology);
  if (p.algorithm == CollectiveAlgorithm::horovod && groups[0].size() >= 2) p.start_delay_s = 0.5 * kHorovodCycleTimeS;
  return p;
}

namespace {

// NCCL's NVLSTree, pipelined: every GPU heads 1/k of the data. Inside the node NVLS reduces and
// multicasts through the switch; the traffic is that of the single-node all-reduce (2(k-1)/k * S
// per GPU each way over NVLink, at the NVLS link rate of nccl_nvlink_share): every ordered pair
// of the node 4 times at S/(2k). Between nodes each head runs a double binary tree over the
// nodes with the heads of the same local index: each tree carries half of the head's S/k, up
// (reduce) and down (broadcast) every edge. One coflow: the slower of NVLink and the network
// sets the pace of the pipeline.
void add_nvls_tree_phase(CommPattern& p, const std::vector<std::vector<int>>& groups, const Topology& topology) {
  const auto nodes0 = split_by_node(groups[0], topology);
  const int ki = static_cast<int>(nodes0[0].size());
  const auto trees = double_binary_tree(static_cast<int>(nodes0.size()));
  const int height = std::max(tree_height(trees[0]), tree_height(trees[1]));
  add_phase(p, topology, 1.0 / (2.0 * ki), 2 * (ki - 1 + height), groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
    const auto nodes = split_by_node(g, topology);
    for (const auto& node : nodes)
      for (int rep = 0; rep < 4; ++rep)
        for (int a : node)
          for (int c : node) b.flow(a, c);
    for (const auto& parent : trees)
      for (size_t i = 0; i < nodes.size(); ++i) {
        const int par = parent[i];
        if (par < 0) continue;
        for (size_t j = 0; j < nodes[i].size(); ++j) {
          b.flow(nodes[i][j], nodes[static_cast<size_t>(par)][j]);  // reduce, up
          b.flow(nodes[static_cast<size_t>(par)][j], nodes[i][j]);  // broadcast, down
        }
      }
  });
}

// NCCL's tree all-reduce across nodes of k >= 2 GPUs each (graph/trees.cc, NCCL's
// NCCL_TOPO_PATTERN_BALANCED_TREE): k channels, each carrying S/k, channel c headed on every
// node by its member c. Inside a node the channel is a chain from the head through the other
// members (reduce towards the head, broadcast away from it, both pipelined); between nodes the
// channel runs one tree of the double binary tree over the nodes (even channels the first,
// odd the second), its edges up and down. The balanced pattern spreads a node's network
// traffic over two GPUs: the link to the parent and to the first child leave from the head
// (member c), the link to the second child from member c + 1. A node is inner in one tree
// and a leaf in the other, so no GPU's NIC carries more than 2 S/k each way: the ring's load.
void add_node_tree_phase(CommPattern& p, const std::vector<std::vector<int>>& groups, const Topology& topology) {
  const auto nodes0 = split_by_node(groups[0], topology);
  const int k = static_cast<int>(nodes0[0].size());
  const int num_nodes = static_cast<int>(nodes0.size());
  const auto trees = double_binary_tree(num_nodes);
  const int height = std::max(tree_height(trees[0]), tree_height(trees[1]));
  // child_slot[t][i]: 0 when node i is its parent's first child in tree t, 1 for the second.
  std::vector<std::vector<int>> child_slot(2, std::vector<int>(static_cast<size_t>(num_nodes), 0));
  for (size_t t = 0; t < 2; ++t) {
    std::vector<int> seen(static_cast<size_t>(num_nodes), 0);
    for (size_t i = 0; i < static_cast<size_t>(num_nodes); ++i)
      if (trees[t][i] >= 0) child_slot[t][i] = seen[static_cast<size_t>(trees[t][i])]++ > 0 ? 1 : 0;
  }
  add_phase(p, topology, 1.0 / k, 2 * (k - 1 + height), groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
    const auto nodes = split_by_node(g, topology);
    auto member = [&](size_t node, int index) { return nodes[node][static_cast<size_t>(index % k)]; };
    for (int c = 0; c < k; ++c) {
      for (size_t i = 0; i < nodes.size(); ++i)
        for (int j = 0; j + 1 < k; ++j) {
          b.flow(member(i, c + j + 1), member(i, c + j));  // reduce, towards the head
          b.flow(member(i, c + j), member(i, c + j + 1));  // broadcast, away from it
        }
      const size_t t = static_cast<size_t>(c % 2);
      for (size_t i = 0; i < nodes.size(); ++i) {
        const int par = trees[t][i];
        if (par < 0) continue;
        const int child_gpu = member(i, c);
        const int parent_gpu = member(static_cast<size_t>(par), c + child_slot[t][i]);
        b.flow(child_gpu, parent_gpu);  // reduce, up
        b.flow(parent_gpu, child_gpu);  // broadcast, down
      }
    }
  });
}

CommPattern build_phases(plan::CollectiveKind kind, CollectiveAlgorithm requested,
                         const std::vector<std::vector<int>>& groups, const Topology& topology) {
  TP_ASSERT(!groups.empty());
  const int n = static_cast<int>(groups[0].size());
  for (const auto& g : groups) TP_ASSERT(static_cast<int>(g.size()) == n);
  CommPattern p;
  p.algorithm = effective_algorithm(kind, requested, groups[0], topology);
  if (n < 2) return p;  // nothing moves
  const double nn = n;
  const bool reduce_like = kind == Kind::all_reduce || kind == Kind::barrier;

  switch (kind) {
    case Kind::all_to_all:
      add_phase(p, topology, 1.0 / nn, 1, groups, all_pairs);
      return p;
    case Kind::broadcast:
    case Kind::reduce:
      // Pipelined chain along the ring from (broadcast) / to (reduce) the first member.
      add_phase(p, topology, 1.0, n - 1, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (size_t i = 0; i + 1 < g.size(); ++i) {
          if (kind == Kind::broadcast)
            b.flow(g[i], g[i + 1]);
          else
            b.flow(g[i + 1], g[i]);
        }
      });
      return p;
    default: break;
  }

  switch (p.algorithm) {
    case CollectiveAlgorithm::horovod:  // NCCL's ring all-reduce (the start delay is the caller's)
    case CollectiveAlgorithm::ring: {
      // A ring spanning nodes runs as k channels (k = members per node), each entering and
      // leaving every node through a different member, as NCCL's multi-ring layout does, so
      // the traffic spreads over all the node's NICs; each channel carries S/k.
      const double channels = static_cast<double>(channel_rings(groups[0], nodes_of_members(groups[0], topology)).size());
      const double factor = (reduce_like ? 2.0 * (nn - 1) / nn : (nn - 1) / nn) / channels;
      const int steps = reduce_like ? 2 * (n - 1) : n - 1;
      add_phase(p, topology, factor, steps, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const std::vector<int>& ring : channel_rings(g, nodes_of_members(g, topology))) ring_edges(b, ring);
      });
      return p;
    }
    case CollectiveAlgorithm::tree: {
      if (hierarchical_applies(groups[0], topology)) {
        add_node_tree_phase(p, groups, topology);
        return p;
      }
      const auto trees = double_binary_tree(n);
      const int height = std::max(tree_height(trees[0]), tree_height(trees[1]));
      add_phase(p, topology, 0.5, 2 * height, groups, [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const auto& parent : trees)
          for (size_t i = 0; i < g.size(); ++i) {
            int par = parent[i];
            if (par < 0) continue;
            b.flow(g[i], g[static_cast<size_t>(par)]);  // reduce, up
            b.flow(g[static_cast<size_t>(par)], g[i]);  // broadcast, down
          }
      });
      return p;
    }
    case CollectiveAlgorithm::hierarchical: {
      const auto nodes0 = split_by_node(groups[0], topology);
      const double k = static_cast<double>(nodes0[0].size());
      const double num_nodes = static_cast<double>(nodes0.size());
      const int ki = static_cast<int>(nodes0[0].size());
      const int ni = static_cast<int>(nodes0.size());
      auto intra = [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const auto& node : split_by_node(g, topology)) ring_edges(b, node);
      };
      auto inter = [&](PhaseBuilder& b, const std::vector<int>& g) {
        auto nodes = split_by_node(g, topology);
        for (size_t j = 0; j < nodes[0].size(); ++j) {
          std::vector<int> ring;
          for (const auto& node : nodes) ring.push_back(node[j]);
          ring_edges(b, ring);
        }
      };
      const double intra_factor = (k - 1) / k;
      if (reduce_like) {
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
        add_phase(p, topology, 2.0 * (num_nodes - 1) / num_nodes / k, 2 * (ni - 1), groups, inter);
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
      } else if (kind == Kind::reduce_scatter) {
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
        add_phase(p, topology, (num_nodes - 1) / num_nodes / k, ni - 1, groups, inter);
      } else {  // all_gather
        add_phase(p, topology, (num_nodes - 1) / num_nodes / k, ni - 1, groups, inter);
        add_phase(p, topology, intra_factor, ki - 1, groups, intra);
      }
      return p;
    }
    case CollectiveAlgorithm::parameter_server: {
      // One server per node of the group, on its host, holding 1/N of the variables: every GPU
      // (worker) pushes each server's share of its gradients, then pulls the updated share.
      const double num_nodes = static_cast<double>(split_by_node(groups[0], topology).size());
      if (reduce_like || kind == Kind::reduce_scatter) add_phase(p, topology, 1.0 / num_nodes, 1, groups, server_flows(topology, true));
      if (reduce_like || kind == Kind::all_gather) add_phase(p, topology, 1.0 / num_nodes, 1, groups, server_flows(topology, false));
      return p;
    }
    case CollectiveAlgorithm::smddp: {
      // Herring (Thangakrishnan et al., SC20): gradients are reduced inside the node first
      // (NCCL reduce-scatter over the k GPUs), each GPU's S/k shard is split evenly over the
      // servers of all N nodes (balanced fusion buffers), which sum on the CPUs and send the
      // sums back; an intra-node all-gather completes every GPU's buffer.
      const auto nodes0 = split_by_node(groups[0], topology);
      const int ki = static_cast<int>(nodes0[0].size());
      const double k = ki, num_nodes = static_cast<double>(nodes0.size());
      auto intra = [&](PhaseBuilder& b, const std::vector<int>& g) {
        for (const auto& node : split_by_node(g, topology)) ring_edges(b, node);
      };
      if (ki > 1) add_phase(p, topology, (k - 1) / k, ki - 1, groups, intra);
      add_phase(p, topology, 1.0 / (k * num_nodes), 1, groups, server_flows(topology, true));
      add_phase(p, topology, 1.0 / (k * num_nodes), 1, groups, server_flows(topology, false));
      if (ki > 1) add_phase(p, topology, (k - 1) / k, ki - 1, groups, intra);
      return p;
    }
    case CollectiveAlgorithm::nvls_tree:
      add_nvls_tree_phase(p, groups, topology);
      return p;
    case CollectiveAlgorithm::automatic: break;
  }
  TP_ASSERT_MSG(false, "unhandled collective algorithm");
  return p;
}

}  // namespace

CommPattern build_p2p_pattern(const std::vector<FlowEnds>& pairs, const Topology& topology) {
  CommPattern p;
  PhaseBuilder b(topology, 1.0, 1);
  for (const FlowEnds& f : pairs) b.flow(f.src_gpu, f.dst_gpu);
  p.phases.push_back(b.finish());
  return p;
}

}  // namespace trainplan::sim
