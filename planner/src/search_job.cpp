// The job and simulate stages' per-candidate work: whole-job expectations on a purchase
// option and one simulated step.
#include "search_internal.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/planner/calibrated.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::planner::detail {

std::optional<JobOutcome> job_outcome(const SearchRequest& req, const plan::PlanContext& ctx, const Candidate& c,
                                      plan::Purchase purchase, size_t monte_carlo_runs) {
  const bool spot = purchase == plan::Purchase::spot;
  if (spot ? !spot_price(*ctx.instance, req.platform) : !on_demand_price(*ctx.instance, req.platform)) return std::nullopt;
  sim::JobOptions jo;
  jo.step_time_s = c.step_time_s();
  jo.tokens = req.tokens;
  jo.purchase = spot ? sim::PurchaseOption::spot : sim::PurchaseOption::on_demand;
  jo.platform = req.platform;
  if (c.simulated) jo.inter_az_bytes_per_step = c.simulated->inter_az_bytes;
  if (req.samples_per_epoch > 0) jo.epochs = req.epochs;  // epochs of the data read (the steps come from tokens)
  sim::JobSpec job;
  try {
    job = sim::build_job_spec(c.plan, ctx, jo);
  } catch (const Error&) {
    return std::nullopt;  // a combination the job model refuses (no price, storage): no whole-job figure
  }
  const sim::InterruptionModel model = spot ? sim::default_interruption_model(*ctx.instance) : sim::InterruptionModel::none();
  // Checkpoint at Young's interval for the job's interruption rate (hardware failures too).
  const double rate = sim::job_interruption_rate_per_s(job, model);
  const double write_s = job.checkpoint.write_s();
  if (rate > 0 && write_s > 0) job.checkpoint_interval_s = sim::young_interval_s(write_s, 1.0 / rate);
  const sim::ClosedForm cf = sim::closed_form(job, model);
  JobOutcome out;
  out.purchase = purchase;
  out.expected_time_s = cf.expected_time_s;
  out.expected_cost_usd = cf.expected_cost_usd;
  out.expected_interruptions = cf.expected_interruptions;
  out.checkpoint_interval_s = job.checkpoint_interval_s;
  if (monte_carlo_runs > 0 && rate > 0) {
    sim::MonteCarloOptions mc;
    mc.runs = monte_carlo_runs;
    mc.seed = req.seed;
    mc.threads = 1;
    const sim::MonteCarloResult r = sim::run_monte_carlo(job, model, mc);
    out.time_s = r.time_s;
    out.cost_usd = r.cost_usd;
  }
  return out;
}

}  // namespace trainplan::planner::detail

namespace trainplan::planner {

double transfer_usd(const plan::PlanContext& ctx, const Candidate& c, double tokens, double samples_per_epoch, double epochs) {
  double usd = 0;
  if (c.simulated && c.simulated->inter_az_bytes > 0)
    usd += c.steps * hw::inter_az_transfer_usd(c.simulated->inter_az_bytes, ctx.cluster.placement_facts());
  if (!c.plan.data_region.empty() && !ctx.instance->prices.region.empty()) {
    const bool by_epoch = samples_per_epoch > 0;
    const double epoch_bytes = (by_epoch ? samples_per_epoch : tokens / ctx.graph.tokens_per_sample()) * sim::default_sample_bytes(ctx);
    if (auto d = sim::data_transfer(c.plan, ctx, epoch_bytes, by_epoch || c.plan.dataset_bytes > 0 ? std::max(1.0, epochs) : 1.0))
      usd += d->usd();
  }
  return usd;
}

SimulatedStep simulate_candidate(const plan::Plan& p, const plan::PlanContext& ctx, const AnalyticalOptions& options) {
  sim::PlanSimOptions o;
  o.sim = with_calibration(o.sim, options);
  o.granularity = plan::Granularity::layer;
  o.fidelity = sim::Fidelity::symmetric;
  o.memory_events = false;
  o.sim.record_timeline = false;
  const sim::PlanSimResult r = sim::simulate_plan(p, ctx, o);
  SimulatedStep out;
  out.step_time_s = r.step.step_time_s;
  out.breakdown = r.step.breakdown;
  out.tasks_simulated = r.step.stats.tasks_simulated;
  out.wall_s = r.step.stats.wall_s;
  out.inter_az_bytes = r.step.inter_az_bytes;
  return out;
}

}  // namespace trainplan::planner
