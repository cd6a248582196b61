// Private pieces of plan::lower(): what one op costs on one rank, and the per-unit task
// templates (compute segments and tensor-parallel collectives, with the memory events that
// bracket them) that lower.cpp instantiates per rank and micro-batch. plan/README.md
// ("Lowering") describes the program these build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/models/model.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan::detail {

/// A transient buffer of saved activations: `key` names it within its (micro-batch, unit),
/// `bytes` its size on this rank.
struct MemGroup {
  int key = 0;
  double bytes = 0;
};

enum class ItemKind { compute, collective };

/// One task of a unit template.
struct TemplateItem {
  ItemKind kind = ItemKind::compute;
  Phase phase = Phase::forward;  // forward, backward or recompute
  // compute
  std::vector<int> ops;          // merged ops (one at op granularity)
  double flops = 0, mem_bytes = 0;
  int op_kind = -1;
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  double workspace_bytes = 0;    // fp32 logits of a loss: allocated around the task
  std::vector<MemGroup> allocs;  // saved activations allocated right before the task
  std::vector<MemGroup> frees;   // saved activations released right after it
  std::string name;              // label suffix: op name, or "unit#k" for merged tasks
  // collective (tensor parallel, or context parallel: purpose cp)
  CommPurpose purpose = CommPurpose::tp;
  CollectiveKind collective = CollectiveKind::all_reduce;
  int op = -1;                   // the op it belongs to
  TensorRole role = TensorRole::none;
  double bytes = 0;              // whole tensor S for one micro-batch
  int slot = 0;                  // index among the unit's collectives of its purpose, one micro-batch
  /// cp: the backward's K, V all-gather, issued at the start of the unit's backward after the
  /// previous compute only (not waited for by the next compute)...
  bool prefetch = false;
  /// ...but by this compute item (the first one of the backward list that runs the attention).
  bool waits_prefetch = false;
  // Transient activation buffers (cp's gathered K, V and dK, dV): allocated right before the
  // item, released right after it.
  std::vector<MemGroup> transient_allocs;
  std::vector<MemGroup> transient_frees;
};

/// The tasks of one layer unit for one micro-batch, per phase, in issue order.
struct UnitTemplate {
  std::vector<TemplateItem> forward;
  std::vector<TemplateItem> recompute;  // full recomputation: the forward re-run before backward
  std::vector<TemplateItem> backward;   // selective recomputation items are inside it
  /// Full recomputation: the unit's input kept from forward to backward (0 for unit 0).
  double checkpoint_bytes = 0;
  int checkpoint_key = 0;
  double params = 0;                    // on one tp rank
  std::vector<int> param_ops;           // ops with parameters, unit order
  int tp_slots = 0;                     // tp collectives per micro-batch (all phases)
  int cp_slots = 0;                     // cp collectives per micro-batch (all phases)
  int bn_slots = 0;                     // synchronized-batch-norm collectives per micro-batch (all phases)
  int ep_slots = 0;                     // expert-parallel all-to-alls per micro-batch (all phases)
};

/// Templates of every unit of the model under the plan's tp / sequence parallelism /
/// recomputation, merged per `granularity`.
std::vector<UnitTemplate> build_unit_templates(const Plan& plan, const PlanContext& ctx, Granularity granularity);

/// Largest number of memory keys of any unit (buffer ids are numbered with it): its ops, the
/// full-recomputation checkpoint and, with cp > 1, the four transient buffers of cp_keys().
int max_memory_keys(const models::ModelGraph& graph, int cp = 1);

/// Memory keys of a unit's cp transients (units with `ops` ops): the K, V gathered for the
/// forward, for the full-recomputation forward and for the backward, and dK, dV.
struct CpKeys {
  int kv_forward = 0, kv_recompute = 0, kv_backward = 0, dkv = 0;
};
inline CpKeys cp_keys(size_t ops) {
  const int n = static_cast<int>(ops);
  return {n + 1, n + 2, n + 3, n + 4};
}

/// fp32 logits of the loss (Megatron computes the cross-entropy in fp32), as memory.cpp's
/// workspace: micro_batch * seq_len / cp * vocab / tp * 4 bytes; 0 for models without a
/// vocabulary.
double loss_workspace_bytes(const Plan& plan, const PlanContext& ctx);

}  // namespace trainplan::plan::detail
