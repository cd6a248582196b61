// Synchronized batch norm as collectives (sync_batchnorm.hpp).
#include "trainplan/simulator/sync_batchnorm.hpp"

#include <algorithm>
#include <map>

#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::sim {
namespace {

// Channels of every batch-norm op, by op id (0: not a batch norm).
std::vector<int64_t> batchnorm_channels(const models::ModelGraph& graph) {
  std::vector<int64_t> out(graph.ops().size(), 0);
  for (size_t i = 0; i < graph.ops().size(); ++i) {
    const auto& op = graph.ops()[i];
    if (op.kind == models::OpKind::batchnorm && !op.weight_shape.empty()) out[i] = op.weight_shape.front();
  }
  return out;
}

// The data-parallel group (GPU ids) of pipeline rank `s`: the dp x cp ranks of tp rank 0.
std::vector<int> dp_group(const plan::Plan& p, int s) {
  std::vector<int> group;
  for (int d = 0; d < p.dp; ++d)
    for (int c = 0; c < p.cp; ++c) group.push_back(((s * p.dp + d) * p.cp + c) * p.tp);
  return group;
}

int forward_passes(const plan::Plan& p) { return p.recompute == plan::Recompute::full ? 2 : 1; }

// Forward (all-gather) and backward (all-reduce) seconds of one layer of `channels` channels.
std::pair<double, double> layer_s(int64_t channels, const std::vector<int>& group, const Topology& topology) {
  const int n = static_cast<int>(group.size());
  return {sync_batchnorm_collective_s(plan::CollectiveKind::all_gather, plan::sync_bn_gather_bytes(channels, n), group, topology,
                                      SimOptions{}.comm_launch_s),
          sync_batchnorm_collective_s(plan::CollectiveKind::all_reduce, plan::sync_bn_reduce_bytes(channels), group, topology,
                                      SimOptions{}.comm_launch_s)};
}

}  // namespace

double sync_batchnorm_collective_s(plan::CollectiveKind kind, double bytes, const std::vector<int>& group, const Topology& topology,
                                   double comm_launch_s) {
  if (group.size() < 2) return 0;
  const std::vector<std::vector<int>> ring = {topology.ring_order(group)};
  auto time_of = [&](CollectiveAlgorithm a) {
    const CommPattern pattern = build_pattern(kind, a, ring, topology);
    return pattern.uncontended_time_s(bytes) + (pattern.nccl ? 0.0 : comm_launch_s);
  };
  double t = time_of(CollectiveAlgorithm::ring);
  if (kind == plan::CollectiveKind::all_reduce) t = std::min(t, time_of(CollectiveAlgorithm::tree));
  return t;
}

SyncBatchnormCost sync_batchnorm_cost(const models::ModelGraph& graph, int64_t micro_batches, const std::vector<int>& group,
                                      const Topology& topology, int forward_passes) {
  SyncBatchnormCost c;
  std::vector<int64_t> channels;
  for (int64_t ch : batchnorm_channels(graph))
    if (ch > 0) channels.push_back(ch);
  c.layers = static_cast<int>(channels.size());
  for (int64_t ch : channels) c.channels += ch;
  if (group.size() < 2 || channels.empty()) return c;
  const auto mbs = static_cast<double>(micro_batches);
  for (int64_t ch : channels) {
    const auto [fwd, bwd] = layer_s(ch, group, topology);
    c.forward_s_per_micro_batch += fwd;
    c.backward_s_per_micro_batch += bwd;
    c.bytes_per_step += mbs * (forward_passes * plan::sync_bn_gather_bytes(ch, 1) + plan::sync_bn_reduce_bytes(ch));
  }
  c.time_per_step_s = mbs * (forward_passes * c.forward_s_per_micro_batch + c.backward_s_per_micro_batch);
  c.collectives_per_step = (forward_passes + 1) * micro_batches * c.layers;
  return c;
}

SyncBatchnormCost sync_batchnorm_cost(const plan::Plan& plan, const plan::PlanContext& ctx) {
  const ClusterTopology topology(ctx.cluster);
  return sync_batchnorm_cost(ctx.graph, std::max<int64_t>(1, plan.num_micro_batches), dp_group(plan, 0), topology,
                             forward_passes(plan));
}

std::vector<double> sync_batchnorm_stage_s(const plan::Plan& plan, const plan::PlanContext& ctx) {
  std::vector<double> out(static_cast<size_t>(plan.pp), 0.0);
  if (!plan.sync_batch_norm || plan.dp_cp() < 2) return out;
  const std::vector<int64_t> channels = batchnorm_channels(ctx.graph);
  const ClusterTopology topology(ctx.cluster);
  const auto& units = ctx.graph.units();
  std::map<std::pair<int, int64_t>, std::pair<double, double>> memo;  // (pipeline rank, channels) -> layer times
  for (size_t v = 0; v < plan.stages.size(); ++v) {
    const int s = static_cast<int>(v % static_cast<size_t>(plan.pp));  // entry v * pp + r is virtual stage v of rank r
    const std::vector<int> group = dp_group(plan, s);
    for (int u = plan.stages[v].first_unit; u <= plan.stages[v].last_unit; ++u)
      for (int id : units[static_cast<size_t>(u)].ops) {
        const int64_t ch = channels[static_cast<size_t>(id)];
        if (ch <= 0) continue;
        auto it = memo.find({s, ch});
        if (it == memo.end()) it = memo.emplace(std::make_pair(s, ch), layer_s(ch, group, topology)).first;
        out[static_cast<size_t>(s)] += forward_passes(plan) * it->second.first + it->second.second;
      }
  }
  return out;
}

}  // namespace trainplan::sim
