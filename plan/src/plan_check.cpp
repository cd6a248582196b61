// Resolving a plan against the catalogs, and its cross-field rules.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "trainplan/core/strings.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::plan {
namespace {

// Re-locates an error from a catalog lookup at the plan field that named the thing.
template <typename F>
auto located(const std::string& file, const std::string& pointer, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (Error& e) {
    if (e.file().empty()) e.at(file, pointer);
    throw;
  }
}

bool is_transformer(models::Family f) {
  return f == models::Family::gpt || f == models::Family::llama || f == models::Family::bert ||
         f == models::Family::vit;
}

// Expert parallelism and routing: ep splits the experts of a MoE model over ranks of the
// data-parallel group (dp * cp), so it divides both.
std::optional<Error> moe_problem(const Plan& p, const models::ModelSpec& m, const std::string& file) {
  auto err = [&](const std::string& pointer, const std::string& what, const std::string& hint) {
    Error e(what);
    e.at(file, pointer).hint(hint);
    return std::optional<Error>(e);
  };
  if (!m.is_moe()) {
    if (p.ep > 1)
      return err("/parallelism/ep", fmt::format("ep = {} but {} has no experts", p.ep, m.name),
                 "expert parallelism splits the routed experts of a mixture-of-experts model: use ep = 1");
    if (p.moe_capacity_factor != 0 || p.moe_load_imbalance != 1.0)
      return err("/moe", fmt::format("routing settings given but {} has no experts", m.name),
                 "leave \"moe\" out for a dense model");
    return std::nullopt;
  }
  if (p.dp_cp() % p.ep != 0)
    return err("/parallelism/ep",
               fmt::format("ep = {} does not divide the {} data-parallel ranks (dp*cp = {}*{})", p.ep, p.dp_cp(), p.dp, p.cp),
               "the experts are split over ranks of the data-parallel group: choose an ep that divides dp*cp");
  if (m.num_experts % p.ep != 0)
    return err("/parallelism/ep", fmt::format("ep = {} does not divide the {} experts of {}", p.ep, m.num_experts, m.name),
               "every rank holds num_experts / ep experts: choose an ep that divides the number of experts");
  if (p.ep > 1 && p.zero_stage >= 3)
    return err("/parallelism/zero_stage", fmt::format("ZeRO-3 with expert parallelism (ep = {}) is not modelled", p.ep),
               "use zero_stage 0, 1 or 2 with ep > 1 (Megatron-Core's distributed optimizer shards like ZeRO-1)");
  if (p.ep > 1 && p.dp_algorithm != DpAlgorithm::ring && p.dp_algorithm != DpAlgorithm::tree &&
      p.dp_algorithm != DpAlgorithm::hierarchical)
    return err("/data_parallel/algorithm",
               fmt::format("{} does not reduce expert gradients over their own group", dp_algorithm_name(p.dp_algorithm)),
               "use ring, tree or hierarchical with ep > 1 (NCCL collectives, as Megatron-Core and DeepSpeed-MoE)");
  const int64_t expert_width = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : m.ffn_hidden;
  if (p.tp > 1 && expert_width % p.tp != 0)
    return err("/parallelism/tp", fmt::format("tp = {} does not divide the expert MLP width {}", p.tp, expert_width),
               "choose a tp that divides the experts' width");
  return std::nullopt;
}

}  // namespace

std::vector<StageAssignment> even_stages(int num_units, int stages) {
  TP_ASSERT(stages >= 1 && num_units >= 1);
  std::vector<StageAssignment> out(static_cast<size_t>(stages));
  if (stages == 1) {
    out[0] = {0, num_units - 1};
    return out;
  }
  // Blocks are units 1..num_units-2; the input unit joins stage 0, the output unit the last.
  const int blocks = std::max(0, num_units - 2);
  int next = 1;
  for (int s = 0; s < stages; ++s) {
    int count = blocks / stages + (s < blocks % stages ? 1 : 0);
    out[static_cast<size_t>(s)].first_unit = s == 0 ? 0 : next;
    next += count;
    out[static_cast<size_t>(s)].last_unit = s == stages - 1 ? num_units - 1 : next - 1;
  }
  return out;
}

std::vector<StageAssignment> even_stages_counting_ends(int num_units, int stages) {
  TP_ASSERT(stages >= 1 && num_units >= stages);
  std::vector<StageAssignment> out(static_cast<size_t>(stages));
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    const int count = num_units / stages + (s < num_units % stages ? 1 : 0);
    out[static_cast<size_t>(s)] = {next, next + count - 1};
    next += count;
  }
  return out;
}

PlanContext resolve(Plan& plan, const hw::Catalog& catalog, const std::string& file) {
  return resolve(plan, catalog, located(file, "/model", [&] { return models::resolve_model(plan.model); }), file);
}

PlanContext resolve(Plan& plan, const hw::Catalog& catalog, models::ModelSpec spec, const std::string& file) {
  if (plan.seq_len > 0) located(file, "/batch/seq_len", [&] { models::set_seq_len(spec, plan.seq_len, "batch.seq_len"); });
  models::ModelGraph graph = located(file, "/model", [&] { return models::build_graph(spec); });
  return resolve(plan, catalog, std::move(spec), graph, file);
}

PlanContext resolve(Plan& plan, const hw::Catalog& catalog, models::ModelSpec spec, const models::ModelGraph& graph,
                    const std::string& file) {
  const hw::InstanceType& inst =
      located(file, "/cluster/instance_type", [&]() -> const hw::InstanceType& { return catalog.instance(plan.instance_type); });
  const hw::GpuSpec& gpu = catalog.gpu(inst.gpu);
  hw::Cluster cluster = located(file, "/cluster", [&] { return hw::Cluster::build(inst, plan.instance_count, catalog, plan.placement); });
  if (!plan.precision) plan.precision = gpu.preferred_half_precision();
  if (plan.num_micro_batches == 0 && plan.micro_batch > 0 && plan.dp > 0 &&
      plan.global_batch % (plan.micro_batch * plan.dp) == 0)
    plan.num_micro_batches = plan.global_batch / (plan.micro_batch * plan.dp);
  const int num_units = static_cast<int>(graph.units().size());
  if (plan.stages.empty() && plan.pp * plan.vp <= std::max(1, num_units - 2))
    plan.stages = even_stages(num_units, plan.pp * plan.vp);
  const int64_t seq = spec.seq_len;
  hw::SoftwareStack software;
  if (plan.software.empty() && catalog.software_stacks().count(hw::kDefaultSoftware)) plan.software = hw::kDefaultSoftware;
  if (!plan.software.empty())
    software = located(file, "/software", [&]() -> const hw::SoftwareStack& { return catalog.software(plan.software); });
  return PlanContext{std::move(spec), graph, &inst, &gpu, std::move(cluster), *plan.precision, seq, std::move(software)};
}

namespace {

// The precision exists on the GPU, and the FP8 recipe too.
std::optional<Error> precision_problem(const Plan& p, const PlanContext& ctx, const std::string& file) {
  auto err = [&](const std::string& pointer, const std::string& what, const std::string& hint) {
    Error e(what);
    e.at(file, pointer).hint(hint);
    return std::optional<Error>(e);
  };
  Precision prec = p.precision_or(ctx.precision);
  if (!ctx.gpu->supports(prec))
    return err("/precision",
               prec == Precision::fp8 ? fmt::format("{} (compute capability {}) has no FP8 tensor cores", ctx.gpu->name,
                                                    ctx.gpu->compute_capability)
                                      : fmt::format("{} does not support {}", ctx.gpu->name, precision_name(prec)),
               prec == Precision::fp8 ? std::string("FP8 training needs Ada, Hopper or Blackwell (compute capability 8.9 or "
                                                    "later, e.g. L4, L40S, H100, H200); use bf16 on this GPU")
               : ctx.gpu->supports(Precision::bf16) ? "use bf16"
                                                    : "use fp16 (mixed precision with loss scaling)");
  // MXFP8's block-scaled GEMMs are a Blackwell tensor-core instruction (TE: "native hardware
  // acceleration on Blackwell GPUs (SM 10.0+)"); the rule reads the catalog's compute capability.
  if (prec == Precision::fp8 && p.fp8.recipe == Fp8Recipe::mxfp8 && std::atof(ctx.gpu->compute_capability.c_str()) < 10.0)
    return err("/fp8/recipe",
               fmt::format("the mxfp8 recipe needs Blackwell (compute capability 10.0+), {} has {}", ctx.gpu->name,
                           ctx.gpu->compute_capability),
               "use \"delayed\", \"current\" or \"blockwise\" on this GPU, or a Blackwell instance");
  return std::nullopt;
}

std::optional<Error> first_problem(const Plan& p, const PlanContext& ctx, const std::string& file) {
  auto err = [&](const std::string& pointer, const std::string& what, const std::string& hint) {
    Error e(what);
    e.at(file, pointer).hint(hint);
    return std::optional<Error>(e);
  };
  const models::ModelSpec& m = ctx.model_spec;
  const int gpus = ctx.cluster.num_gpus();
  if (!p.data_region.empty()) {
    const auto regions = hw::priced_regions(ctx.cluster.placement_facts());
    if (std::find(regions.begin(), regions.end(), p.data_region) == regions.end())
      return err("/data/region", fmt::format("no inter-region transfer price for region \"{}\"", p.data_region),
                 regions.empty() ? std::string("the catalog has no \"placement\" table (hwprofiles/catalog/placement.json)")
                                 : fmt::format("known regions: {}", join(regions, ", ")));
  }
  if (p.world_size() != gpus) {
    const std::string product = p.cp > 1 ? fmt::format("dp*tp*pp*cp = {}*{}*{}*{}", p.dp, p.tp, p.pp, p.cp)
                                         : fmt::format("dp*tp*pp = {}*{}*{}", p.dp, p.tp, p.pp);
    return err("/parallelism", fmt::format("{} = {} but the cluster has {} GPUs ({} x {})", product, p.world_size(), gpus,
                                           p.instance_count, p.instance_type),
               fmt::format("choose degrees whose product is {}, or change cluster.count", gpus));
  }
  if (p.cp > 1) {
    // Context parallelism splits every sample's sequence: only sequence models (their ops work
    // per token), and in 2*cp equal chunks (causal load balancing pairs chunk i with 2cp-1-i).
    if (!is_transformer(m.family))
      return err("/parallelism/cp", fmt::format("context parallelism is not modelled for {} models", models::family_name(m.family)),
                 "use cp = 1 (context parallelism splits the token sequence of transformers)");
    if (ctx.seq_len % (2 * p.cp) != 0)
      return err("/parallelism/cp",
                 fmt::format("cp = {} needs a sequence length divisible by 2*cp = {}, got {}", p.cp, 2 * p.cp, ctx.seq_len),
                 "the sequence is split into 2*cp equal chunks (rank i holds chunks i and 2cp-1-i, balancing causal "
                 "attention): choose a cp whose 2*cp divides the sequence length, or change batch.seq_len");
  }
  if (auto e = moe_problem(p, m, file)) return e;
  if (p.tp > 1) {
    if (!is_transformer(m.family))
      return err("/parallelism/tp", fmt::format("tensor parallelism is not modelled for {} models", models::family_name(m.family)),
                 "use tp = 1 (data and pipeline parallelism work for every model)");
    if (m.heads % p.tp != 0)
      return err("/parallelism/tp", fmt::format("tp = {} does not divide the {} attention heads of {}", p.tp, m.heads, m.name),
                 "choose a tp that divides the number of heads");
    if (m.kv_heads % p.tp != 0)
      return err("/parallelism/tp", fmt::format("tp = {} does not divide the {} key/value heads of {}", p.tp, m.kv_heads, m.name),
                 "with grouped-query attention tp must divide kv_heads too");
    if (m.hidden % p.tp != 0)
      return err("/parallelism/tp", fmt::format("tp = {} does not divide hidden = {}", p.tp, m.hidden), "choose a tp that divides hidden");
    if (m.ffn_hidden % p.tp != 0)
      return err("/parallelism/tp", fmt::format("tp = {} does not divide ffn_hidden = {}", p.tp, m.ffn_hidden),
                 "choose a tp that divides the MLP width");
  }
  // The Triton port of FlashAttention (flash_attn_triton.py, llm-foundry's copy) asserts d <= 128.
  // The head dimension the kernel runs: the attention ops' (MLA's query/key heads included).
  if (p.attention == AttentionImpl::flash1) {
    int64_t head_dim = 0;
    for (const models::Op& op : ctx.graph.ops())
      if (op.kind == models::OpKind::attention) head_dim = std::max(head_dim, op.head_dim);
    if (head_dim > 128)
      return err("/attention",
                 fmt::format("the FlashAttention-1-class (Triton) kernel takes head dimensions up to 128; {} has {}", m.name,
                             head_dim),
                 "use \"attention\": \"flash\" (FlashAttention-2 / cuDNN, up to 256) or \"unfused\"");
  }
  if (p.sequence_parallel && p.tp == 1)
    return err("/parallelism/sequence_parallel", "sequence parallelism needs tp > 1", "set sequence_parallel to false or raise tp");
  if (p.sync_batch_norm && std::none_of(ctx.graph.ops().begin(), ctx.graph.ops().end(),
                                        [](const models::Op& op) { return op.kind == models::OpKind::batchnorm; }))
    return err("/parallelism/sync_batch_norm", fmt::format("{} has no batch-norm layers to synchronize", m.name),
               "set sync_batch_norm to false (it applies to models with batch norm, such as resnet-50)");
  const int num_units = static_cast<int>(ctx.graph.units().size());
  const int blocks = ctx.graph.num_blocks();
  if (p.pp > std::max(1, blocks))
    return err("/parallelism/pp", fmt::format("pp = {} exceeds the {} layers of {}", p.pp, blocks, m.name),
               "each pipeline stage needs at least one layer");
  if (p.vp > 1 && p.schedule != Schedule::interleaved_1f1b)
    return err("/parallelism/vp", fmt::format("vp = {} needs the interleaved-1f1b schedule", p.vp),
               "set \"schedule\": \"interleaved-1f1b\" or vp = 1");
  if (p.schedule == Schedule::interleaved_1f1b) {
    if (p.pp == 1) return err("/schedule", "interleaved-1f1b needs pp > 1", "use \"1f1b\" without pipeline parallelism");
    if (p.vp < 2) return err("/parallelism/vp", "interleaved-1f1b needs vp >= 2 virtual stages per rank", "set vp to 2 or more");
    // More chunks than blocks only with explicit stages that give the input and output units
    // chunks of their own (Megatron-core's account_for_embedding / account_for_loss split); the
    // stage rules below then check that every chunk has a unit.
    if (p.pp * p.vp > blocks && p.stages.size() != static_cast<size_t>(p.pp * p.vp))
      return err("/parallelism/vp", fmt::format("pp*vp = {} model chunks but only {} layers", p.pp * p.vp, blocks),
                 "lower vp so that every chunk has a layer, or give \"stages\" with the embedding and output units as chunks of "
                 "their own");
  }
  const int64_t per_step = p.micro_batch * p.dp;
  if (p.global_batch % per_step != 0) {
    // Below one micro-batch per rank the lower multiple is 0: suggest the smallest batch, or a
    // micro-batch that fits the ranks' share.
    const int64_t lower = (p.global_batch / per_step) * per_step, upper = lower + per_step;
    const std::string hint =
        lower > 0 ? fmt::format("use a global batch of {} or {}", lower, upper)
        : p.global_batch % p.dp == 0
            ? fmt::format("use a global batch of {}, or a micro_batch that divides global_batch / dp = {}", upper, p.global_batch / p.dp)
            : fmt::format("use a global batch of {}", upper);
    return err("/batch/global_batch",
               fmt::format("global_batch {} is not a multiple of micro_batch*dp = {}*{} = {}", p.global_batch, p.micro_batch, p.dp, per_step),
               hint);
  }
  if (p.num_micro_batches * per_step != p.global_batch)
    return err("/batch/num_micro_batches",
               fmt::format("micro_batch*num_micro_batches*dp = {}*{}*{} = {} but global_batch = {}", p.micro_batch,
                           p.num_micro_batches, p.dp, p.num_micro_batches * per_step, p.global_batch),
               fmt::format("set num_micro_batches to {} or leave it out", p.global_batch / per_step));
  if (p.schedule == Schedule::interleaved_1f1b && p.num_micro_batches % p.pp != 0)
    return err("/batch/num_micro_batches",
               fmt::format("interleaved-1f1b needs num_micro_batches ({}) to be a multiple of pp ({})", p.num_micro_batches, p.pp),
               "change the global batch or micro-batch size, or use 1f1b");
  if (p.zero_stage >= 2 && p.pp > 1)
    return err("/parallelism/zero_stage",
               fmt::format("ZeRO-{} with pipeline parallelism is not supported (gradients accumulate across micro-batches)", p.zero_stage),
               "use zero_stage 0 or 1 with pp > 1 (as DeepSpeed and Megatron-LM do)");
  if (p.dp_algorithm == DpAlgorithm::parameter_server && p.zero_stage != 0)
    return err("/data_parallel/algorithm", "the parameter-server algorithm does not combine with ZeRO", "use zero_stage 0 or a collective algorithm");
  if ((p.dp_algorithm == DpAlgorithm::smddp || p.dp_algorithm == DpAlgorithm::horovod) && p.zero_stage != 0)
    return err("/data_parallel/algorithm",
               fmt::format("{} all-reduces whole gradients and does not combine with ZeRO", dp_algorithm_name(p.dp_algorithm)),
               "use zero_stage 0, or ring / tree / hierarchical with ZeRO");
  if (auto e = precision_problem(p, ctx, file)) return e;
  // Stage assignment: pp*vp contiguous, non-empty ranges covering every unit once, in order.
  const size_t want = static_cast<size_t>(p.pp * p.vp);
  if (p.stages.size() != want)
    return err("/stages", fmt::format("{} stage ranges given, but pp*vp = {}", p.stages.size(), want),
               "give one [first_unit, last_unit] per (virtual) stage, or leave \"stages\" out for an even split");
  int next = 0;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const auto& s = p.stages[i];
    if (s.first_unit != next)
      return err(fmt::format("/stages/{}", i),
                 s.first_unit > next ? fmt::format("unit {} is not assigned to any stage", next)
                                     : fmt::format("unit {} is assigned twice", s.first_unit),
                 fmt::format("stage {} should start at unit {}", i, next));
    if (s.last_unit < s.first_unit)
      return err(fmt::format("/stages/{}", i), "empty stage", "every stage needs at least one unit");
    next = s.last_unit + 1;
  }
  if (next != num_units)
    return err("/stages", fmt::format("the stages cover units 0..{} but {} has {} units (0..{})", next - 1, m.name, num_units, num_units - 1),
               "the last stage must end at the model's output unit");
  return std::nullopt;
}

}  // namespace

void validate(const Plan& plan, const PlanContext& ctx, const std::string& plan_file) {
  if (auto e = first_problem(plan, ctx, plan_file)) throw *e;
}

Precision grad_reduce_precision(const Plan& plan, const PlanContext& ctx) {
  if (plan.grad_reduce) return *plan.grad_reduce;
  return ctx.software.grad_reduce_precision(plan.precision_or(ctx.precision));
}

double gradient_bytes_per_param(const Plan& plan, const PlanContext& ctx) {
  const Precision prec = plan.precision_or(ctx.precision);
  if (!is_mixed(prec)) return bytes_per_element(prec);
  return ctx.software.fp32_main_grads && grad_reduce_precision(plan, ctx) == Precision::fp32 ? 4.0 : 2.0;
}

std::optional<std::string> check_precision(const Plan& plan, const PlanContext& ctx) {
  if (auto e = precision_problem(plan, ctx, "")) return std::string(e->what());
  return std::nullopt;
}

std::optional<std::string> check(const Plan& plan, const PlanContext& ctx) {
  if (auto e = first_problem(plan, ctx, "")) return std::string(e->what());
  return std::nullopt;
}

}  // namespace trainplan::plan
