// Exporters of a plan to DeepSpeed, Megatron-LM, SageMaker and torchrun. See export.hpp; the
// documentation each field name was checked against is listed in planner/README.md.
#include "trainplan/planner/export.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"

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
  [[noreturn]] void operator()(const std::string& pointer, const std::string& what, const std::string& hint) const {
    throw Error(fmt::format("{} cannot express this plan: {}", export_target_name(target), what)).at(plan_file, pointer).hint(hint);
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
    refuse("/data_parallel/algorithm", "the parameter-server algorithm (none of DeepSpeed, Megatron-LM, SageMaker's PyTorch "
                                       "libraries or torchrun's NCCL collectives run one)",
           "re-plan with --dp-algorithms ring,tree,hierarchical");
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

// ---- DeepSpeed ----------------------------------------------------------------------------

std::string deepspeed(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  check_common(p, refuse);
  if (p.tp > 1)
    refuse("/parallelism/tp", fmt::format("tensor parallelism (tp = {}) is not part of a DeepSpeed config", p.tp),
           "run it with Megatron-DeepSpeed and export the layout with --to megatron, or re-plan without tensor parallelism");
  if (p.sequence_parallel) refuse("/parallelism/sequence_parallel", "sequence parallelism needs Megatron-LM", "export with --to megatron");
  if (p.cp > 1)
    refuse("/parallelism/cp",
           fmt::format("context parallelism (cp = {}: K, V all-gathered over the cp ranks around each attention); DeepSpeed's "
                       "sequence parallelism (Ulysses) is a different scheme (all-to-all exchanges of heads), whose costs this plan "
                       "does not model",
                       p.cp),
           "export with --to megatron (--context-parallel-size), or re-plan with --cp 1");
  if (p.pp > 1 && p.zero_stage >= 2)
    refuse("/parallelism/zero_stage", fmt::format("ZeRO-{} with pipeline parallelism (DeepSpeed's pipeline engine supports ZeRO-1 at most)", p.zero_stage),
           "re-plan with --zero 0,1 or without pipeline parallelism");
  if (p.pp > 1 && p.schedule != plan::Schedule::one_f_one_b)
    refuse("/schedule", fmt::format("the {} schedule (DeepSpeed's pipeline engine runs its own 1F1B-style schedule)", plan::schedule_name(p.schedule)),
           "re-plan with --schedules 1f1b");
  if (p.recompute == plan::Recompute::selective)
    refuse("/recompute", "selective recomputation (DeepSpeed checkpoints whole layers)", "use full recomputation, or export with --to megatron");
  if (p.dp_cp() > 1 && p.zero_stage == 0 && p.dp_algorithm == plan::DpAlgorithm::hierarchical)
    refuse("/data_parallel/algorithm", "a hierarchical data-parallel all-reduce (DeepSpeed leaves the algorithm to NCCL)",
           "re-plan with --dp-algorithms ring,tree (and set NCCL_ALGO in the launch environment, see --to torchrun)");
  if (p.pp > 1) {
    const auto shapes = stage_shapes(p, ctx);
    if (!even_blocks(shapes))
      refuse("/stages", "an uneven layer split (DeepSpeed's PipelineModule splits layers itself: partition_method \"type:transformer\" "
                        "gives every stage the same number of transformer layers)",
             "re-plan with --partition even, or export with --to megatron, which can express any split");
  }
  const Precision prec = p.precision_or(ctx.precision);
  json::Json j = json::Json::object();
  j["train_batch_size"] = p.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch;
  j["gradient_accumulation_steps"] = p.num_micro_batches;
  if (prec == Precision::bf16) j["bf16"] = {{"enabled", true}};
  else if (prec == Precision::fp16) j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  json::Json zero = {{"stage", p.zero_stage}};
  zero["overlap_comm"] = p.overlap_grad_reduce;
  zero["contiguous_gradients"] = true;
  zero["reduce_bucket_size"] = static_cast<int64_t>(p.bucket_size_bytes);
  if (p.zero_stage == 1 || p.zero_stage == 2) zero["allgather_bucket_size"] = static_cast<int64_t>(p.bucket_size_bytes);
  j["zero_optimization"] = zero;
  if (p.recompute == plan::Recompute::full)
    j["activation_checkpointing"] = {{"partition_activations", false}, {"contiguous_memory_optimization", false}};
  if (p.pp > 1)
    j["pipeline"] = {{"stages", p.pp},
                     {"partition", "type:transformer"},
                     {"activation_checkpoint_interval", p.recompute == plan::Recompute::full ? 1 : 0}};
  return j.dump(2) + "\n";
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

std::string megatron(const plan::Plan& p, const plan::PlanContext& ctx, const Refusal& refuse) {
  check_common(p, refuse);
  const auto& m = ctx.model_spec;
  if (!m.is_transformer() || m.family == models::Family::vit)
    refuse("/model", fmt::format("the {} model {} (Megatron-LM trains transformer language models)", models::family_name(m.family), m.name),
           "export with --to torchrun or --to deepspeed");
  if (p.zero_stage >= 2)
    refuse("/parallelism/zero_stage", fmt::format("ZeRO-{} (Megatron-LM's distributed optimizer shards the optimizer state, ZeRO-1)", p.zero_stage),
           "re-plan with --zero 0,1, or export with --to deepspeed");
  std::vector<std::string> args;
  auto add = [&](std::string a) { args.push_back(std::move(a)); };
  // Model shape.
  add(fmt::format("--num-layers {}", m.layers));
  add(fmt::format("--hidden-size {}", m.hidden));
  add(fmt::format("--ffn-hidden-size {}", m.ffn_hidden));
  add(fmt::format("--num-attention-heads {}", m.heads));
  if (m.kv_heads != m.heads) {
    add("--group-query-attention");
    add(fmt::format("--num-query-groups {}", m.kv_heads));
  }
  add(fmt::format("--seq-length {}", ctx.seq_len));
  add(fmt::format("--max-position-embeddings {}", ctx.seq_len));
  if (m.position == models::PositionEmbedding::rotary) add("--position-embedding-type rope");
  if (m.norm == models::Norm::rmsnorm) add("--normalization RMSNorm");
  if (m.activation == models::Activation::swiglu) add("--swiglu");
  if (!m.tied_embeddings) add("--untie-embeddings-and-output-weights");
  if (!m.bias) add("--disable-bias-linear");
  add(fmt::format("--attention-backend {}", plan::attention_impl_name(p.attention)));
  // Parallelism.
  add(fmt::format("--tensor-model-parallel-size {}", p.tp));
  add(fmt::format("--pipeline-model-parallel-size {}", p.pp));
  if (p.cp > 1) {
    // The plan models Llama 3's all-gather context parallelism (Megatron-core's default is the
    // p2p ring, which overlaps the K, V exchange with the attention).
    add(fmt::format("--context-parallel-size {}", p.cp));
    add("--cp-comm-type allgather");
  }
  if (p.sequence_parallel) add("--sequence-parallel");
  if (p.pp > 1) {
    const auto shapes = stage_shapes(p, ctx);
    const bool even = even_blocks(shapes);
    if (p.vp > 1) {
      if (even) add(fmt::format("--num-layers-per-virtual-pipeline-stage {}", shapes.front().blocks));
      else add(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout_string(shapes)));
    } else if (!even) {
      // Megatron-LM's uneven split: the first and last stages set, the others equal.
      bool middle_even = true;
      for (size_t s = 2; s + 1 < shapes.size(); ++s) middle_even = middle_even && shapes[s].blocks == shapes[1].blocks;
      if (middle_even && shapes.front().blocks > 0 && shapes.back().blocks > 0) {
        add(fmt::format("--decoder-first-pipeline-num-layers {}", shapes.front().blocks));
        add(fmt::format("--decoder-last-pipeline-num-layers {}", shapes.back().blocks));
      } else {
        add(fmt::format("--pipeline-model-parallel-layout \"{}\"", layout_string(shapes)));
      }
    }
  }
  // Batch.
  add(fmt::format("--micro-batch-size {}", p.micro_batch));
  add(fmt::format("--global-batch-size {}", p.global_batch));
  // Memory.
  if (p.recompute == plan::Recompute::selective) add("--recompute-granularity selective");
  if (p.recompute == plan::Recompute::full) {
    add("--recompute-granularity full");
    add("--recompute-method uniform");
    add("--recompute-num-layers 1");
  }
  if (p.zero_stage == 1) add("--use-distributed-optimizer");
  if (p.dp_cp() > 1 && p.overlap_grad_reduce) add("--overlap-grad-reduce");
  if (p.dp_cp() > 1) add(fmt::format("--ddp-bucket-size {}", static_cast<int64_t>(p.bucket_size_bytes)));
  const Precision prec = p.precision_or(ctx.precision);
  if (prec == Precision::bf16) add("--bf16");
  else if (prec == Precision::fp16) add("--fp16");

  std::string out = "# Megatron-LM arguments: " + summary_line(p, ctx) + "\n";
  if (p.dp > 1)
    out += fmt::format("# data parallelism: {} replicas (world size / (tp x pp{}), set by the launcher)\n", p.dp, p.cp > 1 ? " x cp" : "");
  if (const std::string nccl = nccl_note(p); !nccl.empty())
    out += fmt::format("# the plan's data-parallel all-reduce assumed {}: export it in the launch environment\n", nccl);
  if (p.dp_cp() > 1 && p.zero_stage == 0 && p.dp_algorithm == plan::DpAlgorithm::hierarchical)
    out += "# the plan's data-parallel all-reduce assumed a hierarchical algorithm: NCCL's default across nodes\n";
  out += "MEGATRON_ARGS=(\n";
  for (const auto& a : args) out += "  " + a + "\n";
  out += ")\n";
  return out;
}

// ---- SageMaker ----------------------------------------------------------------------------

std::string py_bool(bool b) { return b ? "True" : "False"; }

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

std::string sagemaker(const plan::Plan& p, const plan::PlanContext& ctx, const ExportOptions& o, const Refusal& refuse) {
  check_common(p, refuse);
  const hw::InstanceType& inst = *ctx.instance;
  if (!inst.aws || !inst.prices.sagemaker_on_demand)
    refuse("/cluster/instance_type", fmt::format("{} is not a SageMaker training instance type (the catalog has no SageMaker price for it)", inst.name),
           "re-plan with --platform sagemaker, which only considers types SageMaker offers");
  if (p.sequence_parallel) refuse("/parallelism/sequence_parallel", "sequence parallelism needs Megatron-LM", "export with --to megatron and launch it with torch_distributed");
  if (p.cp > 1)
    refuse("/parallelism/cp",
           fmt::format("context parallelism (cp = {}) in this SageMaker model parallel (v1) configuration (context_parallel_degree "
                       "belongs to SMP v2, which has no pipeline parallelism and shards with FSDP instead)",
                       p.cp),
           "export with --to megatron and launch it with torch_distributed, or re-plan with --cp 1");
  if (p.vp > 1)
    refuse("/parallelism/vp", "virtual pipeline stages (SageMaker's model parallel library has no interleaved 1F1B)",
           "re-plan with --schedules 1f1b");
  if (p.zero_stage == 3 && p.pp > 1)
    refuse("/parallelism/zero_stage", "sharded data parallelism with pipeline parallelism", "re-plan with --zero 0,1");
  const bool model_parallel = p.tp > 1 || p.pp > 1 || p.zero_stage == 3;
  const std::string ml_type = "ml." + inst.name;
  static const std::vector<std::string> kSmddpTypes = {"ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge"};
  if (o.smddp && model_parallel)
    refuse("/parallelism", "the smdistributed data parallel library with model parallelism or sharding", "leave out --smddp");
  if (o.smddp && std::find(kSmddpTypes.begin(), kSmddpTypes.end(), ml_type) == kSmddpTypes.end())
    refuse("/cluster/instance_type", fmt::format("the smdistributed data parallel library on {} (it supports {})", ml_type, join(kSmddpTypes, ", ")),
           "leave out --smddp to use torch_distributed");
  const Precision prec = p.precision_or(ctx.precision);

  std::string dist;
  std::vector<std::string> notes;
  if (!model_parallel) {
    dist = o.smddp ? "{\"smdistributed\": {\"dataparallel\": {\"enabled\": True}}}" : "{\"torch_distributed\": {\"enabled\": True}}";
    if (p.zero_stage > 0)
      notes.push_back(fmt::format("ZeRO-{} comes from the training script (DeepSpeed: trainplan export --to deepspeed)", p.zero_stage));
    if (p.recompute != plan::Recompute::none) notes.push_back("recomputation is enabled in the training script");
  } else {
    std::vector<std::string> params;
    params.push_back(fmt::format("\"pipeline_parallel_degree\": {},  # alias: partitions", p.pp));
    params.push_back(fmt::format("\"microbatches\": {},", p.pp > 1 ? p.num_micro_batches : 1));
    if (p.pp > 1) params.push_back(fmt::format("\"pipeline\": \"{}\",", p.schedule == plan::Schedule::gpipe ? "simple" : "interleaved"));
    params.push_back(fmt::format("\"tensor_parallel_degree\": {},", p.tp));
    params.push_back("\"ddp\": True,");
    params.push_back("\"placement_strategy\": \"PDT\",  # rank = (pp, dp, tp), tp innermost");
    if (p.zero_stage == 1) params.push_back("\"shard_optimizer_state\": True,");
    if (p.zero_stage == 3) params.push_back(fmt::format("\"sharded_data_parallel_degree\": {},", p.dp));
    if (p.zero_stage == 2)
      refuse("/parallelism/zero_stage", "ZeRO-2 with SageMaker model parallelism (it shards optimizer state, ZeRO-1, or everything, ZeRO-3)",
             "re-plan with --zero 0,1,3");
    if (p.pp > 1) params.push_back("\"auto_partition\": True,  # the library balances layers itself");
    if (prec == Precision::bf16) params.push_back("\"bf16\": True,");
    if (prec == Precision::fp16) params.push_back("\"fp16\": True,");
    dist = "{\n        \"smdistributed\": {\"modelparallel\": {\"enabled\": True, \"parameters\": {\n";
    for (const auto& x : params) dist += "            " + x + "\n";
    dist += "        }}},\n";
    dist += fmt::format("        \"mpi\": {{\"enabled\": True, \"processes_per_host\": {}}},\n    }}", inst.gpu_count);
    if (p.recompute != plan::Recompute::none) notes.push_back("activation checkpointing is set in the script (smp.set_activation_checkpointing)");
  }
  // Time limits.
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
    refuse("/predicted", fmt::format("a job of {} (SageMaker stops training jobs after at most 28 days)", units::format_duration(run_s)),
           "split the run into jobs that resume from checkpoints and pass --max-run 28d, or use more instances");
  const bool spot = p.purchase == plan::Purchase::spot;
  double wait_s = o.max_wait_s > 0 ? o.max_wait_s : std::min(kSageMakerMaxRunS, 2.0 * run_s);
  if (spot && wait_s < run_s) wait_s = run_s;

  std::string out = "# SageMaker PyTorch estimator: " + summary_line(p, ctx) + "\n";
  for (const auto& n : notes) out += "# " + n + "\n";
  out += "from sagemaker.pytorch import PyTorch\n\n";
  out += "estimator = PyTorch(\n";
  // Every string from the user goes through python_string (a valid literal whatever it holds).
  auto literal = [](const std::string& value, const char* flag) {
    try {
      return python_string(value);
    } catch (Error& e) {
      e.at(flag);
      throw;
    }
  };
  out += fmt::format("    entry_point={},\n", literal(o.entry_point, "--entry-point"));
  out += fmt::format("    role={},\n", literal(o.role, "--role"));
  out += fmt::format("    framework_version={},\n", literal(o.framework_version, "--framework-version"));
  out += fmt::format("    py_version={},\n", literal(o.py_version, "--py-version"));
  out += fmt::format("    instance_type={},\n", literal(ml_type, "/cluster/instance_type"));
  out += fmt::format("    instance_count={},\n", p.instance_count);
  out += fmt::format("    distribution={},\n", dist);
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
  const hw::InstanceType& inst = *ctx.instance;
  const int gpn = inst.gpu_count;
  std::vector<std::string> env;
  if (inst.network.efa) {
    env.push_back("FI_PROVIDER=efa");
    if (inst.network.gpudirect_rdma) env.push_back("FI_EFA_USE_DEVICE_RDMA=1");
  }
  if (const std::string nccl = nccl_note(p); !nccl.empty()) env.push_back(nccl);
  const std::string env_text = env.empty() ? "" : join(env, " ") + " ";
  std::string out = "# " + summary_line(p, ctx) + "\n";
  if (p.cp > 1) {
    out += fmt::format("# ranks: {} = dp {} x cp {} x tp {} x pp {}, rank = ((pp_rank x dp + dp_rank) x cp + cp_rank) x tp + tp_rank "
                       "(Megatron-LM order: tp groups on consecutive GPUs of a node, cp groups next to them)\n",
                       p.world_size(), p.dp, p.cp, p.tp, p.pp);
    out += "# context parallelism is the training script's: each cp rank holds sequence chunks i and 2cp-1-i and all-gathers K, V "
           "around every attention (Megatron-LM --context-parallel-size with --cp-comm-type allgather; PyTorch's "
           "torch.distributed.tensor.experimental.context_parallel)\n";
  } else {
    out += fmt::format("# ranks: {} = dp {} x tp {} x pp {}, tp innermost (Megatron-LM order: tp groups on consecutive GPUs of a node)\n",
                       p.world_size(), p.dp, p.tp, p.pp);
  }
  if (p.dp_cp() > 1 && p.zero_stage == 0 && p.dp_algorithm == plan::DpAlgorithm::hierarchical)
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
