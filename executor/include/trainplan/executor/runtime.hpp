// File: trainplan/executor/runtime.hpp
//
// The runtime: runs a plan's StepProgram for real, every rank a thread with its own backend,
// the ranks talking through the in-process communicator, or, in one process of a
// multi-process job, this process's ranks talking to the others through a TcpWorld
// (RuntimeOptions::world; see tcp_world.hpp). It interprets the model graph op by
// op (forward, backward, recomputation), moves the tensors the program's communication tasks
// name (tensor-parallel collectives, pipeline sends, data-parallel / ZeRO buckets, the tied
// embedding all-reduce), runs AdamW with global-norm clipping on the parameters each rank
// owns, and records a measured Timeline in the simulator's format.
//
//   plan::Plan p = plan::read_plan_file("plan.json");
//   plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin());
//   plan::validate(p, ctx);
//   Runtime rt(p, ctx, plan::lower(p, ctx), RuntimeOptions{});
//   for (int i = 0; i < 10; ++i) {
//     StepResult r = rt.step();               // r.loss, r.timeline, r.peak_memory_bytes
//   }
//   rt.save_checkpoint("ckpt/");               // sharded as the plan shards it
//   std::vector<double> w = rt.parameter("block1.attn.qkv.weight");  // gathered, tp = 1 layout
//
// Conventions (executor/README.md has the long version):
// - Parameters are named "<op name>.weight" / "<op name>.bias" (the model graph's op names)
//   and stored in PyTorch layout: linear (out, in), embedding (rows, C), norms (C). Each is
//   drawn whole from the seed (per name) and sliced, so every plan starts from the same values.
// - Data: sample i of the global batch of step k is `TrainingData::sample(k, i)`; dp rank d,
//   micro-batch m holds samples (d * M + m) * b ... + b - 1 (M micro-batches of b samples).
// - Loss: mean cross-entropy over all tokens (labels) of the global batch; each micro-batch's
//   loss is divided by the global token count, so summing gradients over micro-batches and
//   data-parallel ranks gives the single-rank gradient.
// - The CPU backend computes in f32 (or f64), whatever 16-bit precision the plan names; the
//   program's FLOPs and bytes are reported as the program states them.
// - Dropout runs as identity; GELU is the tanh approximation (executor/README.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/launch.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/plan/timeline.hpp"

namespace trainplan::executor {

/// The training samples of a run: a pure function of (step, sample index), so that every plan
/// and a resumed run see the same data.
class TrainingData {
 public:
  /// Synthetic data for `spec` from `seed`. Decoders: tokens uniform in [0, vocab). MLP:
  /// features N(0, 1) and the label argmax(W x) of a fixed random teacher W (learnable).
  static TrainingData synthetic(const models::ModelSpec& spec, int64_t seq_len, uint64_t seed);
  /// Decoders only: windows of a token stream (e.g. a file's bytes, read_byte_tokens);
  /// sample i of step k starts at ((k * G + i) * seq) mod (tokens - seq - 1), G = global batch.
  static TrainingData from_tokens(const models::ModelSpec& spec, int64_t seq_len, int64_t global_batch,
                                  std::vector<int32_t> tokens);

  /// Decoders: `inputs` and `labels` (seq each; labels are the next tokens).
  void token_sample(int64_t step, int64_t sample, std::span<int32_t> inputs, std::span<int32_t> labels) const;
  /// MLP: `features` (widths[0]) and one label.
  void feature_sample(int64_t step, int64_t sample, std::span<double> features, int32_t& label) const;
  bool decoder() const { return decoder_; }

 private:
  bool decoder_ = true;
  int64_t seq_len_ = 0, vocab_ = 0, global_batch_ = 0;
  uint64_t seed_ = 0;
  std::vector<int32_t> tokens_;  // empty: synthetic
  int64_t features_ = 0, classes_ = 0;
  std::vector<double> teacher_;  // (classes, features)
};

/// How the ranks of a device backend (cuda) move tensors in the step's communication tasks.
enum class DeviceCollectives {
  automatic,  // device when the backend has a collective library and this process has one
              // device per local rank (first_device + local ranks <= devices), else staging
  staging,    // copies to host tensors, the world's communicator (in-process / TCP), copies back
  device,     // the backend's collective library (NCCL) on the device tensors, in their dtype,
              // one device per rank: refused (Error) when the ranks would share a device
};
/// "auto", "staging", "device".
std::string_view device_collectives_name(DeviceCollectives c);

/// The path the runtime takes, and why (for the run's output).
struct CollectivesChoice {
  bool device = false;   // true: the device library; false: staging (or a cpu backend's own)
  std::string reason;    // "nccl: 2 ranks on GPUs 0..1", "staged through host memory: ..."
};
/// Decides the path for `local_ranks` ranks of this process on `backend`, the first on device
/// `first_device`, on a machine with `devices` devices, `has_library`: the backend has a
/// device collective library (backend_has_device_communicator). Throws Error when `want` is
/// device and it cannot be (a cpu backend, no library, two ranks on one device).
CollectivesChoice choose_collectives(DeviceCollectives want, std::string_view backend, bool has_library, int devices,
                                     int first_device, int local_ranks);

struct RuntimeOptions {
  std::string backend = "cpu";
  /// Device backends: the communication path (choose_collectives; Runtime::collectives()).
  DeviceCollectives collectives = DeviceCollectives::automatic;
  /// On the device path, local rank i (the i-th rank this process holds) runs on device
  /// first_device + i (a launcher's LOCAL_RANK x ranks per process). The staging path keeps
  /// every rank on the backend's default device.
  int first_device = 0;
  /// The store the device library's ranks exchange ids through (the job's rendezvous under a
  /// launcher). Null: one in this process (valid only when `world` holds every rank).
  std::shared_ptr<Rendezvous> store;
  DType dtype = DType::f32;       // master weights, activations and gradients
  uint64_t seed = 1;              // parameter initialization
  uint64_t data_seed = 2;         // synthetic data (when `data` is not given)
  AdamWConfig adamw{1e-3, 0.9, 0.95, 1e-8, 0.1};
  double max_grad_norm = 1.0;     // global-norm clipping; <= 0 disables it
  /// A communication wait longer than this fails the step (deadlock detection).
  double timeout_s = 60;
  /// The data; synthetic from data_seed when null.
  std::shared_ptr<const TrainingData> data;
  /// Keep each step's reduced gradients for Runtime::gradient() (tests; one download of every
  /// gradient per step).
  bool keep_gradients = false;
  /// A step whose global gradient norm is NaN or infinite never updates the parameters or the
  /// optimizer state. false: Runtime::step() throws an Error naming the step (and the rank and
  /// tensor holding the first non-finite gradient) and the step does not count; true: the step
  /// is skipped (StepResult::skipped), its batch consumed, as dynamic loss scaling does.
  bool skip_nonfinite_steps = false;
  /// The ranks' communicators. Null: an in-process world of every rank. A world that holds
  /// only some ranks (TcpWorld: one process of a multi-process job) makes this Runtime build
  /// and run only those ranks: their parameters, optimizer state and checkpoint files. Its
  /// timeout, not timeout_s, then bounds the waits.
  std::shared_ptr<CommWorld> world;
  /// Polled by every rank at the end of each step (e.g. "SIGTERM arrived"); when it is true in
  /// any process, StepResult::stop_requested is true in every process, after the same step.
  std::function<bool()> stop_requested;
};

struct StepResult {
  int64_t step = 0;               // 1-based index of the optimizer step just taken
  double loss = 0;                // mean cross-entropy of the global batch (before the update)
  double grad_norm = 0;           // global gradient norm before clipping
  /// The gradient norm was not finite and RuntimeOptions::skip_nonfinite_steps skipped the
  /// update; `nonfinite_where` names the first rank and tensor with a non-finite gradient.
  bool skipped = false;
  std::string nonfinite_where;
  double step_time_s = 0;         // wall clock of the step (first task start to last task end)
  std::vector<double> peak_memory_bytes;           // per rank: the backend's peak allocation
  std::vector<double> declared_peak_memory_bytes;  // per rank: static + peak live allocs of the program
  plan::Timeline timeline;        // measured, source "measured <backend>"; this process's ranks
                                  // (all of them after Runtime::collect_timeline on rank 0)
  /// Some process asked to stop (RuntimeOptions::stop_requested) during this step: every
  /// process sees the same value, so all can checkpoint and end after the same step.
  bool stop_requested = false;
};

class Runtime {
 public:
  /// Materializes each rank's parameters and optimizer state (initialized from
  /// options.seed). Throws Error for what the executor cannot run (a model family or op kind,
  /// naming it), a program that does not belong to the plan or breaks plan::check_program.
  /// Dropout layers and attention dropout run as identity (no masks): runs are deterministic.
  Runtime(const plan::Plan& plan, const plan::PlanContext& ctx, plan::StepProgram program, RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Runs one training step on this process's ranks (threads) and returns its loss and
  /// measurements. In a multi-process job every process calls it; the loss, gradient norm,
  /// step time and peak memory per rank are the whole job's, the timeline holds this process's
  /// ranks. Errors on any rank (including communication timeouts and a dead process) abort all
  /// ranks and are rethrown.
  StepResult step();
  /// Multi-process jobs: gathers every rank's events of `result` (the last step) into the
  /// timeline of the process holding rank 0 (a collective: every process calls it). Times are
  /// seconds from each process's start of the step; the processes start a step together (after
  /// the previous step's exchange), within the exchange's latency. A no-op with one process.
  void collect_timeline(StepResult& result);
  /// The global ranks this process holds (all of them without a multi-process world).
  std::vector<int> local_ranks() const;
  /// The communication path of this process's ranks (device library or staging) and why.
  const CollectivesChoice& collectives() const;
  /// Optimizer steps taken (including those restored from a checkpoint).
  int64_t steps_done() const;

  // Gathering (parameter, gradient, check_replicas) needs every rank in this process: with a
  // multi-process world they throw Error (compare checkpoints instead).

  /// Global parameter names, in model graph order (a tied head adds none).
  std::vector<std::string> parameter_names() const;
  /// Full (tp = 1, unsharded) shape of a parameter in the executor's layout.
  Shape parameter_shape(const std::string& name) const;
  /// Current values of a parameter, gathered from the ranks that own it (row-major).
  std::vector<double> parameter(const std::string& name) const;
  /// The reduced gradient of the last step (summed over micro-batches and ranks, before
  /// clipping), gathered from its owners. Needs RuntimeOptions::keep_gradients.
  std::vector<double> gradient(const std::string& name) const;
  /// "" when every copy of every parameter (data-parallel replicas, tp-replicated tensors,
  /// the two tied embedding copies) is bit-identical; else the first difference.
  std::string check_replicas() const;

  /// Writes the model and optimizer state, one shard file per rank holding what that rank owns,
  /// then commits the manifest (checkpoint.hpp) into `dir` (created if needed). Multi-process:
  /// every process calls it and writes its ranks' files; once all are written (an exchange of
  /// every rank's status), the process of rank 0 commits the manifest (a rename), then all return.
  void save_checkpoint(const std::string& dir);
  /// Restores a checkpoint written by save_checkpoint for the same model and plan layout (the
  /// number of processes may differ: files are per rank); verifies the manifest, every shard's
  /// size and hash and every tensor's checksum. Errors name the file and what does not match; a
  /// checkpoint of another world size is refused (no resharding).
  void load_checkpoint(const std::string& dir);

  const plan::StepProgram& program() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Throws Error (at `plan_file`, with the JSON pointer of the field) for a valid plan that the
/// runtime does not execute: context parallelism (parallelism.cp > 1) is modelled by the
/// planner and the simulator only. `trainplan execute` and ModelLayout::build call it (the
/// Runtime constructor refuses a cp > 1 program before that, at its rank-coordinate check,
/// which knows no cp_rank).
void check_executable(const plan::Plan& plan, const std::string& plan_file = "");

/// Throws Error (at `plan_file`, /cluster/instance_type) when the plan's accelerator has no
/// backend here: AWS Trainium (runtime "neuron", trn1 / trn1n / trn2) is planned and simulated,
/// never executed. `trainplan execute` and the Runtime constructor call it.
void check_accelerator_executable(const plan::PlanContext& ctx, const std::string& plan_file = "");

/// The step's memory declared by the program, per rank: static_bytes + the peak of the live
/// alloc/free bytes in task order.
std::vector<double> declared_peak_memory(const plan::StepProgram& program);

/// Throws Error when a rank's declared peak memory exceeds `limit_bytes`, naming the rank,
/// its peak (static + step buffers) and the limit. A plan "does not fit" before it runs.
void check_memory_limit(const plan::StepProgram& program, double limit_bytes);

/// The newest complete checkpoint under `dir` (a subfolder "step-<N>" with a manifest), or ""
/// when there is none. Runtime::save_checkpoint writes into checkpoint_folder(dir, step).
std::string latest_checkpoint(const std::string& dir);
std::string checkpoint_folder(const std::string& dir, int64_t step);

}  // namespace trainplan::executor
