// File: trainplan/simulator/sync_batchnorm.hpp
//
// Synchronized batch normalization as collectives: with SyncBatchNorm every batch-norm layer
// all-reduces its per-channel statistics over the data-parallel group, in the forward pass
// (sum and sum of squares: 2 x channels fp32 values) and in the backward pass (sum of dy and of
// dy * x_hat: 2 x channels again), once per micro-batch. The messages are small (a few kB), so
// the cost is mostly the collectives' latency, paid layer after layer on the critical path.
//
//   sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(plan, ctx);
//   c.collectives_per_step;  // ResNet-50: 53 layers x 2 x micro-batches
//   c.time_per_step_s;       // the all-reduces one after another, each uncontended
//
// Plans do not lower it (trainplan plans ordinary batch norm); convergence warnings quote it
// as the price of the fix.
#pragma once

#include <cstdint>
#include <vector>

#include "trainplan/plan/plan.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim {

struct SyncBatchnormCost {
  int layers = 0;                 // batch-norm layers of the model
  int64_t channels = 0;           // summed over those layers
  int64_t collectives_per_step = 0;  // 2 per layer per micro-batch
  double bytes_per_step = 0;      // payload: 2 x 2 x channels x 4 bytes per micro-batch
  double time_per_step_s = 0;     // sum of the all-reduces' uncontended times (ring)
};

/// The cost on `group` (GPU ids of `topology`; one GPU or none: nothing to synchronize) for
/// `micro_batches` micro-batches per step: each all-reduce of 2 x C fp32 values timed by
/// build_pattern(all_reduce, ring).uncontended_time_s.
SyncBatchnormCost sync_batchnorm_cost(const models::ModelGraph& graph, int64_t micro_batches, const std::vector<int>& group,
                                      const Topology& topology);

/// The same for `plan`'s data-parallel group of its first pipeline stage (GPU of rank
/// (dp_rank, 0, 0, 0) = dp_rank x cp x tp) on the plan's cluster.
SyncBatchnormCost sync_batchnorm_cost(const plan::Plan& plan, const plan::PlanContext& ctx);

}  // namespace trainplan::sim
