// The analytical step-time estimate. See analytical.hpp for the model.
#include "trainplan/planner/analytical.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <numeric>
#include <optional>
#include <tuple>

#include "trainplan/plan/expert_parallel.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/tp_comm.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/expert_parallel.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/sync_batchnorm.hpp"

namespace trainplan::planner {

double StepEstimate::exposed_comm_total_s() const {
  return std::accumulate(exposed_comm_by_purpose_s.begin(), exposed_comm_by_purpose_s.end(), 0.0);
}

namespace {

using models::OpKind;
using models::TpSplit;

// Per-flow bandwidth and latency of ring collectives run at the same time by `groups`, with
// every flow's share of each link it crosses (links shared by k flows give each 1/k).
struct RingNet {
  double bandwidth_bytes_per_s = 0;  // slowest ring link, after sharing (NVLink at NCCL's rate; channels spread over NICs)
  double latency_s = 0;              // slowest ring link's route latency
  int size = 1;                      // ranks per group
  int nodes = 1;                     // nodes one group spans
  sim::NcclRingLatency nccl;         // NCCL Simple ring latencies (the simulator's NCCL model)
};

RingNet ring_net(const hw::Cluster& cluster, const std::vector<std::vector<int>>& groups) {
  RingNet out;
  if (groups.empty() || groups[0].size() < 2) return out;
  out.size = static_cast<int>(groups[0].size());
  // Each ring hop's links (flattened: flow k is links[begin[k], begin[k + 1])) and latency, from
  // routes the cluster does not keep: the result is cached per group shape (EstimateCache::net),
  // and a search visits hundreds of cluster sizes.
  std::vector<int> flow_links;
  std::vector<size_t> flow_begin{0};
  std::vector<double> flow_latency;
  hw::Route scratch;
  std::vector<double> load(cluster.links().size(), 0.0);  // the share of a group's bytes each link carries
  bool pcie_intra = false;  // intra-node ring hops over PCIe (NCCL's PCI step latency)
  bool network = false;     // some ring hop crosses the network (the plugin latency applies)
  // NCCL's channels of a group. A group that is another's shifted by whole nodes has that
  // group's channels shifted (ring_order orders each node's members by their local indices, and
  // channel_rings looks only at which members share a node), so they are computed once per
  // shape: the groups of a layout are a few shapes shifted node by node.
  const int per_node = cluster.gpus_per_node();
  struct Shape {
    std::vector<int> group;
    std::vector<std::vector<int>> rings;
  };
  std::vector<Shape> shapes;
  std::vector<std::vector<int>> rings;
  const auto shift_to = [&](const std::vector<int>& g, const Shape& sh) -> std::optional<int> {
    if (g.size() != sh.group.size()) return std::nullopt;
    const int d = g[0] - sh.group[0];
    if (d % per_node != 0) return std::nullopt;
    for (size_t j = 1; j < g.size(); ++j)
      if (g[j] - sh.group[j] != d) return std::nullopt;
    return d;
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::optional<int> d;
    const Shape* known = nullptr;
    for (const Shape& sh : shapes)
      if ((d = shift_to(groups[gi], sh))) {
        known = &sh;
        break;
      }
    if (known) {
      rings = known->rings;
      for (auto& ring : rings)
        for (int& gpu : ring) gpu += *d;
    } else {
      const std::vector<int> order = cluster.ring_order(groups[gi]);
      std::vector<int> member_nodes;
      for (int g : order) member_nodes.push_back(cluster.node_of(g));
      rings = sim::channel_rings(order, member_nodes);
      if (shapes.size() < static_cast<size_t>(per_node)) shapes.push_back({groups[gi], rings});
    }
    const double share = 1.0 / static_cast<double>(rings.size());
    for (const std::vector<int>& ring : rings)
      for (size_t i = 0; i < ring.size(); ++i) {
        const hw::Route& r = cluster.route_into(ring[i], ring[(i + 1) % ring.size()], scratch);
        if (gi == 0) {
          // Hops inside a node: PCIe or NVLink; hops between nodes: over the network or inside
          // an NVLink domain.
          const bool same_node = cluster.node_of(ring[i]) == cluster.node_of(ring[(i + 1) % ring.size()]);
          for (int l : r.links) {
            const auto k = cluster.links()[static_cast<size_t>(l)].kind;
            if (same_node && (k == hw::LinkKind::pcie || k == hw::LinkKind::inter_socket)) pcie_intra = true;
            if (!same_node && (k == hw::LinkKind::nic || k == hw::LinkKind::network || k == hw::LinkKind::inter_az)) network = true;
          }
        }
        for (int l : r.links) load[static_cast<size_t>(l)] += share;
        flow_links.insert(flow_links.end(), r.links.begin(), r.links.end());
        flow_begin.push_back(flow_links.size());
        flow_latency.push_back(r.latency_s);
      }
  }
  double bw = std::numeric_limits<double>::infinity();
  double lat = 0;
  for (size_t k = 0; k < flow_latency.size(); ++k) {
    double fb = std::numeric_limits<double>::infinity();
    for (size_t j = flow_begin[k]; j < flow_begin[k + 1]; ++j) {
      const int l = flow_links[j];
      const auto& link = cluster.links()[static_cast<size_t>(l)];
      const bool nvl = link.kind == hw::LinkKind::nvlink || link.kind == hw::LinkKind::nvswitch;
      const double share = nvl ? sim::nccl_nvlink_share(cluster.gpu_spec().compute_capability,
                                                        link.kind == hw::LinkKind::nvswitch)
                               : 1.0;
      fb = std::min(fb, link.bandwidth_bytes_per_s * share / load[static_cast<size_t>(l)]);
    }
    bw = std::min(bw, fb);
    lat = std::max(lat, flow_latency[k]);
  }
  out.bandwidth_bytes_per_s = bw;
  out.latency_s = lat;
  std::vector<int> nodes;
  for (int g : groups[0]) nodes.push_back(cluster.node_of(g));
  std::sort(nodes.begin(), nodes.end());
  out.nodes = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  const int cc = static_cast<int>(std::lround(std::atof(cluster.gpu_spec().compute_capability.c_str()) * 10));
  out.nccl = sim::nccl_ring_simple_latency(pcie_intra, out.nodes, cluster.instance().cpu.find("AMD") != std::string::npos, cc,
                                           network ? cluster.instance().network.nccl_net_latency_s : 0.0);
  return out;
}

// A ring collective's latency under NCCL's model: `steps` steps, `inter_steps` of them across
// nodes, times the plateau for all-reduces across nodes.
double ring_latency_s(const RingNet& n, int steps, int inter_steps, bool all_reduce) {
  const double lat = n.nccl.base_s + (steps - inter_steps) * n.nccl.intra_step_s + inter_steps * n.nccl.inter_step_s;
  return all_reduce ? lat * n.nccl.plateau : lat;
}

double ring_all_reduce_s(const RingNet& n, double bytes) {
  if (n.size < 2 || bytes <= 0) return 0.0;
  const double k = n.size;
  return 2.0 * (k - 1) / k * bytes / n.bandwidth_bytes_per_s + ring_latency_s(n, 2 * (n.size - 1), 2 * (n.nodes - 1), true);
}

double ring_gather_s(const RingNet& n, double bytes) {  // all-gather or reduce-scatter of `bytes` total
  if (n.size < 2 || bytes <= 0) return 0.0;
  const double k = n.size;
  return (k - 1) / k * bytes / n.bandwidth_bytes_per_s + ring_latency_s(n, n.size - 1, n.nodes - 1, false);
}

}  // namespace

// Costs of one layer unit for one micro-batch on one tp rank.
struct UnitCost {
  double fwd_s = 0, bwd_s = 0;            // compute
  double recompute_full_s = 0;            // = fwd_s (the whole forward re-runs) for a layer, else 0
  bool full_recomputed = false;           // a layer: full recomputation re-runs it (plan::unit_recompute)
  double recompute_selective_s = 0;       // the ops selective recomputation re-runs
  double fwd_flops = 0, bwd_flops = 0, selective_flops = 0;
  double tp_fwd_s = 0, tp_bwd_s = 0;      // tp collectives (exposed)
  /// Context parallelism, exposed: the forward K, V all-gather (before the attention, right
  /// after the QKV projection: nothing to hide behind); in backward the K, V all-gather less the
  /// backward of the ops after the attention (it is issued when the unit's backward starts) and
  /// the dK, dV reduce-scatter (the QKV backward waits for it).
  double cp_fwd_s = 0, cp_bwd_s = 0;
  /// Expert parallelism: the all-to-alls after each dispatch and before each combine (exposed:
  /// the next compute waits for each, as plan::lower issues them), per pass.
  double ep_fwd_s = 0, ep_bwd_s = 0;
  /// Host time issuing the unit's kernels (kernels x the stack's launch cost) per pass, and
  /// for the ops selective recomputation re-runs.
  double host_fwd_s = 0, host_bwd_s = 0, host_recompute_selective_s = 0;
  double params = 0;                      // on this tp rank
  double param_bytes = 0;                 // ... as ZeRO gathers them (FP8 linears at 1 byte with fp8_params)
  std::vector<double> tensor_bytes;       // ... per parameter tensor (only for a stack's zero3_tensor_sync)
  std::vector<double> tensor_elems;       // ... its elements (the gradient reduce-scatters, same stack)
  double expert_params = 0;               // routed experts' part of `params`
  /// fwd_s, bwd_s and recompute_selective_s with an NCCL collective's SMs taken (the simulator's
  /// SM contention, sim::SimOptions::sm_contention): [0] a collective inside one node, [1]
  /// across nodes (sim::nccl_channels).
  std::array<double, 2> fwd_sm_s{}, bwd_sm_s{}, recompute_selective_sm_s{};
};

// Group bandwidths per (cluster, layout, purpose) and unit costs per (cluster, layout, micro-
// batch, sequence parallel, precision), computed once per search.
class EstimateCache {
 public:
  using NetKey = std::tuple<const hw::Cluster*, int, int, int, int, int, int>;  // (cluster, dp, tp, pp, cp, purpose, ep)
  // ... and under fp8 (else zeros) the recipe, amax history, FP8 parameters and micro-batches
  // per step (the FP8 weight cast is spread over them).
  using Fp8Key = std::tuple<int, int, bool, int64_t>;
  // The last member: whether the costs list each unit's parameter tensors (ZeRO-3 under a stack
  // that gathers them one at a time, UnitCost::tensor_bytes).
  // The first four: the cluster (the instance type where the tp and cp groups stay inside a
  // node), GPUs per node, software stack, and the graph's shared operator list.
  using UnitKey = std::tuple<const void*, int, std::string, const void*, int, int, int, int, int64_t, bool, int, int, int, double,
                             Fp8Key, bool>;
  template <typename F>
  RingNet net(const NetKey& key, F&& compute) {
    {
      std::shared_lock lock(mutex_);
      auto it = nets_.find(key);
      if (it != nets_.end()) return it->second;
    }
    RingNet v = compute();
    std::unique_lock lock(mutex_);
    return nets_.emplace(key, v).first->second;
  }
  // The simulator's pattern of a dp-group collective (the first dp group's), by (cluster,
  // dp·cp, tp, 0, 0, kind, algorithm): dp_collective_sim_s.
  using PatternKey = std::tuple<const hw::Cluster*, int, int, int, int, int, int>;
  template <typename F>
  const sim::CommPattern& pattern(const PatternKey& key, F&& compute) {
    {
      std::shared_lock lock(mutex_);
      auto it = patterns_.find(key);
      if (it != patterns_.end()) return it->second;
    }
    sim::CommPattern v = compute();
    std::unique_lock lock(mutex_);
    return patterns_.emplace(key, std::move(v)).first->second;  // std::map nodes are stable
  }
  // The simulator's view of a cluster, built once per cluster.
  const sim::ClusterTopology& topology(const hw::Cluster& cluster) {
    {
      std::shared_lock lock(mutex_);
      auto it = topologies_.find(&cluster);
      if (it != topologies_.end()) return *it->second;
    }
    std::unique_lock lock(mutex_);
    auto& t = topologies_[&cluster];
    if (!t) t = std::make_unique<sim::ClusterTopology>(cluster);
    return *t;
  }
  template <typename F>
  const std::vector<UnitCost>& units(const UnitKey& key, F&& compute) {
    {
      std::shared_lock lock(mutex_);
      auto it = units_.find(key);
      if (it != units_.end()) return it->second;
    }
    std::vector<UnitCost> v = compute();
    std::unique_lock lock(mutex_);
    return units_.emplace(key, std::move(v)).first->second;  // std::map nodes are stable
  }

 private:
  std::shared_mutex mutex_;  // lookups share it: hits are most calls, on every thread
  std::map<NetKey, RingNet> nets_;
  std::map<UnitKey, std::vector<UnitCost>> units_;
  std::map<PatternKey, sim::CommPattern> patterns_;
  std::map<const hw::Cluster*, std::unique_ptr<sim::ClusterTopology>> topologies_;
};

std::shared_ptr<EstimateCache> make_estimate_cache() { return std::make_shared<EstimateCache>(); }

namespace {

// The cache key of a purpose's groups (0 tp, 1 dp, 2 pp, 3 cp, 4 SMDDP's first node, 5 expert
// dp). In rank_of's order the groups depend on fewer degrees than the layout: tp groups are the
// world's consecutive blocks of tp ranks (world, tp); cp groups take every tp-th rank inside
// blocks of cp·tp (world, tp, cp); dp groups take every tp-th rank inside blocks of dp·cp·tp
// (world, tp, dp·cp); pp pairs join rank x of one block of world/pp ranks with rank x of the
// next (world, pp). Keying on those alone gives one ring_net per distinct list of groups, which
// layouts with the same groups share: the same groups in the same order give the same RingNet.
// SMDDP's and the expert-dp groups keep the whole layout.
EstimateCache::NetKey net_key(const hw::Cluster* cl, const plan::Plan& p, int purpose) {
  const int world = p.world_size();
  switch (purpose) {
    case 0: return {cl, world, p.tp, 0, 0, purpose, 1};
    case 1: return {cl, world, p.tp, 0, p.dp_cp(), purpose, 1};
    case 2: return {cl, world, 0, p.pp, 0, purpose, 1};
    case 3: return {cl, world, p.tp, 0, p.cp, purpose, 1};
    default: return {cl, p.dp, p.tp, p.pp, p.cp, purpose, purpose == 5 ? p.ep : 1};
  }
}

// Groups of the rank layout rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank,
// GPU = rank (plan::StepProgram::rank_of).
int rank_of(const plan::Plan& p, int d, int t, int s, int c) { return ((s * p.dp + d) * p.cp + c) * p.tp + t; }

std::vector<std::vector<int>> tp_groups(const plan::Plan& p) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < p.pp; ++s)
    for (int d = 0; d < p.dp; ++d)
      for (int c = 0; c < p.cp; ++c) {
        std::vector<int> g;
        for (int t = 0; t < p.tp; ++t) g.push_back(rank_of(p, d, t, s, c));
        out.push_back(g);
      }
  return out;
}

std::vector<std::vector<int>> cp_groups(const plan::Plan& p) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < p.pp; ++s)
    for (int d = 0; d < p.dp; ++d)
      for (int t = 0; t < p.tp; ++t) {
        std::vector<int> g;
        for (int c = 0; c < p.cp; ++c) g.push_back(rank_of(p, d, t, s, c));
        out.push_back(g);
      }
  return out;
}

// The ranks holding the same parameters: every (dp, cp) pair of a (pp, tp) position.
std::vector<std::vector<int>> dp_groups(const plan::Plan& p) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < p.pp; ++s)
    for (int t = 0; t < p.tp; ++t) {
      std::vector<int> g;
      for (int d = 0; d < p.dp; ++d)
        for (int c = 0; c < p.cp; ++c) g.push_back(rank_of(p, d, t, s, c));
      out.push_back(g);
    }
  return out;
}

// Pipeline p2p: every rank of stage s sends to the same (dp, cp, tp) rank of stage s+1, all at
// once; modelled as 2-member groups so ring_net's sharing applies.
std::vector<std::vector<int>> pp_pairs(const plan::Plan& p) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s + 1 < p.pp; ++s)
    for (int d = 0; d < p.dp; ++d)
      for (int c = 0; c < p.cp; ++c)
        for (int t = 0; t < p.tp; ++t) out.push_back({rank_of(p, d, t, s, c), rank_of(p, d, t, s + 1, c)});
  return out;
}

// The tied word embedding's copies: each (dp, cp, tp) rank of the first stage with the same rank
// of the last stage (plan::lower's tied-embedding groups).
std::vector<std::vector<int>> tied_pairs(const plan::Plan& p) {
  std::vector<std::vector<int>> out;
  for (int d = 0; d < p.dp; ++d)
    for (int c = 0; c < p.cp; ++c)
      for (int t = 0; t < p.tp; ++t) out.push_back({rank_of(p, d, t, 0, c), rank_of(p, d, t, p.pp - 1, c)});
  return out;
}

struct StageTimes {
  double fwd_s = 0, bwd_s = 0;        // compute per micro-batch
  double ep_fwd_s = 0, ep_bwd_s = 0;  // exposed ep all-to-alls per micro-batch
  double expert_params = 0;           // routed experts' part of `params`
  double recompute_s = 0;             // part of bwd_s
  double tp_fwd_s = 0, tp_bwd_s = 0;  // exposed tp communication per micro-batch
  double cp_fwd_s = 0, cp_bwd_s = 0;  // exposed cp communication per micro-batch
  double fwd_flops = 0, bwd_flops = 0, recompute_flops = 0;  // per micro-batch, this rank
  double params = 0;                  // on this rank (after tp)
  double param_bytes = 0;             // as ZeRO gathers them (UnitCost::param_bytes)
  std::vector<double> unit_fwd_s;     // for ZeRO-3 overlap
  std::vector<double> unit_param_bytes;
  std::vector<double> unit_params;       // parameters per unit (its gradient reduce-scatter: x the reduce precision)
  std::vector<std::vector<double>> unit_tensor_bytes;  // per parameter tensor (zero3_tensor_sync)
  std::vector<std::vector<double>> unit_tensor_elems;  // ... its elements
  std::vector<double> unit_rerun_s;   // the unit's recomputation (0: none)
  double host_s = 0;                  // host issue time per micro-batch (fwd + bwd + recompute kernels)
  int units = 0;                      // layer units on this rank (all chunks)
  int rerun_units = 0;                // of which a recomputation re-runs (a third host pass)
  bool host_bound = false;            // the host's issue time set fwd_s and bwd_s (apply_host)
  std::array<double, 2> fwd_sm_s{}, bwd_sm_s{};  // fwd_s, bwd_s (recomputation included) with a
                                                 // collective's SMs taken (UnitCost::fwd_sm_s)
  std::vector<std::array<double, 2>> unit_fwd_sm_s;
};

}  // namespace

namespace {

std::vector<UnitCost> compute_unit_costs(const plan::Plan& p, const plan::PlanContext& ctx, const RingNet& tp_net,
                                         const RingNet& cp_net, Precision prec, const AnalyticalOptions& options) {
  const std::vector<std::vector<int>> ep_groups = plan::ep_groups(p);
  std::unique_ptr<sim::ClusterTopology> topology;
  if (!ep_groups.empty()) topology = std::make_unique<sim::ClusterTopology>(ctx.cluster);
  const auto& graph = ctx.graph;
  const double b = static_cast<double>(p.micro_batch);
  const double elem = bytes_per_element(prec);
  const sim::ComputeModel model(*ctx.gpu, prec, sim::with_software(options.compute, ctx.software), options.calibration.get());
  const double launch_s = ctx.software.launch_s;
  const std::array<int, 2> sms = {sim::nccl_channels(ctx.cluster, false), sim::nccl_channels(ctx.cluster, true)};
  std::vector<UnitCost> out(graph.units().size());
  for (size_t u = 0; u < out.size(); ++u) {
    UnitCost& c = out[u];
    double bwd_after_attention_s = 0;  // backward of the ops after the attention (the cp prefetch's window)
    double kv_bytes = 0;
    for (int id : graph.units()[u].ops) {
      const plan::OpCost oc = plan::op_cost(graph.ops()[static_cast<size_t>(id)], p, prec);
      const double tf = model.op_duration_s(oc, plan::Phase::forward);
      const double tb = model.op_duration_s(oc, plan::Phase::backward);
      c.fwd_s += tf;
      c.bwd_s += tb;
      c.host_fwd_s += model.op_kernels(oc, plan::Phase::forward) * launch_s;
      c.host_bwd_s += model.op_kernels(oc, plan::Phase::backward) * launch_s;
      if (oc.recomputed_by_selective) c.host_recompute_selective_s += model.op_kernels(oc, plan::Phase::forward) * launch_s;
      for (size_t i = 0; i < 2; ++i) {
        const double tf_sm = model.op_duration_s(oc, plan::Phase::forward, sms[i]);
        c.fwd_sm_s[i] += tf_sm;
        c.bwd_sm_s[i] += model.op_duration_s(oc, plan::Phase::backward, sms[i]);
        if (oc.recomputed_by_selective) c.recompute_selective_sm_s[i] += tf_sm;
      }
      if (oc.cp_kv_bytes > 0) {
        kv_bytes += oc.cp_kv_bytes;
        bwd_after_attention_s = 0;
      } else {
        bwd_after_attention_s += tb;
      }
      c.fwd_flops += oc.flops_fwd;
      c.bwd_flops += oc.flops_bwd;
      if (oc.ep_a2a_bytes > 0) {
        // One all-to-all per pass (dispatch: after it forward, before it backward; combine:
        // before it forward, after it backward), the same bytes both ways.
        const double a2a_s = sim::all_to_all_s(oc.ep_a2a_bytes, ep_groups, *topology, sim::SimOptions{}.comm_launch_s);
        c.ep_fwd_s += a2a_s;
        c.ep_bwd_s += a2a_s;
      }
      if (graph.ops()[static_cast<size_t>(id)].expert) c.expert_params += oc.params;
      if (oc.recomputed_by_selective) {
        c.recompute_selective_s += tf;
        c.selective_flops += oc.flops_fwd;
      }
      c.params += oc.params;
      c.param_bytes += oc.params * (oc.fp8_gemm && p.fp8.fp8_params ? 1.0 : elem);
      if (p.zero_stage == 3 && ctx.software.zero3_tensor_sync)
        for (double e : plan::param_tensors_on_rank(graph.ops()[static_cast<size_t>(id)], p.tp, p.ep)) {
          c.tensor_bytes.push_back(e * (oc.fp8_gemm && p.fp8.fp8_params ? 1.0 : elem));
          c.tensor_elems.push_back(e);
        }
    }
    c.full_recomputed = plan::unit_recompute(plan::Recompute::full, graph.units()[u]) == plan::Recompute::full;
    c.recompute_full_s = c.full_recomputed ? c.fwd_s : 0.0;
    if (p.tp > 1) {
      for (const auto& coll : plan::tp_collectives(graph, static_cast<int>(u), p.sequence_parallel, p.cp)) {
        const double bytes = coll.elems_per_sample * b * plan::tp_collective_element_bytes(graph, coll, prec);
        const double t = coll.kind == plan::CollectiveKind::all_reduce ? ring_all_reduce_s(tp_net, bytes) : ring_gather_s(tp_net, bytes);
        (coll.phase == plan::Phase::forward ? c.tp_fwd_s : c.tp_bwd_s) += t;
      }
    }
    if (kv_bytes > 0) {
      const double gather_s = ring_gather_s(cp_net, kv_bytes);  // all-gather of K, V; the reduce-scatter of dK, dV costs as much
      c.cp_fwd_s = gather_s;
      c.cp_bwd_s = std::max(0.0, gather_s - bwd_after_attention_s) + gather_s;
    }
  }
  return out;
}

// Unit costs of a plan's (tp, sequence parallel, micro-batch, precision, attention), cached.
const std::vector<UnitCost>& cached_unit_costs(const plan::Plan& p, const plan::PlanContext& ctx,
                                               const AnalyticalOptions& options, EstimateCache& cache) {
  const Precision prec = p.precision_or(ctx.precision);
  const hw::Cluster* cl = &ctx.cluster;
  // Unit costs depend on the layout only through the tp and cp groups' bandwidth; groups inside
  // one node never share links with each other, so there the layout does not matter, and
  // neither does the cluster's size: every node of an instance type is the same, so clusters of
  // one type and node size share the costs (the key names the catalog's instance type, not the
  // cluster). The ep groups' all-to-all depends on the whole layout (they span data-parallel
  // ranks). The graph is named by its shared operator list (every context's copy shares it).
  const bool in_node = p.tp * p.cp <= ctx.cluster.gpus_per_node() && p.ep == 1;
  const void* scope = in_node ? static_cast<const void*>(ctx.instance) : static_cast<const void*>(cl);
  return cache.units({scope, ctx.cluster.gpus_per_node(), ctx.software.name, &ctx.graph.ops(), in_node ? 0 : p.dp, p.tp,
                      in_node ? 0 : p.pp, p.cp, p.micro_batch, p.sequence_parallel, static_cast<int>(prec),
                      static_cast<int>(p.attention), p.ep, plan::moe_expert_load(p),
                      prec == Precision::fp8 ? EstimateCache::Fp8Key{static_cast<int>(p.fp8.recipe), p.fp8.amax_history, p.fp8.fp8_params,
                                                                      p.num_micro_batches}
                                             : EstimateCache::Fp8Key{},
                      p.zero_stage == 3 && ctx.software.zero3_tensor_sync},
                     [&] {
                       const RingNet tp_net = p.tp > 1 ? cache.net(net_key(cl, p, 0), [&] { return ring_net(ctx.cluster, tp_groups(p)); })
                                                       : RingNet{};
                       const RingNet cp_net = p.cp > 1 ? cache.net(net_key(cl, p, 3), [&] { return ring_net(ctx.cluster, cp_groups(p)); })
                                                       : RingNet{};
                       return compute_unit_costs(p, ctx, tp_net, cp_net, prec, options);
                     });
}

void apply_host(const plan::Plan& p, const hw::SoftwareStack& sw, std::vector<StageTimes>& stages);

// Per pipeline rank: compute and tp communication per micro-batch, host-bound ranks stretched
// to the host's issue time (apply_host).
std::vector<StageTimes> stage_times(const plan::Plan& p, const std::vector<UnitCost>& unit_costs, const hw::SoftwareStack& sw) {
  std::vector<StageTimes> stages(static_cast<size_t>(p.pp));
  for (int s = 0; s < p.pp; ++s) {
    StageTimes& st = stages[static_cast<size_t>(s)];
    for (int v = 0; v < p.vp; ++v) {
      const auto& a = p.stages[static_cast<size_t>(v * p.pp + s)];
      for (int u = a.first_unit; u <= a.last_unit; ++u) {
        const UnitCost& c = unit_costs[static_cast<size_t>(u)];
        const bool full = p.recompute == plan::Recompute::full && c.full_recomputed;
        st.fwd_s += c.fwd_s;
        st.bwd_s += c.bwd_s;
        for (size_t i = 0; i < 2; ++i) {
          st.fwd_sm_s[i] += c.fwd_sm_s[i];
          st.bwd_sm_s[i] += c.bwd_sm_s[i] + (full                                        ? c.fwd_sm_s[i]
                                             : p.recompute == plan::Recompute::selective ? c.recompute_selective_sm_s[i]
                                                                                         : 0.0);
        }
        st.fwd_flops += c.fwd_flops;
        st.bwd_flops += c.bwd_flops;
        st.host_s += c.host_fwd_s + c.host_bwd_s +
                      (full                                        ? c.host_fwd_s
                       : p.recompute == plan::Recompute::selective ? c.host_recompute_selective_s
                                                                   : 0.0);
        ++st.units;
        if (full || p.recompute == plan::Recompute::selective) ++st.rerun_units;
        st.tp_fwd_s += c.tp_fwd_s;
        st.tp_bwd_s += c.tp_bwd_s;
        st.cp_fwd_s += c.cp_fwd_s;
        st.cp_bwd_s += c.cp_bwd_s;
        st.ep_fwd_s += c.ep_fwd_s;
        st.ep_bwd_s += c.ep_bwd_s;
        st.expert_params += c.expert_params;
        if (full) {
          st.recompute_s += c.recompute_full_s;
          st.recompute_flops += c.fwd_flops;
          st.tp_bwd_s += c.tp_fwd_s;  // the re-run forward repeats its collectives
          st.cp_bwd_s += c.cp_fwd_s;
          st.ep_bwd_s += c.ep_fwd_s;
        } else if (p.recompute == plan::Recompute::selective) {
          st.recompute_s += c.recompute_selective_s;
          st.recompute_flops += c.selective_flops;
        }
        if (p.zero_stage == 3) {  // only ZeRO-3's per-unit gathers read these (zero3_gathers_s)
          st.unit_fwd_s.push_back(c.fwd_s);
          st.unit_fwd_sm_s.push_back(c.fwd_sm_s);
          st.unit_param_bytes.push_back(c.param_bytes);
          st.unit_params.push_back(c.params);
          st.unit_tensor_bytes.push_back(c.tensor_bytes);
          st.unit_tensor_elems.push_back(c.tensor_elems);
          st.unit_rerun_s.push_back(full ? c.fwd_s : p.recompute == plan::Recompute::selective ? c.recompute_selective_s : 0.0);
        }
        st.params += c.params;
        st.param_bytes += c.param_bytes;
      }
    }
    st.bwd_s += st.recompute_s;
  }
  apply_host(p, sw, stages);
  return stages;
}

// The host (plan::PlanContext::software) issuing a pipeline rank's kernels, as the step
// simulator's host timeline runs it in aggregate: per micro-batch the host spends its kernels'
// issue time, a layer hook per unit and pass (a third pass with recomputation) and the
// micro-batch cost (twice under pipelining: forward and backward of a micro-batch alternate
// with other micro-batches'). Where that exceeds the GPU time the micro-batch takes the host's
// time: forward and backward stretch alike (StageTimes::host_bound).
void apply_host(const plan::Plan& p, const hw::SoftwareStack& sw, std::vector<StageTimes>& stages) {
  if (sw.name.empty()) return;
  for (StageTimes& st : stages) {
    const double host = st.host_s + (2.0 * st.units + st.rerun_units) * sw.layer_hook_s + (p.pp > 1 ? 2.0 : 1.0) * sw.micro_batch_s;
    const double gpu = st.fwd_s + st.bwd_s;
    if (!(host > gpu) || !(gpu > 0)) continue;
    st.host_bound = true;
    const double f = host / gpu;
    st.fwd_s *= f;
    st.bwd_s *= f;
    st.recompute_s *= f;
    for (size_t i = 0; i < 2; ++i) {
      st.fwd_sm_s[i] = std::max(st.fwd_sm_s[i], st.fwd_s);
      st.bwd_sm_s[i] = std::max(st.bwd_sm_s[i], st.bwd_s);
    }
  }
}

// The host time the GPU waits for outside the stretched compute (StepEstimate::host_s): the
// first kernel waits for its issue (micro-batch cost, layer hook, one launch; part of the
// stretched compute when host-bound); the optimizer waits for the per-step work and its launch
// after a sync (or after the host's backlog when host-bound).
double host_exposed_s(const hw::SoftwareStack& sw, const std::vector<StageTimes>& stages) {
  if (sw.name.empty()) return 0.0;
  const bool bound = std::any_of(stages.begin(), stages.end(), [](const StageTimes& st) { return st.host_bound; });
  double s = bound ? 0.0 : sw.micro_batch_s + sw.layer_hook_s + sw.launch_s;
  if (sw.sync_before_optimizer || bound) s += sw.step_s + sw.launch_s;
  return s;
}

// One push (or pull) phase of servers on the hosts of `nodes` nodes, each holding 1/nodes of
// every worker's `bytes_per_gpu`, as the simulator's parameter-server and SMDDP patterns run
// it: all flows advance at one rate, so the phase lasts bytes per flow x the busiest link's
// flows / its bandwidth. A GPU's PCIe path to its host carries its `nodes` flows (its share of
// the switch uplink when GPUs share one); each node's NICs carry the flows of its G GPUs to or
// from the other nodes' servers, G(N-1), at the NICs' rate (each NIC no faster than the PCIe
// link it hangs off). Plus the per-hop latency of the longest route and the launch.
double server_phase_s(const plan::PlanContext& ctx, const RingNet& dp_net, double bytes_per_gpu, int nodes, double launch_s) {
  const auto& t = ctx.instance->topology;
  const auto& net = ctx.instance->network;
  double host_bw = t.pcie_bandwidth_bytes_per_s;
  if (t.gpus_per_pcie_switch > 0 && t.pcie_switch_uplink_bytes_per_s > 0)
    host_bw = std::min(host_bw, t.pcie_switch_uplink_bytes_per_s / t.gpus_per_pcie_switch);
  const double n = nodes;
  const double per_flow = bytes_per_gpu / n;
  double t_s = per_flow * n / host_bw;
  if (nodes > 1) {
    const double nic_bw = net.nics * std::min(net.nic_bandwidth_bytes_per_s(), t.pcie_bandwidth_bytes_per_s);
    const double g = ctx.cluster.gpus_per_node();
    t_s = std::max(t_s, per_flow * g * (n - 1) / nic_bw);
  }
  return t_s + dp_net.latency_s + launch_s;
}

// Extra seconds of `busy_s` of compute (at full speed; `busy_sm_s` with a collective's SMs
// taken) that a collective of `comm_s` overlaps from the compute's start, as the simulator's SM
// contention runs it (sim::SimOptions::sm_contention): while the collective holds its SMs the
// compute advances at r = busy_s / busy_sm_s, so they overlap W = min(comm_s, busy_s / r) and the
// compute ends (1 - r) W later.
double sm_contention_extra_s(double busy_s, double busy_sm_s, double comm_s) {
  if (!(busy_s > 0) || !(busy_sm_s > busy_s) || !(comm_s > 0)) return 0.0;
  const double r = busy_s / busy_sm_s;
  return (1.0 - r) * std::min(comm_s, busy_s / r);
}

// The dp groups' members on the first node (in ring order: SMDDP's intra-node rings).
std::vector<std::vector<int>> dp_groups_on_first_node(const plan::Plan& p, const hw::Cluster& cluster) {
  std::vector<std::vector<int>> out;
  for (const auto& g : dp_groups(p)) {
    std::vector<int> mine;
    for (int r : g)
      if (cluster.node_of(r) == 0) mine.push_back(r);
    if (mine.size() > 1) out.push_back(mine);
  }
  return out;
}

double dp_collective_sim_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, plan::CollectiveKind kind,
                           double bytes);

// One data-parallel reduction of `grad_bytes` over the dp * cp group with the plan's algorithm.
// `intra_net`: the rings of dp_groups_on_first_node (SMDDP only).
double dp_reduce_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, const RingNet& dp_net,
                   const RingNet& intra_net, double grad_bytes) {
  const int dpcp = p.dp_cp();
  double reduce_s = 0;
  switch (p.dp_algorithm) {
    case plan::DpAlgorithm::ring:
      reduce_s = ring_all_reduce_s(dp_net, grad_bytes);
      break;
    case plan::DpAlgorithm::tree:
      // As the simulator times NCCL's tree: its double binary tree over the group's GPUs on the
      // cluster's links, with NCCL's tree latency and protocols (the first dp group's pattern).
      reduce_s = dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::all_reduce, grad_bytes);
      break;
    case plan::DpAlgorithm::hierarchical: {
      // Intra-node reduce-scatter over the GPUs that share a node (all of the node's
      // replicas of this stage: the tp groups of one node reduce together), inter-node
      // all-reduce of 1/k of the data by k parallel rings, intra-node all-gather. The k rings
      // leave each node from the same k GPUs (and NICs) as the flat ring's k channels, so
      // together they move the whole gradient at dp_net's rate, which already sums those
      // channels: each ring's 1/k at 1/k of it (the simulator's inter phase, likewise).
      const int k = std::max(1, ctx.cluster.gpus_per_node() / std::max(1, p.tp));
      const int nodes = dp_net.nodes;
      if (k <= 1 || nodes <= 1) {
        reduce_s = ring_all_reduce_s(dp_net, grad_bytes);
      } else {
        RingNet intra = dp_net;
        intra.size = std::min(k, dpcp);
        const hw::Route& r = ctx.cluster.route(0, std::min(ctx.cluster.gpus_per_node() - 1, p.tp));
        const auto kind = ctx.instance->topology.kind;
        const bool nvl = kind == hw::IntraNodeKind::nvswitch || kind == hw::IntraNodeKind::nvlink_mesh;
        intra.bandwidth_bytes_per_s =
            r.bottleneck_bandwidth_bytes_per_s *
            (nvl ? sim::nccl_nvlink_share(ctx.gpu->compute_capability, kind == hw::IntraNodeKind::nvswitch) : 1.0);
        intra.latency_s = r.latency_s;
        intra.nodes = 1;  // intra-node steps only
        RingNet inter = dp_net;
        inter.size = nodes;
        reduce_s = 2.0 * ring_gather_s(intra, grad_bytes) + ring_all_reduce_s(inter, grad_bytes);
      }
      break;
    }
    case plan::DpAlgorithm::parameter_server: {
      // TensorFlow parameter server: one server per node on its host; every GPU pushes its
      // gradients (1/N to each server) and pulls the updated variables back.
      const double launch = sim::SimOptions{}.comm_launch_s;
      reduce_s = 2.0 * server_phase_s(ctx, dp_net, grad_bytes, dp_net.nodes, launch);
      break;
    }
    case plan::DpAlgorithm::smddp: {
      // SMDDP (Herring): intra-node reduce-scatter over the k GPUs of the group on a node, each
      // GPU's S/k shard pushed to the N nodes' servers and pulled back, intra-node all-gather.
      // Every phase runs on the per-hop latency model (k - 1 steps within the node, one step
      // to and from the servers), each after the launch cost.
      const int k = intra_net.size;
      const double launch = sim::SimOptions{}.comm_launch_s;
      double intra_s = 0;
      if (k > 1) intra_s = (k - 1.0) / k * grad_bytes / intra_net.bandwidth_bytes_per_s + (k - 1.0) * intra_net.latency_s;
      reduce_s = launch + 2.0 * intra_s + 2.0 * (server_phase_s(ctx, dp_net, grad_bytes / k, dp_net.nodes, 0.0));
      break;
    }
    case plan::DpAlgorithm::horovod: {
      // NCCL's ring all-reduce of the fusion buffers (at most bucket_size_bytes each). A buffer
      // waits for the background thread's next tick, half a cycle on average; buffers ready at
      // one tick run back to back, so only the last one's wait adds to the reduction.
      reduce_s = ring_all_reduce_s(dp_net, grad_bytes) + 0.5 * sim::kHorovodCycleTimeS;
      break;
    }
  }
  return reduce_s;
}

// How long a dp collective holds its SMs: the simulator's uncontended time of the same
// pattern for the first dp group (NCCL's multi-ring channels across nodes; the other groups'
// share of the NICs is left out to keep the search fast), so the overlap window is about the
// one the simulator slows compute for.
double dp_collective_sim_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, plan::CollectiveKind kind,
                           double bytes) {
  if (bytes <= 0) return 0.0;
  const sim::CollectiveAlgorithm requested = sim::from_dp_algorithm(p.dp_algorithm);
  // The first dp group, (pp 0, tp 0)'s, is ranks 0, tp, 2·tp, ... (dp·cp of them): it depends on
  // (tp, dp·cp) alone, and so does its pattern.
  const int dpcp = p.dp_cp();
  const sim::CommPattern& pat = cache.pattern(
      {&ctx.cluster, dpcp, p.tp, 0, 0, static_cast<int>(kind), static_cast<int>(requested)}, [&] {
        const sim::ClusterTopology& topo = cache.topology(ctx.cluster);
        std::vector<int> first(static_cast<size_t>(dpcp));
        for (int k = 0; k < dpcp; ++k) first[static_cast<size_t>(k)] = k * p.tp;
        const std::vector<int> group = topo.ring_order(first);
        return sim::build_pattern(kind, sim::effective_algorithm(kind, requested, group, topo), {group}, topo);
      });
  return pat.uncontended_time_s(bytes);
}

// ZeRO-3 over m micro-batches: parameters are gathered per unit in forward and again in
// backward; with prefetch the gather hides behind the previous unit's compute when that is
// longer, and takes its channels' SMs from that compute meanwhile. Returns the exposed gathers
// and the compute they slowed (seconds per step).
std::pair<double, double> zero3_gathers_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, const StageTimes& st,
                                          const RingNet& dp_net, double m, double reducing_mbs) {
  // A stack that releases the parameters after a recomputed forward gathers that unit a third
  // time (hw::SoftwareStack::zero3_recompute_gathers, as plan::lower).
  auto regathers = [&](size_t u) { return ctx.software.zero3_recompute_gathers && st.unit_rerun_s[u] > 0; };
  if (ctx.software.zero3_tensor_sync) {
    // One gather per tensor after a device sync (hw::SoftwareStack::zero3_tensor_sync, as
    // plan::lower): each issued by the host, none overlapped; forward, backward and (regathers)
    // the recomputation. Per-rank views before the call, per-rank copies alongside the transfer.
    const double n = static_cast<double>(p.dp) * p.cp;
    const double views = n * ctx.software.zero3_rank_view_s, copies = n * ctx.software.zero3_rank_copy_s;
    double total = 0;
    for (size_t u = 0; u < st.unit_tensor_bytes.size(); ++u) {
      double pass = 0;
      for (double bytes : st.unit_tensor_bytes[u])
        pass += ctx.software.zero3_tensor_issue_s + views +
                std::max(copies, dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::all_gather, bytes));
      total += (regathers(u) ? 3.0 : 2.0) * pass;
    }
    return {m * total, 0.0};
  }
  const size_t xi = dp_net.nodes > 1 ? 1 : 0;
  const double grad_elem = bytes_per_element(plan::grad_reduce_precision(p, ctx));
  double exposed = 0, extra = 0;
  for (size_t u = 0; u < st.unit_param_bytes.size(); ++u) {
    // The gather as the simulator times it (NCCL's ring over this cluster's links, with its
    // protocol and per-step latency): the ring approximation strays at hundreds of ranks.
    const double f = st.unit_fwd_s[u], f_sm = st.unit_fwd_sm_s[u][xi];
    const double g_sim = dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::all_gather, st.unit_param_bytes[u]);
    const double g = g_sim;
    const double extra_f = sm_contention_extra_s(f, f_sm, g_sim), extra_b = sm_contention_extra_s(2.0 * f, 2.0 * f_sm, g_sim);
    extra += m * (extra_f + extra_b);
    exposed += m * (std::max(0.0, g - f - extra_f) + std::max(0.0, g - 2.0 * f - extra_b));
    if (reducing_mbs > 0) {
      // An earlier micro-batch's backward also carries the unit's gradient reduce-scatter (its
      // gradients are reduced every micro-batch, plan::lower), sharing the links and SMs with the
      // gather: instead of the gather alone, both.
      const double rs_sim = dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::reduce_scatter, st.unit_params[u] * grad_elem);
      const double rs = rs_sim;
      const double extra_both = sm_contention_extra_s(2.0 * f, 2.0 * f_sm, g_sim + rs_sim);
      extra += reducing_mbs * (extra_both - extra_b);
      exposed += reducing_mbs * (std::max(0.0, g + rs - 2.0 * f - extra_both) - std::max(0.0, g - 2.0 * f - extra_b));
    }
    if (regathers(u)) {  // the backward's gather hides behind the unit's own recomputation
      const double r = st.unit_rerun_s[u];
      const double extra_r = sm_contention_extra_s(r, r * f_sm / std::max(f, 1e-30), g_sim);
      extra += m * extra_r;
      exposed += m * std::max(0.0, g - r - extra_r);
    }
  }
  exposed += dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::all_gather, st.unit_param_bytes.empty() ? 0 : st.unit_param_bytes.front());
  return {exposed, extra};
}

// The gradient reduce-scatters of a stack that reduces ZeRO-3 gradients tensor by tensor
// (zero3_tensor_sync, as plan::lower): per unit, the first tensor's host issue (per-rank views
// and copies), then each transfer alongside the next tensor's issue (seconds per micro-batch).
double zero3_tensor_reduce_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, const StageTimes& st) {
  const double n = static_cast<double>(p.dp) * p.cp;
  const double issue = n * (ctx.software.zero3_rank_view_s + ctx.software.zero3_rank_copy_s);
  const double grad_elem = bytes_per_element(plan::grad_reduce_precision(p, ctx));
  double total = 0;
  for (const auto& elems : st.unit_tensor_elems) {
    if (elems.empty()) continue;
    total += issue;
    for (size_t k = 0; k < elems.size(); ++k) {
      const double rs = dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::reduce_scatter, elems[k] * grad_elem);
      total += k + 1 < elems.size() ? std::max(rs, issue) : rs;
    }
  }
  return total;
}

// ZeRO-1/2/3's gradient reduce-scatters and parameter gathers (estimate_step's dp terms).
struct ZeroInputs {
  const RingNet& dp_net;
  const RingNet& edp_net;
  double dense_bytes, expert_bytes;  // gradients over dp * cp / over expert-dp
  double last_bwd;                   // the last micro-batch's backward, exposed comm included
  double m;                          // micro-batches
  size_t xi;                         // the dp collectives' channels (sim::nccl_channels)
};
struct ZeroTerms {
  double grad_exposed = 0, param_exposed = 0, overlap_extra_s = 0;
};
ZeroTerms zero_terms(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, const StageTimes& st, const ZeroInputs& in,
                     const auto& exposed_after_backward) {
  ZeroTerms z;
  // Reduce-scatter the gradients (half of an all-reduce), then all-gather the updated
  // parameters after the optimizer step (the other half, exposed).
  const double half = ring_gather_s(in.dp_net, in.dense_bytes) + ring_gather_s(in.edp_net, in.expert_bytes);
  // A stack that synchronizes before each ZeRO-3 gather waits for every reduce-scatter: each
  // micro-batch's (they are reduced every micro-batch, below).
  const bool sync = p.zero_stage == 3 && ctx.software.zero3_tensor_sync;
  z.grad_exposed = sync ? in.m * zero3_tensor_reduce_s(p, ctx, cache, st)
                       : exposed_after_backward(half, plan::CollectiveKind::reduce_scatter, in.dense_bytes);
  // The updated parameters as ZeRO gathers them (FP8 weights at 1 byte with fp8_params): the
  // non-expert part over dp * cp, the experts over expert-dp.
  const double grad_bytes = in.dense_bytes + in.expert_bytes;
  const double gathered = grad_bytes > 0 ? st.param_bytes / grad_bytes : 1.0;
  z.param_exposed = ring_gather_s(in.dp_net, in.dense_bytes * gathered) + ring_gather_s(in.edp_net, in.expert_bytes * gathered);
  // Sharded gradients are reduced every micro-batch (plan::lower): the m - 1 earlier reductions
  // run behind that micro-batch's backward (ZeRO-3: each unit's behind the unit before it, after
  // its gather on the same stream), taking SMs from it, and block the next compute when the
  // plan does not overlap them.
  const double reducing_mbs = p.zero_stage >= 2 && p.overlap_grad_reduce ? in.m - 1.0 : 0.0;
  if (p.zero_stage == 3)
    std::tie(z.param_exposed, z.overlap_extra_s) = zero3_gathers_s(p, ctx, cache, st, in.dp_net, in.m, reducing_mbs);
  if (p.zero_stage >= 2 && !p.overlap_grad_reduce && !sync) z.grad_exposed += (in.m - 1.0) * half;
  if (p.zero_stage == 2 && reducing_mbs > 0) {
    const double rs_sim = dp_collective_sim_s(p, ctx, cache, plan::CollectiveKind::reduce_scatter, in.dense_bytes);
    const double extra = sm_contention_extra_s(st.bwd_s, st.bwd_sm_s[in.xi], rs_sim);
    z.overlap_extra_s += reducing_mbs * extra;
    z.grad_exposed += reducing_mbs * std::max(0.0, half - in.last_bwd - extra);
  }
  return z;
}

// A pipelined model with tied embeddings: after backward the first and the last stage
// all-reduce the word embedding's gradient (Megatron-LM's finalize_model_grads), before the
// data-parallel reduction of that copy; nothing overlaps it (plan::lower: the tied bucket).
double tied_embedding_s(const plan::Plan& p, const plan::PlanContext& ctx, EstimateCache& cache, double elem) {
  if (p.pp < 2 || !ctx.model_spec.tied_embeddings) return 0.0;
  const RingNet n = cache.net(net_key(&ctx.cluster, p, 6), [&] { return ring_net(ctx.cluster, tied_pairs(p)); });
  return ring_all_reduce_s(n, static_cast<double>(ctx.model_spec.vocab) * static_cast<double>(ctx.model_spec.hidden) / p.tp * elem);
}

// Pipeline p2p per micro-batch and chunk boundary: the stage output forward, its gradient
// backward; with sequence parallelism (or Megatron's scatter-gather) each tp rank sends 1/tp.
double pipeline_p2p_s(const plan::Plan& p, const models::ModelGraph& graph, const RingNet& pp_net, double elem) {
  double out_elems = 0;
  for (const auto& u : graph.units()) out_elems = std::max(out_elems, u.output_elems);
  const double bytes = out_elems * static_cast<double>(p.micro_batch) * elem / p.tp / p.cp;
  return bytes / pp_net.bandwidth_bytes_per_s + pp_net.latency_s;
}

}  // namespace

StepEstimate estimate_step(const plan::Plan& p, const plan::PlanContext& ctx, const AnalyticalOptions& options,
                           EstimateCache* cache) {
  const auto& graph = ctx.graph;
  const auto& gpu = *ctx.gpu;
  const Precision prec = p.precision_or(ctx.precision);
  const double elem = bytes_per_element(prec);
  const double grad_elem = bytes_per_element(plan::grad_reduce_precision(p, ctx));  // the dp reductions' bytes per gradient
  std::shared_ptr<EstimateCache> own;
  if (!cache) {
    own = make_estimate_cache();
    cache = own.get();
  }
  const hw::Cluster* cl = &ctx.cluster;
  auto net = [&](int purpose, auto groups_fn) {
    return cache->net(net_key(cl, p, purpose), [&] { return ring_net(ctx.cluster, groups_fn(p)); });
  };
  // Gradients are reduced (and ZeRO shards) over the dp * cp ranks that hold the same parameters.
  const int dpcp = p.dp_cp();
  const RingNet dp_net = dpcp > 1 ? net(1, dp_groups) : RingNet{};
  const RingNet pp_net = p.pp > 1 ? net(2, pp_pairs) : RingNet{};
  const std::vector<UnitCost>& unit_costs = cached_unit_costs(p, ctx, options, *cache);

  // Per pipeline rank: compute and tp communication per micro-batch.
  std::vector<StageTimes> stages = stage_times(p, unit_costs, ctx.software);
  // The stack's pass over each unit's unsharded gradient before its reduce-scatter (ZeRO-3,
  // every micro-batch: hw::SoftwareStack::grad_epilogue), serial with the backward (plan::lower).
  if (p.zero_stage == 3 && dpcp > 1) {
    const double per_param = ctx.software.grad_epilogue_bytes(prec, plan::grad_reduce_precision(p, ctx));
    if (per_param > 0) {
      const double bw = gpu.memory_bandwidth_bytes_per_s * sim::ComputeModel(gpu, prec, options.compute, options.calibration.get())
                                                              .memory_efficiency(static_cast<int>(models::OpKind::residual), sim::kPhaseBackward);
      for (StageTimes& st : stages) st.bwd_s += st.params * per_param / bw;
    }
  }
  // Synchronized batch norm: per micro-batch, its collectives block the layers (exposed), timed
  // as the simulator times them (sim::sync_batchnorm_stage_s); zero unless the plan asks.
  const std::vector<double> sync_bn_s = sim::sync_batchnorm_stage_s(p, ctx);
  // Tied embeddings: the last stage holds a copy of the word embedding (see memory.cpp).
  if (p.pp > 1 && ctx.model_spec.tied_embeddings)
    stages.back().params += static_cast<double>(ctx.model_spec.vocab) * static_cast<double>(ctx.model_spec.hidden) / p.tp;

  const double p2p_s = p.pp > 1 ? pipeline_p2p_s(p, graph, pp_net, elem) : 0.0;

  StepEstimate e{.host_s = host_exposed_s(ctx.software, stages)};
  const double m = static_cast<double>(p.num_micro_batches);
  double max_stage = 0, sum_stage = 0;
  size_t critical = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    const double t = st.fwd_s + st.bwd_s + st.tp_fwd_s + st.tp_bwd_s + st.cp_fwd_s + st.cp_bwd_s + st.ep_fwd_s + st.ep_bwd_s + sync_bn_s[s] +
                     (p.pp > 1 ? 2.0 * p.vp * p2p_s : 0.0);
    sum_stage += t;
    if (t > max_stage) {
      max_stage = t;
      critical = s;
    }
  }
  const double mean_stage = sum_stage / p.pp;
  const double pipeline_s = m * max_stage + (p.pp - 1.0) / p.vp * mean_stage;
  const StageTimes& cs = stages[critical];
  e.compute_s = m * (cs.fwd_s + cs.bwd_s);
  e.recompute_s = m * cs.recompute_s;
  e.bubble_s = pipeline_s - m * max_stage;
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::tp)] = m * (cs.tp_fwd_s + cs.tp_bwd_s);
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::pp)] = p.pp > 1 ? m * 2.0 * p.vp * p2p_s : 0.0;
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::cp)] = m * (cs.cp_fwd_s + cs.cp_bwd_s);
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::sync_bn)] = m * sync_bn_s[critical];
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::ep)] = m * (cs.ep_fwd_s + cs.ep_bwd_s);

  // Data parallel / ZeRO, on the rank with the most parameters.
  double params = 0;
  size_t heavy = 0;
  for (size_t s = 0; s < stages.size(); ++s)
    if (stages[s].params > params) {
      params = stages[s].params;
      heavy = s;
    }
  const double n = dpcp;
  // Expert parallelism: the routed experts' gradients are reduced (and ZeRO-sharded) over the
  // expert-dp group, after the others on the same stream (plan::lower's expert buckets).
  const double expert_params = p.ep > 1 ? stages[heavy].expert_params : 0.0;
  const double ne = p.expert_dp();
  const RingNet edp_net = p.ep > 1 && p.expert_dp() > 1 ? net(5, plan::expert_dp_groups) : RingNet{};
  double dp_exposed = 0, zero_param_exposed = 0, zero_grad_exposed = 0, ps_exposed = 0;
  double overlap_extra_s = 0;  // compute slowed by the SMs of collectives it overlaps
  if (dpcp > 1) {
    const size_t xi = dp_net.nodes > 1 ? 1 : 0;  // the dp collectives' channels (sim::nccl_channels)
    const double grad_bytes = params * grad_elem;
    const double dense_bytes = (params - expert_params) * grad_elem, expert_bytes = expert_params * grad_elem;
    const double last_bwd = stages[heavy].bwd_s + stages[heavy].tp_bwd_s + stages[heavy].cp_bwd_s + stages[heavy].ep_bwd_s;
    const double bucket_s_fraction = std::min(1.0, p.bucket_size_bytes / std::max(grad_bytes, 1.0));
    // Buckets reduce while backward runs (taking SMs from it: it ends later, hiding more), the
    // last one after it. Cost: exposed + the slowed compute (here, not in compute_s: the search's
    // lower bound for other dp algorithms and buckets drops these terms, refine_items).
    auto exposed_after_backward = [&](double t, plan::CollectiveKind kind, double bytes) {
      if (!p.overlap_grad_reduce) return t;
      const double extra =
          p.dp_algorithm == plan::DpAlgorithm::parameter_server || p.dp_algorithm == plan::DpAlgorithm::smddp
              ? 0.0  // not NCCL kernels (sim: no SM contention)
              : sm_contention_extra_s(stages[heavy].bwd_s, stages[heavy].bwd_sm_s[xi],
                                      dp_collective_sim_s(p, ctx, *cache, kind, bytes) * (1.0 - bucket_s_fraction));
      return extra + std::max(t - last_bwd - extra, t * bucket_s_fraction);
    };
    const RingNet intra_net = p.dp_algorithm == plan::DpAlgorithm::smddp
                                  ? net(4, [&](const plan::Plan& q) { return dp_groups_on_first_node(q, ctx.cluster); })
                                  : RingNet{};
    const double reduce_s = dp_reduce_s(p, ctx, *cache, dp_net, intra_net, dense_bytes) + ring_all_reduce_s(edp_net, expert_bytes);
    if (p.zero_stage == 0) {
      // The parameter server's push overlaps backward; its pull fetches the variables the
      // optimizer step updated, after it (plan::lower: reduce-scatter, optimizer, all-gather).
      if (p.dp_algorithm == plan::DpAlgorithm::parameter_server)
        ps_exposed = exposed_after_backward(0.5 * reduce_s, plan::CollectiveKind::reduce_scatter, dense_bytes) + 0.5 * reduce_s;
      else
        dp_exposed = exposed_after_backward(reduce_s, plan::CollectiveKind::all_reduce, dense_bytes);
    } else {
      const ZeroTerms z = zero_terms(p, ctx, *cache, stages[heavy], {dp_net, edp_net, dense_bytes, expert_bytes, last_bwd, m, xi},
                                     exposed_after_backward);
      zero_grad_exposed = z.grad_exposed;
      zero_param_exposed = z.param_exposed;
      overlap_extra_s = z.overlap_extra_s;
    }
  }
  dp_exposed += tied_embedding_s(p, ctx, *cache, grad_elem);
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::dp)] = dp_exposed;
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::zero_grad)] = zero_grad_exposed;
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::zero_param)] = zero_param_exposed;
  e.exposed_comm_by_purpose_s[static_cast<size_t>(plan::CommPurpose::ps)] = ps_exposed;

  // Optimizer: Adam touches ~30 bytes per parameter (mixed precision: read 16-bit weight and
  // gradient, fp32 master, momentum, variance; write them back) of the rank's shard.
  const bool sharded = p.zero_stage >= 1 || (p.dp_algorithm == plan::DpAlgorithm::parameter_server && dpcp > 1);
  const double shard = sharded ? (params - expert_params) / n + expert_params / ne : params;
  e.optimizer_s = shard * (is_mixed(prec) ? 30.0 : 28.0) /
                  (gpu.memory_bandwidth_bytes_per_s * sim::ComputeModel(gpu, prec, options.compute, options.calibration.get())
                                                          .memory_efficiency(sim::kOpKindOptimizer));

  e.compute_s += overlap_extra_s;
  e.step_time_s = pipeline_s + overlap_extra_s + dp_exposed + zero_grad_exposed + zero_param_exposed + ps_exposed + e.optimizer_s + e.host_s;
  const double gpus = p.world_size();
  e.model_flops_per_step = graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  double recompute_flops = 0;
  for (const auto& st : stages) recompute_flops += st.recompute_flops;
  // recompute_flops is per micro-batch per pipeline rank on one tp rank: scale to the step.
  e.hardware_flops_per_step = e.model_flops_per_step + recompute_flops * m * p.tp * p.dp * p.cp;
  const double peak = gpu.peak_flops_per_s(prec);
  e.mfu = e.model_flops_per_step / (e.step_time_s * gpus * peak);
  e.hfu = e.hardware_flops_per_step / (e.step_time_s * gpus * peak);
  e.tokens_per_s = static_cast<double>(p.global_batch) * graph.tokens_per_sample() / e.step_time_s;
  return e;
}

// ---- Added for the partitioner (planner/partition.hpp, by the search helper) ---------------
std::vector<double> unit_times_s(const plan::Plan& p, const plan::PlanContext& ctx, const AnalyticalOptions& options,
                                 EstimateCache* cache) {
  std::shared_ptr<EstimateCache> own;
  if (!cache) {
    own = make_estimate_cache();
    cache = own.get();
  }
  const std::vector<UnitCost>& costs = cached_unit_costs(p, ctx, options, *cache);
  std::vector<double> out(costs.size());
  for (size_t u = 0; u < costs.size(); ++u) {
    const UnitCost& c = costs[u];
    double t = c.fwd_s + c.bwd_s + c.tp_fwd_s + c.tp_bwd_s + c.cp_fwd_s + c.cp_bwd_s;
    if (p.recompute == plan::Recompute::full && c.full_recomputed) t += c.recompute_full_s + c.tp_fwd_s + c.cp_fwd_s;
    else if (p.recompute == plan::Recompute::selective) t += c.recompute_selective_s;
    out[u] = t;
  }
  return out;
}

}  // namespace trainplan::planner
