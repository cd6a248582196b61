// Private pieces of the runtime (runtime.hpp): the model layout every rank shares (which ops a
// rank runs, how tensor parallelism slices each parameter), one rank's state (parameters,
// ZeRO shards, optimizer state, activations per micro-batch) and its program interpreter.
//
// Files: runtime_layout.cpp (ModelLayout, parameter slices, initialization, TrainingData),
// rank_state.cpp (parameters, buckets, optimizer, checkpoints of one rank), rank_ops.cpp
// (forward / backward of each op kind), rank_program.cpp (the task loop: streams,
// dependencies, communication, timeline), runtime.cpp (threads, gathering, manifest).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/checkpoint.hpp"
#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/runtime.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/plan/timeline.hpp"

namespace trainplan::executor::rt {

/// Which elements of a full (tp = 1) parameter a tp rank holds: the concatenation of the row
/// blocks `rows` of the (rows x cols) matrix view (1-D tensors are (n x 1)), restricted to the
/// columns [col_begin, col_end). Local tensors are row-major over exactly these elements.
struct TpSlice {
  std::vector<std::pair<int64_t, int64_t>> rows;  // [begin, end) row ranges, in local order
  int64_t col_begin = 0, col_end = 0;
  int64_t full_cols = 0;

  int64_t local_rows() const;
  int64_t local_cols() const { return col_end - col_begin; }
  int64_t numel() const { return local_rows() * local_cols(); }
  /// Global row-major index of every local element, in local order.
  std::vector<int64_t> global_indices() const;
};

/// A parameter of the model (tp = 1), and how it is initialized.
struct ParamDef {
  std::string name;         // "<op name>.weight" / ".bias"
  int op = -1;              // op that owns it
  bool is_bias = false;     // second parameter of its op (bias / beta)
  Shape shape;              // executor layout: linear (out, in), embedding (rows, C), norm (C)
  enum class Init { normal, ones, zeros } init = Init::normal;
  double stddev = 0.02;
  bool decay = true;        // AdamW weight decay (matrices and embeddings)
  models::TpSplit split = models::TpSplit::replicated;
  /// Routed experts: the full tensor is E blocks of rows (weight (E * out, in), bias (E * out)),
  /// expert e's rows [e out, (e + 1) out); under expert parallelism a rank holds its experts'.
  int64_t experts = 0;
};

/// Facts about the model and the plan that every rank shares (read-only during a step).
struct ModelLayout {
  const plan::Plan* plan = nullptr;
  const models::ModelGraph* graph = nullptr;
  const plan::StepProgram* program = nullptr;
  int dp = 1, tp = 1, pp = 1, vp = 1, zero_stage = 0;
  /// Expert parallelism: the ep consecutive dp ranks (dp_rank / ep) * ep + i form an
  /// expert-parallel group; member i holds experts [i E / ep, (i + 1) E / ep) of every MoE
  /// layer, and the dp ranks with equal dp_rank % ep (the expert-data-parallel group) hold the
  /// same experts.
  int ep = 1;
  bool sp = false;
  /// Optimizer state sharded over dp (ZeRO 1-3, or a parameter server's shards).
  bool sharded = false;
  /// Parameters at rest are dp shards gathered before use (ZeRO-3 with dp > 1).
  bool params_sharded = false;
  int64_t micro_batch = 1, num_micro_batches = 1, global_batch = 1;
  int64_t rows_per_sample = 1;   // seq_len for decoders, 1 for the MLP
  int64_t seq_len = 1;
  double total_label_rows = 1;   // labels in the global batch: the loss is their mean
  std::vector<ParamDef> params;              // graph order
  std::vector<std::vector<int>> op_params;   // op -> indices into params (weight first)
  std::vector<int> unit_stage;               // unit -> pipeline rank
  /// MoE: for routed-expert ops and moe_combine, the moe_dispatch op whose routing they follow
  /// (-1 for other ops).
  std::vector<int> moe_dispatch_of;

  /// Builds the layout; throws Error for models or ops the executor cannot run.
  static ModelLayout build(const plan::Plan& plan, const models::ModelGraph& graph, const plan::StepProgram& program);

  const models::Op& op(int id) const { return graph->op(id); }
  bool op_on_stage(int op_id, int pp_rank) const { return unit_stage[static_cast<size_t>(op(op_id).unit)] == pp_rank; }
  /// The parameter a tied head uses (the token embedding's weight), or -1.
  int tied_param(int op_id) const;
  /// Slice of parameter `p` held by tp rank `r` (empty rows when the rank holds none: the
  /// row-parallel bias lives on tp rank 0 only).
  TpSlice slice(int p, int tp_rank) const;
  /// Slice of parameter `p` held by a rank: its tp slice, and of a routed expert's parameter
  /// only the rows of the experts of expert-parallel rank `ep_rank`.
  TpSlice slice(int p, int tp_rank, int ep_rank) const;
  /// Experts per expert-parallel rank, and whether parameter `p` is split over ep.
  int64_t local_experts(int64_t experts) const { return experts / ep; }
  bool expert_sharded(int p) const { return ep > 1 && params[static_cast<size_t>(p)].experts > 0; }
  /// Whether every tp rank holds the same values of parameter `p`.
  bool tp_replicated(int p) const;
  /// Vocabulary range [begin, end) of tp rank r.
  std::pair<int64_t, int64_t> vocab_range(int64_t vocab, int tp_rank) const;
  /// Token rows of a micro-batch, and of one tp rank's sequence-parallel slice.
  int64_t rows_full() const { return micro_batch * rows_per_sample; }
  int64_t rows_local() const { return sp ? rows_full() / tp : rows_full(); }
  /// Whether op's forward output (after its tp collective) is a sequence-parallel row slice.
  bool output_is_row_slice(int op_id) const;
  /// Local columns of op's output on tp rank r.
  int64_t out_cols_local(int op_id, int tp_rank) const;
  /// Whether op's backward input gradient is partial over tp (a column / vocab linear).
  bool column_like(int op_id) const;
  /// Full initial values of parameter p (deterministic per name and seed).
  std::vector<double> initial_values(int p, uint64_t seed) const;
};

/// One parameter tensor as a rank holds it.
struct Param {
  int def = -1;                  // index into ModelLayout::params
  bool tied_copy = false;        // the last stage's copy of the tied embedding
  TpSlice slice;
  Shape local_shape;
  int64_t numel = 0;             // local elements
  int64_t chunk = 0;             // ZeRO shard size: ceil(numel / dp)
  int64_t own_begin = 0, own_end = 0;  // elements this rank updates (the ZeRO shard, or all)
  bool canonical = false;        // counts for the gradient norm and for gathering
  Tensor value;                  // local values (ZeRO-3: gathered, transient)
  int64_t value_generation = -1; // ZeRO-3: which gather produced `value`
  Tensor shard;                  // ZeRO-3 at rest: `chunk` elements
  Tensor grad;                   // local accumulation since the last reduction (lazy)
  bool grad_dirty = false;       // backward wrote to grad since the last reduction
  Tensor reduced;                // reduced gradient: numel (all-reduce) or chunk (reduce-scatter)
  bool reduced_is_shard = false;
  Tensor m, v;                   // AdamW state of the owned elements
  bool updated = false;          // optimizer ran on it this step
  bool tp_reduced = false;       // a program collective summed its gradient over tp this step
  std::vector<double> last_grad; // owned elements of the reduced gradient of the last step
  int64_t own_len() const { return own_end - own_begin; }
};

/// How one moe_dispatch routed one micro-batch (shared by the expert ops and the combine).
/// Source side: this rank's N tokens, k copies each, in dispatch order (grouped by expert,
/// stable in token order). Expert side (ep > 1): the copies received from the ep members for
/// this rank's experts, regrouped by local expert (for each local expert, member 0's copies,
/// then member 1's...).
struct MoeRoute {
  Tensor copy_token;                  // (R) i32: the token of each copy, in dispatch order
  Tensor combine_rows;                // (N, k) i32: where copy (token, i) is in dispatch order
  std::vector<int64_t> per_expert;    // copies of each expert (all E) in dispatch order
  std::vector<int64_t> send_rows;     // per ep member: copies this rank sends it
  std::vector<int64_t> recv_rows;     // per ep member: copies this rank receives from it
  Tensor regroup, ungroup;            // (Rl) i32: received row of each local row, and the inverse
  std::vector<int64_t> expert_rows;   // rows of each local expert in the expert ops' order
};

/// Activations and gradients of one op for one micro-batch on one rank.
struct Act {
  Tensor out;
  bool partial = false;          // before its tensor-parallel reduction
  Tensor mean, rstd;             // norms
  Tensor lse, qkv_rot;           // attention (qkv_rot: rotary applied)
  Tensor ce_max, ce_stats, losses;  // loss: max (N), [sum_exp | target] (2N), losses (N)
  int loss_stats_seen = 0;
  bool recording_loss = false;   // this loss forward counts toward the step's loss
  bool release_after_stats = false;  // vocab-parallel loss: after_forward once its stats are reduced
  Tensor gathered;               // sequence parallel: out gathered to full rows
  Tensor dout;                   // gradient of out
  Tensor dout_gathered;          // sequence parallel: dout gathered to full rows
  Tensor dpartial;               // partial gradient of out from column consumers
  int users_left = 0;            // backward tasks that still read this state
  int forward_users_left = 0;    // forward consumers still to run
  bool recomputed = false;       // a recompute task re-creates its state before its backward
  bool drop_out = false;         // ... and before every local consumer's backward: out may go
  Tensor pp_chunk;               // pipeline scatter-gather: this tp rank's received piece
  Tensor moe_experts, moe_probs; // router: chosen experts (N, k) i32 and probabilities (N, E)
  Tensor moe_copies;             // dispatch (ep > 1): copies before the all-to-all; combine: the
                                 // expert outputs in dispatch order (R, C)
  Tensor moe_dcopies;            // ep > 1, between a backward and its all-to-all: the dispatch's
                                 // copies' gradients (dispatch order), or (on the combine's
                                 // input op) the combine's input gradient
  std::shared_ptr<MoeRoute> route;  // moe_dispatch
};

struct MicroBatchData {
  bool ready = false;
  Tensor tokens, labels;         // rows_full i32
  Tensor positions_local;        // rows_local i32: row % seq of this rank's rows
  Tensor features;               // (rows_full, widths[0])
};

/// What a rank reports after a step.
struct RankStepResult {
  double loss_sum = 0;           // sum of per-token losses it recorded (tp rank 0 of the last stage)
  int64_t loss_rows = 0;
  double grad_norm = 0;
  /// The global gradient norm is NaN or infinite: the update was not applied. The first of
  /// this rank's owned gradients holding a non-finite element ("" if none of its own does).
  bool nonfinite = false;
  std::string nonfinite_tensor;
  double peak_memory_bytes = 0;
  std::vector<plan::TimelineEvent> events;
  /// Communication the runtime added because the program has none for it (named once each).
  std::vector<std::string> implicit;
};

class RankState {
 public:
  /// `device`: the backend's device for this rank (-1: the backend's default).
  RankState(const ModelLayout& layout, const RuntimeOptions& options, const TrainingData& data, int rank,
            int device = -1);

  int rank() const { return rank_; }
  const plan::RankProgram& program() const;
  Backend& backend() { return *backend_; }

  /// Runs this rank's program for step `step` (0-based) on `comm`; times relative to t0_s.
  RankStepResult run_step(int64_t step, Communicator& comm, double t0_s);

  // Parameters (runtime.cpp gathers and checkpoints them).
  const std::vector<Param>& params() const { return params_; }
  std::vector<double> download(const Tensor& t);
  /// Values of the owned / held elements of a parameter at rest: ZeRO-3 the shard, else
  /// the whole local tensor.
  std::vector<double> values_at_rest(const Param& p);
  /// Writes this rank's shard into `dir` (checkpoint.hpp) and returns what the manifest lists.
  checkpoint::ShardInfo save(const std::string& dir);
  /// Restores the parameters, optimizer state and step counts from a verified shard.
  void load(const checkpoint::Shard& shard, const std::string& path);
  int64_t steps_done() const { return steps_done_; }
  void set_steps_done(int64_t s) { steps_done_ = s; }
  /// The communicator group of the program's group `index`, and of every rank.
  CommGroup group(int index) const;
  CommGroup world_group() const;

 private:
  // ---- parameters and optimizer (rank_state.cpp)
  void materialize_params();
  Param& param_of(int op_id, bool bias);
  Param* find_param(int op_id, bool bias);
  /// Local value tensor of a parameter for compute (ZeRO-3: the gathered copy).
  Tensor weight(int op_id, bool bias);
  /// Local gradient accumulation tensor (allocated as zeros on first use).
  Tensor grad_for(int op_id, bool bias);
  std::vector<Param*> bucket_params(const plan::Task& t, bool require_local);
  void optimizer(const std::vector<int>& ops);
  /// This rank's share of the squared gradient norm (1 element), after the implicit
  /// sequence-parallel reduction if the program has none; keeps gradients if asked.
  Tensor local_grad_norm_sq();
  /// The clip scale from the world's squared norm.
  void finish_clip(const Tensor& norm_sq);
  Tensor effective_grad(Param& p);

  // ---- ops (rank_ops.cpp)
  void forward(int mb, int op_id, bool recompute);
  void backward(int mb, int op_id);
  MicroBatchData& batch(int mb);
  Act& act(int mb, int op_id) { return acts_[static_cast<size_t>(mb)][static_cast<size_t>(op_id)]; }
  /// The forward output of `producer` as `consumer` reads it (checks it is reduced).
  const Tensor& input_of(int mb, int consumer, int producer);
  /// The saved forward output of `producer` that `consumer`'s backward reads (Error if dropped).
  const Tensor& saved_output(int mb, int consumer, int producer);
  void add_grad(Tensor& target, const Tensor& g);
  void release_after_backward(int mb, int op_id);
  void after_forward(int mb, int op_id);
  void finish_loss(int mb, int op_id);

  // ---- program (rank_program.cpp)
  /// A started communication task and what to do with its data when it completes.
  struct Pending {
    int task = -1;
    double start_s = 0;
    std::shared_ptr<CommRequest> request;
    std::function<void()> on_complete;
  };
  void init_step_state(int64_t step);
  void start_task(int task_id, std::vector<Pending>& pending);
  void start_collective(const plan::Task& t, std::vector<Pending>& pending);
  void start_p2p(const plan::Task& t, std::vector<Pending>& pending);
  void start_pp_gather(const plan::Task& t, const CommGroup& g, std::vector<Pending>& pending);
  /// The op whose output (forward) or output gradient (backward) a pipeline task moves, and
  /// that tensor's shape on this rank.
  int pp_boundary_op(const plan::Task& t, bool forward) const;
  Shape pp_shape(int op_id) const;
  void start_bucket(const plan::Task& t, const CommGroup& g, std::vector<Pending>& pending);
  void start_param_gather(const plan::Task& t, const CommGroup& g, const std::vector<Param*>& params, double start,
                          std::vector<Pending>& pending);
  void record(const plan::Task& t, double start_s, double end_s);
  int64_t tag(int64_t comm_id) const;
  CommGroup tp_group() const;
  /// Expert parallelism (rank_ops.cpp): this rank's ep group and expert-data-parallel group.
  CommGroup ep_group() const;
  CommGroup expert_dp_group() const;
  /// The routing of the moe_dispatch `op_id` follows in micro-batch mb.
  MoeRoute& route_of(int mb, int op_id);
  /// Routed-expert linear forward / backward: each local expert's rows with its weights.
  void expert_linear_forward(int mb, int op_id, const Tensor& out, const Tensor& x);
  void expert_linear_backward(int mb, int op_id, const Tensor& dx, const Tensor& dout, const Tensor& x);
  void moe_dispatch_forward(int mb, int op_id);
  /// Forward of a router, moe_dispatch or moe_combine (returns its output), and backward.
  Tensor moe_forward(int mb, int op_id);
  void moe_backward(int mb, int op_id);
  /// Moves rows between this rank's dispatch order and its experts' order (ep > 1) with an
  /// all-to-all over the ep group: to_experts (dispatch / combine backward) or back.
  Tensor moe_exchange(const MoeRoute& r, const Tensor& rows, bool to_experts, int64_t tag);
  /// The program's expert-parallel all-to-all task (purpose ep), run to completion.
  void start_moe_all_to_all(const plan::Task& t);
  /// Exchanges the per-expert counts over the ep group and fills the expert side of `route`.
  void moe_route_exchange(MoeRoute& route, int64_t tag);
  [[noreturn]] void fail(const plan::Task& t, const std::string& message) const;

  const ModelLayout& L_;
  const RuntimeOptions& options_;
  const TrainingData& data_;
  int rank_;
  int dp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
  std::unique_ptr<Backend> backend_;
  Stream* stream_ = nullptr;
  std::vector<Param> params_;
  std::vector<std::vector<int>> op_param_index_;  // op -> [weight, bias] indices into params_ (-1 absent)
  std::vector<bool> local_op_;
  int64_t steps_done_ = 0;
  int64_t updates_done_ = 0;  // AdamW's step count: steps whose update was applied

  // Per step.
  Communicator* comm_ = nullptr;
  int64_t step_ = 0;
  double t0_s_ = 0;
  std::vector<std::vector<Act>> acts_;
  std::vector<MicroBatchData> batches_;
  std::vector<std::vector<std::pair<int, int64_t>>> release_after_task_;  // ZeRO-3: (param, generation)
  bool clip_ready_ = false;
  int ep_rank_ = 0;
  Tensor clip_scale_;
  RankStepResult result_;
  /// Compute tasks of the step and their events on the stream (times are read at the end).
  struct TimedTask {
    int task = -1;
    std::unique_ptr<Event> start, end;
  };
  std::vector<TimedTask> timed_;
};

/// The implicit collectives of the runtime use comm ids at the top of a step's tag range.
inline constexpr int64_t kTagStride = int64_t{1} << 40;
inline constexpr int64_t kGradNormCommId = kTagStride - 1;
inline constexpr int64_t kSpGradCommId = kTagStride - 2;  // minus the parameter's position
/// An expert-parallel all-to-all task exchanges its counts under comm id + this.
inline constexpr int64_t kMoeCountsCommBase = kTagStride / 2;

}  // namespace trainplan::executor::rt
