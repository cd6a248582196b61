// Convergence warnings (convergence.hpp): thresholds from published large-batch results.
#include "trainplan/planner/convergence.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainplan/core/units.hpp"
#include "trainplan/simulator/sync_batchnorm.hpp"

namespace trainplan::planner {
namespace {

// One rung of a family's published batch ladder: beyond `limit` (samples, or tokens for
// `in_tokens` families) the recipe needs what `text` says.
struct Rung {
  double limit;
  const char* text;
  const char* source;
};

struct Ladder {
  bool in_tokens = false;  // the limits count tokens per step, not samples
  std::vector<Rung> rungs;  // increasing limits
};

const char kGoyal[] = "Goyal et al. 2017, \"Accurate, Large Minibatch SGD\", arXiv:1706.02677";
const char kLars[] = "You, Gitman & Ginsburg 2017, \"Large Batch Training of Convolutional Networks\" (LARS), arXiv:1708.03888";
const char kLamb[] = "You et al. 2019, \"Large Batch Optimization for Deep Learning: Training BERT in 76 minutes\" (LAMB), arXiv:1904.00962";

Ladder ladder_of(models::Family family) {
  switch (family) {
    case models::Family::resnet:
      return {false,
              {{256, "is above the 256 images ResNets train at with the plain recipe (He et al. 2016): scale the learning rate "
                     "linearly with the batch and warm it up over the first 5 epochs, which matched the 256 baseline up to 8192",
                kGoyal},
               {8192, "is beyond the 8192 images linear scaling with warm-up reaches without losing accuracy: use a layer-wise "
                      "optimizer (LARS trained ResNet-50 at 32768 without loss)",
                kLars},
               {32768, "is beyond the 32768 images LARS trained ResNet-50 at without losing accuracy: expect lower accuracy", kLars}}};
    case models::Family::bert:
      return {false,
              {{8192, "is beyond the 8192 sequences where Adam and LARS stop matching BERT's baseline: use LAMB (65536 sequences "
                      "of 128 tokens, 32768 of 512)",
                kLamb},
               {65536, "is beyond the 65536 sequences LAMB trained BERT at: expect lower accuracy", kLamb}}};
    case models::Family::gpt:
    case models::Family::llama:
      return {true,
              {{3.2e6, "is beyond the 3.2M tokens per step GPT-3 175B trained at, which it reached by ramping the batch up over "
                       "the first 4-12B tokens: ramp the batch the same way",
                "Brown et al. 2020, \"Language Models are Few-Shot Learners\", arXiv:2005.14165, Table 2.1"},
               {16.0 * 1048576, "is beyond the 16M tokens per step Llama 3 405B reached (ramped from 4M and 8M): expect lower "
                                "accuracy per token",
                "Llama Team 2024, \"The Llama 3 Herd of Models\", arXiv:2407.21783, section 3.4.1"}}};
    case models::Family::vit:
      return {false,
              {{4096, "is beyond the 4096 images ViT was pre-trained at (Adam, 10k warm-up steps): use a layer-wise optimizer such "
                      "as LAMB and retune the learning rate and warm-up",
                "Dosovitskiy et al. 2021, \"An Image is Worth 16x16 Words\", arXiv:2010.11929"}}};
    case models::Family::mlp: return {};
  }
  return {};
}

bool has_batchnorm(const models::ModelGraph& graph) {
  const auto& ops = graph.ops();
  return std::any_of(ops.begin(), ops.end(), [](const models::Op& op) { return op.kind == models::OpKind::batchnorm; });
}

}  // namespace

std::vector<ConvergenceWarning> convergence_warnings(const plan::Plan& plan, const plan::PlanContext& ctx, int64_t requested) {
  std::vector<ConvergenceWarning> out;
  if (has_batchnorm(ctx.graph) && plan.micro_batch < kBatchNormMinPerGpu) {
    std::string sync = "synchronized batch norm across GPUs";
    if (plan.dp > 1) {
      const sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(plan, ctx);
      sync = fmt::format("synchronized batch norm over the {} data-parallel GPUs (+{} per step: {} collectives of {} in all; "
                         "--sync-bn plans it)", plan.dp,
                         units::format_duration(c.time_per_step_s), c.collectives_per_step, units::format_bytes(c.bytes_per_step));
    }
    out.push_back({"batchnorm-per-gpu",
                   fmt::format("each GPU normalizes its batch-norm layers over {} images (the micro-batch); below {} per GPU the "
                               "statistics get noisy and accuracy drops (ResNet-50 top-1 error 23.6% at 32, 24.8% at 8, 34.7% at "
                               "2): use micro-batches of {} or more, {}, or GroupNorm",
                               plan.micro_batch, kBatchNormMinPerGpu, kBatchNormMinPerGpu, sync),
                   "Wu & He 2018, \"Group Normalization\", ECCV, Table 2"});
  }
  const Ladder ladder = ladder_of(ctx.model_spec.family);
  const double samples = static_cast<double>(plan.global_batch);
  const double amount = ladder.in_tokens ? samples * ctx.graph.tokens_per_sample() : samples;
  const Rung* beyond = nullptr;
  for (const Rung& r : ladder.rungs)
    if (amount > r.limit) beyond = &r;
  if (beyond) {
    const std::string what = ladder.in_tokens ? fmt::format("{} sequences x {} tokens = {} tokens per step", plan.global_batch,
                                                            ctx.graph.tokens_per_sample(), units::format_count(amount))
                                              : fmt::format("{} {}", plan.global_batch,
                                                            ctx.model_spec.family == models::Family::bert ? "sequences" : "images");
    out.push_back({"large-global-batch", fmt::format("the global batch of {} {}", what, beyond->text), beyond->source});
  }
  if (requested > 0 && plan.global_batch != requested)
    out.push_back({"global-batch-changed",
                   fmt::format("the plan's global batch {} is not the {} you gave: scale the learning rate by {:g} (linear scaling "
                               "rule) and revisit the warm-up",
                               plan.global_batch, requested, samples / static_cast<double>(requested)),
                   kGoyal});
  return out;
}

}  // namespace trainplan::planner
