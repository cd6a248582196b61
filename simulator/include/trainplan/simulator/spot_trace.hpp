// File: trainplan/simulator/spot_trace.hpp
//
// Spot capacity traces: reading them, fitting the spot model to them, and making synthetic
// ones with known parameters.
//
// Trace format (the one of skypilot-org/spot-traces, which trainplan accepts as is):
//
//   {"metadata": {"gap_seconds": 300, "instances": 4},   // instances: optional
//    "data": [4, 4, 4, 3, 0, 0, 2, 4, ...],
//    "prices": [0.918, 0.918, ...]}                       // optional
//
// One integer per tick of `gap_seconds`: how many of the requested instances the job held
// (preemption trace) or could launch (availability trace) during that tick. A decrease is a
// preemption of that many instances; a tick below the needed count is a capacity gap.
// `instances` is the number requested; when absent, the largest value in `data` is used.
// `prices`, when present, is the spot price (USD per instance-hour) at each tick, as some of
// the published traces carry it; it is summarised by the fit, not used for billing.
//
//   sim::SpotTrace t = sim::read_spot_trace("us-west-2c_v100_1.json");
//   sim::TraceFit fit = sim::fit_spot_trace(t);          // needs all instances
//   fit.rate_per_instance_hour;     // drops per instance-hour held, with a 95% interval
//   fit.job_rate_per_hour;          // losses of full capacity per hour at full capacity
//   fit.correlation;                // common-shock share (spot.hpp)
//   fit.restart_wait;               // time to regain full capacity after a loss
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/random.hpp"

namespace trainplan::sim {

struct SpotTrace {
  std::string name;            // file it came from
  double gap_s = 300;          // tick length
  int instances = 0;           // requested instances (N)
  std::vector<int> counts;     // per tick, 0..instances
  std::vector<double> prices_usd_per_hour;  // per tick, or empty

  double duration_s() const { return gap_s * static_cast<double>(counts.size()); }
};

/// Parses the trace format above; errors name the file and JSON pointer ("/data/17: must be a
/// non-negative integer ..."). Needs at least 2 ticks.
SpotTrace parse_spot_trace(const json::Json& doc, const std::string& name);
SpotTrace read_spot_trace(const std::string& path);
json::Json to_json(const SpotTrace& trace);

/// Summary of a sample of durations (seconds).
struct WaitStats {
  size_t count = 0;
  double mean_s = 0;
  double p50_s = 0;
  double p90_s = 0;
  double max_s = 0;
};
WaitStats wait_stats(std::vector<double> samples_s);

struct TraceFit {
  std::string name;
  int instances = 0;               // N of the trace
  int needed = 0;                  // instances the job needs (capacity gaps are counts below it)
  double duration_h = 0;
  double instance_hours_held = 0;  // sum of counts × tick
  int64_t drops = 0;               // instances lost (sum of decreases)
  double rate_per_instance_hour = 0;
  double rate_ci95_low = 0;        // Poisson 95% interval (Byar's approximation)
  double rate_ci95_high = 0;
  double full_capacity_hours = 0;  // hours with count >= needed
  int64_t job_interruptions = 0;   // ticks where count falls from >= needed to < needed
  double job_rate_per_hour = 0;
  double job_rate_ci95_low = 0;
  double job_rate_ci95_high = 0;
  int64_t drop_events = 0;         // ticks with a decrease
  int64_t multi_drop_events = 0;   // ticks where more than one instance was lost at once
  /// Common-shock share rho = (N·λ − Λ) / ((N − 1)·λ), clamped to [0, 1]; only meaningful
  /// for N > 1 (0 otherwise, with has_correlation false). 0 = independent, 1 = all together.
  double correlation = 0;
  bool has_correlation = false;
  double unavailable_fraction = 0; // share of ticks below `needed`
  WaitStats gaps;              // every period below `needed` (fully observed)
  WaitStats restart_wait;      // periods below `needed` that start with a loss
  double mean_spot_price_usd_per_hour = 0;  // over held instance-ticks; 0 if the trace has none
  std::vector<double> restart_waits_s;  // the samples behind restart_wait
};

/// Fits the spot model to one trace. `needed` = instances the job needs (0 = all N).
/// Discretization: a gap of k ticks counts as k × gap_s; drops within one tick are merged.
TraceFit fit_spot_trace(const SpotTrace& trace, int needed = 0);
/// Pools several fits of the same kind of instance: sums of counts and hours, concatenated
/// waits; correlation from the multi-instance traces only.
TraceFit pool_fits(const std::vector<TraceFit>& fits, const std::string& name = "pooled");
json::Json to_json(const TraceFit& fit);

/// Parameters of a synthetic trace: N instances, each lost at `rate_per_instance_per_s`,
/// plus common shocks at `common_rate_per_s` that take every held instance at once; after a
/// loss, capacity returns (all lost instances together) after an exponential wait of mean
/// `mean_wait_s`. Simulated in continuous time, then sampled at ticks of `gap_s` (the count
/// held at the start of each tick).
struct SyntheticTraceSpec {
  int instances = 1;
  double rate_per_instance_per_s = 0;
  double common_rate_per_s = 0;
  double mean_wait_s = 0;
  double gap_s = 60;
  double duration_s = 0;
};
SpotTrace make_synthetic_trace(const SyntheticTraceSpec& spec, Rng& rng);

}  // namespace trainplan::sim
