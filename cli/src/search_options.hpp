// Options of a plan search, shared by `trainplan plan` and `trainplan report`: declared once,
// parsed once into a planner::SearchRequest (planner/search_io.hpp), and run with Ctrl-C
// keeping the best so far.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "trainplan/planner/search.hpp"
#include "trainplan/planner/search_io.hpp"

namespace trainplan::cli {

/// The options as typed; planner::search_request parses them into a request (the Python
/// module's plan() and report() fill the same struct from keyword arguments).
using SearchArgs = planner::SearchOptions;

/// Declares the search options on `cmd`. With `model_required` false the caller checks them
/// (report also accepts --plan instead of a search).
void add_search_options(CLI::App* cmd, SearchArgs& args, bool model_required);

/// Runs the search; Ctrl-C stops it and keeps what was found (SearchResult::cancelled).
planner::SearchResult run_search(const planner::SearchRequest& request);

/// When `best` misses the request's deadline or budget: says on stderr by how much (and that
/// the plan was still written to `written_to`, if not empty) and sets the exit code to
/// kExitObjectiveMissed (3).
void report_missed_objective(const planner::SearchRequest& request, const planner::Candidate& best, const std::string& written_to);

}  // namespace trainplan::cli
