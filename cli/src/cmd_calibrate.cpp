// `trainplan calibrate INPUT... -o profile.json`: fits a calibration profile
// (calibration/profile.hpp) from one `trainplan bench` output and any number of measured
// timelines (`trainplan execute --timeline`), nccl-tests logs, or published measured runs of a
// catalog GPU (calibration/published.hpp), prints the fitted parameters and the fit error
// per parameter group (train and held-back points), and writes the profile with provenance.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/calibration/history.hpp"
#include "trainplan/calibration/measurements.hpp"
#include "trainplan/calibration/nccl_tests.hpp"
#include "trainplan/calibration/profile.hpp"
#include "trainplan/calibration/published.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/simulator/compute_model.hpp"

namespace trainplan::cli {
namespace {

struct CalibrateArgs {
  std::vector<std::string> inputs;
  std::string out;
  int heldout_every = 4;
  std::string hardware;
  std::string history_db;
  bool no_history = false;
};

// What the inputs are, read and hashed.
struct Inputs {
  std::optional<calibration::BenchResult> bench;
  std::string bench_name;
  std::vector<calibration::MeasuredRun> runs;
  std::vector<calibration::ProfileInput> files;
  std::vector<calibration::NcclTestsLog> nccl_logs;
  std::optional<json::Json> published;
  std::string published_name;
};

Inputs read_inputs(const CalibrateArgs& a) {
  Inputs in;
  for (const auto& path : a.inputs) {
    const std::string text = json::read_text_file(path);
    if (calibration::is_nccl_tests_log(text)) {
      in.nccl_logs.push_back(calibration::parse_nccl_tests_log(text, path));
      in.files.push_back({path, "nccl-tests", calibration::file_xxh64(path)});
      continue;
    }
    const json::Json doc = json::parse_text(text, path);
    if (doc.is_object() && doc.value("kind", "") == "trainplan-bench") {
      if (in.bench)
        throw Error("a second benchmark input").at(path).hint(fmt::format(
            "calibrate from one trainplan bench output ({} is the first); fit other machines into other profiles", in.bench_name));
      in.bench = calibration::bench_from_json(doc, path);
      in.bench_name = path;
      in.files.push_back({path, "bench", calibration::file_xxh64(path)});
    } else if (doc.is_object() && doc.contains("events") && doc.contains("source")) {
      in.runs.push_back(calibration::read_measured_run(path, user_catalog()));
      in.files.push_back({path, "timeline", calibration::file_xxh64(path)});
    } else if (calibration::is_published_results(doc)) {
      if (in.published)
        throw Error("a second published-results input").at(path).hint(fmt::format(
            "merge the data_points into one file ({} is the first)", in.published_name));
      in.published = doc;
      in.published_name = path;
      in.files.push_back({path, "published", calibration::file_xxh64(path)});
    } else {
      throw Error("not a calibration input: neither a trainplan bench output, a measured timeline, an nccl-tests log nor "
                  "a published-results file")
          .at(path)
          .hint("pass trainplan bench -o output, trainplan execute --timeline files, all_reduce_perf logs or published "
                "results in the ../shared/validation/published-results.json format");
    }
  }
  return in;
}

// Refuses combinations that have no meaning, naming the fix.
void check_inputs(const Inputs& in, const hw::GpuSpec* catalog_gpu) {
  if (in.published && in.bench)
    throw Error("published step times and a benchmark in one profile")
        .at(in.published_name)
        .hint("published points calibrate a catalog GPU's datasheet model (--hardware GPU); a benchmark measures this "
              "machine: fit them into separate profiles");
  if (in.published && !catalog_gpu)
    throw Error("published points need --hardware")
        .at(in.published_name)
        .hint("name the catalog GPU whose points to fit (e.g. --hardware H100-SXM5-80GB); points on other GPUs are left out");
  if (!in.bench && !in.published && (in.nccl_logs.empty() || !catalog_gpu))
    throw Error(in.nccl_logs.empty() ? "no benchmark among the inputs" : "nccl-tests logs without a benchmark need --hardware")
        .hint(in.nccl_logs.empty()
                  ? "measure this machine first: trainplan bench -o measurements.json, and pass that file too"
                  : "name the catalog GPU the logs ran on (e.g. --hardware A100-SXM4-40GB); its datasheet peaks stand in "
                    "for the benchmark's");
  if (!in.bench && !in.runs.empty())
    throw Error("measured timelines need a benchmark: their compute fit is relative to its measured peaks")
        .at(in.runs.front().path)
        .hint("pass the trainplan bench output of the machine the timelines were measured on");
}

void print_profile(const calibration::Profile& p, const CalibrateArgs& a, bool bench) {
  std::printf("calibration profile for %s (%s backend) from %zu input(s): %s\n", p.hardware.c_str(), p.backend.c_str(),
              a.inputs.size(), a.out.c_str());
  std::printf(bench ? "  device roofline (bench): matmul %s, memory-bound %s\n"
                    : "  device (catalog datasheet): peak %s, memory %s\n",
              units::format_flops_rate(p.peak_flops_per_s).c_str(), units::format_bandwidth(p.memory_bytes_per_s).c_str());
  if (p.comm_busbw_bytes_per_s > 0)
    std::printf("  all-reduce (%s, %s): latency %s, bus bandwidth %s\n", p.comm_algorithm.c_str(), p.comm_link.c_str(),
                units::format_duration(p.comm_latency_s).c_str(), units::format_bandwidth(p.comm_busbw_bytes_per_s).c_str());
  if (p.gemm_efficiency_scale != 1)
    std::printf("  compute: large-GEMM efficiency x %.3f of the catalog's measured GEMM rate (MAMF)\n",
                p.gemm_efficiency_scale);
  if (p.efficiency.empty()) {
    if (p.gemm_efficiency_scale == 1) std::printf("  compute: no measured timelines, the simulator's default efficiencies apply\n");
  } else {
    std::printf("  compute: kernel overhead %s; efficiency (fraction of the roofline):", units::format_duration(p.kernel_overhead_s).c_str());
    for (const auto& [kind, e] : p.efficiency) std::printf(" %s %.3g", sim::calibration_op_kind_name(kind).c_str(), e);
    std::printf("\n  backward pass efficiency:");
    for (const auto& [kind, e] : p.efficiency_backward) std::printf(" %s %.3g", sim::calibration_op_kind_name(kind).c_str(), e);
    std::printf("\n");
  }
  Table t({"group", ">params", ">train pts", ">held-back pts", ">train median err", ">held-back median", ">held-back worst", "note"});
  for (const auto& g : p.fit)
    t.add({g.group, std::to_string(g.parameters), std::to_string(g.train_points), std::to_string(g.heldout_points),
           fmt::format("{:.1f}%", 100 * g.train_median_error), fmt::format("{:.1f}%", 100 * g.heldout_median_error),
           fmt::format("{:.1f}%", 100 * g.heldout_worst_error), g.note});
  std::printf("\nfit error per parameter group (robust least squares on log time, 1 in %d points held back):\n",
              a.heldout_every);
  std::fputs(t.render("  ").c_str(), stdout);
}

calibration::HistoryRun history_entry(const calibration::Profile& p, const CalibrateArgs& a) {
  calibration::HistoryRun hr;
  hr.date = p.date;
  hr.command = "calibrate";
  hr.hardware = p.hardware;
  hr.backend = p.backend;
  hr.profile = a.out;
  return hr;
}

// The measured runs against the fitted profile, into the error history.
void report_runs(const calibration::Profile& p, const CalibrateArgs& a, const std::vector<calibration::MeasuredRun>& runs,
                 calibration::History* history) {
  Table rt({"measured run", ">measured step", ">predicted (profile)", ">error"});
  for (const auto& run : runs) {
    const sim::StepResult s = calibration::predict_on_profile_hardware(run.program, run.plan, p);
    calibration::HistoryRun hr = history_entry(p, a);
    hr.plan = run.timeline.meta.value("plan_file", run.path);
    hr.predicted_step_s = s.step_time_s;
    hr.measured_step_s = run.timeline.step_time_s;
    double peak = 0;
    for (double b : s.peak_memory_bytes) peak = std::max(peak, b);
    hr.predicted_peak_bytes = peak;
    for (double b : run.timeline.peak_memory_bytes) hr.measured_peak_bytes = std::max(hr.measured_peak_bytes, b);
    hr.task_classes = calibration::task_class_totals(&s.timeline, run.timeline);
    if (history) history->record(hr);
    rt.add({run.path, units::format_duration(hr.measured_step_s), units::format_duration(s.step_time_s),
            fmt::format("{:+.1f}%", 100 * *hr.step_error())});
  }
  std::printf("\nstep time of the measured runs with the fitted profile (in-sample):\n");
  std::fputs(rt.render("  ").c_str(), stdout);
}

// The published points before and after the fit, into the error history.
void report_published(const calibration::Profile& p, const CalibrateArgs& a, const calibration::PublishedFit& f,
                      calibration::History* history) {
  Table t({"published point", "setup", ">measured step", ">before", ">after", ">error before", ">error after", "held back"});
  for (const auto& pt : f.points) {
    t.add({pt.id, pt.setup, units::format_duration(pt.measured_s), units::format_duration(pt.before_s),
           units::format_duration(pt.after_s), fmt::format("{:+.1f}%", 100 * (pt.before_s / pt.measured_s - 1)),
           fmt::format("{:+.1f}%", 100 * (pt.after_s / pt.measured_s - 1)), pt.heldout ? "yes" : ""});
    if (!history) continue;
    calibration::HistoryRun hr = history_entry(p, a);
    hr.plan = pt.id;
    hr.predicted_step_s = pt.after_s;
    hr.measured_step_s = pt.measured_s;
    history->record(hr);
  }
  std::printf("\npublished training points on %s (%d simulation passes; %d point(s) on other GPU types left out):\n",
              f.gpu.c_str(), f.simulations, f.other_points);
  std::fputs(t.render("  ").c_str(), stdout);
}

void run(const CalibrateArgs& a) {
  Inputs in = read_inputs(a);
  const hw::GpuSpec* catalog_gpu = nullptr;
  if (!a.hardware.empty()) {
    if (user_catalog().gpus().count(a.hardware) == 0)
      throw Error(fmt::format("--hardware: \"{}\" is not a GPU of the catalog", a.hardware))
          .hint("name the catalog GPU the measurements were taken on (trainplan catalog lists them, e.g. H100-SXM5-80GB)");
    catalog_gpu = &user_catalog().gpu(a.hardware);
  }
  check_inputs(in, catalog_gpu);
  calibration::FitOptions fo;
  fo.heldout_every = a.heldout_every;
  calibration::Profile p =
      in.bench ? calibration::fit_profile(*in.bench, in.bench_name, in.runs, fo) : calibration::catalog_gpu_profile(*catalog_gpu);
  calibration::fit_nccl_tests(p, in.nccl_logs, fo);
  p.inputs = in.files;
  if (catalog_gpu) p.hardware = catalog_gpu->name;
  // Reproducible output (scripts/builtin-profiles.sh): the date the reproducible-builds
  // convention gives, instead of now.
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch && *epoch) {
    char* end = nullptr;
    errno = 0;
    const long long t = std::strtoll(epoch, &end, 10);
    // 253402300799 = 9999-12-31T23:59:59Z, the last second a four-digit year can print.
    if (end == epoch || *end != '\0' || errno == ERANGE || t < 0 || t > 253402300799LL)
      throw Error(fmt::format("SOURCE_DATE_EPOCH=\"{}\" is not a count of seconds from 1970 to 9999", epoch))
          .hint("set it to seconds since 1970 (e.g. $(git log -1 --format=%ct)), or unset it");
    p.date = calibration::utc_time(static_cast<std::time_t>(t));
  }
  std::optional<calibration::PublishedFit> published;
  if (in.published) published = calibration::fit_published(p, *in.published, in.published_name, user_catalog(), fo);
  json::write_file(a.out, calibration::to_json(p));
  print_profile(p, a, in.bench.has_value());
  if (in.runs.empty() && !published) return;
  std::optional<calibration::History> history;
  if (!a.no_history) history.emplace(a.history_db.empty() ? calibration::default_history_path() : a.history_db);
  if (!in.runs.empty()) report_runs(p, a, in.runs, history ? &*history : nullptr);
  if (published) report_published(p, a, *published, history ? &*history : nullptr);
  if (history) std::printf("recorded in the error history (trainplan history)\n");
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Fit a calibration profile from bench output, measured timelines, nccl-tests logs or published runs");
  cmd->add_option("inputs", a->inputs,
                  "trainplan bench output (one), trainplan execute --timeline files, nccl-tests all_reduce_perf logs, "
                  "published results (the ../shared/validation/published-results.json format; with --hardware)")
      ->required();
  cmd->add_option("-o,--output", a->out, "Write the profile JSON here")->required();
  cmd->add_option("--heldout-every", a->heldout_every, "Hold back one measured task in N from the fit and score it")
      ->capture_default_str()
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--hardware", a->hardware,
                  "Key the profile to this catalog GPU (e.g. H100-SXM5-80GB) instead of the device the benchmark names, so "
                  "plan, simulate, report and job apply it to plans on that GPU type");
  cmd->add_option("--history-db", a->history_db, "Error history database (default: $TRAINPLAN_HISTORY_DB, else "
                                                 "$XDG_DATA_HOME/trainplan/history.sqlite)");
  cmd->add_flag("--no-history", a->no_history, "Do not record the measured runs in the error history");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
