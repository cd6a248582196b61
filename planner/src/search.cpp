// The plan search as a list of named passes (kPasses below): enumerate -> partition ->
// prune_memory -> analytical -> refine (lazy axes, job model) -> simulate -> rank -> pareto ->
// explain. Each pass is timed (-v), followed by its invariant check, and reports what it kept.
// See search.hpp.
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

// A framework narrows the lazy axes and the split up front (export_refusal decides the rest).
SearchRequest narrow_to_framework(const SearchRequest& request) {
  SearchRequest req = request;
  if (!req.framework) return req;
  std::erase_if(req.dp_algorithms, [&](plan::DpAlgorithm a) {
    return a == plan::DpAlgorithm::parameter_server || a == plan::DpAlgorithm::horovod ||
           (a == plan::DpAlgorithm::smddp && *req.framework != ExportTarget::sagemaker);
  });
  if (req.dp_algorithms.empty())
    throw Error(fmt::format("{} runs none of the requested data-parallel algorithms (no target runs a parameter server or "
                            "Horovod; SMDDP runs only in SageMaker)",
                            export_target_name(*req.framework)))
        .hint("allow ring, tree or hierarchical (--dp-algorithms)");
  if (*req.framework == ExportTarget::deepspeed) req.partition = PartitionMode::even;
  if (*req.framework == ExportTarget::sagemaker) req.platform = plan::Platform::sagemaker;
  return req;
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

// The candidates of the analytical, refine, simulate and rank passes.
struct Pool {
  // One block (a deque of 1.3 kB candidates holds one per node), with room reserved up front for
  // every variant refine may append (virtual memory: only the pages used are touched), so it is
  // never moved; rank permutes it into result.ranked in place.
  std::vector<Candidate> cands;
  std::vector<uint32_t> family;  // per candidate
  std::vector<char> exact;       // objective values final (not lower bounds)
};

// What the passes share: the request, the space and its caches, and what each pass leaves for
// the next (survivors -> pool of candidates -> order -> simulated -> result.ranked).
struct SearchState {
  SearchState(const SearchRequest& r, const hw::Catalog& c, SearchResult& res)
      : req(r), catalog(c), result(res), pool(static_cast<size_t>(std::max(0, r.threads))), memory_terms(r.stages.memo) {}
  const SearchRequest& req;
  const hw::Catalog& catalog;
  SearchResult& result;
  ThreadPool pool;
  int64_t default_batch = 0;
  Space space;                                   // enumerate
  std::shared_ptr<EstimateCache> cache;          // partition on
  std::unique_ptr<PartitionCache> splits;
  MemoryTermsCache memory_terms;
  bool partitioning = false, time_splits = false;
  std::vector<std::vector<std::shared_ptr<const std::vector<plan::StageAssignment>>>> family_splits;  // per family, per micro-batch
  std::vector<Survivor> survivors;               // prune_memory
  Pool P;                                        // analytical, refine
  std::vector<size_t> order;                     // simulate: every candidate by key
  std::vector<size_t> simulated;                 // simulate: those simulated, in `order`'s order
  size_t simulated_first = 0;                    // rank: result.ranked's first rows that were simulated

  bool cancelled() const { return req.cancel && req.cancel->load(); }
  void check(bool ok) const {
    if (req.stages.check_invariants) TP_ASSERT(ok);
  }
  const plan::PlanContext& ctx_of(uint32_t family) const { return *space.contexts[space.families[family].context].ctx; }
  // Order by the best-known key (exact, else lower bound), then the other metric, then the
  // compute step (among plans a data loader holds to the same pace, the one with the most
  // headroom), then JSON.
  void order_by_key(std::vector<size_t>& idx) const {
    std::vector<Key> keys(P.cands.size());
    for (size_t i : idx) keys[i] = objective_key(req, P.cands[i].objective_time_s, P.cands[i].objective_cost_usd);
    const auto compute_s = [&](size_t i) {
      const Candidate& c = P.cands[i];
      return c.simulated ? c.simulated->step_time_s : c.step.step_time_s;
    };
    // A plan's JSON, written on its first tie and kept for the rest of the sort.
    std::vector<std::string> dumps(P.cands.size());
    const auto dump_of = [&](size_t i) -> const std::string& {
      if (dumps[i].empty()) dumps[i] = json::dump(plan::to_json(P.cands[i].plan));
      return dumps[i];
    };
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      if (keys[a] < keys[b]) return true;
      if (keys[b] < keys[a]) return false;
      if (P.cands[a].loader_bound() && P.cands[b].loader_bound() && compute_s(a) != compute_s(b)) return compute_s(a) < compute_s(b);
      return dump_of(a) < dump_of(b);
    });
  }
};

// What a pass reports under -v (its name and time come from the pass list).
struct PassOutcome {
  size_t kept = 0;
  std::string note;
  bool enabled = true;
};

// ---- enumerate --------------------------------------------------------------------------------
PassOutcome run_enumerate(SearchState& st) {
  st.space = enumerate(st.req, st.catalog, st.default_batch, &st.pool);
  const Space& space = st.space;
  if (space.not_expressible)
    st.result.dropped[fmt::format("{} cannot run it", export_target_name(*st.req.framework))] = space.not_expressible;
  st.result.unpriced = space.unpriced;
  st.result.not_offered = space.not_offered;
  st.result.region = st.catalog.region();
  st.result.counts.enumerated = st.result.enumerated = space.enumerated;
  st.result.counts.families = space.families.size();
  return {space.enumerated, fmt::format("{} instance types, {} cluster sizes, {} families", space.types.size(),
                                        space.contexts.size(), space.families.size())};
}
void check_enumerate(const SearchState& st) {
  for (const auto& f : st.space.families) {
    const auto& c = st.space.contexts[f.context];
    st.check(static_cast<int>(c.ctx->cluster.num_gpus()) % (f.tp * f.pp * f.cp) == 0 && !f.micro_batches.empty());
  }
}

// ---- partition --------------------------------------------------------------------------------
PassOutcome run_partition(SearchState& st) {
  const SearchRequest& req = st.req;
  const Space& space = st.space;
  st.cache = make_estimate_cache();
  st.splits = std::make_unique<PartitionCache>(space, req, st.cache.get());
  st.partitioning = req.stages.partition && req.partition != PartitionMode::even;
  st.time_splits = st.partitioning && req.partition == PartitionMode::time;
  st.family_splits.assign(space.families.size(), {});
  size_t pipelined = 0;
  for (const auto& f : space.families) pipelined += f.pp > 1 ? 1 : 0;
  if (st.time_splits) {
    Progress bar("partitioning", space.families.size());
    st.pool.parallel_for(
        space.families.size(),
        [&](size_t i) {
          const Family& f = space.families[i];
          if (f.pp == 1) return;
          for (int64_t mb : f.micro_batches) st.family_splits[i].push_back(st.splits->time_split(f, mb));
        },
        req.cancel, [&](size_t d) { bar.update(d); });
    st.result.counts.partitions_computed = st.splits->computed();
  }
  return {pipelined,
          !st.partitioning ? "off: even split"
          : st.time_splits ? fmt::format("{} distinct time-balanced splits", st.result.counts.partitions_computed)
                           : "memory-balanced splits, per candidate (in prune_memory)",
          st.partitioning};
}
void check_partition(const SearchState& st) {
  for (size_t i = 0; i < st.space.families.size(); ++i)
    for (const auto& s : st.family_splits[i])
      st.check(covers(*s, static_cast<int>(st.ctx_of(static_cast<uint32_t>(i)).graph.units().size()),
                      st.space.families[i].pp * st.space.families[i].vp));
}

// ---- prune_memory -----------------------------------------------------------------------------
// One family's outcome: the micro-batches that fit (all of them with prune_memory off), the
// one closest to fitting, and counts.
struct FamilyMemory {
  std::vector<Survivor> survivors;
  Closest closest;
  size_t evals = 0, inferred = 0, out = 0, repartitioned = 0;
};

// The skeleton of family i at its k-th micro-batch, its split chosen (time-balanced, or
// memory-balanced, or redone under the memory limit when the fastest does not fit), its memory.
std::pair<Skeleton, plan::MemoryBreakdown> fit_micro_batch(SearchState& st, size_t i, size_t k, FamilyMemory& fm) {
  const SearchRequest& req = st.req;
  const Family& f = st.space.families[i];
  const plan::PlanContext& ctx = *st.space.contexts[f.context].ctx;
  Skeleton s;
  s.family = static_cast<uint32_t>(i);
  s.micro_batch = f.micro_batches[k];
  s.algorithm = st.space.contexts[f.context].base.dp_algorithm;
  s.bucket_size_bytes = st.space.contexts[f.context].base.bucket_size_bytes;
  if (st.time_splits && f.pp > 1) s.stages = st.family_splits[i][k];
  plan::Plan p = make_plan(st.space, s);
  bool repartitioned = false;
  if (st.partitioning && f.pp > 1 && req.partition == PartitionMode::memory) {
    if (auto ms = memory_split(p, ctx, req.partition, req.analytical_for(*ctx.gpu), st.cache.get(), st.memory_terms)) {
      p.stages = *ms;
      s.stages = std::make_shared<const std::vector<plan::StageAssignment>>(std::move(*ms));
    }
  }
  plan::MemoryBreakdown mem = peak_memory_of(p, ctx, st.memory_terms);
  ++fm.evals;
  if (!mem.fits() && st.time_splits && f.pp > 1) {
    // The fastest split does not fit: the fastest one that does, if any.
    if (auto ms = memory_split(p, ctx, req.partition, req.analytical_for(*ctx.gpu), st.cache.get(), st.memory_terms)) {
      p.stages = *ms;
      plan::MemoryBreakdown again = peak_memory_of(p, ctx, st.memory_terms);
      ++fm.evals;
      if (again.fits()) {
        mem = again;
        s.stages = std::make_shared<const std::vector<plan::StageAssignment>>(std::move(*ms));
        repartitioned = true;
      }
    }
  }
  fm.repartitioned += repartitioned ? 1 : 0;
  return {std::move(s), mem};
}

// Family i's micro-batches in increasing order until one does not fit.
void prune_family(SearchState& st, size_t i, FamilyMemory& fm) {
  const Family& f = st.space.families[i];
  for (size_t k = 0; k < f.micro_batches.size(); ++k) {
    auto [s, mem] = fit_micro_batch(st, i, k, fm);
    if (mem.fits() || !st.req.stages.prune_memory) fm.survivors.push_back({s, mem, mem.fits()});
    if (!mem.fits()) {
      const double ratio = mem.total_bytes() / mem.capacity_bytes;
      if (ratio < fm.closest.ratio) fm.closest = {ratio, mem.total_bytes(), mem.capacity_bytes, s};
      ++fm.out;
      if (st.req.stages.prune_memory) {
        // Memory grows with the micro-batch: the larger ones cannot fit either.
        fm.inferred += f.micro_batches.size() - k - 1;
        break;
      }
    }
  }
}

PassOutcome run_prune_memory(SearchState& st) {
  const Space& space = st.space;
  SearchCounts& counts = st.result.counts;
  std::vector<FamilyMemory> fams(space.families.size());
  {
    Progress bar("memory", space.families.size());
    st.pool.parallel_for(
        space.families.size(), [&](size_t i) { prune_family(st, i, fams[i]); }, st.req.cancel,
        [&](size_t d) { bar.update(d); });
  }
  size_t out_of_memory = 0;
  std::map<int, std::pair<Closest, uint32_t>> closest_by_type;  // type index -> (closest, family)
  for (size_t i = 0; i < space.families.size(); ++i) {
    FamilyMemory& fm = fams[i];
    for (auto& s : fm.survivors) st.survivors.push_back(std::move(s));
    counts.memory_evaluations += fm.evals;
    counts.inferred_out_of_memory += fm.inferred;
    counts.repartitioned += fm.repartitioned;
    out_of_memory += fm.out + fm.inferred;
    const Closest& c = fm.closest;
    if (std::isfinite(c.ratio)) {
      const int type = space.contexts[space.families[i].context].type_index;
      auto it = closest_by_type.find(type);
      if (it == closest_by_type.end() || c.ratio < it->second.first.ratio) closest_by_type[type] = {c, static_cast<uint32_t>(i)};
    }
  }
  // No split is asked for after this pass: the memo and the per-family lists (the survivors keep
  // the splits they use) are freed for the candidates to reuse.
  st.memory_terms.forget_splits();
  std::vector<std::vector<std::shared_ptr<const std::vector<plan::StageAssignment>>>>().swap(st.family_splits);
  if (out_of_memory) st.result.dropped[kDoesNotFit] = out_of_memory;
  for (const auto& [type, cf] : closest_by_type)
    st.result.closest.push_back(
        {space.types[static_cast<size_t>(type)], cf.first.needed, cf.first.capacity, make_plan(space, cf.first.skeleton)});
  return {st.survivors.size(),
          fmt::format("{} memory evaluations, {} larger micro-batches skipped, {} splits redone for memory",
                      counts.memory_evaluations, counts.inferred_out_of_memory, counts.repartitioned),
          st.req.stages.prune_memory};
}
void check_prune_memory(const SearchState& st) {
  if (st.req.stages.prune_memory)
    for (const auto& s : st.survivors) st.check(s.fits);
}

// ---- analytical -------------------------------------------------------------------------------
Candidate estimate_survivor(const SearchState& st, const Survivor& sv) {
  const SearchRequest& req = st.req;
  const plan::PlanContext& ctx = st.ctx_of(sv.skeleton.family);
  Candidate c;
  c.plan = make_plan(st.space, sv.skeleton);
  c.step = estimate_step(c.plan, ctx, req.analytical_for(*ctx.gpu), st.cache.get());
  c.memory = sv.memory;
  c.fits = sv.fits;
  sim::DataInputSpec input = st.space.contexts[st.space.families[sv.skeleton.family].context].input;
  input.samples_per_step = c.plan.global_batch;
  c.data_loader_s = sim::input_time_per_step_s(input, c.plan.instance_count);
  const double tokens_per_step = static_cast<double>(c.plan.global_batch) * ctx.graph.tokens_per_sample();
  c.steps = std::ceil(req.tokens / tokens_per_step);
  c.gpus = c.plan.world_size();
  settle(req, ctx, c);
  return c;
}

PassOutcome run_analytical(SearchState& st) {
  const auto t0 = Clock::now();
  const std::vector<Survivor>& survivors = st.survivors;
  Pool& P = st.P;  // empty before this pass; estimated in place, then closed up where cancelled
  // Room for the lazy axes' variants refine may append: at most one per (algorithm, bucket).
  size_t room = survivors.size();
  if (st.req.stages.expand)
    for (const Survivor& sv : survivors)
      room += (st.space.families[sv.skeleton.family].zero == 0 ? st.req.dp_algorithms.size() : 1) *
              st.req.bucket_sizes_bytes.size();
  P.cands.reserve(room);
  P.cands.resize(survivors.size());
  std::vector<char> done(survivors.size(), 0);
  {
    Progress bar("estimating", survivors.size());
    st.pool.parallel_for(
        survivors.size(),
        [&](size_t k) {
          P.cands[k] = estimate_survivor(st, survivors[k]);
          done[k] = 1;
        },
        st.req.cancel, [&](size_t d) { bar.update(d); });
  }
  size_t kept = 0;
  for (size_t k = 0; k < survivors.size(); ++k) {
    if (!done[k]) continue;
    if (kept != k) P.cands[kept] = std::move(P.cands[k]);
    P.family.push_back(survivors[k].skeleton.family);
    P.exact.push_back(needs_job_model(st.req) ? 0 : 1);
    ++kept;
  }
  P.cands.resize(kept);
  std::vector<Survivor>().swap(st.survivors);  // now candidates
  SearchCounts& counts = st.result.counts;
  counts.analytical = st.P.cands.size();
  const double secs = since(t0);
  counts.analytical_per_s = secs > 0 ? static_cast<double>(counts.analytical) / secs : 0;
  return {st.P.cands.size(), fmt::format("{:.0f} estimates/s", counts.analytical_per_s)};
}
void check_analytical(const SearchState& st) {
  for (const auto& c : st.P.cands) st.check(std::isfinite(c.step.step_time_s) && c.step.step_time_s > 0);
}

// ---- refine: lazy axes (dp algorithm, bucket size) and the job model --------------------------
// A candidate not yet exact: a base whose job model is pending, or a lazy-axis variant of one.
struct RefineItem {
  Bound lower;
  size_t base = 0;  // candidate index (variants: the base they vary)
  bool variant = false;
  plan::DpAlgorithm algorithm = plan::DpAlgorithm::ring;
  double bucket = 0;
  bool done = false;
};

Bound bound_of(const SearchRequest& req, double t, std::optional<double> cost) {
  return Bound{objective_key(req, t, cost), t, cost ? *cost : std::numeric_limits<double>::quiet_NaN()};
}

// The items to refine (with their lower bounds) and the bounds of the candidates already exact.
void refine_items(const SearchState& st, std::vector<RefineItem>& items, std::vector<Bound>& exact_bounds) {
  const SearchRequest& req = st.req;
  const Pool& P = st.P;
  for (size_t i = 0; i < P.cands.size(); ++i) {
    const Candidate& c = P.cands[i];
    if (P.exact[i]) {
      exact_bounds.push_back(bound_of(req, c.objective_time_s, c.objective_cost_usd));
    } else {
      auto [t, cost] = lower_bound(req, st.ctx_of(P.family[i]), c, c.step.step_time_s);
      items.push_back({bound_of(req, t, cost), i, false, c.plan.dp_algorithm, c.plan.bucket_size_bytes, false});
    }
    if (!req.stages.expand || c.plan.dp_cp() == 1) continue;
    // Variants differ only in data-parallel exposure: without it the step is a lower bound
    // (pipeline, ZeRO parameter gathers and optimizer do not depend on the lazy axes).
    const auto& e = c.step;
    const double floor_s = (e.step_time_s - e.exposed_comm_s(plan::CommPurpose::dp) - e.exposed_comm_s(plan::CommPurpose::ps) -
                            e.exposed_comm_s(plan::CommPurpose::zero_grad)) * (1.0 - 1e-12);
    auto [t, cost] = lower_bound(req, st.ctx_of(P.family[i]), c, floor_s);
    const std::vector<plan::DpAlgorithm> algs =
        c.plan.zero_stage == 0 ? req.dp_algorithms : std::vector<plan::DpAlgorithm>{req.dp_algorithms.front()};
    for (auto alg : algs)
      for (double bucket : req.bucket_sizes_bytes) {
        if (alg == c.plan.dp_algorithm && bucket == c.plan.bucket_size_bytes) continue;
        items.push_back({bound_of(req, t, cost), i, true, alg, bucket, false});
      }
  }
}

// Exact evaluation of one item: a new candidate (variant) or job outcomes (base); false when a
// variant does not fit (and prune_memory is on).
bool evaluate_item(SearchState& st, const RefineItem& it, Candidate& out, std::atomic<size_t>& job_evals) {
  const SearchRequest& req = st.req;
  const plan::PlanContext& ctx = st.ctx_of(st.P.family[it.base]);
  out = st.P.cands[it.base];
  if (it.variant) {
    out.plan.dp_algorithm = it.algorithm;
    out.plan.bucket_size_bytes = it.bucket;
    out.on_demand_job.reset();
    out.spot_job.reset();
    out.memory = peak_memory_of(out.plan, ctx, st.memory_terms);
    out.fits = out.memory.fits();
    if (!out.fits && req.stages.prune_memory) return false;
    out.step = estimate_step(out.plan, ctx, req.analytical_for(*ctx.gpu), st.cache.get());
  }
  if (needs_job_model(req)) {
    if (req.both_purchases) out.on_demand_job = job_outcome(req, ctx, out, plan::Purchase::on_demand, 0);
    out.spot_job = job_outcome(req, ctx, out, plan::Purchase::spot, 0);
    job_evals += req.both_purchases ? 2 : 1;
  }
  settle(req, ctx, out);
  return true;
}

// The next batch to make exact (sorted indices into items): with lazy on, the most promising
// lower bounds that may still matter and those on their own frontier; empty when none may.
std::vector<size_t> next_batch(const SearchState& st, const std::vector<RefineItem>& items, const std::vector<size_t>& pending,
                               const std::vector<Bound>& exact_bounds) {
  const SearchRequest& req = st.req;
  if (!req.stages.lazy) return pending;
  std::vector<Bound> lower;
  for (size_t k : pending) lower.push_back(items[k].lower);
  const std::vector<bool> mm = may_matter(lower, exact_bounds, req.exact_top);
  std::vector<size_t> matter, chosen;
  for (size_t j = 0; j < pending.size(); ++j)
    if (mm[j]) matter.push_back(pending[j]);
  if (matter.empty()) return chosen;
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
  return chosen;
}

// Makes the chosen items exact (in parallel) and folds them into the pool; returns how many
// were evaluated.
size_t refine_batch(SearchState& st, std::vector<RefineItem>& items, const std::vector<size_t>& chosen,
                    std::vector<Bound>& exact_bounds, std::atomic<size_t>& job_evals) {
  Pool& P = st.P;
  std::vector<Candidate> outs(chosen.size());
  std::vector<char> valid(chosen.size(), 0), done(chosen.size(), 0);
  st.pool.parallel_for(
      chosen.size(),
      [&](size_t j) {
        valid[j] = evaluate_item(st, items[chosen[j]], outs[j], job_evals);
        done[j] = 1;
      },
      st.req.cancel);
  size_t evaluated = 0;
  for (size_t j = 0; j < chosen.size(); ++j) {
    if (!done[j]) continue;
    RefineItem& it = items[chosen[j]];
    it.done = true;
    ++evaluated;
    if (!valid[j]) {
      ++st.result.dropped[kDoesNotFit];
      continue;
    }
    Candidate& c = outs[j];
    const Bound b = bound_of(st.req, c.objective_time_s, c.objective_cost_usd);
    // The lower bound held (the lazy stages are exact only if it does).
    st.check(!(b.key < it.lower.key) ||
             (b.key.violated == it.lower.key.violated && b.key.value >= it.lower.key.value * (1 - 1e-9)));
    exact_bounds.push_back(b);
    if (it.variant) {
      P.cands.push_back(std::move(c));
      P.family.push_back(P.family[it.base]);
      P.exact.push_back(1);
      ++st.result.counts.expanded;
    } else {
      P.cands[it.base] = std::move(c);
      P.exact[it.base] = 1;
    }
  }
  return evaluated;
}

PassOutcome run_refine(SearchState& st) {
  const SearchRequest& req = st.req;
  SearchCounts& counts = st.result.counts;
  std::vector<RefineItem> items;
  std::vector<Bound> exact_bounds;
  refine_items(st, items, exact_bounds);
  const size_t variant_total =
      static_cast<size_t>(std::count_if(items.begin(), items.end(), [](const RefineItem& it) { return it.variant; }));
  std::atomic<size_t> job_evals{0};
  std::vector<size_t> pending(items.size());
  std::iota(pending.begin(), pending.end(), 0);
  Progress bar("refining", items.size());
  size_t evaluated_items = 0;
  while (!pending.empty() && !st.cancelled()) {
    const std::vector<size_t> chosen = next_batch(st, items, pending, exact_bounds);
    if (chosen.empty()) break;
    evaluated_items += refine_batch(st, items, chosen, exact_bounds, job_evals);
    bar.update(evaluated_items);
    std::vector<size_t> rest;
    for (size_t k : pending)
      if (!items[k].done) rest.push_back(k);
    pending.swap(rest);
  }
  for (size_t k : pending)
    if (items[k].variant) ++counts.expansion_skipped;
  counts.job_evaluations = job_evals.load();
  return {st.P.cands.size(),
          fmt::format("lazy axes: {} of {} variants evaluated; job model: {} evaluations", counts.expanded, variant_total,
                      counts.job_evaluations),
          req.stages.expand || needs_job_model(req)};
}
void check_refine(const SearchState& st) {
  st.check(st.P.family.size() == st.P.cands.size() && st.P.exact.size() == st.P.cands.size());
}

// ---- simulate ---------------------------------------------------------------------------------
// The best `simulate_top` that fit by key, simulated; their job outcomes and objective redone
// with the simulated step time.
PassOutcome run_simulate(SearchState& st) {
  const SearchRequest& req = st.req;
  Pool& P = st.P;
  st.order.resize(P.cands.size());
  std::iota(st.order.begin(), st.order.end(), 0);
  st.order_by_key(st.order);
  if (req.simulate_top > 0 && !st.cancelled()) {
    std::vector<size_t> chosen;
    for (size_t i : st.order) {
      if (chosen.size() >= req.simulate_top) break;
      if (P.cands[i].fits) chosen.push_back(i);
    }
    std::vector<SimulatedStep> sims(chosen.size());
    std::vector<char> done(chosen.size(), 0);
    {
      Progress bar("simulating", chosen.size());
      st.pool.parallel_for(
          chosen.size(),
          [&](size_t j) {
            const plan::PlanContext& cctx = st.ctx_of(P.family[chosen[j]]);
            sims[j] = simulate_candidate(P.cands[chosen[j]].plan, cctx, req.analytical_for(*cctx.gpu));
            done[j] = 1;
          },
          req.cancel, [&](size_t d) { bar.update(d); });
    }
    std::vector<double> est, simt;
    for (size_t j = 0; j < chosen.size(); ++j) {
      if (!done[j]) continue;
      const size_t i = chosen[j];
      Candidate& c = P.cands[i];
      const plan::PlanContext& ctx = st.ctx_of(P.family[i]);
      c.simulated = sims[j];
      if (needs_job_model(req)) {
        if (req.both_purchases) c.on_demand_job = job_outcome(req, ctx, c, plan::Purchase::on_demand, 0);
        c.spot_job = job_outcome(req, ctx, c, plan::Purchase::spot, 0);
      }
      settle(req, ctx, c);
      est.push_back(c.step.step_time_s);
      simt.push_back(c.simulated->step_time_s);
      st.simulated.push_back(i);
    }
    st.result.counts.simulated = st.simulated.size();
    if (st.simulated.size() >= 3) st.result.rank_correlation = spearman(est, simt);
  }
  return {st.simulated.size(),
          req.simulate_top == 0 ? "off (--simulate-top 0)"
          : st.result.rank_correlation
              ? fmt::format("Spearman rank correlation with the estimate: {:.3f}", *st.result.rank_correlation)
              : std::string("too few candidates for a rank correlation"),
          req.simulate_top > 0};
}
void check_simulate(const SearchState& st) {
  for (size_t i : st.simulated) {
    const auto& sim = st.P.cands[i].simulated;
    st.check(sim && std::isfinite(sim->step_time_s) && sim->step_time_s > 0);
  }
}

// ---- rank -------------------------------------------------------------------------------------
// The rows people read get plan::peak_memory itself (the search used a faster mirror of it,
// equal for GPipe and 1F1B); a disagreement that breaks the fit drops the candidate.
void recheck_memory_of_rows(SearchState& st, std::vector<size_t>& final_order) {
  const SearchRequest& req = st.req;
  const size_t rows = std::max({req.exact_top, req.simulate_top, req.spot_rows});
  std::vector<size_t> top(final_order.begin(), final_order.begin() + static_cast<long>(std::min(rows, final_order.size())));
  std::vector<plan::MemoryBreakdown> exact_mem(top.size());
  st.pool.parallel_for(top.size(),
                       [&](size_t k) { exact_mem[k] = plan::peak_memory(st.P.cands[top[k]].plan, st.ctx_of(st.P.family[top[k]])); });
  std::vector<char> drop(st.P.cands.size(), 0);
  for (size_t k = 0; k < top.size(); ++k) {
    Candidate& c = st.P.cands[top[k]];
    c.memory = exact_mem[k];
    if (c.fits && !exact_mem[k].fits() && req.stages.prune_memory) {
      drop[top[k]] = 1;
      ++st.result.dropped[kDoesNotFit];
    }
    c.fits = exact_mem[k].fits();
  }
  std::erase_if(final_order, [&](size_t i) { return drop[i] != 0; });
}

// Monte Carlo percentiles of the whole job for the rows people read.
void monte_carlo_rows(SearchState& st, const std::vector<size_t>& final_order) {
  const SearchRequest& req = st.req;
  if (!(needs_job_model(req) && req.spot_runs > 0 && !st.cancelled())) return;
  const size_t rows = std::min(req.spot_rows, final_order.size());
  st.pool.parallel_for(rows, [&](size_t k) {
    const size_t i = final_order[k];
    Candidate& c = st.P.cands[i];
    const plan::PlanContext& ctx = st.ctx_of(st.P.family[i]);
    if (c.spot_job) c.spot_job = job_outcome(req, ctx, c, plan::Purchase::spot, req.spot_runs);
    if (c.on_demand_job) c.on_demand_job = job_outcome(req, ctx, c, plan::Purchase::on_demand, req.spot_runs);
  });
}

// Reorders `v` so that v[k] is the old v[order[k]], keeping only those (`order` holds distinct
// indices), by swaps in place: no second copy of the candidates.
template <typename T>
void permute_prefix(std::vector<T>& v, const std::vector<size_t>& order) {
  std::vector<size_t> slot(v.size()), held(v.size());  // slot[i]: where old i is; held[s]: old index at s
  std::iota(slot.begin(), slot.end(), 0);
  std::iota(held.begin(), held.end(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t s = slot[order[k]];
    if (s == k) continue;
    std::swap(v[k], v[s]);
    const size_t displaced = held[k];
    held[k] = order[k];
    held[s] = displaced;
    slot[displaced] = s;
    slot[order[k]] = k;
  }
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(order.size()), v.end());
}

PassOutcome run_rank(SearchState& st) {
  // The simulated candidates first, in simulated order; then the rest by estimate.
  std::vector<char> is_sim(st.P.cands.size(), 0);
  for (size_t i : st.simulated) is_sim[i] = 1;
  std::vector<size_t> final_order(st.simulated);
  st.order_by_key(final_order);
  st.simulated_first = final_order.size();
  for (size_t i : st.order)
    if (!is_sim[i]) final_order.push_back(i);
  recheck_memory_of_rows(st, final_order);
  monte_carlo_rows(st, final_order);
  permute_prefix(st.P.cands, final_order);
  st.result.ranked = std::move(st.P.cands);
  st.P.cands.clear();
  return {st.result.ranked.size(), fmt::format("by {}", objective_name(st.req.objective))};
}
void check_rank(const SearchState& st) {
  const auto& ranked = st.result.ranked;
  for (size_t k = 1; k < std::min(st.simulated_first, ranked.size()); ++k)
    st.check(!(objective_key(st.req, ranked[k].objective_time_s, ranked[k].objective_cost_usd) <
               objective_key(st.req, ranked[k - 1].objective_time_s, ranked[k - 1].objective_cost_usd)));
}

// ---- pareto -----------------------------------------------------------------------------------
PassOutcome run_pareto(SearchState& st) {
  st.result.pareto = pareto_candidates(st.result.ranked);
  return {st.result.pareto.size(), "on the (time, cost) Pareto frontier"};
}
void check_pareto(const SearchState& st) {
  const auto& r = st.result.ranked;
  const auto& front = st.result.pareto;
  for (size_t k = 0; k < front.size(); ++k) {
    st.check(front[k] < r.size() && r[front[k]].objective_cost_usd && std::isfinite(*r[front[k]].objective_cost_usd));
    if (k > 0)  // fastest first; each one cheaper than the faster ones
      st.check(r[front[k]].objective_time_s >= r[front[k - 1]].objective_time_s &&
               *r[front[k]].objective_cost_usd < *r[front[k - 1]].objective_cost_usd);
  }
}

// ---- explain ----------------------------------------------------------------------------------
PassOutcome run_explain(SearchState& st) {
  if (st.result.ranked.size() < 2) return {0, "fewer than two plans: nothing to compare"};
  st.result.explanation = explain(st.result.ranked[0], st.result.ranked[1]);
  return {2, fmt::format("#1 against #2 over {} terms", st.result.explanation->rows.size())};
}
void check_explain(const SearchState& st) { st.check(!st.result.explanation || !st.result.explanation->rows.empty()); }

// The pipeline (DuckDB's optimizer is the model: a list of named passes, each timed and
// followed by its invariant check; `--off` switches parts of some off through req.stages).
struct Pass {
  const char* name;
  PassOutcome (*run)(SearchState&);
  void (*check)(const SearchState&);
};
constexpr Pass kPasses[] = {
    {"enumerate", run_enumerate, check_enumerate},
    {"partition", run_partition, check_partition},
    {"prune_memory", run_prune_memory, check_prune_memory},
    {"analytical", run_analytical, check_analytical},
    {"refine", run_refine, check_refine},
    {"simulate", run_simulate, check_simulate},
    {"rank", run_rank, check_rank},
    {"pareto", run_pareto, check_pareto},
    {"explain", run_explain, check_explain},
};

}  // namespace

SearchResult search(const SearchRequest& request, const hw::Catalog& catalog) {
  check_request(request);
  const SearchRequest req = narrow_to_framework(request);
  SearchResult result;
  models::ModelSpec spec = models::resolve_model(req.model);
  if (req.seq_len > 0) models::set_seq_len(spec, req.seq_len, "--seq-len");
  SearchState st(req, catalog, result);
  st.default_batch = req.global_batch > 0 ? req.global_batch : default_global_batch(spec);
  result.global_batch = st.default_batch;
  result.seq_len = spec.seq_len;
  for (const Pass& pass : kPasses) {
    const auto t0 = Clock::now();
    PassOutcome out = pass.run(st);
    if (req.stages.check_invariants) pass.check(st);
    result.stages.push_back({pass.name, since(t0), out.kept, std::move(out.note), out.enabled});
  }
  result.cancelled = st.cancelled();
  // The contexts (each cluster with its route caches) are most of what the state frees: freed
  // on the pool rather than one by one when it goes out of scope.
  st.pool.parallel_for(st.space.contexts.size(), [&](size_t i) { st.space.contexts[i].ctx.reset(); });
  return result;
}

}  // namespace trainplan::planner
