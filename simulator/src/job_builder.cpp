// JobSpec from a plan, the catalog and lifecycle.json (job_builder.hpp).
#include "trainplan/simulator/job_builder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

namespace trainplan::sim {
namespace {

constexpr double kTiB = 1099511627776.0;

template <typename E>
E parse_choice(const std::string& name, const std::vector<std::string>& names, std::string_view what) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  throw Error(fmt::format("unknown {} \"{}\"", what, name)).hint(suggestion(name, names));
}

// What the instance's own disks deliver: local NVMe when it has some, else its EBS volume.
struct LocalDisk {
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
  std::string name;
};

double ebs_bandwidth(const hw::InstanceType& inst, const JobOptions& o, const LifecycleFacts& f) {
  double bw = o.ebs_bytes_per_s > 0 ? o.ebs_bytes_per_s : f.ebs_gp3_baseline_bytes_per_s;
  if (o.ebs_bytes_per_s > f.ebs_gp3_max_bytes_per_s)
    throw Error(fmt::format("gp3 throughput {} exceeds the gp3 maximum {}", units::format_bandwidth(o.ebs_bytes_per_s),
                            units::format_bandwidth(f.ebs_gp3_max_bytes_per_s)))
        .hint("lifecycle.json ebs_gp3_max_bandwidth");
  if (inst.storage.ebs_bandwidth_bytes_per_s > 0) bw = std::min(bw, inst.storage.ebs_bandwidth_bytes_per_s);
  return bw;
}

LocalDisk local_disk(const hw::InstanceType& inst, const JobOptions& o, const LifecycleFacts& f) {
  if (inst.storage.local_nvme_bytes > 0 && inst.storage.nvme_read_bandwidth_bytes_per_s > 0)
    return {inst.storage.nvme_read_bandwidth_bytes_per_s,
            inst.storage.nvme_write_bandwidth_bytes_per_s > 0 ? inst.storage.nvme_write_bandwidth_bytes_per_s
                                                               : inst.storage.nvme_read_bandwidth_bytes_per_s,
            "local NVMe"};
  const double ebs = ebs_bandwidth(inst, o, f);
  return {ebs, ebs, "EBS gp3"};
}

// Vision models read JPEGs that the data loader decodes on the CPU; sequence models read token
// ids and MLPs feature vectors, which need no decoding.
bool decodes_images(const models::ModelSpec& m) { return m.family == models::Family::vit || m.family == models::Family::resnet; }

// vCPUs left to decoding: the instance's, less those that drive the GPUs.
double decoding_vcpus(const hw::InstanceType& inst, const LifecycleFacts& f) {
  return static_cast<double>(inst.vcpus) - f.loader_reserved_vcpus_per_gpu * static_cast<double>(inst.gpu_count);
}

double s3_bandwidth_per_node(const hw::InstanceType& inst, const LifecycleFacts& f) {
  if (!(inst.network.bandwidth_bytes_per_s > 0))
    throw Error(fmt::format("instance type {} has no network bandwidth in the catalog", inst.name))
        .at(inst.file)
        .hint("S3 throughput is derived from it; add network.bandwidth");
  return std::min(inst.network.bandwidth_bytes_per_s * f.s3_network_efficiency, f.s3_max_instance_bytes_per_s);
}

double fsx_bytes(const JobOptions& o, const LifecycleFacts& f) {
  if (o.fsx_bytes > 0 && o.fsx_bytes < f.fsx_min_bytes)
    throw Error(fmt::format("FSx for Lustre size {} is below the minimum {}", units::format_bytes(o.fsx_bytes),
                            units::format_bytes(f.fsx_min_bytes)))
        .hint("FSx for Lustre file systems start at 1200 GiB (lifecycle.json fsx_min_size)");
  return o.fsx_bytes > 0 ? o.fsx_bytes : f.fsx_min_bytes;
}

}  // namespace

std::string_view data_source_name(DataSource s) {
  switch (s) {
    case DataSource::s3_file: return "s3-file";
    case DataSource::s3_fastfile: return "s3-fastfile";
    case DataSource::s3_pipe: return "s3-pipe";
    case DataSource::fsx_lustre: return "fsx-lustre";
    case DataSource::ebs: return "ebs";
  }
  return "?";
}

std::vector<std::string> data_source_names() { return {"s3-file", "s3-fastfile", "s3-pipe", "fsx-lustre", "ebs"}; }

DataSource parse_data_source(const std::string& name) {
  return parse_choice<DataSource>(name, data_source_names(), "data source");
}

std::string_view checkpoint_storage_name(CheckpointStorage s) {
  switch (s) {
    case CheckpointStorage::s3: return "s3";
    case CheckpointStorage::fsx_lustre: return "fsx-lustre";
    case CheckpointStorage::local_nvme: return "local-nvme";
  }
  return "?";
}

std::vector<std::string> checkpoint_storage_names() { return {"s3", "fsx-lustre", "local-nvme"}; }

CheckpointStorage parse_checkpoint_storage(const std::string& name) {
  return parse_choice<CheckpointStorage>(name, checkpoint_storage_names(), "checkpoint storage");
}

int64_t job_steps(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& o) {
  if (plan.global_batch <= 0) throw Error("the plan has no global batch").hint("set batch.global_batch in the plan");
  const auto batch = static_cast<double>(plan.global_batch);
  if (o.tokens > 0 && o.samples > 0)
    throw Error("give the work as tokens or as samples × epochs, not both").hint("drop --tokens or --samples");
  if (o.samples > 0) {
    if (!(o.epochs > 0)) throw Error(fmt::format("epochs must be positive, got {}", o.epochs)).hint("e.g. --epochs 3");
    return checked::to_int(o.samples * o.epochs / batch - 1e-9, 1, limits::kMaxSteps, "the number of steps (samples x epochs / batch)", true,
                           "--samples, --epochs and the plan's batch.global_batch");
  }
  const double tokens = o.tokens > 0 ? o.tokens : plan.training_tokens;
  if (tokens > 0) {
    // A sample of an image model or MLP counts as one token (models/README.md), so its work in
    // "tokens" is in samples: the search and the reports pass it that way.
    return checked::to_int(tokens / (batch * ctx.graph.tokens_per_sample()) - 1e-9, 1, limits::kMaxSteps,
                           "the number of steps (tokens / (batch x sequence length))", true,
                           o.tokens > 0 ? "--tokens and the plan's batch.global_batch"
                                        : "the plan's training_tokens (or give --tokens) and batch.global_batch");
  }
  throw Error("the job's work is unknown").hint("pass --tokens N, or --samples N --epochs E, or set training_tokens in the plan");
}

double default_sample_bytes(const plan::PlanContext& ctx) {
  const auto& f = LifecycleFacts::builtin();
  const auto& m = ctx.model_spec;
  switch (m.family) {
    case models::Family::gpt:
    case models::Family::llama:
    case models::Family::bert: {
      const double token = m.vocab > 0 && m.vocab <= 65535 ? f.token_bytes_small_vocab : f.token_bytes_large_vocab;
      return token * static_cast<double>(ctx.seq_len > 0 ? ctx.seq_len : m.seq_len);
    }
    case models::Family::vit:
    case models::Family::resnet: return f.image_sample_bytes;
    case models::Family::mlp: return m.mlp_widths.empty() ? 4.0 : 4.0 * static_cast<double>(m.mlp_widths.front());
  }
  return 0;
}

CheckpointSizes checkpoint_sizes(const plan::Plan& plan, const plan::PlanContext& ctx) {
  CheckpointSizes c;
  const auto stages = plan::memory_per_stage(plan, ctx);
  double largest_rank = 0;
  for (const auto& m : stages) {
    // ZeRO shards over the dp * cp ranks holding the same parameters: the model's copy is theirs together.
    const double weights = m.weights_bytes * (plan.zero_stage >= 3 ? plan.dp_cp() : 1);
    const double optimizer = m.optimizer_bytes * (plan.zero_stage >= 1 ? plan.dp_cp() : 1);
    c.total_bytes += plan.tp * (weights + optimizer);
    largest_rank = std::max(largest_rank, m.weights_bytes + m.optimizer_bytes);
  }
  const int nodes = std::max(1, plan.instance_count);
  c.write_bytes_per_node = c.total_bytes / nodes;
  const int gpus = ctx.instance ? ctx.instance->gpu_count : 1;
  c.read_bytes_per_node = std::max(1, gpus) * largest_rank;
  return c;
}

DataInputSpec data_input_spec(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& o) {
  TP_ASSERT(ctx.instance != nullptr);
  const hw::InstanceType& inst = *ctx.instance;
  const auto& f = LifecycleFacts::builtin();
  DataInputSpec in;
  in.bytes_per_sample = o.sample_bytes > 0 ? o.sample_bytes : default_sample_bytes(ctx);
  in.samples_per_step = plan.global_batch;
  if (decodes_images(ctx.model_spec) && inst.vcpus > 0)  // an instance without a vCPU count: no decode bound
    in.decode_samples_per_s_per_node = std::max(1.0, decoding_vcpus(inst, f)) * f.image_decode_per_vcpu_per_s;
  switch (o.data_source) {
    case DataSource::s3_file: {
      const LocalDisk disk = local_disk(inst, o, f);
      in.bytes_per_s_per_node = disk.read_bytes_per_s;
      in.source = fmt::format("s3-file (staged to {})", disk.name);
      break;
    }
    case DataSource::s3_fastfile:
    case DataSource::s3_pipe:
      in.bytes_per_s_per_node = s3_bandwidth_per_node(inst, f);
      in.source = std::string(data_source_name(o.data_source));
      break;
    case DataSource::fsx_lustre: {
      const auto& d = f.fsx(o.fsx_deployment);
      in.bytes_per_s_per_node = inst.network.bandwidth_bytes_per_s;
      in.aggregate_bytes_per_s = fsx_bytes(o, f) / kTiB * d.read_bytes_per_s_per_tib;
      in.source = fmt::format("fsx-lustre ({}, {})", d.name, units::format_bytes(fsx_bytes(o, f)));
      break;
    }
    case DataSource::ebs:
      in.bytes_per_s_per_node = ebs_bandwidth(inst, o, f);
      in.source = "ebs (gp3, dataset pre-staged on the volume)";
      break;
  }
  return in;
}

namespace {

// The parallel groups (tp, cp, dp, pp) with members in two AZs. Rank r runs on GPU r; ranks
// are numbered ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank (StepProgram::rank_of).
std::vector<std::string> groups_across_azs(const plan::Plan& p, const hw::Cluster& c, bool tied) {
  std::vector<std::string> out;
  auto az = [&](int pp_rank, int dp_rank, int cp_rank, int tp_rank) {
    return c.az_of_gpu(((pp_rank * p.dp + dp_rank) * p.cp + cp_rank) * p.tp + tp_rank);
  };
  // Whether some group along `axis` (0 tp, 1 cp, 2 dp, 3 pp: that index varies, the others fixed) spans AZs.
  auto crosses = [&](int axis) {
    for (int s = 0; s < p.pp; ++s)
      for (int d = 0; d < p.dp; ++d)
        for (int k = 0; k < p.cp; ++k)
          for (int t = 0; t < p.tp; ++t) {
            const int here = az(s, d, k, t);
            const int first = axis == 0 ? az(s, d, k, 0) : axis == 1 ? az(s, d, 0, t) : axis == 2 ? az(s, 0, k, t) : az(0, d, k, t);
            if (here != first) return true;
          }
    return false;
  };
  const char* names[] = {"tp", "cp", "dp", "pp"};
  for (int axis = 0; axis < 3; ++axis)
    if (crosses(axis)) out.push_back(names[axis]);
  // The pipeline sends, and with tied embeddings the first and last stages' all-reduce of the
  // embedding's gradients (Megatron's embedding group: rank i of each).
  if (crosses(3)) out.push_back(tied ? "pp (pipeline sends and the tied embedding's gradient all-reduce)" : "pp");
  return out;
}

}  // namespace

std::string placement_assumption(const plan::Plan& plan, const plan::PlanContext& ctx) {
  const hw::Cluster& c = ctx.cluster;
  const int n = c.num_nodes(), azs = c.placement().azs;
  if (azs <= 1)
    return fmt::format("all {} instance{} in one AZ, cluster placement group{}", n, n == 1 ? "" : "s",
                       ctx.instance->network.efa ? ", EFA" : "");
  std::vector<std::string> blocks(static_cast<size_t>(azs));
  std::vector<int> sizes(static_cast<size_t>(azs), 0);
  for (int k = 0; k < n; ++k) ++sizes[static_cast<size_t>(c.az_of_node(k))];
  for (int z = 0; z < azs; ++z) blocks[static_cast<size_t>(z)] = std::to_string(sizes[static_cast<size_t>(z)]);
  const hw::PlacementFacts& f = c.placement_facts();
  const auto across = groups_across_azs(plan, c, ctx.model_spec.tied_embeddings && plan.pp > 1);
  return fmt::format("{} instances over {} AZs in contiguous blocks ({}), a cluster placement group each; {} inside an AZ, "
                     "TCP between AZs (NCCL sockets, {} flows of {:.3g} Gbit/s, at most the instance's {:.3g} Gbit/s; {} one-way); "
                     "groups across AZs: {}",
                     n, azs, join(blocks, " + "), ctx.instance->network.efa ? "EFA" : "the instance network",
                     f.nccl_socket_flows, f.single_flow_bandwidth_bytes_per_s * 8 / 1e9,
                     ctx.instance->network.bandwidth_bytes_per_s * 8 / 1e9, units::format_duration(f.inter_az_latency_s),
                     across.empty() ? std::string("none") : join(across, ", "));
}

std::optional<DataTransfer> data_transfer(const plan::Plan& plan, const plan::PlanContext& ctx, double dataset_bytes, double epochs) {
  const hw::InstanceType& inst = *ctx.instance;
  if (plan.data_region.empty() || plan.data_region == inst.prices.region) return std::nullopt;
  if (inst.prices.region.empty())
    throw Error(fmt::format("{} has no price region to compare the data's region {} with", inst.name, plan.data_region))
        .hint("give the instance a region in a price file (--prices), or drop data.region");
  DataTransfer d;
  d.usd_per_gb = hw::inter_region_usd_per_gb(ctx.cluster.placement_facts(), plan.data_region, inst.prices.region);
  d.bytes = (plan.dataset_bytes > 0 ? plan.dataset_bytes : dataset_bytes) * epochs;
  return d;
}

namespace {

// The placement's assumption, the inter-AZ traffic's price per step and the training data's
// transfer from another Region (`dataset`: bytes of one epoch).
void add_placement_costs(JobSpec& job, const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& o, double dataset) {
  job.assumptions.push_back(placement_assumption(plan, ctx));
  const hw::PlacementFacts& pf = ctx.cluster.placement_facts();
  if (o.inter_az_bytes_per_step > 0) {
    job.inter_az_usd_per_step = hw::inter_az_transfer_usd(o.inter_az_bytes_per_step, pf);
    job.assumptions.push_back(fmt::format("{:.3g} GB per step cross AZ boundaries, billed ${}/GB leaving one AZ and again entering the other",
                                          o.inter_az_bytes_per_step / 1e9, pf.inter_az_usd_per_gb));
  }
  // Bytes read from the data's Region: one epoch's bytes (data.size, --dataset-bytes, or the
  // samples) x epochs; without a size the work's tokens, every one read once.
  const bool per_epoch = plan.dataset_bytes > 0 || o.dataset_bytes > 0 || o.samples > 0;
  const double epochs = per_epoch ? o.epochs : 1.0;
  if (auto d = data_transfer(plan, ctx, dataset, epochs)) {
    job.data_transfer_usd = d->usd();
    job.assumptions.push_back(fmt::format("training data in {}: {:.3g} GB read once per epoch ({:g} epoch{}) at ${}/GB out of {} "
                                          "(S3 reads in the job's own region are free)",
                                          plan.data_region, d->bytes / 1e9, epochs, epochs == 1.0 ? "" : "s", d->usd_per_gb,
                                          plan.data_region));
  }
}

}  // namespace

JobSpec build_job_spec(const plan::Plan& plan, const plan::PlanContext& ctx, const JobOptions& o) {
  TP_ASSERT(ctx.instance != nullptr);
  const hw::InstanceType& inst = *ctx.instance;
  const auto& f = LifecycleFacts::builtin();
  JobSpec job;
  job.steps = job_steps(plan, ctx, o);
  job.step_time_s = o.step_time_s;
  job.nodes = plan.instance_count;
  job.gpus_per_node = inst.gpu_count;
  job.purchase = o.purchase;
  job.on_demand_nodes = o.on_demand_nodes;
  job.platform = o.platform;
  const bool sagemaker = o.platform == plan::Platform::sagemaker;
  const bool spot = o.purchase != PurchaseOption::on_demand;

  // Storage bandwidths.
  const double s3 = s3_bandwidth_per_node(inst, f);
  const LocalDisk disk = local_disk(inst, o, f);
  const double network = inst.network.bandwidth_bytes_per_s;
  const double sample_bytes = o.sample_bytes > 0 ? o.sample_bytes : default_sample_bytes(ctx);
  double dataset = o.dataset_bytes;
  if (dataset <= 0) dataset = o.samples > 0 ? o.samples * sample_bytes : (o.tokens > 0 ? o.tokens : plan.training_tokens) * sample_bytes / std::max<int64_t>(1, ctx.seq_len);

  // Startup and restart.
  StartupSpec cold;
  cold.provisioning_s = sagemaker ? f.sagemaker_provisioning_s : f.ec2_provisioning_s;
  cold.container_pull_s = f.container_image_bytes / f.container_pull_bytes_per_s;
  cold.framework_init_s = f.framework_init_s;
  job.data_input = data_input_spec(plan, ctx, o);
  switch (o.data_source) {
    case DataSource::s3_file:
      // The whole dataset is copied to every instance (SageMaker FullyReplicated) before training.
      cold.data_staging_s = dataset / std::min(s3, disk.write_bytes_per_s);
      break;
    case DataSource::s3_fastfile:
    case DataSource::s3_pipe: cold.data_staging_s = f.fastfile_mount_s; break;
    case DataSource::fsx_lustre:
      job.assumptions.push_back("FSx for Lustre holds the dataset before the job starts (lazy loading from S3 not modelled)");
      break;
    case DataSource::ebs: break;
  }
  if (job.data_input.decode_samples_per_s_per_node > 0)
    job.assumptions.push_back(fmt::format("the data loader decodes {:.0f} images/s per instance ({} vCPUs at {:.0f}/s; decode only, "
                                          "lifecycle.json image_decode_rate_per_vcpu)",
                                          job.data_input.decode_samples_per_s_per_node, decoding_vcpus(inst, f),
                                          f.image_decode_per_vcpu_per_s));
  job.restart = cold;
  job.startup = cold;
  if (o.warm_pool) {
    if (!sagemaker)
      throw Error("warm pools are a SageMaker feature").hint("use --platform sagemaker, or drop --warm-pool");
    job.startup.provisioning_s = f.sagemaker_warm_pool_start_s;
    job.startup.container_pull_s = 0;
    job.assumptions.push_back(fmt::format(
        "SageMaker warm pool: the first start takes {} (estimate) and skips the image pull; restarts after an "
        "interruption provision cold",
        units::format_duration(f.sagemaker_warm_pool_start_s)));
  }

  // Checkpoints.
  const CheckpointSizes sizes = checkpoint_sizes(plan, ctx);
  job.checkpoint.total_bytes = sizes.total_bytes;
  job.checkpoint.write_bytes_per_node = sizes.write_bytes_per_node;
  job.checkpoint.read_bytes_per_node = sizes.read_bytes_per_node;
  job.checkpoint.storage = std::string(checkpoint_storage_name(o.checkpoint_storage));
  switch (o.checkpoint_storage) {
    case CheckpointStorage::s3:
      job.checkpoint.write_bytes_per_s_per_node = s3;
      job.checkpoint.read_bytes_per_s_per_node = s3;
      break;
    case CheckpointStorage::fsx_lustre: {
      const auto& d = f.fsx(o.fsx_deployment);
      job.checkpoint.write_bytes_per_s_per_node = network;
      job.checkpoint.read_bytes_per_s_per_node = network;
      job.checkpoint.aggregate_bytes_per_s = fsx_bytes(o, f) / kTiB * d.write_bytes_per_s_per_tib;
      job.checkpoint.storage = fmt::format("fsx-lustre ({})", d.name);
      break;
    }
    case CheckpointStorage::local_nvme:
      if (spot)
        throw Error("checkpoints on local NVMe are lost when a spot instance is reclaimed")
            .hint("use --checkpoint-storage s3 or fsx-lustre for spot");
      if (!(inst.storage.local_nvme_bytes > 0))
        throw Error(fmt::format("{} has no local NVMe", inst.name)).hint("use --checkpoint-storage s3 or fsx-lustre");
      job.checkpoint.write_bytes_per_s_per_node = disk.write_bytes_per_s;
      job.checkpoint.read_bytes_per_s_per_node = disk.read_bytes_per_s;
      break;
  }
  job.checkpoint_interval_s = o.checkpoint_interval_s;
  job.eval_every_steps = o.eval_every_steps;
  job.eval_duration_s = o.eval_duration_s;
  job.hardware_failure_rate_per_gpu_per_s =
      o.hardware_failure_rate_per_gpu_per_s >= 0 ? o.hardware_failure_rate_per_gpu_per_s : f.hardware_failure_rate_per_gpu_per_s;
  if (o.hardware_failure_rate_per_gpu_per_s < 0)
    job.assumptions.push_back(fmt::format("hardware failures: {:.3g} per GPU-hour, measured on 16k H100s (Llama 3)",
                                          job.hardware_failure_rate_per_gpu_per_s * 3600.0));

  // Prices.
  const auto& p = inst.prices;
  const std::string where = inst.file.empty() ? std::string("the catalog") : inst.file;
  auto missing = [&](const std::string& field) {
    return Error(fmt::format("{} has no {} price", inst.name, field))
        .at(where)
        .hint(fmt::format("add \"{}\" for {} in a price file (--prices FILE)", field, inst.name));
  };
  const bool need_on_demand = o.purchase != PurchaseOption::spot;
  if (sagemaker) {
    if (!p.sagemaker_on_demand) throw missing("sagemaker_on_demand");
    job.prices.on_demand_usd_per_hour = *p.sagemaker_on_demand;
    if (p.sagemaker_estimated)
      job.assumptions.push_back("the SageMaker price is EC2 × an uplift factor (catalog estimate)");
    if (spot) {
      if (!p.spot) throw missing("spot");
      if (!p.ec2_on_demand) throw missing("ec2_on_demand");
      job.prices.spot_usd_per_hour = *p.sagemaker_on_demand * *p.spot / *p.ec2_on_demand;
      job.assumptions.push_back("SageMaker managed spot price = SageMaker on-demand × (EC2 spot / EC2 on-demand)");
    }
    job.prices.minimum_billed_s = f.sagemaker_minimum_billed_s;
  } else {
    if (need_on_demand && !p.ec2_on_demand) throw missing("ec2_on_demand");
    job.prices.on_demand_usd_per_hour = p.ec2_on_demand.value_or(0);
    if (spot) {
      if (!p.spot) throw missing("spot");
      job.prices.spot_usd_per_hour = *p.spot;
    }
    job.prices.minimum_billed_s = f.ec2_minimum_billed_s;
  }
  if (spot && p.spot_estimated)
    job.assumptions.push_back("the spot price is estimated from EC2 on-demand × (1 − the family's spot discount)");
  else if (spot && p.spot_min && p.spot_max)
    job.assumptions.push_back(fmt::format("spot price: midpoint of the sampled ${:.2f}-${:.2f}/h", *p.spot_min, *p.spot_max));
  if (!p.region.empty()) job.assumptions.push_back("prices of region " + p.region);

  add_placement_costs(job, plan, ctx, o, dataset);
  job.assumptions.push_back(fmt::format("startup: provisioning {}, image pull {}, init {} (estimates in lifecycle.json)",
                                        units::format_duration(job.startup.provisioning_s),
                                        units::format_duration(job.startup.container_pull_s),
                                        units::format_duration(job.startup.framework_init_s)));
  job.check();
  return job;
}

InterruptionModel default_interruption_model(const hw::InstanceType& instance) {
  if (!instance.prices.interruption_bucket.empty()) return InterruptionModel::from_bucket(instance.prices.interruption_bucket);
  return InterruptionModel::trace_default().with_assumption(
      fmt::format("{} has no Spot Advisor interruption bucket in the catalog; using the p3 trace default", instance.name));
}

}  // namespace trainplan::sim
