// File: trainplan/planner/export_rules.hpp
//
// What the exports rely on about the frameworks that read them, each fact with the file (and
// version or commit) of the framework's own source it was read from, and a validator that
// checks an exported text against those facts.
//
//   std::string text = planner::export_plan(p, ctx, planner::ExportTarget::megatron);
//   for (const auto& v : planner::validate_export(p, ctx, planner::ExportTarget::megatron, text))
//     std::printf("%s: %s\n", v.rule.c_str(), v.message.c_str());   // empty: the text passes
//
//   planner::export_rule("megatron.cp-comm-type").source;   // "NVIDIA/TransformerEngine ..."
//
// Every refusal of export_plan() names the rule it rests on ("[rule deepspeed.autotp-zero]"),
// so a refusal is always a limitation of the framework, never of the exporter. The table is
// the one planner/README.md prints ("Exports: the rules and their sources").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/export.hpp"

namespace trainplan::planner {

/// One fact about a framework an export relies on.
struct ExportRule {
  std::string_view id;      // "megatron.cp-comm-type": "<target or all>.<name>"
  std::string_view rule;    // the fact, in one sentence
  std::string_view source;  // the framework's file, with its version or commit
};

/// Every rule, in the order of planner/README.md.
std::span<const ExportRule> export_rules();
/// The rule with this id; asserts that it exists (ids are written in code, not read).
const ExportRule& export_rule(std::string_view id);

/// A rule that an exported text breaks, and how.
struct ExportViolation {
  std::string rule;     // an ExportRule id
  std::string message;  // what in the text breaks it
};

/// Checks `text`, export_plan()'s output for `plan` (resolved as `ctx`) and `target`, against
/// the rules of `target`: known keys and flags only, units, valid enum values, required launch
/// environment, precision flags, exact framework versions, instance types SageMaker trains on.
/// Empty when the text passes.
std::vector<ExportViolation> validate_export(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target,
                                             const std::string& text);

// ---- Facts the exporters and the validator share ---------------------------------------------

/// SageMaker training instance types with GPUs ("ml.p5e.48xlarge"; rule sagemaker.instance-types).
std::span<const std::string_view> sagemaker_training_instance_types();
/// framework_version values the SageMaker Python SDK accepts with the torch_distributed
/// distribution, compared as exact strings ("2.2.0", not "2.2"; rule sagemaker.framework-version).
std::span<const std::string_view> sagemaker_torch_distributed_versions();
/// Instance types of the smdistributed data parallel library (rule sagemaker.smddp-instance-types).
std::span<const std::string_view> sagemaker_smddp_instance_types();
/// Context-parallel communication types Transformer Engine accepts (rule megatron.cp-comm-type).
std::span<const std::string_view> te_cp_comm_types();

/// Gradient elements per data-parallel bucket: the plan's bucket bytes over the bytes of one
/// gradient element in the plan's precision (DeepSpeed and Megatron-LM count elements).
int64_t bucket_elements(const plan::Plan& plan, const plan::PlanContext& ctx);
/// Megatron-LM's assertion: tensor or context parallelism without FSDP (ZeRO-2/3) needs
/// CUDA_DEVICE_MAX_CONNECTIONS=1 in the launch environment (rule megatron.cuda-device-max-connections).
bool needs_one_cuda_connection(const plan::Plan& plan);
/// The GPU's compute capability as major * 10 + minor (80 for "8.0"); 0 when unknown.
int compute_capability(const plan::PlanContext& ctx);
/// Megatron-LM's --fp8-recipe value for a plan recipe ("delayed", "tensorwise" for current
/// scaling, "mxfp8", "blockwise"; rule megatron.fp8-recipe).
std::string_view megatron_fp8_recipe(plan::Fp8Recipe recipe);

}  // namespace trainplan::planner
