// Memory per GPU of a plan. See memory.hpp for the closed forms this implements.
#include "trainplan/plan/memory.hpp"

#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/step_program.hpp"

#include <algorithm>
#include <cmath>

namespace trainplan::plan {
namespace {


// Units owned by pipeline rank `stage` across its virtual stages.
std::vector<int> units_of_rank(const Plan& plan, int stage) {
  std::vector<int> units;
  for (int v = 0; v < plan.vp; ++v) {
    const auto& a = plan.stages[static_cast<size_t>(v * plan.pp + stage)];
    for (int u = a.first_unit; u <= a.last_unit; ++u) units.push_back(u);
  }
  return units;
}

// FP8 training's extra weight memory on one rank (plan/README.md, "FP8"). Transformer Engine
// keeps, from the first micro-batch's forward to the last backward, an FP8 copy of each FP8
// linear's weight for fprop and a column-wise (transposed) one for dgrad: 2 bytes per weight
// (+ the block scales of each copy). With fp8_params the weight itself is the FP8 tensor:
// the 16-bit weight (2 bytes, counted in weights_bytes) is replaced by the FP8 one and its
// transpose, so nothing is added. Scaling state per FP8 tensor (input, weight, output gradient
// of each linear): the fp32 scale and inverse scale, and under delayed scaling the amax
// history (amax_history x 4 bytes). ZeRO-3 shards the copies like the weights (TE scatters
// them over the FSDP group).
double fp8_weight_bytes(const Plan& plan, const models::ModelGraph& graph, const std::vector<int>& units, double n) {
  double fp8_params = 0, linears = 0;
  for (int u : units)
    for (int id : graph.units()[static_cast<size_t>(u)].ops) {
      const models::Op& op = graph.ops()[static_cast<size_t>(id)];
      if (!runs_in_fp8(op)) continue;
      fp8_params += op_params_on_rank(op, plan.tp, plan.ep);
      linears += 1;
    }
  const double scales = fp8_scale_bytes_per_element(plan.fp8.recipe);
  const double copies = plan.fp8.fp8_params ? 2.0 * fp8_params * scales : 2.0 * fp8_params * (1.0 + scales);
  const double history = plan.fp8.recipe == Fp8Recipe::delayed ? 4.0 * plan.fp8.amax_history : 0.0;
  const double state = linears * 3.0 * (8.0 + history);
  return copies / (plan.zero_stage >= 3 ? n : 1.0) + state;
}

}  // namespace

double unit_activation_bytes(const models::ModelGraph& graph, int unit, int64_t micro_batch, int tp,
                             bool sequence_parallel, Recompute recompute, Precision precision, AttentionImpl attention, int cp,
                             const Fp8Context* fp8) {
  const auto& u = graph.units()[static_cast<size_t>(unit)];
  const double elem = bytes_per_element(precision);
  const double b = static_cast<double>(micro_batch);
  if (unit_recompute(recompute, u) == Recompute::full) {
    // Only the unit's input is kept (sharded along the sequence with SP); unit 0's input is
    // the token ids, negligible.
    if (unit == 0) return 0.0;
    const double in = graph.units()[static_cast<size_t>(unit - 1)].output_elems * elem * b / cp;
    return sequence_parallel ? in / tp : in;
  }
  double total = 0.0;
  for (int id : u.ops) {
    const OpCost c = op_cost(graph.ops()[static_cast<size_t>(id)], micro_batch, tp, sequence_parallel, precision, attention, cp, 1, 1.0, fp8);
    if (recompute == Recompute::selective && c.recomputed_by_selective) continue;
    total += c.saved_bytes;
  }
  return total;
}

double micro_batches_in_flight(Schedule schedule, int pp, int vp, int64_t num_micro_batches, int stage) {
  const double m = static_cast<double>(num_micro_batches);
  switch (schedule) {
    case Schedule::gpipe:
      return m;
    case Schedule::one_f_one_b:
      return std::min(m, static_cast<double>(pp - stage));
    case Schedule::interleaved_1f1b: {
      // Megatron-LM's interleaved schedule runs (pp - stage - 1) * 2 + (vp - 1) * pp warm-up
      // forward chunks before its first backward, so at the peak it holds one more chunk than
      // that; a chunk is 1/vp of the rank's layers. Stage 0: pp + (pp - 1)/vp micro-batches,
      // Korthikanti et al.'s pp * (1 + (pp - 1)/(pp * vp)).
      const double chunks = std::min(m * vp, static_cast<double>((pp - stage - 1) * 2 + (vp - 1) * pp + 1));
      return chunks / vp;
    }
  }
  return m;
}

MemoryBreakdown stage_memory(const Plan& plan, const PlanContext& ctx, int stage, const MemoryOptions& options) {
  TP_ASSERT(stage >= 0 && stage < plan.pp);
  TP_ASSERT(plan.stages.size() == static_cast<size_t>(plan.pp * plan.vp));
  const auto& graph = ctx.graph;
  const Precision prec = plan.precision_or(ctx.precision);
  const bool mixed = is_mixed(prec);
  const int tp = plan.tp;
  // Parameters are replicated over dp * cp ranks: gradient reduction and ZeRO span them all.
  const int dp = plan.dp_cp();
  MemoryBreakdown mb;
  mb.stage = stage;
  mb.capacity_bytes = ctx.gpu->memory_bytes * options.usable_fraction;

  const std::vector<int> units = units_of_rank(plan, stage);
  double params = 0.0;
  double expert_params = 0.0;  // routed experts' parameters on the rank (num_experts / ep of them)
  double max_unit_params = 0.0;
  for (int u : units) {
    double unit_params = 0.0;
    for (int id : graph.units()[static_cast<size_t>(u)].ops) {
      const models::Op& op = graph.ops()[static_cast<size_t>(id)];
      const double p = op_params_on_rank(op, tp, plan.ep);
      unit_params += p;
      if (op.expert) expert_params += p;
    }
    params += unit_params;
    max_unit_params = std::max(max_unit_params, unit_params);
  }
  // With tied embeddings and a pipeline, the last stage keeps its own copy of the word
  // embedding for the LM head (Megatron-LM), kept in sync by an all-reduce of its gradient.
  const int last_unit = static_cast<int>(graph.units().size()) - 1;
  const bool owns_output = std::find(units.begin(), units.end(), last_unit) != units.end();
  const bool owns_input = std::find(units.begin(), units.end(), 0) != units.end();
  if (ctx.model_spec.tied_embeddings && owns_output && !owns_input)
    params += static_cast<double>(ctx.model_spec.vocab) * static_cast<double>(ctx.model_spec.hidden) / tp;
  mb.params_on_rank = params;

  // Model states: bytes per parameter (Rajbhandari et al. 2020).
  const double w = mixed ? 2.0 : 4.0;   // weights in the training precision
  const double g = gradient_bytes_per_param(plan, ctx);  // gradients (fp32 main grads: 4)
  const double o = mixed ? 12.0 : 8.0;  // fp32 master copy (mixed only) + Adam momentum + variance
  // ZeRO shards the non-expert states over the dp * cp ranks holding them and the expert states
  // over the expert_dp = dp * cp / ep ranks holding the same experts.
  const double n = static_cast<double>(dp);
  const double ne = static_cast<double>(plan.expert_dp());
  const double dense = params - expert_params;
  auto states = [&](double bytes_per_param, int from_stage) {
    return plan.zero_stage >= from_stage ? bytes_per_param * (dense / n + expert_params / ne) : bytes_per_param * params;
  };
  mb.weights_bytes = states(w, 3);
  mb.gradients_bytes = states(g, 2);
  mb.optimizer_bytes = states(o, 1);
  if (prec == Precision::fp8) mb.weights_bytes += fp8_weight_bytes(plan, graph, units, n);

  // Activations: the closed form (micro-batches in flight x one micro-batch's activations,
  // plus one re-materialized unit under full recomputation) is exact for GPipe and 1F1B
  // without recomputation or context parallelism. The replay of the lowered program's
  // schedule is exact everywhere (recomputation working sets, cp's gathered K, V, interleaved
  // chunks of unequal size), so the model uses it; tests check both against each other and
  // against Korthikanti et al.'s formulas.
  mb.micro_batches_in_flight = micro_batches_in_flight(plan.schedule, plan.pp, plan.vp, plan.num_micro_batches, stage);
  mb.activations_bytes = activation_peak_bytes(plan, ctx, stage);

  // Workspace: the cross-entropy of the stage that owns the loss holds its logits in fp32
  // (b * s/cp * V/t * 4 bytes, as Megatron-LM computes the loss in fp32; a fused loss on the
  // 16-bit logits holds their 16-bit gradient: MemoryOptions::loss_bytes_per_logit), and cuBLAS
  // keeps the workspace the catalog gives for the GPU (32 MiB on Hopper, 4 MiB before).
  mb.workspace_bytes = ctx.gpu->cublas_workspace_bytes;
  if (owns_output && ctx.model_spec.vocab > 0)
    mb.workspace_bytes += static_cast<double>(plan.micro_batch) * static_cast<double>(ctx.seq_len) *
                          static_cast<double>(ctx.model_spec.vocab) / tp / plan.cp * options.loss_bytes_per_logit;

  // Communication buffers.
  double comm = 0.0;
  if (dp > 1 && plan.zero_stage == 0 && plan.dp_algorithm != DpAlgorithm::parameter_server)
    comm += 2.0 * plan.bucket_size_bytes;  // buckets being reduced while the next fills
  if (dp > 1 && plan.zero_stage >= 1 && plan.zero_stage <= 2)
    comm += 2.0 * plan.bucket_size_bytes;  // reduce-scatter / all-gather staging
  if (plan.zero_stage == 3)  // the gathered unit in use + the prefetched one (none on a synchronous stack)
    comm += (ctx.software.zero3_tensor_sync ? 1.0 : 2.0) * max_unit_params * w;
  if (plan.pp > 1) {
    double msg = 0.0;
    for (int u : units) msg = std::max(msg, graph.units()[static_cast<size_t>(u)].output_elems);
    msg *= static_cast<double>(plan.micro_batch) * bytes_per_element(prec) / plan.cp;
    if (plan.sequence_parallel) msg /= tp;
    comm += 4.0 * msg;  // send + recv buffers for activations and their gradients
  }
  mb.comm_buffer_bytes = comm;
  mb.framework_bytes = options.framework_overhead_bytes;
  return mb;
}

std::vector<MemoryBreakdown> memory_per_stage(const Plan& plan, const PlanContext& ctx, const MemoryOptions& options) {
  std::vector<MemoryBreakdown> out;
  for (int s = 0; s < plan.pp; ++s) out.push_back(stage_memory(plan, ctx, s, options));
  return out;
}

MemoryBreakdown peak_memory(const Plan& plan, const PlanContext& ctx, const MemoryOptions& options) {
  auto all = memory_per_stage(plan, ctx, options);
  return *std::max_element(all.begin(), all.end(),
                           [](const MemoryBreakdown& a, const MemoryBreakdown& b) { return a.total_bytes() < b.total_bytes(); });
}

}  // namespace trainplan::plan
