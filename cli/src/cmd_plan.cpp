// `trainplan plan`: search plans for a model, a token budget and a deadline or a budget; print
// the ranked table, the Pareto frontier and (on request) why the winner wins; write the best
// plan and optionally every evaluated candidate.
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "plan_classic.hpp"
#include "search_options.hpp"
#include "table.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/planner/convergence.hpp"
#include "trainplan/planner/partition.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/simulator/job_builder.hpp"

namespace trainplan::cli {
namespace {

struct PlanArgs {
  SearchArgs search;
  ClassicArgs classic;
  CLI::App* cmd = nullptr;
  size_t pareto_rows = 12;
  bool explain = false;
  std::string output = "plan.json";
  std::string json_out;
};

std::string split_text(const plan::Plan& p) {
  std::string s = fmt::format("{}/{}/{}", p.dp, p.tp, p.pp);
  if (p.vp > 1) s += fmt::format("x{}", p.vp);
  if (p.cp > 1) s += fmt::format(" cp{}", p.cp);
  if (p.ep > 1) s += fmt::format(" ep{}", p.ep);
  return s;
}

// A cost the search could not price (no price for the purchase option): never shown as free.
std::string usd_or_no_price(const std::optional<double>& v) { return v ? short_usd(*v) : "no price"; }

bool uses_job_model(const planner::SearchRequest& req) { return req.both_purchases || req.purchase == plan::Purchase::spot; }

void print_table(const planner::SearchResult& res, const planner::SearchRequest& req, size_t top) {
  const bool jobs = uses_job_model(req);
  const bool sim = res.counts.simulated > 0;
  const bool epochs = req.epochs > 0;
  const bool block = !jobs && req.purchase == plan::Purchase::capacity_block;
  std::vector<std::string> head = {">#", ">time to train"};
  if (epochs) head.push_back(">time/epoch");  // steps per epoch x step time (no startup, checkpoints or restarts)
  if (jobs) head.insert(head.end(), {"buy", ">expected cost", ">cost p50/p90"});
  else if (block) head.insert(head.end(), {">capacity block", ">on-demand", ">spot*"});
  else head.insert(head.end(), {">on-demand", ">spot*"});
  head.insert(head.end(), {"instances", ">dp/tp/pp", ">ZeRO", ">mb", "recompute", "sp", "dp algorithm", ">memory/GPU", ">MFU"});
  if (sim) head.insert(head.end(), {">step est", ">step sim"});
  Table t(head);
  for (size_t i = 0; i < std::min(top, res.ranked.size()); ++i) {
    const auto& c = res.ranked[i];
    const auto& p = c.plan;
    std::vector<std::string> row = {std::to_string(i + 1), units::format_duration(c.objective_time_s)};
    if (epochs) row.push_back(units::format_duration(c.time_to_train_s / req.epochs));
    if (jobs) {
      const auto& job = c.purchase == plan::Purchase::spot ? c.spot_job : c.on_demand_job;
      row.push_back(std::string(plan::purchase_name(c.purchase)));
      row.push_back(usd_or_no_price(c.objective_cost_usd));
      row.push_back(job && job->cost_usd ? fmt::format("{}/{}", short_usd(job->cost_usd->p50), short_usd(job->cost_usd->p90)) : "-");
    } else {
      if (block) row.push_back(usd_or_no_price(c.cost_capacity_block_usd));
      row.push_back(usd_or_no_price(c.cost_on_demand_usd));
      row.push_back(usd_or_no_price(c.cost_spot_usd));
    }
    row.insert(row.end(), {fmt::format("{} x {}", p.instance_count, p.instance_type), split_text(p), std::to_string(p.zero_stage),
                           std::to_string(p.micro_batch), std::string(plan::recompute_name(p.recompute)),
                           p.sequence_parallel ? "yes" : "no", p.dp_cp() > 1 ? std::string(plan::dp_algorithm_name(p.dp_algorithm)) : "-",
                           memory_of(c.memory.total_bytes(), c.memory.capacity_bytes), percent(planner::ranked_mfu(c))});
    if (sim) {
      row.push_back(units::format_duration(c.step.step_time_s));
      row.push_back(c.simulated ? units::format_duration(c.simulated->step_time_s) : "-");
    }
    t.add(row);
  }
  std::fputs(t.render().c_str(), stdout);
  if (jobs)
    std::printf("Costs and times are whole-job expectations (startup, checkpoints at Young's interval, spot interruptions and\n"
                "restarts) from the job model's closed form; p50/p90 from %zu Monte Carlo runs. Prices: %s, %s.\n",
                req.spot_runs, std::string(plan::platform_name(req.platform)).c_str(), price_region(res.region).c_str());
  else
    std::printf("* spot: at the catalog's spot price, before interruptions and restarts. Prices: %s on-demand, %s.\n",
                std::string(plan::platform_name(req.platform)).c_str(), price_region(res.region).c_str());
  if (block)
    std::printf("capacity block: EC2 Capacity Block for ML, reserved and paid up front for the time to train rounded up to\n"
                "whole days (whole weeks past 14 days, at most 182 days a block) at the published block price per instance-hour.\n");
  if (const std::string note = planner::unpriced_note(req, res.unpriced); !note.empty()) std::printf("%s\n", note.c_str());
  if (const std::string note = planner::not_offered_note(res.region, res.not_offered); !note.empty()) std::printf("%s\n", note.c_str());
}

// Where #1's step is set by the data loader, and what would change the training dynamics.
void print_best_notes(const planner::SearchResult& res, const planner::SearchRequest& req, const hw::Catalog& catalog) {
  const auto& best = res.ranked.front();
  if (best.loader_bound())
    std::printf("\nnote: #1 waits for its data loader: %s per step against %s of compute (--data-input %s; image decoding on the "
                "vCPUs counts for image models)\n",
                units::format_duration(best.data_loader_s).c_str(),
                units::format_duration(best.simulated ? best.simulated->step_time_s : best.step.step_time_s).c_str(),
                std::string(sim::data_source_name(req.data_source)).c_str());
  std::vector<std::string> types;
  for (const auto& c : res.ranked) types.push_back(c.plan.instance_type);
  if (const std::string note = planner::not_executed_note(catalog, types); !note.empty()) std::printf("\n%s\n", note.c_str());
  plan::Plan p = best.plan;
  const plan::PlanContext ctx = plan::resolve(p, catalog, "<best>");
  std::printf("\nplacement of #1: %s\n", sim::placement_assumption(p, ctx).c_str());
  std::printf("software stack of #1: %s\n", hw::describe(ctx.software).c_str());
  if (best.transfer_usd > 0)
    std::printf("data transfer in #1's cost: %s (%s%s%s)\n", units::format_usd(best.transfer_usd).c_str(),
                best.simulated && best.simulated->inter_az_bytes > 0
                    ? fmt::format("{} per step between AZs, simulated", units::format_bytes(best.simulated->inter_az_bytes)).c_str()
                    : "",
                best.simulated && best.simulated->inter_az_bytes > 0 && !p.data_region.empty() ? "; " : "",
                p.data_region.empty() ? "" : fmt::format("training data read from {}", p.data_region).c_str());
  const auto warnings = planner::convergence_warnings(p, ctx, req.global_batch);
  if (warnings.empty()) return;
  std::printf("\nwarnings on #1 (training dynamics; they change no ranking and no exit code):\n");
  for (const auto& w : warnings) std::printf("  warning: %s [%s]\n", w.message.c_str(), w.source.c_str());
}

void print_pareto(const planner::SearchResult& res, size_t rows) {
  if (res.pareto.empty()) return;
  std::printf("\nPareto frontier of (time, cost): %zu plans no other plan beats on both", res.pareto.size());
  std::printf("%s\n", res.pareto.size() > rows ? fmt::format(" (the {} fastest shown)", rows).c_str() : "");
  Table t({">rank", ">time to train", ">cost", "instances", ">dp/tp/pp", ">ZeRO", ">mb", "recompute"});
  for (size_t k = 0; k < std::min(rows, res.pareto.size()); ++k) {
    const auto& c = res.ranked[res.pareto[k]];
    const auto& p = c.plan;
    t.add({std::to_string(res.pareto[k] + 1), units::format_duration(c.objective_time_s), usd_or_no_price(c.objective_cost_usd),
           fmt::format("{} x {}", p.instance_count, p.instance_type), split_text(p), std::to_string(p.zero_stage),
           std::to_string(p.micro_batch), std::string(plan::recompute_name(p.recompute))});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  // Across instance types: each type's fastest and cheapest plan, and whether it is on the frontier.
  std::map<std::string, std::pair<size_t, size_t>> by_type;  // type -> (fastest, cheapest)
  std::vector<std::string> order;
  for (size_t i = 0; i < res.ranked.size(); ++i) {
    const auto& c = res.ranked[i];
    auto it = by_type.find(c.plan.instance_type);
    if (it == by_type.end()) {
      by_type[c.plan.instance_type] = {i, i};
      order.push_back(c.plan.instance_type);
      continue;
    }
    auto& [fast, cheap] = it->second;
    if (c.objective_time_s < res.ranked[fast].objective_time_s) fast = i;
    const auto& cc = res.ranked[cheap].objective_cost_usd;
    if (c.objective_cost_usd && (!cc || *c.objective_cost_usd < *cc)) cheap = i;
  }
  std::printf("\nBest per instance type (* = on the frontier):\n");
  Table b({"instance type", ">fastest", ">its cost", ">cheapest", ">its time"});
  auto mark = [&](size_t i) {
    return std::find(res.pareto.begin(), res.pareto.end(), i) != res.pareto.end() ? "*" : "";
  };
  for (const auto& type : order) {
    const auto [fast, cheap] = by_type.at(type);
    const auto& f = res.ranked[fast];
    const auto& c = res.ranked[cheap];
    b.add({type, units::format_duration(f.objective_time_s) + mark(fast), usd_or_no_price(f.objective_cost_usd),
           usd_or_no_price(c.objective_cost_usd) + mark(cheap), units::format_duration(c.objective_time_s)});
  }
  std::fputs(b.render("  ").c_str(), stdout);
}

void print_explanation(const planner::SearchResult& res) {
  if (!res.explanation) {
    std::printf("\n--explain: only one plan was evaluated; nothing to compare\n");
    return;
  }
  const auto& e = *res.explanation;
  std::printf("\nWhy #1 beats #2:\n");
  Table t({"", ">#1", ">#2", ">#2 - #1"});
  auto fmt_v = [](double v, const std::string& unit) {
    if (unit == "s") return units::format_duration(v);
    if (unit == "B") return units::format_bytes(v);
    if (unit == "USD") return short_usd(v);
    return fmt::format("{:.0f}", v);
  };
  for (const auto& r : e.rows) {
    const double d = r.runner_up - r.winner;
    std::string diff = (d < 0 ? "-" : "+") + fmt_v(std::abs(d), r.unit);
    t.add({r.what, fmt_v(r.winner, r.unit), fmt_v(r.runner_up, r.unit), diff});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  std::printf("  %s\n", e.summary.c_str());
}

void print_verbose(const planner::SearchResult& res, const hw::Catalog& catalog) {
  Table st({"stage", ">seconds", ">kept", "note"});
  for (const auto& s : res.stages)
    st.add({s.name + (s.enabled ? "" : " (off)"), fmt::format("{:.3f}", s.seconds), std::to_string(s.kept), s.note});
  std::fputs(st.render().c_str(), stdout);
  const auto& k = res.counts;
  std::printf("candidates: %zu enumerated (%zu families), %zu memory evaluations, %zu estimated (%.0f/s), %zu lazy variants "
              "evaluated and %zu skipped by bounds, %zu whole-job evaluations, %zu simulated\n",
              k.enumerated, k.families, k.memory_evaluations, k.analytical, k.analytical_per_s, k.expanded, k.expansion_skipped,
              k.job_evaluations, k.simulated);
  for (const auto& [why, n] : res.dropped) std::printf("dropped: %zu candidates: %s\n", n, why.c_str());
  if (res.rank_correlation)
    std::printf("analytical vs simulated step times over the %zu simulated: Spearman rank correlation %.3f\n", k.simulated,
                *res.rank_correlation);
  if (!res.ranked.empty() && res.ranked.front().plan.pp > 1) {
    plan::Plan best = res.ranked.front().plan;
    const plan::PlanContext ctx = plan::resolve(best, catalog, "<best>");
    std::printf("\nbest plan per pipeline stage (time per micro-batch, memory per GPU):\n");
    Table t({">stage", "units", ">layers", ">time/mb", ">memory"});
    for (const auto& s : planner::stage_loads(best, ctx)) {
      std::string units_text;
      for (const auto& a : s.chunks) units_text += fmt::format("{}{}-{}", units_text.empty() ? "" : ",", a.first_unit, a.last_unit);
      t.add({std::to_string(s.rank), units_text, std::to_string(s.units), units::format_duration(s.time_s),
             memory_of(s.memory_bytes, s.capacity_bytes)});
    }
    std::fputs(t.render("  ").c_str(), stdout);
  }
  std::printf("\n");
}

void run(const PlanArgs& a) {
  if (is_classic_model(a.search.model)) {
    run_classic_plan(a.search, a.classic, a.cmd, a.json_out, a.output);
    return;
  }
  if (const std::string flag = classic_option_given(a.cmd); !flag.empty())
    throw Error(fmt::format("applies to --model xgboost, not to {}", a.search.model))
        .at(flag)
        .hint("classic ML options (--rows, --features, --rounds, --repeat, --keep-alive, ...) size an XGBoost job");
  check_data_region_flag(a.search.data_region);
  if (!a.search.software.empty()) {
    try {
      (void)user_catalog().software(a.search.software);
    } catch (Error& e) {
      e.at("--stack");
      throw;
    }
  }
  const planner::SearchRequest req = planner::search_request(a.search);
  const hw::Catalog& catalog = user_catalog();
  planner::SearchResult res = run_search(req);

  models::ModelSpec spec = models::resolve_model(a.search.model);
  if (a.search.seq_len > 0) models::set_seq_len(spec, a.search.seq_len, "--seq-len");
  const auto graph_params = models::build_graph(spec).total_params();
  std::string goal(planner::objective_name(req.objective));
  if (req.objective == planner::Objective::cost_under_deadline) goal += " (deadline " + units::format_duration(req.deadline_s) + ")";
  if (req.objective == planner::Objective::time_under_budget) goal += " (budget " + units::format_usd(req.budget_usd) + ")";
  std::string work = units::format_count(req.tokens) + " tokens";
  if (req.epochs > 0) {
    work = fmt::format("{} samples x {:g} epochs", units::format_count(req.samples_per_epoch), req.epochs);
    if (req.tokens != req.samples_per_epoch * req.epochs) work += fmt::format(" ({} tokens)", units::format_count(req.tokens));
  }
  // An imported config's sequence length says where it came from and the position limit.
  const std::string note = spec.seq_len_origin == "default" || spec.max_positions > 0 ? models::seq_len_note(spec) : "";
  const std::string batch = res.seq_len > 0 ? fmt::format("{} x {} tokens{}", res.global_batch, res.seq_len,
                                                          note.empty() ? "" : " (" + note + ")")
                                            : fmt::format("{} samples", res.global_batch);
  std::printf("trainplan plan: %s (%s parameters), %s, global batch %s, objective: %s\n", spec.name.c_str(),
              units::format_count(graph_params).c_str(), work.c_str(), batch.c_str(), goal.c_str());
  const size_t oom = res.dropped.count("does not fit in GPU memory") ? res.dropped.at("does not fit in GPU memory") : 0;
  std::printf("searched %zu candidates: %zu do not fit in GPU memory, %zu evaluated%s\n", res.enumerated, oom, res.ranked.size(),
              res.cancelled ? " (interrupted: showing the best found so far)" : "");
  std::printf("calibration: %s\n\n", planner::calibration_summary(req).c_str());
  if (global_options().verbose) print_verbose(res, catalog);
  if (res.ranked.empty()) throw planner::nothing_fits_error(res, req);
  if (!res.ranked.front().meets_constraints)
    std::printf("note: no plan meets the %s; the table shows the closest (%s first)\n\n",
                req.objective == planner::Objective::cost_under_deadline ? "deadline" : "budget",
                req.objective == planner::Objective::cost_under_deadline ? "fastest" : "cheapest");
  print_table(res, req, a.search.top);
  print_best_notes(res, req, catalog);
  print_pareto(res, a.pareto_rows);
  if (a.explain) print_explanation(res);
  if (!a.output.empty()) {
    plan::write_plan_file(a.output, planner::best_plan(res));
    std::printf("\nbest plan written to %s\n", a.output.c_str());
  }
  if (!a.json_out.empty()) {
    json::write_file(a.json_out, planner::candidates_json(res));
    std::printf("all %zu evaluated candidates written to %s\n", res.ranked.size(), a.json_out.c_str());
  }
  report_missed_objective(req, res.ranked.front(), a.output);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Search instance types, counts and parallel plans for a model, a token budget and a deadline or budget");
  add_search_options(cmd, a->search, /*model_required=*/true);
  add_classic_options(cmd, a->classic);
  a->cmd = cmd;
  add_int(cmd, "--pareto", a->pareto_rows, 0, limits::kMaxRows, "Pareto frontier rows to print");
  cmd->add_flag("--explain", a->explain, "Show why the winner beats the runner-up");
  cmd->add_option("--output,-o", a->output, "Where to write the best plan (empty: do not write)")->capture_default_str();
  cmd->add_option("--json", a->json_out, "Write every evaluated candidate to this JSON file");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
