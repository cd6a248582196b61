// `trainplan report`: a Markdown and a self-contained HTML report of a planning run (the same
// search as `trainplan plan`) or of one plan file (--plan).
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "search_options.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/reports/report.hpp"

namespace trainplan::cli {
namespace {

struct ReportArgs {
  ReportArgs() { search.spot_runs = 1000; }
  SearchArgs search;          // the search, as `trainplan plan` (--spot-runs, --seed and --top
                              // also drive the report's Monte Carlo and table)
  std::string plan_file;      // or one plan
  std::string history_db;     // predicted vs measured section
  size_t spot_plans = 10;
  bool no_simulate = false;
  std::string format = "both";
  std::string output = "report";
};

reports::Report build(const ReportArgs& a, const reports::ReportOptions& o) {
  const hw::Catalog& catalog = user_catalog();
  if (!a.plan_file.empty()) {
    if (!a.search.model.empty() || !a.search.instances.empty())
      throw Error("--plan reports one plan; --model and --instances describe a search").hint("give one or the other");
    double tokens = a.search.tokens.empty() ? 0 : flag_positive_quantity("--tokens", a.search.tokens, units::Dimension::count);
    plan::Plan p = plan::read_plan_file(a.plan_file);
    double epochs = 0, samples = 0;
    if (!a.search.samples.empty() || !a.search.epochs.empty()) {
      // The work as samples x epochs, in the plan's model's tokens per sample.
      planner::SearchOptions work = a.search;
      work.model = p.model;
      if (work.seq_len == 0) work.seq_len = p.seq_len;
      const planner::SearchRequest req = planner::search_request(work);
      tokens = req.tokens;
      epochs = req.epochs;
      samples = req.samples_per_epoch;
    }
    reports::ReportOptions po = o;
    po.calibration = a.search.calibration;
    reports::Report r = reports::build_plan_report(p, catalog, po, tokens, a.plan_file);
    r.epochs = epochs;
    r.samples_per_epoch = samples;
    return r;
  }
  if (a.search.model == "xgboost")
    throw Error("classic ML (xgboost) has no report yet").at("--model")
        .hint("trainplan plan --model xgboost --rows R --features F prints the comparison, sweep and spot tables (--json FILE writes them)");
  if (a.search.model.empty() || (a.search.tokens.empty() && a.search.samples.empty()))
    throw Error("trainplan report needs --model and --tokens or --samples (a search) or --plan FILE (one plan)")
        .hint("trainplan report --model gpt2-124m --tokens 1e9 --instances p3.8xlarge --max-gpus 16");
  planner::SearchRequest req = planner::search_request(a.search);
  req.exact_top = std::max<size_t>(req.exact_top, a.search.top);
  planner::SearchResult res = run_search(req);
  return reports::build_report(req, res, catalog, o);
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void run(const ReportArgs& a) {
  const bool to_stdout = a.output == "-";
  if (to_stdout && a.format != "md")
    throw Error("-o - writes the Markdown to standard output").hint("add --format md, or give a file name");
  reports::ReportOptions o;
  o.top = a.search.top;
  o.spot_plans = a.spot_plans;
  o.spot_runs = a.search.spot_runs;
  o.seed = a.search.seed;
  o.history_db = a.history_db;
  o.threads = static_cast<size_t>(a.search.threads);
  o.simulate = !a.no_simulate;
  if (!to_stdout) o.html_name = base_name(a.output) + ".html";
  const reports::Report r = build(a, o);
  if (global_options().verbose)
    for (const auto& [part, seconds] : r.timings) std::fprintf(stderr, "report: %s %.3f s\n", part.c_str(), seconds);
  if (to_stdout) {
    std::fputs(reports::render_markdown(r).c_str(), stdout);
    if (a.plan_file.empty()) report_missed_objective(planner::search_request(a.search), r.plans.front().candidate, "standard output");
    return;
  }
  std::vector<std::string> written;
  if (a.format == "md" || a.format == "both") {
    json::write_text_file(a.output + ".md", reports::render_markdown(r));
    written.push_back(a.output + ".md");
  }
  if (a.format == "html" || a.format == "both") {
    json::write_text_file(a.output + ".html", reports::render_html(r));
    written.push_back(a.output + ".html");
  }
  const auto& best = r.plans.front().candidate;
  std::printf("trainplan report: %s: best plan %d x %s, dp/tp/pp %d/%d/%d%s, step %s (estimate)\n", r.model.c_str(),
              best.plan.instance_count, best.plan.instance_type.c_str(), best.plan.dp, best.plan.tp, best.plan.pp,
              best.plan.cp > 1 ? fmt::format(" x cp {}", best.plan.cp).c_str() : "",
              units::format_duration(best.step.step_time_s).c_str());
  std::printf("report written to %s\n", join(written, " and ").c_str());
  if (a.plan_file.empty()) report_missed_objective(planner::search_request(a.search), best, join(written, " and "));
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Markdown and self-contained HTML report of a plan search (or of one plan): top plans, Pareto, scaling, "
                "breakdown, memory, a simulated step, spot");
  add_search_options(cmd, a->search, /*model_required=*/false);
  cmd->add_option("--plan", a->plan_file, "Report on this plan file instead of a search (--tokens, or --samples and --epochs, override its work)");
  add_int(cmd, "--spot-plans", a->spot_plans, 0, limits::kMaxRows, "Plans of the table that get a spot Monte Carlo (the best always does)");
  cmd->add_option("--history", a->history_db,
                  "Add a predicted-vs-measured section from this error history database (trainplan history; default "
                  "path: $TRAINPLAN_HISTORY_DB, else $XDG_DATA_HOME/trainplan/history.sqlite)");
  cmd->add_flag("--no-simulate", a->no_simulate, "Do not simulate the best plan's step (no Gantt chart)");
  add_choice(cmd, "--format", a->format, {"md", "html", "both"}, "md, html or both");
  cmd->add_option("--output,-o", a->output, "Output path without extension (writes PATH.md / PATH.html); - prints the Markdown")
      ->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
