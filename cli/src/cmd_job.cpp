// `trainplan job plan.json`: whole-job time and cost — startup, data input, checkpoints, spot
// interruptions (Monte Carlo) and the checkpoint interval. `trainplan job --fit-trace FILE`
// fits the spot model to capacity traces.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "plan_classic.hpp"
#include "table.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/classic_plan.hpp"
#include "trainplan/planner/job.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::cli {
namespace {

// `trainplan job`'s options: the job request plus what only the command does.
struct JobArgs : planner::JobRequest {
  const CLI::App* cmd = nullptr;
  std::string plan_file;
  std::string write_plan;
  bool json = false;
};

// ---- fitting traces --------------------------------------------------------------------------

void print_fits(const std::vector<sim::TraceFit>& fits, const sim::TraceFit* pooled) {
  bool mixed = false;  // the pooled job rate only means something for traces of one size
  for (const auto& f : fits) mixed = mixed || f.instances != fits.front().instances;
  Table t({"trace", ">N", ">hours", ">drops", ">rate/inst-h (95% CI)", ">job rate/h", ">rho", ">unavail.", ">restarts",
           ">mean wait", ">p50 wait", ">p90 wait"});
  auto row = [&](const sim::TraceFit& f, bool pooled_mixed) {
    t.add({f.name, pooled_mixed ? "mixed" : std::to_string(f.instances), fmt::format("{:.0f}", f.duration_h), std::to_string(f.drops),
           fmt::format("{:.3f} ({:.3f}-{:.3f})", f.rate_per_instance_hour, f.rate_ci95_low, f.rate_ci95_high),
           pooled_mixed ? "-" : fmt::format("{:.3f}", f.job_rate_per_hour), f.has_correlation ? fmt::format("{:.2f}", f.correlation) : "-",
           percent(f.unavailable_fraction), std::to_string(f.restart_wait.count),
           units::format_duration(f.restart_wait.mean_s), units::format_duration(f.restart_wait.p50_s),
           units::format_duration(f.restart_wait.p90_s)});
  };
  for (const auto& f : fits) row(f, false);
  if (pooled) row(*pooled, mixed);
  std::fputs(t.render().c_str(), stdout);
  std::printf(
      "rate: instances lost per instance-hour held; job rate: losses of the needed capacity per hour at full capacity;\n"
      "rho: share of an instance's losses that hit every instance at once (0 independent, 1 always together);\n"
      "wait: time from a loss until the needed capacity is back (restart waits; ticks of the trace's gap_seconds).\n");
}

json::Json fits_json(const std::vector<sim::TraceFit>& fits, const sim::TraceFit* pooled) {
  json::Json j;
  json::Json all = json::Json::array();
  for (const auto& f : fits) all.push_back(sim::to_json(f));
  j["traces"] = all;
  if (pooled) j["pooled"] = sim::to_json(*pooled);
  return j;
}

// ---- the job ---------------------------------------------------------------------------------

std::string duration(double s) { return s == 0 ? "0" : units::format_duration(s); }

void print_job(const std::string& file, const plan::Plan& p, const sim::JobSpec& job, const sim::JobEstimate& e,
               const std::string& step_source) {
  std::printf("trainplan job: %s: %s on %d x %s (%d GPUs), %s on %s\n", file.c_str(), p.model.c_str(), job.nodes,
              p.instance_type.c_str(), job.total_gpus(), std::string(sim::purchase_option_name(job.purchase)).c_str(),
              std::string(plan::platform_name(job.platform)).c_str());
  if (job.purchase == sim::PurchaseOption::blend)
    std::printf("blend: %d on-demand + %d spot instances\n", job.on_demand_nodes, job.spot_nodes());
  std::printf("work: %s steps of %s (%s)\n\n", units::format_count(static_cast<double>(job.steps)).c_str(),
              duration(job.step_time_s).c_str(), step_source.c_str());

  std::printf("without interruptions:\n");
  Table t({"part", ">time", "detail"});
  t.add({"startup", duration(e.startup_s),
         fmt::format("provisioning {} (not billed), image pull {}, data {}, init {}", duration(job.startup.provisioning_s),
                     duration(job.startup.container_pull_s), duration(job.startup.data_staging_s),
                     duration(job.startup.framework_init_s))});
  t.add({"compute", duration(e.compute_s), fmt::format("{} steps x {}", job.steps, duration(job.step_time_s))});
  t.add({"input stall", duration(e.io_stall_s),
         e.io_bound ? fmt::format("I/O-BOUND: input takes {} per step", duration(e.input_time_per_step_s)) : "none"});
  t.add({"evaluation", duration(e.eval_s),
         job.eval_every_steps > 0 ? fmt::format("every {} steps, {} each", job.eval_every_steps, duration(job.eval_duration_s))
                                  : "none"});
  t.add({"checkpoints", duration(e.checkpoint_total_s),
         fmt::format("{} x {}{}", e.checkpoints, duration(e.checkpoint_write_s),
                     job.checkpoint_interval_s > 0 ? fmt::format(", every {} of work", duration(job.checkpoint_interval_s))
                                                   : ", final only")});
  t.add({"total", duration(e.total_s), fmt::format("billed {} per instance", duration(e.billed_s_per_node))});
  std::fputs(t.render("  ").c_str(), stdout);

  std::printf("data input (%s): needs %s per instance, storage delivers %s%s\n", job.data_input.source.c_str(),
              units::format_bandwidth(e.required_input_bytes_per_s_per_node).c_str(),
              e.provided_input_bytes_per_s_per_node > 0 ? units::format_bandwidth(e.provided_input_bytes_per_s_per_node).c_str()
                                                        : "unlimited",
              e.io_bound ? " -> I/O-BOUND, the stall is included" : "");
  std::printf("checkpoint (%s): %s in total, %s written per instance in %s, %s read back per instance in %s\n",
              job.checkpoint.storage.c_str(), units::format_bytes(job.checkpoint.total_bytes).c_str(),
              units::format_bytes(job.checkpoint.write_bytes_per_node).c_str(), duration(job.checkpoint.write_s()).c_str(),
              units::format_bytes(job.checkpoint.read_bytes_per_node).c_str(), duration(job.checkpoint.read_s(job.nodes)).c_str());
  std::printf("cost without interruptions: %s (all on-demand: %s; $%.2f on-demand, $%.2f spot per instance-hour)\n",
              units::format_usd(e.cost_usd).c_str(), units::format_usd(e.cost_on_demand_usd).c_str(),
              job.prices.on_demand_usd_per_hour, job.prices.spot_usd_per_hour);
  if (e.inter_az_transfer_usd > 0)
    std::printf("  of which inter-AZ traffic: %s ($%.4f per step)\n", units::format_usd(e.inter_az_transfer_usd).c_str(),
                job.inter_az_usd_per_step);
  if (e.data_transfer_usd > 0)
    std::printf("  of which training data from another region: %s\n", units::format_usd(e.data_transfer_usd).c_str());
}

void print_monte_carlo(const sim::MonteCarloResult& r, const std::optional<sim::ClosedForm>& cf, const JobArgs& a,
                       const sim::MonteCarloOptions& mc) {
  std::printf("\nMonte Carlo (%zu runs, seed %llu):\n", r.runs, static_cast<unsigned long long>(r.seed));
  Table t({"", ">mean", ">95% CI", ">p50", ">p90", ">p99", ">closed form"});
  t.add({"completion time", duration(r.time_s.mean), "+-" + duration(r.time_s.ci95), duration(r.time_s.p50),
         duration(r.time_s.p90), duration(r.time_s.p99), cf ? duration(cf->expected_time_s) : "-"});
  t.add({"cost", units::format_usd(r.cost_usd.mean), "+-" + units::format_usd(r.cost_usd.ci95), units::format_usd(r.cost_usd.p50),
         units::format_usd(r.cost_usd.p90), units::format_usd(r.cost_usd.p99), cf ? units::format_usd(cf->expected_cost_usd) : "-"});
  t.add({"interruptions", fmt::format("{:.2f}", r.interruptions.mean), fmt::format("+-{:.2f}", r.interruptions.ci95),
         fmt::format("{:.0f}", r.interruptions.p50), fmt::format("{:.0f}", r.interruptions.p90),
         fmt::format("{:.0f}", r.interruptions.p99), cf ? fmt::format("{:.2f}", cf->expected_interruptions) : "-"});
  t.add({"lost work", duration(r.lost_work_s.mean), "+-" + duration(r.lost_work_s.ci95), duration(r.lost_work_s.p50),
         duration(r.lost_work_s.p90), duration(r.lost_work_s.p99), "-"});
  t.add({"waiting for capacity", duration(r.wait_s.mean), "+-" + duration(r.wait_s.ci95), duration(r.wait_s.p50),
         duration(r.wait_s.p90), duration(r.wait_s.p99), "-"});
  std::fputs(t.render("  ").c_str(), stdout);
  if (r.p_miss_deadline) std::printf("  P(miss deadline %s) = %.3f\n", a.deadline.c_str(), *r.p_miss_deadline);
  if (r.p_exceed_max_wait) std::printf("  P(exceed max_wait %s) = %.3f\n", a.max_wait.c_str(), *r.p_exceed_max_wait);
  if (r.p_exceed_max_run) std::printf("  P(exceed max_run %s) = %.3f\n", a.max_run.c_str(), *r.p_exceed_max_run);
  if (r.mean_cost_of_failed_usd)
    std::printf("  a run stopped by the limits has billed %s on average when it stops\n",
                units::format_usd(*r.mean_cost_of_failed_usd).c_str());
  (void)mc;
}

void print_study(const sim::IntervalStudy& s) {
  std::printf("\ncheckpoint interval: C = %s per checkpoint, job MTBF M = %s\n", duration(s.checkpoint_s).c_str(),
              duration(s.mtbf_s).c_str());
  std::printf("  Young sqrt(2CM) = %s, Daly = %s%s\n", duration(s.young_s).c_str(), duration(s.daly_s).c_str(),
              s.closed_form_optimum_s ? fmt::format(", optimum of the closed form = {}", duration(*s.closed_form_optimum_s)).c_str() : "");
  Table t({">interval", ">MC mean time", ">95% CI", ">closed form", ">MC mean cost", ""});
  for (size_t k = 0; k < s.rows.size(); ++k) {
    const auto& r = s.rows[k];
    std::string mark = k == s.young_row ? "Young" : "";
    if (k == s.best_row) mark += mark.empty() ? "MC minimum" : ", MC minimum";
    t.add({duration(r.interval_s), duration(r.mc_mean_s), "+-" + duration(r.mc_ci95_s),
           r.closed_form_s ? duration(*r.closed_form_s) : "-", units::format_usd(r.mc_mean_cost_usd), mark});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  std::printf("  Young - MC minimum = %s +- %s (paired, 95%%): %s\n", duration(s.young_minus_best_s).c_str(),
              duration(s.young_minus_best_ci95_s).c_str(),
              s.young_within_ci ? "within the confidence interval" : "NOT within the confidence interval");
}

void run_job(const JobArgs& a) {
  // Fitting only.
  if (a.plan_file.empty()) {
    if (a.fit_traces.empty())
      throw Error("trainplan job needs a plan file (or --fit-trace FILE to fit spot traces)").hint("trainplan job plan.json --step-time 1.2s --tokens 300B");
    auto fits = planner::fit_traces(a.fit_traces, a.needed);
    std::optional<sim::TraceFit> pooled;
    if (fits.size() > 1) pooled = sim::pool_fits(fits);
    if (a.json) {
      std::fputs(json::dump(fits_json(fits, pooled ? &*pooled : nullptr)).c_str(), stdout);
    } else {
      print_fits(fits, pooled ? &*pooled : nullptr);
    }
    return;
  }

  const json::Json doc = json::parse_file(a.plan_file);
  if (planner::is_classic_plan(doc)) {
    run_classic_job(a.plan_file, doc, a, a.cmd, a.json);
    return;
  }
  plan::Plan p = plan::parse_plan(doc, a.plan_file);
  const hw::Catalog& catalog = user_catalog(p, a.plan_file);
  plan::PlanContext ctx = plan::resolve(p, catalog, a.plan_file);
  plan::validate(p, ctx, a.plan_file);
  const planner::JobAnalysis an = planner::analyze_job(p, ctx, a);
  const sim::JobSpec& job = an.job;
  const sim::JobEstimate& e = an.estimate;
  const sim::InterruptionModel& model = an.model;
  const double rate = an.rate_per_s;
  const sim::MonteCarloOptions& mc = an.monte_carlo_options;
  const auto& result = an.monte_carlo;
  const auto& cf = an.closed_form;
  const auto& study = an.interval_study;
  const std::string step_source =
      an.step_time_given ? "given with --step-time" : "analytical estimate (planner); pass --step-time to use a simulated or measured one";

  if (!a.write_plan.empty()) plan::write_plan_file(a.write_plan, planner::plan_with_job(p, an));
  if (a.json) {
    std::fputs(json::dump(planner::to_json(an, a.plan_file)).c_str(), stdout);
    return;
  }

  print_job(a.plan_file, p, job, e, step_source);
  if (an.epochs > 0) std::printf("time per epoch: %s (%g epochs)\n", duration(an.time_per_epoch_s).c_str(), an.epochs);
  std::printf("\ninterruptions: %s; hardware failures %.3g per GPU-hour -> job MTBF %s\n", model.describe().c_str(),
              job.hardware_failure_rate_per_gpu_per_s * 3600.0, rate > 0 ? duration(1.0 / rate).c_str() : "infinite");
  if (result) print_monte_carlo(*result, cf, a, mc);
  else if (mc.deadline_s)
    std::printf("deadline %s: %s (nothing interrupts this job)\n", a.deadline.c_str(), e.total_s > *mc.deadline_s ? "missed" : "met");
  if (study) print_study(*study);
  std::printf("\nchosen checkpoint interval: %s%s\n",
              job.checkpoint_interval_s > 0 ? duration(job.checkpoint_interval_s).c_str() : "none (final checkpoint only)",
              an.interval_mode == "auto" ? " (Young)" : "");
  if (!a.write_plan.empty()) std::printf("plan with the chosen interval written to %s\n", a.write_plan.c_str());
  if (const auto& s = an.sweep) {
    std::printf("\nsweep: %lld jobs, %lld at a time, %lld waves%s\n", static_cast<long long>(s->jobs),
                static_cast<long long>(s->slots), static_cast<long long>(s->waves),
                s->keep_alive_billed_s > 0 ? fmt::format(", warm pools kept alive {}", a.keep_alive).c_str() : " (no warm pool)");
    std::printf("  wall %s, billed %s instance-hours, %s (%lld warm starts, %s instance-hours of keep-alive)\n",
                duration(s->wall_s).c_str(), fmt::format("{:.2f}", s->billed_s / 3600).c_str(), units::format_usd(s->cost_usd).c_str(),
                static_cast<long long>(s->warm_starts), fmt::format("{:.2f}", s->keep_alive_billed_s / 3600).c_str());
    std::printf("  without a warm pool: wall %s, billed %s instance-hours, %s\n", duration(s->cold_wall_s).c_str(),
                fmt::format("{:.2f}", s->cold_billed_s / 3600).c_str(), units::format_usd(s->cold_cost_usd).c_str());
  }
  if (!an.assumptions.empty()) {
    std::printf("\nassumptions:\n");
    for (const auto& s : an.assumptions) std::printf("  - %s\n", s.c_str());
  }
}

}  // namespace

void add_job_command(CLI::App& app) {
  auto a = std::make_shared<JobArgs>();
  CLI::App* cmd = app.add_subcommand(
      "job", "Whole-job time and cost: startup, data input, checkpoints, spot interruptions (Monte Carlo), checkpoint interval");
  cmd->add_option("plan", a->plan_file, "Plan JSON file (omit with --fit-trace to only fit traces)");
  cmd->add_option("--step-time", a->step_time, "Seconds per training step (e.g. 1.2s); default: the planner's analytical estimate");
  cmd->add_option("--calibration", a->calibration,
                  "Calibration profile of the plan's GPU type for the estimated step (default: its profile in the profile "
                  "directory, else uncalibrated)");
  cmd->add_option("--tokens", a->tokens, "Training tokens (e.g. 300B); default: the plan's training_tokens");
  cmd->add_option("--samples", a->samples, "Samples in the dataset (with --epochs)");
  add_real(cmd, "--epochs", a->epochs, planner::kMinEpochs, planner::kMaxEpochs, "Passes over --samples");
  cmd->add_option("--purchase", a->purchase, "on-demand, spot, or blend:K (K instances on-demand, the rest spot)")->capture_default_str();
  add_choice(cmd, "--platform", a->platform, {"ec2", "sagemaker"}, "ec2 or sagemaker");
  cmd->add_flag("--warm-pool", a->warm_pool, "SageMaker managed warm pool for the first start");
  add_int(cmd, "--repeat", a->repeat, 1, 1'000'000, "A sweep of this many such jobs (hyperparameter tuning), on-demand");
  add_int(cmd, "--parallel", a->parallel, 1, 1'000'000, "Jobs of the sweep running at once");
  cmd->add_option("--keep-alive", a->keep_alive, "SageMaker warm pool keep-alive between the sweep's jobs, e.g. 10min (at most 1h)");
  add_choice(cmd, "--data-input", a->data_input, sim::data_source_names(), "s3-file, s3-fastfile, s3-pipe, fsx-lustre or ebs");
  cmd->add_option("--dataset-size", a->dataset_size, "Dataset size for File-mode staging (e.g. 140GB); default: samples x sample size");
  cmd->add_option("--sample-size", a->sample_size, "Bytes per training sample; default: from the model (token ids, one JPEG)");
  add_choice(cmd, "--checkpoint-storage", a->checkpoint_storage, sim::checkpoint_storage_names(), "s3, fsx-lustre or local-nvme");
  cmd->add_option("--fsx-deployment", a->fsx_deployment, "FSx for Lustre deployment type (scratch-2, persistent-2-125 ...)")->capture_default_str();
  cmd->add_option("--fsx-size", a->fsx_size, "FSx for Lustre size (e.g. 4.8TiB); default: 1200GiB");
  cmd->add_option("--ebs-throughput", a->ebs_throughput, "gp3 throughput (e.g. 500MiBps); default: 125MiBps");
  cmd->add_option("--checkpoint-interval", a->checkpoint_interval,
                  "auto (Young sqrt(2 C MTBF)), none, or a duration of work between checkpoints; default: the plan's, else auto");
  add_int(cmd, "--eval-every", a->eval_every, 0, limits::kMaxSteps, "Steps between evaluations (0: none)");
  cmd->add_option("--eval-time", a->eval_time, "Duration of one evaluation");
  add_int(cmd, "--runs", a->runs, 1, limits::kMaxRuns, "Monte Carlo runs");
  add_int(cmd, "--seed", a->seed, 0, std::numeric_limits<int64_t>::max(), "Monte Carlo seed");
  add_int(cmd, "--threads", a->threads, 0, limits::kMaxThreads, "Monte Carlo threads, 0 = all cores (results do not depend on it)");
  cmd->add_option("--deadline", a->deadline, "Report P(completion later than this), e.g. 14d");
  cmd->add_option("--max-wait", a->max_wait, "SageMaker MaxWaitTimeInSeconds (e.g. 20d): report P(exceeded)");
  cmd->add_option("--max-run", a->max_run, "SageMaker MaxRuntimeInSeconds (billed run time)");
  cmd->add_option("--trace", a->trace, "Replay this spot capacity trace (format: simulator/README.md)");
  cmd->add_option("--fit-trace", a->fit_traces, "Fit the spot model to this trace (repeatable; pooled when several)")->allow_extra_args(false);
  add_int(cmd, "--needed", a->needed, 0, limits::kMaxInstances, "Instances the job needs when fitting a trace (0: all the trace requested)");
  cmd->add_flag("--no-hardware-failures", a->no_hardware_failures, "Leave out hardware/host failures (Llama 3 rate)");
  cmd->add_option("--write-plan", a->write_plan, "Write the plan with the chosen checkpoint interval to this file");
  cmd->add_flag("--json", a->json, "Print JSON (SI units) instead of tables");
  a->cmd = cmd;
  cmd->callback([a] { run_job(*a); });
}

}  // namespace trainplan::cli
