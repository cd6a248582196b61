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
#include "table.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::cli {
namespace {

struct JobArgs {
  std::string plan_file;
  std::string step_time;
  std::string tokens;
  std::string samples;
  double epochs = 1;
  std::string purchase = "on-demand";
  std::string platform = "ec2";
  bool warm_pool = false;
  std::string data_input = "s3-fastfile";
  std::string dataset_size;
  std::string sample_size;
  std::string checkpoint_storage = "s3";
  std::string fsx_deployment = "persistent-2-250";
  std::string fsx_size;
  std::string ebs_throughput;
  std::string checkpoint_interval;  // auto | none | DURATION; empty = the plan's, else auto
  int64_t eval_every = 0;
  std::string eval_time;
  size_t runs = 1000;
  uint64_t seed = 1;
  size_t threads = 0;
  std::string deadline;
  std::string max_wait;
  std::string max_run;
  std::string trace;
  std::vector<std::string> fit_traces;
  int needed = 0;
  bool no_hardware_failures = false;
  std::string write_plan;
  bool json = false;
};

std::optional<double> optional_duration(const std::string& text, const char* option) {
  if (text.empty()) return std::nullopt;
  return flag_positive_quantity(option, text, units::Dimension::duration);
}

void parse_purchase(const std::string& text, sim::JobOptions& o) {
  if (text == "on-demand") {
    o.purchase = sim::PurchaseOption::on_demand;
  } else if (text == "spot") {
    o.purchase = sim::PurchaseOption::spot;
  } else if (text.rfind("blend:", 0) == 0) {
    o.purchase = sim::PurchaseOption::blend;
    o.on_demand_nodes = static_cast<int>(at_flag("--purchase", [&] { return checked::parse_int(text.substr(6), 1, limits::kMaxInstances); }));
  } else {
    throw Error(fmt::format("unknown value \"{}\"", text.size() > 40 ? text.substr(0, 37) + "..." : text))
        .at("--purchase")
        .hint("use one of: on-demand, spot, blend:K (K instances on-demand, the rest spot)");
  }
}

// ---- fitting traces --------------------------------------------------------------------------

std::vector<sim::TraceFit> fit_traces(const JobArgs& a) {
  std::vector<sim::TraceFit> fits;
  for (const auto& path : a.fit_traces) fits.push_back(sim::fit_spot_trace(sim::read_spot_trace(path), a.needed));
  return fits;
}

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

// trainplan job --fit-trace without a plan: the fits (and their pool) only.
void run_fit_only(const JobArgs& a) {
  if (a.fit_traces.empty())
    throw Error("trainplan job needs a plan file (or --fit-trace FILE to fit spot traces)").hint("trainplan job plan.json --step-time 1.2s --tokens 300B");
  auto fits = fit_traces(a);
  std::optional<sim::TraceFit> pooled;
  if (fits.size() > 1) pooled = sim::pool_fits(fits);
  if (a.json) {
    std::fputs(json::dump(fits_json(fits, pooled ? &*pooled : nullptr)).c_str(), stdout);
  } else {
    print_fits(fits, pooled ? &*pooled : nullptr);
  }
}

// The job options of the flags; `step_source` says where the step time came from.
sim::JobOptions job_options(const JobArgs& a, const plan::Plan& p, const plan::PlanContext& ctx, std::string& step_source) {
  sim::JobOptions o;
  step_source = "given with --step-time";
  if (!a.step_time.empty()) {
    o.step_time_s = flag_positive_quantity("--step-time", a.step_time, units::Dimension::duration);
  } else {
    o.step_time_s = planner::estimate_step(p, ctx).step_time_s;
    step_source = "analytical estimate (planner); pass --step-time to use a simulated or measured one";
  }
  if (!a.tokens.empty()) o.tokens = flag_positive_quantity("--tokens", a.tokens, units::Dimension::count);
  if (!a.samples.empty()) o.samples = flag_positive_quantity("--samples", a.samples, units::Dimension::count);
  o.epochs = a.epochs;
  parse_purchase(a.purchase, o);
  o.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  o.warm_pool = a.warm_pool;
  o.data_source = at_flag("--data-input", [&] { return sim::parse_data_source(a.data_input); });
  if (!a.dataset_size.empty()) o.dataset_bytes = flag_positive_quantity("--dataset-size", a.dataset_size, units::Dimension::bytes);
  if (!a.sample_size.empty()) o.sample_bytes = flag_positive_quantity("--sample-size", a.sample_size, units::Dimension::bytes);
  o.checkpoint_storage = at_flag("--checkpoint-storage", [&] { return sim::parse_checkpoint_storage(a.checkpoint_storage); });
  o.fsx_deployment = a.fsx_deployment;
  if (!a.fsx_size.empty()) o.fsx_bytes = flag_positive_quantity("--fsx-size", a.fsx_size, units::Dimension::bytes);
  if (!a.ebs_throughput.empty()) o.ebs_bytes_per_s = flag_positive_quantity("--ebs-throughput", a.ebs_throughput, units::Dimension::bandwidth);
  o.eval_every_steps = a.eval_every;
  if (!a.eval_time.empty()) o.eval_duration_s = flag_quantity("--eval-time", a.eval_time, units::Dimension::duration);
  if (a.no_hardware_failures) o.hardware_failure_rate_per_gpu_per_s = 0;
  return o;
}

// The interruption model: none on demand; else a replayed trace, a fitted one, or the
// instance's default.
sim::InterruptionModel interruption_model(const JobArgs& a, const sim::JobSpec& job, const plan::PlanContext& ctx) {
  sim::InterruptionModel model = sim::InterruptionModel::none();
  if (job.spot_nodes() > 0) {
    if (!a.trace.empty() && !a.fit_traces.empty())
      throw Error("--trace replays a trace and --fit-trace fits one: give one of them").hint("drop one of the two");
    if (!a.trace.empty()) {
      model = sim::InterruptionModel::replay(sim::read_spot_trace(a.trace));
    } else if (!a.fit_traces.empty()) {
      auto fits = fit_traces(a);
      model = sim::InterruptionModel::from_fit(fits.size() > 1 ? sim::pool_fits(fits) : fits.front());
    } else {
      model = sim::default_interruption_model(*ctx.instance);
    }
  } else if (!a.trace.empty() || !a.fit_traces.empty()) {
    throw Error("spot traces apply to spot purchases").hint("add --purchase spot or --purchase blend:K");
  }
  return model;
}

void run_job(const JobArgs& a) {
  // Fitting only.
  if (a.plan_file.empty()) {
    run_fit_only(a);
    return;
  }

  plan::Plan p = plan::read_plan_file(a.plan_file);
  const hw::Catalog& catalog = user_catalog();
  plan::PlanContext ctx = plan::resolve(p, catalog, a.plan_file);
  plan::validate(p, ctx, a.plan_file);

  std::string step_source;
  const sim::JobOptions o = job_options(a, p, ctx, step_source);
  sim::JobSpec job = sim::build_job_spec(p, ctx, o);

  // The interruption model.
  sim::InterruptionModel model = interruption_model(a, job, ctx);
  const double rate = sim::job_interruption_rate_per_s(job, model);

  // The checkpoint interval.
  std::string interval = a.checkpoint_interval;
  if (interval.empty()) interval = p.checkpoint_interval_s > 0 ? "plan" : "auto";
  if (interval == "auto") {
    job.checkpoint_interval_s = rate > 0 && job.checkpoint.write_s() > 0 ? sim::young_interval_s(job.checkpoint.write_s(), 1.0 / rate) : 0;
  } else if (interval == "plan") {
    job.checkpoint_interval_s = p.checkpoint_interval_s;
  } else if (interval == "none") {
    job.checkpoint_interval_s = 0;
  } else {
    job.checkpoint_interval_s = flag_positive_quantity("--checkpoint-interval", interval, units::Dimension::duration);
  }

  const sim::JobEstimate e = sim::estimate_job(job);
  sim::MonteCarloOptions mc;
  mc.runs = a.runs;
  mc.seed = a.seed;
  mc.threads = a.threads;
  mc.deadline_s = optional_duration(a.deadline, "--deadline");
  mc.max_wait_s = optional_duration(a.max_wait, "--max-wait");
  mc.max_run_s = optional_duration(a.max_run, "--max-run");
  if ((mc.max_wait_s || mc.max_run_s) && job.platform != plan::Platform::sagemaker)
    throw Error("--max-wait and --max-run are SageMaker managed spot limits").hint("add --platform sagemaker");

  std::optional<sim::MonteCarloResult> result;
  std::optional<sim::ClosedForm> cf;
  std::optional<sim::IntervalStudy> study;
  if (rate > 0) {
    result = sim::run_monte_carlo(job, model, mc);
    if (model.kind() != sim::InterruptionModel::Kind::trace) cf = sim::closed_form(job, model);
    if (job.checkpoint.write_s() > 0) {
      sim::MonteCarloOptions sm = mc;
      sm.deadline_s.reset();
      sm.max_wait_s.reset();
      sm.max_run_s.reset();
      study = sim::study_checkpoint_interval(job, model, sm);
    }
  }

  std::vector<std::string> assumptions = job.assumptions;
  for (const auto& s : model.assumptions()) assumptions.push_back(s);
  if (a.step_time.empty()) assumptions.push_back("step time from the analytical estimate, not the simulator");

  if (!a.write_plan.empty()) {
    plan::Plan out = p;
    out.checkpoint_interval_s = job.checkpoint_interval_s;
    out.purchase = job.spot_nodes() > 0 ? plan::Purchase::spot : plan::Purchase::on_demand;
    out.platform = job.platform;
    if (o.tokens > 0) out.training_tokens = o.tokens;
    if (!out.predicted.is_object()) out.predicted = json::Json::object();
    json::Json jj;
    jj["step_time_s"] = job.step_time_s;
    jj["steps"] = job.steps;
    jj["total_s_no_interruptions"] = e.total_s;
    jj["cost_usd_no_interruptions"] = e.cost_usd;
    jj["checkpoint_interval_s"] = job.checkpoint_interval_s;
    if (result) {
      jj["mean_time_s"] = result->time_s.mean;
      jj["p90_time_s"] = result->time_s.p90;
      jj["mean_cost_usd"] = result->cost_usd.mean;
    }
    out.predicted["job"] = jj;
    plan::write_plan_file(a.write_plan, out);
  }

  if (a.json) {
    json::Json j;
    j["plan"] = a.plan_file;
    j["step_time_source"] = a.step_time.empty() ? "analytical" : "given";
    j["job"] = sim::to_json(job);
    j["estimate"] = sim::to_json(e);
    j["interruption_model"] = model.describe();
    j["job_interruption_rate_per_s"] = rate;
    if (cf) {
      j["closed_form"] = {{"rate_per_s", cf->rate_per_s},
                          {"mean_restart_s", cf->mean_restart_s},
                          {"expected_time_s", cf->expected_time_s},
                          {"expected_interruptions", cf->expected_interruptions},
                          {"expected_cost_usd", cf->expected_cost_usd}};
    }
    if (result) j["monte_carlo"] = sim::to_json(*result);
    if (study) j["checkpoint_interval"] = sim::to_json(*study);
    j["chosen_checkpoint_interval_s"] = job.checkpoint_interval_s;
    j["assumptions"] = assumptions;
    std::fputs(json::dump(j).c_str(), stdout);
    return;
  }

  print_job(a.plan_file, p, job, e, step_source);
  std::printf("\ninterruptions: %s; hardware failures %.3g per GPU-hour -> job MTBF %s\n", model.describe().c_str(),
              job.hardware_failure_rate_per_gpu_per_s * 3600.0, rate > 0 ? duration(1.0 / rate).c_str() : "infinite");
  if (result) print_monte_carlo(*result, cf, a, mc);
  else if (mc.deadline_s)
    std::printf("deadline %s: %s (nothing interrupts this job)\n", a.deadline.c_str(), e.total_s > *mc.deadline_s ? "missed" : "met");
  if (study) print_study(*study);
  std::printf("\nchosen checkpoint interval: %s%s\n",
              job.checkpoint_interval_s > 0 ? duration(job.checkpoint_interval_s).c_str() : "none (final checkpoint only)",
              interval == "auto" ? " (Young)" : "");
  if (!a.write_plan.empty()) std::printf("plan with the chosen interval written to %s\n", a.write_plan.c_str());
  if (!assumptions.empty()) {
    std::printf("\nassumptions:\n");
    for (const auto& s : assumptions) std::printf("  - %s\n", s.c_str());
  }
}

}  // namespace

void add_job_command(CLI::App& app) {
  auto a = std::make_shared<JobArgs>();
  CLI::App* cmd = app.add_subcommand(
      "job", "Whole-job time and cost: startup, data input, checkpoints, spot interruptions (Monte Carlo), checkpoint interval");
  cmd->add_option("plan", a->plan_file, "Plan JSON file (omit with --fit-trace to only fit traces)");
  cmd->add_option("--step-time", a->step_time, "Seconds per training step (e.g. 1.2s); default: the planner's analytical estimate");
  cmd->add_option("--tokens", a->tokens, "Training tokens (e.g. 300B); default: the plan's training_tokens");
  cmd->add_option("--samples", a->samples, "Samples in the dataset (with --epochs)");
  add_real(cmd, "--epochs", a->epochs, 1e-6, 1e9, "Passes over --samples");
  cmd->add_option("--purchase", a->purchase, "on-demand, spot, or blend:K (K instances on-demand, the rest spot)")->capture_default_str();
  add_choice(cmd, "--platform", a->platform, {"ec2", "sagemaker"}, "ec2 or sagemaker");
  cmd->add_flag("--warm-pool", a->warm_pool, "SageMaker managed warm pool for the first start");
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
  cmd->callback([a] { run_job(*a); });
}

}  // namespace trainplan::cli
