// Building a report: what the renderers show, computed once. See report.hpp.
#include "trainplan/reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/simulator/job_builder.hpp"

namespace trainplan::reports {
namespace {

using planner::Candidate;
using planner::on_demand_price;
using planner::SearchRequest;
using planner::SearchResult;
using planner::spot_price;

// Times the parts of building a report (Report::timings).
class Stopwatch {
 public:
  explicit Stopwatch(Report& r) : report_(r), start_(Clock::now()) {}
  void lap(const std::string& name) {
    const auto now = Clock::now();
    report_.timings.emplace_back(name, std::chrono::duration<double>(now - start_).count());
    start_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Report& report_;
  Clock::time_point start_;
};

// A purchase option's job with the interruption model that drives it.
struct PricedJob {
  PurchaseOutcome outcome;
  sim::JobSpec job;
  sim::InterruptionModel model = sim::InterruptionModel::none();
};

sim::MonteCarloOptions mc_options(const ReportOptions& o, bool keep_runs) {
  sim::MonteCarloOptions mc;
  mc.runs = o.spot_runs;
  mc.seed = o.seed;
  mc.threads = o.threads;
  mc.keep_runs = keep_runs;
  return mc;
}

std::string purchase_label(sim::PurchaseOption purchase, int nodes, int on_demand_nodes) {
  if (purchase != sim::PurchaseOption::blend) return std::string(sim::purchase_option_name(purchase));
  return fmt::format("blend ({} on-demand + {} spot)", on_demand_nodes, nodes - on_demand_nodes);
}

// The job model's options for `p`: its platform, the default data input and checkpoint
// storage (S3), no evaluation; across AZs the bytes a simulated step sends between AZs (the
// bytes do not depend on the calibration).
sim::JobOptions job_options(const plan::Plan& p, const plan::PlanContext& ctx, double step_time_s, double tokens,
                            sim::PurchaseOption purchase, int on_demand_nodes) {
  sim::JobOptions jo;
  if (p.placement.azs > 1) jo.inter_az_bytes_per_step = planner::simulate_candidate(p, ctx).inter_az_bytes;
  jo.step_time_s = step_time_s;
  jo.tokens = tokens;
  jo.purchase = purchase;
  jo.on_demand_nodes = on_demand_nodes;
  jo.platform = p.platform;
  return jo;
}

// The whole job of `p` bought as `purchase`, with checkpoints at Young's interval for its MTBF
// (as `trainplan job --checkpoint-interval auto`), and its Monte Carlo when anything can
// interrupt it.
PricedJob priced_job(const plan::Plan& p, const plan::PlanContext& ctx, double step_time_s, double tokens,
                     sim::PurchaseOption purchase, int on_demand_nodes, const ReportOptions& o, bool keep_runs) {
  PricedJob r;
  r.job = sim::build_job_spec(p, ctx, job_options(p, ctx, step_time_s, tokens, purchase, on_demand_nodes));
  if (r.job.spot_nodes() > 0) r.model = sim::default_interruption_model(*ctx.instance);
  const double rate = sim::job_interruption_rate_per_s(r.job, r.model);
  if (rate > 0 && r.job.checkpoint.write_s() > 0)
    r.job.checkpoint_interval_s = sim::young_interval_s(r.job.checkpoint.write_s(), 1.0 / rate);
  r.outcome.name = purchase_label(purchase, r.job.nodes, on_demand_nodes);
  r.outcome.estimate = sim::estimate_job(r.job);
  r.outcome.checkpoint_interval_s = r.job.checkpoint_interval_s;
  r.outcome.interruption_rate_per_s = rate;
  if (rate > 0 && o.spot_runs > 0) r.outcome.monte_carlo = sim::run_monte_carlo(r.job, r.model, mc_options(o, keep_runs));
  return r;
}

// A plan's row: memory per stage, input stall, spot Monte Carlo.
ReportPlan plan_row(size_t position, const Candidate& c, const plan::PlanContext& ctx, double tokens, bool with_spot,
                    const ReportOptions& o, std::vector<std::string>& notes) {
  ReportPlan rp;
  rp.position = position;
  rp.candidate = c;
  rp.memory_per_stage = plan::memory_per_stage(c.plan, ctx);
  if (tokens > 0 && !on_demand_price(*ctx.instance, c.plan.platform)) {
    notes.push_back(fmt::format("plan #{}: {} has no {} on-demand price in the catalog, so no job model (input stall, "
                                "spot) for it; add one with --prices FILE",
                                position, c.plan.instance_type, plan::platform_name(c.plan.platform)));
  } else if (tokens > 0) {
    const sim::JobSpec job =
        sim::build_job_spec(c.plan, ctx, job_options(c.plan, ctx, c.step_time_s(), tokens, sim::PurchaseOption::on_demand, 0));
    rp.input_time_per_step_s = job.input_time_per_step_s();
    rp.io_stall_per_step_s = std::max(0.0, rp.input_time_per_step_s - c.step_time_s());
    if (with_spot) {
      if (spot_price(*ctx.instance, c.plan.platform)) {
        rp.spot = priced_job(c.plan, ctx, c.step_time_s(), tokens, sim::PurchaseOption::spot, 0, o, false).outcome;
      } else {
        notes.push_back(fmt::format("plan #{}: {} has no spot price in the catalog, so no spot Monte Carlo", position,
                                    c.plan.instance_type));
      }
    }
  }
  return rp;
}

double estimated_tasks_per_rank(const plan::Plan& p, const plan::PlanContext& ctx);

// The candidate's numbers for a plan that did not come from a search: its step time is the
// simulated one, as the search's ranking gives it (the estimate where simulation is off or
// over the task limit).
Candidate candidate_of(const plan::Plan& p, const plan::PlanContext& ctx, double tokens, const ReportOptions& o,
                       const planner::AnalyticalOptions& ao) {
  Candidate c;
  c.plan = p;
  c.step = planner::estimate_step(p, ctx, ao);
  if (o.simulate && estimated_tasks_per_rank(p, ctx) * p.tp * p.pp <= o.max_simulated_tasks)
    c.simulated = planner::simulate_candidate(p, ctx, ao);
  c.memory = plan::peak_memory(p, ctx);
  c.gpus = p.world_size();
  if (tokens > 0) {
    const double tokens_per_step = static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample();
    c.steps = std::ceil(tokens / tokens_per_step);
    c.time_to_train_s = c.steps * c.step_time_s();
    const double hours = c.time_to_train_s / 3600.0;
    c.transfer_usd = planner::transfer_usd(ctx, c, tokens, 0, 0);
    if (auto price = on_demand_price(*ctx.instance, p.platform))
      c.cost_on_demand_usd = hours * *price * p.instance_count + c.transfer_usd;
    if (auto price = spot_price(*ctx.instance, p.platform)) c.cost_spot_usd = hours * *price * p.instance_count + c.transfer_usd;
  }
  return c;
}

// The symmetry-class representatives of a program, ascending.
std::vector<int> representatives(const plan::StepProgram& prog) {
  std::vector<int> reps;
  for (int r = 0; r < prog.world_size; ++r)
    if (prog.symmetry_class.empty() || prog.symmetry_class[static_cast<size_t>(r)] == r) reps.push_back(r);
  return reps;
}

// Ranks drawn in the Gantt chart: representatives, tp rank 0 of every pipeline stage first, at
// most `limit`.
std::vector<int> ranks_to_show(const plan::StepProgram& prog, std::vector<int> reps, int limit) {
  std::stable_sort(reps.begin(), reps.end(), [&](int a, int b) {
    const auto& ra = prog.ranks[static_cast<size_t>(a)];
    const auto& rb = prog.ranks[static_cast<size_t>(b)];
    if (ra.tp_rank != rb.tp_rank) return ra.tp_rank < rb.tp_rank;
    if (ra.pp_rank != rb.pp_rank) return ra.pp_rank < rb.pp_rank;
    return ra.dp_rank < rb.dp_rank;
  });
  if (static_cast<int>(reps.size()) > limit) reps.resize(static_cast<size_t>(std::max(limit, 1)));
  std::sort(reps.begin(), reps.end());
  return reps;
}

// Tasks per rank of a layer-granularity lowering, estimated before lowering: per micro-batch
// and unit of the rank a forward and a backward compute task, each with up to two
// communications around it, plus the gradient buckets.
double estimated_tasks_per_rank(const plan::Plan& p, const plan::PlanContext& ctx) {
  const double units = static_cast<double>(ctx.graph.units().size()) / p.pp;
  return static_cast<double>(p.num_micro_batches) * units * 2.0 * 3.0 + units * 4.0 + 16.0;
}

std::optional<SimulatedTimeline> simulate_best(const plan::Plan& p, const plan::PlanContext& ctx, double analytical_s,
                                               const ReportOptions& o, const planner::AnalyticalOptions& ao,
                                               std::vector<std::string>& notes) {
  // Lowering and simulating cost about (symmetry classes <= tp x pp) x tasks per rank.
  const double tasks = estimated_tasks_per_rank(p, ctx) * p.tp * p.pp;
  if (tasks > o.max_simulated_tasks) {
    notes.push_back(fmt::format("one simulated step: skipped, about {} tasks to simulate (limit {})",
                                units::format_count(tasks), units::format_count(o.max_simulated_tasks)));
    return std::nullopt;
  }
  try {
    plan::LowerOptions lo;
    lo.granularity = plan::Granularity::layer;
    lo.memory_events = false;
    lo.representatives_only = true;
    const plan::StepProgram prog = plan::lower(p, ctx, lo);
    const std::vector<int> reps = representatives(prog);
    sim::SimOptions so = planner::with_calibration(sim::options_for(p), ao);
    so.fidelity = sim::Fidelity::symmetric;
    so.timeline_ranks = reps;  // the others repeat their representative's events
    sim::StepResult r = sim::simulate_step(prog, ctx.cluster, so);
    SimulatedTimeline s;
    s.step_time_s = r.step_time_s;
    s.analytical_step_time_s = analytical_s;
    s.breakdown = r.breakdown;
    s.granularity = "layer";
    s.fidelity = std::string(sim::fidelity_name(so.fidelity));
    s.world_size = prog.world_size;
    s.symmetry_classes = reps.size();
    s.ranks_shown = ranks_to_show(prog, reps, o.gantt_ranks);
    // The critical rank's recomputation, read from its representative's events.
    const int critical = s.breakdown.critical_rank;
    const int critical_rep = prog.symmetry_class.empty() ? critical : prog.symmetry_class[static_cast<size_t>(critical)];
    for (const auto& e : r.timeline.events)
      if (e.rank == critical_rep && e.kind == plan::TaskKind::compute && e.phase == plan::Phase::recompute)
        s.recompute_s += e.end_s - e.start_s;
    // The timeline of the shown ranks only.
    s.timeline.source = r.timeline.source;
    s.timeline.step_time_s = r.timeline.step_time_s;
    s.timeline.streams = r.timeline.streams;
    s.timeline.meta = r.timeline.meta;
    const std::set<int> shown(s.ranks_shown.begin(), s.ranks_shown.end());
    for (auto& e : r.timeline.events)
      if (shown.count(e.rank)) s.timeline.events.push_back(std::move(e));
    for (int rank : s.ranks_shown)
      s.timeline.peak_memory_bytes.push_back(r.peak_memory_bytes[static_cast<size_t>(rank)]);
    return s;
  } catch (const Error& e) {
    notes.push_back(std::string("one simulated step: the simulator could not run the best plan: ") + e.what());
    return std::nullopt;
  }
}

std::optional<SpotStudy> spot_study(const plan::Plan& p, const plan::PlanContext& ctx, double step_time_s, double tokens,
                                    const ReportOptions& o, std::vector<std::string>& notes,
                                    std::vector<std::string>& assumptions) {
  const auto spot = spot_price(*ctx.instance, p.platform);
  const auto on_demand = on_demand_price(*ctx.instance, p.platform);
  if (!spot || !on_demand) {
    notes.push_back(fmt::format("spot: {} has no {} price in the catalog", p.instance_type, spot ? "on-demand" : "spot"));
    return std::nullopt;
  }
  SpotStudy s;
  s.spot_price_usd_per_hour = *spot;
  s.on_demand_price_usd_per_hour = *on_demand;
  s.options.push_back(priced_job(p, ctx, step_time_s, tokens, sim::PurchaseOption::on_demand, 0, o, false).outcome);
  PricedJob sp = priced_job(p, ctx, step_time_s, tokens, sim::PurchaseOption::spot, 0, o, true);
  s.interruption_model = sp.model.describe();
  for (const auto& a : sp.job.assumptions) assumptions.push_back(a);
  for (const auto& a : sp.model.assumptions()) assumptions.push_back(a);
  if (sp.outcome.monte_carlo) {
    for (const auto& run : sp.outcome.monte_carlo->outcomes) {
      s.spot_time_samples_s.push_back(run.time_s);
      s.spot_cost_samples_usd.push_back(run.cost_usd);
    }
    sp.outcome.monte_carlo->outcomes.clear();
  }
  s.options.push_back(sp.outcome);
  if (p.instance_count >= 2) {
    const int k = p.instance_count / 2;
    s.options.push_back(priced_job(p, ctx, step_time_s, tokens, sim::PurchaseOption::blend, k, o, false).outcome);
  } else {
    notes.push_back("spot: no blend of on-demand and spot instances for a single instance");
  }
  if (o.spot_runs > 0 && sp.job.checkpoint.write_s() > 0) {
    try {
      s.interval = sim::study_checkpoint_interval(sp.job, sp.model, mc_options(o, false));
    } catch (const Error& e) {
      notes.push_back(std::string("checkpoint interval study: ") + e.what());
    }
  }
  return s;
}

// The prices the report used and where they come from.
std::vector<PriceNote> price_notes(const std::vector<std::string>& types, const hw::Catalog& catalog, plan::Platform platform) {
  std::vector<PriceNote> out;
  const std::vector<std::string> groups =
      platform == plan::Platform::sagemaker
          ? std::vector<std::string>{"sagemaker", "sagemaker_uplift", "ec2_on_demand", "spot", "spot_discount", "interruption"}
          : std::vector<std::string>{"ec2_on_demand", "spot", "spot_discount", "interruption"};
  for (const auto& t : types) {
    const hw::InstanceType& inst = catalog.instance(t);
    PriceNote n;
    n.instance_type = t;
    n.on_demand_usd_per_hour = on_demand_price(inst, platform);
    n.spot_usd_per_hour = spot_price(inst, platform);
    n.spot_estimated = inst.prices.spot_estimated;
    n.region = inst.prices.region;
    n.interruption_bucket = inst.prices.interruption_bucket;
    for (const auto& g : groups) {
      auto it = inst.sources.find(g);
      if (it == inst.sources.end()) continue;
      std::string refs;
      for (const auto& id : split(it->second, '+')) {
        const hw::Source& src = catalog.source(id);
        refs += fmt::format("{}{} ({}{})", refs.empty() ? "" : " + ", id, src.date, src.verified ? "" : ", unverified");
      }
      n.sources.push_back(g + ": " + refs);
    }
    out.push_back(std::move(n));
  }
  return out;
}

// The latest runs of the error history, oldest first.
void load_history(Report& r, const ReportOptions& o) {
  if (o.history_db.empty()) return;
  if (!std::filesystem::exists(o.history_db))
    throw Error("no error history here").at(o.history_db).hint(
        "trainplan execute and trainplan calibrate record runs (in $TRAINPLAN_HISTORY_DB or the default path); give "
        "that file");
  calibration::History h(o.history_db);
  std::vector<calibration::HistoryRun> runs = h.runs();
  if (runs.size() > o.history_runs) runs.erase(runs.begin(), runs.end() - static_cast<std::ptrdiff_t>(o.history_runs));
  r.measured_runs = std::move(runs);
}

void fill_header(Report& r, const plan::Plan& p, const plan::PlanContext& ctx) {
  r.model = ctx.model_spec.name;
  r.parameters = ctx.graph.total_params();
  r.global_batch = p.global_batch;
  r.seq_len = ctx.seq_len;
  r.platform = p.platform;
}

// The best plan as SageMaker jobs: cold and on a warm pool, a sweep, managed spot with max_wait.
JobSection job_section(const plan::Plan& p, const plan::PlanContext& ctx, const planner::JobRequest& given, double tokens,
                       double step_time_s, const ReportOptions& o) {
  JobSection s;
  s.request = given;
  planner::JobRequest od = given;
  od.platform = "sagemaker";
  od.purchase = "on-demand";
  od.max_wait.clear();
  od.max_run.clear();
  od.step_time = fmt::format("{:.17g}s", step_time_s);
  od.tokens = fmt::format("{:.17g}", tokens);
  od.samples.clear();
  od.epochs = 1;
  od.no_hardware_failures = true;  // the estimates and the sweep are uninterrupted
  od.runs = o.spot_runs;
  od.seed = o.seed;
  od.threads = o.threads;
  planner::JobRequest cold = od;
  cold.warm_pool = false;
  cold.repeat = 0;
  cold.parallel = 1;
  cold.keep_alive.clear();
  const planner::JobAnalysis c = planner::analyze_job(p, ctx, cold);
  s.job = c.job;
  s.cold = c.estimate;
  if (given.warm_pool || given.repeat > 0) {
    const planner::JobAnalysis w = planner::analyze_job(p, ctx, od);
    if (given.warm_pool) s.warm = w.estimate;
    s.sweep = w.sweep;
  }
  if (!given.max_wait.empty() || !given.max_run.empty()) {
    planner::JobRequest spot = od;
    spot.purchase = "spot";
    spot.max_wait = given.max_wait;
    spot.max_run = given.max_run;
    spot.no_hardware_failures = given.no_hardware_failures;
    spot.repeat = 0;
    spot.parallel = 1;
    spot.keep_alive.clear();
    const planner::JobAnalysis a = planner::analyze_job(p, ctx, spot);
    s.spot = a.monte_carlo;
    s.spot_usd_per_hour = a.job.prices.spot_usd_per_hour;
  }
  return s;
}

// Parts of the report about the best plan: the simulated step, the spot study and the SageMaker
// job section.
void best_plan_parts(Report& r, const plan::PlanContext& ctx, const ReportOptions& o, const planner::AnalyticalOptions& ao) {
  Stopwatch watch(r);
  const ReportPlan best = r.plans.front();
  r.notes.push_back("calibration of the best plan's GPU type: " +
                    (ao.calibration_label.empty() ? std::string("uncalibrated (catalog peaks and documented efficiency defaults)")
                                                  : ao.calibration_label));
  if (!ctx.gpu->executable())
    r.notes.push_back(fmt::format("best plan: {} ({}, runtime {}) is planned and simulated, not executed: trainplan has no "
                                  "backend for it, so `trainplan execute` refuses the plan",
                                  best.candidate.plan.instance_type, ctx.gpu->arch, ctx.gpu->runtime));
  if (o.simulate) r.simulated = simulate_best(best.candidate.plan, ctx, best.candidate.step.step_time_s, o, ao, r.notes);
  else r.notes.push_back("one simulated step: switched off (--no-simulate)");
  watch.lap("simulate");
  if (r.tokens > 0) {
    r.spot = spot_study(best.candidate.plan, ctx, best.candidate.step_time_s(), r.tokens, o, r.notes, r.assumptions);
    if (r.spot)
      for (const auto& option : r.spot->options)
        if (option.name == sim::purchase_option_name(sim::PurchaseOption::spot)) r.plans.front().spot = option;
  }
  watch.lap("spot");
  if (o.job) {
    if (r.tokens > 0) r.job = job_section(best.candidate.plan, ctx, *o.job, r.tokens, best.candidate.step_time_s(), o);
    else r.notes.push_back("SageMaker job section: left out, no training work given (--tokens)");
  }
  watch.lap("job");
  r.assumptions.push_back(sim::placement_assumption(best.candidate.plan, ctx));  // also from the spot study: kept once below
  std::sort(r.assumptions.begin(), r.assumptions.end());
  r.assumptions.erase(std::unique(r.assumptions.begin(), r.assumptions.end()), r.assumptions.end());
}

}  // namespace


Report build_report(const SearchRequest& req, const SearchResult& res, const hw::Catalog& catalog, const ReportOptions& o) {
  if (res.ranked.empty())
    throw Error("nothing to report: no plan fits in GPU memory")
        .hint("run `trainplan plan` with the same options to see how far the closest plan is");
  Report r;
  r.options = o;
  r.tokens = req.tokens;
  r.objective = std::string(objective_name(req.objective));
  r.max_gpus = req.max_gpus;
  r.enumerated = res.enumerated;
  r.evaluated = res.ranked.size();
  for (const auto& [why, n] : res.dropped) r.dropped.emplace_back(why, n);
  if (res.cancelled) r.notes.push_back("the search was interrupted: the report covers the plans found until then");

  // The comparison table.
  Stopwatch watch(r);
  std::vector<plan::PlanContext> contexts;
  const size_t top = std::min(std::max<size_t>(o.top, 1), res.ranked.size());
  for (size_t i = 0; i < top; ++i) {
    plan::Plan p = res.ranked[i].plan;
    contexts.push_back(plan::resolve(p, catalog, "<report>"));
    // The best plan's spot numbers come from the spot study (best_plan_parts).
    r.plans.push_back(plan_row(i + 1, res.ranked[i], contexts.back(), req.tokens, i > 0 && i < o.spot_plans, o, r.notes));
  }
  fill_header(r, res.ranked.front().plan, contexts.front());
  r.samples_per_epoch = req.samples_per_epoch;
  r.epochs = req.epochs;
  r.convergence = planner::convergence_warnings(res.ranked.front().plan, contexts.front(), req.global_batch);
  r.global_batch = res.global_batch;
  r.seq_len = res.seq_len;

  watch.lap("plans");
  // The fastest plan per (instance type, size), in the order the types were requested.
  std::map<std::pair<std::string, int>, size_t> best_of;
  std::vector<std::string> type_order = req.instance_types;
  for (size_t i = 0; i < res.ranked.size(); ++i) {
    const auto& c = res.ranked[i];
    const auto key = std::make_pair(c.plan.instance_type, c.plan.instance_count);
    auto it = best_of.find(key);
    if (it == best_of.end() || c.time_to_train_s < res.ranked[it->second].time_to_train_s) best_of[key] = i;
    if (std::find(type_order.begin(), type_order.end(), c.plan.instance_type) == type_order.end())
      type_order.push_back(c.plan.instance_type);
  }
  std::erase_if(type_order, [&](const std::string& t) {
    return std::none_of(best_of.begin(), best_of.end(), [&](const auto& kv) { return kv.first.first == t; });
  });
  r.instance_types = req.instance_types.empty() ? type_order : req.instance_types;
  for (const auto& t : type_order) {
    size_t first = r.sizes.size();
    for (const auto& [key, idx] : best_of) {
      if (key.first != t) continue;
      const Candidate& c = res.ranked[idx];
      SizePoint sp;
      sp.instance_type = t;
      sp.instances = c.plan.instance_count;
      sp.gpus = c.plan.world_size();
      sp.best = c;
      sp.tokens_per_s = c.step.tokens_per_s;
      r.sizes.push_back(std::move(sp));
    }
    std::stable_sort(r.sizes.begin() + static_cast<long>(first), r.sizes.end(),
                     [](const SizePoint& a, const SizePoint& b) { return a.gpus < b.gpus; });
    if (first < r.sizes.size()) {
      const SizePoint& base = r.sizes[first];
      const double base_per_gpu = base.tokens_per_s / base.gpus;
      for (size_t k = first; k < r.sizes.size(); ++k) {
        r.sizes[k].baseline_gpus = base.gpus;
        r.sizes[k].scaling_efficiency = (r.sizes[k].tokens_per_s / r.sizes[k].gpus) / base_per_gpu;
      }
    }
  }
  std::vector<std::pair<double, double>> pts;
  for (const auto& sp : r.sizes)
    pts.emplace_back(sp.best.time_to_train_s,
                     sp.best.cost_on_demand_usd ? *sp.best.cost_on_demand_usd : std::numeric_limits<double>::quiet_NaN());
  for (size_t i : planner::pareto_frontier(pts)) r.sizes[i].pareto = true;
  watch.lap("sizes");

  best_plan_parts(r, contexts.front(), o, req.analytical_for(*contexts.front().gpu));
  std::vector<std::string> price_types;
  for (const auto& rp : r.plans)
    if (std::find(price_types.begin(), price_types.end(), rp.candidate.plan.instance_type) == price_types.end())
      price_types.push_back(rp.candidate.plan.instance_type);
  for (const auto& t : type_order)
    if (std::find(price_types.begin(), price_types.end(), t) == price_types.end()) price_types.push_back(t);
  r.prices = price_notes(price_types, catalog, req.platform);
  load_history(r, o);
  return r;
}

Report build_plan_report(const plan::Plan& plan_in, const hw::Catalog& catalog, const ReportOptions& o, double tokens,
                         const std::string& plan_file) {
  plan::Plan p = plan_in;
  const plan::PlanContext ctx = plan::resolve(p, catalog, plan_file);
  plan::validate(p, ctx, plan_file);
  Report r;
  r.single_plan = true;
  r.options = o;
  r.tokens = tokens > 0 ? tokens : p.training_tokens;
  fill_header(r, p, ctx);
  r.convergence = planner::convergence_warnings(p, ctx);
  r.instance_types = {p.instance_type};
  r.max_gpus = p.world_size();
  if (!(r.tokens > 0))
    r.notes.push_back("no training work given (--tokens, or training.tokens in the plan): time to train, cost and spot are left out");
  planner::SearchRequest calibrated;
  planner::load_calibration_profiles(calibrated, o.calibration);
  const planner::AnalyticalOptions& ao = calibrated.analytical_for(*ctx.gpu);
  r.plans.push_back(plan_row(1, candidate_of(p, ctx, r.tokens, o, ao), ctx, r.tokens, false, o, r.notes));
  best_plan_parts(r, ctx, o, ao);
  r.prices = price_notes({p.instance_type}, catalog, p.platform);
  load_history(r, o);
  return r;
}

}  // namespace trainplan::reports
