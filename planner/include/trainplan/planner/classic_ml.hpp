// File: trainplan/planner/classic_ml.hpp
//
// Classic ML on CPU instances: distributed gradient-boosted trees (XGBoost, `tree_method=hist`)
// as a SageMaker training job, from the request to the uploaded model. A small table's job is
// almost all start-up (instances, input download, image download), so the job model is the
// SageMaker phases with measured durations (simulator/data/lifecycle.json) plus the training
// the XGBoost cost model below predicts.
//
//   planner::XgboostSpec x{.rows = 892, .features = 8, .rounds = 100};
//   const hw::CpuInstanceType& m5 = catalog.cpu_instance("ml.m5.large");
//   planner::ClassicJob one = planner::xgboost_job(x, m5, 1);
//   planner::ClassicJob two = planner::xgboost_job(x, m5, 2);
//   one.wall_s; two.billed_s_total;                 // ~ the same wall time, twice the billing
//   planner::break_even_rows(x, m5, 2);             // rows at which 2 instances beat 1
//   planner::SweepResult s = planner::sweep(x, m5, 1, {.repeat = 20, .parallel = 4, .keep_alive_s = 600});
//
// XGBoost cost model, per boosting round on n instances of c physical cores each, rows R,
// features F, depth D, bins B (depth-wise growth, XGBoost's default `grow_policy`):
// - histogram construction: every row adds its gradient pair to one bin per feature at level 0;
//   below, only the smaller child of each split is built (the other is parent − sibling), so
//   about half the rows per level: t_hist = t_u · F · (R/n) · (1 + (D − 1)/2) / c, with t_u the
//   time of one bin update on one core (kHistUpdateSeconds).
// - histogram all-reduce per level (Rabit, XGBoost's collective): level l sums the histograms of
//   the nodes it builds (1 at level 0, 2^(l−1) below), each F · B · 16 bytes (a pair of doubles
//   per bin), as a ring over the instance network: 2(n−1)·α + 2(n−1)/n · S / β, with α the
//   network latency and β the sustained (baseline) bandwidth. None on one instance.
// - a job on n > 1 instances also starts the Rabit tracker and connects the workers once
//   (kRabitInitSeconds).
// The rows are sharded over the instances (S3DataDistributionType=ShardedByS3Key); with the
// SDK default FullyReplicated every instance downloads and trains on all rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::planner {

/// One XGBoost training run. Defaults are XGBoost's (parameter docs): max_depth 6, max_bin 256.
struct XgboostSpec {
  int64_t rows = 0;
  int64_t features = 0;
  int64_t rounds = 100;   // num_round
  int max_depth = 6;
  int bins = 256;         // max_bin
};

/// Seconds of one histogram-bin update (one row, one feature) on one core: an estimate (a
/// read of the row's bin index and a read-modify-write of a 16-byte gradient pair held in L1/L2,
/// about six cycles at 3 GHz), not a measurement.
inline constexpr double kHistUpdateSeconds = 2e-9;
/// Rabit tracker start and worker connection of a job on several instances: an estimate.
inline constexpr double kRabitInitSeconds = 2.0;
/// Bytes of one histogram bin: a gradient and a hessian sum in double precision.
inline constexpr double kHistBinBytes = 16.0;
/// Share of the instance memory the training data may use (OS, container, XGBoost's buffers).
inline constexpr double kUsableMemoryFraction = 0.8;

/// The inputs the model rests on, with their sources (for printing and JSON).
struct ModelConstant {
  std::string name;
  std::string value;
  std::string kind;    // documented, measured, estimate, convention
  std::string source;
};
std::vector<ModelConstant> xgboost_constants();

/// Throws Error naming the flag (`--rows`, `--features`, `--rounds`, `--max-depth`, `--bins`).
void check(const XgboostSpec& spec);

/// Per round, per instance.
struct XgboostRound {
  double hist_s = 0;
  double allreduce_s = 0;
  double allreduce_bytes = 0;  // summed over the levels of one tree
  double total_s() const { return hist_s + allreduce_s; }
};
XgboostRound xgboost_round(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count);

/// The SageMaker phases of one training job, per instance (all instances run them in parallel).
struct JobPhases {
  double starting_s = 0;          // not billed
  double preparing_s = 0;         // not billed (a warm pool reuse: the warm start instead)
  double input_download_s = 0;    // billed
  double image_download_s = 0;    // billed (0 on a warm pool reuse)
  double algorithm_start_s = 0;   // billed
  double training_s = 0;          // billed: rounds x round + Rabit start-up
  double upload_s = 0;            // billed
  double unbilled_s() const { return starting_s + preparing_s; }
  double billed_s() const { return input_download_s + image_download_s + algorithm_start_s + training_s + upload_s; }
  double wall_s() const { return unbilled_s() + billed_s(); }
};

struct ClassicJob {
  std::string instance;         // "ml.m5.large"
  int count = 1;
  bool warm_start = false;      // reuses a warm pool
  XgboostRound round;
  JobPhases phases;
  double wall_s = 0;            // request to completed
  double billed_s_per_instance = 0;
  double billed_s_total = 0;    // count x per instance
  double price_usd_per_hour = 0;  // SageMaker on-demand
  double cost_usd = 0;
  double data_bytes = 0;        // the CSV the job downloads (all instances)
  double memory_bytes_per_instance = 0;
  double usable_memory_bytes = 0;
  bool fits_memory = true;
};

/// The job of `spec` on `count` instances (1..64), cold (`warm_start` false) or on a warm pool.
/// Throws Error for a bad spec or count, or an instance without a SageMaker price.
ClassicJob xgboost_job(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count, bool warm_start = false,
                       const sim::LifecycleFacts& facts = sim::LifecycleFacts::builtin());

/// Rows from which `count` instances finish sooner (wall time) than one, all else as in `spec`:
/// the wall time is a + b·R on either side, so R* = (a_n − a_1) / (b_1 − b_n); nullopt when more
/// instances never win (b_n >= b_1). Billing never breaks even: n instances bill
/// (n − 1) x the fixed phases more, plus the all-reduce and Rabit start-up.
std::optional<double> break_even_rows(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count,
                                      const sim::LifecycleFacts& facts = sim::LifecycleFacts::builtin());

/// Many short jobs, as a hyperparameter tuning sweep runs them: `repeat` jobs, at most
/// `parallel` at a time, each on `count` instances. With a warm pool (keep_alive_s > 0; at most
/// the documented 3600 s) each of the `parallel` slots starts cold once and reuses its pool for
/// its later jobs (they follow each other with no gap), and every pool stays billed for
/// keep_alive_s after its slot's last job.
struct SweepRequest {
  int64_t repeat = 1;
  int64_t parallel = 1;
  double keep_alive_s = 0;
};
struct SweepResult {
  int64_t jobs = 0;
  int64_t slots = 0;            // min(parallel, repeat)
  int64_t waves = 0;            // ceil(repeat / slots)
  int64_t warm_starts = 0;
  double wall_s = 0;
  double billed_s = 0;          // instance-seconds, keep-alive included
  double keep_alive_billed_s = 0;
  double cost_usd = 0;
  double cold_wall_s = 0;       // the same sweep without a warm pool
  double cold_billed_s = 0;
  double cold_cost_usd = 0;
};
SweepResult sweep(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count, const SweepRequest& request,
                  const sim::LifecycleFacts& facts = sim::LifecycleFacts::builtin());

/// One job of a sweep as the sweep arithmetic needs it: request-to-end wall time and billed
/// instance-seconds of all its instances.
struct SweepJob {
  double wall_s = 0;
  double billed_s_total = 0;
};
/// The sweep arithmetic shared by XGBoost jobs and GPU plans (`trainplan job --repeat`): `cold`
/// is a job that provisions, `warm` one that reuses a warm pool; `count` instances per job at
/// `usd_per_hour` each. Throws Error naming --repeat, --parallel or --keep-alive.
SweepResult sweep_jobs(const SweepJob& cold, const SweepJob& warm, int count, double usd_per_hour, const SweepRequest& request,
                       const sim::LifecycleFacts& facts = sim::LifecycleFacts::builtin());

/// Managed spot for one job: the job as a sim::JobSpec (rounds as steps, the phases as its
/// start-up, no checkpoints, no hardware failures) under the default spot model (no Spot
/// Advisor bucket is known for the CPU types), with SageMaker's max_wait and max_run. With
/// `warm_start` the first start reuses a warm pool; restarts after an interruption start cold.
struct SpotRequest {
  std::optional<double> max_wait_s;
  std::optional<double> max_run_s;
  size_t runs = 1000;
  uint64_t seed = 1;
  bool warm_start = false;
};
struct SpotResult {
  double spot_price_usd_per_hour = 0;  // SageMaker on-demand x (1 - the family's spot discount)
  sim::MonteCarloResult monte_carlo;
  std::string model;                   // the interruption model, described
  std::vector<std::string> assumptions;
};
SpotResult spot_job(const XgboostSpec& spec, const hw::CpuInstanceType& instance, int count, const SpotRequest& request,
                    const sim::LifecycleFacts& facts = sim::LifecycleFacts::builtin());

json::Json to_json(const ClassicJob& job);
json::Json to_json(const SweepResult& sweep);

}  // namespace trainplan::planner
