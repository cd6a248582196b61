// Spot traces: parsing, fitting, pooling, synthesis (spot_trace.hpp).
#include "trainplan/simulator/spot_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spot_stats.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::sim {
namespace {

using detail::kZ95;
using detail::quantile_sorted;

// Byar's approximation of the exact Poisson 95% interval for `events` observed over `exposure`
// (accurate to a few per cent from 1 event up).
std::pair<double, double> poisson_rate_ci(int64_t events, double exposure) {
  if (exposure <= 0) return {0, 0};
  const double d = static_cast<double>(events);
  double low = 0;
  if (events > 0) {
    low = d * std::pow(1.0 - 1.0 / (9.0 * d) - kZ95 / (3.0 * std::sqrt(d)), 3);
  }
  const double d1 = d + 1.0;
  const double high = d1 * std::pow(1.0 - 1.0 / (9.0 * d1) + kZ95 / (3.0 * std::sqrt(d1)), 3);
  return {low / exposure, high / exposure};
}

void finish_rates(TraceFit& f) {
  f.rate_per_instance_hour = f.instance_hours_held > 0 ? static_cast<double>(f.drops) / f.instance_hours_held : 0;
  std::tie(f.rate_ci95_low, f.rate_ci95_high) = poisson_rate_ci(f.drops, f.instance_hours_held);
  f.job_rate_per_hour = f.full_capacity_hours > 0 ? static_cast<double>(f.job_interruptions) / f.full_capacity_hours : 0;
  std::tie(f.job_rate_ci95_low, f.job_rate_ci95_high) = poisson_rate_ci(f.job_interruptions, f.full_capacity_hours);
  f.restart_wait = wait_stats(f.restart_waits_s);
}

}  // namespace

WaitStats wait_stats(std::vector<double> samples_s) {
  WaitStats s;
  s.count = samples_s.size();
  if (samples_s.empty()) return s;
  std::sort(samples_s.begin(), samples_s.end());
  s.mean_s = std::accumulate(samples_s.begin(), samples_s.end(), 0.0) / static_cast<double>(s.count);
  s.p50_s = quantile_sorted(samples_s, 0.5);
  s.p90_s = quantile_sorted(samples_s, 0.9);
  s.max_s = samples_s.back();
  return s;
}

SpotTrace parse_spot_trace(const json::Json& doc, const std::string& name) {
  json::Reader root(doc, name);
  SpotTrace t;
  t.name = name;
  json::Reader meta = root.field("metadata");
  t.gap_s = meta.field("gap_seconds").as_positive();
  auto instances = meta.optional_field("instances");
  for (const auto& [key, r] : meta.entries()) {
    (void)key;
    (void)r;  // other metadata (collection notes) is kept out of the model
  }
  json::Reader data = root.field("data");
  if (!data.is_array()) throw data.error("must be an array of instance counts, one per tick").hint("e.g. \"data\": [4, 4, 3, 4]: the instances held at each gap_seconds tick");
  for (const auto& item : data.items()) {
    const int64_t v = item.as_nonnegative_int();
    if (v > 1000000) throw item.error("implausible instance count").hint("one integer per tick: instances held");
    t.counts.push_back(static_cast<int>(v));
  }
  if (t.counts.size() < 2) throw data.error("needs at least 2 ticks").hint("a trace is one count per gap_seconds tick");
  if (auto prices = root.optional_field("prices")) {
    if (!prices->is_array() || prices->size() != t.counts.size())
      throw prices->error(fmt::format("must be an array of {} prices, one per tick", t.counts.size()))
          .hint("spot USD per instance-hour at each tick, or leave the field out");
    for (const auto& item : prices->items()) t.prices_usd_per_hour.push_back(item.as_nonnegative());
  }
  const int max_count = *std::max_element(t.counts.begin(), t.counts.end());
  if (instances) {
    t.instances = static_cast<int>(instances->as_positive_int());
    if (max_count > t.instances)
      throw instances->error(fmt::format("the data holds up to {} instances, more than {} requested", max_count, t.instances))
          .hint("set instances to the number the job requested");
  } else {
    t.instances = max_count;
  }
  if (t.instances < 1) throw data.error("never holds an instance").hint("a trace with only zeros has no capacity to fit");
  root.finish();
  return t;
}

SpotTrace read_spot_trace(const std::string& path) { return parse_spot_trace(json::parse_file(path), path); }

json::Json to_json(const SpotTrace& trace) {
  json::Json j;
  j["metadata"]["gap_seconds"] = trace.gap_s;
  j["metadata"]["instances"] = trace.instances;
  j["data"] = trace.counts;
  if (!trace.prices_usd_per_hour.empty()) j["prices"] = trace.prices_usd_per_hour;
  return j;
}

TraceFit fit_spot_trace(const SpotTrace& trace, int needed) {
  TraceFit f;
  f.name = trace.name;
  f.instances = trace.instances;
  f.needed = needed > 0 ? needed : trace.instances;
  if (f.needed > trace.instances)
    throw Error(fmt::format("the job needs {} instances but the trace requested only {}", f.needed, trace.instances))
        .at(trace.name)
        .hint("fit a trace of at least as many instances, or fit per instance and rely on the correlation model");
  const double tick_h = trace.gap_s / 3600.0;
  const auto& c = trace.counts;
  const size_t n = c.size();
  f.duration_h = tick_h * static_cast<double>(n);
  int64_t below = 0;
  for (size_t i = 0; i < n; ++i) {
    f.instance_hours_held += c[i] * tick_h;
    if (c[i] >= f.needed) f.full_capacity_hours += tick_h;
    else ++below;
    if (i == 0) continue;
    if (c[i] < c[i - 1]) {
      f.drops += c[i - 1] - c[i];
      ++f.drop_events;
      if (c[i - 1] - c[i] > 1) ++f.multi_drop_events;
    }
    if (c[i - 1] >= f.needed && c[i] < f.needed) ++f.job_interruptions;
  }
  f.unavailable_fraction = static_cast<double>(below) / static_cast<double>(n);
  if (!trace.prices_usd_per_hour.empty()) {
    double paid = 0, held = 0;
    for (size_t k = 0; k < n; ++k) paid += trace.prices_usd_per_hour[k] * c[k], held += c[k];
    f.mean_spot_price_usd_per_hour = held > 0 ? paid / held : 0;
  }

  // Periods below `needed`: fully observed ones (bounded on both sides) are gaps; those that
  // begin with a loss are restart waits. A period open at either end of the trace is censored.
  std::vector<double> gaps;
  size_t i = 0;
  while (i < n) {
    if (c[i] >= f.needed) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && c[j] < f.needed) ++j;
    if (i > 0 && j < n) {
      gaps.push_back(static_cast<double>(j - i) * trace.gap_s);
      f.restart_waits_s.push_back(gaps.back());  // i > 0 and c[i-1] >= needed: it began with a loss
    }
    i = j;
  }
  f.gaps = wait_stats(gaps);

  finish_rates(f);
  if (trace.instances > 1 && f.needed == trace.instances && f.rate_per_instance_hour > 0) {
    const double nn = trace.instances;
    f.correlation = std::clamp((nn * f.rate_per_instance_hour - f.job_rate_per_hour) / ((nn - 1) * f.rate_per_instance_hour), 0.0, 1.0);
    f.has_correlation = true;
  }
  return f;
}

TraceFit pool_fits(const std::vector<TraceFit>& fits, const std::string& name) {
  TP_ASSERT(!fits.empty());
  TraceFit p;
  p.name = name;
  double corr_num = 0, corr_den = 0;  // Σ (Nλ − Λ)·H_full and Σ (N − 1)·λ·H_full over multi-instance traces
  double below_h = 0;
  double paid = 0, priced_hours = 0;
  for (const auto& f : fits) {
    p.instances = std::max(p.instances, f.instances);
    p.needed = std::max(p.needed, f.needed);
    p.duration_h += f.duration_h;
    p.instance_hours_held += f.instance_hours_held;
    p.drops += f.drops;
    p.full_capacity_hours += f.full_capacity_hours;
    p.job_interruptions += f.job_interruptions;
    p.drop_events += f.drop_events;
    p.multi_drop_events += f.multi_drop_events;
    below_h += f.unavailable_fraction * f.duration_h;
    if (f.mean_spot_price_usd_per_hour > 0)
      paid += f.mean_spot_price_usd_per_hour * f.instance_hours_held, priced_hours += f.instance_hours_held;
    p.restart_waits_s.insert(p.restart_waits_s.end(), f.restart_waits_s.begin(), f.restart_waits_s.end());
    if (f.has_correlation) {
      const double nn = f.instances;
      corr_num += (nn * f.rate_per_instance_hour - f.job_rate_per_hour) * f.full_capacity_hours;
      corr_den += (nn - 1) * f.rate_per_instance_hour * f.full_capacity_hours;
    }
  }
  p.unavailable_fraction = p.duration_h > 0 ? below_h / p.duration_h : 0;
  p.mean_spot_price_usd_per_hour = priced_hours > 0 ? paid / priced_hours : 0;
  // Gap statistics pool the restart waits (every fully observed gap of these traces that
  // follows a loss); gaps open at a trace's start are not poolable.
  p.gaps = wait_stats(p.restart_waits_s);
  finish_rates(p);
  if (corr_den > 0) {
    p.correlation = std::clamp(corr_num / corr_den, 0.0, 1.0);
    p.has_correlation = true;
  }
  return p;
}

json::Json to_json(const TraceFit& f) {
  auto stats = [](const WaitStats& s) {
    json::Json j;
    j["count"] = s.count;
    j["mean_s"] = s.mean_s;
    j["p50_s"] = s.p50_s;
    j["p90_s"] = s.p90_s;
    j["max_s"] = s.max_s;
    return j;
  };
  json::Json j;
  j["name"] = f.name;
  j["instances"] = f.instances;
  j["needed"] = f.needed;
  j["duration_h"] = f.duration_h;
  j["instance_hours_held"] = f.instance_hours_held;
  j["drops"] = f.drops;
  j["rate_per_instance_hour"] = f.rate_per_instance_hour;
  j["rate_ci95_per_instance_hour"] = {f.rate_ci95_low, f.rate_ci95_high};
  j["full_capacity_hours"] = f.full_capacity_hours;
  j["job_interruptions"] = f.job_interruptions;
  j["job_rate_per_hour"] = f.job_rate_per_hour;
  j["job_rate_ci95_per_hour"] = {f.job_rate_ci95_low, f.job_rate_ci95_high};
  j["drop_events"] = f.drop_events;
  j["multi_drop_events"] = f.multi_drop_events;
  if (f.has_correlation) j["correlation"] = f.correlation;
  j["unavailable_fraction"] = f.unavailable_fraction;
  j["capacity_gaps"] = stats(f.gaps);
  j["restart_wait"] = stats(f.restart_wait);
  if (f.mean_spot_price_usd_per_hour > 0) j["mean_spot_price_usd_per_hour"] = f.mean_spot_price_usd_per_hour;
  return j;
}

SpotTrace make_synthetic_trace(const SyntheticTraceSpec& spec, Rng& rng) {
  TP_ASSERT(spec.instances >= 1 && spec.gap_s > 0 && spec.duration_s > spec.gap_s && spec.mean_wait_s >= 0);
  SpotTrace t;
  t.name = "synthetic";
  t.gap_s = spec.gap_s;
  t.instances = spec.instances;
  const auto ticks = static_cast<size_t>(spec.duration_s / spec.gap_s);
  t.counts.reserve(ticks);
  // State: held count; when below N, lost instances come back together at `back_at`.
  int held = spec.instances;
  double now = 0;
  double back_at = 0;
  double next_tick = 0;
  size_t tick = 0;
  while (tick < ticks) {
    const double loss_rate = held * spec.rate_per_instance_per_s + (held > 0 ? spec.common_rate_per_s : 0.0);
    const double next_loss = loss_rate > 0 ? now + rng.exponential(loss_rate) : INFINITY;
    const double next_back = held < spec.instances ? back_at : INFINITY;
    const double next_event = std::min(next_loss, next_back);
    while (tick < ticks && next_tick <= next_event) {
      t.counts.push_back(held);
      ++tick;
      next_tick = static_cast<double>(tick) * spec.gap_s;
    }
    if (tick >= ticks) break;
    now = next_event;
    if (next_back <= next_loss) {
      held = spec.instances;
      continue;
    }
    // A loss: a common shock with probability common / total, else one instance.
    const bool common = rng.uniform() * loss_rate < (held > 0 ? spec.common_rate_per_s : 0.0);
    const bool was_full = held == spec.instances;
    held = common ? 0 : held - 1;
    if (was_full) back_at = now + (spec.mean_wait_s > 0 ? rng.exponential(1.0 / spec.mean_wait_s) : 0.0);
  }
  return t;
}

}  // namespace trainplan::sim
