// File: trainplan/planner/analytical.hpp
//
// The analytical step-time estimate: fast (microseconds per plan), used to evaluate every
// candidate of a search before the best are simulated.
//
//   planner::StepEstimate e = planner::estimate_step(plan, ctx);
//   e.step_time_s; e.mfu; e.exposed_comm_s(plan::CommPurpose::dp)
//
// Model (per step, on the slowest pipeline rank):
// - Compute: every op of the rank's layer units, per micro-batch, on its tp shard, timed by the
//   simulator's compute model (sim::ComputeModel::op_duration_s on plan::op_cost: roofline with
//   GEMM-shape efficiencies, flash or unfused attention, launch gaps); recomputation re-runs
//   forward work during backward.
// - Tensor parallel: the collectives of plan::tp_collectives(), each a ring over the tp group
//   at the bandwidth left after every concurrent tp group's flows share the links (routes of
//   the Cluster), fully exposed (Megatron-LM does not overlap them).
// - Context parallel (cp > 1): every op on 1/cp of the tokens (attention: 1/cp of the s x s
//   work, reading the gathered K, V: plan::op_cost); per attention and micro-batch a ring
//   all-gather of K, V over the cp group before it (exposed: it directly follows the QKV
//   projection), in backward a K, V all-gather issued when the unit's backward starts (exposed
//   only beyond the backward of the ops after the attention, as the lowering orders it) and a
//   reduce-scatter of dK, dV (exposed); full recomputation repeats the forward gather.
// - Pipeline: per micro-batch, a send of the stage's output activation forward and of its
//   gradient backward; step = m x (slowest stage) + (p - 1)/v x (mean stage) for GPipe, 1F1B
//   and interleaved 1F1B; the bubble is what exceeds m x (slowest stage).
// - Data parallel: gradient all-reduce (ring / tree / hierarchical / parameter server) over
//   the dp group (dp * cp ranks: those that hold the same parameters) with the same link sharing; with overlap, only what exceeds the last
//   micro-batch's backward is exposed (at least the last bucket). ZeRO-1/2 reduce-scatter the
//   gradients and all-gather the updated parameters (the all-gather is exposed); ZeRO-3 also
//   all-gathers each unit's parameters in forward and backward, hidden behind compute where
//   compute is longer.
// - Optimizer: Adam reads and writes ~30 bytes per parameter of the rank's shard at HBM speed.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/compute_model.hpp"

namespace trainplan::planner {

struct StepEstimate {
  double step_time_s = 0;
  double compute_s = 0;      // forward + backward + recompute busy time of the critical rank
  double recompute_s = 0;    // part of compute_s that re-runs forward work
  double bubble_s = 0;       // pipeline fill/drain idle time
  double optimizer_s = 0;
  /// Host (software stack, plan::PlanContext::software) time the GPU waits for outside compute:
  /// issuing the first kernel, and the per-step work and sync before the optimizer. A host-bound
  /// stage's longer micro-batches (host issue time over GPU time) are in compute_s.
  double host_s = 0;
  /// Exposed (not hidden behind compute) communication by purpose, seconds per step.
  std::array<double, static_cast<size_t>(plan::CommPurpose::none) + 1> exposed_comm_by_purpose_s{};
  double exposed_comm_s(plan::CommPurpose p) const { return exposed_comm_by_purpose_s[static_cast<size_t>(p)]; }
  double exposed_comm_total_s() const;
  double model_flops_per_step = 0;     // 6N-style model FLOPs, no recomputation
  double hardware_flops_per_step = 0;  // including recomputation
  double tokens_per_s = 0;
  double mfu = 0;            // model FLOPs / (step time x GPUs x dense peak)
  double hfu = 0;            // hardware FLOPs likewise
};

struct AnalyticalOptions {
  /// Compute model settings, shared with the simulator (sim::ComputeModel): every op is timed
  /// by the same roofline, efficiencies and calibration as in a simulated step.
  sim::ComputeModelOptions compute;
  std::shared_ptr<const sim::CalibrationTable> calibration;
  /// What these options were calibrated with, as outputs name it ("uncalibrated (...)" or
  /// "calibration profile PATH (...)").
  std::string calibration_label;
};

/// Shares work between estimates of plans on the same cluster and model: group bandwidths
/// and per-unit costs by (layout, micro-batch, tp, sequence parallel, precision). Thread-safe.
/// A cache must only be used with PlanContexts that outlive it.
class EstimateCache;
std::shared_ptr<EstimateCache> make_estimate_cache();

/// Estimates one training step. The plan must be valid for ctx (plan::validate).
StepEstimate estimate_step(const plan::Plan& plan, const plan::PlanContext& ctx, const AnalyticalOptions& options = {},
                           EstimateCache* cache = nullptr);

/// [Added for the partitioner, planner/partition.hpp.] Seconds per micro-batch of each layer
/// unit (ctx.graph.units() order) on one rank of `plan`: forward + backward + recomputation +
/// exposed tp and cp communication, exactly the per-unit terms estimate_step sums into a pipeline
/// rank's time (the per-stage p2p term is not included: it does not depend on the split).
/// Only tp, sequence parallelism, cp, micro-batch, recomputation and precision of `plan`
/// matter (and dp/pp when tp x cp spans nodes); its stages are ignored.
std::vector<double> unit_times_s(const plan::Plan& plan, const plan::PlanContext& ctx, const AnalyticalOptions& options = {},
                                 EstimateCache* cache = nullptr);

}  // namespace trainplan::planner
