// Options of a plan search, shared by `trainplan plan` and `trainplan report`: declared once
// on the command (parsed by planner::search_request), and run with Ctrl-C keeping the best so
// far.
#pragma once

#include <CLI/CLI.hpp>

#include "trainplan/planner/search.hpp"
#include "trainplan/planner/search_io.hpp"

namespace trainplan::cli {

using SearchArgs = planner::SearchOptions;

/// Declares the search options on `cmd`. With `model_required` false the caller checks them
/// (report also accepts --plan instead of a search).
void add_search_options(CLI::App* cmd, SearchArgs& args, bool model_required);

/// Runs the search; Ctrl-C stops it and keeps what was found (SearchResult::cancelled).
planner::SearchResult run_search(const planner::SearchRequest& request);

}  // namespace trainplan::cli
