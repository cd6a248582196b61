// The plan search pipeline: enumerate -> partition -> prune_memory -> analytical -> refine
// (lazy axes, job model) -> simulate -> rank. See search.hpp.
#include "trainplan/planner/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "search_internal.hpp"
#include "trainplan/core/progress.hpp"

namespace trainplan::planner {
namespace {

using namespace detail;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr char kDoesNotFit[] = "does not fit in GPU memory";

void check_request(const SearchRequest& req) {
  if (!(req.tokens > 0)) throw Error("the training work must be positive").hint("give --tokens, e.g. --tokens 300e9");
  if (req.max_gpus < 1)
    throw Error(fmt::format("--max-gpus must be at least 1, got {}", req.max_gpus))
        .hint("give the largest cluster to consider, e.g. --max-gpus 256");
  if (req.objective == Objective::cost_under_deadline && !(req.deadline_s > 0))
    throw Error("the cost-under-deadline objective needs a deadline").hint("give --deadline, e.g. --deadline 30d");
  if (req.objective == Objective::time_under_budget && !(req.budget_usd > 0))
    throw Error("the time-under-budget objective needs a budget").hint("give --budget in US dollars, e.g. --budget 2M");
  if (req.micro_batches.empty() || req.zero_stages.empty() || req.recomputes.empty() || req.schedules.empty() ||
      req.dp_algorithms.empty() || req.bucket_sizes_bytes.empty())
    throw Error("every axis of the search needs at least one value")
        .hint("leave an axis at its default rather than giving it an empty list");
  for (double b : req.bucket_sizes_bytes)
    if (!(b > 0)) throw Error(fmt::format("gradient bucket sizes must be positive, got {}", b)).hint("e.g. --bucket-sizes 25MB,100MB");
}

// Per family after prune_memory: the micro-batches that fit, with their splits and memory.
struct Survivor {
  Skeleton skeleton;
  plan::MemoryBreakdown memory;
  bool fits = true;
};
struct Closest {
  double ratio = kInf;
  double needed = 0, capacity = 0;
  Skeleton skeleton;
};

bool covers(const std::vector<plan::StageAssignment>& st, int units, int count) {
  if (static_cast<int>(st.size()) != count) return false;
  int next = 0;
  for (const auto& a : st) {
    if (a.first_unit != next || a.last_unit < a.first_unit) return false;
    next = a.last_unit + 1;
  }
  return next == units;
}

// The state the refine, simulate and rank stages share.
struct Pool {
  std::vector<Candidate> cands;
  std::vector<uint32_t> family;  // per candidate
  std::vector<char> exact;       // objective values final (not lower bounds)
};

}  // namespace

SearchResult search(const SearchRequest& request, const hw::Catalog& catalog) {
  check_request(request);
  // A framework narrows the lazy axes and the split up front (export_refusal decides the rest).
  SearchRequest req = request;
  if (req.framework) {
    std::erase_if(req.dp_algorithms, [&](plan::DpAlgorithm a) {
      return a == plan::DpAlgorithm::parameter_server ||
             (*req.framework == ExportTarget::deepspeed && a == plan::DpAlgorithm::hierarchical);
    });
    if (req.dp_algorithms.empty())
      throw Error(fmt::format("{} runs none of the requested data-parallel algorithms", export_target_name(*req.framework)))
          .hint("allow ring or tree (--dp-algorithms)");
    if (*req.framework == ExportTarget::deepspeed || *req.framework == ExportTarget::sagemaker) req.partition = PartitionMode::even;
    if (*req.framework == ExportTarget::sagemaker) req.platform = plan::Platform::sagemaker;
  }
  SearchResult result;
  models::ModelSpec spec = models::resolve_model(req.model);
  if (req.seq_len > 0) spec.seq_len = req.seq_len;
  const int64_t default_batch = req.global_batch > 0 ? req.global_batch : default_global_batch(spec);
  result.global_batch = default_batch;
  result.seq_len = spec.seq_len;
  auto cancelled = [&] { return req.cancel && req.cancel->load(); };
  auto check = [&](bool ok) {
    if (req.stages.check_invariants) TP_ASSERT(ok);
  };
  ThreadPool pool(static_cast<size_t>(std::max(0, req.threads)));
  SearchCounts& counts = result.counts;

  // ---- enumerate ----------------------------------------------------------------------------
  auto t0 = Clock::now();
  const Space space = enumerate(req, catalog, default_batch);
  if (space.not_expressible)
    result.dropped[fmt::format("{} cannot run it", export_target_name(*req.framework))] = space.not_expressible;
  counts.enumerated = result.enumerated = space.enumerated;
  counts.families = space.families.size();
  for (const auto& f : space.families) {
    const auto& c = space.contexts[f.context];
    check(static_cast<int>(c.ctx->cluster.num_gpus()) % (f.tp * f.pp * f.cp) == 0 && !f.micro_batches.empty());
  }
  result.stages.push_back({"enumerate", since(t0), space.enumerated,
                           fmt::format("{} instance types, {} cluster sizes, {} families", space.types.size(),
                                       space.contexts.size(), space.families.size())});
  auto ctx_of = [&](uint32_t family) -> const plan::PlanContext& { return *space.contexts[space.families[family].context].ctx; };

  // ---- partition ----------------------------------------------------------------------------
  t0 = Clock::now();
  auto cache = make_estimate_cache();
  PartitionCache splits(space, req.analytical, cache.get());
  MemoryTermsCache memory_terms;
  const bool partitioning = req.stages.partition && req.partition != PartitionMode::even;
  const bool time_splits = partitioning && req.partition == PartitionMode::time;
  std::vector<std::vector<std::shared_ptr<const std::vector<plan::StageAssignment>>>> family_splits(space.families.size());
  size_t pipelined = 0;
  for (const auto& f : space.families) pipelined += f.pp > 1 ? 1 : 0;
  if (time_splits) {
    Progress bar("partitioning", space.families.size());
    pool.parallel_for(
        space.families.size(),
        [&](size_t i) {
          const Family& f = space.families[i];
          if (f.pp == 1) return;
          for (int64_t mb : f.micro_batches) family_splits[i].push_back(splits.time_split(f, mb));
        },
        req.cancel, [&](size_t d) { bar.update(d); });
    counts.partitions_computed = splits.computed();
    for (size_t i = 0; i < space.families.size(); ++i)
      for (const auto& s : family_splits[i])
        check(covers(*s, static_cast<int>(ctx_of(static_cast<uint32_t>(i)).graph.units().size()),
                     space.families[i].pp * space.families[i].vp));
  }
  result.stages.push_back({"partition", since(t0), pipelined,
                           !partitioning ? "off: even split"
                           : time_splits ? fmt::format("{} distinct time-balanced splits", counts.partitions_computed)
                                         : "memory-balanced splits, per candidate (in prune_memory)",
                           partitioning});

  // ---- prune_memory -------------------------------------------------------------------------
  t0 = Clock::now();
  std::vector<std::vector<Survivor>> fam_survivors(space.families.size());
  std::vector<Closest> fam_closest(space.families.size());
  std::vector<size_t> fam_evals(space.families.size(), 0), fam_inferred(space.families.size(), 0),
      fam_out(space.families.size(), 0), fam_repart(space.families.size(), 0);
  {
    Progress bar("memory", space.families.size());
    pool.parallel_for(
        space.families.size(),
        [&](size_t i) {
          const Family& f = space.families[i];
          const plan::PlanContext& ctx = *space.contexts[f.context].ctx;
          for (size_t k = 0; k < f.micro_batches.size(); ++k) {
            Skeleton s;
            s.family = static_cast<uint32_t>(i);
            s.micro_batch = f.micro_batches[k];
            s.algorithm = space.contexts[f.context].base.dp_algorithm;
            s.bucket_size_bytes = space.contexts[f.context].base.bucket_size_bytes;
            if (time_splits && f.pp > 1) s.stages = family_splits[i][k];
            plan::Plan p = make_plan(space, s);
            bool repartitioned = false;
            if (partitioning && f.pp > 1 && req.partition == PartitionMode::memory) {
              if (auto ms = memory_split(p, ctx, req.partition, req.analytical, cache.get(), memory_terms)) {
                p.stages = *ms;
                s.stages = std::make_shared<const std::vector<plan::StageAssignment>>(std::move(*ms));
              }
            }
            plan::MemoryBreakdown mem = peak_memory_of(p, ctx, memory_terms);
            ++fam_evals[i];
            if (!mem.fits() && time_splits && f.pp > 1) {
              // The fastest split does not fit: the fastest one that does, if any.
              if (auto ms = memory_split(p, ctx, req.partition, req.analytical, cache.get(), memory_terms)) {
                p.stages = *ms;
                plan::MemoryBreakdown again = peak_memory_of(p, ctx, memory_terms);
                ++fam_evals[i];
                if (again.fits()) {
                  mem = again;
                  s.stages = std::make_shared<const std::vector<plan::StageAssignment>>(std::move(*ms));
                  repartitioned = true;
                }
              }
            }
            fam_repart[i] += repartitioned ? 1 : 0;
            if (mem.fits() || !req.stages.prune_memory) fam_survivors[i].push_back({s, mem, mem.fits()});
            if (!mem.fits()) {
              const double ratio = mem.total_bytes() / mem.capacity_bytes;
              if (ratio < fam_closest[i].ratio) fam_closest[i] = {ratio, mem.total_bytes(), mem.capacity_bytes, s};
              ++fam_out[i];
              if (req.stages.prune_memory) {
                // Memory grows with the micro-batch: the larger ones cannot fit either.
                fam_inferred[i] += f.micro_batches.size() - k - 1;
                break;
              }
            }
          }
        },
        req.cancel, [&](size_t d) { bar.update(d); });
  }
  std::vector<Survivor> survivors;
  size_t out_of_memory = 0;
  std::map<int, std::pair<Closest, uint32_t>> closest_by_type;  // type index -> (closest, family)
  for (size_t i = 0; i < space.families.size(); ++i) {
    for (auto& s : fam_survivors[i]) survivors.push_back(std::move(s));
    counts.memory_evaluations += fam_evals[i];
    counts.inferred_out_of_memory += fam_inferred[i];
    counts.repartitioned += fam_repart[i];
    out_of_memory += fam_out[i] + fam_inferred[i];
    const Closest& c = fam_closest[i];
    if (std::isfinite(c.ratio)) {
      const int type = space.contexts[space.families[i].context].type_index;
      auto it = closest_by_type.find(type);
      if (it == closest_by_type.end() || c.ratio < it->second.first.ratio) closest_by_type[type] = {c, static_cast<uint32_t>(i)};
    }
  }
  if (out_of_memory) result.dropped[kDoesNotFit] = out_of_memory;
  for (const auto& [type, cf] : closest_by_type)
    result.closest.push_back({space.types[static_cast<size_t>(type)], cf.first.needed, cf.first.capacity, make_plan(space, cf.first.skeleton)});
  if (req.stages.prune_memory)
    for (const auto& s : survivors) check(s.fits);
  result.stages.push_back({"prune_memory", since(t0), survivors.size(),
                           fmt::format("{} memory evaluations, {} larger micro-batches skipped, {} splits redone for memory",
                                       counts.memory_evaluations, counts.inferred_out_of_memory, counts.repartitioned),
                           req.stages.prune_memory});

  // ---- analytical ---------------------------------------------------------------------------
  t0 = Clock::now();
  Pool P;
  {
    std::vector<Candidate> evaluated(survivors.size());
    std::vector<char> done(survivors.size(), 0);
    Progress bar("estimating", survivors.size());
    pool.parallel_for(
        survivors.size(),
        [&](size_t k) {
          const Survivor& sv = survivors[k];
          const plan::PlanContext& ctx = ctx_of(sv.skeleton.family);
          Candidate c;
          c.plan = make_plan(space, sv.skeleton);
          c.step = estimate_step(c.plan, ctx, req.analytical, cache.get());
          c.memory = sv.memory;
          c.fits = sv.fits;
          const double tokens_per_step = static_cast<double>(c.plan.global_batch) * ctx.graph.tokens_per_sample();
          c.steps = std::ceil(req.tokens / tokens_per_step);
          c.gpus = c.plan.world_size();
          settle(req, ctx, c);
          evaluated[k] = std::move(c);
          done[k] = 1;
        },
        req.cancel, [&](size_t d) { bar.update(d); });
    for (size_t k = 0; k < survivors.size(); ++k) {
      if (!done[k]) continue;
      check(std::isfinite(evaluated[k].step.step_time_s) && evaluated[k].step.step_time_s > 0);
      P.cands.push_back(std::move(evaluated[k]));
      P.family.push_back(survivors[k].skeleton.family);
      P.exact.push_back(needs_job_model(req) ? 0 : 1);
    }
  }
  counts.analytical = P.cands.size();
  {
    const double secs = since(t0);
    counts.analytical_per_s = secs > 0 ? static_cast<double>(counts.analytical) / secs : 0;
    result.stages.push_back({"analytical", secs, P.cands.size(), fmt::format("{:.0f} estimates/s", counts.analytical_per_s)});
  }

  // ---- refine: lazy axes (dp algorithm, bucket size) and the job model ----------------------
  t0 = Clock::now();
  {
    struct Item {
      Bound lower;
      size_t base = 0;  // candidate index (variants: the base they vary)
      bool variant = false;
      plan::DpAlgorithm algorithm = plan::DpAlgorithm::ring;
      double bucket = 0;
      bool done = false;
    };
    auto bound_of = [&](double t, std::optional<double> cost) {
      return Bound{objective_key(req, t, cost), t, cost ? *cost : std::numeric_limits<double>::quiet_NaN()};
    };
    std::vector<Item> items;
    std::vector<Bound> exact_bounds;
    const size_t bases = P.cands.size();
    for (size_t i = 0; i < bases; ++i) {
      const Candidate& c = P.cands[i];
      if (P.exact[i]) {
        exact_bounds.push_back(bound_of(c.objective_time_s, c.objective_cost_usd));
      } else {
        auto [t, cost] = lower_bound(req, ctx_of(P.family[i]), c, c.step.step_time_s);
        items.push_back({bound_of(t, cost), i, false, c.plan.dp_algorithm, c.plan.bucket_size_bytes, false});
      }
      if (!req.stages.expand || c.plan.dp_cp() == 1) continue;
      // Variants differ only in data-parallel exposure: without it the step is a lower bound
      // (pipeline, ZeRO parameter gathers and optimizer do not depend on the lazy axes).
      const auto& e = c.step;
      const double floor_s = (e.step_time_s - e.exposed_comm_s(plan::CommPurpose::dp) - e.exposed_comm_s(plan::CommPurpose::ps) -
                              e.exposed_comm_s(plan::CommPurpose::zero_grad)) * (1.0 - 1e-12);
      auto [t, cost] = lower_bound(req, ctx_of(P.family[i]), c, floor_s);
      const std::vector<plan::DpAlgorithm> algs =
          c.plan.zero_stage == 0 ? req.dp_algorithms : std::vector<plan::DpAlgorithm>{req.dp_algorithms.front()};
      for (auto alg : algs)
        for (double bucket : req.bucket_sizes_bytes) {
          if (alg == c.plan.dp_algorithm && bucket == c.plan.bucket_size_bytes) continue;
          items.push_back({bound_of(t, cost), i, true, alg, bucket, false});
        }
    }
    const size_t variant_total = static_cast<size_t>(std::count_if(items.begin(), items.end(), [](const Item& it) { return it.variant; }));
    std::atomic<size_t> job_evals{0};
    // Exact evaluation of one item: a new candidate (variant) or job outcomes (base).
    auto evaluate = [&](const Item& it, Candidate& out, bool& valid) {
      const plan::PlanContext& ctx = ctx_of(P.family[it.base]);
      valid = true;
      if (it.variant) {
        out = P.cands[it.base];
        out.plan.dp_algorithm = it.algorithm;
        out.plan.bucket_size_bytes = it.bucket;
        out.on_demand_job.reset();
        out.spot_job.reset();
        out.memory = peak_memory_of(out.plan, ctx, memory_terms);
        out.fits = out.memory.fits();
        if (!out.fits && req.stages.prune_memory) {
          valid = false;
          return;
        }
        out.step = estimate_step(out.plan, ctx, req.analytical, cache.get());
      } else {
        out = P.cands[it.base];
      }
      if (needs_job_model(req)) {
        if (req.both_purchases) out.on_demand_job = job_outcome(req, ctx, out, plan::Purchase::on_demand, 0);
        out.spot_job = job_outcome(req, ctx, out, plan::Purchase::spot, 0);
        job_evals += req.both_purchases ? 2 : 1;
      }
      settle(req, ctx, out);
    };
    std::vector<size_t> pending(items.size());
    std::iota(pending.begin(), pending.end(), 0);
    Progress bar("refining", items.size());
    size_t evaluated_items = 0;
    while (!pending.empty() && !cancelled()) {
      std::vector<size_t> chosen;
      if (req.stages.lazy) {
        std::vector<Bound> lower;
        for (size_t k : pending) lower.push_back(items[k].lower);
        const std::vector<bool> mm = may_matter(lower, exact_bounds, req.exact_top);
        std::vector<size_t> matter;
        for (size_t j = 0; j < pending.size(); ++j)
          if (mm[j]) matter.push_back(pending[j]);
        if (matter.empty()) break;
        // Best first: the most promising lower bounds, and those on their own frontier.
        std::stable_sort(matter.begin(), matter.end(), [&](size_t a, size_t b) { return items[a].lower.key < items[b].lower.key; });
        const size_t batch = std::max<size_t>(req.exact_top, 256);
        std::vector<char> take(matter.size(), 0);
        for (size_t j = 0; j < std::min(batch, matter.size()); ++j) take[j] = 1;
        std::vector<size_t> by_time(matter.size());
        std::iota(by_time.begin(), by_time.end(), 0);
        std::stable_sort(by_time.begin(), by_time.end(),
                         [&](size_t a, size_t b) { return items[matter[a]].lower.time_s < items[matter[b]].lower.time_s; });
        double best_cost = kInf;
        for (size_t j : by_time) {
          const double cst = items[matter[j]].lower.cost_usd;
          if (std::isfinite(cst) && cst < best_cost) {
            best_cost = cst;
            take[j] = 1;
          }
        }
        for (size_t j = 0; j < matter.size(); ++j)
          if (take[j]) chosen.push_back(matter[j]);
        std::sort(chosen.begin(), chosen.end());
      } else {
        chosen = pending;
      }
      std::vector<Candidate> outs(chosen.size());
      std::vector<char> valid(chosen.size(), 0), done(chosen.size(), 0);
      pool.parallel_for(
          chosen.size(),
          [&](size_t j) {
            bool ok = false;
            evaluate(items[chosen[j]], outs[j], ok);
            valid[j] = ok;
            done[j] = 1;
          },
          req.cancel);
      for (size_t j = 0; j < chosen.size(); ++j) {
        if (!done[j]) continue;
        Item& it = items[chosen[j]];
        it.done = true;
        ++evaluated_items;
        if (!valid[j]) {
          ++result.dropped[kDoesNotFit];
          continue;
        }
        Candidate& c = outs[j];
        const Bound b = bound_of(c.objective_time_s, c.objective_cost_usd);
        // The lower bound held (the lazy stages are exact only if it does).
        check(!(b.key < it.lower.key) || (b.key.violated == it.lower.key.violated &&
                                          b.key.value >= it.lower.key.value * (1 - 1e-9)));
        exact_bounds.push_back(b);
        if (it.variant) {
          P.cands.push_back(std::move(c));
          P.family.push_back(P.family[it.base]);
          P.exact.push_back(1);
          ++counts.expanded;
        } else {
          P.cands[it.base] = std::move(c);
          P.exact[it.base] = 1;
        }
      }
      bar.update(evaluated_items);
      std::vector<size_t> rest;
      for (size_t k : pending)
        if (!items[k].done) rest.push_back(k);
      pending.swap(rest);
    }
    for (size_t k : pending)
      if (items[k].variant) ++counts.expansion_skipped;
    counts.job_evaluations = job_evals.load();
    result.stages.push_back({"refine", since(t0), P.cands.size(),
                             fmt::format("lazy axes: {} of {} variants evaluated; job model: {} evaluations", counts.expanded,
                                         variant_total, counts.job_evaluations),
                             req.stages.expand || needs_job_model(req)});
  }

  // Order by the best-known key (exact, else lower bound), then the other metric, then JSON.
  auto key_of = [&](size_t i) { return objective_key(req, P.cands[i].objective_time_s, P.cands[i].objective_cost_usd); };
  auto order_by_key = [&](std::vector<size_t>& idx) {
    std::vector<Key> keys(P.cands.size());
    for (size_t i : idx) keys[i] = key_of(i);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      if (keys[a] < keys[b]) return true;
      if (keys[b] < keys[a]) return false;
      return json::dump(plan::to_json(P.cands[a].plan)) < json::dump(plan::to_json(P.cands[b].plan));
    });
  };
  std::vector<size_t> order(P.cands.size());
  std::iota(order.begin(), order.end(), 0);
  order_by_key(order);

  // ---- simulate -----------------------------------------------------------------------------
  t0 = Clock::now();
  std::vector<size_t> simulated;
  if (req.simulate_top > 0 && !cancelled()) {
    for (size_t i : order) {
      if (simulated.size() >= req.simulate_top) break;
      if (P.cands[i].fits) simulated.push_back(i);
    }
    std::vector<SimulatedStep> sims(simulated.size());
    std::vector<char> done(simulated.size(), 0);
    Progress bar("simulating", simulated.size());
    pool.parallel_for(
        simulated.size(),
        [&](size_t j) {
          const size_t i = simulated[j];
          sims[j] = simulate_candidate(P.cands[i].plan, ctx_of(P.family[i]));
          done[j] = 1;
        },
        req.cancel, [&](size_t d) { bar.update(d); });
    std::vector<size_t> kept;
    std::vector<double> est, simt;
    for (size_t j = 0; j < simulated.size(); ++j) {
      if (!done[j]) continue;
      const size_t i = simulated[j];
      Candidate& c = P.cands[i];
      check(std::isfinite(sims[j].step_time_s) && sims[j].step_time_s > 0);
      c.simulated = sims[j];
      if (needs_job_model(req)) {
        const plan::PlanContext& ctx = ctx_of(P.family[i]);
        if (req.both_purchases) c.on_demand_job = job_outcome(req, ctx, c, plan::Purchase::on_demand, 0);
        c.spot_job = job_outcome(req, ctx, c, plan::Purchase::spot, 0);
      }
      settle(req, ctx_of(P.family[i]), c);
      est.push_back(c.step.step_time_s);
      simt.push_back(c.simulated->step_time_s);
      kept.push_back(i);
    }
    simulated.swap(kept);
    counts.simulated = simulated.size();
    if (simulated.size() >= 3) result.rank_correlation = spearman(est, simt);
  }
  result.stages.push_back({"simulate", since(t0), simulated.size(),
                           req.simulate_top == 0 ? "off (--simulate-top 0)"
                           : result.rank_correlation
                               ? fmt::format("Spearman rank correlation with the estimate: {:.3f}", *result.rank_correlation)
                               : std::string("too few candidates for a rank correlation"),
                           req.simulate_top > 0});

  // ---- rank ---------------------------------------------------------------------------------
  t0 = Clock::now();
  {
    // The simulated candidates first, in simulated order; then the rest by estimate.
    std::vector<char> is_sim(P.cands.size(), 0);
    for (size_t i : simulated) is_sim[i] = 1;
    std::vector<size_t> first(simulated), rest;
    for (size_t i : order)
      if (!is_sim[i]) rest.push_back(i);
    order_by_key(first);
    std::vector<size_t> final_order = first;
    final_order.insert(final_order.end(), rest.begin(), rest.end());
    // The rows people read get plan::peak_memory itself (the search used a faster mirror of
    // it, equal for GPipe and 1F1B); a disagreement that breaks the fit drops the candidate.
    {
      const size_t rows = std::max({req.exact_top, req.simulate_top, req.spot_rows});
      std::vector<size_t> top(final_order.begin(), final_order.begin() + static_cast<long>(std::min(rows, final_order.size())));
      std::vector<plan::MemoryBreakdown> exact_mem(top.size());
      pool.parallel_for(top.size(), [&](size_t k) { exact_mem[k] = plan::peak_memory(P.cands[top[k]].plan, ctx_of(P.family[top[k]])); });
      std::vector<char> drop(P.cands.size(), 0);
      for (size_t k = 0; k < top.size(); ++k) {
        Candidate& c = P.cands[top[k]];
        c.memory = exact_mem[k];
        if (c.fits && !exact_mem[k].fits() && req.stages.prune_memory) {
          drop[top[k]] = 1;
          ++result.dropped[kDoesNotFit];
        }
        c.fits = exact_mem[k].fits();
      }
      std::erase_if(final_order, [&](size_t i) { return drop[i] != 0; });
    }
    // Monte Carlo percentiles of the whole job for the rows people read.
    if (needs_job_model(req) && req.spot_runs > 0 && !cancelled()) {
      const size_t rows = std::min(req.spot_rows, final_order.size());
      pool.parallel_for(rows, [&](size_t k) {
        const size_t i = final_order[k];
        Candidate& c = P.cands[i];
        const plan::PlanContext& ctx = ctx_of(P.family[i]);
        if (c.spot_job) c.spot_job = job_outcome(req, ctx, c, plan::Purchase::spot, req.spot_runs);
        if (c.on_demand_job) c.on_demand_job = job_outcome(req, ctx, c, plan::Purchase::on_demand, req.spot_runs);
      });
    }
    result.ranked.reserve(final_order.size());
    for (size_t i : final_order) result.ranked.push_back(std::move(P.cands[i]));
    for (size_t k = 1; k < first.size(); ++k)
      check(!(objective_key(req, result.ranked[k].objective_time_s, result.ranked[k].objective_cost_usd) <
              objective_key(req, result.ranked[k - 1].objective_time_s, result.ranked[k - 1].objective_cost_usd)));
    result.pareto = pareto_candidates(result.ranked);
  }
  result.cancelled = cancelled();
  result.stages.push_back({"rank", since(t0), result.ranked.size(),
                           fmt::format("by {}; {} on the (time, cost) Pareto frontier", objective_name(req.objective), result.pareto.size())});
  return result;
}

}  // namespace trainplan::planner
