// File: trainplan/plan/memory.hpp
//
// Memory per GPU of a plan, by stage: weights, gradients, optimizer state, activations,
// workspace, communication buffers and framework overhead, against usable GPU memory.
//
//   plan::MemoryBreakdown m = plan::stage_memory(plan, ctx, 0);
//   m.total_bytes(); m.fits(); m.capacity_bytes
//
// Model states under mixed-precision Adam (Rajbhandari et al. 2020), Ψ parameters on a rank,
// N = dp: plain 16Ψ bytes (2 weights + 2 grads + 12 optimizer: fp32 master, momentum,
// variance); ZeRO-1 4Ψ + 12Ψ/N; ZeRO-2 2Ψ + 14Ψ/N; ZeRO-3 16Ψ/N. In fp32 training: 4 weights
// + 4 grads + 8 optimizer.
//
// Activations per transformer layer and micro-batch (Korthikanti et al. 2022, 16-bit,
// s = seq, b = micro-batch, h = hidden, a = heads, t = tp): no parallelism sbh(34 + 5as/h);
// tensor parallel sbh(10 + 24/t + 5as/(ht)); + sequence parallel sbh/t (34 + 5as/h);
// selective recomputation drops the 5as/h term; full recomputation keeps 2sbh (/t with SP)
// per layer plus one layer's working set. These fall out of the per-op saved activations of
// the model graph, so other architectures (SwiGLU, GQA, no dropout) follow the same rules.
//
// Micro-batches in flight on pipeline stage i of p: GPipe m; 1F1B min(m, p - i); interleaved
// 1F1B adds (p - 1 - i) / v... see stage_memory() for the exact count used.
//
// Context parallelism (cp > 1): every op's saved activations are 1/cp of cp = 1's (the rank
// holds 1/cp of the tokens), plus, transiently while a layer's attention runs, the K and V of
// the whole sequence gathered over the cp group (and in backward their gradients before the
// reduce-scatter): unit_activation_profile(). ZeRO shards over the dp * cp ranks that hold the
// same parameters (N = dp * cp).
#pragma once

#include <string>
#include <vector>

#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::plan {

struct MemoryBreakdown {
  int stage = 0;                  // pipeline rank
  double params_on_rank = 0;      // parameters held by this rank (before ZeRO sharding)
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;   // saved activations of all micro-batches in flight
  double micro_batches_in_flight = 0;
  double workspace_bytes = 0;     // transient buffers of the largest op (logits, cuBLAS)
  double comm_buffer_bytes = 0;   // gradient buckets, ZeRO-3 prefetch, p2p buffers
  double framework_bytes = 0;     // CUDA context, allocator fragmentation reserve
  double capacity_bytes = 0;      // usable GPU memory

  double total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + workspace_bytes +
           comm_buffer_bytes + framework_bytes;
  }
  bool fits() const { return total_bytes() <= capacity_bytes; }
};

/// Constants of the memory model, with their rationale in memory.cpp.
struct MemoryOptions {
  /// Fixed per-GPU overhead: CUDA context + cuBLAS/NCCL handles (~0.5-1 GiB measured by
  /// PyTorch users) plus allocator fragmentation reserve.
  double framework_overhead_bytes = 1.5 * 1073741824.0;
  /// Share of the GPU's memory that is usable (the driver reserves some).
  double usable_fraction = 0.97;
  /// Bytes per logit of the loss's working buffer on the stage that owns the output: 4 when the
  /// cross-entropy works on an fp32 copy of the logits (Megatron-LM, PyTorch's cross_entropy
  /// under autocast), 2 when a fused kernel reads the 16-bit logits and writes their 16-bit
  /// gradient (flash-attn's CrossEntropyLoss, llm-foundry's default loss).
  double loss_bytes_per_logit = 4.0;
};

/// Memory of pipeline rank `stage` (0..pp-1), all its virtual stages together. Activations are
/// activation_peak_bytes() (the replay of the lowered schedule).
MemoryBreakdown stage_memory(const Plan& plan, const PlanContext& ctx, int stage,
                             const MemoryOptions& options = {});
/// All pipeline ranks.
std::vector<MemoryBreakdown> memory_per_stage(const Plan& plan, const PlanContext& ctx,
                                              const MemoryOptions& options = {});
/// The rank with the largest total.
MemoryBreakdown peak_memory(const Plan& plan, const PlanContext& ctx, const MemoryOptions& options = {});

/// Saved activation bytes of one layer unit for one micro-batch of `micro_batch` samples on one
/// tp rank, under the plan's recompute / tp / sequence-parallel settings.
/// Flash attention keeps no score matrix (only a log-sum-exp), so selective recomputation has
/// nothing left to drop there; the Korthikanti et al. formulas above are those of unfused
/// attention.
/// `cp`: context-parallel degree (the bytes are 1/cp of cp = 1's).
double unit_activation_bytes(const models::ModelGraph& graph, int unit, int64_t micro_batch,
                             int tp, bool sequence_parallel, Recompute recompute, Precision precision,
                             AttentionImpl attention = AttentionImpl::flash, int cp = 1, const Fp8Context* fp8 = nullptr);

/// How the activation buffers of one layer unit for one micro-batch rise and fall on one rank
/// in the lowered program (bytes), relative to what the rest of the rank holds:
struct UnitActivationProfile {
  /// Held from the unit's forward to its backward (unit_activation_bytes under the plan's
  /// recomputation).
  double kept_bytes = 0;
  /// Highest point during the unit's forward above kept_bytes (>= 0): with cp > 1 the gathered
  /// K, V while the attention runs, on top of the ops allocated so far.
  double forward_rise_bytes = 0;
  /// Highest point during the unit's backward (with its recomputation) above kept_bytes (>= 0):
  /// re-materialized ops; with cp > 1 the K, V gathered again at the start of the unit's
  /// backward and, during the attention backward, the full dK, dV before their reduce-scatter.
  double backward_rise_bytes = 0;
};
/// The profile of `unit` under the plan (micro-batch, tp, sequence parallelism, cp,
/// recomputation, precision, attention), op by op from plan::op_cost in the lowering's order
/// (plan/README.md, "Memory events"). activation_peak_bytes() replays these; the search's fast
/// memory model (planner/partition.hpp) reads the same numbers.
UnitActivationProfile unit_activation_profile(const Plan& plan, const PlanContext& ctx, int unit);

/// Micro-batches whose activations stage `stage` holds at its peak.
double micro_batches_in_flight(Schedule schedule, int pp, int vp, int64_t num_micro_batches, int stage);

}  // namespace trainplan::plan
