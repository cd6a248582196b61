// File: trainplan/planner/convergence.hpp
//
// Warnings (never errors) for plans that change training dynamics: splitting a batch over GPUs
// and growing it to keep them busy changes how the model converges, which the step time and
// cost do not show. Each warning cites the published result its threshold comes from.
//
//   auto ws = planner::convergence_warnings(plan, ctx, /*requested_global_batch=*/256);
//   for (const auto& w : ws) fmt::print("warning: {} [{}]\n", w.message, w.source);
//
// Checks:
//   batchnorm-per-gpu     a model with batch normalization whose micro-batch (the batch each
//                         GPU normalizes over) is below kBatchNormMinPerGpu.
//   large-global-batch    a global batch beyond what the model family is published to train at
//                         with its plain recipe (then: which technique reached how far), or
//                         beyond every published large-batch result.
//   global-batch-changed  the plan's global batch is not the one the user gave.
// Nothing here changes a ranking or an exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/plan/plan.hpp"

namespace trainplan::planner {

/// Images per GPU below which batch normalization's statistics get noisy: Wu & He, "Group
/// Normalization" (ECCV 2018), Table 2: ResNet-50 on ImageNet, BN top-1 error 23.6% at 32
/// images per GPU, 23.7% at 16, 24.8% at 8, 27.3% at 4, 34.7% at 2.
inline constexpr int64_t kBatchNormMinPerGpu = 16;

struct ConvergenceWarning {
  std::string code;     // "batchnorm-per-gpu", "large-global-batch", "global-batch-changed"
  std::string message;  // what changes and what to do about it
  std::string source;   // the publication behind the threshold
};

/// The warnings for `plan` (resolved in `ctx`). `requested_global_batch` is the batch the user
/// gave (0: none given, so nothing to compare).
std::vector<ConvergenceWarning> convergence_warnings(const plan::Plan& plan, const plan::PlanContext& ctx,
                                                     int64_t requested_global_batch = 0);

}  // namespace trainplan::planner
