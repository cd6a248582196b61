// Reports of SageMaker jobs: the GPU report's "SageMaker jobs" section (warm pool, sweep,
// managed spot with max_wait) against closed forms of the job model, and the classic-ML report
// against the comparison it renders.
#include <fmt/format.h>

#include "test_support.hpp"
#include "trainplan/reports/classic_report.hpp"
#include "trainplan/reports/report.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

using namespace trainplan;
using namespace trainplan::reports;

namespace {

plan::Plan gpt2_plan() {
  plan::Plan p;
  p.model = "gpt2-124m";
  p.instance_type = "p3.8xlarge";
  p.instance_count = 2;
  p.dp = 8;
  p.global_batch = 64;
  p.micro_batch = 8;
  return p;
}

ReportOptions job_options() {
  ReportOptions o;
  o.spot_runs = 100;
  o.seed = 5;
  o.simulate = false;
  planner::JobRequest j;
  j.warm_pool = true;
  j.repeat = 20;
  j.parallel = 4;
  j.keep_alive = "10min";
  j.max_wait = "2h";
  o.job = j;
  return o;
}

}  // namespace

TEST_CASE("report: the SageMaker jobs section follows the job model's closed forms", "[reports]") {
  const Report r = build_plan_report(gpt2_plan(), hw::Catalog::builtin(), job_options(), 1e9, "plan.json");
  REQUIRE(r.job);
  const JobSection& s = *r.job;
  const auto& f = sim::LifecycleFacts::builtin();
  REQUIRE(s.warm);
  // A warm start replaces provisioning by the warm-pool start and skips the image pull.
  CHECK(s.cold.startup_s - s.warm->startup_s ==
        Approx(s.job.startup.provisioning_s - f.sagemaker_warm_pool_start_s + s.job.startup.container_pull_s));
  CHECK(s.cold.billed_s_per_node - s.warm->billed_s_per_node == Approx(s.job.startup.container_pull_s));
  // Same training either way.
  CHECK(s.cold.compute_s == Approx(s.warm->compute_s));
  // The sweep: 4 slots start cold, 16 jobs reuse a pool, 4 pools of 2 instances wait 600 s each.
  REQUIRE(s.sweep);
  const int nodes = s.job.nodes;
  CHECK(nodes == 2);
  CHECK(s.sweep->billed_s == Approx(4 * nodes * s.cold.billed_s_per_node + 16 * nodes * s.warm->billed_s_per_node + 4 * nodes * 600.0));
  CHECK(s.sweep->wall_s == Approx(s.cold.total_s + 4 * s.warm->total_s));
  // Managed spot with max_wait: the probability of exceeding it is reported.
  REQUIRE(s.spot);
  REQUIRE(s.spot->p_exceed_max_wait);
  CHECK(s.spot->runs == 100);
  const std::string md = render_markdown(r);
  CHECK(md.find("## SageMaker jobs") != std::string::npos);
  CHECK(md.find(fmt::format("{:.2f}", s.sweep->billed_s / 3600)) != std::string::npos);
  CHECK(md.find(fmt::format("P(exceeds max_wait 2h) = {:.3f}", *s.spot->p_exceed_max_wait)) != std::string::npos);
  CHECK(render_html(r).find("<h2>SageMaker jobs</h2>") != std::string::npos);
  // Without the options there is no such section.
  ReportOptions plain = job_options();
  plain.job.reset();
  const Report none = build_plan_report(gpt2_plan(), hw::Catalog::builtin(), plain, 1e9, "plan.json");
  CHECK_FALSE(none.job);
  CHECK(render_markdown(none).find("## SageMaker jobs") == std::string::npos);
}

TEST_CASE("report: the classic-ML report renders every compared job and the objective's best", "[reports][classic]") {
  const hw::Catalog& cat = hw::Catalog::builtin();
  planner::ClassicRequest req;
  req.spec = {.rows = 892, .features = 8, .rounds = 100};
  req.instances = {&cat.cpu_instance("ml.m5.large")};
  req.counts = {1, 2};
  req.sweep = planner::SweepRequest{.repeat = 20, .parallel = 4, .keep_alive_s = 600};
  req.spot = planner::SpotRequest{.max_wait_s = 240, .runs = 100};
  const ClassicReport r = build_classic_report(req, cat, "cost");
  REQUIRE(r.rows.size() == 2);
  // The lesson's finding: one instance is the cheaper job.
  CHECK(r.rows[r.best].job.count == 1);
  const std::string md = render_markdown(r);
  for (const auto& row : r.rows) {
    INFO(row.job.count);
    CHECK(md.find(fmt::format("| {} | {} |", row.job.instance, row.job.count)) != std::string::npos);
    CHECK(md.find(fmt::format("${:.4f}", row.job.cost_usd)) != std::string::npos);
    // A price resting on unverified sources is marked, with the sources named.
    if (!cat.unverified_price_sources(*row.instance, false).empty())
      CHECK(md.find(fmt::format("${:.4f} *", row.job.cost_usd)) != std::string::npos);
    CHECK(md.find(fmt::format("{:.1f}", row.sweep->billed_s)) != std::string::npos);
  }
  CHECK(md.find("## Where the time goes") != std::string::npos);
  CHECK(md.find("| image download | yes |") != std::string::npos);
  CHECK(md.find("| starting | no |") != std::string::npos);
  CHECK(md.find("## When more instances pay") != std::string::npos);
  CHECK(md.find("## Managed spot") != std::string::npos);
  // Deterministic, and the HTML carries the same tables.
  CHECK(render_markdown(build_classic_report(req, cat, "cost")) == md);
  const std::string html = render_html(r);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<th>phase</th>") != std::string::npos);
}
