// The whole-job model without interruptions (job.hpp).
#include "trainplan/simulator/job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::sim {

std::string_view purchase_option_name(PurchaseOption p) {
  switch (p) {
    case PurchaseOption::on_demand: return "on-demand";
    case PurchaseOption::spot: return "spot";
    case PurchaseOption::blend: return "blend";
  }
  return "?";
}

double CheckpointSpec::write_s() const {
  if (total_bytes <= 0) return 0;
  double per_node = write_bytes_per_s_per_node > 0 ? write_bytes_per_node / write_bytes_per_s_per_node : 0;
  double aggregate = aggregate_bytes_per_s > 0 ? total_bytes / aggregate_bytes_per_s : 0;
  return std::max(per_node, aggregate);
}

double CheckpointSpec::read_s(int nodes) const {
  if (read_bytes_per_node <= 0) return 0;
  double per_node = read_bytes_per_s_per_node > 0 ? read_bytes_per_node / read_bytes_per_s_per_node : 0;
  double aggregate = aggregate_bytes_per_s > 0 ? read_bytes_per_node * nodes / aggregate_bytes_per_s : 0;
  return std::max(per_node, aggregate);
}

int JobSpec::spot_nodes() const {
  switch (purchase) {
    case PurchaseOption::on_demand: return 0;
    case PurchaseOption::spot: return nodes;
    case PurchaseOption::blend: return nodes - on_demand_nodes;
  }
  return 0;
}

double input_time_per_step_s(const DataInputSpec& in, int nodes) {
  const auto samples = static_cast<double>(in.samples_per_step);
  const double step_bytes = in.bytes_per_sample * samples;
  const double n = std::max(1, nodes);
  const double per_node = in.bytes_per_s_per_node > 0 ? step_bytes / n / in.bytes_per_s_per_node : 0;
  const double aggregate = in.aggregate_bytes_per_s > 0 ? step_bytes / in.aggregate_bytes_per_s : 0;
  const double decode = in.decode_samples_per_s_per_node > 0 ? samples / n / in.decode_samples_per_s_per_node : 0;
  return std::max({per_node, aggregate, decode});
}

double JobSpec::input_time_per_step_s() const { return sim::input_time_per_step_s(data_input, nodes); }

double JobSpec::effective_step_time_s() const { return std::max(step_time_s, input_time_per_step_s()); }

int64_t JobSpec::evaluations() const {
  if (eval_every_steps <= 0 || steps <= 1) return 0;
  return (steps - 1) / eval_every_steps;
}

double JobSpec::work_s() const {
  return static_cast<double>(steps) * effective_step_time_s() + static_cast<double>(evaluations()) * eval_duration_s;
}

std::vector<double> JobSpec::segments_s() const {
  const double work = work_s();
  std::vector<double> segments;
  if (checkpoint_interval_s <= 0 || checkpoint_interval_s >= work) {
    segments.push_back(work);
    return segments;
  }
  const double full = std::floor(work / checkpoint_interval_s);
  if (!(full <= static_cast<double>(limits::kMaxCheckpoints)))
    throw Error(fmt::format("a checkpoint every {:.3g} s of {:.3g} s of work is more than {} checkpoints", checkpoint_interval_s,
                            work, limits::kMaxCheckpoints))
        .hint("use a longer checkpoint interval (--checkpoint-interval, or checkpoint.interval_s in the plan)");
  segments.assign(static_cast<size_t>(full), checkpoint_interval_s);
  const double rest = work - full * checkpoint_interval_s;
  // A remainder below a millionth of an interval is rounding, not a segment.
  if (rest > 1e-6 * checkpoint_interval_s) segments.push_back(rest);
  return segments;
}

std::vector<double> JobSpec::segments_with_checkpoint_s() const {
  auto segments = segments_s();
  const double c = checkpoint.write_s();
  for (size_t i = 0; i < segments.size(); ++i)
    if (i + 1 < segments.size() || final_checkpoint) segments[i] += c;
  return segments;
}

double JobSpec::checkpoint_total_s() const {
  const auto n = static_cast<double>(segments_s().size());
  const double writes = final_checkpoint ? n : n - 1;
  return writes * checkpoint.write_s();
}

double JobSpec::restart_s() const { return restart.total_s() + checkpoint.read_s(nodes); }

void JobSpec::check() const {
  auto bad = [](const std::string& what, const std::string& hint) { return Error(what).hint(hint); };
  if (steps <= 0) throw bad(fmt::format("the job has {} steps", steps), "give the work: tokens, or samples and epochs");
  if (!(step_time_s > 0) || !std::isfinite(step_time_s))
    throw bad(fmt::format("step time must be positive, got {}", step_time_s), "pass --step-time, e.g. 1.2s");
  // Bounds the work (and so the checkpoint segments and Monte Carlo events) of one job.
  if (!(work_s() <= limits::kMaxJobSeconds))
    throw bad(fmt::format("the job's work would take {:.3g} s ({} steps x {:.3g} s), beyond the {:g} s (about 30 years) trainplan models",
                          work_s(), steps, step_time_s, limits::kMaxJobSeconds),
              "check --step-time and the amount of work (--tokens, --samples, --epochs)");
  if (nodes < 1) throw bad(fmt::format("nodes must be >= 1, got {}", nodes), "the plan's cluster count");
  if (gpus_per_node < 1) throw bad("gpus_per_node must be >= 1", "the instance type's GPU count");
  if (purchase == PurchaseOption::blend && (on_demand_nodes < 1 || on_demand_nodes >= nodes))
    throw bad(fmt::format("a blend needs 1..{} on-demand nodes of {}, got {}", nodes - 1, nodes, on_demand_nodes),
              nodes == 1 ? "a one-node job cannot be blended: use on-demand or spot"
                         : "use --purchase blend:K with 0 < K < nodes");
  if (purchase == PurchaseOption::blend && platform == plan::Platform::sagemaker)
    throw bad("a SageMaker training job runs all its instances either on-demand or on managed spot",
              "use --platform ec2 for a blend, or --purchase spot / on-demand");
  if (checkpoint_interval_s < 0) throw bad("checkpoint interval must be >= 0", "0 means only the final checkpoint");
  if (eval_every_steps < 0 || eval_duration_s < 0) throw bad("evaluation settings must be >= 0", "");
  if (hardware_failure_rate_per_gpu_per_s < 0) throw bad("hardware failure rate must be >= 0", "");
  if (prices.on_demand_usd_per_hour < 0 || prices.spot_usd_per_hour < 0) throw bad("prices must be >= 0", "");
  if (spot_nodes() > 0 && !(prices.spot_usd_per_hour > 0))
    throw bad("no spot price for this instance type", "add \"spot\" for it in a price file (--prices FILE)");
  if (spot_nodes() < nodes && !(prices.on_demand_usd_per_hour > 0))
    throw bad("no on-demand price for this instance type and platform",
              "add \"ec2_on_demand\" / \"sagemaker_on_demand\" for it in a price file (--prices FILE)");
}

double billed_cost_usd(double seconds, double usd_per_hour, double minimum_billed_s) {
  return std::max(seconds, minimum_billed_s) * usd_per_hour / 3600.0;
}

JobEstimate estimate_job(const JobSpec& job) {
  job.check();
  JobEstimate e;
  e.steps = job.steps;
  e.step_time_s = job.step_time_s;
  e.input_time_per_step_s = job.input_time_per_step_s();
  e.effective_step_time_s = job.effective_step_time_s();
  e.io_bound = e.input_time_per_step_s > job.step_time_s;
  const double step_bytes = job.data_input.bytes_per_sample * static_cast<double>(job.data_input.samples_per_step);
  e.required_input_bytes_per_s_per_node = step_bytes / job.nodes / job.step_time_s;
  e.provided_input_bytes_per_s_per_node = job.data_input.bytes_per_s_per_node;
  if (job.data_input.aggregate_bytes_per_s > 0) {
    const double share = job.data_input.aggregate_bytes_per_s / job.nodes;
    e.provided_input_bytes_per_s_per_node =
        e.provided_input_bytes_per_s_per_node > 0 ? std::min(e.provided_input_bytes_per_s_per_node, share) : share;
  }
  e.compute_s = static_cast<double>(job.steps) * job.step_time_s;
  e.io_stall_s = static_cast<double>(job.steps) * (e.effective_step_time_s - job.step_time_s);
  e.eval_s = static_cast<double>(job.evaluations()) * job.eval_duration_s;
  const auto segments = static_cast<int64_t>(job.segments_s().size());
  e.checkpoints = job.final_checkpoint ? segments : segments - 1;
  e.checkpoint_write_s = job.checkpoint.write_s();
  e.checkpoint_total_s = job.checkpoint_total_s();
  e.startup_s = job.startup.total_s();
  e.startup_billed_s = job.startup.billed_s();
  e.total_s = e.startup_s + job.work_s() + e.checkpoint_total_s;
  e.billed_s_per_node = e.total_s - job.startup.provisioning_s;
  const int spot = job.spot_nodes();
  const int on_demand = job.nodes - spot;
  const double min_s = job.prices.minimum_billed_s;
  e.cost_usd = spot * billed_cost_usd(e.billed_s_per_node, job.prices.spot_usd_per_hour, min_s) +
               on_demand * billed_cost_usd(e.billed_s_per_node, job.prices.on_demand_usd_per_hour, min_s);
  e.cost_on_demand_usd = job.nodes * billed_cost_usd(e.billed_s_per_node, job.prices.on_demand_usd_per_hour, min_s);
  e.inter_az_transfer_usd = static_cast<double>(job.steps) * job.inter_az_usd_per_step;
  e.data_transfer_usd = job.data_transfer_usd;
  e.cost_usd += e.inter_az_transfer_usd + e.data_transfer_usd;
  e.cost_on_demand_usd += e.inter_az_transfer_usd + e.data_transfer_usd;
  return e;
}

json::Json to_json(const JobSpec& job) {
  json::Json j;
  j["steps"] = job.steps;
  j["step_time_s"] = job.step_time_s;
  j["effective_step_time_s"] = job.effective_step_time_s();
  j["nodes"] = job.nodes;
  j["gpus_per_node"] = job.gpus_per_node;
  j["purchase"] = purchase_option_name(job.purchase);
  if (job.purchase == PurchaseOption::blend) j["on_demand_nodes"] = job.on_demand_nodes;
  j["platform"] = plan::platform_name(job.platform);
  auto startup = [](const StartupSpec& s) {
    json::Json o;
    o["provisioning_s"] = s.provisioning_s;
    o["container_pull_s"] = s.container_pull_s;
    o["data_staging_s"] = s.data_staging_s;
    o["framework_init_s"] = s.framework_init_s;
    return o;
  };
  j["startup"] = startup(job.startup);
  j["restart"] = startup(job.restart);
  json::Json c;
  c["storage"] = job.checkpoint.storage;
  c["total_bytes"] = job.checkpoint.total_bytes;
  c["write_bytes_per_node"] = job.checkpoint.write_bytes_per_node;
  c["read_bytes_per_node"] = job.checkpoint.read_bytes_per_node;
  c["write_bytes_per_s_per_node"] = job.checkpoint.write_bytes_per_s_per_node;
  c["read_bytes_per_s_per_node"] = job.checkpoint.read_bytes_per_s_per_node;
  c["aggregate_bytes_per_s"] = job.checkpoint.aggregate_bytes_per_s;
  c["write_s"] = job.checkpoint.write_s();
  c["read_s"] = job.checkpoint.read_s(job.nodes);
  c["interval_s"] = job.checkpoint_interval_s;
  j["checkpoint"] = c;
  json::Json d;
  d["source"] = job.data_input.source;
  d["bytes_per_sample"] = job.data_input.bytes_per_sample;
  d["samples_per_step"] = job.data_input.samples_per_step;
  d["bytes_per_s_per_node"] = job.data_input.bytes_per_s_per_node;
  d["aggregate_bytes_per_s"] = job.data_input.aggregate_bytes_per_s;
  j["data_input"] = d;
  j["eval_every_steps"] = job.eval_every_steps;
  j["eval_duration_s"] = job.eval_duration_s;
  json::Json p;
  p["on_demand_usd_per_hour"] = job.prices.on_demand_usd_per_hour;
  p["spot_usd_per_hour"] = job.prices.spot_usd_per_hour;
  p["minimum_billed_s"] = job.prices.minimum_billed_s;
  if (job.inter_az_usd_per_step > 0) p["inter_az_usd_per_step"] = job.inter_az_usd_per_step;  // only when billed
  if (job.data_transfer_usd > 0) p["data_transfer_usd"] = job.data_transfer_usd;
  j["prices"] = p;
  j["hardware_failure_rate_per_gpu_per_s"] = job.hardware_failure_rate_per_gpu_per_s;
  j["assumptions"] = job.assumptions;
  return j;
}

json::Json to_json(const JobEstimate& e) {
  json::Json j;
  j["steps"] = e.steps;
  j["step_time_s"] = e.step_time_s;
  j["input_time_per_step_s"] = e.input_time_per_step_s;
  j["effective_step_time_s"] = e.effective_step_time_s;
  j["io_bound"] = e.io_bound;
  j["required_input_bytes_per_s_per_node"] = e.required_input_bytes_per_s_per_node;
  j["provided_input_bytes_per_s_per_node"] = e.provided_input_bytes_per_s_per_node;
  j["startup_s"] = e.startup_s;
  j["startup_billed_s"] = e.startup_billed_s;
  j["compute_s"] = e.compute_s;
  j["io_stall_s"] = e.io_stall_s;
  j["eval_s"] = e.eval_s;
  j["checkpoints"] = e.checkpoints;
  j["checkpoint_write_s"] = e.checkpoint_write_s;
  j["checkpoint_total_s"] = e.checkpoint_total_s;
  j["total_s"] = e.total_s;
  j["billed_s_per_node"] = e.billed_s_per_node;
  j["cost_usd"] = e.cost_usd;
  j["cost_on_demand_usd"] = e.cost_on_demand_usd;
  if (e.inter_az_transfer_usd > 0) j["inter_az_transfer_usd"] = e.inter_az_transfer_usd;  // only when billed
  if (e.data_transfer_usd > 0) j["data_transfer_usd"] = e.data_transfer_usd;
  return j;
}

}  // namespace trainplan::sim
