// File: trainplan/plan/op_cost.hpp
//
// What one model op costs on one tensor-parallel rank for one micro-batch, under a plan's
// tensor parallelism, sequence parallelism, precision and attention implementation: the work
// the GPU executes (FLOPs and bytes, split into the op's main kernel and separate memory-bound
// kernels), its GEMM shape, kernel count, saved activations and parameters. The lowering, the
// memory model, the simulator's compute model and the analytical estimate all read op costs
// from here, so they agree op by op.
//
//   plan::OpCost c = plan::op_cost(graph.op(id), /*micro_batch=*/4, /*tp=*/8, /*sp=*/true,
//                                  Precision::bf16, plan::AttentionImpl::flash);
//   c.flops_fwd; c.saved_bytes; c.recomputed_by_selective;
//
// The model graph's per-op numbers describe the math (model FLOPs, the unfused attention's
// score matrix). What executes differs for attention:
// - flash: one fused kernel per pass; FLOPs 4·s²·h forward (QKᵀ and AV) and 10·s²·h backward
//   (it recomputes QKᵀ: 2.5x forward, FlashAttention-2), halved for causal masks (the kernel
//   skips the masked blocks); traffic Q, K, V, O (and their gradients); saved: the softmax
//   log-sum-exp (4 bytes per head and token) instead of the s² scores, so selective
//   recomputation has nothing to drop;
// - unfused: batched GEMMs QKᵀ and AV (4·s²·h forward, 8·s²·h backward, K = head_dim) plus
//   separate memory-bound passes over the score matrix (scale/mask/softmax, dropout), the
//   graph's score traffic.
// Both carry the per-head GEMM shape (M = micro_batch·heads/tp·s, N = s, K = head_dim), which
// is what limits their tensor-core efficiency.
// The cross-entropy runs in fp32 over 16-bit logits (PyTorch, Megatron-LM): ~18 bytes per logit
// forward and ~26 backward instead of the graph's one read and one write.
// Context parallelism (cp > 1) splits every sample's tokens over cp ranks: each op's work,
// traffic, saved activations and GEMM rows are 1/cp of the per-sample numbers, except that
// attention reads (and in backward writes the gradients of) the whole sequence's K and V,
// gathered over the cp group: its FLOPs are 1/cp of the full s x s work (the load-balanced
// causal split gives every rank the same share) with the per-head GEMM M = s/cp query rows
// against N = s keys. `cp_kv_bytes` is the size of that gathered K, V (and of dK, dV).
//
// FP8 (precision fp8, plan/README.md "FP8"): Transformer Engine runs the three GEMMs (fprop,
// dgrad, wgrad) of the transformer blocks' linears (tp split column or row: QKV, attention
// output, MLP up/gate and down) in FP8 (`fp8_gemm`); attention, the embedding, the LM head
// (Megatron-LM keeps the output layer in 16 bits), norms and elementwise ops stay in 16 bits.
// Each FP8 linear adds memory-bound quantization kernels (serial bytes, `fp8_cast_*_bytes`):
// forward, its input X (M x K) is read in 16 bits and written in FP8 twice (row-wise for fprop,
// column-wise/transposed for wgrad); backward, the output gradient dY (M x N) likewise; the
// weight (K x N) likewise once per step (TE caches it from the first micro-batch; spread over
// the step's micro-batches here). Current scaling reads each tensor once more for its amax;
// delayed scaling reads and writes its amax histories (amax_history x 4 bytes per tensor);
// mxfp8 writes one E8M0 scale byte per 32 values of each copy, blockwise one fp32 scale per
// 128. The GEMM reads its inputs in FP8; the linear's saved input is FP8 (1 byte per element).
//
// Expert parallelism (ep > 1, MoE models; plan/README.md "Expert parallelism"): a rank holds
// num_experts / ep routed experts (expert ops' parameters / ep) and, with balanced routing,
// computes as many routed token copies as its own tokens produce (micro_batch · s/cp · top_k),
// so the expert ops' per-rank work does not change with ep. The busiest rank does `expert_load`
// times that (moe_expert_load: the capacity factor c when c > 0, since every expert is padded to
// its capacity, else the load imbalance): expert FLOPs, row traffic and saved activations x
// load; the weight traffic is the rank's num_experts / ep experts', once per micro-batch. The
// GEMM shape is one expert's: M = micro_batch · s/cp · top_k · ep / num_experts · load rows
// (grouped GEMMs run every local expert's tile set together; small M for fine-grained experts
// is where MoE loses efficiency). moe_dispatch and moe_combine carry `ep_a2a_bytes`, the
// all-to-all that moves the routed copies to (dispatch) and from (combine) the experts.
#pragma once

#include <cstdint>
#include <vector>

#include "trainplan/core/precision.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::plan {

struct OpCost {
  int op = -1;                 // op id in the model graph
  int op_kind = -1;            // models::OpKind as int
  /// Executed FLOPs on this rank for the micro-batch.
  double flops_fwd = 0, flops_bwd = 0;
  /// Bytes read + written by the op's main kernel(s); overlap with its FLOPs (roofline).
  double mem_fwd_bytes = 0, mem_bwd_bytes = 0;
  /// Bytes of separate memory-bound kernels that run before/after the main one and do not
  /// overlap it (unfused attention's passes over the scores).
  double serial_mem_fwd_bytes = 0, serial_mem_bwd_bytes = 0;
  /// Forward GEMM shape on this rank (M rows incl. the micro-batch); attention: the batched
  /// QKᵀ as M = micro_batch·heads/tp·s, N = s, K = head_dim. 0: not a GEMM.
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  bool fused_attention = false;  // attention op run as one fused kernel
  bool fused_attention_v1 = false;  // ... of the FlashAttention-1 class (AttentionImpl::flash1)
  /// Fused attention: the mean number of keys one query visits in the kernel's loop over key
  /// blocks (the sequence, half of it under a causal mask); sets how well the kernel amortizes
  /// its per-block prologue and epilogue. 0 when not fused attention.
  double attention_keys = 0;
  /// Fused attention under a causal mask: the kernel computes the diagonal tiles whole, half of
  /// each masked (the compute model charges that band; the FLOPs count only the unmasked half).
  bool attention_causal = false;
  int kernels_fwd = 1, kernels_bwd = 1;
  /// Activations kept from forward to backward without recomputation (bytes on this rank).
  double saved_bytes = 0;
  /// Selective recomputation drops this op's saved activations and re-runs its forward
  /// before its backward (unfused attention's score terms; never with flash attention).
  bool recomputed_by_selective = false;
  /// Parameters held by this tp rank (split ops hold 1/tp), not counting a tied copy.
  double params = 0;
  /// Context parallelism, attention only: bytes of the whole sequence's K and V of the
  /// micro-batch on this tp rank (2·s·kv_heads·head_dim·micro_batch·element / tp), the size of
  /// the cp all-gather before the attention and of the dK, dV reduce-scatter after its
  /// backward; 0 when cp = 1.
  double cp_kv_bytes = 0;
  /// FP8 training: this op's GEMMs run on the FP8 tensor cores (a block linear); the
  /// quantization traffic the op adds (already part of serial_mem_*_bytes) per phase.
  bool fp8_gemm = false;
  double fp8_cast_fwd_bytes = 0, fp8_cast_bwd_bytes = 0;
  /// Expert parallelism, moe_dispatch / moe_combine only: bytes one rank sends and receives in
  /// the all-to-all that follows the dispatch (forward) / precedes the combine, the routed
  /// copies of its tokens: micro_batch · s/cp · top_k · hidden · element x expert load (the
  /// nccl-tests size S of the all-to-all); 0 when ep = 1. Not divided by tp: Megatron-Core
  /// gathers the sequence-parallel shards over tp before dispatching, so every tp rank sends
  /// the whole micro-batch's copies.
  double ep_a2a_bytes = 0;
};

/// FP8 context of op_cost: the plan's FP8 options and the micro-batches of one step (TE casts
/// the weights to FP8 on the first micro-batch only).
struct Fp8Context {
  Fp8Options options;
  int64_t micro_batches = 1;
};
/// Whether `op` runs its GEMMs in FP8 under FP8 training: a linear split by tensor parallelism
/// as column or row (the transformer blocks' linears, Transformer Engine modules in Megatron-LM).
bool runs_in_fp8(const models::Op& op);
/// Bytes written per FP8 element for its scales: mxfp8 1/32 (E8M0 per 32 values), blockwise
/// 4/128 (fp32 per 128), per-tensor recipes 0.
double fp8_scale_bytes_per_element(Fp8Recipe recipe);

/// Times the mean load that the busiest expert-parallel rank computes and receives: the
/// capacity factor when one is set (experts are padded to capacity), else the load imbalance.
double moe_expert_load(const Plan& plan);

/// How many ranks share the op's per-sample work: tp for split ops (column, row, heads,
/// vocab), tp for replicated ops under sequence parallelism, else 1.
double op_divisor(const models::Op& op, int tp, bool sequence_parallel);
/// Parameters of `op` held by one tp rank of an expert-parallel group of `ep` ranks (expert
/// ops hold 1/ep of their experts).
double op_params_on_rank(const models::Op& op, int tp, int ep = 1);
/// The parameter tensors of an op on one rank, in elements: the weight, then the bias (a
/// linear's or conv's) or beta (a norm's) when it has one; they sum to op_params_on_rank.
/// Empty for an op without parameters.
std::vector<double> param_tensors_on_rank(const models::Op& op, int tp, int ep = 1);

/// `cp`: context-parallel degree (1: none); `ep`, `expert_load`: expert parallelism and the
/// busiest rank's load (moe_expert_load), see the file comment.
/// `fp8`: the FP8 options when `precision` is fp8 (nullptr: the defaults, one micro-batch).
OpCost op_cost(const models::Op& op, int64_t micro_batch, int tp, bool sequence_parallel, Precision precision,
               AttentionImpl attention, int cp = 1, int ep = 1, double expert_load = 1.0,
               const Fp8Context* fp8 = nullptr);
/// The FP8 context of a plan (its options and num_micro_batches).
Fp8Context fp8_context(const Plan& plan);
/// The same with every parallelism, routing and FP8 setting taken from `plan`.
OpCost op_cost(const models::Op& op, const Plan& plan, Precision precision);

}  // namespace trainplan::plan
