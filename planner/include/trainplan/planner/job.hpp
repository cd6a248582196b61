// File: trainplan/planner/job.hpp
//
// A plan's whole job, as `trainplan job` and the Python module compute it: the job spec
// (startup, data input, checkpoints, evaluation), the interruption model (spot), the
// checkpoint interval, the closed form, the Monte Carlo and the checkpoint-interval study.
//
//   planner::JobRequest r;
//   r.purchase = "spot"; r.tokens = "300B"; r.runs = 1000; r.seed = 1;
//   planner::JobAnalysis a = planner::analyze_job(plan, ctx, r);
//   a.estimate.total_s;  a.monte_carlo->cost_usd.p90;  a.job.checkpoint_interval_s
//   json::Json j = planner::to_json(a, "plan.json");          // `trainplan job --json`
//
// The step time is the request's, else the planner's analytical estimate (estimate_step).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/classic_ml.hpp"
#include "trainplan/simulator/job.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/spot.hpp"
#include "trainplan/simulator/spot_trace.hpp"

namespace trainplan::planner {

/// The options of `trainplan job` as typed: quantities as text ("1.2s", "300B", "140GB"),
/// empty = not given. Field names are the CLI's long options with '-' as '_'; `fit_traces` is
/// `--fit-trace` (repeatable).
/// The range of JobRequest::epochs (`--epochs`).
inline constexpr double kMinEpochs = 1e-6;
inline constexpr double kMaxEpochs = 1e9;

struct JobRequest {
  std::string step_time;
  /// Calibration profile of the plan's GPU type for the estimated step ("": the profile
  /// directory's default, else uncalibrated).
  std::string calibration;
  std::string tokens;
  std::string samples;
  double epochs = 1;
  std::string purchase = "on-demand";  // on-demand, spot, blend:K
  std::string platform = "ec2";        // ec2, sagemaker
  bool warm_pool = false;
  std::string data_input = "s3-fastfile";
  std::string dataset_size;
  std::string sample_size;
  std::string checkpoint_storage = "s3";
  std::string fsx_deployment = "persistent-2-250";
  std::string fsx_size;
  std::string ebs_throughput;
  std::string checkpoint_interval;  // auto | none | DURATION; empty = the plan's, else auto
  int64_t eval_every = 0;
  std::string eval_time;
  size_t runs = 1000;
  uint64_t seed = 1;
  size_t threads = 0;
  std::string deadline;
  std::string max_wait;
  std::string max_run;
  std::string trace;
  std::vector<std::string> fit_traces;
  int64_t needed = 0;
  bool no_hardware_failures = false;
  /// A sweep of this many such jobs (0: none), `parallel` at a time, with a SageMaker warm pool
  /// kept alive `keep_alive` ("10min"; empty: none) between them.
  int64_t repeat = 0;
  int64_t parallel = 1;
  std::string keep_alive;
};

struct JobAnalysis {
  sim::JobSpec job;                 // with the chosen checkpoint interval
  sim::JobEstimate estimate;        // without interruptions
  sim::InterruptionModel model = sim::InterruptionModel::none();
  double rate_per_s = 0;            // job interruption rate (spot + hardware failures)
  bool step_time_given = false;     // else the analytical estimate
  std::string interval_mode;        // "auto", "plan", "none" or "given"
  double tokens = 0;                // the request's tokens (0: not given)
  /// Work given as samples x epochs: the epochs (0: given as tokens or from the plan) and the
  /// seconds of one epoch, (compute + input stalls) / epochs, without startup, evaluations,
  /// checkpoints and interruptions.
  double epochs = 0;
  double time_per_epoch_s = 0;
  sim::MonteCarloOptions monte_carlo_options;
  std::optional<sim::MonteCarloResult> monte_carlo;   // when anything can interrupt the job
  std::optional<sim::ClosedForm> closed_form;         // not for trace replays
  std::optional<sim::IntervalStudy> interval_study;   // when checkpoints take time
  std::optional<SweepResult> sweep;                   // with --repeat (on-demand, uninterrupted jobs)
  std::vector<std::string> assumptions;
};

/// Fits the spot model to each trace (`needed` instances; 0 = all the trace requested).
std::vector<sim::TraceFit> fit_traces(const std::vector<std::string>& paths, int64_t needed);

/// The whole job of `plan` (validated against `ctx`). Throws Error naming the option for bad
/// values (the bounds and choices of `trainplan job`'s flags are checked here too) and for
/// options that do not go together (traces without spot, --max-wait on EC2).
JobAnalysis analyze_job(const plan::Plan& plan, const plan::PlanContext& ctx, const JobRequest& request);

/// As `trainplan job --json` writes it; "plan" is `plan_name`.
json::Json to_json(const JobAnalysis& analysis, const std::string& plan_name);

/// `plan` with the job's checkpoint interval, purchase, platform and tokens, and
/// "predicted"/"job" (what `trainplan job --write-plan` writes).
plan::Plan plan_with_job(const plan::Plan& plan, const JobAnalysis& analysis);

}  // namespace trainplan::planner
