// The plan search pipeline. See search.hpp.
#include "trainplan/planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "trainplan/core/progress.hpp"
#include "trainplan/core/thread_pool.hpp"

namespace trainplan::planner {

std::string_view objective_name(Objective o) { return o == Objective::cost ? "cost" : "time"; }

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

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A compact candidate: indices into the axes of one (instance type, count) context.
struct Skeleton {
  uint32_t context = 0;
  int16_t tp = 1, pp = 1, vp = 1;
  int8_t zero = 0;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  plan::Recompute recompute = plan::Recompute::none;
  bool sp = false;
  int64_t micro_batch = 1;
};

struct Context {
  plan::Plan base;  // instance type, count, model, batch, precision filled
  std::unique_ptr<plan::PlanContext> ctx;
};

bool divides(int64_t d, int64_t n) { return d > 0 && n % d == 0; }

plan::Plan make_plan(const Context& c, const Skeleton& s) {
  plan::Plan p = c.base;
  p.tp = s.tp;
  p.pp = s.pp;
  p.vp = s.vp;
  p.dp = c.ctx->cluster.num_gpus() / (s.tp * s.pp);
  p.zero_stage = s.zero;
  p.schedule = s.schedule;
  p.recompute = s.recompute;
  p.sequence_parallel = s.sp;
  p.micro_batch = s.micro_batch;
  p.num_micro_batches = p.global_batch / (p.micro_batch * p.dp);
  p.stages = plan::even_stages(static_cast<int>(c.ctx->graph.units().size()), p.pp * p.vp);
  return p;
}

}  // namespace

SearchResult search(const SearchRequest& req, const hw::Catalog& catalog) {
  SearchResult result;
  if (!(req.tokens > 0)) throw Error("the training work must be positive").hint("give --tokens, e.g. --tokens 300e9");
  if (req.max_gpus < 1)
    throw Error(fmt::format("--max-gpus must be at least 1, got {}", req.max_gpus)).hint("give the largest cluster to consider, e.g. --max-gpus 256");
  models::ModelSpec spec = models::resolve_model(req.model);
  if (req.seq_len > 0) spec.seq_len = req.seq_len;
  const int64_t global_batch = req.global_batch > 0 ? req.global_batch : default_global_batch(spec);
  result.global_batch = global_batch;
  result.seq_len = spec.seq_len;
  std::vector<std::string> types = req.instance_types;
  if (types.empty())
    for (const auto& name : catalog.instance_names())
      if (catalog.instance(name).aws) types.push_back(name);
  for (const auto& t : types) (void)catalog.instance(t);  // unknown names throw with a suggestion

  // ---- enumerate --------------------------------------------------------------------------
  auto t0 = Clock::now();
  const models::ModelGraph graph = models::build_graph(spec);
  const int blocks = graph.num_blocks();
  const bool transformer = spec.family != models::Family::resnet && spec.family != models::Family::mlp;
  std::vector<Context> contexts;
  std::vector<Skeleton> skeletons;
  for (const auto& type : types) {
    const hw::InstanceType& inst = catalog.instance(type);
    const int gpn = inst.gpu_count;
    for (int count = 1; count * gpn <= req.max_gpus; count *= 2) {
      if (req.max_instances > 0 && count > req.max_instances) break;
      Context c;
      c.base.model = req.model;
      c.base.instance_type = type;
      c.base.instance_count = count;
      c.base.global_batch = global_batch;
      c.base.seq_len = req.seq_len;
      c.base.training_tokens = req.tokens;
      c.base.platform = req.platform;
      c.base.purchase = req.purchase;
      c.base.dp = count * gpn;
      c.ctx = std::make_unique<plan::PlanContext>(plan::resolve(c.base, catalog, "<search>"));
      const uint32_t ci = static_cast<uint32_t>(contexts.size());
      const int gpus = count * gpn;
      for (int tp = 1; tp <= (req.allow_tp_across_nodes ? gpus : gpn); tp *= 2) {
        if (gpus % tp) continue;
        if (tp > 1 && (!transformer || !divides(tp, spec.heads) || !divides(tp, spec.kv_heads) ||
                       !divides(tp, spec.hidden) || !divides(tp, spec.ffn_hidden)))
          continue;
        for (int pp = 1; tp * pp <= gpus; pp *= 2) {
          if (gpus % (tp * pp) || pp > std::max(1, blocks)) continue;
          const int dp = gpus / (tp * pp);
          for (int zero = 0; zero <= 3; ++zero) {
            if (zero > 0 && dp == 1) continue;
            if (zero >= 2 && pp > 1) continue;
            struct Sched { plan::Schedule s; int vp; };
            std::vector<Sched> scheds = {{plan::Schedule::one_f_one_b, 1}};
            if (pp > 1 && blocks % (pp * 2) == 0) scheds.push_back({plan::Schedule::interleaved_1f1b, 2});
            for (const auto& sc : scheds) {
              for (plan::Recompute rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}) {
                if (!transformer && rc == plan::Recompute::selective) continue;
                for (bool sp : {false, true}) {
                  if (sp && tp == 1) continue;
                  for (int64_t mb : req.micro_batches) {
                    if (global_batch % (mb * dp) != 0) continue;
                    const int64_t m = global_batch / (mb * dp);
                    if (sc.s == plan::Schedule::interleaved_1f1b && m % pp != 0) continue;
                    skeletons.push_back({ci, static_cast<int16_t>(tp), static_cast<int16_t>(pp), static_cast<int16_t>(sc.vp),
                                         static_cast<int8_t>(zero), sc.s, rc, sp, mb});
                  }
                }
              }
            }
          }
        }
      }
      contexts.push_back(std::move(c));
    }
  }
  result.enumerated = skeletons.size();
  result.stages.push_back({"enumerate", since(t0), skeletons.size(),
                           fmt::format("{} instance types, {} cluster sizes", types.size(), contexts.size())});

  ThreadPool pool(static_cast<size_t>(std::max(0, req.threads)));

  // ---- prune_memory -----------------------------------------------------------------------
  t0 = Clock::now();
  std::vector<plan::MemoryBreakdown> memory(skeletons.size());
  {
    Progress bar("memory", skeletons.size());
    pool.parallel_for(
        skeletons.size(),
        [&](size_t i) {
          const Context& c = contexts[skeletons[i].context];
          plan::Plan p = make_plan(c, skeletons[i]);
          memory[i] = plan::peak_memory(p, *c.ctx);
        },
        req.cancel, [&](size_t d) { bar.update(d); });
  }
  std::vector<size_t> survivors;
  for (size_t i = 0; i < skeletons.size(); ++i) {
    if (memory[i].fits()) survivors.push_back(i);
    else ++result.dropped["does not fit in GPU memory"];
  }
  // The closest attempt per instance type, for messages when nothing fits.
  {
    std::map<std::string, SearchResult::Closest> best;
    for (size_t i = 0; i < skeletons.size(); ++i) {
      const Context& c = contexts[skeletons[i].context];
      const double cap = c.ctx->gpu->memory_bytes;
      auto it = best.find(c.base.instance_type);
      const double need = memory[i].total_bytes();
      if (it == best.end() || need / cap < it->second.needed_bytes / it->second.capacity_bytes)
        best[c.base.instance_type] = {c.base.instance_type, need, cap, make_plan(c, skeletons[i])};
    }
    for (auto& [k, v] : best) result.closest.push_back(v);
  }
  result.stages.push_back({"prune_memory", since(t0), survivors.size(), ""});

  // ---- analytical -------------------------------------------------------------------------
  t0 = Clock::now();
  auto cache = make_estimate_cache();
  std::vector<Candidate> evaluated(survivors.size());
  {
    Progress bar("estimating", survivors.size());
    pool.parallel_for(
        survivors.size(),
        [&](size_t k) {
          const Skeleton& s = skeletons[survivors[k]];
          const Context& c = contexts[s.context];
          Candidate cand;
          cand.plan = make_plan(c, s);
          cand.step = estimate_step(cand.plan, *c.ctx, req.analytical, cache.get());
          cand.memory = memory[survivors[k]];
          const double tokens_per_step = static_cast<double>(global_batch) * c.ctx->graph.tokens_per_sample();
          cand.steps = std::ceil(req.tokens / tokens_per_step);
          cand.time_to_train_s = cand.steps * cand.step.step_time_s;
          cand.gpus = cand.plan.world_size();
          const double hours = cand.time_to_train_s / 3600.0;
          if (auto price = on_demand_price(*c.ctx->instance, req.platform)) cand.cost_on_demand_usd = hours * *price * cand.plan.instance_count;
          if (auto price = spot_price(*c.ctx->instance, req.platform)) cand.cost_spot_usd = hours * *price * cand.plan.instance_count;
          evaluated[k] = std::move(cand);
        },
        req.cancel, [&](size_t d) { bar.update(d); });
  }
  result.cancelled = req.cancel && req.cancel->load();
  // Keep only evaluated ones (cancellation may leave some empty).
  std::vector<Candidate> done;
  for (auto& c : evaluated)
    if (c.step.step_time_s > 0) done.push_back(std::move(c));
  for (const auto& c : done) TP_ASSERT(std::isfinite(c.step.step_time_s) && c.step.step_time_s > 0);
  result.stages.push_back({"analytical", since(t0), done.size(), ""});

  // ---- rank -------------------------------------------------------------------------------
  t0 = Clock::now();
  auto key = [&](const Candidate& c) {
    if (req.objective == Objective::cost) {
      auto cost = req.purchase == plan::Purchase::spot ? c.cost_spot_usd : c.cost_on_demand_usd;
      return cost ? *cost : std::numeric_limits<double>::infinity();
    }
    return c.time_to_train_s;
  };
  // Ties broken by the other metric, then the plan's JSON, so the order is total.
  std::vector<std::pair<std::string, size_t>> names;
  std::sort(done.begin(), done.end(), [&](const Candidate& a, const Candidate& b) {
    const double ka = key(a), kb = key(b);
    if (ka != kb) return ka < kb;
    if (a.time_to_train_s != b.time_to_train_s) return a.time_to_train_s < b.time_to_train_s;
    return json::dump(plan::to_json(a.plan)) < json::dump(plan::to_json(b.plan));
  });
  result.ranked = std::move(done);
  result.stages.push_back({"rank", since(t0), result.ranked.size(), fmt::format("by {}", objective_name(req.objective))});
  return result;
}

}  // namespace trainplan::planner
