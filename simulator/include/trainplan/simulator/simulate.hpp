// File: trainplan/simulator/simulate.hpp
//
// The step simulator: runs a StepProgram on a cluster as a discrete-event simulation and
// predicts the step time, its breakdown, per-GPU utilization, peak memory per rank and a
// Timeline in the format the executor measures.
//
//   sim::SimOptions opt = sim::options_for(plan);     // dp algorithm, precision
//   opt.fidelity = sim::Fidelity::symmetric;           // large clusters
//   sim::StepResult r = sim::simulate_step(program, ctx.cluster, opt);
//   r.step_time_s; r.breakdown.bubble_s; r.peak_memory_bytes[rank];
//   plan::write_chrome_trace_file("step.trace.json", r.timeline);
//
//   // Tests and what-if studies: a hand-built topology and GPU.
//   sim::TableTopology topo = sim::make_switch_topology(8, 300e9, 1e-6);
//   sim::StepResult r2 = sim::simulate_step(program, topo, gpu_spec, opt);
//
// Execution semantics (plan/step_program.hpp, made precise):
// - A task starts when its deps have finished and the previous task of its stream has started.
// - Compute tasks of a rank run one at a time on its GPU (in the order they became ready).
// - alloc / free take no time; memory = static_bytes + live allocations.
// - A send and its recv start moving data when both have started (rendezvous, as NCCL); both
//   finish when the data has arrived. A collective starts moving data when every member has
//   entered it and finishes on all members together.
// - Every communication pays `comm_launch_s` once, then its phases' latencies and transfers.
// Deterministic: events are ordered by (time, insertion sequence); the same inputs give a
// byte-identical Timeline and result JSON (wall time is kept out of both).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::hw {
class Cluster;
}

namespace trainplan::sim {

enum class Fidelity {
  full,       // every rank simulated
  symmetric,  // one rank per symmetry class simulated, results replicated to its members
};
std::string_view fidelity_name(Fidelity f);

inline constexpr int kNumPurposes = static_cast<int>(plan::CommPurpose::none) + 1;

struct SimOptions {
  Fidelity fidelity = Fidelity::full;
  /// Algorithm of dp / zero_grad / zero_param collectives (the plan's dp_algorithm).
  plan::DpAlgorithm dp_algorithm = plan::DpAlgorithm::ring;
  /// Algorithm of tp / pp / none collectives; ps-purpose ones always use the parameter
  /// server. `automatic`: the lower uncontended time of ring and tree (tree wins in the
  /// latency regime of small messages across many nodes), and NVLSTree for all-reduces over
  /// two NVSwitch-3 nodes (automatic_candidates, collectives.hpp).
  CollectiveAlgorithm other_algorithm = CollectiveAlgorithm::automatic;
  /// Training precision (tensor peak). Unset: bf16 where the GPU has it, else fp16.
  std::optional<Precision> precision;
  ComputeModelOptions compute;
  /// Measured efficiencies that override the compute defaults (may be null).
  std::shared_ptr<const CalibrationTable> calibration;
  /// NCCL kernels take SMs from the compute they overlap: while collectives holding c SMs
  /// (CommPattern timing sm_channels, summed over the rank's running collectives) are active
  /// on a rank, its running compute task advances at t(all SMs) / t(SMs - c)
  /// (ComputeModel::duration_s with sms_taken = c). Off: compute ignores communication.
  bool sm_contention = true;
  /// An explicit uniform override: > 0, compute slows by this fraction while the rank moves
  /// data (0.1 = 10 % longer), instead of the per-op SM contention above. Default 0 (unset).
  double overlap_slowdown = 0;
  /// Fixed cost of every communication task (kernel launch, NCCL setup). Default 5 us.
  double comm_launch_s = 5e-6;
  /// Straggler jitter: each GPU's compute speed is a normal(1, stddev) draw (clamped to
  /// >= 0.1) from Rng(seed).fork(gpu); stddev 0 leaves every speed exactly 1.
  double straggler_stddev = 0;
  uint64_t straggler_seed = 0;
  /// Fill StepResult::timeline (off for search loops: saves time and memory).
  bool record_timeline = true;
  /// Ranks whose events the timeline holds (ascending; empty = every rank). With symmetric
  /// fidelity a large cluster's full timeline repeats each class's events for every member.
  std::vector<int> timeline_ranks;
  /// With symmetric fidelity, record each shown class member's events once and name the
  /// other shown members as plan::RankAlias (the writers expand them): memory grows with the
  /// ranks simulated, not the ranks shown. Off: every shown rank's events are materialized.
  bool timeline_aliases = false;
};

/// Options matching a plan: dp_algorithm and precision.
SimOptions options_for(const plan::Plan& plan);

/// Where the critical rank's step time went. Every instant of [0, step_time] of the critical
/// rank falls in exactly one category, so the parts sum to step_time_s:
/// - compute_s: its GPU runs a compute task other than the optimizer;
/// - optimizer_s: it runs an optimizer-phase compute task;
/// - exposed_comm_s[purpose]: no compute runs and data of that purpose is moving for this
///   rank (an instant with several purposes moving is split equally among them);
/// - bubble_s: no compute, no data moving, and a pipeline (pp) send or recv of this rank is
///   posted and waiting for its peer;
/// - other_s: the rest (launch gaps, waiting for a collective's slower members, idle tail).
struct Breakdown {
  int critical_rank = 0;
  double step_time_s = 0;
  double compute_s = 0;
  double optimizer_s = 0;
  double bubble_s = 0;
  double other_s = 0;
  std::array<double, kNumPurposes> exposed_comm_s{};
  double exposed_comm_total_s() const;
  double exposed_comm(plan::CommPurpose p) const { return exposed_comm_s[static_cast<size_t>(p)]; }
};

struct SimStats {
  int64_t events = 0;            // engine events + network finish events processed
  int64_t tasks_simulated = 0;
  int ranks_simulated = 0;
  int64_t comm_instances = 0;    // collectives + send/recv pairs started
  int64_t coflows = 0;           // network phases started
  int64_t rate_recomputations = 0;
  double wall_s = 0;             // not deterministic: never written to JSON
  double setup_wall_s = 0;       // part of wall_s spent before the first event (checks, indexing)
};

struct StepResult {
  double step_time_s = 0;
  Breakdown breakdown;
  /// Per rank: static_bytes + the peak of live allocations.
  std::vector<double> peak_memory_bytes;
  /// Per rank: fraction of the step its GPU runs compute tasks.
  std::vector<double> gpu_utilization;
  /// Per rank: FLOPs executed / (tensor peak * step time) ("hardware FLOPs utilization").
  std::vector<double> flops_utilization;
  /// Per rank: bytes its GPU sent / received over the network during the step.
  std::vector<double> bytes_sent;
  std::vector<double> bytes_received;
  /// Whole cluster: bytes sent by purpose.
  std::array<double, kNumPurposes> bytes_sent_by_purpose{};
  /// Whole cluster: bytes sent from a GPU to a GPU of another Availability Zone (each byte
  /// once; AWS bills it leaving one AZ and entering the other). 0 in one AZ.
  double inter_az_bytes = 0;
  plan::Timeline timeline;       // empty events unless SimOptions::record_timeline
  SimStats stats;
};

/// Simulates one step of `program` on `cluster` (its topology and GPU spec).
/// Throws Error on a malformed program (bad deps, unmatched communication, unknown groups,
/// GPUs outside the cluster) or one that cannot finish (deadlock), naming the rank and task.
StepResult simulate_step(const plan::StepProgram& program, const hw::Cluster& cluster,
                         const SimOptions& options = {});

/// The same on an explicit topology and GPU (the seam tests and what-if studies use).
StepResult simulate_step(const plan::StepProgram& program, const Topology& topology,
                         const hw::GpuSpec& gpu, const SimOptions& options = {});

/// Summary as JSON (no timeline, no wall time): step time, breakdown, per-rank arrays, stats.
json::Json to_json(const StepResult& result);
json::Json to_json(const Breakdown& breakdown);
json::Json to_json(const SimOptions& options);

}  // namespace trainplan::sim
