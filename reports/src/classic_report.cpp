// The classic-ML report (classic_report.hpp): the comparison, the phases, the break-even rows,
// the sweep and managed spot as blocks of a report document (report_doc.hpp).
#include "trainplan/reports/classic_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "report_doc.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

namespace trainplan::reports {
namespace {

using report_detail::Doc;
using report_detail::Table;

std::string job_duration(double s) { return units::format_duration(s); }
std::string secs(double s) { return fmt::format("{:.1f}", s); }
// Classic jobs cost cents: four decimals below $10.
std::string usd4(double v) { return v < 10 ? fmt::format("${:.4f}", v) : units::format_usd(v); }
std::string label(const planner::ClassicJob& j) { return fmt::format("{} x{}", j.instance, j.count); }

using Unverified = std::vector<std::pair<std::string, std::string>>;
bool listed(const Unverified& list, const std::string& name) {
  return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
}
// A cost, marked "*" when its price rests on unverified sources.
std::string cost(double usd, const Unverified& list, const std::string& instance) {
  return usd4(usd) + (listed(list, instance) ? " *" : "");
}
void price_notes(Doc& d, const Unverified& list, const std::string& what) {
  std::vector<std::string> items;
  for (const auto& [name, refs] : list)
    items.push_back(fmt::format("* {}: the {} price rests on unverified sources ({}); check it on AWS's pricing pages", name, what, refs));
  d.bullets(items);
}

void intro(Doc& d, const ClassicReport& r) {
  const planner::XgboostSpec& s = r.request.spec;
  d.title(fmt::format("trainplan report: xgboost, {} rows x {} features, {} rounds", units::format_count(static_cast<double>(s.rows)),
                      s.features, s.rounds));
  d.paragraph(fmt::format("Distributed gradient-boosted trees (tree_method hist, max_depth {}, {} bins) as SageMaker training "
                          "jobs, on-demand, us-east-1; the rows are sharded over the instances (ShardedByS3Key). Times are the "
                          "job model's (trainplan's XGBoost cost model plus SageMaker's start-up phases), not measurements.",
                          s.max_depth, s.bins));
  d.markdown_only(fmt::format("The HTML version of this report: [{}]({}).", r.html_name, r.html_name));
  const planner::ClassicJob& b = r.rows[r.best].job;
  d.heading("Best job");
  d.paragraph(fmt::format("By the objective \"{}\": {} instance{} of {}: {} from the request to the uploaded model, {} billable "
                          "seconds in all, {}. `trainplan plan --model xgboost ... -o job.json` writes it as a job file for "
                          "`trainplan job job.json`.",
                          r.objective, b.count, b.count == 1 ? "" : "s", b.instance, job_duration(b.wall_s), secs(b.billed_s_total),
                          cost(b.cost_usd, r.unverified_on_demand, b.instance)));
}

void comparison(Doc& d, const ClassicReport& r) {
  d.heading("Comparison");
  Table t{{"instance", ">count", ">wall", ">billable s", ">per instance", ">cost", ">wall vs 1", ">cost vs 1", ">training",
           ">memory/instance"},
          {}};
  const planner::ClassicJob* base = nullptr;
  for (const auto& row : r.rows) {
    const auto& j = row.job;
    if (j.count == 1) base = &row.job;
    const bool same = base && base->instance == j.instance;
    t.rows.push_back({j.instance, std::to_string(j.count), job_duration(j.wall_s), secs(j.billed_s_total), secs(j.billed_s_per_instance),
                      cost(j.cost_usd, r.unverified_on_demand, j.instance), same ? fmt::format("{:.2f}x", j.wall_s / base->wall_s) : "-",
                      same ? fmt::format("{:.2f}x", j.cost_usd / base->cost_usd) : "-", job_duration(j.phases.training_s),
                      fmt::format("{} / {}{}", units::format_bytes(j.memory_bytes_per_instance), units::format_bytes(j.usable_memory_bytes),
                                  j.fits_memory ? "" : " (does not fit)")});
  }
  d.table(t);
  price_notes(d, r.unverified_on_demand, "SageMaker on-demand");
}

void phases(Doc& d, const ClassicReport& r) {
  d.heading("Where the time goes");
  d.paragraph("Seconds per instance: all instances run the phases in parallel; the billed phases are billed on every instance, "
              "the others (SageMaker's Starting and Preparing) are not.");
  Table t{{"phase", "billed"}, {}};
  for (const auto& row : r.rows) t.headers.push_back(fmt::format(">{}", label(row.job)));
  for (const auto& phase : planner::job_phases()) {
    std::vector<std::string> cells = {phase.name, phase.billed ? "yes" : "no"};
    for (const auto& row : r.rows) cells.push_back(secs(row.job.phases.*phase.seconds));
    t.rows.push_back(cells);
  }
  std::vector<std::string> billed = {"billed per instance", ""}, wall = {"wall", ""};
  for (const auto& row : r.rows) {
    billed.push_back(secs(row.job.billed_s_per_instance));
    wall.push_back(secs(row.job.wall_s));
  }
  t.rows.push_back(billed);
  t.rows.push_back(wall);
  d.table(t);
}

void break_even(Doc& d, const ClassicReport& r) {
  d.heading("When more instances pay");
  std::vector<std::string> items;
  for (const auto& row : r.rows) {
    if (row.job.count == 1) continue;
    if (!row.break_even) {
      items.push_back(fmt::format("{}: {} instances never finish sooner than 1.", row.job.instance, row.job.count));
      continue;
    }
    const auto& be = *row.break_even;
    items.push_back(fmt::format("{}: {} instances finish sooner than 1 above {} rows ({} now); there each job takes {} and bills "
                                "{} against {} on one{}.",
                                row.job.instance, row.job.count, units::format_count(be.rows),
                                units::format_count(static_cast<double>(r.request.spec.rows)), job_duration(be.many.wall_s),
                                usd4(be.many.cost_usd), usd4(be.one.cost_usd),
                                be.one.fits_memory ? "" : "; one instance cannot hold that many rows"));
  }
  if (items.empty()) items.push_back("Only one instance per job was compared (--counts 1,2 compares two).");
  d.bullets(items);
  d.paragraph("More instances never bill less: each one pays the fixed phases (input, image, algorithm start, upload) again, "
              "and the histogram all-reduce on top.");
}

void sweep(Doc& d, const ClassicReport& r) {
  if (!r.request.sweep) return;
  const planner::SweepRequest& q = *r.request.sweep;
  d.heading("Tuning sweep");
  d.paragraph(fmt::format("{} jobs, {} at a time{}. A warm pool reuse skips provisioning and the image download (a {} warm start "
                          "instead); each pool is billed while it waits, up to its keep-alive after its slot's last job.",
                          q.repeat, q.parallel,
                          q.keep_alive_s > 0 ? fmt::format(", warm pools kept alive {}", job_duration(q.keep_alive_s)) : " (no warm pool)",
                          job_duration(sim::LifecycleFacts::builtin().sagemaker_warm_pool_start_s)));
  Table t{{"instance", ">count", ">waves", ">wall", ">billable s", ">cost", ">warm starts", ">keep-alive billed s",
           ">wall without pool", ">cost without pool"},
          {}};
  for (const auto& row : r.rows) {
    const auto& s = *row.sweep;
    t.rows.push_back({row.job.instance, std::to_string(row.job.count), std::to_string(s.waves), job_duration(s.wall_s), secs(s.billed_s),
                      cost(s.cost_usd, r.unverified_on_demand, row.job.instance), std::to_string(s.warm_starts),
                      secs(s.keep_alive_billed_s), job_duration(s.cold_wall_s), cost(s.cold_cost_usd, r.unverified_on_demand, row.job.instance)});
  }
  d.table(t);
}

void spot(Doc& d, const ClassicReport& r) {
  if (!r.request.spot) return;
  const planner::SpotRequest& q = *r.request.spot;
  d.heading("Managed spot");
  d.paragraph(fmt::format("{} Monte Carlo runs{}{}. A job still running at max_wait (waiting for capacity included) fails: "
                          "P(> max_wait) is how often.",
                          q.runs, q.max_wait_s ? fmt::format(", max_wait {}", job_duration(*q.max_wait_s)) : "",
                          q.max_run_s ? fmt::format(", max_run {}", job_duration(*q.max_run_s)) : ""));
  Table t{{"instance", ">count", ">spot $/h", ">wall mean", ">wall p90", ">cost mean", ">on-demand cost", ">interruptions",
           ">P(> max_wait)"},
          {}};
  for (const auto& row : r.rows) {
    const auto& mc = row.spot->monte_carlo;
    t.rows.push_back({row.job.instance, std::to_string(row.job.count),
                      fmt::format("{:.4f}{}", row.spot->spot_price_usd_per_hour, listed(r.unverified_spot, row.job.instance) ? " *" : ""),
                      job_duration(mc.time_s.mean), job_duration(mc.time_s.p90), usd4(mc.cost_usd.mean), usd4(row.job.cost_usd),
                      fmt::format("{:.3f}", mc.interruptions.mean),
                      mc.p_exceed_max_wait ? fmt::format("{:.1f}%", 100.0 * *mc.p_exceed_max_wait) : "-"});
  }
  d.table(t);
  price_notes(d, r.unverified_spot, "managed spot");
  std::vector<std::string> notes = {"spot model: " + r.rows.front().spot->model};
  notes.insert(notes.end(), r.rows.front().spot->assumptions.begin(), r.rows.front().spot->assumptions.end());
  d.bullets(notes);
}

void constants(Doc& d) {
  d.heading("Model constants and sources");
  Table t{{"constant", ">value", "kind", "source"}, {}};
  for (const auto& c : planner::xgboost_constants()) t.rows.push_back({c.name, c.value, c.kind, c.source});
  d.table(t);
}

Doc build_doc(const ClassicReport& r) {
  Doc d;
  intro(d, r);
  comparison(d, r);
  phases(d, r);
  break_even(d, r);
  sweep(d, r);
  spot(d, r);
  constants(d);
  return d;
}

}  // namespace

ClassicReport build_classic_report(const planner::ClassicRequest& request, const hw::Catalog& catalog, const std::string& objective,
                                   double deadline_s, double budget_usd) {
  ClassicReport r;
  for (const hw::CpuInstanceType* inst : request.instances)
    for (bool spot : {false, true}) {
      const auto ids = catalog.unverified_price_sources(*inst, spot);
      if (ids.empty()) continue;
      std::string refs;
      for (const auto& id : ids) refs += fmt::format("{}{} ({})", refs.empty() ? "" : ", ", id, catalog.source(id).date);
      (spot ? r.unverified_spot : r.unverified_on_demand).emplace_back("ml." + inst->name, refs);
    }
  r.request = request;
  r.objective = objective;
  r.rows = planner::compare_classic(request);
  r.best = static_cast<size_t>(&planner::best_classic_row(r.rows, objective, deadline_s, budget_usd) - r.rows.data());
  return r;
}

std::string render_markdown(const ClassicReport& report) { return report_detail::markdown_of(build_doc(report)); }
std::string render_html(const ClassicReport& report) { return report_detail::html_of(build_doc(report)); }

}  // namespace trainplan::reports
