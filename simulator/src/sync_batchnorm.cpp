// Synchronized batch norm as all-reduces (sync_batchnorm.hpp).
#include "trainplan/simulator/sync_batchnorm.hpp"

#include "trainplan/simulator/collectives.hpp"

namespace trainplan::sim {

SyncBatchnormCost sync_batchnorm_cost(const models::ModelGraph& graph, int64_t micro_batches, const std::vector<int>& group,
                                      const Topology& topology) {
  SyncBatchnormCost c;
  std::vector<int64_t> channels;
  for (const auto& op : graph.ops())
    if (op.kind == models::OpKind::batchnorm && !op.weight_shape.empty()) channels.push_back(op.weight_shape.front());
  c.layers = static_cast<int>(channels.size());
  for (int64_t ch : channels) c.channels += ch;
  if (group.size() < 2 || channels.empty()) return c;
  const CommPattern ring = build_pattern(plan::CollectiveKind::all_reduce, CollectiveAlgorithm::ring, {topology.ring_order(group)}, topology);
  const auto mbs = static_cast<double>(micro_batches);
  for (int64_t ch : channels) {
    const double bytes = 2.0 * static_cast<double>(ch) * 4.0;  // two fp32 values per channel
    c.time_per_step_s += 2.0 * mbs * ring.uncontended_time_s(bytes);  // forward and backward
    c.bytes_per_step += 2.0 * mbs * bytes;
  }
  c.collectives_per_step = 2 * micro_batches * c.layers;
  return c;
}

SyncBatchnormCost sync_batchnorm_cost(const plan::Plan& plan, const plan::PlanContext& ctx) {
  std::vector<int> group;
  for (int d = 0; d < plan.dp; ++d) group.push_back(d * plan.cp * plan.tp);
  const ClusterTopology topology(ctx.cluster);
  return sync_batchnorm_cost(ctx.graph, std::max<int64_t>(1, plan.num_micro_batches), group, topology);
}

}  // namespace trainplan::sim
