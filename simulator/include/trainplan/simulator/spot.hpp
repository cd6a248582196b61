// File: trainplan/simulator/spot.hpp
//
// Interruptions, restarts and their Monte Carlo: the distribution of a job's completion time
// and cost on on-demand, spot or a blend, and the checkpoint interval that minimises it.
//
//   sim::InterruptionModel m = sim::InterruptionModel::exponential(
//       /*rate_per_instance_per_s=*/0.23 / 3600, /*correlation=*/0.9,
//       sim::CapacityWait::lognormal(/*median_s=*/1700, /*mean_s=*/6500));
//   sim::MonteCarloOptions mc{.runs = 1000, .seed = 1, .deadline_s = 14 * 86400.0};
//   sim::MonteCarloResult r = sim::run_monte_carlo(job, m, mc);
//   r.time_s.p90; r.cost_usd.mean; r.p_miss_deadline;
//   sim::IntervalStudy s = sim::study_checkpoint_interval(job, m, mc);
//   s.young_s; s.best_interval_s; s.young_within_ci;
//
// The model (the Monte Carlo and the closed form implement exactly this):
// - Interruptions of the job arrive as a Poisson process of rate Λ while the job works or
//   writes a checkpoint; none arrive during startup or a restart. With n spot instances, each
//   lost at rate λ, of which a share ρ ("correlation") are common shocks that take all
//   instances at once (Marshall–Olkin), Λ_spot = (n(1 − ρ) + ρ)·λ: ρ = 0 gives n·λ
//   (independent), ρ = 1 gives λ. Hardware failures add g·h for g GPUs at rate h each, on
//   any purchase option. A blend's on-demand instances are never reclaimed, but the job is
//   synchronous, so losing any spot instance stalls and rolls back all of it.
// - An interruption loses the work since the last completed checkpoint (a checkpoint being
//   written when it strikes is lost too). The restart costs: wait for capacity (spot losses
//   only; random), re-provision, the restart's billed startup, and reading the checkpoint.
// - Closed form (the renewal argument of Daly 2006): a segment of s = τ + C seconds (τ work,
//   C checkpoint) takes in expectation (1/Λ + E[R])·(e^{Λs} − 1), E[R] the mean restart
//   time; the job takes startup + the sum over its segments.
// - Trace replay: each run starts at a uniform random offset in the trace (wrapping at its
//   end); the job is interrupted when the trace holds fewer instances than the job needs and
//   waits until it holds enough. A 1-instance trace with n > 1 spot instances replays n
//   independent offsets (assumes independent instances).
// - Billing: per second per instance, a minimum per launch; provisioning and capacity waits
//   are not billed; on a blend the on-demand instances stay up (billed) while the job waits.
// - SageMaker managed spot: the job fails once its wall clock since submission exceeds
//   max_wait (which must be >= max_run); max_run bounds the billed (running) time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/job.hpp"
#include "trainplan/simulator/spot_trace.hpp"

namespace trainplan::sim {

/// How long a job waits for spot capacity after losing it.
class CapacityWait {
 public:
  enum class Kind { none, fixed, exponential, lognormal };
  static CapacityWait none();
  static CapacityWait fixed(double seconds);
  static CapacityWait exponential(double mean_s);
  /// Log-normal through its median and mean (mean >= median): σ² = 2 ln(mean/median).
  static CapacityWait lognormal(double median_s, double mean_s);

  Kind kind() const { return kind_; }
  double mean_s() const { return mean_s_; }
  double median_s() const { return median_s_; }
  double sample_s(Rng& rng) const;
  std::string describe() const;

 private:
  Kind kind_ = Kind::none;
  double mean_s_ = 0;
  double median_s_ = 0;
};

class InterruptionModel {
 public:
  enum class Kind { none, exponential, trace };

  /// No spot interruptions (on-demand; hardware failures still come from JobSpec).
  static InterruptionModel none();
  /// Exponential per-instance rate with common-shock share `correlation` in [0, 1].
  static InterruptionModel exponential(double rate_per_instance_per_s, double correlation, CapacityWait wait);
  /// The rate of a Spot Advisor bucket (LifecycleFacts::bucket_rate_per_s), with the default
  /// correlation and capacity wait fitted to the p3 traces.
  static InterruptionModel from_bucket(const std::string& bucket);
  /// The default fitted to the shared p3 traces (lifecycle.json "spot_default").
  static InterruptionModel trace_default();
  /// The exponential model of a fit: its per-instance rate, its correlation (or the default
  /// when the trace has one instance) and a log-normal wait through its restart waits.
  static InterruptionModel from_fit(const TraceFit& fit);
  /// Replays `trace` (see the file comment).
  static InterruptionModel replay(SpotTrace trace);

  Kind kind() const { return kind_; }
  double rate_per_instance_per_s() const { return rate_per_instance_per_s_; }
  double correlation() const { return correlation_; }
  const CapacityWait& wait() const { return wait_; }
  const SpotTrace* trace() const { return trace_.get(); }

  /// Λ_spot for `spot_nodes` spot instances (1/s). Trace replay: the fitted rate of the trace
  /// for that many instances (used for Young/Daly and printing, not by the replay itself).
  double job_rate_per_s(int spot_nodes) const;
  /// Mean capacity wait after a spot loss (trace: the fitted mean restart wait).
  double mean_wait_s(int spot_nodes) const;
  /// One line: "exponential, 0.229/h per instance, correlation 0.89, wait log-normal ...".
  std::string describe() const;
  /// Notes to print with results (where the numbers come from).
  std::vector<std::string> assumptions() const { return assumptions_; }
  InterruptionModel& with_assumption(std::string note);

 private:
  Kind kind_ = Kind::none;
  double rate_per_instance_per_s_ = 0;
  double correlation_ = 0;
  CapacityWait wait_;
  std::shared_ptr<const SpotTrace> trace_;
  std::vector<std::string> assumptions_;
};

/// Job-level interruption rate Λ (1/s): spot losses plus hardware failures.
double job_interruption_rate_per_s(const JobSpec& job, const InterruptionModel& model);
/// Mean restart time E[R] (s) after an interruption, over the mix of spot losses (capacity
/// wait + restart) and hardware failures (restart only).
double mean_restart_s(const JobSpec& job, const InterruptionModel& model);

/// Closed-form expected time and cost under exponential interruptions (Kind none or
/// exponential; throws for trace replay).
struct ClosedForm {
  double rate_per_s = 0;         // Λ
  double mean_restart_s = 0;     // E[R]
  double expected_time_s = 0;
  double expected_interruptions = 0;
  double expected_cost_usd = 0;  // per-launch minimum billing ignored
};
ClosedForm closed_form(const JobSpec& job, const InterruptionModel& model);
/// E[T] of one segment of s seconds: (1/Λ + R)(e^{Λs} − 1); s when Λ = 0.
double expected_segment_time_s(double segment_s, double rate_per_s, double restart_s);

/// Young's interval √(2·C·M) (s); M = mean time between interruptions of the job.
double young_interval_s(double checkpoint_s, double mtbf_s);
/// Daly's higher-order interval (Daly 2006): √(2CM)·[1 + √(C/2M)/3 + (C/2M)/9] − C for C < 2M,
/// else M.
double daly_interval_s(double checkpoint_s, double mtbf_s);
/// The interval that minimises the closed form for this job (golden-section search on
/// log τ between C/100 and the job's work), exponential models only.
double closed_form_optimal_interval_s(const JobSpec& job, const InterruptionModel& model);

struct MonteCarloOptions {
  size_t runs = 1000;
  uint64_t seed = 1;
  size_t threads = 1;                    // 0 = all cores; results do not depend on it
  std::optional<double> deadline_s;      // P(completion > deadline)
  std::optional<double> max_wait_s;      // SageMaker MaxWaitTimeInSeconds
  std::optional<double> max_run_s;       // SageMaker MaxRuntimeInSeconds (billed time)
  bool keep_runs = false;                // keep per-run outcomes (paired comparisons)
};

/// One simulated run (uncapped: max_wait only marks it).
struct RunOutcome {
  double time_s = 0;
  double cost_usd = 0;
  int64_t interruptions = 0;
  double lost_work_s = 0;
  double wait_s = 0;          // waiting for capacity
  double billed_s_spot = 0;   // per spot node
  bool exceeded_max_wait = false;
  bool exceeded_max_run = false;
  double cost_at_failure_usd = 0;  // billed before max_wait / max_run stopped it (0 if not)
};

struct MonteCarloStats {
  double mean = 0;
  double stddev = 0;
  double ci95 = 0;  // half-width of the 95% confidence interval of the mean
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double min = 0;
  double max = 0;
};
/// Summary of samples (percentiles by linear interpolation between order statistics).
MonteCarloStats summarize_samples(std::vector<double> samples);

struct MonteCarloResult {
  size_t runs = 0;
  uint64_t seed = 0;
  MonteCarloStats time_s;
  MonteCarloStats cost_usd;
  MonteCarloStats interruptions;
  MonteCarloStats lost_work_s;
  MonteCarloStats wait_s;
  std::optional<double> p_miss_deadline;
  std::optional<double> p_exceed_max_wait;
  std::optional<double> p_exceed_max_run;
  /// Mean cost of the runs that max_wait / max_run would have stopped, billed until then.
  std::optional<double> mean_cost_of_failed_usd;
  std::vector<RunOutcome> outcomes;  // when keep_runs
};

/// Runs `options.runs` independent runs; run i draws from Rng(seed).fork(i), so the result
/// depends on the seed only (not on threads). Throws Error for an inconsistent job or limits.
MonteCarloResult run_monte_carlo(const JobSpec& job, const InterruptionModel& model,
                                 const MonteCarloOptions& options);

/// One row of the checkpoint-interval study.
struct IntervalRow {
  double interval_s = 0;
  double mc_mean_s = 0;
  double mc_ci95_s = 0;
  double mc_mean_cost_usd = 0;
  std::optional<double> closed_form_s;  // exponential models
};

struct IntervalStudy {
  double checkpoint_s = 0;   // C
  double mtbf_s = 0;         // 1/Λ
  double young_s = 0;
  double daly_s = 0;
  std::optional<double> closed_form_optimum_s;
  std::vector<IntervalRow> rows;  // grid around Young's interval, which is one of the rows
  size_t young_row = 0;
  size_t best_row = 0;            // lowest Monte Carlo mean
  /// Paired (same random numbers) difference mean T(Young) − mean T(best) and its 95% CI.
  double young_minus_best_s = 0;
  double young_minus_best_ci95_s = 0;
  bool young_within_ci = false;   // the difference is not significant at 95%
  double chosen_interval_s = 0;   // what the plan records: Young's interval
};

/// Monte Carlo at intervals Young × {1/8, 1/4, 1/2, 1/√2, 1, √2, 2, 4, 8} (those above the
/// job's work dropped), each with the same seeds (common random numbers). Throws Error when
/// the job is never interrupted (no optimum: checkpoint only at the end).
IntervalStudy study_checkpoint_interval(const JobSpec& job, const InterruptionModel& model,
                                        const MonteCarloOptions& options);

json::Json to_json(const MonteCarloStats& d);
json::Json to_json(const MonteCarloResult& r);
json::Json to_json(const IntervalStudy& s);

}  // namespace trainplan::sim
