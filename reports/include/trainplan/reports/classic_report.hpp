// File: trainplan/reports/classic_report.hpp
//
// The report of a classic-ML request (`trainplan report --model xgboost`): the same Markdown and
// self-contained HTML files as the GPU plan report, with what `plan --model xgboost` prints: the
// comparison of every instance type x count, the SageMaker phases (billed or not), where more
// instances pay, and on request the tuning sweep with warm pools and managed spot with max_wait.
//
//   planner::ClassicRequest req{.spec = {.rows = 892, .features = 8}, .instances = {&m5}, .counts = {1, 2}};
//   reports::ClassicReport r = reports::build_classic_report(req, "time");
//   json::write_text_file("report.md", reports::render_markdown(r));
//   json::write_text_file("report.html", reports::render_html(r));
//
// Deterministic: the same request (and spot seed) gives byte-identical files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "trainplan/hwprofiles/catalog.hpp"

#include "trainplan/planner/classic_plan.hpp"

namespace trainplan::reports {

struct ClassicReport {
  planner::ClassicRequest request;
  std::vector<planner::ClassicRow> rows;   // instance-major, as compare_classic returns them
  size_t best = 0;                         // index of the row the objective picks
  std::string objective;                   // "time", "cost", ...
  std::string html_name = "report.html";   // what the Markdown links to
  /// Instance types whose SageMaker on-demand (or managed spot) price rests on sources the
  /// catalog marks unverified, each with the source ids and dates ("id (date), ..."); their
  /// costs are marked "*".
  std::vector<std::pair<std::string, std::string>> unverified_on_demand, unverified_spot;
};

/// Runs the comparison (planner::compare_classic) and picks the best row by `objective`
/// (planner::best_classic_row). Throws Error naming the flag for a bad request.
ClassicReport build_classic_report(const planner::ClassicRequest& request, const hw::Catalog& catalog, const std::string& objective,
                                   double deadline_s = 0, double budget_usd = 0);

std::string render_markdown(const ClassicReport& report);
std::string render_html(const ClassicReport& report);

}  // namespace trainplan::reports
