// Classic ML on CPU instances: the XGBoost cost model, the SageMaker job phases, the break-even
// row count, tuning sweeps with warm pools and managed spot. The model is documented in
// planner/include/trainplan/planner/classic_ml.hpp; its start-up constants in
// simulator/data/lifecycle.json.
#include "trainplan/planner/classic_ml.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/simulator/job.hpp"

namespace trainplan::planner {
namespace {

constexpr int kMaxClassicInstances = 64;
constexpr int64_t kMaxRows = 1'000'000'000'000;  // 1e12
constexpr int64_t kMaxFeatures = 1'000'000;
constexpr int64_t kMaxRounds = 1'000'000;
constexpr int64_t kMaxSweepJobs = 1'000'000;

Error bad_flag(const std::string& flag, const std::string& what, const std::string& hint) {
  return Error(what).at(flag).hint(hint);
}

// Bin updates per row per round: all rows at the root, about half below (smaller child only).
double levels_factor(int depth) { return 1.0 + (depth - 1) / 2.0; }

// Nodes whose histograms are built (and all-reduced) at level l of a depth-wise tree.
double nodes_built(int level) { return level == 0 ? 1.0 : std::ldexp(1.0, level - 1); }

// S3 throughput of one instance for a short download (burst bandwidth where the size bursts).
double s3_bytes_per_s(const hw::CpuInstanceType& instance, const sim::LifecycleFacts& f) {
  return std::min(instance.burst_bandwidth_bytes_per_s * f.s3_network_efficiency, f.s3_max_instance_bytes_per_s);
}

double sagemaker_price(const hw::CpuInstanceType& instance) {
  if (!instance.prices.sagemaker_on_demand)
    throw Error(fmt::format("no SageMaker price for {}", instance.name))
        .hint("give its \"sagemaker_on_demand\" (or the family's \"sagemaker_uplift\") in a catalog folder (--catalog-dir)");
  return *instance.prices.sagemaker_on_demand;
}

void check_count(int count) {
  if (count < 1 || count > kMaxClassicInstances)
    throw bad_flag("--counts", fmt::format("instance count must be 1..{}, got {}", kMaxClassicInstances, count),
                   "distributed XGBoost jobs use a few instances, e.g. --counts 1,2,4");
}

}  // namespace

std::vector<ModelConstant> xgboost_constants() {
  const auto& f = sim::LifecycleFacts::builtin();
  auto fact = [&](const std::string& name, double value, const std::string& unit) {
    const auto& x = f.fact(name);
    return ModelConstant{name, unit == "s" ? units::format_duration(value) : units::format_bytes(value), x.kind, x.source};
  };
  return {
      {"max_depth default", "6", "documented", "XGBoost parameter docs (xgboost.readthedocs.io/en/stable/parameter.html)"},
      {"max_bin default", "256", "documented", "XGBoost parameter docs, tree_method=hist"},
      {"histogram bin", "16 B", "documented", "XGBoost source: GradientPairPrecise (two doubles) per bin"},
      {"bin update (one core)", units::format_duration(kHistUpdateSeconds), "estimate", "trainplan_estimate"},
      {"Rabit start-up (n > 1)", units::format_duration(kRabitInitSeconds), "estimate", "trainplan_estimate"},
      fact("sagemaker_cpu_starting", f.sagemaker_cpu_starting_s, "s"),
      fact("sagemaker_cpu_preparing", f.sagemaker_cpu_preparing_s, "s"),
      fact("sagemaker_input_download", f.sagemaker_input_download_s, "s"),
      fact("sagemaker_xgboost_image_download", f.sagemaker_xgboost_image_download_s, "s"),
      fact("sagemaker_xgboost_algorithm_start", f.sagemaker_xgboost_algorithm_start_s, "s"),
      fact("sagemaker_model_upload", f.sagemaker_model_upload_s, "s"),
      fact("sagemaker_warm_pool_start", f.sagemaker_warm_pool_start_s, "s"),
      fact("csv_bytes_per_value", f.csv_bytes_per_value, "B"),
  };
}

void check(const XgboostSpec& s) {
  if (s.rows < 1 || s.rows > kMaxRows)
    throw bad_flag("--rows", fmt::format("must be 1..{:g}, got {}", static_cast<double>(kMaxRows), s.rows),
                   "the training table's row count, e.g. --rows 892");
  if (s.features < 1 || s.features > kMaxFeatures)
    throw bad_flag("--features", fmt::format("must be 1..{}, got {}", kMaxFeatures, s.features),
                   "the number of feature columns (without the label), e.g. --features 8");
  if (s.rounds < 1 || s.rounds > kMaxRounds)
    throw bad_flag("--rounds", fmt::format("must be 1..{}, got {}", kMaxRounds, s.rounds), "boosting rounds (num_round), e.g. 100");
  if (s.max_depth < 1 || s.max_depth > 20)
    throw bad_flag("--max-depth", fmt::format("must be 1..20, got {}", s.max_depth), "XGBoost's default is 6");
  if (s.bins < 2 || s.bins > 65536)
    throw bad_flag("--bins", fmt::format("must be 2..65536, got {}", s.bins), "XGBoost's default max_bin is 256");
}

XgboostRound xgboost_round(const XgboostSpec& s, const hw::CpuInstanceType& instance, int count) {
  check(s);
  check_count(count);
  XgboostRound r;
  const double rows_here = static_cast<double>(s.rows) / count;
  r.hist_s = kHistUpdateSeconds * static_cast<double>(s.features) * rows_here * levels_factor(s.max_depth) / instance.cores;
  if (count > 1) {
    const double n = count;
    for (int level = 0; level < s.max_depth; ++level) {
      const double bytes = nodes_built(level) * static_cast<double>(s.features) * s.bins * kHistBinBytes;
      r.allreduce_bytes += bytes;
      r.allreduce_s += 2.0 * (n - 1) * instance.network.latency_s +
                       2.0 * (n - 1) / n * bytes / instance.network.bandwidth_bytes_per_s;
    }
  }
  return r;
}

ClassicJob xgboost_job(const XgboostSpec& s, const hw::CpuInstanceType& instance, int count, bool warm_start,
                       const sim::LifecycleFacts& f) {
  ClassicJob j;
  j.instance = "ml." + instance.name;
  j.count = count;
  j.warm_start = warm_start;
  j.round = xgboost_round(s, instance, count);
  j.price_usd_per_hour = sagemaker_price(instance);
  j.data_bytes = static_cast<double>(s.rows) * static_cast<double>(s.features + 1) * f.csv_bytes_per_value;
  JobPhases& p = j.phases;
  if (warm_start) {
    p.preparing_s = f.sagemaker_warm_pool_start_s;
  } else {
    p.starting_s = f.sagemaker_cpu_starting_s;
    p.preparing_s = f.sagemaker_cpu_preparing_s;
    p.image_download_s = f.sagemaker_xgboost_image_download_s;
  }
  p.input_download_s = f.sagemaker_input_download_s + j.data_bytes / count / s3_bytes_per_s(instance, f);
  p.algorithm_start_s = f.sagemaker_xgboost_algorithm_start_s;
  p.training_s = static_cast<double>(s.rounds) * j.round.total_s() + (count > 1 ? kRabitInitSeconds : 0.0);
  p.upload_s = f.sagemaker_model_upload_s;
  j.wall_s = p.wall_s();
  j.billed_s_per_instance = p.billed_s();
  j.billed_s_total = j.billed_s_per_instance * count;
  j.cost_usd = sim::billed_cost_usd(j.billed_s_per_instance, j.price_usd_per_hour, f.sagemaker_minimum_billed_s) * count;
  // float32 values, the 1-byte quantized bin index and a float32 gradient pair per row.
  const double rows_here = static_cast<double>(s.rows) / count;
  j.memory_bytes_per_instance = rows_here * (static_cast<double>(s.features) * 5.0 + 8.0);
  j.usable_memory_bytes = instance.host_memory_bytes * kUsableMemoryFraction;
  j.fits_memory = j.memory_bytes_per_instance <= j.usable_memory_bytes;
  return j;
}

std::optional<double> break_even_rows(const XgboostSpec& s, const hw::CpuInstanceType& instance, int count,
                                      const sim::LifecycleFacts& f) {
  check_count(count);
  if (count == 1) return std::nullopt;
  // Wall time is affine in the rows: evaluate at two row counts to get a + b·R on each side.
  XgboostSpec lo = s, hi = s;
  lo.rows = 1;
  hi.rows = 1'000'001;
  const double span = static_cast<double>(hi.rows - lo.rows);
  const double b1 = (xgboost_job(hi, instance, 1, false, f).wall_s - xgboost_job(lo, instance, 1, false, f).wall_s) / span;
  const double bn = (xgboost_job(hi, instance, count, false, f).wall_s - xgboost_job(lo, instance, count, false, f).wall_s) / span;
  const double a1 = xgboost_job(lo, instance, 1, false, f).wall_s - b1 * lo.rows;
  const double an = xgboost_job(lo, instance, count, false, f).wall_s - bn * lo.rows;
  if (!(b1 > bn)) return std::nullopt;
  return std::max(0.0, (an - a1) / (b1 - bn));
}

SweepResult sweep_jobs(const SweepJob& cold, const SweepJob& warm, int count, double usd_per_hour, const SweepRequest& req,
                       const sim::LifecycleFacts& f) {
  if (req.repeat < 1 || req.repeat > kMaxSweepJobs)
    throw bad_flag("--repeat", fmt::format("must be 1..{}, got {}", kMaxSweepJobs, req.repeat), "the number of jobs, e.g. 20");
  if (req.parallel < 1 || req.parallel > kMaxSweepJobs)
    throw bad_flag("--parallel", fmt::format("must be 1..{}, got {}", kMaxSweepJobs, req.parallel),
                   "jobs running at once (a tuning job's max_parallel_jobs), e.g. 4");
  if (!(req.keep_alive_s >= 0) || req.keep_alive_s > f.sagemaker_warm_pool_max_keep_alive_s)
    throw bad_flag("--keep-alive",
                   fmt::format("must be 0..{}, got {}", units::format_duration(f.sagemaker_warm_pool_max_keep_alive_s),
                               units::format_duration(req.keep_alive_s)),
                   "SageMaker keeps a warm pool at most 3600 s (KeepAlivePeriodInSeconds); 0 = no warm pool");
  SweepResult r;
  r.jobs = req.repeat;
  r.slots = std::min(req.parallel, req.repeat);
  r.waves = (req.repeat + r.slots - 1) / r.slots;
  const double price_per_s = usd_per_hour / 3600.0;
  r.cold_wall_s = static_cast<double>(r.waves) * cold.wall_s;
  r.cold_billed_s = static_cast<double>(r.jobs) * cold.billed_s_total;
  r.cold_cost_usd = r.cold_billed_s * price_per_s;
  if (req.keep_alive_s > 0) {
    r.warm_starts = r.jobs - r.slots;
    r.wall_s = cold.wall_s + static_cast<double>(r.waves - 1) * warm.wall_s;
    r.keep_alive_billed_s = static_cast<double>(r.slots) * count * req.keep_alive_s;
    r.billed_s = static_cast<double>(r.slots) * cold.billed_s_total + static_cast<double>(r.warm_starts) * warm.billed_s_total +
                 r.keep_alive_billed_s;
  } else {
    r.wall_s = r.cold_wall_s;
    r.billed_s = r.cold_billed_s;
  }
  r.cost_usd = r.billed_s * price_per_s;
  return r;
}

SweepResult sweep(const XgboostSpec& s, const hw::CpuInstanceType& instance, int count, const SweepRequest& req,
                  const sim::LifecycleFacts& f) {
  const ClassicJob cold = xgboost_job(s, instance, count, false, f);
  const ClassicJob warm = xgboost_job(s, instance, count, true, f);
  return sweep_jobs({cold.wall_s, cold.billed_s_total}, {warm.wall_s, warm.billed_s_total}, count, cold.price_usd_per_hour, req, f);
}

SpotResult spot_job(const XgboostSpec& s, const hw::CpuInstanceType& instance, int count, const SpotRequest& req,
                    const sim::LifecycleFacts& f) {
  const ClassicJob cold = xgboost_job(s, instance, count, false, f);
  if (!instance.prices.spot || !instance.prices.ec2_on_demand)
    throw Error(fmt::format("no spot price for {}", instance.name))
        .hint("give its family's \"spot_discount\" and its \"ec2_on_demand\" in a catalog folder (--catalog-dir)");
  SpotResult out;
  out.spot_price_usd_per_hour = cold.price_usd_per_hour * (*instance.prices.spot / *instance.prices.ec2_on_demand);
  sim::JobSpec job;
  job.steps = s.rounds;
  job.step_time_s = cold.round.total_s();
  job.nodes = count;
  job.gpus_per_node = 1;
  job.purchase = sim::PurchaseOption::spot;
  job.platform = plan::Platform::sagemaker;
  auto startup_of = [&](const JobPhases& p) {
    return sim::StartupSpec{.provisioning_s = p.unbilled_s(), .container_pull_s = p.image_download_s, .data_staging_s = p.input_download_s,
                        .framework_init_s = p.algorithm_start_s + p.upload_s + (count > 1 ? kRabitInitSeconds : 0.0)};
  };
  job.restart = startup_of(cold.phases);
  job.startup = req.warm_start ? startup_of(xgboost_job(s, instance, count, true, f).phases) : job.restart;
  job.final_checkpoint = false;
  job.prices = {.on_demand_usd_per_hour = cold.price_usd_per_hour, .spot_usd_per_hour = out.spot_price_usd_per_hour,
                .minimum_billed_s = f.sagemaker_minimum_billed_s};
  job.hardware_failure_rate_per_gpu_per_s = 0;
  job.check();
  const sim::InterruptionModel model = sim::InterruptionModel::trace_default();
  sim::MonteCarloOptions mc;
  mc.runs = req.runs;
  mc.seed = req.seed;
  mc.max_wait_s = req.max_wait_s;
  mc.max_run_s = req.max_run_s;
  out.monte_carlo = sim::run_monte_carlo(job, model, mc);
  out.model = model.describe();
  out.assumptions = model.assumptions();
  out.assumptions.push_back(fmt::format("spot price: SageMaker on-demand x (1 - {:.0f}% spot discount of the {} family, {})",
                                        100.0 * (1.0 - *instance.prices.spot / *instance.prices.ec2_on_demand), instance.family,
                                        instance.prices.spot_estimated ? "an estimate" : "sampled"));
  out.assumptions.push_back("no checkpoints: an interrupted XGBoost job restarts from the first round");
  return out;
}

json::Json to_json(const ClassicJob& j) {
  const JobPhases& p = j.phases;
  return {{"instance", j.instance},
          {"count", j.count},
          {"warm_start", j.warm_start},
          {"round", {{"hist_s", j.round.hist_s}, {"allreduce_s", j.round.allreduce_s}, {"allreduce_bytes", j.round.allreduce_bytes}}},
          {"phases",
           {{"starting_s", p.starting_s},
            {"preparing_s", p.preparing_s},
            {"input_download_s", p.input_download_s},
            {"image_download_s", p.image_download_s},
            {"algorithm_start_s", p.algorithm_start_s},
            {"training_s", p.training_s},
            {"upload_s", p.upload_s}}},
          {"wall_s", j.wall_s},
          {"billed_s_per_instance", j.billed_s_per_instance},
          {"billed_s_total", j.billed_s_total},
          {"price_usd_per_hour", j.price_usd_per_hour},
          {"cost_usd", j.cost_usd},
          {"data_bytes", j.data_bytes},
          {"memory_bytes_per_instance", j.memory_bytes_per_instance},
          {"fits_memory", j.fits_memory}};
}

json::Json to_json(const SweepResult& r) {
  return {{"jobs", r.jobs},
          {"slots", r.slots},
          {"waves", r.waves},
          {"warm_starts", r.warm_starts},
          {"wall_s", r.wall_s},
          {"billed_s", r.billed_s},
          {"keep_alive_billed_s", r.keep_alive_billed_s},
          {"cost_usd", r.cost_usd},
          {"without_warm_pool", {{"wall_s", r.cold_wall_s}, {"billed_s", r.cold_billed_s}, {"cost_usd", r.cold_cost_usd}}}};
}

}  // namespace trainplan::planner
