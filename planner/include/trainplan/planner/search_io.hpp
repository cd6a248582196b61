// File: trainplan/planner/search_io.hpp
//
// The search as its front ends see it (the `trainplan plan` / `report` options and the Python
// module's keyword arguments): options as text, parsed once into a SearchRequest; results as
// the JSON `trainplan plan` writes.
//
//   planner::SearchOptions o;
//   o.model = "gpt2-124m"; o.tokens = "1e9"; o.instances = "p3.8xlarge"; o.max_gpus = 16;
//   planner::SearchRequest req = planner::search_request(o);   // Error naming the option
//   planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
//   if (res.ranked.empty()) throw planner::nothing_fits_error(res, req);
//   plan::Plan best = planner::best_plan(res);                  // with "predicted" filled in
//   json::Json all = planner::candidates_json(res);             // `trainplan plan --json`
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::planner {

/// Every option of a search as typed: quantities and lists as text ("300B", "1,2,4"), parsed by
/// search_request(). Field names are the CLI's long options with '-' as '_' (`--max-gpus` is
/// max_gpus; `--cp`, `--ep`, `--vp`, `--off` and `--for` are context_parallel, expert_parallel,
/// virtual_stages, off and framework; `--schedule` is another name of `--schedules`); defaults are the CLI's.
struct SearchOptions {
  std::string model;
  std::string tokens;
  /// The work as samples per epoch (--samples, e.g. 1.28M) and epochs (--epochs, default 1),
  /// instead of tokens.
  std::string samples;
  std::string epochs;
  /// Calibration profile for its GPU type ("" : the profile directory's defaults only).
  std::string calibration;
  int64_t global_batch = 0;
  std::string global_batch_range;
  int64_t seq_len = 0;
  std::string instances;
  std::string counts;
  int64_t max_gpus = 1024;  // 64-bit, like every integer option, so a bound check sees the value as given
  int64_t max_instances = 0;
  /// Placement (--azs, --data-region, --dataset-size): AZs the instances are split over (a
  /// candidate with fewer instances takes one AZ each), the Region of the training data ("" =
  /// the job's) and its size ("" = from the work).
  int64_t azs = 1;
  std::string data_region;
  std::string software;  // --stack
  std::string dataset_size;
  /// --objective as given ("" = not given: see effective_objective).
  std::string objective;
  std::string deadline;
  std::string budget;
  std::string platform = "ec2";
  std::string purchase = "on-demand";
  bool spot = false;
  std::string micro_batches;
  std::string zero;
  std::string tp;  // --tp, --pp, --dp: layout filters, comma-separated degrees
  std::string pp;
  std::string dp;
  std::string data_input = "s3-fastfile";
  std::string recompute;
  std::string schedules;
  std::string virtual_stages;
  std::string context_parallel;
  std::string expert_parallel;  // --ep
  std::string capacity_factor;  // --capacity-factor
  std::string load_imbalance;   // --load-imbalance
  std::string dp_algorithms;
  std::string bucket_sizes;
  bool no_sequence_parallel = false;
  bool sync_bn = false;  // --sync-bn
  std::string precision;   // --precision: fp32, tf32, fp16, bf16 or fp8 ("": each GPU's 16-bit type)
  std::string fp8_recipe;  // --fp8-recipe: delayed, current, mxfp8 or blockwise (with --precision fp8)
  bool tp_across_nodes = false;
  std::string partition = "time";
  std::string framework;
  size_t simulate_top = 32;
  size_t exact_top = 50;
  size_t spot_runs = 200;
  uint64_t seed = 1;
  std::vector<std::string> off;
  size_t top = 10;
  int64_t threads = 0;
};

// The largest cluster a search considers: a search's memory grows with it (GPT-3 175B over
// every instance type held 1.3 GB at 4,096 GPUs, 3.1 GB at 16,384 and 15 GB at 131,072 after
// 5 minutes on a loaded 2-core machine, 2026-11-25), so it stops at twice the largest
// published training runs (16,384 GPUs). A plan file may still describe up to limits::kMaxGpus.
inline constexpr int64_t kMaxSearchGpus = 32768;
// The deepest model a search takes: its time grows with the layer count (1,000 layers: 52 s,
// 10,000: over 10 minutes for 64 GPUs of one instance type on the same loaded machine), so it
// stops at twice the deepest published models (about 1,000 layers). `check` and `simulate`
// take plans of up to limits::kMaxLayers.
inline constexpr int64_t kMaxSearchLayers = 2048;

/// The request the options describe. Throws Error naming the option (as the CLI spells it)
/// for bad values: every bound and choice the CLI's flags declare is checked here too (the
/// CLI checks them first, while parsing; the Python module's keyword arguments only here).
SearchRequest search_request(const SearchOptions& options);

/// The objective a search runs: --objective as given; without it, a --deadline alone means
/// cost-under-deadline, a --budget alone time-under-budget, neither "time". A constraint is never
/// dropped in silence: a deadline or budget the objective does not use, or both without an
/// --objective, is an error naming the flag.
std::string effective_objective(const SearchOptions& options);

/// MFU at the step time the candidate is ranked by (simulated where it was simulated).
double ranked_mfu(const Candidate& candidate);

/// What `trainplan plan` records of a candidate's prediction ("predicted" in plan files):
/// source, step times, steps, time to train, MFU, tokens/s, peak memory, costs, whole jobs.
json::Json predicted_json(const Candidate& candidate);

/// The best candidate's plan with "predicted" filled in (what `trainplan plan -o` writes).
/// `result.ranked` must not be empty.
plan::Plan best_plan(const SearchResult& result);

/// Every ranked candidate as `trainplan plan --json` writes it: the plan's JSON plus
/// "predicted", "rank" (1 = best) and "pareto".
json::Json candidates_json(const SearchResult& result);

/// The search's bookkeeping: global_batch, seq_len, enumerated, cancelled, counts, dropped
/// (reason -> count), stages (name, seconds, kept, note, enabled), pareto (indices into ranked),
/// rank_correlation (or null).
json::Json search_summary_json(const SearchResult& result);

/// The error `trainplan plan` reports when nothing fits: the closest attempt (instance type,
/// layout, memory needed vs the GPU's) and what to change.
Error nothing_fits_error(const SearchResult& result, const SearchRequest& request);

}  // namespace trainplan::planner
