// File: trainplan/plan/step_program.hpp
//
// StepProgram: one training step of a plan, per rank, as an ordered list of tasks with
// dependencies and streams. The simulator predicts it and the executor runs it; because both
// consume the same program, predicted and measured timelines match task by task (same rank,
// same task id).
//
//   plan::StepProgram prog = plan::lower(plan, ctx, {.granularity = plan::Granularity::op});
//   for (const auto& rank : prog.ranks)
//     for (const auto& t : rank.tasks) ...   // t.deps index into rank.tasks
//
// Semantics every consumer relies on:
// - Tasks of a rank are listed in issue order. A task may start when all its `deps` (same
//   rank) have finished and, on its stream, the previous task of that stream has started
//   (streams are in-order queues, like CUDA streams). Cross-rank ordering comes only from
//   communication: a recv completes after the matching send's data arrives; a collective
//   completes on a rank after every member of the group has entered it and the data moved.
//   `alloc` / `free` tasks are bookkeeping: they wait like any task, but never hold back the
//   tasks after them on their stream, so memory events never change a step's timing (the
//   executor queues them on their own, in issue order).
// - Matching: the tasks of one collective on all members share `comm_id`; a send and its recv
//   share `comm_id` too. comm_ids are unique within the program.
// - Memory: `alloc` / `free` tasks bracket every transient buffer (activations saved for
//   backward, gathered ZeRO-3 parameters, gradient buckets, p2p buffers, workspace); a rank's
//   memory at any time is static_bytes + the live allocations, so the peak of the step falls
//   out of running the program.
// - FLOPs and bytes are for this rank (already divided by tp etc.), for the whole micro-batch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::plan {

enum class TaskKind { compute, send, recv, collective, alloc, free };
enum class Phase { forward, backward, recompute, optimizer, none };
enum class CollectiveKind { all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, barrier };
/// Why data moves; the simulator's breakdown of exposed communication is by purpose.
enum class CommPurpose {
  tp,          // tensor-parallel activations / activation gradients
  pp,          // pipeline activations / gradients between stages
  dp,          // data-parallel gradient reduction (ZeRO 0)
  zero_grad,   // ZeRO 1-3 gradient reduce-scatter
  zero_param,  // ZeRO 1-2 updated-parameter all-gather, ZeRO-3 parameter all-gather
  ps,          // parameter server push / pull
  cp,          // context parallel: K, V all-gathers and dK, dV reduce-scatters of attention
  sync_bn,     // synchronized batch norm: per-layer statistics over the data-parallel group
  ep,          // expert parallel: MoE all-to-all dispatch / combine of routed token copies
  none,
};
/// Which tensor a communication task moves (with Task::op / unit / ops saying whose).
enum class TensorRole {
  none,
  output,       // an op's forward output (tp all-reduce after a row-parallel linear; pp send of a unit's output)
  input,        // an op's forward input (sequence-parallel all-gather before a column group; the
                // K, V that a context-parallel all-gather assembles before attention)
  grad_output,  // gradient w.r.t. an op's output (sequence-parallel all-gather before a row linear's backward)
  grad_input,   // gradient w.r.t. an op's input (tp all-reduce after a column group's backward; pp send
                // backward; the cp reduce-scatter of dK, dV after attention's backward)
  params,       // parameters of Task::ops (ZeRO all-gathers, parameter-server pull)
  grads,        // gradients of Task::ops (dp buckets, ZeRO reduce-scatter, tied-embedding all-reduce)
  loss_stats,   // vocab-parallel cross-entropy statistics (see below)
  norm_stats,   // synchronized batch norm: forward all-gather of each rank's mean, inverse std and
                // count; backward all-reduce of the sums of dy and dy·x̂ (Task::op is the batch norm)
};
std::string_view tensor_role_name(TensorRole r);

/// Synchronized batch norm (PyTorch SyncBatchNorm): the forward all-gather's whole output, every
/// one of `ranks` ranks' mean, inverse std and count in fp32 ((2C + 1) x 4 bytes each), and the
/// backward all-reduce of the sums of dy and dy·x̂ (2C x 4 bytes).
inline double sync_bn_gather_bytes(int64_t channels, int ranks) { return ranks * (2.0 * static_cast<double>(channels) + 1.0) * 4.0; }
inline double sync_bn_reduce_bytes(int64_t channels) { return 2.0 * static_cast<double>(channels) * 4.0; }
/// Every purpose that moves data (none left out), in the order breakdowns list them.
inline constexpr std::array<CommPurpose, 9> kCommPurposes = {CommPurpose::tp,        CommPurpose::cp,         CommPurpose::pp,
                                                             CommPurpose::dp,        CommPurpose::zero_grad,  CommPurpose::zero_param,
                                                             CommPurpose::ps,        CommPurpose::sync_bn,    CommPurpose::ep};

/// What a transient buffer holds.
enum class BufferKind { activations, params, gradients, comm, workspace };
enum class Granularity {
  op,     // one compute task per model op (what the executor runs kernel by kernel)
  layer,  // ops merged between communication points: far fewer tasks (large simulations)
};

std::string_view task_kind_name(TaskKind k);
std::string_view phase_name(Phase p);
std::string_view collective_kind_name(CollectiveKind k);
std::string_view comm_purpose_name(CommPurpose p);
std::string_view buffer_kind_name(BufferKind k);

struct Task {
  int id = 0;              // index in RankProgram::tasks
  TaskKind kind = TaskKind::compute;
  int stream = 0;          // index into StepProgram::streams
  std::vector<int> deps;   // task ids of the same rank
  std::string label;       // "fwd mb3 block7.mlp.fc1", "ar tp block7 fwd mb3"

  // Position in the step (compute, and communication that belongs to a layer).
  Phase phase = Phase::none;
  int micro_batch = -1;
  int unit = -1;           // layer unit of the model graph
  int virtual_stage = -1;  // model chunk (0 .. vp-1)

  // compute
  int op = -1;             // op id in the model graph; -1 for merged tasks and the optimizer
  std::vector<int> ops;    // Granularity::layer: the merged op ids
  double flops = 0;
  double mem_bytes = 0;    // bytes read + written (roofline)
  /// Dominant op kind, for the compute model's efficiency by kind (models::OpKind as int).
  int op_kind = -1;
  /// Matmul shape on this rank for the whole micro-batch (M = tokens); 0 if not a matmul.
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;

  // communication
  CollectiveKind collective = CollectiveKind::all_reduce;
  int group = -1;          // index into StepProgram::groups (collectives)
  int peer = -1;           // send: destination rank; recv: source rank
  double bytes = 0;        // collective: the buffer size S per rank (nccl-tests "size");
                           // send/recv: bytes transferred
  CommPurpose purpose = CommPurpose::none;
  int64_t comm_id = -1;
  /// Host time to issue this communication before it can start (DeepSpeed ZeRO-3's per-tensor
  /// gathers: hw::SoftwareStack::zero3_tensor_issue_s); 0 for all else. Executors ignore it.
  double issue_s = 0;
  /// Host time issued after the communication is launched, alongside its transfer: the task
  /// completes no earlier than its start + issue_s + issue_tail_s (PyTorch's per-rank copies
  /// behind a list all_gather; a reduce-scatter chain's next host issue,
  /// hw::SoftwareStack::zero3_rank_view_s / zero3_rank_copy_s); 0 for all else. Executors ignore it.
  double issue_tail_s = 0;
  /// What moves. Communication tasks also set `op` (tp collectives: the op they belong to),
  /// `unit` (pp send/recv: the unit whose output / input gradient moves) or `ops` (dp / ZeRO /
  /// ps: the ops whose parameters or gradients are in the bucket, in bucket order).
  /// A vocab-parallel cross-entropy with tp > 1 is one compute task (local logit max) followed
  /// by two all-reduces with role loss_stats: the first of the max (s elements per sample),
  /// after which each rank computes its local sum of exponentials and target logit; the second
  /// of those two (2s elements), after which the loss is combined. Executors do that small
  /// local work when each collective completes; the simulator treats it as free.
  TensorRole role = TensorRole::none;

  // memory
  BufferKind buffer = BufferKind::activations;
  double alloc_bytes = 0;  // alloc: bytes allocated; free: bytes released
  int64_t buffer_id = -1;  // pairs an alloc with its free
};

struct RankProgram {
  int rank = 0;
  int gpu = 0;             // global GPU index in the cluster
  int dp_rank = 0, tp_rank = 0, pp_rank = 0;
  int cp_rank = 0;         // context-parallel rank (0 when cp = 1)
  /// Weights, gradients and optimizer state resident for the whole step.
  double static_bytes = 0;
  std::vector<Task> tasks;
};

struct Group {
  int id = 0;
  CommPurpose purpose = CommPurpose::none;
  std::vector<int> ranks;  // in collective order (ring order is chosen by the consumer)
};

struct StepProgram {
  int world_size = 0;
  int dp = 1, tp = 1, pp = 1, vp = 1;
  int cp = 1;                        // context parallel (plan::Plan::cp)
  int64_t num_micro_batches = 1;
  int64_t micro_batch = 1;
  Granularity granularity = Granularity::op;
  AttentionImpl attention = AttentionImpl::flash;
  /// Cost of every model op (indexed by op id) on one tp rank for one micro-batch under this
  /// plan. A compute task's work is the sum over its op (`op`) or merged ops (`ops`) of these
  /// in its phase (recompute = forward), which is how the simulator times merged tasks kernel
  /// by kernel; empty for hand-built programs (then the task's own flops / mem_bytes apply).
  std::vector<OpCost> op_costs;
  std::vector<std::string> streams;  // "compute", "tp", "pp-send", "pp-recv", "dp" (+ "cp" when cp > 1)
  std::vector<Group> groups;
  std::vector<RankProgram> ranks;
  /// Rank layout (Megatron-core order, tp innermost, so a tp group sits on consecutive GPUs of
  /// one node and a cp group next to it): rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp
  /// + tp_rank; with cp = 1 that is ((pp_rank * dp) + dp_rank) * tp + tp_rank.
  int rank_of(int dp_rank, int tp_rank, int pp_rank, int cp_rank = 0) const {
    return ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank;
  }
  /// Ranks that run the same program up to renaming (same pp_rank and tp_rank; the cp ranks of a
  /// replica do equal work under the load-balanced split): the simulator may simulate one per
  /// class. class_of[rank] = representative rank (dp_rank 0, cp_rank 0).
  std::vector<int> symmetry_class;
};

struct LowerOptions {
  Granularity granularity = Granularity::op;
  /// Emit alloc/free tasks (on by default; off halves the task count for timing-only runs).
  bool memory_events = true;
  /// Lower only the representative of each symmetry class (symmetry_class[r] == r); the other
  /// ranks keep their RankProgram header (rank, gpu, coordinates, static_bytes) and no tasks.
  /// Every rank of a class would get the same task list up to peers, groups and comm_ids
  /// (a translation of dp_rank and cp_rank).
  bool representatives_only = false;
  /// Lower only these ranks (empty: all, subject to representatives_only), e.g. the executor
  /// process of one rank. Ranks left out have no tasks, as above.
  std::vector<int> only_ranks = {};
  /// Worker threads over ranks (1: the calling thread; 0: all cores). The result does not
  /// depend on it.
  int threads = 1;
};

/// Lowers a validated plan to one training step. Deterministic. plan/README.md ("Lowering")
/// lists the exact task order, dependencies, sizes and memory events.
StepProgram lower(const Plan& plan, const PlanContext& ctx, const LowerOptions& options = {});

/// One compute step of a pipeline schedule: the forward or backward of model chunk `chunk`
/// (virtual stage chunk * pp + stage) for micro-batch `micro_batch`.
struct PipelineStep {
  Phase phase = Phase::forward;  // forward or backward
  int micro_batch = 0;
  int chunk = 0;
};

/// The order in which pipeline rank `stage` (0 .. pp-1) runs its forwards and backwards, as
/// Megatron-LM orders them: GPipe all forwards then all backwards (micro-batches ascending);
/// 1F1B min(pp - stage - 1, m) warm-up forwards, then (forward, backward) pairs, then the
/// remaining backwards; interleaved 1F1B over m * vp virtual micro-batches with Megatron's
/// get_model_chunk_id and (pp - stage - 1) * 2 + (vp - 1) * pp warm-up steps (all m * vp when
/// m == pp). vp must be 1 unless the schedule is interleaved.
std::vector<PipelineStep> pipeline_order(Schedule schedule, int pp, int vp, int64_t num_micro_batches, int stage);

/// Peak bytes of saved activations on a rank of pipeline stage `stage` during one step: the
/// peak of the activation alloc/free tasks lower() emits (either granularity), found by
/// replaying pipeline_order() unit by unit instead of building the program (cheap: steps x
/// units). Saved bytes per op follow unit_activation_bytes() (memory.hpp); recomputation:
/// selective re-materializes each dropped op right before its backward, full keeps each
/// unit's input and re-materializes the whole unit right before its backward.
double activation_peak_bytes(const Plan& plan, const PlanContext& ctx, int stage);

/// Checks the program's invariants (deps point backwards, every send has one recv with equal
/// bytes, every collective has one task per group member with equal bytes and kind, every
/// alloc has one free); returns the first violation or "" (used by tests and --check).
/// Also runs the program with zero durations under the semantics above and reports a rank
/// that cannot finish (a deadlock). Ranks without tasks (partial lowering) are skipped, and so
/// is the matching of communication with them.
std::string check_program(const StepProgram& program);

json::Json to_json(const StepProgram& program);

}  // namespace trainplan::plan
