// `trainplan validate published-results.json`: predicted vs measured for every published point
// that maps onto a catalog cluster, the error per point and the MAPE per source.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/calibration/profile.hpp"
#include "trainplan/calibration/validate.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/calibrated.hpp"
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

// A bound point's error with the bound it is checked against: "+67.3% (lower bound: consistent)".
std::string error_of(const calibration::ValidationPoint& p) {
  if (p.bound == calibration::PublishedBound::none) return pct(p.error);
  return fmt::format("{} ({} bound: {})", pct(p.error), p.bound == calibration::PublishedBound::lower ? "lower" : "upper",
                     p.bound_consistent ? "consistent" : "VIOLATED");
}

void run(const ValidateArgs& a) {
  calibration::ValidationOptions o;
  o.threads = a.threads;
  o.filter = a.filter;
  // A calibration profile (trainplan calibrate) applies to the points on its GPU type, and the
  // profile directory's defaults to the others; a calibration table to every point.
  const bool table = !a.calibration.empty() && !calibration::is_profile_file(a.calibration);
  auto profiles = std::make_shared<planner::SearchRequest>();
  planner::load_calibration_profiles(*profiles, table ? std::string() : a.calibration);
  o.analytical_step_s = [profiles](const plan::Plan& p, const plan::PlanContext& ctx) {
    return planner::estimate_step(p, ctx, profiles->analytical_for(*ctx.gpu)).step_time_s;
  };
  if (!profiles->analytical_by_gpu.empty())
    o.calibrate = [profiles](const hw::GpuSpec& gpu, sim::SimOptions& so) {
      if (!profiles->analytical_by_gpu.count(gpu.name)) return false;
      so = planner::with_calibration(so, profiles->analytical_for(gpu));
      return true;
    };
  if (table) o.calibration = std::make_shared<sim::CalibrationTable>(sim::CalibrationTable::read_file(a.calibration));
  const auto r = calibration::validate_published(a.file, user_catalog(), o);
  std::printf("%s: %zu points; predictions %s\n", a.file.c_str(), r.points.size(),
              table ? ("with the calibration table " + a.calibration).c_str() : planner::calibration_summary(*profiles).c_str());
  std::printf("training points compare the step time; published TFLOP/s are converted back with the source's own FLOP\n"
              "formula. Model TFLOP/s per GPU below: 6N + attention FLOPs per token, no recomputation, for both columns.\n\n");
  Table t({"point", "cluster", ">measured", ">simulated", ">error", ">analytical", ">error", ">model TFLOP/s meas/pred",
           ">peak memory/GPU", "fits"});
  Table c({"point", "cluster", ">measured busbw", ">simulated", ">error"});
  Table d({"point", "cluster", "compared", ">measured", ">simulated", ">error", ">analytical", ">error"});
  for (const auto& p : r.points) {
    if (!p.mapped) continue;
    if (p.metric == "throughput_ratio" || p.metric == "scaling_efficiency")
      d.add({p.id, p.cluster, p.setup, fmt::format("{:.3f}", p.measured), fmt::format("{:.3f}", p.predicted), error_of(p),
             fmt::format("{:.3f}", p.predicted_analytical), pct(p.error_analytical)});
    else if (p.metric == "step_time_s")
      t.add({p.id, p.cluster, fmt::format("{:.3f} s", p.measured), fmt::format("{:.3f} s", p.predicted), error_of(p),
             fmt::format("{:.3f} s", p.predicted_analytical), pct(p.error_analytical),
             fmt::format("{:.0f}/{:.0f}", p.model_tflops_measured, p.model_tflops_predicted),
             fmt::format("{}/{}", units::format_bytes(p.peak_memory_bytes), units::format_bytes(p.memory_capacity_bytes)),
             p.fits_memory ? "yes" : "NO"});
    else
      c.add({p.id, p.cluster, fmt::format("{:.1f} GB/s", p.measured), fmt::format("{:.1f} GB/s", p.predicted), error_of(p)});
  }
  std::fputs(t.render().c_str(), stdout);
  std::printf("\n");
  std::fputs(c.render().c_str(), stdout);
  if (r.libraries.points > 0) {
    std::printf("\ndata-parallel libraries (throughput_ratio: SMDDP / PyTorch DDP; scaling_efficiency: Horovod on n GPUs / n x 1):\n");
    std::fputs(d.render().c_str(), stdout);
  }
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
  if (r.libraries.points > 0) add(r.libraries);
  std::fputs(s.render("  ").c_str(), stdout);
  for (const auto* x : {&r.training, &r.collectives, &r.libraries})
    if (x->bounds)
      std::printf("  %s: %d more point%s the source calls a bound, not a measurement (left out of MAPE and bias): %d with the "
                  "prediction on the bound's side\n",
                  x->title.c_str(), x->bounds, x->bounds == 1 ? "" : "s", x->bounds_consistent);
  if (silent) std::printf("  (%zu more sources have no point that maps onto a catalog cluster)\n", silent);
  if (!r.groups.empty()) {
    std::printf("\ntraining points by group:\n");
    Table g({"group", ">points", ">MAPE sim", ">bias sim", ">MAPE analytical"});
    for (const auto& x : r.groups)
      g.add({x.title, std::to_string(x.points), fmt::format("{:.1f}%", 100 * x.mape), pct(x.mean_error),
             fmt::format("{:.1f}%", 100 * x.mape_analytical)});
    std::fputs(g.render("  ").c_str(), stdout);
  }
  if (r.loso_available && r.training.points > 0)
    std::printf("\nleave-one-source-out MAPE: %.1f%% (no constant is set from a validation point, so each source's held-out\n"
                "prediction is its prediction; a --calibration table voids this)\n",
                100 * r.training.mape);
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
  cmd->add_option("--calibration", a->calibration,
                  "Calibration profile (trainplan calibrate) for the points on its GPU type, or a calibration table for "
                  "every point; without it, each GPU type's default profile in the profile directory");
  cmd->add_option("--filter", a->filter, "Only points whose id contains this text");
  add_int(cmd, "--threads", a->threads, 0, limits::kMaxThreads, "Worker threads (0: all cores)");
  cmd->add_flag("--unmapped", a->unmapped, "List every point that could not be mapped, with the reason");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
