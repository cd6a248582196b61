// File: trainplan/reports/report.hpp
//
// Reports of a planning run that people can act on: a Markdown file (tables and the numbers in
// text) and a self-contained HTML file (the same tables plus inline SVG charts; no JavaScript,
// no network access). Building a report computes what the search does not: memory per
// pipeline stage, the job model's input stall, a spot Monte Carlo for the top plans, one
// simulated step of the best plan (breakdown and Gantt chart), on-demand vs spot vs blend and
// the checkpoint-interval study. Rendering is separate and pure.
//
//   planner::SearchRequest req;  req.model = "gpt2-124m";  req.tokens = 1e9;
//   planner::SearchResult res = planner::search(req, catalog);
//   reports::Report r = reports::build_report(req, res, catalog, {.top = 10, .spot_runs = 1000});
//   json::write_text_file("report.md", reports::render_markdown(r));
//   json::write_text_file("report.html", reports::render_html(r));
//
//   // One plan (no comparison, Pareto or scaling sections):
//   reports::Report one = reports::build_plan_report(plan::read_plan_file("plan.json"), catalog, {});
//
// Every number says where it comes from: "estimate" (the planner's analytical step model),
// "simulated" (the discrete-event step simulator) or "Monte Carlo" (simulated runs of the whole
// job with interruptions). The output is deterministic for a given seed: the same inputs give
// byte-identical files (no dates, no wall times).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/calibration/history.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/reports/report_svg.hpp"
#include "trainplan/planner/convergence.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/simulator/job.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::reports {

struct ReportOptions {
  size_t top = 10;                 // plans in the comparison table
  size_t spot_plans = 10;          // of those, how many get a spot Monte Carlo (p50 / p90); the
                                   // best always does (the spot study)
  size_t spot_runs = 1000;         // Monte Carlo runs per plan and purchase option
  uint64_t seed = 1;
  size_t threads = 1;              // Monte Carlo threads, 0 = all cores (results do not depend on it)
  bool simulate = true;            // simulate one step of the best plan (breakdown, Gantt)
  /// Skip the simulation when it would run more than about this many tasks (tasks per rank
  /// x symmetry classes, estimated before lowering): it bounds the report's time and memory.
  double max_simulated_tasks = 2e6;
  int gantt_ranks = 8;             // representative ranks drawn in the Gantt chart
  std::string html_name = "report.html";  // what the Markdown links to
  /// build_plan_report: a calibration profile for the plan's GPU type ("": the profile
  /// directory's default, else uncalibrated). build_report uses the search request's.
  std::string calibration;
  /// An error history database (calibration/history.hpp): the report gets a section of
  /// predicted vs measured runs ("": none).
  std::string history_db;
  size_t history_runs = 50;  // the latest runs shown
  /// The best plan as SageMaker jobs: a warm pool (`warm_pool`), a sweep (`repeat`, `parallel`,
  /// `keep_alive`) and managed spot (`max_wait`, `max_run`), as `trainplan job` computes them
  /// (planner::analyze_job); absent: no such section. Its step time and tokens are the report's.
  std::optional<planner::JobRequest> job;
};

/// The whole job of one plan under one purchase option.
struct PurchaseOutcome {
  std::string name;                    // "on-demand", "spot", "blend (1 on-demand + 1 spot)"
  sim::JobEstimate estimate;           // without interruptions
  double checkpoint_interval_s = 0;    // Young's interval for the job's MTBF (0: final only)
  double interruption_rate_per_s = 0;  // Λ: spot losses + hardware failures
  std::optional<sim::MonteCarloResult> monte_carlo;  // absent when nothing can interrupt it
};

/// One plan of the comparison table.
struct ReportPlan {
  size_t position = 0;                 // 1-based place in the search ranking
  planner::Candidate candidate;        // plan, step estimate, peak memory, time, costs
  std::vector<plan::MemoryBreakdown> memory_per_stage;
  double input_time_per_step_s = 0;    // job model: reading one step's samples (s3-fastfile)
  double io_stall_per_step_s = 0;      // max(0, input time - step time)
  std::optional<PurchaseOutcome> spot; // Monte Carlo at spot prices (first spot_plans plans)
};

/// The fastest plan of one (instance type, cluster size): the points of the cost-time scatter
/// and of the scaling chart.
struct SizePoint {
  std::string instance_type;
  int instances = 0;
  int gpus = 0;
  planner::Candidate best;             // fastest evaluated plan of this size
  double tokens_per_s = 0;
  /// (tokens/s per GPU) / (tokens/s per GPU at the smallest size of this instance type that
  /// fits); 1 at that size.
  double scaling_efficiency = 0;
  int baseline_gpus = 0;
  bool pareto = false;                 // on the frontier of (time to train, on-demand cost)
};

/// One simulated step of the best plan, with the timeline of its representative ranks.
struct SimulatedTimeline {
  double step_time_s = 0;
  double analytical_step_time_s = 0;
  sim::Breakdown breakdown;
  /// Part of breakdown.compute_s the critical rank spends in recompute-phase tasks.
  double recompute_s = 0;
  std::string granularity;             // "layer"
  std::string fidelity;                // "symmetric"
  int world_size = 0;
  size_t symmetry_classes = 0;
  std::vector<int> ranks_shown;        // representative ranks drawn in the Gantt chart
  plan::Timeline timeline;             // events of ranks_shown only
};

/// Spot analysis of the best plan.
struct SpotStudy {
  std::string interruption_model;      // InterruptionModel::describe()
  double spot_price_usd_per_hour = 0;
  double on_demand_price_usd_per_hour = 0;
  std::vector<PurchaseOutcome> options;  // on-demand, spot, blend (with more than one instance)
  std::vector<double> spot_time_samples_s;   // per Monte Carlo run (histograms)
  std::vector<double> spot_cost_samples_usd;
  std::optional<sim::IntervalStudy> interval;
};

/// The best plan as SageMaker jobs (ReportOptions::job).
struct JobSection {
  planner::JobRequest request;          // as given
  sim::JobSpec job;                     // the cold job (SageMaker, on-demand)
  sim::JobEstimate cold;                // provisioning its instances
  std::optional<sim::JobEstimate> warm; // with a warm pool: its start on a pool another job left
  std::optional<planner::SweepResult> sweep;       // with repeat > 0 (on-demand)
  std::optional<sim::MonteCarloResult> spot;       // with max_wait or max_run: managed spot
  double spot_usd_per_hour = 0;
};

/// Price of one instance type with where it comes from.
struct PriceNote {
  std::string instance_type;
  std::optional<double> on_demand_usd_per_hour;
  std::optional<double> spot_usd_per_hour;
  bool spot_estimated = false;
  std::string region;
  std::string interruption_bucket;
  std::vector<std::string> sources;    // "id: description (date)"
};

struct Report {
  bool single_plan = false;            // build_plan_report: no comparison across plans
  std::string model;
  double parameters = 0;
  double tokens = 0;
  double samples_per_epoch = 0;        // work given as samples x epochs (the time per epoch is shown)
  double epochs = 0;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  /// The best plan's convergence warnings (planner/convergence.hpp); a section when not empty.
  std::vector<planner::ConvergenceWarning> convergence;
  plan::Platform platform = plan::Platform::ec2;
  std::string objective;               // "time" / "cost" (search reports)
  std::vector<std::string> instance_types;
  int max_gpus = 0;
  size_t enumerated = 0;               // candidates of the search
  size_t evaluated = 0;                // that fit and were estimated
  std::vector<std::pair<std::string, size_t>> dropped;  // reason -> count
  std::vector<ReportPlan> plans;       // best first
  std::vector<SizePoint> sizes;        // by instance type, then GPUs
  std::optional<SimulatedTimeline> simulated;
  std::optional<SpotStudy> spot;
  std::optional<JobSection> job;       // ReportOptions::job, for the best plan
  /// Predicted vs measured runs from the error history (ReportOptions::history_db), oldest first.
  std::vector<calibration::HistoryRun> measured_runs;
  std::vector<PriceNote> prices;
  std::vector<std::string> notes;      // parts left out, and why
  std::vector<std::string> assumptions;
  ReportOptions options;
  /// Wall seconds of each part of building the report ("plans", "sizes", "simulate", "spot"),
  /// for -v. Not deterministic: never rendered.
  std::vector<std::pair<std::string, double>> timings;
};

/// Builds the report of a search. `result.ranked` must be non-empty (throws Error otherwise,
/// with the hint of trainplan plan). Takes a few seconds at the defaults: the Monte Carlo runs
/// only for the first options.spot_plans plans, the simulation only for the best plan.
Report build_report(const planner::SearchRequest& request, const planner::SearchResult& result, const hw::Catalog& catalog,
                    const ReportOptions& options = {});

/// The report of one plan (breakdown, memory, simulated step, spot). `tokens` > 0 overrides
/// the plan's training_tokens; with neither, the time, cost and spot parts are left out (noted).
Report build_plan_report(const plan::Plan& plan, const hw::Catalog& catalog, const ReportOptions& options = {},
                         double tokens = 0, const std::string& plan_file = "plan");

/// Markdown: headings, tables and the numbers in text; links to options.html_name for charts.
std::string render_markdown(const Report& report);
/// One HTML file: the same content, inline CSS and inline SVG charts.
std::string render_html(const Report& report);


/// A Gantt chart of `ranks` of a timeline: one row per (rank, stream) that has tasks of
/// non-zero duration; compute coloured by phase, communication by purpose; alloc/free left
/// out. Times are drawn in ms (µs below 1 ms, s above 10 s of step).
svg::GanttChart gantt_of(const plan::Timeline& timeline, const std::vector<int>& ranks, const std::string& id);

}  // namespace trainplan::reports
