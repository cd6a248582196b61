// File: trainplan/simulator/sync_batchnorm.hpp
//
// Synchronized batch normalization as collectives, as PyTorch's SyncBatchNorm runs it
// (torch/nn/modules/_functions.py): per batch-norm layer of C channels and micro-batch, the
// forward all-gathers every rank's mean, inverse std and count (2C + 1 fp32 values per rank)
// over the data-parallel group, and the backward all-reduces the sums of dy and dy·x̂ (2C fp32
// values). Each blocks the layer's next op. A full-recomputation backward re-runs the forward,
// all-gather included. The messages are small (a few kB), so the cost is mostly the
// collectives' latency, paid layer after layer on the critical path.
//
//   sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(plan, ctx);
//   c.collectives_per_step;  // ResNet-50: 53 layers x 2 x micro-batches
//   c.time_per_step_s;       // the collectives one after another, each uncontended
//
// Plans with `parallelism.sync_batch_norm` lower these collectives (plan::lower, purpose
// sync_bn); the planner's estimate adds sync_batchnorm_stage_s(); the convergence warning
// quotes sync_batchnorm_cost() as the price of the fix.
#pragma once

#include <cstdint>
#include <vector>

#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim {

struct SyncBatchnormCost {
  int layers = 0;                    // batch-norm layers of the model
  int64_t channels = 0;              // summed over those layers
  int64_t collectives_per_step = 0;  // (forward passes + 1) per layer per micro-batch
  double bytes_per_step = 0;         // each rank's payload: (2C + 1) x 4 per forward pass, 2C x 4 backward
  double forward_s_per_micro_batch = 0;   // the all-gathers of one forward pass, summed over the layers
  double backward_s_per_micro_batch = 0;  // the all-reduces of one backward pass
  double time_per_step_s = 0;        // micro_batches x (forward passes x forward + backward)
};

/// Uncontended time of one synchronized-batch-norm collective of `kind` (all_gather or
/// all_reduce) of `bytes` (plan::sync_bn_gather_bytes / sync_bn_reduce_bytes) over `group` as the step simulator runs it: the lower of ring and tree
/// for an all-reduce (NCCL's tuner, CollectiveAlgorithm::automatic), ring for an all-gather, plus
/// `comm_launch_s` for patterns outside NCCL's latency model. 0 for a group of one.
double sync_batchnorm_collective_s(plan::CollectiveKind kind, double bytes, const std::vector<int>& group, const Topology& topology,
                                   double comm_launch_s = 5e-6);

/// The cost on `group` (GPU ids of `topology`; one GPU or none: nothing to synchronize) for
/// `micro_batches` micro-batches per step, `forward_passes` forward passes per micro-batch (2
/// with full recomputation).
SyncBatchnormCost sync_batchnorm_cost(const models::ModelGraph& graph, int64_t micro_batches, const std::vector<int>& group,
                                      const Topology& topology, int forward_passes = 1);

/// The same for `plan`'s data-parallel group (the dp x cp ranks of its first pipeline stage)
/// on the plan's cluster, whether or not the plan synchronizes its batch norm.
SyncBatchnormCost sync_batchnorm_cost(const plan::Plan& plan, const plan::PlanContext& ctx);

/// Per pipeline rank, the seconds one micro-batch spends in the synchronized-batch-norm
/// collectives of the layers that rank holds (all its virtual stages; forward passes as above);
/// all zero unless `plan.sync_batch_norm` and dp x cp > 1. What the estimate adds to each
/// stage's micro-batch time.
std::vector<double> sync_batchnorm_stage_s(const plan::Plan& plan, const plan::PlanContext& ctx);

}  // namespace trainplan::sim
