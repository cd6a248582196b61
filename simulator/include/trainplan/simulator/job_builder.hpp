// File: trainplan/simulator/job_builder.hpp
//
// Fills a JobSpec from a plan: steps from the work (tokens, or samples × epochs), checkpoint
// sizes from the plan's memory model (weights + optimizer state per rank), storage and network
// bandwidths and prices from the hardware catalog, startup times from lifecycle.json.
// S3 throughput per instance = min(network bandwidth × s3_network_efficiency,
// s3_max_instance_bandwidth), for reads and writes alike.
//
//   plan::Plan p = plan::read_plan_file("plan.json");
//   plan::PlanContext ctx = plan::resolve(p, catalog, "plan.json");
//   sim::JobOptions o;
//   o.step_time_s = 1.2;  o.tokens = 300e9;
//   o.purchase = sim::PurchaseOption::spot;  o.platform = plan::Platform::sagemaker;
//   sim::JobSpec job = sim::build_job_spec(p, ctx, o);
//   sim::InterruptionModel m = sim::default_interruption_model(*ctx.instance);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/plan/plan.hpp"
#include "trainplan/simulator/job.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::sim {

/// Where the training data is read from.
enum class DataSource { s3_file, s3_fastfile, s3_pipe, fsx_lustre, ebs };
std::string_view data_source_name(DataSource s);  // "s3-file", "s3-fastfile", "s3-pipe", "fsx-lustre", "ebs"
std::vector<std::string> data_source_names();
DataSource parse_data_source(const std::string& name);  // throws Error listing the names

/// Where checkpoints are written.
enum class CheckpointStorage { s3, fsx_lustre, local_nvme };
std::string_view checkpoint_storage_name(CheckpointStorage s);  // "s3", "fsx-lustre", "local-nvme"
std::vector<std::string> checkpoint_storage_names();
CheckpointStorage parse_checkpoint_storage(const std::string& name);

struct JobOptions {
  double step_time_s = 0;      // required (the analytical estimate will fill it later)
  // Work: tokens, or samples × epochs; both 0 = the plan's training_tokens.
  double tokens = 0;
  double samples = 0;
  double epochs = 1;

  PurchaseOption purchase = PurchaseOption::on_demand;
  int on_demand_nodes = 0;     // blend
  plan::Platform platform = plan::Platform::ec2;
  bool warm_pool = false;      // SageMaker managed warm pool for the first start

  DataSource data_source = DataSource::s3_fastfile;
  double dataset_bytes = 0;    // 0 = samples × bytes per sample (File mode staging)
  double sample_bytes = 0;     // 0 = from the model (token ids, images)
  CheckpointStorage checkpoint_storage = CheckpointStorage::s3;
  std::string fsx_deployment = "persistent-2-250";
  double fsx_bytes = 0;        // 0 = the minimum (1200 GiB)
  double ebs_bytes_per_s = 0;  // 0 = gp3 baseline

  double checkpoint_interval_s = 0;  // 0 = final checkpoint only (choose with spot.hpp)
  /// Bytes one step sends between AZs (sim::StepResult::inter_az_bytes); 0 in one AZ. Each is
  /// billed leaving one AZ and entering the other (the catalog's inter-AZ price, twice).
  double inter_az_bytes_per_step = 0;
  int64_t eval_every_steps = 0;
  double eval_duration_s = 0;
  /// < 0: the lifecycle default (Llama 3 measurement); 0 switches hardware failures off.
  double hardware_failure_rate_per_gpu_per_s = -1;
};

/// Steps of the job: ceil(tokens / (global_batch × tokens per sample)) or ceil(samples × epochs /
/// global_batch). Tokens per sample: the sequence length of gpt, llama and bert; 1 for image
/// models and MLPs (ModelGraph::tokens_per_sample), whose "tokens" are samples. Throws Error when no work is given anywhere.
int64_t job_steps(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& options);

/// Bytes of one training sample: token ids (2 or 4 bytes each by vocabulary) for transformers,
/// one JPEG for vision models, the input width × 4 bytes for MLPs.
double default_sample_bytes(const plan::PlanContext& ctx);

/// What feeds the plan's steps under `options` (data_source, fsx_deployment, fsx_bytes,
/// ebs_bytes_per_s, sample_bytes): bytes per sample, the storage's delivery per instance and in
/// all, and for vision models the JPEG decode rate of an instance, (vCPUs - 1 per GPU) x
/// lifecycle.json image_decode_rate_per_vcpu. With input_time_per_step_s (job.hpp) it is the
/// data loader's bound on a step; the search applies it to every candidate.
DataInputSpec data_input_spec(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& options);

/// Checkpoint sizes from the memory model (weights + optimizer state per rank).
/// total: sum over pipeline stages of tp × (weights, × dp under ZeRO-3) + (optimizer, × dp
/// under ZeRO >= 1); written evenly by all nodes (as PyTorch Distributed Checkpoint does);
/// read back per node: gpus_per_node × the largest rank's weights + optimizer.
struct CheckpointSizes {
  double total_bytes = 0;
  double write_bytes_per_node = 0;
  double read_bytes_per_node = 0;
};
CheckpointSizes checkpoint_sizes(const plan::Plan& plan, const plan::PlanContext& ctx);

/// What the plan's placement says, for the assumptions: "all 4 instances in one AZ, cluster
/// placement group, EFA" or "8 instances over 2 AZs in contiguous blocks (4 + 4), a cluster
/// placement group each; EFA inside an AZ, TCP over ENA between AZs (...); groups across AZs:
/// dp" (the parallel groups, of tp, cp, dp and pp, with members in two AZs).
std::string placement_assumption(const plan::Plan& plan, const plan::PlanContext& ctx);

/// The training data read from another Region than the job's (the instance's price region):
/// bytes = the plan's data.bytes, else `dataset_bytes` (one epoch), times `epochs`; priced
/// out of the data's Region (hw::inter_region_usd_per_gb). nullopt when data.region is unset or
/// is the job's. Throws Error when the instance has no region or the data's has no price.
struct DataTransfer {
  double bytes = 0;
  double usd_per_gb = 0;
  double usd() const { return bytes / 1e9 * usd_per_gb; }
};
std::optional<DataTransfer> data_transfer(const plan::Plan& plan, const plan::PlanContext& ctx, double dataset_bytes, double epochs);

/// The JobSpec of `plan` (resolved in `ctx`) under `options`. Errors name the missing price or
/// impossible combination (a blend on SageMaker, local-NVMe checkpoints on spot) with a hint.
JobSpec build_job_spec(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& options);

/// The instance type's spot model: its Spot Advisor bucket if the catalog has one, else the
/// default fitted to the p3 traces (with an assumption saying so).
InterruptionModel default_interruption_model(const hw::InstanceType& instance);

}  // namespace trainplan::sim
