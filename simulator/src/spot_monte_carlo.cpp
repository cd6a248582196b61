// The Monte Carlo of interrupted jobs (spot.hpp): one run walks the job's checkpoint segments,
// drawing interruptions, restarts and capacity waits, and bills every instance per second.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spot_stats.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/thread_pool.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::sim {
namespace {

constexpr double kInf = INFINITY;
// A run with more interruptions than this cannot finish in any useful sense.
constexpr int64_t kMaxInterruptionsPerRun = 5'000'000;

// Capacity of a trace at one need level, replayed from an offset: the trace repeats, and for
// every tick the distance (in ticks, circularly) to the next tick below / at or above `need`.
class TraceCursor {
 public:
  TraceCursor(const SpotTrace& trace, int need) : gap_s_(trace.gap_s), n_(trace.counts.size()) {
    std::vector<bool> ok(n_);
    for (size_t i = 0; i < n_; ++i) ok[i] = trace.counts[i] >= need;
    dist_bad_ = distances(ok, false);
    dist_good_ = distances(ok, true);
    if (dist_good_[0] < 0)
      throw Error(fmt::format("the trace never holds the {} instances the job needs", need))
          .at(trace.name)
          .hint("use a trace of more instances, or the fitted exponential model (--fit-trace)");
  }
  double duration_s() const { return gap_s_ * static_cast<double>(n_); }
  // First time >= t at which the replay is below / at-or-above `need`; kInf if never.
  double next_bad(double t, double offset) const { return next(t, offset, dist_bad_); }
  double next_good(double t, double offset) const { return next(t, offset, dist_good_); }

 private:
  // dist[i] = smallest d >= 0 with ok[(i + d) % n] == want; -1 if none.
  std::vector<int64_t> distances(const std::vector<bool>& ok, bool want) const {
    std::vector<int64_t> dist(n_, -1);
    int64_t next = -1;
    for (int64_t i = 2 * static_cast<int64_t>(n_) - 1; i >= 0; --i) {
      const auto idx = static_cast<size_t>(i % static_cast<int64_t>(n_));
      if (ok[idx] == want) next = i;
      if (i < static_cast<int64_t>(n_) && next >= 0) dist[idx] = next - i;
    }
    return dist;
  }
  double next(double t, double offset, const std::vector<int64_t>& dist) const {
    const double k = std::floor((offset + t) / gap_s_ + 1e-9);  // absolute tick
    const auto i = static_cast<size_t>(std::fmod(k, static_cast<double>(n_)));
    const int64_t d = dist[i];
    if (d < 0) return kInf;
    if (d == 0) return t;
    return (k + static_cast<double>(d)) * gap_s_ - offset;
  }

  double gap_s_;
  size_t n_;
  std::vector<int64_t> dist_bad_;
  std::vector<int64_t> dist_good_;
};

// Everything a run needs, computed once.
struct RunSetup {
  const JobSpec* job = nullptr;
  const InterruptionModel* model = nullptr;
  const MonteCarloOptions* options = nullptr;
  std::vector<double> segment_s;  // work + checkpoint
  double restart_billed_s = 0;    // restart's billed startup + checkpoint read
  double spot_rate = 0;           // exponential model: Λ_spot
  double hw_rate = 0;
  int spot_nodes = 0;
  int od_nodes = 0;
  const TraceCursor* cursor = nullptr;
  int streams = 0;                // trace replay: independent offsets
};

// Billing and the limits of one run. Spot instances are billed per launch (minimum applies
// per launch); on-demand instances once, from the end of the first provisioning to the end.
class Ledger {
 public:
  explicit Ledger(const RunSetup& s) : s_(s) {}

  // Moves the clock by dt; which instances are billed during it.
  void advance(double dt, bool spot_billed, bool od_billed) {
    if (dt <= 0) return;
    const double before = t_;
    t_ += dt;
    if (spot_billed) launch_s_ += dt;
    if (od_billed) od_s_ += dt;
    const auto& o = *s_.options;
    if (o.max_wait_s && !failed_ && t_ > *o.max_wait_s) {
      const double back = t_ - *o.max_wait_s;  // undo the part after the limit
      out_.exceeded_max_wait = true;
      fail(spot_billed ? back : 0, od_billed ? back : 0);
    }
    const double run_s = s_.spot_nodes > 0 ? spot_total_s_ + launch_s_ : od_s_;
    const bool run_billed = s_.spot_nodes > 0 ? spot_billed : od_billed;
    if (o.max_run_s && run_billed && run_s > *o.max_run_s) {
      if (!out_.exceeded_max_run && !failed_) fail(spot_billed ? run_s - *o.max_run_s : 0, od_billed ? run_s - *o.max_run_s : 0);
      out_.exceeded_max_run = true;
    }
    (void)before;
  }
  // Spot instances are released (reclaimed or replaced): their launch is billed and closed.
  void close_launch() {
    if (s_.spot_nodes == 0) return;
    spot_cost_ += launch_cost(launch_s_);
    spot_total_s_ += launch_s_;
    launch_s_ = 0;
  }
  double now() const { return t_; }
  double cost() const { return cost_with(launch_s_, od_s_); }
  RunOutcome& outcome() { return out_; }
  RunOutcome finish() {
    out_.time_s = t_;
    out_.cost_usd = cost() + s_.job->transfer_usd();  // data transfer as uninterrupted (redone steps not charged again)
    out_.billed_s_spot = spot_total_s_ + launch_s_;
    return out_;
  }

 private:
  double launch_cost(double seconds) const {
    const auto& p = s_.job->prices;
    return s_.spot_nodes * billed_cost_usd(seconds, p.spot_usd_per_hour, p.minimum_billed_s);
  }
  double cost_with(double launch_s, double od_s) const {
    const auto& p = s_.job->prices;
    double c = spot_cost_;
    if (s_.spot_nodes > 0 && launch_s > 0) c += launch_cost(launch_s);
    if (s_.od_nodes > 0 && od_s > 0) c += s_.od_nodes * billed_cost_usd(od_s, p.on_demand_usd_per_hour, p.minimum_billed_s);
    return c;
  }
  void fail(double spot_back_s, double od_back_s) {
    failed_ = true;
    out_.cost_at_failure_usd = cost_with(launch_s_ - spot_back_s, od_s_ - od_back_s);
  }

  const RunSetup& s_;
  double t_ = 0;
  double launch_s_ = 0;      // billed seconds of the current spot launch
  double spot_total_s_ = 0;  // billed seconds of closed spot launches
  double spot_cost_ = 0;     // cost of closed spot launches
  double od_s_ = 0;
  bool failed_ = false;
  RunOutcome out_;
};

RunOutcome simulate_run(const RunSetup& s, Rng rng) {
  const JobSpec& job = *s.job;
  Ledger ledger(s);
  RunOutcome& out = ledger.outcome();

  std::vector<double> offsets;
  auto capacity_back_at = [&](double t) {  // trace replay: first time >= t with enough instances
    for (int iter = 0; iter < 1'000'000; ++iter) {
      double latest = t;
      for (double o : offsets) latest = std::max(latest, s.cursor->next_good(t, o));
      bool all = true;
      for (double o : offsets) all = all && s.cursor->next_good(latest, o) == latest;
      if (all) return latest;
      t = latest;
    }
    throw Error("the replayed trace never holds enough instances at once for this job")
        .hint("the independent replays of a 1-instance trace rarely overlap; use the fitted model (--fit-trace)");
  };
  const bool replay = s.cursor != nullptr && s.spot_nodes > 0;
  if (replay) {
    for (int k = 0; k < s.streams; ++k) offsets.push_back(rng.uniform() * s.cursor->duration_s());
    const double start = capacity_back_at(0.0);  // wait for capacity before the first launch
    out.wait_s += start;
    ledger.advance(start, false, false);
  }

  ledger.advance(job.startup.provisioning_s, false, false);
  ledger.advance(job.startup.billed_s(), true, true);
  for (double seg : s.segment_s) {
    while (true) {
      double x_spot = kInf;
      if (replay) {
        const double now = ledger.now();
        for (double o : offsets) x_spot = std::min(x_spot, s.cursor->next_bad(now, o) - now);
      } else if (s.spot_rate > 0) {
        x_spot = rng.exponential(s.spot_rate);
      }
      const double x_hw = s.hw_rate > 0 ? rng.exponential(s.hw_rate) : kInf;
      const double x = std::min(x_spot, x_hw);
      if (x >= seg) {
        ledger.advance(seg, true, true);
        break;
      }
      ledger.advance(x, true, true);
      out.lost_work_s += x;
      if (++out.interruptions > kMaxInterruptionsPerRun)
        throw Error(fmt::format("a run was interrupted more than {} times", kMaxInterruptionsPerRun))
            .hint("the job cannot finish: checkpoint more often than the mean time between interruptions");
      ledger.close_launch();
      if (x_spot <= x_hw) {
        const double now = ledger.now();
        const double wait = replay ? capacity_back_at(now) - now : s.model->wait().sample_s(rng);
        out.wait_s += wait;
        ledger.advance(wait, false, true);
      }
      ledger.advance(job.restart.provisioning_s, false, true);
      ledger.advance(s.restart_billed_s, true, true);
    }
  }
  return ledger.finish();
}

using detail::quantile_sorted;

}  // namespace

MonteCarloStats summarize_samples(std::vector<double> samples) {
  MonteCarloStats d;
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  const auto n = static_cast<double>(samples.size());
  d.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  double ss = 0;
  for (double x : samples) ss += (x - d.mean) * (x - d.mean);
  d.stddev = samples.size() > 1 ? std::sqrt(ss / (n - 1)) : 0;
  d.ci95 = detail::kZ95 * d.stddev / std::sqrt(n);
  d.p50 = quantile_sorted(samples, 0.50);
  d.p90 = quantile_sorted(samples, 0.90);
  d.p99 = quantile_sorted(samples, 0.99);
  d.min = samples.front();
  d.max = samples.back();
  return d;
}

MonteCarloResult run_monte_carlo(const JobSpec& job, const InterruptionModel& model, const MonteCarloOptions& options) {
  job.check();
  if (options.runs < 2) throw Error(fmt::format("need at least 2 Monte Carlo runs, got {}", options.runs)).hint("e.g. --runs 1000");
  if (options.max_wait_s && options.max_run_s && *options.max_wait_s < *options.max_run_s)
    throw Error(fmt::format("max_wait ({}) must be >= max_run ({})", units::format_duration(*options.max_wait_s),
                            units::format_duration(*options.max_run_s)))
        .hint("SageMaker requires MaxWaitTimeInSeconds >= MaxRuntimeInSeconds");
  if (options.max_wait_s && job.spot_nodes() == 0)
    throw Error("max_wait applies to spot jobs only").hint("it bounds waiting for spot capacity plus running; drop it for on-demand");

  RunSetup s;
  s.job = &job;
  s.model = &model;
  s.options = &options;
  s.spot_nodes = job.spot_nodes();
  s.od_nodes = job.nodes - s.spot_nodes;
  s.hw_rate = job.total_gpus() * job.hardware_failure_rate_per_gpu_per_s;
  s.restart_billed_s = job.restart.billed_s() + job.checkpoint.read_s(job.nodes);
  s.segment_s = job.segments_with_checkpoint_s();
  std::optional<TraceCursor> cursor;
  if (model.kind() == InterruptionModel::Kind::trace && s.spot_nodes > 0) {
    const SpotTrace& trace = *model.trace();
    const bool per_instance = trace.instances == 1 && s.spot_nodes > 1;
    if (!per_instance && s.spot_nodes > trace.instances)
      throw Error(fmt::format("the job has {} spot instances but the trace requested only {}", s.spot_nodes, trace.instances))
          .at(trace.name)
          .hint("replay a trace of at least as many instances, a 1-instance trace (replayed per instance), or fit it (--fit-trace)");
    cursor.emplace(trace, per_instance ? 1 : s.spot_nodes);
    s.cursor = &*cursor;
    s.streams = per_instance ? s.spot_nodes : 1;
  } else {
    s.spot_rate = model.job_rate_per_s(s.spot_nodes);
  }
  // Refuse jobs whose expected attempts per segment are astronomically many.
  const double rate = (s.cursor ? 0.0 : s.spot_rate) + s.hw_rate;
  const double longest = *std::max_element(s.segment_s.begin(), s.segment_s.end());
  if (rate * longest > 30.0)
    throw Error(fmt::format("segments of {} between checkpoints against a mean time between interruptions of {}: "
                            "the job would practically never finish",
                            units::format_duration(longest), units::format_duration(1.0 / rate)))
        .hint("checkpoint more often (--checkpoint-interval auto)");

  std::vector<RunOutcome> outcomes(options.runs);
  const Rng base(options.seed);
  ThreadPool pool(options.threads);
  pool.parallel_for(options.runs, [&](size_t i) { outcomes[i] = simulate_run(s, base.fork(i)); });

  MonteCarloResult r;
  r.runs = options.runs;
  r.seed = options.seed;
  std::vector<double> time, cost, interruptions, lost, wait;
  size_t miss = 0, over_wait = 0, over_run = 0, failed = 0;
  double failed_cost = 0;
  for (const auto& o : outcomes) {
    time.push_back(o.time_s);
    cost.push_back(o.cost_usd);
    interruptions.push_back(static_cast<double>(o.interruptions));
    lost.push_back(o.lost_work_s);
    wait.push_back(o.wait_s);
    if (options.deadline_s && o.time_s > *options.deadline_s) ++miss;
    if (o.exceeded_max_wait) ++over_wait;
    if (o.exceeded_max_run) ++over_run;
    if (o.exceeded_max_wait || o.exceeded_max_run) ++failed, failed_cost += o.cost_at_failure_usd;
  }
  const auto n = static_cast<double>(options.runs);
  r.time_s = summarize_samples(time);
  r.cost_usd = summarize_samples(cost);
  r.interruptions = summarize_samples(interruptions);
  r.lost_work_s = summarize_samples(lost);
  r.wait_s = summarize_samples(wait);
  if (options.deadline_s) r.p_miss_deadline = static_cast<double>(miss) / n;
  if (options.max_wait_s) r.p_exceed_max_wait = static_cast<double>(over_wait) / n;
  if (options.max_run_s) r.p_exceed_max_run = static_cast<double>(over_run) / n;
  if (failed > 0) r.mean_cost_of_failed_usd = failed_cost / static_cast<double>(failed);
  if (options.keep_runs) r.outcomes = std::move(outcomes);
  return r;
}

json::Json to_json(const MonteCarloStats& d) {
  json::Json j;
  j["mean"] = d.mean;
  j["stddev"] = d.stddev;
  j["ci95"] = d.ci95;
  j["p50"] = d.p50;
  j["p90"] = d.p90;
  j["p99"] = d.p99;
  j["min"] = d.min;
  j["max"] = d.max;
  return j;
}

json::Json to_json(const MonteCarloResult& r) {
  json::Json j;
  j["runs"] = r.runs;
  j["seed"] = r.seed;
  j["time_s"] = to_json(r.time_s);
  j["cost_usd"] = to_json(r.cost_usd);
  j["interruptions"] = to_json(r.interruptions);
  j["lost_work_s"] = to_json(r.lost_work_s);
  j["wait_s"] = to_json(r.wait_s);
  if (r.p_miss_deadline) j["p_miss_deadline"] = *r.p_miss_deadline;
  if (r.p_exceed_max_wait) j["p_exceed_max_wait"] = *r.p_exceed_max_wait;
  if (r.p_exceed_max_run) j["p_exceed_max_run"] = *r.p_exceed_max_run;
  if (r.mean_cost_of_failed_usd) j["mean_cost_of_failed_usd"] = *r.mean_cost_of_failed_usd;
  return j;
}

}  // namespace trainplan::sim
