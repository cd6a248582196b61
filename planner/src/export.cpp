// Exporters of a plan to DeepSpeed, Megatron-LM, SageMaker and torchrun. See export.hpp; every
// fact about a framework used here is a rule of export_rules.cpp, with its source, and every
// refusal names the rule it rests on.
#include "trainplan/planner/export.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/export_rules.hpp"

namespace trainplan::planner {

std::string_view export_target_name(ExportTarget t) {
  switch (t) {
    case ExportTarget::deepspeed: return "deepspeed";
    case ExportTarget::megatron: return "megatron";
    case ExportTarget::sagemaker: return "sagemaker";
    case ExportTarget::torchrun: return "torchrun";
  }
  return "deepspeed";
}

ExportTarget parse_export_target(const std::string& name) {
  std::vector<std::string> names;
  for (ExportTarget t : {ExportTarget::deepspeed, ExportTarget::megatron, ExportTarget::sagemaker, ExportTarget::torchrun}) {
    if (export_target_name(t) == name) return t;
    names.emplace_back(export_target_name(t));
  }
  throw Error(fmt::format("unknown export target \"{}\"", name)).hint(suggestion(name, names));
}

namespace {

// SageMaker's maximum MaxRuntimeInSeconds (StoppingCondition: 28 days).
constexpr double kSageMakerMaxRunS = 28 * 86400.0;

struct Refusal {
  ExportTarget target;
  std::string plan_file;
  /// Refuses with the limitation `what`, the rule it rests on and a way out.
  [[noreturn]] void operator()(const std::string& pointer, std::string_view rule, const std::string& what,
                               const std::string& hint) const {
    (void)export_rule(rule);  // the rule exists
    throw Error(fmt::format("{} cannot express this plan: {} [rule {}]", export_target_name(target), what, rule))
        .at(plan_file, pointer)
        .hint(hint);
  }
};

// One pipeline stage (model chunk) in transformer terms: does it hold the embedding (unit 0),
// the head and loss (last unit), and how many blocks.
struct StageShape {
  bool embedding = false;
  bool head = false;
  int blocks = 0;
};

std::vector<StageShape> stage_shapes(const plan::Plan& p, const plan::PlanContext& ctx) {
  const int last = static_cast<int>(ctx.graph.units().size()) - 1;
  std::vector<StageShape> out;
  for (const auto& a : p.stages) {
    StageShape s;
    s.embedding = a.first_unit == 0;
    s.head = a.last_unit == last;
    s.blocks = a.last_unit - a.first_unit + 1 - (s.embedding ? 1 : 0) - (s.head ? 1 : 0);
    out.push_back(s);
  }
  return out;
}

// Every chunk holds the same number of blocks (embedding on the first, head on the last).
bool even_blocks(const std::vector<StageShape>& shapes) {
  return std::all_of(shapes.begin(), shapes.end(), [&](const StageShape& s) { return s.blocks == shapes.front().blocks; });
}

std::string precision_text(const plan::Plan& p, const plan::PlanContext& ctx) {
  return std::string(precision_name(p.precision_or(ctx.precision)));
}

std::string summary_line(const plan::Plan& p, const plan::PlanContext& ctx) {
  std::string s = fmt::format("{} on {} x {} ({} GPUs): dp {} x tp {} x pp {}", comment_text(ctx.model_spec.name), p.instance_count,
                              comment_text(p.instance_type),
                              p.world_size(), p.dp, p.tp, p.pp);
  if (p.cp > 1) s += fmt::format(" x cp {}", p.cp);
  if (p.vp > 1) s += fmt::format(" x vp {}", p.vp);
  s += fmt::format(", ZeRO-{}, micro-batch {} x {} micro-batches, {} recomputation, {}", p.zero_stage, p.micro_batch,
                   p.num_micro_batches, plan::recompute_name(p.recompute), precision_text(p, ctx));
  return s;
}

void check_common(const plan::Plan& p, const Refusal& refuse) {
  if (p.dp_cp() > 1 && p.dp_algorithm == plan::DpAlgorithm::parameter_server)
    refuse("/data_parallel/algorithm", "all.no-parameter-server",
           "the parameter-server algorithm (none of DeepSpeed, Megatron-LM, SageMaker's PyTorch distributions or torchrun's "
           "NCCL collectives run one)",
           "re-plan with --dp-algorithms ring,tree,hierarchical");
  if (p.dp_cp() > 1 && p.dp_algorithm == plan::DpAlgorithm::horovod)
    refuse("/data_parallel/algorithm", "all.no-horovod", "Horovod (no target writes a Horovod job)",
           "re-plan with --dp-algorithms ring,tree,hierarchical");
}

// Expert parallelism is written as Megatron-LM arguments only: the other targets run a training
// script or config that has no expert-parallel layout to set.
void check_no_expert_parallel(const plan::Plan& p, const Refusal& refuse) {
  if (p.ep > 1)
    refuse("/parallelism/ep", "all.expert-parallel-megatron",
           fmt::format("expert parallelism (ep = {}: routed experts split over ranks, all-to-all dispatch and combine)", p.ep),
           "export with --to megatron (--expert-model-parallel-size), or re-plan with --ep 1");
}

// Targets outside SageMaker: the SMDDP library runs only in SageMaker's training containers.
void check_not_smddp(const plan::Plan& p, const Refusal& refuse) {
  if (p.dp_cp() > 1 && p.dp_algorithm == plan::DpAlgorithm::smddp)
    refuse("/data_parallel/algorithm", "all.smddp-sagemaker-only",
           "the SageMaker data parallel library (SMDDP) outside a SageMaker training job",
           "export with --to sagemaker, or re-plan with --dp-algorithms ring,tree,hierarchical");
}

// A line saying which NCCL algorithm the plan's data-parallel reduction assumed.
std::string nccl_note(const plan::Plan& p) {
  if (p.dp_cp() == 1 || p.zero_stage != 0) return "";
  switch (p.dp_algorithm) {
    case plan::DpAlgorithm::ring: return "NCCL_ALGO=Ring";
    case plan::DpAlgorithm::tree: return "NCCL_ALGO=Tree";
    default: return "";
  }
}

bool hierarchical_reduce(const plan::Plan& p) {
  return p.dp_cp() > 1 && p.zero_stage == 0 && p.dp_algorithm == plan::DpAlgorithm::hierarchical;
}

// ---- DeepSpeed ----------------------------------------------------------------------------

void deepspeed_checks(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  check_common(p, refuse);
  check_no_expert_parallel(p, refuse);
  check_not_smddp(p, refuse);
  if (p.sequence_parallel)
    refuse("/parallelism/sequence_parallel", "deepspeed.sequence-parallel",
           "sequence parallelism over the tensor-parallel group (Megatron-LM's; AutoTP has none)", "export with --to megatron");
  if (p.cp > 1)
    refuse("/parallelism/cp", "deepspeed.sequence-parallel",
           fmt::format("context parallelism (cp = {}: K, V all-gathered over the cp ranks around each attention); DeepSpeed's "
                       "sequence parallelism (Ulysses) is a different scheme (all-to-all exchanges of heads), whose costs this plan "
                       "does not model",
                       p.cp),
           "export with --to megatron (--context-parallel-size), or re-plan with --cp 1");
  if (p.tp > 1 && p.zero_stage == 3)
    refuse("/parallelism/zero_stage", "deepspeed.autotp",
           fmt::format("tensor parallelism (tp = {}) with ZeRO-3 (AutoTP trains with ZeRO 0-2 only)", p.tp),
           "re-plan with --zero 0,1,2, or export with --to megatron (Megatron-FSDP)");
  if (p.tp > 1 && p.pp > 1)
    refuse("/parallelism/tp", "deepspeed.autotp",
           fmt::format("tensor parallelism (tp = {}) with pipeline parallelism (AutoTP does not run under the pipeline engine)", p.tp),
           "export with --to megatron, or re-plan with --for deepspeed");
  if (p.pp > 1 && p.zero_stage >= 2)
    refuse("/parallelism/zero_stage", "deepspeed.pipeline-zero",
           fmt::format("ZeRO-{} with pipeline parallelism (DeepSpeed's pipeline engine supports ZeRO-1 at most)", p.zero_stage),
           "re-plan with --zero 0,1 or without pipeline parallelism");
  if (p.pp > 1 && p.schedule != plan::Schedule::one_f_one_b)
    refuse("/schedule", "deepspeed.pipeline-schedule",
           fmt::format("the {} schedule (DeepSpeed's pipeline engine runs its own 1F1B schedule)", plan::schedule_name(p.schedule)),
           "re-plan with --schedules 1f1b");
  if (p.pp > 1 && !even_blocks(stage_shapes(p, ctx)))
    refuse("/stages", "deepspeed.pipeline-partition",
           "an uneven layer split (DeepSpeed's PipelineModule splits layers itself: partition_method \"type:transformer\" "
           "gives every stage the same number of transformer layers)",
           "re-plan with --partition even, or export with --to megatron, which can express any split");
  if (p.precision_or(ctx.precision) == Precision::fp8)
    refuse("/precision", "deepspeed.precision",
           "FP8 training (a DeepSpeed config has no FP8 setting: FP8 GEMMs come from Transformer Engine modules under "
           "te.fp8_autocast in the model code)",
           "export with --to megatron (--fp8-format), or set \"precision\": \"bf16\" in the plan");
}

std::string deepspeed(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  deepspeed_checks(p, ctx, refuse);
  const Precision prec = p.precision_or(ctx.precision);
  json::Json j = json::Json::object();
  j["train_batch_size"] = p.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch;
  j["gradient_accumulation_steps"] = p.num_micro_batches;
  if (prec == Precision::bf16) j["bf16"] = {{"enabled", true}};
  else if (prec == Precision::fp16) j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  // Gradients reduced in another precision than the training one (rule deepspeed.communication-data-type).
  const Precision reduce = plan::grad_reduce_precision(p, ctx);
  if (bytes_per_element(reduce) != bytes_per_element(prec)) j["communication_data_type"] = std::string(precision_name(reduce));
  json::Json zero = {{"stage", p.zero_stage}};
  zero["overlap_comm"] = p.overlap_grad_reduce;
  zero["contiguous_gradients"] = true;
  // Elements, not bytes (rule deepspeed.bucket-elements).
  zero["reduce_bucket_size"] = bucket_elements(p, ctx);
  if (p.zero_stage == 1 || p.zero_stage == 2) zero["allgather_bucket_size"] = bucket_elements(p, ctx);
  j["zero_optimization"] = zero;
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  if (p.recompute != plan::Recompute::none)
    j["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false}};
  return j.dump(2) + "\n";
}

// What a DeepSpeed config cannot carry: the PipelineModule arguments, which layers the model
// checkpoints, the NCCL algorithm the plan assumed.
std::vector<std::string> deepspeed_notes(const plan::Plan& p) {
  std::vector<std::string> notes;
  if (p.pp > 1)
    notes.push_back(fmt::format("pipeline parallelism is set in the training script, not in the config [rule "
                                "deepspeed.pipeline-module]: PipelineModule(layers, num_stages={}, "
                                "partition_method=\"type:transformer\", activation_checkpoint_interval={})",
                                p.pp, p.recompute == plan::Recompute::full ? 1 : 0));
  if (p.recompute == plan::Recompute::full && p.pp == 1)
    notes.push_back("full recomputation: the model wraps every transformer layer in deepspeed.checkpointing.checkpoint");
  if (p.recompute == plan::Recompute::selective)
    notes.push_back("selective recomputation: the model wraps only each layer's attention core (QK^T, softmax, AV) in "
                    "deepspeed.checkpointing.checkpoint");
  if (const std::string nccl = nccl_note(p); !nccl.empty())
    notes.push_back(fmt::format("the plan's data-parallel all-reduce assumed {}: set it in the launch environment", nccl));
  if (hierarchical_reduce(p))
    notes.push_back("the plan's data-parallel all-reduce assumed a hierarchical algorithm: NCCL's default across nodes");
  return notes;
}

// ---- Megatron-LM --------------------------------------------------------------------------

std::string layout_string(const std::vector<StageShape>& shapes) {
  std::vector<std::string> stages;
  for (const auto& s : shapes) {
    std::string t;
    if (s.embedding) t += "E";
    if (s.blocks == 1) t += "t";
    else if (s.blocks > 1) t += fmt::format("t*{}", s.blocks);
    if (s.head) t += "L";
    stages.push_back(t);
  }
  return join(stages, "|");
}

void megatron_checks(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  check_common(p, refuse);
  check_not_smddp(p, refuse);
  const auto& m = ctx.model_spec;
  if (!m.is_transformer() || m.family == models::Family::vit)
    refuse("/model", "megatron.models",
           fmt::format("the {} model {} (Megatron-LM trains transformer language models)", models::family_name(m.family), m.name),
           "export with --to torchrun or --to deepspeed");
  // Variants of imported Hugging Face models that the arguments below do not carry.
  std::vector<std::string> variants;
  if (m.activation == models::Activation::geglu) variants.emplace_back("a GeGLU MLP");
  if (m.head_size > 0) variants.emplace_back(fmt::format("head_dim {} != hidden / heads", m.head_size));
  if (m.qkv_bias && !m.bias) variants.emplace_back("QKV-only biases");
  if (m.qk_norm) variants.emplace_back("Q/K norms");
  if (m.post_norms) variants.emplace_back("post-attention/MLP norms");
  if (m.parallel_residual) variants.emplace_back("parallel residuals");
  if (m.rotary_fraction < 1) variants.emplace_back("partial rotary");
  if (m.num_local_layers() > 0) variants.emplace_back("sliding-window layers");
  if (m.attn_softcap > 0 || m.logit_softcap > 0) variants.emplace_back("logit soft-capping");
  if (!variants.empty())
    refuse("/model", "megatron.models",
           fmt::format("the model {} with {} (this export writes Megatron-LM's GPT / Llama arguments, which do not carry them)",
                       m.name, join(variants, ", ")),
           "export with --to torchrun or --to deepspeed");
  const int cc = compute_capability(ctx);
  if (plan::is_fused_attention(p.attention) && cc > 0 && cc < 80)
    refuse("/attention", "megatron.attention-backend",
           fmt::format("flash attention on {} (sm{}): Transformer Engine disables FlashAttention and FusedAttention below sm80, "
                       "and the unfused backend that remains keeps the score matrix this plan does not count",
                       ctx.gpu->name, cc),
           "set \"attention\": \"unfused\" in the plan, or re-plan with --for megatron (which plans these GPUs with unfused "
           "attention)");
}

// Mixture of experts: the routed experts, their width, the shared expert and which layers are
// MoE, the all-to-all token dispatcher the plan models, and the capacity factor (padded to
// capacity, as the plan computes it).
void megatron_moe_args(const plan::Plan& p, const models::ModelSpec& m, std::vector<std::string>& args) {
  args.push_back(fmt::format("--num-experts {}", m.num_experts));
  args.push_back(fmt::format("--moe-router-topk {}", m.experts_per_token));
  args.push_back(fmt::format("--moe-ffn-hidden-size {}", m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : m.ffn_hidden));
  if (m.shared_expert_ffn_hidden > 0) args.push_back(fmt::format("--moe-shared-expert-intermediate-size {}", m.shared_expert_ffn_hidden));
  if (!m.moe_layers.empty()) {
    std::vector<std::string> pattern;
    for (bool moe : m.moe_layers) pattern.emplace_back(moe ? "1" : "0");
    args.push_back(fmt::format("--moe-layer-freq \"[{}]\"", join(pattern, ",")));
  }
  args.push_back("--moe-token-dispatcher-type alltoall");
  args.push_back("--moe-grouped-gemm");
  if (p.moe_capacity_factor > 0) {
    args.push_back(fmt::format("--moe-expert-capacity-factor {:g}", p.moe_capacity_factor));
    args.push_back("--moe-pad-expert-input-to-capacity");
  }
}

// The model shape and the attention backend.
void megatron_model_args(const plan::Plan& p, const plan::PlanContext& ctx, std::vector<std::string>& args) {
  const auto& m = ctx.model_spec;
  args.push_back(fmt::format("--num-layers {}", m.layers));
  args.push_back(fmt::format("--hidden-size {}", m.hidden));
  args.push_back(fmt::format("--ffn-hidden-size {}", m.ffn_hidden));
  args.push_back(fmt::format("--num-attention-heads {}", m.heads));
  if (m.kv_heads != m.heads) {
    args.push_back("--group-query-attention");
    args.push_back(fmt::format("--num-query-groups {}", m.kv_heads));
  }
  args.push_back(fmt::format("--seq-length {}", ctx.seq_len));
  args.push_back(fmt::format("--max-position-embeddings {}", ctx.seq_len));
  if (m.position == models::PositionEmbedding::rotary) args.push_back("--position-embedding-type rope");
  if (m.norm == models::Norm::rmsnorm) args.push_back("--normalization RMSNorm");
  if (m.activation == models::Activation::swiglu) args.push_back("--swiglu");
  if (!m.tied_embeddings) args.push_back("--untie-embeddings-and-output-weights");
  if (!m.bias) args.push_back("--disable-bias-linear");
  // A flash1 plan describes an older stack's kernel; today's Megatron runs its flash backend.
  args.push_back(fmt::format("--attention-backend {}", plan::is_fused_attention(p.attention) ? "flash" : "unfused"));
  if (m.is_moe()) megatron_moe_args(p, m, args);
}

// Tensor, context and pipeline parallelism with the layer split.
void megatron_parallel_args(const plan::Plan& p, const plan::PlanContext& ctx, std::vector<std::string>& args) {
  args.push_back(fmt::format("--tensor-model-parallel-size {}", p.tp));
  args.push_back(fmt::format("--pipeline-model-parallel-size {}", p.pp));
  if (p.cp > 1) {
    // The plan models Llama 3's all-gather context parallelism (Megatron-core's default is the
    // p2p ring, which overlaps the K, V exchange with the attention); TE spells it all_gather.
    args.push_back(fmt::format("--context-parallel-size {}", p.cp));
    args.push_back("--cp-comm-type all_gather");
  }
  if (p.ep > 1) args.push_back(fmt::format("--expert-model-parallel-size {}", p.ep));
  if (p.sequence_parallel) args.push_back("--sequence-parallel");
  if (p.pp == 1) return;
  const auto shapes = stage_shapes(p, ctx);
  const bool even = even_blocks(shapes);
  if (p.vp > 1) {
    if (even) args.push_back(fmt::format("--num-layers-per-virtual-pipeline-stage {}", shapes.front().blocks));
    else args.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout_string(shapes)));
  } else if (!even) {
    // Megatron-LM's uneven split: the first and last stages set, the others equal.
    bool middle_even = true;
    for (size_t s = 2; s + 1 < shapes.size(); ++s) middle_even = middle_even && shapes[s].blocks == shapes[1].blocks;
    if (middle_even && shapes.front().blocks > 0 && shapes.back().blocks > 0) {
      args.push_back(fmt::format("--decoder-first-pipeline-num-layers {}", shapes.front().blocks));
      args.push_back(fmt::format("--decoder-last-pipeline-num-layers {}", shapes.back().blocks));
    } else {
      args.push_back(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout_string(shapes)));
    }
  }
}

// Batch, recomputation, data parallelism (distributed optimizer, FSDP, buckets) and precision.
void megatron_training_args(const plan::Plan& p, const plan::PlanContext& ctx, std::vector<std::string>& args) {
  args.push_back(fmt::format("--micro-batch-size {}", p.micro_batch));
  args.push_back(fmt::format("--global-batch-size {}", p.global_batch));
  if (p.recompute == plan::Recompute::selective) args.push_back("--recompute-granularity selective");
  if (p.recompute == plan::Recompute::full) {
    args.push_back("--recompute-granularity full");
    args.push_back("--recompute-method uniform");
    args.push_back("--recompute-num-layers 1");
  }
  if (p.zero_stage >= 1) args.push_back("--use-distributed-optimizer");
  if (p.zero_stage >= 2) {
    args.push_back("--use-megatron-fsdp");
    args.push_back(fmt::format("--data-parallel-sharding-strategy {}", p.zero_stage == 2 ? "optim_grads" : "optim_grads_params"));
    args.push_back("--no-gradient-accumulation-fusion");
    args.push_back("--ckpt-format fsdp_dtensor");
  }
  if (p.dp_cp() > 1 && p.overlap_grad_reduce) args.push_back("--overlap-grad-reduce");
  if (p.dp_cp() > 1) args.push_back(fmt::format("--ddp-bucket-size {}", bucket_elements(p, ctx)));  // parameters
  const Precision prec = p.precision_or(ctx.precision);
  // The gradients' precision on the wire as the plan costs it (plan::grad_reduce_precision):
  // Megatron-LM reduces in fp32 under --bf16 unless --grad-reduce-in-bf16, and in fp16 under
  // --fp16 unless --accumulate-allreduce-grads-in-fp32 (rule megatron.grad-reduce-bf16).
  const bool fp32_grads = plan::grad_reduce_precision(p, ctx) == Precision::fp32;
  if (prec == Precision::bf16 || prec == Precision::fp8) {
    args.push_back("--bf16");
    if (p.dp_cp() > 1 && !fp32_grads) args.push_back("--grad-reduce-in-bf16");
  } else if (prec == Precision::fp16) {
    args.push_back("--fp16");
    if (p.dp_cp() > 1 && fp32_grads) args.push_back("--accumulate-allreduce-grads-in-fp32");
  }
  if (prec == Precision::fp8) {
    // The plan's recipe in Megatron-LM's names (arguments.py _add_transformer_engine_args):
    // current scaling is "tensorwise". Formats as Transformer Engine's recipe defaults: HYBRID
    // (E4M3 forward, E5M2 gradients) for the per-tensor recipes, E4M3 throughout for the
    // block-scaled ones (TE recipe docs: MXFP8BlockScaling and Float8BlockScaling default to E4M3).
    const plan::Fp8Recipe r = p.fp8.recipe;
    const bool per_tensor = r == plan::Fp8Recipe::delayed || r == plan::Fp8Recipe::current;
    args.push_back(fmt::format("--fp8-format {}", per_tensor ? "hybrid" : "e4m3"));
    args.push_back(fmt::format("--fp8-recipe {}", megatron_fp8_recipe(r)));
    if (r == plan::Fp8Recipe::delayed) {
      // Megatron-LM's defaults (history 1, most_recent) differ from TE's (1024, max), which the
      // plan states: both are written.
      args.push_back(fmt::format("--fp8-amax-history-len {}", p.fp8.amax_history));
      args.push_back("--fp8-amax-compute-algo max");
    }
    // FP8 parameters (TE fp8_model_init) whose distributed-optimizer all-gather moves FP8.
    if (p.fp8.fp8_params) args.push_back("--fp8-param-gather");
  }
}

std::string megatron(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  megatron_checks(p, ctx, refuse);
  std::vector<std::string> args;
  megatron_model_args(p, ctx, args);
  megatron_parallel_args(p, ctx, args);
  megatron_training_args(p, ctx, args);

  std::string out = "# Megatron-LM arguments: " + summary_line(p, ctx) + "\n";
  if (p.dp > 1)
    out += fmt::format("# data parallelism: {} replicas (world size / (tp x pp{}), set by the launcher)\n", p.dp, p.cp > 1 ? " x cp" : "");
  if (const std::string nccl = nccl_note(p); !nccl.empty())
    out += fmt::format("# the plan's data-parallel all-reduce assumed {}: export it in the launch environment\n", nccl);
  if (hierarchical_reduce(p))
    out += "# the plan's data-parallel all-reduce assumed a hierarchical algorithm: NCCL's default across nodes\n";
  if (needs_one_cuda_connection(p))
    out += "export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM asserts it with tensor or context parallelism\n";
  if (p.zero_stage >= 2) out += "unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP asserts it is not 1\n";
  out += "MEGATRON_ARGS=(\n";
  for (const auto& a : args) out += "  " + a + "\n";
  out += ")\n";
  return out;
}

// ---- SageMaker ----------------------------------------------------------------------------

// The plan's predicted wall-clock time: the whole-job expectation of its purchase option when
// `trainplan plan` computed one, else steps x step time.
double predicted_time_s(const plan::Plan& p) {
  const json::Json& pr = p.predicted;
  if (!pr.is_object()) return 0;
  const char* job = p.purchase == plan::Purchase::spot ? "spot_job" : "on_demand_job";
  if (pr.contains(job) && pr[job].is_object() && pr[job].contains("expected_time_s") && pr[job]["expected_time_s"].is_number())
    return pr[job]["expected_time_s"].get<double>();
  if (pr.contains("time_to_train_s") && pr["time_to_train_s"].is_number()) return pr["time_to_train_s"].get<double>();
  return 0;
}

bool listed(std::span<const std::string_view> list, std::string_view s) { return std::find(list.begin(), list.end(), s) != list.end(); }

std::string joined(std::span<const std::string_view> list) {
  std::vector<std::string> v(list.begin(), list.end());
  return join(v, ", ");
}

// A user string as a Python literal; a string that cannot be one names its flag.
std::string literal(const std::string& value, const char* flag) {
  try {
    return python_string(value);
  } catch (Error& e) {
    e.at(flag);
    throw;
  }
}

// SageMaker data parallelism through SMDDP: asked for (--smddp) or the plan's algorithm.
bool uses_smddp(const plan::Plan& p, const ExportOptions& o) {
  return o.smddp || (p.dp_cp() > 1 && p.dp_algorithm == plan::DpAlgorithm::smddp);
}

void sagemaker_checks(const plan::Plan& p, const plan::PlanContext& ctx, const ExportOptions& o, const Refusal& refuse) {
  check_common(p, refuse);
  check_no_expert_parallel(p, refuse);
  const std::string ml_type = "ml." + ctx.instance->name;
  if (!ctx.instance->aws || !listed(sagemaker_training_instance_types(), ml_type))
    refuse("/cluster/instance_type", "sagemaker.instance-types", fmt::format("{} is not a SageMaker training instance type", ml_type),
           "re-plan with --platform sagemaker, which only considers types SageMaker trains on");
  if (!listed(sagemaker_torch_distributed_versions(), o.framework_version))
    throw Error(fmt::format("framework_version \"{}\" is not one the SageMaker Python SDK accepts with torch_distributed (it "
                            "compares exact versions) [rule sagemaker.framework-version]",
                            comment_text(o.framework_version)))
        .at("--framework-version")
        .hint("give one of " + joined(sagemaker_torch_distributed_versions()));
  const bool model_parallel = p.tp > 1 || p.pp > 1 || p.cp > 1 || p.zero_stage == 3;
  const bool smddp = uses_smddp(p, o);
  if (smddp && model_parallel)
    refuse("/parallelism", "sagemaker.smddp-instance-types",
           "the smdistributed data parallel library with model parallelism or sharding", "leave out --smddp");
  if (smddp && !listed(sagemaker_smddp_instance_types(), ml_type))
    refuse("/cluster/instance_type", "sagemaker.smddp-instance-types",
           fmt::format("the smdistributed data parallel library on {} (it supports {})", ml_type, joined(sagemaker_smddp_instance_types())),
           "leave out --smddp to use torch_distributed");
}

// max_run and max_wait in seconds (rule sagemaker.max-run).
std::pair<double, double> sagemaker_limits(const plan::Plan& p, const ExportOptions& o, const Refusal& refuse) {
  double run_s = o.max_run_s;
  if (run_s <= 0) {
    const double predicted = predicted_time_s(p);
    if (predicted <= 0)
      throw Error("SageMaker needs max_run, and the plan has no predicted time")
          .at(refuse.plan_file, "/predicted")
          .hint("pass --max-run (e.g. 3d), or export a plan written by `trainplan plan`");
    run_s = std::max(3600.0, std::ceil(predicted * 1.5 / 3600.0) * 3600.0);
  }
  if (run_s > kSageMakerMaxRunS)
    refuse("/predicted", "sagemaker.max-run",
           fmt::format("a job of {} (SageMaker stops training jobs after at most 28 days)", units::format_duration(run_s)),
           "split the run into jobs that resume from checkpoints and pass --max-run 28d, or use more instances");
  double wait_s = o.max_wait_s > 0 ? o.max_wait_s : std::min(kSageMakerMaxRunS, 2.0 * run_s);
  if (wait_s < run_s) wait_s = run_s;
  return {run_s, wait_s};
}

std::string sagemaker(const plan::Plan& p, const plan::PlanContext& ctx, const ExportOptions& o, const Refusal& refuse) {
  sagemaker_checks(p, ctx, o, refuse);
  const auto [run_s, wait_s] = sagemaker_limits(p, o, refuse);
  const bool spot = p.purchase == plan::Purchase::spot;
  std::vector<std::string> notes;
  if (p.tp > 1 || p.pp > 1 || p.cp > 1 || p.zero_stage > 0 || p.recompute != plan::Recompute::none)
    notes.push_back("the layout is the entry point's: torch_distributed starts it with torchrun on every GPU; run Megatron-LM "
                    "with the arguments of `trainplan export PLAN --to megatron` (or DeepSpeed with --to deepspeed)");

  std::string out = "# SageMaker PyTorch estimator: " + summary_line(p, ctx) + "\n";
  for (const auto& n : notes) out += "# " + n + "\n";
  out += "from sagemaker.pytorch import PyTorch\n\n";
  out += "estimator = PyTorch(\n";
  // Every string from the user goes through python_string (a valid literal whatever it holds).
  out += fmt::format("    entry_point={},\n", literal(o.entry_point, "--entry-point"));
  out += fmt::format("    role={},\n", literal(o.role, "--role"));
  out += fmt::format("    framework_version={},\n", literal(o.framework_version, "--framework-version"));
  out += fmt::format("    py_version={},\n", literal(o.py_version, "--py-version"));
  out += fmt::format("    instance_type={},\n", literal("ml." + ctx.instance->name, "/cluster/instance_type"));
  out += fmt::format("    instance_count={},\n", p.instance_count);
  out += fmt::format("    distribution={},\n", uses_smddp(p, o) ? "{\"smdistributed\": {\"dataparallel\": {\"enabled\": True}}}"
                                                        : "{\"torch_distributed\": {\"enabled\": True}}");
  // The training processes' environment (rule sagemaker.environment).
  std::vector<std::string> env;
  if (needs_one_cuda_connection(p)) env.push_back("\"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\"");
  if (const std::string nccl = nccl_note(p); !nccl.empty() && !uses_smddp(p, o))
    env.push_back(fmt::format("\"NCCL_ALGO\": \"{}\"", nccl.substr(nccl.find('=') + 1)));
  if (!env.empty()) out += "    environment={" + join(env, ", ") + "},\n";
  out += fmt::format("    max_run={},\n", static_cast<int64_t>(run_s));
  if (spot) {
    out += "    use_spot_instances=True,\n";
    out += fmt::format("    max_wait={},\n", static_cast<int64_t>(wait_s));
    out += fmt::format("    checkpoint_s3_uri={},\n", literal(o.checkpoint_s3_uri, "--checkpoint-s3-uri"));
  }
  out += ")\n";
  out += "estimator.fit()\n";
  return out;
}

// ---- torchrun / srun ----------------------------------------------------------------------

std::string torchrun(const plan::Plan& p, const plan::PlanContext& ctx, const ExportOptions& o, const Refusal& refuse) {
  check_common(p, refuse);
  check_no_expert_parallel(p, refuse);
  check_not_smddp(p, refuse);
  const hw::InstanceType& inst = *ctx.instance;
  const int gpn = inst.gpu_count;
  std::vector<std::string> env;
  if (inst.network.efa) {
    env.push_back("FI_PROVIDER=efa");
    if (inst.network.gpudirect_rdma) env.push_back("FI_EFA_USE_DEVICE_RDMA=1");
  }
  if (const std::string nccl = nccl_note(p); !nccl.empty()) env.push_back(nccl);
  if (needs_one_cuda_connection(p)) env.push_back("CUDA_DEVICE_MAX_CONNECTIONS=1");
  const std::string env_text = env.empty() ? "" : join(env, " ") + " ";
  std::string out = "# " + summary_line(p, ctx) + "\n";
  if (p.cp > 1) {
    out += fmt::format("# ranks: {} = dp {} x cp {} x tp {} x pp {}, rank = ((pp_rank x dp + dp_rank) x cp + cp_rank) x tp + tp_rank "
                       "(Megatron-LM order: tp groups on consecutive GPUs of a node, cp groups next to them)\n",
                       p.world_size(), p.dp, p.cp, p.tp, p.pp);
    out += "# context parallelism is the training script's: each cp rank holds sequence chunks i and 2cp-1-i and all-gathers K, V "
           "around every attention (Megatron-LM --context-parallel-size with --cp-comm-type all_gather; PyTorch's "
           "torch.distributed.tensor.experimental.context_parallel)\n";
  } else {
    out += fmt::format("# ranks: {} = dp {} x tp {} x pp {}, tp innermost (Megatron-LM order: tp groups on consecutive GPUs of a node)\n",
                       p.world_size(), p.dp, p.tp, p.pp);
  }
  if (needs_one_cuda_connection(p))
    out += "# CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron-LM asserts it with tensor or context parallelism\n";
  if (hierarchical_reduce(p))
    out += "# the plan's data-parallel all-reduce assumed a hierarchical algorithm: NCCL's default across nodes\n";
  out += "\n# On each node (NODE_RANK = 0.." + std::to_string(p.instance_count - 1) + ", MASTER_ADDR = node 0):\n";
  // The entry point is one shell word; in the srun line the whole inner command is quoted once
  // more for `bash -c`.
  const std::string entry = shell_quote(o.entry_point);
  out += fmt::format("{}torchrun --nnodes {} --nproc-per-node {} --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port {} {}\n",
                     env_text, p.instance_count, gpn, o.master_port, entry);
  out += "\n# With Slurm (one task per node, torchrun starts the GPU processes):\n";
  const std::string inner = fmt::format(
      "{}torchrun --nnodes $SLURM_NNODES --nproc-per-node {} --node-rank $SLURM_NODEID --master-addr "
      "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1) --master-port {} {}",
      env_text, gpn, o.master_port, entry);
  out += fmt::format("srun --nodes {} --ntasks-per-node 1 --gpus-per-node {} bash -c {}\n", p.instance_count, gpn, shell_quote(inner));
  return out;
}

}  // namespace

std::string export_plan(const plan::Plan& plan_in, const plan::PlanContext& ctx, ExportTarget target, const ExportOptions& options,
                        const std::string& plan_file) {
  plan::Plan p = plan_in;
  plan::validate(p, ctx, plan_file);
  const Refusal refuse{target, plan_file};
  switch (target) {
    case ExportTarget::deepspeed: return deepspeed(p, ctx, refuse);
    case ExportTarget::megatron: return megatron(p, ctx, refuse);
    case ExportTarget::sagemaker: return sagemaker(p, ctx, options, refuse);
    case ExportTarget::torchrun: return torchrun(p, ctx, options, refuse);
  }
  return "";
}

std::vector<std::string> export_notes(const plan::Plan& plan, const plan::PlanContext&, ExportTarget target) {
  std::vector<std::string> notes;
  if (target == ExportTarget::deepspeed) notes = deepspeed_notes(plan);
  // No config key or launcher flag carries it: PyTorch converts the model's batch-norm layers.
  if (plan.sync_batch_norm && plan.dp_cp() > 1)
    notes.push_back("the plan synchronizes batch norm over the data-parallel group: the training script converts the model "
                    "with torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before wrapping it");
  return notes;
}

std::optional<std::string> export_refusal(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target,
                                          const ExportOptions& options) {
  ExportOptions o = options;
  if (o.max_run_s <= 0) o.max_run_s = 3600;  // the time limit is not a property of the layout
  try {
    (void)export_plan(plan, ctx, target, o);
  } catch (const Error& e) {
    return e.message();
  }
  return std::nullopt;
}

}  // namespace trainplan::planner
