// File: trainplan/planner/partition.hpp
//
// Automated partitioning: which contiguous layer units each pipeline stage owns, so that the
// slowest pipeline rank is as fast as possible while every rank fits in its GPU memory (or,
// on request, so that the fullest rank is as empty as possible). Heterogeneous units (the
// embedding, the LM head, ResNet stages) and interleaved virtual stages (v model chunks per
// rank; rank r owns chunks r, r + p, r + 2p, ...) are handled.
//
//   std::vector<double> t = planner::unit_times_s(plan, ctx);             // analytical.hpp
//   planner::PartitionProblem prob = planner::make_partition_problem(plan, ctx, t);
//   planner::Partition part = planner::partition_units(prob, planner::Balance::time);
//   plan.stages = part.stages;          // pp * vp ranges, stage-major like Plan::stages
//   part.rank_time_s[r]; part.rank_memory_bytes[r]; part.fits;
//
// Method (in the spirit of PipeDream's partitioner and SageMaker's auto-partition):
// - vp = 1, time: the smallest bottleneck T over all contiguous splits into p non-empty
//   stages whose memory fits. Feasibility of a bound is decided exactly by a reachability
//   dynamic program over (stage, prefix) — every sub-range of a feasible range is feasible, so
//   the feasible starts of a range ending at e form an interval found with two pointers and
//   sliding-window maxima, O(p·n) per bound — and the bound is found by bisection over the
//   sorted distinct range sums (exact). Without a memory limit a greedy check replaces the
//   dynamic program (O(n) per bound). Among the optimal splits, later stages are filled
//   first: under 1F1B they hold fewer micro-batches in flight.
// - vp = 1, memory: the same with the bound on each rank's memory (bisection on bytes).
// - vp > 1: up to 4096 splits, every split is tried. Beyond, a local search: from the
//   chunk-level min-max split and from units dealt out evenly, each chunk boundary moves to its
//   best position and runs of boundaries shift together, on (memory excess, largest rank value,
//   sum of squared rank values); with a memory limit, also after balancing memory first. Not
//   proven optimal: on random medium cases it is within 1% of brute force on average and
//   within 10% at worst (tests).
// Deterministic; no allocation of the model graph; microseconds for GPT-3-sized models.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::planner {

/// What the partitioner balances.
enum class Balance {
  time,    // minimise the slowest rank's time, subject to every rank fitting in memory
  memory,  // minimise the fullest rank's memory (time ignored)
};
std::string_view balance_name(Balance b);  // "time", "memory"

/// The partitioning problem in numbers. Units are indexed 0..n-1 in model order; ranks
/// 0..pp-1. Rank r holding the units U (in order) needs, in bytes,
///   fixed_bytes[r] + Σ_{u∈U} static_bytes[u]
///   + (f − 1)·K + max(K, max_{u∈U} (Σ_{w∈U, w≤u} kept_bytes[w] + excursion_bytes[u]))
///   + Σ_k max_{u∈U} peak_bytes[k][u]
///   + (U holds the last unit ? last_bytes : 0)
///   + (U holds the last unit and not unit 0 ? last_without_first_bytes : 0)
/// with f = in_flight[r] and K = Σ_{u∈U} kept_bytes[u], and takes Σ_{u∈U} unit_time_s[u]
/// seconds per micro-batch. The activation term is the peak of plan::activation_peak_bytes'
/// replay when f micro-batches are in flight and the backward of the last one runs its units
/// in reverse: exact for GPipe and 1F1B (vp = 1); with interleaved chunks (vp > 1) it treats
/// the rank's chunks as one range, an approximation.
struct PartitionProblem {
  int pp = 1;
  int vp = 1;
  std::vector<double> unit_time_s;                // (n,) seconds per micro-batch
  std::vector<double> static_bytes;               // (n,) weights + gradients + optimizer state
  std::vector<double> kept_bytes;                 // (n,) activations one micro-batch keeps for backward
  std::vector<double> excursion_bytes;            // (n,) rise above that during the unit's forward or backward (recomputation, cp transients)
  std::vector<std::vector<double>> peak_bytes;    // (k, n) transient terms, max over a rank's units
  std::vector<double> fixed_bytes;                // (pp,) framework, workspace, dp buckets
  std::vector<double> in_flight;                  // (pp,) micro-batches whose activations a rank holds
  double last_bytes = 0;                          // loss workspace (fp32 logits) on the last unit's rank
  double last_without_first_bytes = 0;            // tied-embedding copy when unit 0 is elsewhere
  double capacity_bytes = std::numeric_limits<double>::infinity();  // usable per GPU

  int num_units() const { return static_cast<int>(unit_time_s.size()); }
};

/// A split of the units and what it costs per rank.
struct Partition {
  std::vector<plan::StageAssignment> stages;  // pp * vp, stage-major (chunk v of rank r at v * pp + r)
  std::vector<double> rank_time_s;            // (pp,) per micro-batch
  std::vector<double> rank_memory_bytes;      // (pp,)
  bool fits = false;                          // every rank within capacity_bytes

  double max_time_s() const;
  double max_memory_bytes() const;
};

/// The best split for `balance` (see the file comment). When no split fits in memory the
/// result is the split with the smallest largest memory, with fits = false.
/// `thorough` = false (interleaved only) skips the enumeration of small cases, the second start
/// and the run shifts of the local search: ~100x faster, for searches that partition
/// thousands of unit-cost vectors. Requires n >= pp * vp; throws Error otherwise.
Partition partition_units(const PartitionProblem& problem, Balance balance, bool thorough = true);

/// partition_units when some split fits, without the memory-balanced fallback otherwise
/// (cheaper: vp = 1 decides "nothing fits" in one O(p·n) pass).
std::optional<Partition> fitting_partition(const PartitionProblem& problem, Balance balance, bool thorough = true);

/// Times and memory of a given split (pp * vp stage ranges covering every unit in order).
Partition evaluate_partition(const PartitionProblem& problem, std::vector<plan::StageAssignment> stages);

/// Exhaustive search over every split (C(n-1, pp*vp-1) of them) with the same objective and
/// tie-breaks as partition_units' target: for tests on small cases only.
Partition brute_force_partition(const PartitionProblem& problem, Balance balance);

/// Per-unit memory terms of a plan's model at its tp, sequence parallelism, cp, micro-batch,
/// recomputation, precision and attention (nothing else of the plan matters, so a search caches
/// them).
struct UnitMemoryTerms {
  std::vector<double> params;           // (n,) parameters held by one tp rank
  std::vector<double> kept_bytes;       // (n,) activations one micro-batch keeps for backward
  std::vector<double> excursion_bytes;  // (n,) rise above that during the unit's forward or backward
  std::vector<double> send_bytes;       // (n,) the unit's output per micro-batch (pipeline message)
};
UnitMemoryTerms unit_memory_terms(const plan::Plan& plan, const plan::PlanContext& ctx);

/// The problem of `plan` in `ctx` (the plan's stages are ignored): per-unit memory terms that
/// reproduce plan::stage_memory for every split of a GPipe or 1F1B plan (tested), and
/// `unit_time_s` as given (one entry per unit, e.g. from planner::unit_times_s).
PartitionProblem make_partition_problem(const plan::Plan& plan, const plan::PlanContext& ctx,
                                        std::vector<double> unit_time_s, const plan::MemoryOptions& options = {});
PartitionProblem make_partition_problem(const plan::Plan& plan, const plan::PlanContext& ctx,
                                        std::vector<double> unit_time_s, const UnitMemoryTerms& terms,
                                        const plan::MemoryOptions& options = {});

/// plan::stage_memory of every pipeline rank of `plan` (with its stages) from per-unit terms,
/// in O(units): equal for GPipe and 1F1B (tested, recomputation and context parallelism
/// included: the terms are plan::unit_activation_profile's); for interleaved 1F1B the
/// activation term treats a rank's chunks as one range, like PartitionProblem (within ~10% of
/// the replay).
std::vector<plan::MemoryBreakdown> memory_per_rank(const plan::Plan& plan, const plan::PlanContext& ctx,
                                                  const UnitMemoryTerms& terms, const plan::MemoryOptions& options = {});

/// Per pipeline rank of a plan: its units, its time per micro-batch (as the partitioner counts
/// it) and its memory (plan::stage_memory). For printing ("--verbose") and checks.
struct StageLoad {
  int rank = 0;
  std::vector<plan::StageAssignment> chunks;  // vp ranges
  int units = 0;
  double time_s = 0;       // per micro-batch
  double memory_bytes = 0;
  double capacity_bytes = 0;
};
std::vector<StageLoad> stage_loads(const plan::Plan& plan, const plan::PlanContext& ctx);

}  // namespace trainplan::planner
