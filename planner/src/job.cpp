// The whole job of a plan (`trainplan job`): options -> job spec, interruption model,
// checkpoint interval, closed form, Monte Carlo, interval study; and their JSON.
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/planner/job.hpp"

#include <fmt/format.h>

#include <limits>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/analytical.hpp"

namespace trainplan::planner {
namespace {

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

// The bounds and choices the CLI's flags declare (cli/src/cmd_job.cpp: add_int, add_real,
// add_choice), for requests made without the CLI.
void check_option_values(const JobRequest& a) {
  flag_in_range("--epochs", a.epochs, kMinEpochs, kMaxEpochs);
  flag_choice("--platform", a.platform, {"ec2", "sagemaker"});
  flag_in_range("--repeat", a.repeat, 0, 1'000'000);
  flag_in_range("--parallel", a.parallel, 1, 1'000'000);
  if (a.repeat == 0 && (a.parallel != 1 || !a.keep_alive.empty()))
    throw Error("describes a sweep").at(a.parallel != 1 ? "--parallel" : "--keep-alive").hint("add --repeat N");
  flag_choice("--data-input", a.data_input, sim::data_source_names());
  flag_choice("--checkpoint-storage", a.checkpoint_storage, sim::checkpoint_storage_names());
  flag_in_range("--eval-every", a.eval_every, 0, limits::kMaxSteps);
  flag_in_range("--runs", static_cast<int64_t>(a.runs), 1, limits::kMaxRuns);
  flag_in_range("--seed", static_cast<int64_t>(a.seed), 0, std::numeric_limits<int64_t>::max());
  flag_in_range("--threads", static_cast<int64_t>(a.threads), 0, limits::kMaxThreads);
  flag_in_range("--needed", a.needed, 0, limits::kMaxInstances);
}

// The job options of the request.
sim::JobOptions job_options(const JobRequest& a, const plan::Plan& p, const plan::PlanContext& ctx) {
  sim::JobOptions o;
  SearchRequest calibrated;
  if (!a.step_time.empty()) {
    o.step_time_s = flag_positive_quantity("--step-time", a.step_time, units::Dimension::duration);
  } else {
    load_calibration_profiles(calibrated, a.calibration);
    o.step_time_s = estimate_step(p, ctx, calibrated.analytical_for(*ctx.gpu)).step_time_s;
  }
  // Across AZs the bytes one step sends between AZs come from one simulated step (the estimate
  // does not count bytes); they are billed per step.
  if (p.placement.azs > 1) o.inter_az_bytes_per_step = simulate_candidate(p, ctx, calibrated.analytical_for(*ctx.gpu)).inter_az_bytes;
  if (!a.tokens.empty()) o.tokens = flag_count_of_things("--tokens", a.tokens, "tokens");
  if (!a.samples.empty()) o.samples = flag_count_of_things("--samples", a.samples, "samples");
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
sim::InterruptionModel interruption_model(const JobRequest& a, const sim::JobSpec& job, const plan::PlanContext& ctx) {
  sim::InterruptionModel model = sim::InterruptionModel::none();
  if (job.spot_nodes() > 0) {
    if (!a.trace.empty() && !a.fit_traces.empty())
      throw Error("--trace replays a trace and --fit-trace fits one: give one of them").hint("drop one of the two");
    if (!a.trace.empty()) {
      model = sim::InterruptionModel::replay(sim::read_spot_trace(a.trace));
    } else if (!a.fit_traces.empty()) {
      auto fits = fit_traces(a.fit_traces, a.needed);
      model = sim::InterruptionModel::from_fit(fits.size() > 1 ? sim::pool_fits(fits) : fits.front());
    } else {
      model = sim::default_interruption_model(*ctx.instance);
    }
  } else if (!a.trace.empty() || !a.fit_traces.empty()) {
    throw Error("spot traces apply to spot purchases").hint("add --purchase spot or --purchase blend:K");
  }
  return model;
}

// The checkpoint interval of the request (auto, plan, none or a duration); returns its mode.
std::string choose_interval(const JobRequest& a, const plan::Plan& p, double rate, sim::JobSpec& job) {
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
    return "given";
  }
  return interval;
}

}  // namespace

std::vector<sim::TraceFit> fit_traces(const std::vector<std::string>& paths, int64_t needed) {
  const int n = static_cast<int>(flag_in_range("--needed", needed, 0, limits::kMaxInstances));
  std::vector<sim::TraceFit> fits;
  for (const auto& path : paths) fits.push_back(sim::fit_spot_trace(sim::read_spot_trace(path), n));
  return fits;
}

// `repeat` jobs like this one (uninterrupted, on-demand), cold or reusing a warm pool.
SweepResult job_sweep(const JobRequest& a, const plan::Plan& p, const plan::PlanContext& ctx, const sim::JobOptions& o,
                      const sim::JobSpec& job) {
  if (job.purchase != sim::PurchaseOption::on_demand)
    throw Error("a sweep is costed on-demand (uninterrupted jobs)").at("--repeat").hint("drop --purchase, or --repeat");
  const double keep_alive_s = a.keep_alive.empty() ? 0.0 : flag_quantity("--keep-alive", a.keep_alive, units::Dimension::duration);
  if (keep_alive_s > 0 && job.platform != plan::Platform::sagemaker)
    throw Error("warm pools are a SageMaker feature").at("--keep-alive").hint("add --platform sagemaker");
  sim::JobOptions cold_options = o, warm_options = o;
  cold_options.warm_pool = false;
  warm_options.warm_pool = job.platform == plan::Platform::sagemaker;
  const sim::JobEstimate cold = sim::estimate_job(sim::build_job_spec(p, ctx, cold_options));
  const sim::JobEstimate warm = sim::estimate_job(sim::build_job_spec(p, ctx, warm_options));
  const double nodes = job.nodes;
  return sweep_jobs({cold.total_s, cold.billed_s_per_node * nodes}, {warm.total_s, warm.billed_s_per_node * nodes}, job.nodes,
                    job.prices.on_demand_usd_per_hour, {.repeat = a.repeat, .parallel = a.parallel, .keep_alive_s = keep_alive_s});
}

JobAnalysis analyze_job(const plan::Plan& p, const plan::PlanContext& ctx, const JobRequest& a) {
  check_option_values(a);
  JobAnalysis out;
  out.step_time_given = !a.step_time.empty();
  const sim::JobOptions o = job_options(a, p, ctx);
  out.tokens = o.tokens;
  sim::JobSpec job = sim::build_job_spec(p, ctx, o);
  sim::InterruptionModel model = interruption_model(a, job, ctx);
  const double rate = sim::job_interruption_rate_per_s(job, model);
  out.interval_mode = choose_interval(a, p, rate, job);

  out.estimate = sim::estimate_job(job);
  if (a.repeat > 0) out.sweep = job_sweep(a, p, ctx, o, job);
  if (o.samples > 0) {
    out.epochs = o.epochs;
    out.time_per_epoch_s = (out.estimate.compute_s + out.estimate.io_stall_s) / o.epochs;
  }
  sim::MonteCarloOptions& mc = out.monte_carlo_options;
  mc.runs = a.runs;
  mc.seed = a.seed;
  mc.threads = a.threads;
  mc.deadline_s = optional_duration(a.deadline, "--deadline");
  mc.max_wait_s = optional_duration(a.max_wait, "--max-wait");
  mc.max_run_s = optional_duration(a.max_run, "--max-run");
  if ((mc.max_wait_s || mc.max_run_s) && job.platform != plan::Platform::sagemaker)
    throw Error("--max-wait and --max-run are SageMaker managed spot limits").hint("add --platform sagemaker");

  if (rate > 0) {
    out.monte_carlo = sim::run_monte_carlo(job, model, mc);
    if (model.kind() != sim::InterruptionModel::Kind::trace) out.closed_form = sim::closed_form(job, model);
    if (job.checkpoint.write_s() > 0) {
      sim::MonteCarloOptions sm = mc;
      sm.deadline_s.reset();
      sm.max_wait_s.reset();
      sm.max_run_s.reset();
      out.interval_study = sim::study_checkpoint_interval(job, model, sm);
    }
  }

  out.assumptions = job.assumptions;
  for (const auto& s : model.assumptions()) out.assumptions.push_back(s);
  if (!out.step_time_given) {
    SearchRequest calibrated;
    load_calibration_profiles(calibrated, a.calibration);
    out.assumptions.push_back("step time from the analytical estimate, not the simulator; " +
                              calibration_label(calibrated, *ctx.gpu));
  }
  out.rate_per_s = rate;
  out.job = std::move(job);
  out.model = std::move(model);
  return out;
}

plan::Plan plan_with_job(const plan::Plan& p, const JobAnalysis& a) {
  const auto& job = a.job;
  const auto& e = a.estimate;
  plan::Plan out = p;
  out.checkpoint_interval_s = job.checkpoint_interval_s;
  out.purchase = job.spot_nodes() > 0 ? plan::Purchase::spot : plan::Purchase::on_demand;
  out.platform = job.platform;
  if (a.tokens > 0) out.training_tokens = a.tokens;
  if (!out.predicted.is_object()) out.predicted = json::Json::object();
  json::Json jj;
  jj["step_time_s"] = job.step_time_s;
  jj["steps"] = job.steps;
  jj["total_s_no_interruptions"] = e.total_s;
  jj["cost_usd_no_interruptions"] = e.cost_usd;
  jj["checkpoint_interval_s"] = job.checkpoint_interval_s;
  if (a.monte_carlo) {
    jj["mean_time_s"] = a.monte_carlo->time_s.mean;
    jj["p90_time_s"] = a.monte_carlo->time_s.p90;
    jj["mean_cost_usd"] = a.monte_carlo->cost_usd.mean;
  }
  out.predicted["job"] = jj;
  return out;
}

json::Json to_json(const JobAnalysis& a, const std::string& plan_name) {
  json::Json j;
  j["plan"] = plan_name;
  j["step_time_source"] = a.step_time_given ? "given" : "analytical";
  j["job"] = sim::to_json(a.job);
  j["estimate"] = sim::to_json(a.estimate);
  j["interruption_model"] = a.model.describe();
  j["job_interruption_rate_per_s"] = a.rate_per_s;
  if (a.sweep) j["sweep"] = to_json(*a.sweep);
  if (a.epochs > 0) j["time_per_epoch_s"] = a.time_per_epoch_s;
  if (const auto& cf = a.closed_form) {
    j["closed_form"] = {{"rate_per_s", cf->rate_per_s},
                        {"mean_restart_s", cf->mean_restart_s},
                        {"expected_time_s", cf->expected_time_s},
                        {"expected_interruptions", cf->expected_interruptions},
                        {"expected_cost_usd", cf->expected_cost_usd}};
  }
  if (a.monte_carlo) j["monte_carlo"] = sim::to_json(*a.monte_carlo);
  if (a.interval_study) j["checkpoint_interval"] = sim::to_json(*a.interval_study);
  j["chosen_checkpoint_interval_s"] = a.job.checkpoint_interval_s;
  j["assumptions"] = a.assumptions;
  return j;
}

}  // namespace trainplan::planner
