// File: trainplan/simulator/job_lifecycle.hpp
//
// Facts about a training job's life outside the training step: how long instances take to
// start, how fast S3 / FSx for Lustre / EBS move data, how the providers bill, how often
// hardware fails and what the spot model assumes when the catalog has no interruption bucket.
// They live in simulator/data/lifecycle.json (each with a source, a date and a kind:
// documented, measured, fitted, convention or estimate), embedded in the library at build time.
//
//   const sim::LifecycleFacts& f = sim::LifecycleFacts::builtin();
//   f.ec2_provisioning_s;                         // 180 (an estimate)
//   f.fact("ec2_provisioning").kind;              // "estimate"
//   f.fsx("persistent-2-250").read_bytes_per_s_per_tib;
//   f.bucket_rate_per_s("5-10%");                 // -ln(1 - 0.075) / 30 days
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"

namespace trainplan::sim {

/// Where one number comes from and how much to trust it.
struct LifecycleFact {
  std::string name;    // "ec2_provisioning"
  double value = 0;    // SI units (seconds, bytes, bytes/s) or a plain number
  std::string kind;    // "documented", "measured", "fitted", "convention", "estimate"
  std::string source;  // source id (LifecycleFacts::sources)
  std::string note;
};

struct LifecycleSource {
  std::string description;
  std::string date;
  bool verified = false;
};

/// Throughput of one FSx for Lustre deployment type, per TiB of storage.
struct FsxDeployment {
  std::string name;  // "persistent-2-250"
  double read_bytes_per_s_per_tib = 0;
  double write_bytes_per_s_per_tib = 0;
};

/// The spot model used when neither the catalog nor the user gives one.
struct SpotDefault {
  double rate_per_instance_per_s = 0;  // exponential interruption rate of one instance
  double correlation = 0;              // common-shock share (see spot.hpp)
  double restart_wait_median_s = 0;    // capacity wait after an interruption (log-normal)
  double restart_wait_mean_s = 0;
  std::string source;
};

struct LifecycleFacts {
  // Startup (seconds).
  double ec2_provisioning_s = 0;
  double sagemaker_provisioning_s = 0;
  double sagemaker_warm_pool_start_s = 0;
  double container_image_bytes = 0;
  double container_pull_bytes_per_s = 0;
  double framework_init_s = 0;
  double fastfile_mount_s = 0;
  // SageMaker phases of a small CPU training job (built-in XGBoost), as published logs show
  // them: Starting and Preparing are not billed; input, image, algorithm start, upload are.
  double sagemaker_cpu_starting_s = 0;
  double sagemaker_cpu_preparing_s = 0;
  double sagemaker_input_download_s = 0;       // fixed part; the dataset's bytes come on top
  double sagemaker_xgboost_image_download_s = 0;
  double sagemaker_xgboost_algorithm_start_s = 0;
  double sagemaker_model_upload_s = 0;
  double sagemaker_warm_pool_max_keep_alive_s = 0;
  double csv_bytes_per_value = 0;
  // Storage.
  double s3_network_efficiency = 0;  // S3 throughput / instance network bandwidth
  double s3_max_instance_bytes_per_s = 0;  // cap on one instance's S3 throughput
  double ebs_gp3_baseline_bytes_per_s = 0;
  double ebs_gp3_max_bytes_per_s = 0;
  double fsx_min_bytes = 0;
  // Billing.
  double ec2_minimum_billed_s = 0;
  double sagemaker_minimum_billed_s = 0;
  // Failures and interruptions.
  double hardware_failure_rate_per_gpu_per_s = 0;
  double interruption_window_s = 0;
  // Data.
  double token_bytes_small_vocab = 0;
  double token_bytes_large_vocab = 0;
  double image_sample_bytes = 0;
  double image_decode_per_vcpu_per_s = 0;  // JPEG images one vCPU decodes per second
  double loader_reserved_vcpus_per_gpu = 0;  // vCPUs per GPU that do not decode

  SpotDefault spot_default;
  std::map<std::string, double> bucket_monthly_fraction;  // "<5%" -> 0.025
  std::map<std::string, FsxDeployment> fsx_deployments;
  std::map<std::string, LifecycleFact> facts;             // by name, for provenance
  std::map<std::string, LifecycleSource> sources;

  /// The facts compiled into the binary (simulator/data/lifecycle.json).
  static const LifecycleFacts& builtin();
  /// Parses a lifecycle file; errors name `name` and the JSON pointer. Every known fact must be
  /// present and unknown ones are rejected, so the file and the code cannot drift apart.
  static LifecycleFacts parse(const json::Json& doc, const std::string& name);

  const LifecycleFact& fact(const std::string& name) const;
  const FsxDeployment& fsx(const std::string& deployment) const;
  std::vector<std::string> fsx_names() const;
  std::vector<std::string> bucket_names() const;

  /// Exponential interruption rate per instance (1/s) of a Spot Advisor bucket: the bucket's
  /// monthly fraction f read as an exponential lifetime, -ln(1 - f) / interruption_window_s.
  /// Throws Error listing the buckets for an unknown name.
  double bucket_rate_per_s(const std::string& bucket) const;
};

}  // namespace trainplan::sim
