// Options of a plan search, shared by `trainplan plan` and `trainplan report`: declared once,
// parsed once into a planner::SearchRequest, and run with Ctrl-C keeping the best so far.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "trainplan/planner/search.hpp"

namespace trainplan::cli {

struct SearchArgs {
  std::string model;
  std::string tokens;
  int64_t global_batch = 0;
  std::string global_batch_range;
  int64_t seq_len = 0;
  std::string instances;
  std::string counts;
  int max_gpus = 1024;
  int max_instances = 0;
  std::string objective = "time";
  std::string deadline;
  std::string budget;
  std::string platform = "ec2";
  std::string purchase = "on-demand";
  bool spot = false;
  std::string micro_batches;
  std::string zero;
  std::string recompute;
  std::string schedules;
  std::string virtual_stages;
  std::string context_parallel;
  std::string dp_algorithms;
  std::string bucket_sizes;
  bool no_sequence_parallel = false;
  bool tp_across_nodes = false;
  std::string partition = "time";
  std::string framework;
  size_t simulate_top = 32;
  size_t exact_top = 50;
  size_t spot_runs = 200;
  uint64_t seed = 1;
  std::vector<std::string> off;
  size_t top = 10;
  int threads = 0;
};

/// Declares the search options on `cmd`. With `model_required` false the caller checks them
/// (report also accepts --plan instead of a search).
void add_search_options(CLI::App* cmd, SearchArgs& args, bool model_required);

/// The request the options describe. Throws Error naming the option for bad values.
planner::SearchRequest search_request(const SearchArgs& args);

/// Runs the search; Ctrl-C stops it and keeps what was found (SearchResult::cancelled).
planner::SearchResult run_search(const planner::SearchRequest& request);

}  // namespace trainplan::cli
