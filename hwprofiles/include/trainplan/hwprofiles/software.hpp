// Software stacks (catalog key "software"): what the framework that runs a plan costs on the
// host CPU and how many kernels it launches. The step simulator turns a stack into a host
// timeline per rank (simulator/README.md, "Host and launch overhead").
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>

#include "trainplan/core/precision.hpp"

namespace trainplan::hw {

/// The stack a plan runs on when it names none (plan field `software`): the planner's space
/// (tp, pp, sequence and context parallelism, interleaved 1F1B, ZeRO-1) is Megatron-Core's.
inline constexpr const char* kDefaultSoftware = "megatron-core";

/// Op classes whose kernel count a stack changes by fusing (models::OpKind names).
inline constexpr std::array<std::string_view, 5> kFusableOpClasses = {"layernorm", "rmsnorm", "activation", "residual", "dropout"};

struct SoftwareStack {
  std::string name;
  std::string description;
  /// Host CPU time to issue one GPU kernel (Python, the framework's dispatcher, cudaLaunchKernel).
  double launch_s = 0;
  /// GPU-side gap between back-to-back kernels when the host runs ahead.
  double kernel_gap_s = 0;
  /// Kernels per op of a fusable class, as a multiple of the op's own kernel count (absent: 1;
  /// 0: fused into a neighbour).
  std::map<std::string, double> kernels;
  /// Host time per layer and pass (module hooks; FSDP's unshard / reduce hooks per wrapped unit).
  double layer_hook_s = 0;
  /// Host time per micro-batch (data loader hand-off, loss scaling, the schedule's bookkeeping).
  double micro_batch_s = 0;
  /// Host time per step before the optimizer (optimizer step launch, grad-norm clipping).
  double step_s = 0;
  /// The host waits for the GPU before the optimizer (grad-norm / found-inf `.item()`): the
  /// optimizer is issued only once the gradients are ready, draining the host's run-ahead.
  bool sync_before_optimizer = false;
  /// ZeRO-3 as DeepSpeed ran it before its gathers were coalesced (v0.3, 2021): each parameter
  /// tensor (weights, biases, norms) is all-gathered by its own call, and each call first
  /// synchronizes the device (torch.cuda.synchronize), so a gather waits for all earlier GPU
  /// work (compute and gradient reduce-scatters) and the compute after it waits for the
  /// gather: nothing is prefetched or overlapped. The gradients are reduce-scattered tensor by
  /// tensor too (v0.3's _reduce_scatter_gradients: one call per parameter). False: one gather
  /// and one reduce-scatter per layer unit, the gathers prefetched.
  bool zero3_tensor_sync = false;
  /// With zero3_tensor_sync: host time to issue one tensor's gather (pre-launch + launch), apart
  /// from the per-rank part below.
  double zero3_tensor_issue_s = 0;
  /// With zero3_tensor_sync: ZeRO-3's collectives take one view per rank of the data-parallel
  /// group (DeepSpeed v0.3 builds a Python list of world-size narrows; PyTorch 1.8's
  /// ProcessGroupNCCL list all_gather / reduce_scatter copies each view to or from a flat
  /// buffer with its own copy_), so a collective's host issue grows with the group: per rank,
  /// `zero3_rank_view_s` to build the view (before the call) and `zero3_rank_copy_s` to issue
  /// its copy (a gather's after the NCCL call, alongside the transfer; a reduce-scatter's
  /// before it). 0: the collectives take flat buffers.
  double zero3_rank_view_s = 0;
  double zero3_rank_copy_s = 0;
  /// ZeRO-3 releases a module's parameters after every forward, the one a recomputation re-runs
  /// too, and gathers them again for its backward (DeepSpeed's module hooks): three gathers per
  /// recomputed unit and micro-batch. False: the recomputation runs inside the backward's gather
  /// (FSDP with checkpointing inside its units).
  bool zero3_recompute_gathers = false;
  /// The fused-attention kernels the stack runs: "" = the GPU's best (FlashAttention-2 class
  /// before Hopper, cuDNN / FlashAttention-3 class on Hopper and later); "flash-attn-2" = the
  /// flash-attn 2 package on every GPU (FlashAttention-2 kernels also on Hopper, where they do
  /// not use its warpgroup MMA).
  std::string fused_attention;
  /// The precision data-parallel gradient reductions run in, by training precision, where the
  /// stack's default is not the training precision: {"bf16": "fp32"} reduces (all-reduce,
  /// reduce-scatter) bf16 training's gradients as fp32, 4 bytes per gradient on the wire
  /// (Megatron-LM's accumulate_allreduce_grads_in_fp32, forced with --bf16; Composer's FSDP
  /// mixed precision DEFAULT, reduce_dtype fp32). Absent: the training precision's bytes. A
  /// plan's data_parallel.grad_reduce overrides it.
  std::map<Precision, Precision> grad_reduce;
  /// Before each data-parallel gradient reduction the stack passes over the unsharded gradient
  /// in memory-bound kernels (PyTorch FSDP's post-backward hook): a cast to the reduce precision
  /// where that is wider than the training precision (reads the training precision's bytes,
  /// writes the reduce precision's) and the pre-division by FSDP's gradient predivide factor
  /// (2 or more on 2 or more ranks: reads and writes the reduce precision's). Large-grid
  /// kernels, serial with the compute in plan::lower and the estimate.
  bool grad_epilogue = false;
  /// Bytes the epilogue moves per reduced parameter (0 without one): `training` gradients,
  /// reduced in `reduce`.
  double grad_epilogue_bytes(Precision training, Precision reduce) const {
    if (!grad_epilogue) return 0.0;
    const double t = bytes_per_element(training), r = bytes_per_element(reduce);
    return (r > t ? t + r : 0.0) + 2.0 * r;
  }
  /// Gradients accumulate in a separate fp32 buffer beside the 16-bit weights (Megatron-LM's
  /// main_grad): 4 bytes per parameter instead of 2 under mixed precision, 18 bytes per
  /// parameter with Adam (6 + 12/d with the distributed optimizer), where a stack that casts
  /// back into 16-bit gradients keeps 16.
  bool fp32_main_grads = false;
  /// Field name -> source id ("a+b" names two).
  std::map<std::string, std::string> sources;

  /// The multiple of kernels for op class `op_class` (1 when the stack does not change it).
  /// The precision gradients of a run in `training` precision are reduced in (grad_reduce's
  /// entry, else `training`).
  Precision grad_reduce_precision(Precision training) const {
    auto it = grad_reduce.find(training);
    return it == grad_reduce.end() ? training : it->second;
  }
  double kernel_scale(std::string_view op_class) const {
    auto it = kernels.find(std::string(op_class));
    return it == kernels.end() ? 1.0 : it->second;
  }
};

/// The op classes a stack changes: "dropout, layernorm" (fused away), "activation x2"; empty
/// when it changes none.
std::string fused_classes(const SoftwareStack& stack);

/// One line for reports: "megatron-core (launch 10 us per kernel, 20 us per layer and pass,
/// 50 us per micro-batch, 200 us per step, host sync before the optimizer; fuses dropout,
/// layernorm, rmsnorm)"; "none" for a stack without a name.
std::string describe(const SoftwareStack& stack);

}  // namespace trainplan::hw
