// `trainplan validate published-results.json`: predicted vs measured for every published point
// that maps onto a catalog cluster, the error per point and the MAPE per source.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/calibration/validate.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/simulator/compute_model.hpp"

namespace trainplan::cli {
namespace {

struct ValidateArgs {
  std::string file;
  std::string json_out;
  std::string calibration;
  std::string filter;
  int threads = 0;
  bool unmapped = false;
};

std::string pct(double e) { return fmt::format("{:+.1f}%", 100.0 * e); }

void run(const ValidateArgs& a) {
  calibration::ValidationOptions o;
  o.threads = a.threads;
  o.filter = a.filter;
  o.analytical_step_s = [](const plan::Plan& p, const plan::PlanContext& ctx) { return planner::estimate_step(p, ctx).step_time_s; };
  if (!a.calibration.empty())
    o.calibration = std::make_shared<sim::CalibrationTable>(sim::CalibrationTable::read_file(a.calibration));
  const auto r = calibration::validate_published(a.file, user_catalog(), o);
  std::printf("%s: %zu points; predictions %s\n", a.file.c_str(), r.points.size(),
              a.calibration.empty() ? "uncalibrated (catalog peaks and documented efficiency defaults)" : "with the calibration table");
  std::printf("training points compare the step time; published TFLOP/s are converted back with the source's own FLOP\n"
              "formula. Model TFLOP/s per GPU below: 6N + attention FLOPs per token, no recomputation, for both columns.\n\n");
  Table t({"point", "cluster", ">measured", ">simulated", ">error", ">analytical", ">error", ">model TFLOP/s meas/pred", "fits"});
  Table c({"point", "cluster", ">measured busbw", ">simulated", ">error"});
  for (const auto& p : r.points) {
    if (!p.mapped) continue;
    if (p.metric == "step_time_s")
      t.add({p.id, p.cluster, fmt::format("{:.3f} s", p.measured), fmt::format("{:.3f} s", p.predicted), pct(p.error),
             fmt::format("{:.3f} s", p.predicted_analytical), pct(p.error_analytical),
             fmt::format("{:.0f}/{:.0f}", p.model_tflops_measured, p.model_tflops_predicted), p.fits_memory ? "yes" : "NO"});
    else
      c.add({p.id, p.cluster, fmt::format("{:.1f} GB/s", p.measured), fmt::format("{:.1f} GB/s", p.predicted), pct(p.error)});
  }
  std::fputs(t.render().c_str(), stdout);
  std::printf("\n");
  std::fputs(c.render().c_str(), stdout);
  std::printf("\nper source (MAPE = mean |predicted / measured - 1|; bias = mean signed error):\n");
  Table s({"source", "metric", ">points", ">unmapped", ">MAPE sim", ">bias sim", ">MAPE throughput", ">MAPE analytical"});
  auto add = [&](const calibration::SourceSummary& x) {
    const bool training = x.metric == "step_time_s";
    s.add({x.title.substr(0, 60), x.metric.empty() ? "-" : x.metric, std::to_string(x.points), std::to_string(x.unmapped),
           x.points ? fmt::format("{:.1f}%", 100 * x.mape) : "-", x.points ? pct(x.mean_error) : "-",
           training && x.points ? fmt::format("{:.1f}%", 100 * x.mape_throughput) : "-",
           training && x.points ? fmt::format("{:.1f}%", 100 * x.mape_analytical) : "-"});
  };
  size_t silent = 0;
  for (const auto& x : r.sources) {
    if (x.points > 0) add(x);
    else ++silent;
  }
  add(r.training);
  add(r.collectives);
  std::fputs(s.render("  ").c_str(), stdout);
  if (silent) std::printf("  (%zu more sources have no point that maps onto a catalog cluster)\n", silent);
  size_t unmapped = 0;
  for (const auto& p : r.points) unmapped += !p.mapped;
  if (a.unmapped) {
    std::printf("\nnot mapped (%zu):\n", unmapped);
    for (const auto& p : r.points)
      if (!p.mapped) std::printf("  %s: %s\n", p.id.c_str(), p.reason.c_str());
  } else if (unmapped) {
    std::printf("\n%zu points not mapped (--unmapped lists each with the reason)\n", unmapped);
  }
  if (!a.json_out.empty()) {
    json::write_file(a.json_out, calibration::to_json(r));
    std::printf("report written to %s\n", a.json_out.c_str());
  }
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  CLI::App* cmd = app.add_subcommand("validate", "Compare predictions with published measurements (published-results.json format)");
  cmd->add_option("file", a->file, "Published results JSON (e.g. ../shared/validation/published-results.json)")->required();
  cmd->add_option("--json", a->json_out, "Write the report as JSON");
  cmd->add_option("--calibration", a->calibration, "Calibration table JSON to apply to the simulator");
  cmd->add_option("--filter", a->filter, "Only points whose id contains this text");
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)");
  cmd->add_flag("--unmapped", a->unmapped, "List every point that could not be mapped, with the reason");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
