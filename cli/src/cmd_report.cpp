// `trainplan report`: a Markdown and a self-contained HTML report of a planning run (the same
// search as `trainplan plan`) or of one plan file (--plan).
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <optional>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "plan_classic.hpp"
#include "search_options.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/reports/classic_report.hpp"
#include "trainplan/reports/report.hpp"

namespace trainplan::cli {
namespace {

struct ReportArgs {
  ReportArgs() { search.spot_runs = 1000; }
  SearchArgs search;          // the search, as `trainplan plan` (--spot-runs, --seed and --top
                              // also drive the report's Monte Carlo and table)
  ClassicArgs classic;        // --model xgboost; --repeat, --parallel, --keep-alive, --max-wait and
                              // --max-run also drive a GPU plan's SageMaker job section
  bool warm_pool = false;
  CLI::App* cmd = nullptr;
  std::string plan_file;      // or one plan
  std::string history_db;     // predicted vs measured section
  size_t spot_plans = 10;
  bool no_simulate = false;
  std::string format = "both";
  std::string output = "report";
};

// Writes OUTPUT.md and / or OUTPUT.html (--format); returns the paths written.
template <typename Md, typename Html>
std::vector<std::string> write_files(const ReportArgs& a, Md markdown, Html html) {
  std::vector<std::string> written;
  if (a.format == "md" || a.format == "both") {
    json::write_text_file(a.output + ".md", markdown());
    written.push_back(a.output + ".md");
  }
  if (a.format == "html" || a.format == "both") {
    json::write_text_file(a.output + ".html", html());
    written.push_back(a.output + ".html");
  }
  return written;
}

bool given(const CLI::App* cmd, const std::string& name) {
  const CLI::Option* o = cmd->get_option_no_throw(name);
  return o && o->count() > 0;
}

// The SageMaker job section of a GPU plan's report, when any of its options is given.
std::optional<planner::JobRequest> job_request(const ReportArgs& a) {
  for (const char* name : {"--rows", "--features", "--rounds", "--max-depth", "--bins"})
    if (given(a.cmd, name))
      throw Error(fmt::format("applies to --model xgboost, not to {}", a.search.model.empty() ? "a plan file" : a.search.model))
          .at(name)
          .hint("the SageMaker job section takes --warm-pool, --repeat, --parallel, --keep-alive, --max-wait and --max-run");
  const ClassicArgs& c = a.classic;
  if (!a.warm_pool && c.repeat == 0 && c.max_wait.empty() && c.max_run.empty()) {
    if (given(a.cmd, "--parallel") || !c.keep_alive.empty())
      throw Error("describes a sweep").at(given(a.cmd, "--parallel") ? "--parallel" : "--keep-alive").hint("add --repeat N");
    return std::nullopt;
  }
  planner::JobRequest r;
  r.warm_pool = a.warm_pool;
  r.repeat = c.repeat;
  r.parallel = c.parallel;
  r.keep_alive = c.keep_alive;
  r.max_wait = c.max_wait;
  r.max_run = c.max_run;
  return r;
}

void run_classic(const ReportArgs& a, const reports::ReportOptions& o) {
  if (!a.plan_file.empty()) throw Error("--plan reports one GPU plan; --model xgboost describes a comparison").at("--plan").hint("give one or the other");
  const planner::ClassicRequest req = classic_request(a.search, a.classic, a.cmd);
  const ClassicObjective goal = classic_objective(a.search);
  reports::ClassicReport r = reports::build_classic_report(req, user_catalog(), goal.objective, goal.deadline_s, goal.budget_usd);
  r.html_name = o.html_name;
  if (a.output == "-") {
    if (a.format != "md") throw Error("-o - writes the Markdown to standard output").hint("add --format md, or give a file name");
    std::fputs(reports::render_markdown(r).c_str(), stdout);
    return;
  }
  const std::vector<std::string> written = write_files(a, [&] { return reports::render_markdown(r); }, [&] { return reports::render_html(r); });
  const planner::ClassicJob& best = r.rows[r.best].job;
  std::printf("trainplan report: xgboost: best job %d x %s (objective %s), %s, $%.4f\n", best.count, best.instance.c_str(),
              r.objective.c_str(), units::format_duration(best.wall_s).c_str(), best.cost_usd);
  std::printf("report written to %s\n", join(written, " and ").c_str());
}

reports::Report build(const ReportArgs& a, const reports::ReportOptions& o) {
  const hw::Catalog& catalog = user_catalog();
  if (!a.plan_file.empty()) {
    if (!a.search.model.empty() || !a.search.instances.empty())
      throw Error("--plan reports one plan; --model and --instances describe a search").hint("give one or the other");
    double tokens = a.search.tokens.empty() ? 0 : flag_count_of_things("--tokens", a.search.tokens, "tokens");
    plan::Plan p = plan::read_plan_file(a.plan_file);
    // --azs above 1, --data-region and --dataset-size override the plan's placement and data.
    apply_placement_options(p, a.search.azs > 1 ? a.search.azs : 0, a.search.data_region, a.search.dataset_size);
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
    reports::Report r = reports::build_plan_report(p, user_catalog(p, a.plan_file), po, tokens, a.plan_file);
    r.epochs = epochs;
    r.samples_per_epoch = samples;
    return r;
  }
  if (a.search.model.empty() || (a.search.tokens.empty() && a.search.samples.empty()))
    throw Error("trainplan report needs --model and --tokens or --samples (a search) or --plan FILE (one plan)")
        .hint("trainplan report --model gpt2-124m --tokens 1e9 --instances p3.8xlarge --max-gpus 16");
  check_data_region_flag(a.search.data_region);
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
  if (is_classic_model(a.search.model)) {
    reports::ReportOptions o;
    if (!to_stdout) o.html_name = base_name(a.output) + ".html";
    run_classic(a, o);
    return;
  }
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
  o.job = job_request(a);
  if (!to_stdout) o.html_name = base_name(a.output) + ".html";
  const reports::Report r = build(a, o);
  if (global_options().verbose)
    for (const auto& [part, seconds] : r.timings) std::fprintf(stderr, "report: %s %.3f s\n", part.c_str(), seconds);
  if (to_stdout) {
    std::fputs(reports::render_markdown(r).c_str(), stdout);
    if (a.plan_file.empty()) report_missed_objective(planner::search_request(a.search), r.plans.front().candidate, "standard output");
    return;
  }
  const std::vector<std::string> written = write_files(a, [&] { return reports::render_markdown(r); }, [&] { return reports::render_html(r); });
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
  add_classic_options(cmd, a->classic, /*for_report=*/true);
  cmd->add_flag("--warm-pool", a->warm_pool, "SageMaker job section: the best plan's job starting on a warm pool");
  a->cmd = cmd;
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
