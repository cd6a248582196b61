// Interruption models, closed forms and checkpoint intervals (spot.hpp). The Monte Carlo
// engine is in spot_monte_carlo.cpp.
#include "trainplan/simulator/spot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "spot_stats.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

namespace trainplan::sim {

// ---- CapacityWait ----------------------------------------------------------------------------

CapacityWait CapacityWait::none() { return CapacityWait{}; }

CapacityWait CapacityWait::fixed(double seconds) {
  TP_ASSERT(seconds >= 0);
  CapacityWait w;
  w.kind_ = Kind::fixed;
  w.mean_s_ = w.median_s_ = seconds;
  return w;
}

CapacityWait CapacityWait::exponential(double mean_s) {
  TP_ASSERT(mean_s > 0);
  CapacityWait w;
  w.kind_ = Kind::exponential;
  w.mean_s_ = mean_s;
  w.median_s_ = mean_s * std::log(2.0);
  return w;
}

CapacityWait CapacityWait::lognormal(double median_s, double mean_s) {
  if (!(median_s > 0) || !(mean_s >= median_s))
    throw Error(fmt::format("a log-normal capacity wait needs 0 < median <= mean, got median {} s, mean {} s", median_s, mean_s))
        .hint("the mean of a log-normal is at least its median");
  CapacityWait w;
  w.kind_ = Kind::lognormal;
  w.mean_s_ = mean_s;
  w.median_s_ = median_s;
  return w;
}

double CapacityWait::sample_s(Rng& rng) const {
  switch (kind_) {
    case Kind::none: return 0;
    case Kind::fixed: return mean_s_;
    case Kind::exponential: return rng.exponential(1.0 / mean_s_);
    case Kind::lognormal: {
      const double sigma = std::sqrt(2.0 * std::log(mean_s_ / median_s_));
      return median_s_ * std::exp(sigma * rng.normal(0.0, 1.0));
    }
  }
  return 0;
}

std::string CapacityWait::describe() const {
  switch (kind_) {
    case Kind::none: return "no wait for capacity";
    case Kind::fixed: return fmt::format("capacity wait {}", units::format_duration(mean_s_));
    case Kind::exponential: return fmt::format("capacity wait exponential, mean {}", units::format_duration(mean_s_));
    case Kind::lognormal:
      return fmt::format("capacity wait log-normal, median {}, mean {}", units::format_duration(median_s_),
                         units::format_duration(mean_s_));
  }
  return "";
}

// ---- InterruptionModel -----------------------------------------------------------------------

InterruptionModel InterruptionModel::none() { return InterruptionModel{}; }

InterruptionModel InterruptionModel::exponential(double rate_per_instance_per_s, double correlation, CapacityWait wait) {
  if (!(rate_per_instance_per_s >= 0) || !std::isfinite(rate_per_instance_per_s))
    throw Error(fmt::format("interruption rate must be >= 0, got {}", rate_per_instance_per_s));
  if (!(correlation >= 0 && correlation <= 1))
    throw Error(fmt::format("correlation must be in [0, 1], got {}", correlation))
        .hint("0: instances are interrupted independently; 1: always all together");
  InterruptionModel m;
  m.kind_ = Kind::exponential;
  m.rate_per_instance_per_s_ = rate_per_instance_per_s;
  m.correlation_ = correlation;
  m.wait_ = wait;
  return m;
}

InterruptionModel InterruptionModel::trace_default() {
  const auto& f = LifecycleFacts::builtin();
  const auto& d = f.spot_default;
  InterruptionModel m = exponential(d.rate_per_instance_per_s, d.correlation,
                                    CapacityWait::lognormal(d.restart_wait_median_s, d.restart_wait_mean_s));
  m.with_assumption(fmt::format(
      "spot interruptions: {:.3f}/h per instance, correlation {:.2f}, fitted to AWS p3.2xlarge (V100) "
      "spot traces of 2023 (lifecycle.json spot_default); GPU spot markets differ by type, zone and month",
      d.rate_per_instance_per_s * 3600.0, d.correlation));
  return m;
}

InterruptionModel InterruptionModel::from_bucket(const std::string& bucket) {
  const auto& f = LifecycleFacts::builtin();
  const double rate = f.bucket_rate_per_s(bucket);
  const auto& d = f.spot_default;
  InterruptionModel m = exponential(rate, d.correlation,
                                    CapacityWait::lognormal(d.restart_wait_median_s, d.restart_wait_mean_s));
  m.with_assumption(fmt::format(
      "spot interruptions: Spot Advisor bucket {} read as {:.3g}/h per instance (midpoint fraction per 30 days, "
      "exponential lifetime); correlation and capacity wait from the p3 trace fit",
      bucket, rate * 3600.0));
  return m;
}

InterruptionModel InterruptionModel::from_fit(const TraceFit& fit) {
  const auto& d = LifecycleFacts::builtin().spot_default;
  const double correlation = fit.has_correlation ? fit.correlation : d.correlation;
  CapacityWait wait = CapacityWait::none();
  if (fit.restart_wait.count > 0 && fit.restart_wait.p50_s > 0 && fit.restart_wait.mean_s >= fit.restart_wait.p50_s)
    wait = CapacityWait::lognormal(fit.restart_wait.p50_s, fit.restart_wait.mean_s);
  else if (fit.restart_wait.count > 0 && fit.restart_wait.mean_s > 0)
    wait = CapacityWait::exponential(fit.restart_wait.mean_s);
  InterruptionModel m = exponential(fit.rate_per_instance_hour / 3600.0, correlation, wait);
  m.with_assumption(fmt::format("spot interruptions fitted to {}: {:.3f}/h per instance{}", fit.name,
                                fit.rate_per_instance_hour,
                                fit.has_correlation ? fmt::format(", correlation {:.2f}", correlation)
                                                    : fmt::format(", correlation {:.2f} (default: the trace has one instance)", correlation)));
  return m;
}

InterruptionModel InterruptionModel::replay(SpotTrace trace) {
  if (std::none_of(trace.counts.begin(), trace.counts.end(), [&](int c) { return c >= 1; }))
    throw Error("the trace never holds an instance").at(trace.name).hint("nothing to replay");
  InterruptionModel m;
  m.kind_ = Kind::trace;
  m.with_assumption(fmt::format("spot capacity replayed from {} ({} ticks of {}, random start offset per run, "
                                "wrapping at the end)",
                                trace.name, trace.counts.size(), units::format_duration(trace.gap_s)));
  m.trace_ = std::make_shared<const SpotTrace>(std::move(trace));
  return m;
}

InterruptionModel& InterruptionModel::with_assumption(std::string note) {
  assumptions_.push_back(std::move(note));
  return *this;
}

double InterruptionModel::job_rate_per_s(int spot_nodes) const {
  if (spot_nodes <= 0) return 0;
  switch (kind_) {
    case Kind::none: return 0;
    case Kind::exponential:
      return (spot_nodes * (1.0 - correlation_) + correlation_) * rate_per_instance_per_s_;
    case Kind::trace: {
      if (trace_->instances == 1 && spot_nodes > 1)
        return spot_nodes * fit_spot_trace(*trace_, 1).job_rate_per_hour / 3600.0;
      return fit_spot_trace(*trace_, spot_nodes).job_rate_per_hour / 3600.0;
    }
  }
  return 0;
}

double InterruptionModel::mean_wait_s(int spot_nodes) const {
  switch (kind_) {
    case Kind::none: return 0;
    case Kind::exponential: return wait_.mean_s();
    case Kind::trace: {
      const int needed = trace_->instances == 1 ? 1 : std::max(1, spot_nodes);
      return fit_spot_trace(*trace_, needed).restart_wait.mean_s;
    }
  }
  return 0;
}

std::string InterruptionModel::describe() const {
  switch (kind_) {
    case Kind::none: return "no spot interruptions";
    case Kind::exponential:
      return fmt::format("exponential, {:.4g}/h per instance (MTBF {} per instance), correlation {:.2f}, {}",
                         rate_per_instance_per_s_ * 3600.0,
                         rate_per_instance_per_s_ > 0 ? units::format_duration(1.0 / rate_per_instance_per_s_) : "infinite",
                         correlation_, wait_.describe());
    case Kind::trace:
      return fmt::format("trace replay of {} ({} instances, {} ticks of {})", trace_->name, trace_->instances,
                         trace_->counts.size(), units::format_duration(trace_->gap_s));
  }
  return "";
}

double job_interruption_rate_per_s(const JobSpec& job, const InterruptionModel& model) {
  return model.job_rate_per_s(job.spot_nodes()) + job.total_gpus() * job.hardware_failure_rate_per_gpu_per_s;
}

double mean_restart_s(const JobSpec& job, const InterruptionModel& model) {
  const double spot = model.job_rate_per_s(job.spot_nodes());
  const double hw = job.total_gpus() * job.hardware_failure_rate_per_gpu_per_s;
  const double total = spot + hw;
  const double wait = total > 0 ? spot / total * model.mean_wait_s(job.spot_nodes()) : 0;
  return wait + job.restart_s();
}

// ---- Closed form -----------------------------------------------------------------------------

double expected_segment_time_s(double segment_s, double rate_per_s, double restart_s) {
  if (rate_per_s <= 0) return segment_s;
  return (1.0 / rate_per_s + restart_s) * std::expm1(rate_per_s * segment_s);
}

ClosedForm closed_form(const JobSpec& job, const InterruptionModel& model) {
  if (model.kind() == InterruptionModel::Kind::trace)
    throw Error("no closed form for trace replay").hint("fit the trace (--fit-trace) for an exponential model");
  job.check();
  ClosedForm cf;
  cf.rate_per_s = job_interruption_rate_per_s(job, model);
  cf.mean_restart_s = mean_restart_s(job, model);
  double t = job.startup.total_s();
  for (double s : job.segments_with_checkpoint_s()) {
    t += expected_segment_time_s(s, cf.rate_per_s, cf.mean_restart_s);
    if (cf.rate_per_s > 0) cf.expected_interruptions += std::expm1(cf.rate_per_s * s);
  }
  cf.expected_time_s = t;
  const double spot_rate = model.job_rate_per_s(job.spot_nodes());
  const double wait_per = cf.rate_per_s > 0 ? spot_rate / cf.rate_per_s * model.mean_wait_s(job.spot_nodes()) : 0;
  const double od_billed = t - job.startup.provisioning_s;
  const double spot_billed = od_billed - cf.expected_interruptions * (wait_per + job.restart.provisioning_s);
  const int spot = job.spot_nodes();
  cf.expected_cost_usd = (spot * spot_billed * job.prices.spot_usd_per_hour +
                          (job.nodes - spot) * od_billed * job.prices.on_demand_usd_per_hour) /
                             3600.0 +
                         job.transfer_usd();
  return cf;
}

double young_interval_s(double checkpoint_s, double mtbf_s) { return std::sqrt(2.0 * checkpoint_s * mtbf_s); }

double daly_interval_s(double checkpoint_s, double mtbf_s) {
  if (checkpoint_s >= 2.0 * mtbf_s) return mtbf_s;
  const double x = checkpoint_s / (2.0 * mtbf_s);
  return std::sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - checkpoint_s;
}

double closed_form_optimal_interval_s(const JobSpec& job, const InterruptionModel& model) {
  const double c = job.checkpoint.write_s();
  const double work = job.work_s();
  TP_ASSERT(c > 0 && work > 0);
  JobSpec j = job;
  auto cost = [&](double log_tau) {
    j.checkpoint_interval_s = std::exp(log_tau);
    return closed_form(j, model).expected_time_s;
  };
  // The expected time is unimodal in τ apart from the integer steps of the segment count,
  // which make it slightly ragged; a coarse scan finds the basin, golden section refines it.
  double lo = std::log(std::max(c / 100.0, work * 1e-7));
  double hi = std::log(work);
  constexpr int kScan = 64;
  int best = 0;
  double best_v = INFINITY;
  for (int i = 0; i <= kScan; ++i) {
    double v = cost(lo + (hi - lo) * i / kScan);
    if (v < best_v) best_v = v, best = i;
  }
  double a = lo + (hi - lo) * std::max(0, best - 1) / kScan;
  double b = lo + (hi - lo) * std::min(kScan, best + 1) / kScan;
  const double g = (std::sqrt(5.0) - 1.0) / 2.0;
  double x1 = b - g * (b - a), x2 = a + g * (b - a);
  double f1 = cost(x1), f2 = cost(x2);
  for (int it = 0; it < 60 && b - a > 1e-6; ++it) {
    if (f1 < f2) {
      b = x2, x2 = x1, f2 = f1, x1 = b - g * (b - a), f1 = cost(x1);
    } else {
      a = x1, x1 = x2, f1 = f2, x2 = a + g * (b - a), f2 = cost(x2);
    }
  }
  return std::exp((a + b) / 2.0);
}

// ---- Checkpoint interval study -----------------------------------------------------------------

IntervalStudy study_checkpoint_interval(const JobSpec& job, const InterruptionModel& model,
                                        const MonteCarloOptions& options) {
  job.check();
  IntervalStudy s;
  s.checkpoint_s = job.checkpoint.write_s();
  const double rate = job_interruption_rate_per_s(job, model);
  if (!(rate > 0))
    throw Error("this job is never interrupted, so there is no optimal checkpoint interval")
        .hint("on-demand without hardware failures: checkpoint at the end (interval 0), or set one explicitly");
  if (!(s.checkpoint_s > 0))
    throw Error("checkpoints take no time to write, so any interval is optimal")
        .hint("the checkpoint size or write bandwidth is missing");
  s.mtbf_s = 1.0 / rate;
  s.young_s = young_interval_s(s.checkpoint_s, s.mtbf_s);
  s.daly_s = daly_interval_s(s.checkpoint_s, s.mtbf_s);
  const bool exponential = model.kind() != InterruptionModel::Kind::trace;
  if (exponential) s.closed_form_optimum_s = closed_form_optimal_interval_s(job, model);

  const std::vector<double> factors = {0.125, 0.25, 0.5, 1.0 / std::sqrt(2.0), 1.0, std::sqrt(2.0), 2.0, 4.0, 8.0};
  MonteCarloOptions mc = options;
  mc.keep_runs = true;
  std::vector<std::vector<double>> times;
  for (size_t k = 0; k < factors.size(); ++k) {
    JobSpec j = job;
    j.checkpoint_interval_s = s.young_s * factors[k];
    MonteCarloResult r = run_monte_carlo(j, model, mc);
    IntervalRow row;
    row.interval_s = j.checkpoint_interval_s;
    row.mc_mean_s = r.time_s.mean;
    row.mc_ci95_s = r.time_s.ci95;
    row.mc_mean_cost_usd = r.cost_usd.mean;
    if (exponential) row.closed_form_s = closed_form(j, model).expected_time_s;
    if (factors[k] == 1.0) s.young_row = k;
    s.rows.push_back(row);
    std::vector<double> t;
    t.reserve(r.outcomes.size());
    for (const auto& o : r.outcomes) t.push_back(o.time_s);
    times.push_back(std::move(t));
  }
  for (size_t k = 0; k < s.rows.size(); ++k)
    if (s.rows[k].mc_mean_s < s.rows[s.best_row].mc_mean_s) s.best_row = k;
  // Paired differences: run i of every row drew from the same stream.
  const auto& ty = times[s.young_row];
  const auto& tb = times[s.best_row];
  const size_t n = ty.size();
  double mean = 0, m2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = ty[i] - tb[i];
    const double delta = d - mean;
    mean += delta / static_cast<double>(i + 1);
    m2 += delta * (d - mean);
  }
  const double sd = n > 1 ? std::sqrt(m2 / static_cast<double>(n - 1)) : 0;
  s.young_minus_best_s = mean;
  s.young_minus_best_ci95_s = detail::kZ95 * sd / std::sqrt(static_cast<double>(std::max<size_t>(n, 1)));
  s.young_within_ci = s.young_minus_best_s - s.young_minus_best_ci95_s <= 0;
  s.chosen_interval_s = s.young_s;
  return s;
}

json::Json to_json(const IntervalStudy& s) {
  json::Json j;
  j["checkpoint_s"] = s.checkpoint_s;
  j["mtbf_s"] = s.mtbf_s;
  j["young_interval_s"] = s.young_s;
  j["daly_interval_s"] = s.daly_s;
  if (s.closed_form_optimum_s) j["closed_form_optimum_s"] = *s.closed_form_optimum_s;
  json::Json rows = json::Json::array();
  for (const auto& r : s.rows) {
    json::Json o;
    o["interval_s"] = r.interval_s;
    o["mc_mean_s"] = r.mc_mean_s;
    o["mc_ci95_s"] = r.mc_ci95_s;
    o["mc_mean_cost_usd"] = r.mc_mean_cost_usd;
    if (r.closed_form_s) o["closed_form_s"] = *r.closed_form_s;
    rows.push_back(o);
  }
  j["rows"] = rows;
  j["young_row"] = s.young_row;
  j["best_row"] = s.best_row;
  j["young_minus_best_s"] = s.young_minus_best_s;
  j["young_minus_best_ci95_s"] = s.young_minus_best_ci95_s;
  j["young_within_ci"] = s.young_within_ci;
  j["chosen_interval_s"] = s.chosen_interval_s;
  return j;
}

}  // namespace trainplan::sim
