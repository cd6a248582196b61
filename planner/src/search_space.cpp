// The search space: enumeration of candidate families, plans of skeletons, the partition
// cache, prices and names. See search.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <exception>
#include <optional>
#include <set>

#include "search_internal.hpp"
#include "trainplan/planner/export_rules.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::planner {

std::string_view objective_name(Objective o) {
  switch (o) {
    case Objective::time: return "time";
    case Objective::cost: return "cost";
    case Objective::cost_under_deadline: return "cost-under-deadline";
    case Objective::time_under_budget: return "time-under-budget";
  }
  return "time";
}

Objective parse_objective(const std::string& name) {
  for (Objective o : {Objective::time, Objective::cost, Objective::cost_under_deadline, Objective::time_under_budget})
    if (objective_name(o) == name) return o;
  throw Error(fmt::format("unknown objective \"{}\"", name))
      .hint("use time, cost, cost-under-deadline (with --deadline) or time-under-budget (with --budget)");
}

std::string_view partition_mode_name(PartitionMode m) {
  switch (m) {
    case PartitionMode::even: return "even";
    case PartitionMode::time: return "time";
    case PartitionMode::memory: return "memory";
  }
  return "time";
}

PartitionMode parse_partition_mode(const std::string& name) {
  for (PartitionMode m : {PartitionMode::even, PartitionMode::time, PartitionMode::memory})
    if (partition_mode_name(m) == name) return m;
  throw Error(fmt::format("unknown partition mode \"{}\"", name))
      .hint("use time (balance stage times within memory), memory (balance memory) or even (equal layer counts)");
}

int64_t default_global_batch(const models::ModelSpec& spec) {
  if (spec.seq_len > 1 && (spec.family == models::Family::gpt || spec.family == models::Family::llama ||
                           spec.family == models::Family::bert)) {
    // ~1M tokens per step (GPT-3 13B trained with 1M-token batches), as a power of two.
    double seqs = 1048576.0 / static_cast<double>(spec.seq_len);
    return std::max<int64_t>(1, static_cast<int64_t>(std::pow(2.0, std::round(std::log2(seqs)))));
  }
  return 256;
}

std::optional<double> on_demand_price(const hw::InstanceType& inst, plan::Platform platform) {
  return platform == plan::Platform::sagemaker ? inst.prices.sagemaker_on_demand : inst.prices.ec2_on_demand;
}

std::optional<double> spot_price(const hw::InstanceType& inst, plan::Platform platform) {
  if (!inst.prices.spot) return std::nullopt;
  if (platform == plan::Platform::ec2) return inst.prices.spot;
  // SageMaker managed spot: the same discount off the SageMaker on-demand price.
  if (!inst.prices.sagemaker_on_demand || !inst.prices.ec2_on_demand) return std::nullopt;
  return *inst.prices.sagemaker_on_demand * (*inst.prices.spot / *inst.prices.ec2_on_demand);
}

std::optional<double> capacity_block_cost_usd(const hw::InstanceType& inst, plan::Platform platform, int instances,
                                              double seconds) {
  if (platform != plan::Platform::ec2 || !inst.prices.capacity_block || !(seconds > 0)) return std::nullopt;
  hw::CapacityBlockOffer offer{inst.name, inst.prices.region, *inst.prices.capacity_block, ""};
  return hw::capacity_block_cost(offer, inst.prices.capacity_block_rules, instances, seconds / 3600.0).usd;
}

bool ranks_by_cost(Objective objective) { return objective != Objective::time; }

namespace {
std::string unpriced_names(const std::vector<UnpricedType>& unpriced) {
  std::string names;
  for (const auto& u : unpriced) names += (names.empty() ? "" : ", ") + u.instance_type;
  return names;
}
}  // namespace

std::string unpriced_note(const SearchRequest& req, const std::vector<UnpricedType>& unpriced) {
  if (unpriced.empty()) return "";
  // One request, one purchase option and platform: every type misses the same price.
  const std::string& missing = unpriced.front().missing;
  if (ranks_by_cost(req.objective))
    return fmt::format("note: left out of the cost ranking, no {} price: {} (give one with --prices FILE)", missing,
                       unpriced_names(unpriced));
  return fmt::format("note: no {} price for {}: its cost reads \"no price\" (ranked by time only, never as free)", missing,
                     unpriced_names(unpriced));
}

std::string not_offered_note(const std::string& region, const std::vector<NotOfferedType>& not_offered) {
  if (not_offered.empty()) return "";
  std::string list;
  for (const auto& n : not_offered)
    list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", n.instance_type,
                        n.offered_in.empty() ? "in none of the catalog's regions" : "offered in " + join(n.offered_in, ", "));
  return fmt::format("note: left out, not offered in {}: {}", region, list);
}

std::string not_executed_note(const hw::Catalog& catalog, const std::vector<std::string>& instance_types) {
  std::vector<std::string> seen;
  for (const auto& t : instance_types)
    if (const auto* inst = catalog.find_instance(t);
        inst && !catalog.gpu(inst->gpu).executable() && std::find(seen.begin(), seen.end(), t) == seen.end())
      seen.push_back(t);
  if (seen.empty()) return "";
  std::string names;
  for (const auto& t : seen)
    names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", t, catalog.gpu(catalog.instance(t).gpu).arch);
  return fmt::format("note: planned and simulated, not executed: {} run on AWS Neuron, which trainplan has no backend for "
                     "(`trainplan execute` refuses such a plan)",
                     names);
}

std::optional<std::string> missing_price(const SearchRequest& req, const hw::InstanceType& inst) {
  const bool sagemaker = req.platform == plan::Platform::sagemaker;
  const std::string on_demand = sagemaker ? "SageMaker on-demand" : "EC2 on-demand";
  const std::string spot = sagemaker ? "SageMaker managed spot" : "EC2 spot";
  const bool has_od = on_demand_price(inst, req.platform).has_value(), has_spot = spot_price(inst, req.platform).has_value();
  if (req.both_purchases) return has_od || has_spot ? std::nullopt : std::optional(on_demand + " or " + spot);
  if (req.purchase == plan::Purchase::capacity_block)
    return req.platform == plan::Platform::ec2 && inst.prices.capacity_block ? std::nullopt
                                                                             : std::optional(std::string("EC2 Capacity Block"));
  if (req.purchase == plan::Purchase::spot) return has_spot ? std::nullopt : std::optional(spot);
  return has_od ? std::nullopt : std::optional(on_demand);
}

namespace detail {
namespace {

bool divides(int64_t d, int64_t n) { return d > 0 && n % d == 0; }

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<int64_t> global_batches(const SearchRequest& req, int64_t default_batch) {
  if (req.global_batch_min <= 0 && req.global_batch_max <= 0) return {req.global_batch > 0 ? req.global_batch : default_batch};
  if (req.global_batch_min <= 0 || req.global_batch_max < req.global_batch_min)
    throw Error(fmt::format("the global batch range [{}, {}] is empty", req.global_batch_min, req.global_batch_max))
        .hint("give two positive bounds, the smaller first, e.g. --global-batch-range 512:2048");
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= req.global_batch_max; b *= 2)
    if (b >= req.global_batch_min) out.push_back(b);
  if (out.empty())
    throw Error(fmt::format("no power of two lies in the global batch range [{}, {}]", req.global_batch_min, req.global_batch_max))
        .hint("widen the range");
  return out;
}

// The cp axis: the request's degrees, else 1, 2, 4, 8 for long sequences of sequence models;
// only those whose 2 * cp divides the sequence (causal load balancing needs 2 * cp chunks).
std::vector<int> context_parallel_degrees(const SearchRequest& req, const models::ModelSpec& spec, bool transformer) {
  std::vector<int> wanted = req.context_parallel;
  if (wanted.empty()) {
    wanted = {1};
    if (transformer && spec.seq_len >= kContextParallelMinSeqLen) wanted = {1, 2, 4, 8};
  }
  std::vector<int> out;
  for (int cp : wanted) {
    if (cp < 1) throw Error(fmt::format("context-parallel degrees must be positive, got {}", cp)).hint("e.g. --cp 1,2,4");
    if (cp > 1 && (!transformer || spec.seq_len % (2 * cp) != 0)) continue;
    out.push_back(cp);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The ep axis of a dp * cp layout: the request's degrees (else all) among the divisors of dp * cp
// that divide the number of experts; 1 for dense models.
std::vector<int> expert_parallel_degrees(const SearchRequest& req, const models::ModelSpec& spec, int dpcp) {
  if (!spec.is_moe()) return {1};
  std::vector<int> out;
  for (int ep : divisors(dpcp))
    if (spec.num_experts % ep == 0 &&
        (req.expert_parallel.empty() || std::find(req.expert_parallel.begin(), req.expert_parallel.end(), ep) != req.expert_parallel.end()))
      out.push_back(ep);
  return out;
}

// Expert parallelism and routing settings need a MoE model.
void check_moe_request(const SearchRequest& req, const models::ModelSpec& spec) {
  for (int ep : req.expert_parallel)
    if (ep < 1) throw Error(fmt::format("expert-parallel degrees must be positive, got {}", ep)).at("--ep").hint("e.g. --ep 1,2,4,8");
  if (spec.is_moe()) return;
  if (std::any_of(req.expert_parallel.begin(), req.expert_parallel.end(), [](int ep) { return ep > 1; }))
    throw Error(fmt::format("{} has no experts to split", spec.name)).at("--ep").hint("expert parallelism is for mixture-of-experts models: drop --ep");
  if (req.moe_capacity_factor != 0)
    throw Error(fmt::format("{} has no experts to route to", spec.name)).at("--capacity-factor").hint("drop --capacity-factor for a dense model");
  if (req.moe_load_imbalance != 1.0)
    throw Error(fmt::format("{} has no experts to route to", spec.name)).at("--load-imbalance").hint("drop --load-imbalance for a dense model");
}

// What every candidate on `count` instances of `instance` shares before its layout: the
// request's model, work, prices, routing and first lazy-axis values, dp = all `gpus`.
plan::Plan base_plan(const SearchRequest& req, const std::string& instance, int count, int gpus, int64_t global_batch) {
  plan::Plan p;
  p.model = req.model;
  p.instance_type = instance;
  p.instance_count = count;
  p.global_batch = global_batch;
  p.seq_len = req.seq_len;
  p.training_tokens = req.tokens;
  p.platform = req.platform;
  p.purchase = req.both_purchases ? plan::Purchase::on_demand : req.purchase;
  p.dp = gpus;
  p.dp_algorithm = req.dp_algorithms.empty() ? plan::DpAlgorithm::ring : req.dp_algorithms.front();
  p.bucket_size_bytes = req.bucket_sizes_bytes.empty() ? 25e6 : req.bucket_sizes_bytes.front();
  p.sync_batch_norm = req.sync_batch_norm;
  p.moe_capacity_factor = req.moe_capacity_factor;
  p.moe_load_imbalance = req.moe_load_imbalance;
  p.placement.azs = std::min(req.azs, count);
  p.data_region = req.data_region;
  p.software = req.software;
  p.dataset_bytes = req.dataset_bytes;
  return p;
}

bool allowed(const std::vector<int>& filter, int degree) {
  return filter.empty() || std::find(filter.begin(), filter.end(), degree) != filter.end();
}

std::string degrees_text(const std::set<int>& degrees) {
  std::vector<std::string> out;
  for (int d : degrees) out.push_back(std::to_string(d));
  return join(out, ",");
}

// The degrees each layout filter could have kept, and how far any candidate got: a layout past
// the filters, a micro-batch that divides the batch, a ZeRO stage that applies.
struct FilterCheck {
  std::set<int> tp, pp, dp;
  bool any_layout = false;
  bool any_micro_batch = false;
  bool any_zero = false;
  bool any_schedule = false;
  bool any_recompute = false;

  // Records the layout as possible; whether the request's filters keep it.
  bool admit(const SearchRequest& req, int tp_degree, int pp_degree, int dp_degree) {
    tp.insert(tp_degree);
    pp.insert(pp_degree);
    dp.insert(dp_degree);
    if (!allowed(req.tp_degrees, tp_degree) || !allowed(req.pp_degrees, pp_degree) || !allowed(req.dp_degrees, dp_degree))
      return false;
    any_layout = true;
    return true;
  }

  // After the enumeration left no family: the flag that emptied the space, with what was possible.
  void throw_if_emptied(const SearchRequest& req) const {
    struct Axis {
      const char* flag;
      const char* what;
      const std::vector<int>& filter;
      const std::set<int>& possible;
    };
    for (const Axis& a : {Axis{"--tp", "tensor-parallel", req.tp_degrees, tp}, Axis{"--pp", "pipeline-parallel", req.pp_degrees, pp},
                          Axis{"--dp", "data-parallel", req.dp_degrees, dp}}) {
      if (a.filter.empty()) continue;
      if (std::none_of(a.filter.begin(), a.filter.end(), [&](int d) { return a.possible.count(d) > 0; }))
        throw Error(fmt::format("no candidate has a {} degree in {{{}}}", a.what, degrees_text({a.filter.begin(), a.filter.end()})))
            .at(a.flag)
            .hint(a.possible.empty() ? "no layout is possible on these clusters; widen --instances, --counts or --max-gpus"
                                     : fmt::format("the clusters searched allow {} {}", a.flag, degrees_text(a.possible)));
    }
    std::vector<std::string> given;
    for (const auto& [flag, filter] : {std::pair<const char*, const std::vector<int>*>{"--tp", &req.tp_degrees},
                                       {"--pp", &req.pp_degrees}, {"--dp", &req.dp_degrees}})
      if (!filter->empty()) given.push_back(fmt::format("{} {}", flag, degrees_text({filter->begin(), filter->end()})));
    if (!any_layout && !given.empty())
      throw Error(fmt::format("no cluster searched splits into {} together", join(given, " with ")))
          .at(given.front().substr(0, 4))
          .hint("dp x tp x pp (x cp) must equal the cluster's GPUs: change one filter or --counts / --instances");
    if (!any_micro_batch)
      throw Error("no micro-batch size to try divides the global batch per data-parallel rank on the layouts searched")
          .at("--micro-batches")
          .hint("micro-batch x dp must divide the global batch: give other --micro-batches or --global-batch");
    if (!any_zero)
      throw Error("none of the ZeRO stages to try applies to the layouts searched")
          .at("--zero")
          .hint("ZeRO > 0 shards over dp > 1 replicas and ZeRO-2/3 need pp = 1: add --zero 0 or allow more data parallelism");
    if (any_schedule && !any_recompute)
      throw Error("no recomputation to try applies (selective recomputation only drops a transformer's attention scores)")
          .at("--recompute")
          .hint("add --recompute none or full");
    throw Error("no pipeline schedule to try fits the layouts searched (interleaved 1F1B needs micro-batches divisible by pp "
                "and enough layers for --vp)")
        .at("--schedules")
        .hint("add --schedule 1f1b, or change --vp or --micro-batches");
  }
};

// What feeds a step on the context's cluster from the request's data source.
sim::DataInputSpec data_input_of(const SearchRequest& req, const Context& c) {
  sim::JobOptions options;
  options.data_source = req.data_source;
  return sim::data_input_spec(c.base, *c.ctx, options);
}

std::vector<int> counts_for(const SearchRequest& req, int gpus_per_node) {
  std::vector<int> out;
  if (!req.instance_counts.empty()) {
    for (int c : req.instance_counts) {
      if (c < 1) throw Error(fmt::format("instance counts must be positive, got {}", c)).hint("e.g. --counts 1,2,4,8");
      out.push_back(c);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  for (int count = 1; count * gpus_per_node <= req.max_gpus; count *= 2) {
    if (req.max_instances > 0 && count > req.max_instances) break;
    out.push_back(count);
  }
  return out;
}

}  // namespace

namespace {

// Types the selected region does not offer: left out, and listed with the regions that do (an
// error when none is left).
void drop_not_offered(const hw::Catalog& catalog, Space& space) {
  for (const auto& t : space.types)
    if (!catalog.offered_in_selected_region(t)) space.not_offered.push_back({t, catalog.offered_regions(t).value_or(std::vector<std::string>{})});
  if (space.not_offered.empty()) return;
  std::erase_if(space.types, [&](const std::string& t) { return !catalog.offered_in_selected_region(t); });
  if (space.types.empty())
    throw Error(not_offered_note(catalog.region(), space.not_offered).substr(6) + ", and nothing else was searched")
        .at("--region")
        .hint("choose a region that offers them (`trainplan catalog --regions`) or other --instances");
}

// Types without the purchase option's price: never ranked as free. A cost objective leaves them
// out (an error when nothing priced is left); a time objective keeps them. Both list them.
void list_unpriced(const SearchRequest& req, const hw::Catalog& catalog, Space& space) {
  for (const auto& t : space.types)
    if (auto missing = missing_price(req, catalog.instance(t))) space.unpriced.push_back({t, *missing});
  if (ranks_by_cost(req.objective) && !space.unpriced.empty()) {
    std::erase_if(space.types, [&](const std::string& t) {
      return std::any_of(space.unpriced.begin(), space.unpriced.end(), [&](const UnpricedType& u) { return u.instance_type == t; });
    });
    if (space.types.empty())
      throw Error(fmt::format("the {} objective ranks by cost, but none of the instance types searched has a price for {} ({})",
                              objective_name(req.objective), space.unpriced.front().missing, unpriced_names(space.unpriced)))
          .at("--objective")
          .hint("rank by --objective time, choose another --purchase or --instances, or give the price with --prices FILE");
  }
}

// The request's precision (and FP8 recipe) on a context's base plan and context, under the plan
// rules of plan::check_precision. False when the GPU lacks it: the type is left out, or, when
// the request names its instance types, an Error at the flag that asked for it.
bool apply_precision(const SearchRequest& req, plan::Plan& base, plan::PlanContext& ctx) {
  if (!req.precision) return true;
  base.precision = *req.precision;
  base.fp8 = req.fp8;
  if (auto problem = plan::check_precision(base, ctx)) {
    if (!req.instance_types.empty()) {
      const bool recipe = req.precision == Precision::fp8 && req.fp8.recipe == plan::Fp8Recipe::mxfp8 && ctx.gpu->supports(Precision::fp8);
      throw Error(*problem)
          .at(recipe ? "--fp8-recipe" : "--precision")
          .hint("leave out --instances to search the types that have it, or choose another precision");
    }
    return false;
  }
  ctx.precision = *req.precision;
  return true;
}

// One (type, count)'s base plan and context, or the error resolving it threw.
struct ResolvedContext {
  int count = 0;
  plan::Plan base;
  std::unique_ptr<plan::PlanContext> ctx;
  std::exception_ptr error;
};

// Resolving a context (its model graph and cluster) is most of enumerate: every (type, count),
// in enumerate's order, is resolved up front, on the pool when there is one; an error is kept
// and thrown where enumerate reaches that context, as when it resolved them one by one.
std::vector<ResolvedContext> resolve_contexts(const SearchRequest& req, const hw::Catalog& catalog,
                                              const std::vector<std::string>& types, int64_t global_batch, ThreadPool* pool) {
  std::vector<ResolvedContext> out;
  std::vector<const hw::InstanceType*> inst;
  for (const auto& t : types)
    for (int count : counts_for(req, catalog.instance(t).gpu_count)) {
      out.emplace_back().count = count;
      inst.push_back(&catalog.instance(t));
    }
  // Every context has the request's model and sequence length: its graph is built once and
  // shared (plan::resolve builds it per call). Where building it fails, each context resolves
  // on its own, so the error reads as plan::resolve words it.
  std::optional<std::pair<models::ModelSpec, models::ModelGraph>> model;
  try {
    models::ModelSpec spec = models::resolve_model(req.model);
    if (req.seq_len > 0) models::set_seq_len(spec, req.seq_len, "batch.seq_len");
    models::ModelGraph graph = models::build_graph(spec);
    model.emplace(std::move(spec), std::move(graph));
  } catch (const std::exception&) {
  }
  const auto resolve_at = [&](size_t k) {
    ResolvedContext& r = out[k];
    try {
      r.base = base_plan(req, inst[k]->name, r.count, r.count * inst[k]->gpu_count, global_batch);
      r.base.region = catalog.region();
      TP_ASSERT(r.base.model == req.model && r.base.seq_len == req.seq_len);
      r.ctx = std::make_unique<plan::PlanContext>(model ? plan::resolve(r.base, catalog, model->first, model->second, "<search>")
                                                        : plan::resolve(r.base, catalog, "<search>"));
    } catch (...) {
      r.error = std::current_exception();
    }
  };
  if (pool) pool->parallel_for(out.size(), resolve_at);
  else
    for (size_t k = 0; k < out.size(); ++k) resolve_at(k);
  return out;
}

}  // namespace

Space enumerate(const SearchRequest& req, const hw::Catalog& catalog, int64_t default_batch, ThreadPool* pool) {
  Space space;
  space.types = req.instance_types;
  if (space.types.empty())
    for (const auto& name : catalog.instance_names())  // by default only what `trainplan execute` can run
      if (const auto& inst = catalog.instance(name); inst.aws && catalog.gpu(inst.gpu).executable()) space.types.push_back(name);
  for (const auto& t : space.types) (void)catalog.instance(t);  // unknown names throw with a suggestion
  drop_not_offered(catalog, space);
  list_unpriced(req, catalog, space);
  const std::vector<int64_t> batches = global_batches(req, default_batch);
  models::ModelSpec spec = models::resolve_model(req.model);
  if (req.seq_len > 0) models::set_seq_len(spec, req.seq_len, "--seq-len");
  const bool transformer = spec.family != models::Family::resnet && spec.family != models::Family::mlp;
  const bool lazy_axes = req.stages.expand;
  const std::vector<int> cps = context_parallel_degrees(req, spec, transformer);
  check_moe_request(req, spec);
  FilterCheck filters;

  std::vector<ResolvedContext> resolved = resolve_contexts(req, catalog, space.types, batches.front(), pool);
  size_t type_first = 0;
  for (size_t ti = 0; ti < space.types.size(); ++ti) {
    const int gpn = catalog.instance(space.types[ti]).gpu_count;
    const size_t type_end = type_first + counts_for(req, gpn).size();
    for (size_t k = type_first; k < type_end; ++k) {
      ResolvedContext& r = resolved[k];
      if (r.error) std::rethrow_exception(r.error);
      Context c;
      c.type_index = static_cast<int>(ti);
      c.base = std::move(r.base);
      c.ctx = std::move(r.ctx);
      c.base.precision = c.ctx->precision;
      if (!apply_precision(req, c.base, *c.ctx)) break;
      c.input = data_input_of(req, c);
      c.base.stages.clear();
      // Megatron-LM below sm80 has only Transformer Engine's unfused attention (rule
      // megatron.attention-backend): plan it with the score matrix in memory.
      if (req.framework == ExportTarget::megatron && transformer && compute_capability(*c.ctx) > 0 && compute_capability(*c.ctx) < 80)
        c.base.attention = plan::AttentionImpl::unfused;
      // Selective recomputation only helps where it drops something (with flash attention
      // there is no score matrix to drop): otherwise it is a duplicate of "none".
      bool selective_saves = false;
      for (int u = 0; u < static_cast<int>(c.ctx->graph.units().size()) && !selective_saves; ++u)
        selective_saves = plan::unit_activation_bytes(c.ctx->graph, u, 1, 1, false, plan::Recompute::selective, c.ctx->precision,
                                                      c.base.attention) <
                          plan::unit_activation_bytes(c.ctx->graph, u, 1, 1, false, plan::Recompute::none, c.ctx->precision,
                                                      c.base.attention);
      const uint32_t ci = static_cast<uint32_t>(space.contexts.size());
      const int gpus = r.count * gpn;
      const int blocks = c.ctx->graph.num_blocks();
      const int units = static_cast<int>(c.ctx->graph.units().size());
      for (int tp = 1; tp <= (req.allow_tp_across_nodes ? gpus : gpn); tp *= 2) {
        if (gpus % tp) continue;
        if (tp > 1 && (!transformer || !divides(tp, spec.heads) || !divides(tp, spec.kv_heads) || !divides(tp, spec.hidden) ||
                       !divides(tp, spec.ffn_hidden) || (spec.expert_ffn_hidden > 0 && !divides(tp, spec.expert_ffn_hidden))))
          continue;
        for (int cp : cps) {
          if (gpus % (tp * cp)) continue;
          for (int pp : divisors(gpus / (tp * cp))) {
            if (pp > std::max(1, blocks)) continue;
            const int dp = gpus / (tp * pp * cp);
            if (!filters.admit(req, tp, pp, dp)) continue;
            struct Sched {
              plan::Schedule s;
              int vp;
            };
            std::vector<Sched> scheds;
            if (pp == 1) {
              scheds.push_back({plan::Schedule::one_f_one_b, 1});
            } else {
              for (plan::Schedule s : req.schedules) {
                if (s != plan::Schedule::interleaved_1f1b) {
                  scheds.push_back({s, 1});
                  continue;
                }
                for (int vp : req.virtual_stages)
                  if (vp >= 2 && pp * vp <= blocks && pp * vp <= units) scheds.push_back({s, vp});
              }
            }
            for (int64_t gb : batches) {
              std::vector<int64_t> mbs;
              for (int64_t mb : req.micro_batches)
                if (mb > 0 && gb % (mb * dp) == 0) mbs.push_back(mb);
              std::sort(mbs.begin(), mbs.end());
              mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
              if (mbs.empty()) continue;
              filters.any_micro_batch = true;
              for (int zero : req.zero_stages) {
                if (zero < 0 || zero > 3) throw Error(fmt::format("ZeRO stages are 0..3, got {}", zero)).hint("e.g. --zero 0,1,3");
                if (zero > 0 && dp * cp == 1) continue;  // ZeRO shards over the dp * cp replicas
                if (zero >= 2 && pp > 1) continue;
                filters.any_zero = true;
                for (const auto& sc : scheds) {
                  filters.any_schedule = true;
                  for (plan::Recompute rc : req.recomputes) {
                    if (rc == plan::Recompute::selective && (!transformer || !selective_saves)) continue;
                    filters.any_recompute = true;
                    for (bool sp : {false, true})
                    for (int ep : expert_parallel_degrees(req, spec, dp * cp)) {
                      if (sp && (tp == 1 || !req.sequence_parallel)) continue;
                      if (ep > 1 && zero >= 3) continue;  // ZeRO-3 with ep is not modelled (plan::check)
                      Family f;
                      f.ep = static_cast<int16_t>(ep);
                      f.context = ci;
                      f.tp = static_cast<int16_t>(tp);
                      f.pp = static_cast<int16_t>(pp);
                      f.vp = static_cast<int16_t>(sc.vp);
                      f.cp = static_cast<int16_t>(cp);
                      f.zero = static_cast<int8_t>(zero);
                      f.schedule = sc.s;
                      f.recompute = rc;
                      f.sp = sp;
                      f.global_batch = gb;
                      for (int64_t mb : mbs)
                        if (sc.s != plan::Schedule::interleaved_1f1b || (gb / (mb * dp)) % pp == 0) f.micro_batches.push_back(mb);
                      if (f.micro_batches.empty()) continue;
                      if (req.framework) {
                        // A representative of the family (the lazy axes are filtered up front).
                        Skeleton rep;
                        rep.micro_batch = f.micro_batches.front();
                        rep.algorithm = c.base.dp_algorithm;
                        rep.bucket_size_bytes = c.base.bucket_size_bytes;
                        if (export_refusal(plan_of(c, f, rep), *c.ctx, *req.framework)) {
                          space.not_expressible += f.micro_batches.size();
                          continue;
                        }
                      }
                      size_t variants = 1;
                      if (lazy_axes && dp * cp > 1) {
                        variants *= std::max<size_t>(1, req.bucket_sizes_bytes.size());
                        if (zero == 0) variants *= std::max<size_t>(1, req.dp_algorithms.size());
                      }
                      space.enumerated += f.micro_batches.size() * variants;
                      space.families.push_back(std::move(f));
                    }
                  }
                }
              }
            }
          }
        }
      }
      space.contexts.push_back(std::move(c));
    }
    type_first = type_end;
  }
  const bool filtered = !req.tp_degrees.empty() || !req.pp_degrees.empty() || !req.dp_degrees.empty();
  if (space.families.empty() && space.not_expressible == 0 && (filtered || filters.any_layout)) filters.throw_if_emptied(req);
  return space;
}

plan::Plan make_plan(const Space& space, const Skeleton& s) {
  const Family& f = space.families[s.family];
  return plan_of(space.contexts[f.context], f, s);
}

plan::Plan plan_of(const Context& c, const Family& f, const Skeleton& s) {
  plan::Plan p = c.base;
  p.tp = f.tp;
  p.pp = f.pp;
  p.vp = f.vp;
  p.cp = f.cp;
  p.ep = f.ep;
  p.dp = c.ctx->cluster.num_gpus() / (f.tp * f.pp * f.cp);
  p.zero_stage = f.zero;
  p.schedule = f.schedule;
  p.recompute = f.recompute;
  p.sequence_parallel = f.sp;
  p.global_batch = f.global_batch;
  p.micro_batch = s.micro_batch;
  p.num_micro_batches = p.global_batch / (p.micro_batch * p.dp);
  p.dp_algorithm = s.algorithm;
  p.bucket_size_bytes = s.bucket_size_bytes;
  p.stages = s.stages ? *s.stages : plan::even_stages(static_cast<int>(c.ctx->graph.units().size()), p.pp * p.vp);
  return p;
}

std::shared_ptr<const std::vector<plan::StageAssignment>> PartitionCache::time_split(const Family& f, int64_t micro_batch) {
  const Context& c = space_.contexts[f.context];
  const bool in_node = f.tp * f.cp <= c.ctx->cluster.gpus_per_node();
  const int dp = c.ctx->cluster.num_gpus() / (f.tp * f.pp * f.cp);
  const Key key{c.type_index, f.tp, micro_batch, f.sp, static_cast<int>(f.recompute), f.pp, f.vp, f.cp, in_node ? 0 : dp,
                in_node ? -1 : static_cast<int>(f.context)};
  {
    std::shared_lock lock(mutex_);
    auto it = splits_.find(key);
    if (it != splits_.end()) return it->second;
  }
  Skeleton s;
  s.family = static_cast<uint32_t>(&f - space_.families.data());
  s.micro_batch = micro_batch;
  plan::Plan p = make_plan(space_, s);
  // Time only: memory is checked per candidate (prune_memory).
  PartitionProblem prob;
  prob.pp = p.pp;
  prob.vp = p.vp;
  prob.unit_time_s = unit_times_s(p, *c.ctx, req_.analytical_for(*c.ctx->gpu), cache_);
  const size_t n = prob.unit_time_s.size();
  prob.static_bytes.assign(n, 0.0);
  prob.kept_bytes.assign(n, 0.0);
  prob.excursion_bytes.assign(n, 0.0);
  prob.fixed_bytes.assign(static_cast<size_t>(p.pp), 0.0);
  prob.in_flight.assign(static_cast<size_t>(p.pp), 1.0);
  auto split = std::make_shared<const std::vector<plan::StageAssignment>>(partition_units(prob, Balance::time, false).stages);
  std::unique_lock lock(mutex_);
  return splits_.emplace(key, std::move(split)).first->second;
}

size_t PartitionCache::computed() const {
  std::lock_guard lock(mutex_);
  return splits_.size();
}

const UnitMemoryTerms& MemoryTermsCache::terms(const plan::Plan& p, const plan::PlanContext& ctx) {
  const Key key{p.tp, p.sequence_parallel, p.cp, p.micro_batch, static_cast<int>(p.recompute),
                static_cast<int>(p.precision_or(ctx.precision)), static_cast<int>(p.attention)};
  {
    std::shared_lock lock(mutex_);
    auto it = terms_.find(key);
    if (it != terms_.end()) return *it->second;
  }
  auto t = std::make_unique<UnitMemoryTerms>(unit_memory_terms(p, ctx));
  std::unique_lock lock(mutex_);
  return *terms_.emplace(key, std::move(t)).first->second;  // map nodes are stable
}

plan::MemoryBreakdown peak_memory_of(const plan::Plan& p, const plan::PlanContext& ctx, MemoryTermsCache& terms) {
  const auto all = memory_per_rank(p, ctx, terms.terms(p, ctx));
  const plan::MemoryBreakdown fast = *std::max_element(all.begin(), all.end(), [](const plan::MemoryBreakdown& a, const plan::MemoryBreakdown& b) {
    return a.total_bytes() < b.total_bytes();
  });
  if (p.schedule != plan::Schedule::interleaved_1f1b) return fast;
  // Interleaved chunks: the mirror is within 10% of the replay (tests), so it decides the fit
  // outside that band and plan::peak_memory inside it.
  const double ratio = fast.total_bytes() / fast.capacity_bytes;
  if (ratio <= 0.9 || ratio >= 1.1) return fast;
  return plan::peak_memory(p, ctx);
}

std::optional<std::vector<plan::StageAssignment>> memory_split(const plan::Plan& p, const plan::PlanContext& ctx,
                                                               PartitionMode mode, const AnalyticalOptions& analytical,
                                                               EstimateCache* cache, MemoryTermsCache& terms) {
  PartitionProblem prob = make_partition_problem(p, ctx, unit_times_s(p, ctx, analytical, cache), terms.terms(p, ctx));
  const Balance balance = mode == PartitionMode::memory ? Balance::memory : Balance::time;
  return terms.split(prob, balance, [&]() -> MemoryTermsCache::Split {
    auto part = fitting_partition(prob, balance, false);
    if (!part) return std::nullopt;
    return std::move(part->stages);
  });
}

std::vector<uint64_t> problem_bits(const PartitionProblem& prob, Balance balance) {
  // Every field below: a field added to PartitionProblem must be added here too, or equal keys
  // could stand for different problems.
  static_assert(sizeof(PartitionProblem) == 2 * sizeof(int) + 7 * sizeof(std::vector<double>) + 3 * sizeof(double),
                "problem_bits must cover every field of PartitionProblem");
  std::vector<uint64_t> out{static_cast<uint64_t>(balance), static_cast<uint64_t>(prob.pp), static_cast<uint64_t>(prob.vp)};
  const auto add = [&](const std::vector<double>& v) {
    out.push_back(v.size());
    for (double x : v) out.push_back(std::bit_cast<uint64_t>(x));
  };
  add(prob.unit_time_s);
  add(prob.static_bytes);
  add(prob.kept_bytes);
  add(prob.excursion_bytes);
  out.push_back(prob.peak_bytes.size());
  for (const auto& v : prob.peak_bytes) add(v);
  add(prob.fixed_bytes);
  add(prob.in_flight);
  for (double x : {prob.last_bytes, prob.last_without_first_bytes, prob.capacity_bytes}) out.push_back(std::bit_cast<uint64_t>(x));
  return out;
}

size_t MemoryTermsCache::BitsHash::operator()(const std::vector<uint64_t>& v) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (uint64_t x : v) h = (h ^ x) * 1099511628211ull;
  return static_cast<size_t>(h);
}

}  // namespace detail
}  // namespace trainplan::planner
