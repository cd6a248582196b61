// `trainplan plan --model xgboost`: classic ML on CPU instances as SageMaker training jobs
// (planner/classic_ml.hpp): per instance type and count, wall time, billable seconds and cost,
// where the time goes, the row count from which more instances pay; tuning sweeps with warm
// pools (--repeat, --parallel, --keep-alive) and managed spot (--purchase spot, --max-wait).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

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

/// Declares the options above on `plan`.
void add_classic_options(CLI::App* cmd, ClassicArgs& args);

/// The first classic-only option given ("" if none): an error with a GPU model.
std::string classic_option_given(const CLI::App* cmd);

/// Runs the classic plan and prints it; writes JSON to `json_out` when not empty.
void run_classic_plan(const planner::SearchOptions& search, const ClassicArgs& args, const CLI::App* cmd,
                      const std::string& json_out);

}  // namespace trainplan::cli
