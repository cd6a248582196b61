// File: trainplan/plan/plan.hpp
//
// The Plan: everything needed to run one training job, in one JSON format that every part of
// trainplan reads and the planner writes.
//
//   plan::Plan p = plan::read_plan_file("plan.json");     // parse + field checks
//   plan::PlanContext ctx = plan::resolve(p);              // model graph, instance, cluster
//   plan::validate(p, ctx);                                // cross-field rules, throws Error
//   plan::write_plan_file("out.json", p);
//
// A minimal plan file:
//   {"schema_version": 1, "model": "gpt3-13b",
//    "cluster": {"instance_type": "p4d.24xlarge", "count": 16},
//    "parallelism": {"dp": 16, "tp": 8, "pp": 1},          // optional: "cp" (context parallel)
//    "batch": {"global_batch": 1024, "micro_batch": 4}}
// Every other field has a default (see defaults below and plan/README.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::plan {

inline constexpr int kSchemaVersion = 1;

enum class Recompute { none, selective, full };
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b };
/// How data-parallel gradients are reduced (simulator/README.md, "Data-parallel libraries"):
/// NCCL's ring, tree or hierarchical all-reduce; a TensorFlow-style parameter server (one
/// server per instance, on its CPUs); the SageMaker data-parallel library (SMDDP: intra-node
/// reduce-scatter, reduction by server processes on every node's CPUs over EFA, intra-node
/// all-gather); Horovod (NCCL ring all-reduce of fusion buffers of at most bucket_size_bytes,
/// started on its background thread's cycle).
enum class DpAlgorithm { ring, tree, hierarchical, parameter_server, smddp, horovod };
/// capacity_block: an EC2 Capacity Block for ML, reserved and paid up front for whole days (up
/// to 14) or weeks (hwprofiles/capacity_block.hpp); it runs like on-demand (no interruptions).
enum class Purchase { on_demand, spot, capacity_block };
enum class Platform { ec2, sagemaker };
/// How attention runs: `flash` = one fused kernel that never stores the score matrix
/// (FlashAttention-2/3, cuDNN fused attention, PyTorch SDPA's flash / memory-efficient paths);
/// `unfused` = QK^T, softmax (+ mask, dropout) and AV as separate kernels with the scores in
/// memory (Megatron-LM before 2022); `flash1` = a FlashAttention-1-class fused kernel (the
/// original FlashAttention CUDA kernels and their Triton port, what stacks ran before
/// FlashAttention-2 (July 2023), and ALiBi models until flash-attn 2.4): the same memory and
/// FLOPs as `flash`, about half its speed (simulator/README.md, "Compute model").
enum class AttentionImpl { flash, unfused, flash1 };

std::string_view recompute_name(Recompute r);        // "none", "selective", "full"
/// The recomputation unit `u` gets under the plan's `r`. Full recomputation re-runs the model's
/// layers ("block*" units) only, as the frameworks checkpoint them: Megatron-LM's
/// --recompute-granularity full (the transformer layers; the embedding, output layer and loss
/// keep their activations), PyTorch FSDP's activation-checkpoint wrapper (llm-foundry: each
/// MPTBlock) and Hugging Face gradient checkpointing (each decoder layer). The embedding /
/// stem and the head run once and keep what their backward needs.
Recompute unit_recompute(Recompute r, const models::Unit& u);
std::string_view schedule_name(Schedule s);          // "gpipe", "1f1b", "interleaved-1f1b"
std::string_view dp_algorithm_name(DpAlgorithm a);   // "ring", "tree", "hierarchical", "parameter-server", "smddp", "horovod"
/// Every DpAlgorithm, in declaration order (for parsers and choice lists).
inline constexpr DpAlgorithm kDpAlgorithms[] = {DpAlgorithm::ring, DpAlgorithm::tree, DpAlgorithm::hierarchical,
                                                DpAlgorithm::parameter_server, DpAlgorithm::smddp, DpAlgorithm::horovod};
std::string_view purchase_name(Purchase p);          // "on-demand", "spot", "capacity-block"
std::string_view platform_name(Platform p);          // "ec2", "sagemaker"
std::string_view attention_impl_name(AttentionImpl a);  // "flash", "unfused", "flash1"
/// Whether the attention runs as one fused kernel (flash or flash1).
inline bool is_fused_attention(AttentionImpl a) { return a != AttentionImpl::unfused; }

/// How FP8 tensors are scaled (Transformer Engine's recipes, plan/README.md "FP8"):
/// `delayed` = one fp32 scale per tensor from the amax history of past steps (DelayedScaling);
/// `current` = one fp32 scale per tensor from the tensor's own amax, an extra read of it
/// (Float8CurrentScaling; Megatron-LM's "tensorwise"); `mxfp8` = an E8M0 scale per 32
/// consecutive values, native on Blackwell (compute capability 10.0+) only (MXFP8BlockScaling);
/// `blockwise` = an fp32 scale per 1x128 activation / 128x128 weight block, the DeepSeek-V3
/// scheme (Float8BlockScaling).
enum class Fp8Recipe { delayed, current, mxfp8, blockwise };
std::string_view fp8_recipe_name(Fp8Recipe r);       // "delayed", "current", "mxfp8", "blockwise"
inline constexpr Fp8Recipe kFp8Recipes[] = {Fp8Recipe::delayed, Fp8Recipe::current, Fp8Recipe::mxfp8, Fp8Recipe::blockwise};

/// FP8 training options (only with precision fp8). JSON: "fp8": {"recipe": "delayed",
/// "amax_history": 1024, "fp8_params": false}.
struct Fp8Options {
  Fp8Recipe recipe = Fp8Recipe::delayed;
  /// Delayed scaling: steps of amax history per FP8 tensor (Transformer Engine's default
  /// DelayedScaling.amax_history_len = 1024). Only with the delayed recipe.
  int amax_history = 1024;
  /// Weights kept only in FP8 (TE fp8_model_init; Megatron-LM --fp8-param-gather): no 16-bit
  /// copy of the FP8 linears' weights, and ZeRO's parameter all-gather moves 1 byte per
  /// weight of those linears. Gradients and master weights are unchanged.
  bool fp8_params = false;
  bool operator==(const Fp8Options&) const = default;
};

/// Layer units [first_unit, last_unit] (inclusive) owned by one (virtual) pipeline stage.
struct StageAssignment {
  int first_unit = 0;
  int last_unit = 0;
};

struct Plan {
  int schema_version = kSchemaVersion;
  /// Catalog model name, or a path to a HF config.json / model JSON.
  std::string model;
  std::string instance_type;
  int instance_count = 1;
  /// AWS region whose prices cost the plan ("eu-west-1", `trainplan --region`); empty = the
  /// catalog's own prices (us-east-1 unless a price file says otherwise). JSON: cluster.region,
  /// written when not empty.
  std::string region;
  /// Software stack the plan runs on (catalog key "software": "pytorch-eager", "megatron-core",
  /// "jax-xla", ...); empty = hw::kDefaultSoftware, filled in by resolve() when the catalog
  /// defines it. JSON: software, written when not empty.
  std::string software;

  int dp = 1;
  int tp = 1;
  int pp = 1;
  /// Virtual pipeline stages per rank (interleaved 1F1B); 1 otherwise.
  int vp = 1;
  /// Context parallelism: the sequence of every sample is split over cp ranks (Megatron-core /
  /// Llama 3 style, causal load balancing: 2·cp chunks, rank i holds chunks i and 2cp-1-i).
  /// dp counts data-parallel replicas without it: GPUs = dp * tp * pp * cp, and parameters are
  /// replicated over dp * cp ranks (plan/README.md, "Context parallelism").
  int cp = 1;
  /// Expert parallelism (MoE models only): the routed experts of every MoE layer are split
  /// over ep ranks of the data-parallel group (ep divides dp * cp; each rank holds
  /// num_experts / ep experts); tokens reach their experts by an all-to-all (dispatch) and
  /// return by another (combine), forward and backward. Non-expert parameters stay replicated
  /// over dp * cp ranks, expert parameters over dp * cp / ep. GPUs stay dp * tp * pp * cp.
  int ep = 1;
  /// MoE routing: capacity factor (0 = dropless: every routed token is computed; c > 0: each
  /// expert takes at most c * tokens * top_k / num_experts tokens per micro-batch, padded to
  /// that, the rest dropped) and load imbalance (tokens on the busiest expert-parallel rank
  /// over the mean, >= 1; the expert compute and all-to-all wait for that rank; with a
  /// capacity factor the busiest rank holds min(imbalance, c) times the mean).
  double moe_capacity_factor = 0;
  double moe_load_imbalance = 1.0;
  int zero_stage = 0;              // 0..3
  bool sequence_parallel = false;  // requires tp > 1
  /// Synchronized batch norm (PyTorch SyncBatchNorm) over the data-parallel group: per
  /// batch-norm layer and micro-batch, the forward all-gathers every rank's mean, inverse std and
  /// count (2C + 1 fp32 values per rank) and the backward all-reduces the sums of dy and dy·x̂
  /// (2C fp32); both block the next layer. Needs a model with batch-norm layers.
  bool sync_batch_norm = false;

  int64_t global_batch = 0;        // samples per optimizer step
  int64_t micro_batch = 1;         // samples per micro-batch per data-parallel rank
  /// Micro-batches per step per pipeline; derived as global_batch / (micro_batch * dp) when
  /// the file leaves it out.
  int64_t num_micro_batches = 0;
  /// Sequence length override (0: the model's).
  int64_t seq_len = 0;

  Recompute recompute = Recompute::none;
  Schedule schedule = Schedule::one_f_one_b;
  AttentionImpl attention = AttentionImpl::flash;
  /// pp * vp entries, stage-major (virtual stage v of rank r is entry v * pp + r). Empty in the
  /// file means an even split, filled in by resolve().
  std::vector<StageAssignment> stages;

  /// Empty in the file = the GPU's preferred 16-bit precision (bf16, else fp16).
  std::optional<Precision> precision;
  /// FP8 recipe and options; read and written only when the precision is fp8.
  Fp8Options fp8;
  DpAlgorithm dp_algorithm = DpAlgorithm::ring;
  /// Gradient bucket (PyTorch DDP default 25 MB); under Horovod the tensor-fusion threshold
  /// (HOROVOD_FUSION_THRESHOLD, whose default is 64 MiB).
  double bucket_size_bytes = 25e6;
  /// Overlap data-parallel gradient reduction with backward.
  bool overlap_grad_reduce = true;
  /// The precision data-parallel gradient reductions run in (bytes on the wire, and of the
  /// buckets); unset = the software stack's default for the training precision
  /// (hw::SoftwareStack::grad_reduce: fp32 on Megatron-LM, FSDP and PyTorch AMP under bf16), else the
  /// training precision. JSON: data_parallel.grad_reduce, written when set.
  std::optional<Precision> grad_reduce;

  /// Seconds between checkpoints; 0 = none.
  double checkpoint_interval_s = 0;
  /// Work for whole-job estimates: tokens to train on (0 = unknown).
  double training_tokens = 0;
  Purchase purchase = Purchase::on_demand;
  Platform platform = Platform::ec2;
  /// Where the instances sit: AZs (contiguous blocks of instances per AZ) and placement group
  /// (hw/placement.hpp). Default: all in one AZ, one cluster placement group, EFA.
  hw::Placement placement;
  /// Training data: the Region its bucket is in (empty = the job's region) and its size in
  /// bytes (0 = unknown), read once per epoch; another Region's data costs inter-region
  /// transfer out of it.
  std::string data_region;
  double dataset_bytes = 0;

  /// What the tool that wrote the plan predicted (step time, memory, cost...). Kept verbatim
  /// on read so that a plan round-trips; never used as input.
  json::Json predicted;

  int world_size() const { return dp * tp * pp * cp; }
  /// Ranks holding the same parameters (the gradient reduction and ZeRO sharding group).
  int dp_cp() const { return dp * cp; }
  /// Ranks holding the same routed experts (the expert gradients' reduction group).
  int expert_dp() const { return dp * cp / ep; }
  Precision precision_or(Precision fallback) const { return precision.value_or(fallback); }
};

/// Reads and checks field types/ranges (not cross-field rules). Unknown fields are errors.
Plan read_plan_file(const std::string& path);
Plan parse_plan(const json::Json& doc, const std::string& name);
/// Writes all fields explicitly, so the file documents every choice.
json::Json to_json(const Plan& plan);
void write_plan_file(const std::string& path, const Plan& plan);

/// What a plan refers to, resolved against the catalogs.
struct PlanContext {
  models::ModelSpec model_spec;
  models::ModelGraph graph;
  const hw::InstanceType* instance = nullptr;
  const hw::GpuSpec* gpu = nullptr;
  hw::Cluster cluster;
  Precision precision = Precision::bf16;
  int64_t seq_len = 0;
  /// The plan's software stack (Plan::software) from the catalog; name empty when the catalog
  /// defines no stacks (then no host overhead is modelled).
  hw::SoftwareStack software;
};

/// The precision the plan's data-parallel gradient reductions run in: Plan::grad_reduce, else
/// the stack's default for the training precision (hw::SoftwareStack::grad_reduce_precision).
Precision grad_reduce_precision(const Plan& plan, const PlanContext& ctx);
/// Bytes per parameter of the gradient buffer: the training precision's, or 4 where the stack
/// accumulates 16-bit training's gradients in fp32 main grads (hw::SoftwareStack::fp32_main_grads)
/// and reduces them in fp32 (Megatron-LM with bf16: 18 bytes per parameter with Adam).
double gradient_bytes_per_param(const Plan& plan, const PlanContext& ctx);

/// Resolves model, instance type and cluster; fills defaults that depend on them (precision,
/// even stage assignment, num_micro_batches, seq_len). Errors name `plan_file`.
PlanContext resolve(Plan& plan, const hw::Catalog& catalog, const std::string& plan_file = "plan");
/// The same with the model given as a spec (a model built from a published shape; plan.model
/// names it for display).
PlanContext resolve(Plan& plan, const hw::Catalog& catalog, models::ModelSpec spec, const std::string& plan_file);
/// The same with the graph already built: `spec` with plan.seq_len applied, and
/// graph = models::build_graph(spec). A copy of a graph shares it, so the plan search builds
/// one graph for all its clusters.
PlanContext resolve(Plan& plan, const hw::Catalog& catalog, models::ModelSpec spec, const models::ModelGraph& graph,
                    const std::string& plan_file);

/// Cross-field rules. Throws Error with the plan file, JSON pointer and a hint:
/// tp divides heads, kv_heads and hidden (and ffn_hidden); pp <= blocks; dp*tp*pp*cp = GPUs of
/// the cluster; cp > 1 only for transformers, with seq_len divisible by 2*cp;
/// micro_batch * num_micro_batches * dp = global_batch; precision exists on the
/// GPU; stages cover every unit exactly once, in order; vp > 1 only with interleaved 1F1B and
/// num_micro_batches % pp == 0; sequence_parallel needs tp > 1; zero_stage in 0..3.
void validate(const Plan& plan, const PlanContext& ctx, const std::string& plan_file = "plan");

/// The same checks returning the first problem instead of throwing (for the search, where a
/// candidate that does not fit is a value, not an exception).
std::optional<std::string> check(const Plan& plan, const PlanContext& ctx);
/// Only the precision rules of check(): the precision exists on the GPU (FP8 needs FP8 tensor
/// cores), the FP8 recipe runs on it (mxfp8 needs compute capability 10.0).
std::optional<std::string> check_precision(const Plan& plan, const PlanContext& ctx);

/// Even split of `units` layer units over `stages` stages: blocks divided as evenly as
/// possible, the input unit on the first stage, the output unit on the last.
std::vector<StageAssignment> even_stages(int num_units, int stages);

/// Megatron-core's split with account_for_embedding_in_pipeline_split and
/// account_for_loss_in_pipeline_split: the input unit (embedding) and the output unit (final
/// norm, output layer, loss) each count as one layer, and all `num_units` units are divided as
/// evenly as possible over `stages` contiguous ranges, earlier ranges taking the remainder.
/// When num_units is a multiple of stages (what Megatron-core requires) the first chunk holds
/// the embedding and one layer fewer than the rest, the last chunk the output unit and one layer
/// fewer (a 30-layer model on pp*vp = 32 chunks: embedding alone, one layer per chunk, output
/// alone). Needs num_units >= stages.
std::vector<StageAssignment> even_stages_counting_ends(int num_units, int stages);

}  // namespace trainplan::plan
