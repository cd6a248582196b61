// `trainplan plan --model xgboost`: classic ML on CPU instances as SageMaker training jobs
// (planner/classic_ml.hpp): per instance type and count, wall time, billable seconds and cost,
// where the time goes, the row count from which more instances pay; tuning sweeps with warm
// pools (--repeat, --parallel, --keep-alive) and managed spot (--purchase spot, --max-wait).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "trainplan/core/json.hpp"
#include "trainplan/planner/classic_plan.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/planner/search_io.hpp"

namespace trainplan::cli {

/// The classic-ML options of `plan`, as typed (0 / empty = not given).
struct ClassicArgs {
  int64_t rows = 0;
  int64_t features = 0;
  int64_t rounds = 100;
  int64_t max_depth = 6;
  int64_t bins = 256;
  int64_t repeat = 0;
  int64_t parallel = 1;
  std::string keep_alive;
  std::string max_wait;
  std::string max_run;
};

/// Model names that select the classic-ML planner.
bool is_classic_model(const std::string& model);

/// Declares the options above on `plan`, or on `report` (`for_report`: --repeat, --parallel,
/// --keep-alive, --max-wait and --max-run there also drive a GPU plan's SageMaker job section).
void add_classic_options(CLI::App* cmd, ClassicArgs& args, bool for_report = false);

/// The objective a classic job is picked by: --objective, with --deadline or --budget.
struct ClassicObjective {
  std::string objective;
  double deadline_s = 0;
  double budget_usd = 0;
};
/// Throws Error naming --deadline / --budget (bad or missing for the objective).
ClassicObjective classic_objective(const planner::SearchOptions& search);

/// The first classic-only option given ("" if none): an error with a GPU model.
std::string classic_option_given(const CLI::App* cmd);

/// The classic request of `plan` / `report` from their options (GPU-only options refused);
/// throws Error naming the flag.
planner::ClassicRequest classic_request(const planner::SearchOptions& search, const ClassicArgs& args, const CLI::App* cmd);

/// Runs the classic plan and prints it; writes every row as JSON to `json_out` and the best job
/// (by --objective) as a job file to `output` when not empty.
void run_classic_plan(const planner::SearchOptions& search, const ClassicArgs& args, const CLI::App* cmd,
                      const std::string& json_out, const std::string& output);

/// `trainplan job FILE` for a classic job file (`doc`, read from `file`): the job's phases, cost,
/// warm pool, managed spot and sweep; the GPU job's options are refused by name.
void run_classic_job(const std::string& file, const json::Json& doc, const planner::JobRequest& request, const CLI::App* cmd,
                     bool json_output);

}  // namespace trainplan::cli
