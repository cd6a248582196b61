// File: trainplan/planner/export.hpp
//
// Exports a plan to the framework that will run it:
//   deepspeed  a DeepSpeed config JSON (batch sizes, gradient accumulation, ZeRO stage and
//              buckets in elements, fp16/bf16, AutoTP size, activation checkpointing); what a
//              config cannot carry (PipelineModule arguments) comes from export_notes();
//   megatron   Megatron-LM arguments as a bash array with the launch environment (model shape,
//              tensor/pipeline/context sizes, layers per virtual stage or the uneven split,
//              micro/global batch, recomputation, sequence parallelism, distributed optimizer or
//              Megatron-FSDP, DDP buckets in parameters, bf16/fp16/fp8);
//   sagemaker  a SageMaker Python SDK PyTorch estimator (ml. instance type and count, the
//              distribution: torch_distributed or smdistributed data parallel, the environment,
//              and for spot use_spot_instances, max_run, max_wait, checkpoint_s3_uri);
//   torchrun   torchrun and Slurm srun launch lines for the cluster.
//
//   plan::Plan p = plan::read_plan_file("plan.json");
//   plan::PlanContext ctx = plan::resolve(p, catalog, "plan.json");
//   std::string text = planner::export_plan(p, ctx, planner::ExportTarget::megatron);
//
// A plan a framework cannot run is refused with an Error that names the field, the framework's
// limitation with its rule (export_rules.hpp: "[rule deepspeed.pipeline-zero]") and a way out
// (ZeRO-2/3 with a pipeline in DeepSpeed, context parallelism outside Megatron-LM, an instance
// type SageMaker does not train on, a parameter server anywhere, ...). The output is
// deterministic: the same plan gives the same bytes, and it passes validate_export().
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainplan/plan/plan.hpp"

namespace trainplan::planner {

enum class ExportTarget { deepspeed, megatron, sagemaker, torchrun };
std::string_view export_target_name(ExportTarget t);  // "deepspeed", "megatron", "sagemaker", "torchrun"
/// Throws Error listing the names.
ExportTarget parse_export_target(const std::string& name);

struct ExportOptions {
  std::string entry_point = "train.py";          // the training script
  std::string role = "<SageMaker execution role ARN>";
  /// SageMaker PyTorch container: an exact version the SDK accepts with torch_distributed
  /// (sagemaker_torch_distributed_versions(); "2.2" is refused, "2.2.0" is not).
  std::string framework_version = "2.2.0";
  std::string py_version = "py310";
  std::string checkpoint_s3_uri = "s3://<bucket>/checkpoints/<job>";  // SageMaker spot
  /// SageMaker pure data parallelism: the smdistributed data parallel library (SMDDP, only on
  /// ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge, ml.p4de.24xlarge) instead of
  /// torch_distributed.
  bool smddp = false;
  /// SageMaker max_run (seconds); 0 = 1.5 x the plan's predicted time, rounded up to the hour.
  double max_run_s = 0;
  /// SageMaker spot max_wait (seconds); 0 = twice max_run (capped at 28 days).
  double max_wait_s = 0;
  int master_port = 29500;                       // torchrun rendezvous
};

/// The export text of `plan` (validated against `ctx` first). Throws Error, naming
/// `plan_file` and the plan field, when the target cannot express the plan.
std::string export_plan(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target,
                        const ExportOptions& options = {}, const std::string& plan_file = "plan");

/// What `target`'s text cannot carry and the training script must do (DeepSpeed: the
/// PipelineModule arguments, which layers to checkpoint, NCCL_ALGO; every target: converting
/// the model to SyncBatchNorm when the plan synchronizes batch norm); the other targets' texts
/// carry the rest as comments. The CLI prints each on stderr as "note: ...".
std::vector<std::string> export_notes(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target);

/// Why `target` cannot express `plan` (the refusal's message), or nullopt when it can. The
/// SageMaker time limit is not checked (a search has no predicted time yet). For searches
/// restricted to one framework (SearchRequest::framework).
std::optional<std::string> export_refusal(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target,
                                          const ExportOptions& options = {});

}  // namespace trainplan::planner
