// The model layout shared by all ranks (which ops run where, how tensor parallelism slices each
// parameter, deterministic initialization) and the training data (runtime_internal.hpp).
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "runtime_internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/random.hpp"

namespace trainplan::executor {

using models::OpKind;
using models::TpSplit;

// ---- TrainingData ---------------------------------------------------------------------------

namespace {

// Synthetic token streams follow a fixed random successor most of the time, so that a model
// can learn them (the loss falls visibly within a few steps) while every token stays possible.
constexpr double kSuccessorProbability = 0.75;

uint64_t sample_stream(int64_t step, int64_t sample) {
  return static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(sample);
}

}  // namespace

TrainingData TrainingData::synthetic(const models::ModelSpec& spec, int64_t seq_len, uint64_t seed) {
  TrainingData d;
  d.seed_ = seed;
  d.seq_len_ = seq_len;
  if (spec.family == models::Family::mlp) {
    d.decoder_ = false;
    if (spec.mlp_widths.size() < 2) throw Error("training data: the mlp has no widths").at(spec.file, "/mlp_widths");
    d.features_ = spec.mlp_widths.front();
    d.classes_ = spec.mlp_widths.back();
    Rng rng = Rng(seed).fork(0x7eac4e5);
    d.teacher_.resize(static_cast<size_t>(d.features_ * d.classes_));
    for (double& w : d.teacher_) w = rng.normal(0, 1);
  } else {
    d.vocab_ = spec.vocab;
    if (d.vocab_ < 2) throw Error("training data: a decoder needs a vocabulary of at least 2 tokens").at(spec.file, "/vocab");
  }
  return d;
}

TrainingData TrainingData::from_tokens(const models::ModelSpec& spec, int64_t seq_len, int64_t global_batch,
                                       std::vector<int32_t> tokens) {
  if (!spec.is_decoder())
    throw Error(fmt::format("training data: a token file feeds decoders, not {} ({})", spec.name,
                            models::family_name(spec.family)));
  if (static_cast<int64_t>(tokens.size()) < seq_len + 2)
    throw Error(fmt::format("training data: {} tokens are fewer than one sequence of {} plus its label", tokens.size(),
                            seq_len))
        .hint("use a longer file");
  for (int32_t t : tokens)
    if (t < 0 || t >= spec.vocab)
      throw Error(fmt::format("training data: token {} is outside the vocabulary [0, {}) of {}", t, spec.vocab, spec.name))
          .hint("byte tokens need a vocabulary of at least 256");
  TrainingData d;
  d.vocab_ = spec.vocab;
  d.seq_len_ = seq_len;
  d.global_batch_ = global_batch;
  d.tokens_ = std::move(tokens);
  return d;
}

void TrainingData::token_sample(int64_t step, int64_t sample, std::span<int32_t> inputs,
                                std::span<int32_t> labels) const {
  TP_ASSERT(decoder_ && static_cast<int64_t>(inputs.size()) == seq_len_ && labels.size() == inputs.size());
  const auto n = static_cast<size_t>(seq_len_);
  if (!tokens_.empty()) {
    const int64_t windows = static_cast<int64_t>(tokens_.size()) - seq_len_ - 1;
    const int64_t start = ((step * global_batch_ + sample) * seq_len_) % windows;
    for (size_t i = 0; i < n; ++i) {
      inputs[i] = tokens_[static_cast<size_t>(start) + i];
      labels[i] = tokens_[static_cast<size_t>(start) + i + 1];
    }
    return;
  }
  Rng rng = Rng(seed_).fork(sample_stream(step, sample));
  const auto vocab = static_cast<uint64_t>(vocab_);
  int32_t prev = static_cast<int32_t>(rng.below(vocab));
  for (size_t i = 0; i <= n; ++i) {
    int32_t next = prev;
    if (i > 0)
      next = rng.uniform() < kSuccessorProbability ? static_cast<int32_t>((static_cast<uint64_t>(prev) * 7 + 3) % vocab)
                                                   : static_cast<int32_t>(rng.below(vocab));
    if (i < n) inputs[i] = next;
    if (i > 0) labels[i - 1] = next;
    prev = next;
  }
}

void TrainingData::feature_sample(int64_t step, int64_t sample, std::span<double> features, int32_t& label) const {
  TP_ASSERT(!decoder_ && static_cast<int64_t>(features.size()) == features_);
  Rng rng = Rng(seed_).fork(sample_stream(step, sample));
  for (double& x : features) x = rng.normal(0, 1);
  double best = -1e300;
  for (int64_t c = 0; c < classes_; ++c) {
    double s = 0;
    for (int64_t i = 0; i < features_; ++i) s += teacher_[static_cast<size_t>(c * features_ + i)] * features[static_cast<size_t>(i)];
    if (s > best) {
      best = s;
      label = static_cast<int32_t>(c);
    }
  }
}

// ---- Plans the runtime executes -------------------------------------------------------------

void check_executable(const plan::Plan& plan, const std::string& plan_file) {
  if (plan.cp > 1)
    throw Error(fmt::format("context parallelism (cp = {}) is not executed by the runtime", plan.cp))
        .at(plan_file, "/parallelism/cp")
        .hint("the simulator models it (trainplan simulate); to execute the plan, set parallelism.cp to 1 and fold its GPUs "
              "into dp");
  if (plan.ep > 1 && plan.zero_stage > 0)
    throw Error(fmt::format("expert parallelism (ep = {}) with ZeRO stage {} is not executed by the runtime", plan.ep,
                            plan.zero_stage))
        .at(plan_file, "/parallelism/ep")
        .hint("execute expert parallelism with zero_stage 0, or set ep to 1");
}

void check_accelerator_executable(const plan::PlanContext& ctx, const std::string& plan_file) {
  if (ctx.gpu == nullptr || ctx.gpu->executable()) return;
  throw Error(fmt::format("{} ({} x {}, runtime \"{}\") is planned and simulated, not executed: trainplan has no backend "
                          "for it",
                          ctx.instance ? ctx.instance->name : std::string("the plan's instance"), ctx.instance ? ctx.instance->gpu_count : 0,
                          ctx.gpu->name, ctx.gpu->runtime))
      .at(plan_file, "/cluster/instance_type")
      .hint("use `trainplan simulate` for its predicted step time; to execute, plan for an NVIDIA GPU instance (or run the "
            "model on this machine with a CPU plan); on the instance itself, train with the AWS Neuron SDK");
}

namespace rt {

// ---- TpSlice --------------------------------------------------------------------------------

int64_t TpSlice::local_rows() const {
  int64_t n = 0;
  for (const auto& [b, e] : rows) n += e - b;
  return n;
}

std::vector<int64_t> TpSlice::global_indices() const {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(numel()));
  for (const auto& [b, e] : rows)
    for (int64_t r = b; r < e; ++r)
      for (int64_t c = col_begin; c < col_end; ++c) idx.push_back(r * full_cols + c);
  return idx;
}

// ---- ModelLayout ----------------------------------------------------------------------------

namespace {

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

Error unsupported(const models::Op& op, const std::string& what) {
  return Error(fmt::format("the executor cannot run op \"{}\" ({}): {}", op.name, models::op_kind_name(op.kind), what))
      .hint("the executor runs decoders (gpt, llama) and MLPs");
}

void check_supported(const models::ModelGraph& g) {
  const auto family = g.spec().family;
  if (family != models::Family::gpt && family != models::Family::llama && family != models::Family::mlp)
    throw Error(fmt::format("the executor runs model families gpt, llama and mlp, not {} ({})",
                            models::family_name(family), g.spec().name))
        .at(g.spec().file, "/family");
  for (const models::Op& op : g.ops()) {
    switch (op.kind) {
      case OpKind::embedding:
        if (op.batch_input != models::BatchInput::tokens && op.batch_input != models::BatchInput::positions)
          throw unsupported(op, "only token and position embeddings");
        break;
      case OpKind::linear:
        if (op.inputs.empty() && op.batch_input != models::BatchInput::features)
          throw unsupported(op, "a linear without an input op must read the batch features");
        if (op.expert && (op.num_experts < 1 || op.weight_shape.size() != 3 || op.weight_shape[0] != op.num_experts))
          throw unsupported(op, "a routed-expert linear's weight must be {num_experts, in, out}");
        break;
      case OpKind::activation:
        if (op.activation == models::Activation::geglu) throw unsupported(op, "no GeGLU kernel yet (gelu(gate) * up)");
        break;
      case OpKind::attention:
        if (op.window > 0 && op.window < g.spec().seq_len) throw unsupported(op, "no sliding-window attention kernel yet");
        if (op.qk_norm) throw unsupported(op, "no Q/K norm inside attention yet");
        if (op.v_head_dim > 0) throw unsupported(op, "no multi-head latent attention (MLA) kernel yet");
        if (op.softcap > 0) throw unsupported(op, "no soft-capped attention scores yet");
        if (op.rotary && op.rotary_dims != op.head_dim) throw unsupported(op, "rotary over part of each head is not implemented");
        break;
      case OpKind::layernorm:
      case OpKind::rmsnorm:
      case OpKind::residual:
      case OpKind::dropout:
        break;
      case OpKind::router:
        if (op.top_k < 1 || op.top_k > op.num_experts) throw unsupported(op, "top-k must be in [1, num_experts]");
        break;
      case OpKind::moe_dispatch:
      case OpKind::moe_combine:
        if (op.inputs.size() != 2 || g.op(op.inputs[1]).kind != OpKind::router)
          throw unsupported(op, "its inputs must be [rows, router]");
        break;
      case OpKind::loss:
        if (op.batch_input != models::BatchInput::labels) throw unsupported(op, "the loss must read the batch labels");
        if (op.softcap > 0) throw unsupported(op, "no soft-capped logits yet");
        break;
      default: throw unsupported(op, "no executor kernel for this kind yet");
    }
  }
}

}  // namespace

ModelLayout ModelLayout::build(const plan::Plan& plan, const models::ModelGraph& graph,
                               const plan::StepProgram& program) {
  check_executable(plan);
  check_supported(graph);
  ModelLayout L;
  L.plan = &plan;
  L.graph = &graph;
  L.program = &program;
  L.dp = plan.dp;
  L.tp = plan.tp;
  L.pp = plan.pp;
  L.vp = plan.vp;
  L.zero_stage = plan.zero_stage;
  L.sp = plan.sequence_parallel && plan.tp > 1;
  L.ep = std::max(1, plan.ep);
  L.sharded = plan.zero_stage >= 1 || (plan.dp_algorithm == plan::DpAlgorithm::parameter_server && plan.dp > 1);
  L.params_sharded = plan.zero_stage == 3 && plan.dp > 1;
  L.micro_batch = plan.micro_batch;
  L.num_micro_batches = plan.num_micro_batches;
  L.global_batch = plan.global_batch;
  const models::ModelSpec& spec = graph.spec();
  L.rows_per_sample = spec.family == models::Family::mlp ? 1 : spec.seq_len;
  L.seq_len = L.rows_per_sample;
  L.total_label_rows = static_cast<double>(plan.global_batch) * static_cast<double>(L.rows_per_sample);
  if (L.sp && L.rows_full() % L.tp != 0)
    throw Error(fmt::format("sequence parallelism splits the {} token rows of a micro-batch over tp {}: not divisible",
                            L.rows_full(), L.tp))
        .hint("choose seq_len * micro_batch divisible by tp");

  // Units -> pipeline rank and chunk (virtual stage v of rank r is stages[v * pp + r]).
  const int num_units = static_cast<int>(graph.units().size());
  L.unit_stage.assign(static_cast<size_t>(num_units), -1);
  if (static_cast<int>(plan.stages.size()) != plan.pp * plan.vp)
    throw Error(fmt::format("the plan assigns {} stages, expected pp * vp = {}", plan.stages.size(), plan.pp * plan.vp))
        .hint("resolve() fills an even assignment; pass a resolved plan");
  for (int e = 0; e < plan.pp * plan.vp; ++e) {
    const plan::StageAssignment& a = plan.stages[static_cast<size_t>(e)];
    for (int u = a.first_unit; u <= a.last_unit; ++u) {
      TP_ASSERT(u >= 0 && u < num_units);
      L.unit_stage[static_cast<size_t>(u)] = e % plan.pp;
    }
  }
  for (int u = 0; u < num_units; ++u)
    if (L.unit_stage[static_cast<size_t>(u)] < 0)
      throw Error(fmt::format("the plan's stages do not cover unit {} ({})", u, graph.unit(u).name)).at("", "/stages");

  // Mixture of experts: each expert op and combine follows the routing of its dispatch.
  L.moe_dispatch_of.assign(graph.ops().size(), -1);
  int64_t num_experts = 0;
  for (const models::Op& op : graph.ops()) {
    if (op.kind == OpKind::moe_combine) {
      for (const models::Op& d : graph.ops())
        if (d.kind == OpKind::moe_dispatch && d.inputs[1] == op.inputs[1]) L.moe_dispatch_of[static_cast<size_t>(op.id)] = d.id;
    } else if (op.expert) {
      const models::Op& in = graph.op(op.inputs.at(0));
      L.moe_dispatch_of[static_cast<size_t>(op.id)] = in.kind == OpKind::moe_dispatch ? in.id : L.moe_dispatch_of[static_cast<size_t>(in.id)];
    } else {
      continue;
    }
    if (L.moe_dispatch_of[static_cast<size_t>(op.id)] < 0)
      throw unsupported(op, "no moe_dispatch routes its rows (expert ops sit between a dispatch and its combine)");
    num_experts = std::max(num_experts, op.num_experts);
  }
  if (num_experts > 0 && plan.tp > 1)
    throw Error(fmt::format("{} has mixture-of-experts layers, which the runtime executes with tp = 1, not {}", spec.name,
                            plan.tp))
        .at("", "/parallelism/tp")
        .hint("set tp to 1 and use dp (and ep) for the GPUs");
  if (L.ep > 1) {
    if (num_experts == 0)
      throw Error(fmt::format("expert parallelism (ep = {}) needs a mixture-of-experts model; {} has no experts", L.ep,
                              spec.name))
          .at("", "/parallelism/ep")
          .hint("set ep to 1");
    if (plan.dp % L.ep != 0 || num_experts % L.ep != 0)
      throw Error(fmt::format("ep = {} must divide dp = {} and the {} experts", L.ep, plan.dp, num_experts))
          .at("", "/parallelism/ep")
          .hint("choose ep among the common divisors of dp and num_experts");
  }

  // Parameters in graph order.
  const bool mlp = spec.family == models::Family::mlp;
  const double out_proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(1, spec.layers)));
  L.op_params.assign(graph.ops().size(), {});
  for (const models::Op& op : graph.ops()) {
    auto add = [&](ParamDef d) {
      d.op = op.id;
      d.split = op.tp_split;
      L.op_params[static_cast<size_t>(op.id)].push_back(static_cast<int>(L.params.size()));
      L.params.push_back(std::move(d));
    };
    switch (op.kind) {
      case OpKind::embedding:
        add({op.name + ".weight", -1, false, {op.weight_shape.at(0), op.weight_shape.at(1)}, ParamDef::Init::normal, 0.02,
             true});
        break;
      case OpKind::layernorm:
      case OpKind::rmsnorm:
        add({op.name + ".weight", -1, false, {op.weight_shape.at(0)}, ParamDef::Init::ones, 0, false});
        if (op.has_bias) add({op.name + ".bias", -1, true, {op.weight_shape.at(0)}, ParamDef::Init::zeros, 0, false});
        break;
      case OpKind::linear: {
        const double stddev = mlp ? 1.0 / std::sqrt(static_cast<double>(op.k))
                              : op.tp_split == TpSplit::row ? out_proj_std
                                                            : 0.02;
        const int64_t e = op.expert ? op.num_experts : 0, blocks = std::max<int64_t>(1, e);
        if (op.tied_weight_op < 0)
          add({op.name + ".weight", -1, false, {blocks * op.n, op.k}, ParamDef::Init::normal, stddev, true,
               TpSplit::replicated, e});
        else
          L.op_params[static_cast<size_t>(op.id)].push_back(-1);  // weight slot: the tied table
        if (op.has_bias)
          add({op.name + ".bias", -1, true, {blocks * op.n}, ParamDef::Init::zeros, 0, false, TpSplit::replicated, e});
        break;
      }
      case OpKind::router:  // a linear h -> E without bias: weight (E, h)
        add({op.name + ".weight", -1, false, {op.n, op.k}, ParamDef::Init::normal, 0.02, true});
        break;
      default: break;
    }
  }
  return L;
}

int ModelLayout::tied_param(int op_id) const {
  const models::Op& o = op(op_id);
  if (o.tied_weight_op < 0) return -1;
  const auto& tied = op_params[static_cast<size_t>(o.tied_weight_op)];
  TP_ASSERT(!tied.empty());
  return tied[0];
}

std::pair<int64_t, int64_t> ModelLayout::vocab_range(int64_t vocab, int tp_rank) const {
  return {vocab * tp_rank / tp, vocab * (tp_rank + 1) / tp};
}

bool ModelLayout::tp_replicated(int p) const {
  const ParamDef& d = params[static_cast<size_t>(p)];
  return tp > 1 && (d.split == TpSplit::replicated || d.split == TpSplit::none);
}

bool ModelLayout::column_like(int op_id) const {
  const models::Op& o = op(op_id);
  return tp > 1 && o.kind == OpKind::linear && (o.tp_split == TpSplit::column || o.tp_split == TpSplit::vocab);
}

bool ModelLayout::output_is_row_slice(int op_id) const {
  if (!sp) return false;
  const models::Op& o = op(op_id);
  if (o.tp_split == TpSplit::replicated || o.tp_split == TpSplit::none) return true;
  if (o.kind == OpKind::linear && o.tp_split == TpSplit::row) return true;
  return o.kind == OpKind::embedding && o.tp_split == TpSplit::vocab;
}

int64_t ModelLayout::out_cols_local(int op_id, int tp_rank) const {
  const models::Op& o = op(op_id);
  const int64_t full = o.out_shape.empty() ? 1 : o.out_shape.back();
  if (tp == 1) return full;
  if (o.kind == OpKind::linear && o.tp_split == TpSplit::vocab) {
    auto [b, e] = vocab_range(o.n, tp_rank);
    return e - b;
  }
  if (o.tp_split == TpSplit::column || o.tp_split == TpSplit::heads) return full / tp;
  return full;
}

TpSlice ModelLayout::slice(int p, int tp_rank, int ep_rank) const {
  TpSlice s = slice(p, tp_rank);
  if (!expert_sharded(p)) return s;
  const ParamDef& d = params[static_cast<size_t>(p)];
  TP_ASSERT_MSG(tp == 1 && s.rows.size() == 1, "routed experts run with tp = 1");
  const int64_t per_expert = d.shape.at(0) / d.experts, local = local_experts(d.experts);
  s.rows = {{ep_rank * local * per_expert, (ep_rank + 1) * local * per_expert}};
  return s;
}

TpSlice ModelLayout::slice(int p, int r) const {
  const ParamDef& d = params[static_cast<size_t>(p)];
  const models::Op& o = op(d.op);
  TpSlice s;
  const int64_t rows = d.shape.at(0), cols = d.shape.size() > 1 ? d.shape[1] : 1;
  s.full_cols = cols;
  s.col_begin = 0;
  s.col_end = cols;
  if (tp == 1 || d.split == TpSplit::replicated || d.split == TpSplit::none) {
    s.rows = {{0, rows}};
    return s;
  }
  const int t = tp;
  auto block = [&](int64_t base, int64_t count) {
    return std::make_pair(base + count * r / t, base + count * (r + 1) / t);
  };
  if (d.split == TpSplit::vocab) {  // embedding table or LM head rows (and an LM head bias)
    s.rows = {vocab_range(rows, r)};
    return s;
  }
  if (d.split == TpSplit::row) {
    if (d.is_bias) {  // added once, before the reduction: tp rank 0 holds it
      s.rows = r == 0 ? std::vector<std::pair<int64_t, int64_t>>{{0, rows}} : std::vector<std::pair<int64_t, int64_t>>{};
      return s;
    }
    s.rows = {{0, rows}};
    std::tie(s.col_begin, s.col_end) = block(0, cols);
    return s;
  }
  TP_ASSERT(d.split == TpSplit::column);
  // A column-parallel linear: its output columns are weight rows, sliced as the consumer
  // reads them (attention heads of the fused [Q | K | V], SwiGLU's [gate | up], or contiguous).
  const std::vector<int> consumers = graph->consumers(o.id);
  const models::Op* reader = consumers.empty() ? nullptr : &op(consumers.front());
  if (reader && reader->kind == OpKind::attention) {
    const int64_t H = reader->heads, KV = reader->kv_heads, D = reader->head_dim;
    s.rows = {block(0, H * D), block(H * D, KV * D), block((H + KV) * D, KV * D)};
  } else if (reader && reader->kind == OpKind::activation && reader->activation == models::Activation::swiglu) {
    s.rows = {block(0, rows / 2), block(rows / 2, rows / 2)};
  } else {
    s.rows = {block(0, rows)};
  }
  return s;
}

std::vector<double> ModelLayout::initial_values(int p, uint64_t seed) const {
  const ParamDef& d = params[static_cast<size_t>(p)];
  std::vector<double> v(static_cast<size_t>(shape_numel(d.shape)));
  switch (d.init) {
    case ParamDef::Init::ones: std::fill(v.begin(), v.end(), 1.0); break;
    case ParamDef::Init::zeros: std::fill(v.begin(), v.end(), 0.0); break;
    case ParamDef::Init::normal: {
      Rng rng = Rng(seed).fork(name_hash(d.name));
      for (double& x : v) x = rng.normal(0, d.stddev);
      break;
    }
  }
  return v;
}

}  // namespace rt
}  // namespace trainplan::executor
