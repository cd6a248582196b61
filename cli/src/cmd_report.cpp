// `trainplan report`: a Markdown and a self-contained HTML report of a planning run (the same
// search as `trainplan plan`) or of one plan file (--plan).
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/report.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_report_sigint(int) { g_interrupted = true; }

struct ReportArgs {
  // The search (as `trainplan plan`).
  std::string model;
  std::string tokens;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  std::string instances;
  int max_gpus = 1024;
  int max_instances = 0;
  std::string objective = "time";
  std::string deadline;
  std::string budget;
  std::string platform = "ec2";
  std::string purchase = "on-demand";
  bool spot = false;
  size_t simulate_top = 0;
  int threads = 0;
  // Or one plan.
  std::string plan_file;
  // The report.
  size_t top = 10;
  size_t spot_plans = 10;
  size_t spot_runs = 1000;
  uint64_t seed = 1;
  bool no_simulate = false;
  std::string format = "both";
  std::string output = "report";
};

double parse_tokens(const std::string& text) {
  try {
    return units::parse(text, units::Dimension::count);
  } catch (Error& e) {
    throw Error(fmt::format("--tokens {}: {}", text, e.message())).hint(e.hint_text());
  }
}

planner::Report build(const ReportArgs& a, const planner::ReportOptions& o) {
  const hw::Catalog& catalog = user_catalog();
  if (!a.plan_file.empty()) {
    if (!a.model.empty() || !a.instances.empty())
      throw Error("--plan reports one plan; --model and --instances describe a search").hint("give one or the other");
    const double tokens = a.tokens.empty() ? 0 : parse_tokens(a.tokens);
    return planner::build_plan_report(plan::read_plan_file(a.plan_file), catalog, o, tokens, a.plan_file);
  }
  if (a.model.empty() || a.tokens.empty())
    throw Error("trainplan report needs --model and --tokens (a search) or --plan FILE (one plan)")
        .hint("trainplan report --model gpt2-124m --tokens 1e9 --instances p3.8xlarge --max-gpus 16");
  planner::SearchRequest req;
  req.model = a.model;
  req.tokens = parse_tokens(a.tokens);
  req.global_batch = a.global_batch;
  req.seq_len = a.seq_len;
  req.instance_types = split(a.instances, ',');
  req.max_gpus = a.max_gpus;
  req.max_instances = a.max_instances;
  req.objective = planner::parse_objective(a.objective);
  if (!a.deadline.empty()) req.deadline_s = units::parse(a.deadline, units::Dimension::duration);
  if (!a.budget.empty()) req.budget_usd = units::parse(a.budget.front() == '$' ? a.budget.substr(1) : a.budget, units::Dimension::count);
  req.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  const std::string purchase = a.spot ? "spot" : a.purchase;
  req.both_purchases = purchase == "both";
  req.purchase = purchase == "spot" ? plan::Purchase::spot : plan::Purchase::on_demand;
  req.simulate_top = a.simulate_top;
  req.exact_top = std::max<size_t>(req.exact_top, a.top);
  req.threads = a.threads;
  req.cancel = &g_interrupted;
  std::signal(SIGINT, on_report_sigint);
  planner::SearchResult res = planner::search(req, catalog);
  std::signal(SIGINT, SIG_DFL);
  return planner::build_report(req, res, catalog, o);
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void run(const ReportArgs& a) {
  const bool to_stdout = a.output == "-";
  if (to_stdout && a.format != "md")
    throw Error("-o - writes the Markdown to standard output").hint("add --format md, or give a file name");
  planner::ReportOptions o;
  o.top = a.top;
  o.spot_plans = a.spot_plans;
  o.spot_runs = a.spot_runs;
  o.seed = a.seed;
  o.threads = a.threads < 0 ? 1 : static_cast<size_t>(a.threads);
  o.simulate = !a.no_simulate;
  if (!to_stdout) o.html_name = base_name(a.output) + ".html";
  const planner::Report r = build(a, o);
  if (global_options().verbose)
    for (const auto& [part, seconds] : r.timings) std::fprintf(stderr, "report: %s %.3f s\n", part.c_str(), seconds);
  if (to_stdout) {
    std::fputs(planner::render_markdown(r).c_str(), stdout);
    return;
  }
  std::vector<std::string> written;
  if (a.format == "md" || a.format == "both") {
    json::write_text_file(a.output + ".md", planner::render_markdown(r));
    written.push_back(a.output + ".md");
  }
  if (a.format == "html" || a.format == "both") {
    json::write_text_file(a.output + ".html", planner::render_html(r));
    written.push_back(a.output + ".html");
  }
  const auto& best = r.plans.front().candidate;
  std::printf("trainplan report: %s: best plan %d x %s, dp/tp/pp %d/%d/%d, step %s (estimate)\n", r.model.c_str(),
              best.plan.instance_count, best.plan.instance_type.c_str(), best.plan.dp, best.plan.tp, best.plan.pp,
              units::format_duration(best.step.step_time_s).c_str());
  std::printf("report written to %s\n", join(written, " and ").c_str());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Markdown and self-contained HTML report of a plan search (or of one plan): top plans, Pareto, scaling, "
                "breakdown, memory, a simulated step, spot");
  cmd->add_option("--model,-m", a->model, "Catalog model name or a path to a Hugging Face config.json (a search)");
  cmd->add_option("--tokens,-t", a->tokens, "Training tokens (e.g. 300e9 or 300B); with --plan, overrides the plan's");
  cmd->add_option("--plan", a->plan_file, "Report on this plan file instead of a search");
  cmd->add_option("--global-batch", a->global_batch, "Sequences per optimizer step (default: ~1M tokens)");
  cmd->add_option("--seq-len", a->seq_len, "Sequence length (default: the model's)");
  cmd->add_option("--instances,-i", a->instances, "Comma-separated instance types (default: every AWS type in the catalog)");
  cmd->add_option("--max-gpus", a->max_gpus, "Largest cluster to consider, in GPUs")->capture_default_str();
  cmd->add_option("--max-instances", a->max_instances, "Largest cluster to consider, in instances (0: no limit)");
  cmd->add_option("--objective", a->objective, "time, cost, cost-under-deadline (with --deadline) or time-under-budget (with --budget)")
      ->capture_default_str();
  cmd->add_option("--deadline", a->deadline, "Deadline for cost-under-deadline, e.g. 30d or 72h");
  cmd->add_option("--budget", a->budget, "Budget in US dollars for time-under-budget, e.g. 2M or 250k");
  cmd->add_option("--platform", a->platform, "Price on EC2 or SageMaker training")->check(CLI::IsMember({"ec2", "sagemaker"}))->capture_default_str();
  cmd->add_option("--purchase", a->purchase, "What the search ranks: on-demand, spot (whole-job expectation) or both")
      ->check(CLI::IsMember({"on-demand", "spot", "both"}))
      ->capture_default_str();
  cmd->add_flag("--spot", a->spot, "Same as --purchase spot");
  cmd->add_option("--simulate-top", a->simulate_top, "The search simulates its best K candidates and re-ranks them (0: off)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores); results do not depend on it");
  cmd->add_option("--top", a->top, "Plans in the comparison table")->capture_default_str();
  cmd->add_option("--spot-plans", a->spot_plans, "Plans of the table that get a spot Monte Carlo (the best always does)")->capture_default_str();
  cmd->add_option("--spot-runs", a->spot_runs, "Monte Carlo runs per plan and purchase option")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Monte Carlo seed")->capture_default_str();
  cmd->add_flag("--no-simulate", a->no_simulate, "Do not simulate the best plan's step (no Gantt chart)");
  cmd->add_option("--format", a->format, "md, html or both")->check(CLI::IsMember({"md", "html", "both"}))->capture_default_str();
  cmd->add_option("--output,-o", a->output, "Output path without extension (writes PATH.md / PATH.html); - prints the Markdown")
      ->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
