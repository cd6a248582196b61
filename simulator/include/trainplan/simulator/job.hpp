// File: trainplan/simulator/job.hpp
//
// The whole-job model on plain numbers: what a user pays for is not a step but a job —
// startup, steps × step time, input stalls, evaluations, checkpoint writes and (spot.hpp)
// interruptions with their restarts. A JobSpec holds every number the model needs; it is
// filled from a plan by job_builder.hpp or by hand (tests, what-if studies).
//
//   sim::JobSpec job;
//   job.steps = 10000;  job.step_time_s = 1.2;  job.nodes = 4;
//   job.startup = {.provisioning_s = 180, .container_pull_s = 75, .framework_init_s = 60};
//   job.checkpoint = {.total_bytes = 4 * 28e9, .write_bytes_per_node = 28e9, ...};
//   job.checkpoint_interval_s = 3600;
//   job.prices = {.on_demand_usd_per_hour = 21.96, .spot_usd_per_hour = 7.0};
//   sim::JobEstimate e = sim::estimate_job(job);    // no interruptions
//   e.total_s; e.cost_usd; e.io_bound;
//
// Time model (no interruptions). The job first provisions instances (unbilled), then runs the
// billed startup (image pull, File-mode data staging, framework init), then `work_s()` seconds
// of work: steps × effective step time plus evaluations. The effective step time is
// max(step_time_s, input time per step): input is prefetched while the step computes, so a
// storage that is too slow stalls the step by the difference. Work is cut into segments of
// `checkpoint_interval_s` seconds; each segment ends with a checkpoint write of `checkpoint_s()`
// (the training pauses while it writes; the last segment may be shorter and also ends with a
// checkpoint that saves the final model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/plan/plan.hpp"

namespace trainplan::sim {

/// How the instances are bought. A blend runs `on_demand_nodes` of the nodes on-demand and the
/// rest on spot.
enum class PurchaseOption { on_demand, spot, blend };
std::string_view purchase_option_name(PurchaseOption p);  // "on-demand", "spot", "blend"

/// What happens before the first step (and, with its own values, after each restart).
struct StartupSpec {
  double provisioning_s = 0;    // request -> instances running; not billed
  double container_pull_s = 0;  // billed
  double data_staging_s = 0;    // File mode: dataset copied to local disk first; billed
  double framework_init_s = 0;  // process launch, NCCL init, model build; billed

  double billed_s() const { return container_pull_s + data_staging_s + framework_init_s; }
  double total_s() const { return provisioning_s + billed_s(); }
};

/// One checkpoint: sizes and the bandwidths that write and read it.
struct CheckpointSpec {
  double total_bytes = 0;            // one checkpoint, all ranks, without duplicates
  double write_bytes_per_node = 0;   // the busiest node's share of the write
  double read_bytes_per_node = 0;    // what the busiest node reads back on restart
  double write_bytes_per_s_per_node = 0;
  double read_bytes_per_s_per_node = 0;
  /// Aggregate limit of the storage (FSx for Lustre throughput); 0 = no aggregate limit (S3).
  double aggregate_bytes_per_s = 0;
  std::string storage;               // "s3", "fsx-lustre", "local-nvme" (for printing)

  /// Seconds to write one checkpoint: the slower of the busiest node and the aggregate limit.
  double write_s() const;
  /// Seconds for a restarted job to read its checkpoint back.
  double read_s(int nodes) const;
};

/// The training input: what the plan consumes against what the storage delivers.
struct DataInputSpec {
  double bytes_per_sample = 0;
  int64_t samples_per_step = 0;            // the plan's global batch
  double bytes_per_s_per_node = 0;         // storage delivery per instance (0 = unlimited)
  double aggregate_bytes_per_s = 0;        // storage delivery for all instances (0 = unlimited)
  /// Samples the instance's CPUs decode per second (JPEG images: the decoding vCPUs x the
  /// per-vCPU rate of lifecycle.json); 0 = nothing to decode (token ids, feature vectors).
  double decode_samples_per_s_per_node = 0;
  std::string source;                      // "s3-fastfile", "fsx-lustre (persistent-2-250)", ...
};

/// The data loader as a bound on one step of `nodes` instances (s): the slowest of reading
/// (bytes of a node's share / per-node delivery; all bytes / aggregate delivery) and decoding
/// (a node's samples / its decode rate). 0 when nothing limits it. The loader runs ahead of
/// the GPUs (prefetching), so a step takes max(compute step, this).
///   e.g. 1024 JPEGs of 110 kB on 2 nodes, 1 GB/s each, 50 vCPUs x 577/s: read 56 ms, decode 17.7 ms -> 56 ms.
double input_time_per_step_s(const DataInputSpec& input, int nodes);

/// Prices per instance-hour for the job's platform, and the billing rule.
struct PriceSpec {
  double on_demand_usd_per_hour = 0;
  double spot_usd_per_hour = 0;
  double minimum_billed_s = 0;  // per instance launch (EC2 Linux: 60 s)
};

struct JobSpec {
  int64_t steps = 0;
  double step_time_s = 0;          // compute step time (simulated or analytical)
  int nodes = 1;
  int gpus_per_node = 1;
  PurchaseOption purchase = PurchaseOption::on_demand;
  int on_demand_nodes = 0;         // blend only: 1 .. nodes-1
  plan::Platform platform = plan::Platform::ec2;

  StartupSpec startup;             // first start
  StartupSpec restart;             // after an interruption (checkpoint read comes on top)
  CheckpointSpec checkpoint;
  /// Seconds of work between checkpoints; 0 = only the final checkpoint.
  double checkpoint_interval_s = 0;
  bool final_checkpoint = true;
  DataInputSpec data_input;
  int64_t eval_every_steps = 0;    // 0 = no evaluation
  double eval_duration_s = 0;
  PriceSpec prices;
  /// Data transfer billed per byte (hw/placement.hpp): the step's traffic between AZs (bytes
  /// leaving one AZ x the inter-AZ price, charged in and out) and the training data read from
  /// another Region (bytes read x that Region's outbound price). Added to the cost as they are.
  double inter_az_usd_per_step = 0;
  double data_transfer_usd = 0;
  /// Interruption rate of one GPU from hardware and host failures (1/s), on any purchase option.
  double hardware_failure_rate_per_gpu_per_s = 0;
  /// Notes printed with every result ("the spot rate is the p3 trace default", ...).
  std::vector<std::string> assumptions;

  int spot_nodes() const;
  int total_gpus() const { return nodes * gpus_per_node; }
  /// Data transfer of an uninterrupted run: steps x inter_az_usd_per_step + data_transfer_usd.
  double transfer_usd() const { return static_cast<double>(steps) * inter_az_usd_per_step + data_transfer_usd; }

  /// Input time per step (s): input_time_per_step_s(data_input, nodes).
  double input_time_per_step_s() const;
  /// max(step_time_s, input_time_per_step_s()).
  double effective_step_time_s() const;
  /// Number of evaluations (one every eval_every_steps steps, none after the last step).
  int64_t evaluations() const;
  /// Seconds of work: steps × effective step time + evaluations × eval_duration_s.
  double work_s() const;
  /// Seconds of work in each checkpoint segment, in order (the last may be shorter).
  std::vector<double> segments_s() const;
  /// Each segment plus the checkpoint that ends it (none after the last without
  /// final_checkpoint): what an interruption can destroy.
  std::vector<double> segments_with_checkpoint_s() const;
  /// Seconds lost to checkpoint writes in an uninterrupted run.
  double checkpoint_total_s() const;
  /// Seconds from an interruption until work resumes, excluding the wait for capacity:
  /// restart.total_s() + checkpoint read.
  double restart_s() const;

  /// Throws Error (pointer-less; the caller knows the file) for inconsistent numbers, with a hint.
  void check() const;
};

/// The job without interruptions.
struct JobEstimate {
  int64_t steps = 0;
  double step_time_s = 0;
  double input_time_per_step_s = 0;
  double effective_step_time_s = 0;
  bool io_bound = false;                // the storage cannot feed the plan
  double required_input_bytes_per_s_per_node = 0;
  double provided_input_bytes_per_s_per_node = 0;  // 0 = unlimited
  double compute_s = 0;                 // steps × step_time_s
  double io_stall_s = 0;                // steps × (effective - step time)
  double eval_s = 0;
  int64_t checkpoints = 0;
  double checkpoint_write_s = 0;        // one checkpoint
  double checkpoint_total_s = 0;
  double startup_s = 0;
  double startup_billed_s = 0;
  double total_s = 0;                   // wall clock from request to the final checkpoint
  double billed_s_per_node = 0;
  double cost_usd = 0;                  // instances + data transfer
  double cost_on_demand_usd = 0;        // the same run bought entirely on-demand
  double inter_az_transfer_usd = 0;     // traffic between AZs (part of both costs)
  double data_transfer_usd = 0;         // training data from another Region (part of both costs)
};

/// The job's time and cost assuming no interruption ever happens. Spot nodes are billed at the
/// spot price; each node is billed max(minimum_billed_s, its billed seconds).
JobEstimate estimate_job(const JobSpec& job);

/// Cost of `seconds` of one instance billed per second with a per-launch minimum.
double billed_cost_usd(double seconds, double usd_per_hour, double minimum_billed_s);

/// JSON of a spec / an estimate (SI units, unit in the key).
json::Json to_json(const JobSpec& job);
json::Json to_json(const JobEstimate& estimate);

}  // namespace trainplan::sim
