// Reports: what build_report computes (against brute force and the libraries it draws on),
// the Gantt chart of a hand-built timeline, and the Markdown / HTML renderings.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "test_support.hpp"
#include "trainplan/calibration/history.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/reports/report.hpp"
#include "trainplan/simulator/job_builder.hpp"

using namespace trainplan;
using namespace trainplan::planner;
using namespace trainplan::reports;

namespace {

SearchRequest small_request() {
  SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 1e9;
  req.instance_types = {"p3.8xlarge", "g4dn.12xlarge"};
  req.max_gpus = 16;
  req.threads = 1;
  return req;
}

ReportOptions small_options() {
  ReportOptions o;
  o.top = 5;
  o.spot_plans = 3;
  o.spot_runs = 60;
  o.seed = 3;
  return o;
}

// The search and its report, computed once for the tests that only read them.
struct Fixture {
  SearchRequest req = small_request();
  SearchResult res = search(req, hw::Catalog::builtin());
  Report report = build_report(req, res, hw::Catalog::builtin(), small_options());
};
const Fixture& fixture() {
  static const Fixture f;
  return f;
}

plan::TimelineEvent event(int rank, int stream, plan::TaskKind kind, double start_s, double end_s, plan::Phase phase,
                          plan::CommPurpose purpose, const std::string& label) {
  plan::TimelineEvent e;
  e.rank = rank;
  e.stream = stream;
  e.kind = kind;
  e.start_s = start_s;
  e.end_s = end_s;
  e.phase = phase;
  e.purpose = purpose;
  e.label = label;
  return e;
}

}  // namespace

TEST_CASE("report: the Pareto frontier matches a brute-force dominance check", "[reports]") {
  Rng rng(17);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::pair<double, double>> pts;
    const int n = 1 + static_cast<int>(rng.below(60));
    for (int i = 0; i < n; ++i) {
      // Coarse values so that ties happen.
      pts.emplace_back(std::round(rng.uniform() * 20), std::round(rng.uniform() * 20));
      if (rng.below(10) == 0) pts.back().second = std::nan("");
    }
    const auto front = pareto_frontier(pts);
    std::set<size_t> on(front.begin(), front.end());
    for (size_t i = 0; i < pts.size(); ++i) {
      const bool finite = std::isfinite(pts[i].first) && std::isfinite(pts[i].second);
      bool dominated = false;
      for (size_t j = 0; j < pts.size() && finite; ++j) {
        if (j == i || !std::isfinite(pts[j].second)) continue;
        const bool le = pts[j].first <= pts[i].first && pts[j].second <= pts[i].second;
        const bool lt = pts[j].first < pts[i].first || pts[j].second < pts[i].second;
        // Of exact duplicates, the first one (by index) counts as on the frontier.
        dominated = dominated || (le && lt) || (pts[j] == pts[i] && j < i);
      }
      INFO("point " << i << " (" << pts[i].first << ", " << pts[i].second << ")");
      CHECK(on.count(i) == (finite && !dominated ? 1u : 0u));
    }
    for (size_t k = 1; k < front.size(); ++k) {
      CHECK(pts[front[k]].first > pts[front[k - 1]].first);
      CHECK(pts[front[k]].second < pts[front[k - 1]].second);
    }
  }
}

TEST_CASE("report: the Gantt chart draws the chosen ranks' streams with bars at the event times", "[reports]") {
  plan::Timeline t;
  t.source = "predicted";
  t.step_time_s = 0.010;
  t.streams = {"compute", "tp", "dp"};
  using K = plan::TaskKind;
  using P = plan::Phase;
  using C = plan::CommPurpose;
  t.events = {
      event(0, 0, K::alloc, 0, 0, P::forward, C::none, "alloc"),
      event(0, 0, K::compute, 0.000, 0.002, P::forward, C::none, "fwd mb0"),
      event(0, 1, K::collective, 0.002, 0.003, P::forward, C::tp, "ar tp"),
      event(0, 0, K::compute, 0.003, 0.007, P::backward, C::none, "bwd mb0"),
      event(0, 2, K::collective, 0.007, 0.009, P::none, C::dp, "ar dp"),
      event(0, 0, K::compute, 0.009, 0.010, P::optimizer, C::none, "adam"),
      event(1, 0, K::compute, 0.000, 0.004, P::forward, C::none, "fwd mb0 r1"),
      event(2, 0, K::compute, 0.000, 0.005, P::forward, C::none, "not shown"),
  };
  const svg::GanttChart g = gantt_of(t, {0, 1}, "g");
  REQUIRE(g.rows.size() == 4);  // rank 0: compute, tp, dp; rank 1: compute
  CHECK(g.rows[0].label == "rank 0 compute");
  CHECK(g.rows[1].label == "rank 0 tp");
  CHECK(g.rows[2].label == "rank 0 dp");
  CHECK(g.rows[3].label == "rank 1 compute");
  REQUIRE(g.rows[0].bars.size() == 3);  // the alloc (an instant) is left out
  // Milliseconds for a 10 ms step.
  CHECK(g.x.label == "time in the step (ms)");
  CHECK(g.rows[0].bars[1].start_s == Approx(3.0));
  CHECK(g.rows[0].bars[1].end_s == Approx(7.0));
  CHECK(g.rows[3].bars[0].end_s == Approx(4.0));
  // Categories: only those present, each bar pointing at its own.
  auto category = [&](const svg::GanttBar& b) { return g.categories.at(static_cast<size_t>(b.category)); };
  CHECK(category(g.rows[0].bars[0]) == "forward");
  CHECK(category(g.rows[0].bars[1]) == "backward");
  CHECK(category(g.rows[0].bars[2]) == "optimizer");
  CHECK(category(g.rows[1].bars[0]) == "TP comm");
  CHECK(category(g.rows[2].bars[0]) == "DP all-reduce");
  CHECK(g.categories.size() == 5);
  const std::string doc = svg::gantt_chart(g);
  CHECK(doc.find("not shown") == std::string::npos);
  CHECK(doc.find("fwd mb0 r1") != std::string::npos);
}

TEST_CASE("report: the comparison table follows the search ranking", "[reports]") {
  const auto& f = fixture();
  const Report& r = f.report;
  REQUIRE(r.plans.size() == 5);
  CHECK(r.enumerated == f.res.enumerated);
  CHECK(r.evaluated == f.res.ranked.size());
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const auto& rp = r.plans[i];
    CHECK(rp.position == i + 1);
    CHECK(json::dump(plan::to_json(rp.candidate.plan)) == json::dump(plan::to_json(f.res.ranked[i].plan)));
    CHECK(rp.candidate.step.step_time_s == f.res.ranked[i].step.step_time_s);
    // Memory per stage: one entry per pipeline rank, the peak being the search's figure.
    REQUIRE(static_cast<int>(rp.memory_per_stage.size()) == rp.candidate.plan.pp);
    double peak = 0;
    for (const auto& m : rp.memory_per_stage) peak = std::max(peak, m.total_bytes());
    CHECK(peak == Approx(rp.candidate.memory.total_bytes()));
    // Spot Monte Carlo for the first three only (the best through the spot study).
    CHECK(rp.spot.has_value() == (i < 3));
    if (rp.spot && rp.spot->monte_carlo) {
      CHECK(rp.spot->monte_carlo->runs == 60);
      // Interruptions only add time: the whole job takes at least its uninterrupted time.
      CHECK(rp.spot->monte_carlo->time_s.min >= rp.spot->estimate.total_s * (1 - 1e-9));
      CHECK(rp.spot->monte_carlo->cost_usd.p90 >= rp.spot->monte_carlo->cost_usd.p50);
    }
  }
}

TEST_CASE("report: scaling and cost-time points are the fastest plan per instance type and size", "[reports]") {
  const auto& f = fixture();
  const Report& r = f.report;
  // Brute force over every evaluated candidate.
  std::map<std::pair<std::string, int>, double> fastest;
  for (const auto& c : f.res.ranked) {
    auto key = std::make_pair(c.plan.instance_type, c.plan.world_size());
    auto it = fastest.find(key);
    if (it == fastest.end() || c.time_to_train_s < it->second) fastest[key] = c.time_to_train_s;
  }
  REQUIRE(r.sizes.size() == fastest.size());
  std::map<std::string, double> base_per_gpu;
  for (const auto& s : r.sizes) {
    CHECK(s.best.time_to_train_s == fastest.at({s.instance_type, s.gpus}));
    CHECK(s.best.plan.instance_type == s.instance_type);
    CHECK(s.best.plan.world_size() == s.gpus);
    if (!base_per_gpu.count(s.instance_type)) {
      // The first (smallest) size of each type is the baseline.
      base_per_gpu[s.instance_type] = s.tokens_per_s / s.gpus;
      CHECK(s.scaling_efficiency == Approx(1.0));
    }
    CHECK(s.scaling_efficiency == Approx((s.tokens_per_s / s.gpus) / base_per_gpu[s.instance_type]));
  }
  // Pareto flags against a brute-force dominance check on (time, on-demand cost).
  for (const auto& a : r.sizes) {
    bool dominated = false;
    for (const auto& b : r.sizes) {
      const double ta = a.best.time_to_train_s, tb = b.best.time_to_train_s;
      const double ca = *a.best.cost_on_demand_usd, cb = *b.best.cost_on_demand_usd;
      dominated = dominated || (tb <= ta && cb <= ca && (tb < ta || cb < ca));
    }
    CHECK(a.pareto == !dominated);
  }
  // Every evaluated candidate is dominated by or equal to a frontier point.
  for (const auto& c : f.res.ranked) {
    bool covered = false;
    for (const auto& s : r.sizes)
      covered = covered || (s.pareto && s.best.time_to_train_s <= c.time_to_train_s &&
                            *s.best.cost_on_demand_usd <= *c.cost_on_demand_usd * (1 + 1e-12));
    CHECK(covered);
  }
}

TEST_CASE("report: the spot study compares purchase options of the best plan's job", "[reports]") {
  const auto& f = fixture();
  const Report& r = f.report;
  REQUIRE(r.spot.has_value());
  const SpotStudy& s = *r.spot;
  REQUIRE(s.options.size() == 3);  // the best plan has several instances: a blend is possible
  CHECK(s.options[0].name == "on-demand");
  CHECK(s.options[1].name == "spot");
  CHECK(s.options[2].name.rfind("blend (", 0) == 0);
  CHECK(s.spot_time_samples_s.size() == 60);
  CHECK(s.spot_cost_samples_usd.size() == 60);
  // Independently: the job model of the best plan on spot, with Young's interval and the same seed.
  plan::Plan p = r.plans.front().candidate.plan;
  const auto ctx = plan::resolve(p, hw::Catalog::builtin(), "best");
  sim::JobOptions jo;
  jo.step_time_s = r.plans.front().candidate.step.step_time_s;
  jo.tokens = 1e9;
  jo.purchase = sim::PurchaseOption::spot;
  sim::JobSpec job = sim::build_job_spec(p, ctx, jo);
  const auto model = sim::default_interruption_model(*ctx.instance);
  job.checkpoint_interval_s = sim::young_interval_s(job.checkpoint.write_s(), 1.0 / sim::job_interruption_rate_per_s(job, model));
  sim::MonteCarloOptions mc;
  mc.runs = 60;
  mc.seed = 3;
  const auto expect = sim::run_monte_carlo(job, model, mc);
  REQUIRE(s.options[1].monte_carlo.has_value());
  CHECK(s.options[1].monte_carlo->cost_usd.p50 == expect.cost_usd.p50);
  CHECK(s.options[1].monte_carlo->time_s.p90 == expect.time_s.p90);
  CHECK(s.options[1].checkpoint_interval_s == job.checkpoint_interval_s);
  CHECK(r.plans.front().spot->monte_carlo->cost_usd.p50 == expect.cost_usd.p50);
  // Samples are the runs behind the summary.
  std::vector<double> sorted = s.spot_cost_samples_usd;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted.front() == expect.cost_usd.min);
  CHECK(sorted.back() == expect.cost_usd.max);
  // Spot costs less than on-demand here (a 5.7x cheaper hourly price, rare interruptions).
  CHECK(s.options[1].monte_carlo->cost_usd.p50 < s.options[0].estimate.cost_usd);
  REQUIRE(s.interval.has_value());
  CHECK(s.interval->rows.size() >= 5);
}

TEST_CASE("report: the best plan's simulated step keeps the representative ranks only", "[reports]") {
  const auto& f = fixture();
  const Report& r = f.report;
  REQUIRE(r.simulated.has_value());
  const SimulatedTimeline& s = *r.simulated;
  CHECK(s.world_size == r.plans.front().candidate.plan.world_size());
  CHECK(s.step_time_s > 0);
  // Within a factor 2 of the analytical estimate (the two models agree in kind).
  CHECK(s.step_time_s / s.analytical_step_time_s > 0.5);
  CHECK(s.step_time_s / s.analytical_step_time_s < 2.0);
  REQUIRE_FALSE(s.ranks_shown.empty());
  CHECK(s.ranks_shown.size() <= s.symmetry_classes);
  const std::set<int> shown(s.ranks_shown.begin(), s.ranks_shown.end());
  REQUIRE_FALSE(s.timeline.events.empty());
  for (const auto& e : s.timeline.events) {
    CHECK(shown.count(e.rank) == 1);
    CHECK(e.end_s <= s.step_time_s * (1 + 1e-9));
  }
  // The breakdown's parts sum to the step (a property of the simulator the report relies on).
  const auto& b = s.breakdown;
  CHECK(b.compute_s + b.optimizer_s + b.bubble_s + b.other_s + b.exposed_comm_total_s() == Approx(s.step_time_s).epsilon(1e-6));
}

TEST_CASE("report: the simulation is skipped with a note above the task limit", "[reports]") {
  const auto& f = fixture();
  ReportOptions o = small_options();
  o.spot_runs = 0;
  o.max_simulated_tasks = 10;
  const Report r = build_report(f.req, f.res, hw::Catalog::builtin(), o);
  CHECK_FALSE(r.simulated.has_value());
  bool noted = false;
  for (const auto& n : r.notes) noted = noted || n.find("one simulated step: skipped") != std::string::npos;
  CHECK(noted);
  // No Monte Carlo runs: no spot columns, the study keeps its estimates.
  for (const auto& rp : r.plans) CHECK((!rp.spot || !rp.spot->monte_carlo));
  const std::string md = render_markdown(r);
  CHECK(md.find("Not simulated: see the notes at the end.") != std::string::npos);
}

TEST_CASE("report: Markdown and HTML are deterministic and carry the same tables", "[reports]") {
  const auto& f = fixture();
  const std::string md = render_markdown(f.report);
  const std::string html = render_html(f.report);
  const Report again = build_report(f.req, f.res, hw::Catalog::builtin(), small_options());
  CHECK(render_markdown(again) == md);
  CHECK(render_html(again) == html);
  // Sections.
  for (const char* h : {"# trainplan report: gpt2-124m", "## Best plan", "## Top plans", "## Cost vs time to train",
                        "## Throughput and scaling efficiency", "## Step-time breakdown", "## Memory per GPU by pipeline stage",
                        "## One simulated step", "## Spot and purchase options", "### Checkpoint interval (spot)",
                        "## Prices, assumptions and notes"})
    CHECK(md.find(h) != std::string::npos);
  CHECK(md.find("<svg") == std::string::npos);
  CHECK(md.find("[report.html](report.html)") != std::string::npos);
  // Every Markdown table cell appears in the HTML as a cell.
  const std::regex row(R"(^\|(.*)\|$)");
  size_t cells = 0;
  std::istringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| ---", 0) == 0 || line.rfind("|", 0) != 0) continue;
    for (const auto& cell : split(line.substr(2, line.size() - 4), '|')) {
      std::string c = cell;
      while (!c.empty() && c.back() == ' ') c.pop_back();
      while (!c.empty() && c.front() == ' ') c.erase(c.begin());
      if (c.empty()) continue;
      ++cells;
      const std::string escaped = svg::escape(c);
      CHECK((html.find(">" + escaped + "</td>") != std::string::npos || html.find(">" + escaped + "</th>") != std::string::npos));
    }
  }
  CHECK(cells > 200);
  // The best plan's numbers in text.
  const auto& best = f.report.plans.front().candidate;
  CHECK(md.find(units::format_duration(best.step.step_time_s) + " (estimate)") != std::string::npos);
  // Self-contained: charts inline, nothing fetched, no script.
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find(" src=") == std::string::npos);
  CHECK(html.find("href") == std::string::npos);
  CHECK(html.find("@import") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
  size_t charts = 0;
  for (size_t p = html.find("<svg class=\"chart\""); p != std::string::npos; p = html.find("<svg class=\"chart\"", p + 1)) ++charts;
  // Cost-time, throughput, efficiency, breakdown, memory, Gantt, 2 purchase bars, 2 histograms, interval.
  CHECK(charts == 11);
}

TEST_CASE("report: a single plan's report has no comparison across plans", "[reports]") {
  plan::Plan p = fixture().report.plans.front().candidate.plan;
  p.training_tokens = 0;
  ReportOptions o = small_options();
  const Report with_tokens = build_plan_report(p, hw::Catalog::builtin(), o, 2e9, "plan.json");
  CHECK(with_tokens.single_plan);
  REQUIRE(with_tokens.plans.size() == 1);
  CHECK(with_tokens.sizes.empty());
  CHECK(with_tokens.tokens == 2e9);
  CHECK(with_tokens.simulated.has_value());
  CHECK(with_tokens.spot.has_value());
  // Twice the tokens of the search: twice the steps.
  CHECK(with_tokens.plans.front().candidate.steps == Approx(2 * fixture().report.plans.front().candidate.steps).epsilon(2e-3));
  const std::string md = render_markdown(with_tokens);
  CHECK(md.find("## Top plans") == std::string::npos);
  CHECK(md.find("## Cost vs time to train") == std::string::npos);
  CHECK(md.find("## Memory per GPU by pipeline stage") != std::string::npos);
  // Without any work the time, cost and spot parts are left out, with a note.
  const Report no_work = build_plan_report(p, hw::Catalog::builtin(), o, 0, "plan.json");
  CHECK_FALSE(no_work.spot.has_value());
  CHECK(render_markdown(no_work).find("no training work given") != std::string::npos);
  // An invalid plan is an error naming the file.
  plan::Plan bad = p;
  bad.dp = 3;
  REQUIRE_ERROR_CONTAINS(build_plan_report(bad, hw::Catalog::builtin(), o, 1e9, "bad.json"), "bad.json");
}

TEST_CASE("report: nothing to report when no plan fits", "[reports]") {
  SearchRequest req = small_request();
  SearchResult empty;
  REQUIRE_ERROR_CONTAINS(build_report(req, empty, hw::Catalog::builtin()), "nothing to report");
}

TEST_CASE("report: --history adds predicted vs measured from the error history", "[reports]") {
  // A temporary error history with three runs: one without a prediction, two predicted with
  // their task classes. Oracle: the numbers written into the database.
  const std::string db = (std::filesystem::temp_directory_path() / fmt::format("trainplan-report-history-{}.sqlite", ::getpid())).string();
  std::filesystem::remove(db);
  {
    calibration::History h(db);
    calibration::HistoryRun a;
    a.date = "2026-11-26T00:00:00Z", a.command = "execute", a.hardware = "cpu:Test", a.backend = "cpu";
    a.plan = "plan.json", a.profile = "uncalibrated", a.measured_step_s = 0.030;
    h.record(a);
    calibration::HistoryRun b = a;
    b.profile = "profile.json", b.predicted_step_s = 0.033, b.measured_step_s = 0.030;
    b.task_classes = {{"compute/forward", 0.011, 0.010}, {"compute/backward", 0.022, 0.020}};
    h.record(b);
    calibration::HistoryRun c = b;
    c.predicted_step_s = 0.0285;
    c.task_classes = {{"compute/forward", 0.0095, 0.010}, {"compute/backward", 0.019, 0.020}};
    h.record(c);
  }
  plan::Plan p = fixture().report.plans.front().candidate.plan;
  ReportOptions o = small_options();
  o.simulate = false;
  o.history_db = db;
  const Report r = build_plan_report(p, hw::Catalog::builtin(), o, 2e9, "plan.json");
  REQUIRE(r.measured_runs.size() == 3);
  const std::string md = render_markdown(r);
  CHECK(md.find("## Predicted vs measured") != std::string::npos);
  CHECK(md.find("| compute/backward | 19.0 ms | 20.0 ms | -5.0% |") != std::string::npos);  // the latest predicted run
  CHECK(md.find("+10.0%") != std::string::npos);                                           // run 2's step error
  const std::string html = render_html(r);
  CHECK(html.find("id=\"measured-classes") != std::string::npos);
  CHECK(html.find("id=\"measured-trend") != std::string::npos);
  o.history_runs = 1;
  CHECK(build_plan_report(p, hw::Catalog::builtin(), o, 2e9, "plan.json").measured_runs.size() == 1);
  std::filesystem::remove(db);
  o.history_db = db;
  REQUIRE_ERROR_CONTAINS(build_plan_report(p, hw::Catalog::builtin(), o, 2e9, "plan.json"), "no error history");
}
