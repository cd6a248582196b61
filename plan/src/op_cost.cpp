// Per-op costs on one tp rank. See op_cost.hpp.
#include "trainplan/plan/op_cost.hpp"

#include <algorithm>
#include <cmath>

#include "trainplan/core/error.hpp"

namespace trainplan::plan {
namespace {

using models::OpKind;
using models::TpSplit;

bool splits_params(TpSplit s) {
  return s == TpSplit::column || s == TpSplit::row || s == TpSplit::heads || s == TpSplit::vocab;
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

double op_divisor(const models::Op& op, int tp, bool sp) {
  if (splits_params(op.tp_split)) return tp;
  if (op.tp_split == TpSplit::replicated && sp) return tp;
  return 1;
}

double op_params_on_rank(const models::Op& op, int tp, int ep) {
  const double p = splits_params(op.tp_split) ? op.params / tp : op.params;
  return op.expert ? p / ep : p;
}

std::vector<double> param_tensors_on_rank(const models::Op& op, int tp, int ep) {
  const double total = op_params_on_rank(op, tp, ep);
  if (!(total > 0)) return {};
  double bias = 0;
  if (op.has_bias && !op.weight_shape.empty())
    bias = static_cast<double>(op.kind == OpKind::conv2d ? op.weight_shape.front() : op.weight_shape.back());
  bias *= total / op.params;  // split like the op's parameters
  if (!(bias > 0 && bias < total)) return {total};
  return {total - bias, bias};
}

bool runs_in_fp8(const models::Op& op) {
  return op.kind == OpKind::linear && (op.tp_split == TpSplit::column || op.tp_split == TpSplit::row);
}

double fp8_scale_bytes_per_element(Fp8Recipe recipe) {
  // MXFP8: one E8M0 (1-byte) scale per 32 consecutive values (TE "MXFP8" recipe page; OCP MX
  // spec v1.0). Blockwise: one fp32 scale per 1x128 block of activations and gradients
  // (128x128 for weights; TE "FP8 Blockwise Scaling", DeepSeek-V3 report section 3.3.1).
  switch (recipe) {
    case Fp8Recipe::mxfp8: return 1.0 / 32.0;
    case Fp8Recipe::blockwise: return 4.0 / 128.0;
    case Fp8Recipe::delayed:
    case Fp8Recipe::current: return 0;
  }
  return 0;
}

Fp8Context fp8_context(const Plan& plan) { return Fp8Context{plan.fp8, std::max<int64_t>(1, plan.num_micro_batches)}; }

namespace {

// The FP8 changes of a block linear (op_cost.hpp, "FP8"). `c` holds the 16-bit costs.
// `groups`: GEMMs of this shape per micro-batch (an expert op: the rank's num_experts / ep
// experts, each with its own rows and weight; else 1).
void apply_fp8(const models::Op& op, const Fp8Context& fp8, double elem, double groups, OpCost& c) {
  const double m = static_cast<double>(c.gemm_m), n = static_cast<double>(c.gemm_n), k = static_cast<double>(c.gemm_k);
  const Fp8Recipe recipe = fp8.options.recipe;
  const double scales = fp8_scale_bytes_per_element(recipe);
  // Quantizing a 16-bit tensor of e elements: read it (twice with current scaling: the amax
  // pass, then the cast), write the row-wise and the column-wise FP8 copies with their scales.
  const double reads = recipe == Fp8Recipe::current ? 2.0 : 1.0;
  auto quantize = [&](double e) { return groups * (reads * e * elem + 2.0 * e * (1.0 + scales)); };
  // Delayed scaling: each tensor's amax history is read and rolled (written) at every update.
  const double history = recipe == Fp8Recipe::delayed ? 2.0 * 4.0 * fp8.options.amax_history : 0.0;
  // The weight: once per step (the first micro-batch's cast is cached), from 16-bit weights or,
  // with FP8 parameters, only the transposed copy from the FP8 weight (read 1, write 1).
  const double weight = fp8.options.fp8_params ? groups * 2.0 * k * n : quantize(k * n);
  c.fp8_gemm = true;
  c.fp8_cast_fwd_bytes = quantize(m * k) + weight / static_cast<double>(fp8.micro_batches) + 2.0 * history;
  c.fp8_cast_bwd_bytes = quantize(m * n) + history;
  c.serial_mem_fwd_bytes += c.fp8_cast_fwd_bytes;
  c.serial_mem_bwd_bytes += c.fp8_cast_bwd_bytes;
  c.kernels_fwd += recipe == Fp8Recipe::current ? 2 : 1;
  c.kernels_bwd += recipe == Fp8Recipe::current ? 2 : 1;
  // The GEMMs read FP8 operands and write 16-bit results: forward X, W in, Y out; backward dgrad
  // (dY, W^T in, dX out) and wgrad (X^T, dY^T in, dW accumulated: read + write).
  c.mem_fwd_bytes = groups * ((m * k + k * n) + m * n * elem);
  c.mem_bwd_bytes = groups * ((2.0 * m * n + k * n + m * k) + (m * k + 2.0 * k * n) * elem);
  // TE saves the quantized input for wgrad (the column-wise FP8 copy; linear.py keeps only the
  // usage the backward needs): the linear's own input is 1 byte per element (+ scales) instead
  // of `elem`; what else the op counts (attn.proj: Q, K, V) stays in 16 bits.
  const double own_input = std::min(op.saved_elems, static_cast<double>(op.m) * static_cast<double>(op.k));
  if (own_input > 0 && c.saved_bytes > 0) {
    const double full = (op.saved_elems * elem + op.saved_mask_bytes);
    const double fp8_saved = full - own_input * (elem - 1.0 - scales);
    c.saved_bytes *= fp8_saved / full;
  }
}

}  // namespace

double moe_expert_load(const Plan& plan) {
  return plan.moe_capacity_factor > 0 ? plan.moe_capacity_factor : plan.moe_load_imbalance;
}

OpCost op_cost(const models::Op& op, const Plan& plan, Precision precision) {
  const Fp8Context fp8 = fp8_context(plan);
  return op_cost(op, plan.micro_batch, plan.tp, plan.sequence_parallel, precision, plan.attention, plan.cp, plan.ep,
                 moe_expert_load(plan), &fp8);
}

OpCost op_cost(const models::Op& op, int64_t micro_batch, int tp, bool sp, Precision prec, AttentionImpl attention, int cp, int ep,
               double expert_load, const Fp8Context* fp8) {
  TP_ASSERT(cp >= 1 && ep >= 1 && expert_load >= 1.0);
  OpCost c;
  c.op = op.id;
  c.op_kind = static_cast<int>(op.kind);
  const double b = static_cast<double>(micro_batch);
  const double elem = bytes_per_element(prec);
  const double div = op_divisor(op, tp, sp);
  // Every per-sample number is per token: a cp rank holds 1/cp of the tokens.
  const double share = b / div / cp;
  c.flops_fwd = op.flops_fwd * share;
  c.flops_bwd = op.flops_bwd * share;
  c.mem_fwd_bytes = op.mem_elems_fwd * elem * share;
  c.mem_bwd_bytes = op.mem_elems_bwd * elem * share;
  if (op.is_matmul() && op.m > 0 && op.n > 0 && op.k > 0) {
    c.gemm_m = ceil_div(op.m * micro_batch, cp);
    c.gemm_n = op.n;
    c.gemm_k = op.k;
    if (op.tp_split == TpSplit::column || op.tp_split == TpSplit::vocab) c.gemm_n = ceil_div(op.n, tp);
    if (op.tp_split == TpSplit::row) c.gemm_k = ceil_div(op.k, tp);
    // Replicated matmuls under sequence parallelism see 1/tp of the tokens.
    if (op.tp_split == TpSplit::replicated && sp) c.gemm_m = ceil_div(c.gemm_m, tp);
    c.kernels_bwd = 2;  // input and weight gradients
  }
  double saved = (op.saved_elems * elem + op.saved_mask_bytes) * b;
  if (sp || op.saved_tp_sharded) saved /= tp;
  c.saved_bytes = saved / cp;
  c.recomputed_by_selective = op.dropped_by_selective_recompute;
  c.params = op_params_on_rank(op, tp, ep);
  if (op.expert) {
    // The busiest rank's routed copies: load x the balanced work (see the file comment).
    c.flops_fwd *= expert_load;
    c.flops_bwd *= expert_load;
    // Traffic: the routed rows x load, plus the weights of the rank's num_experts / ep experts
    // read once per micro-batch (written once more with their gradients in backward); the
    // graph counts all E experts' weights per sample.
    const double weights = op.params / div;
    const double rows_fwd = std::max(0.0, op.mem_elems_fwd - op.params) * share * expert_load;
    const double rows_bwd = std::max(0.0, op.mem_elems_bwd - 2.0 * op.params) * share * expert_load;
    c.mem_fwd_bytes = (rows_fwd + weights / ep) * elem;
    c.mem_bwd_bytes = (rows_bwd + 2.0 * weights / ep) * elem;
    c.saved_bytes *= expert_load;
    if (c.gemm_m > 0 && op.num_experts > 0) {
      // One expert's rows: the rank's routed copies spread over its num_experts / ep experts.
      const double rows = static_cast<double>(op.m) * b / cp * ep / static_cast<double>(op.num_experts) * expert_load;
      c.gemm_m = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(rows)));
    }
  }
  if (ep > 1 && (op.kind == OpKind::moe_dispatch || op.kind == OpKind::moe_combine) && !op.out_shape.empty()) {
    // Routed copies {s top_k, h}: the dispatch's output, the combine's input.
    double elems = 1.0;
    for (int64_t d : op.out_shape) elems *= static_cast<double>(d);
    if (op.kind == OpKind::moe_combine) elems *= static_cast<double>(op.top_k);
    c.ep_a2a_bytes = elems * elem * b / cp * expert_load;
  }

  if (op.kind == OpKind::loss) {
    // Cross-entropy as PyTorch and Megatron-LM run it: the 16-bit logits are upcast to fp32
    // (read 2 + write 4 bytes), log-softmax reads them twice (max and sum of exponentials) and
    // writes once (12); backward materializes the dense gradient of the log-probabilities
    // (write + read, 8), runs the softmax backward (read 2 x 4, write 4) and downcasts (read 4 +
    // write 2). In fp32 training the casts disappear. Bytes per logit, on this rank's vocab shard.
    const double logits = op.mem_elems_fwd / 2.0 * share;  // the graph counts one read + one write
    const bool mixed = is_mixed(prec);
    c.mem_fwd_bytes = logits * (mixed ? 18.0 : 12.0);
    c.mem_bwd_bytes = logits * (mixed ? 26.0 : 20.0);
    c.kernels_fwd = mixed ? 3 : 2;
    c.kernels_bwd = mixed ? 4 : 3;
  }
  if (op.kind == OpKind::attention && !op.out_shape.empty()) {
    const double s = static_cast<double>(op.out_shape.front());
    const double sq = s / cp;                          // this cp rank's queries
    const double heads = static_cast<double>(op.heads), kv = static_cast<double>(op.kv_heads > 0 ? op.kv_heads : op.heads);
    const double d = static_cast<double>(op.head_dim);
    // Keys per query: the sequence, or a sliding-window layer's window.
    const double keys = op.window > 0 ? std::min(s, static_cast<double>(op.window)) : s;
    const double ss_h = s * keys * heads * d / cp;     // per sample, all heads: this rank's 1/cp of the scores
    const double q = sq * heads * d;                   // local queries
    const double kv_all = 2.0 * s * kv * d;            // K and V of the whole sequence (gathered when cp > 1)
    const double o = sq * heads * d;                   // the local context
    const double scale = b / div;                      // this rank's share of the micro-batch
    if (cp > 1) c.cp_kv_bytes = kv_all * elem * scale;
    c.gemm_m = static_cast<int64_t>(b * heads / div * sq);
    c.gemm_n = static_cast<int64_t>(keys);
    c.gemm_k = op.head_dim;
    if (is_fused_attention(attention)) {
      // Masked blocks are skipped: causal attention computes half the s x s scores; a causal
      // window of w keys computes s w - w^2 / 2 of its s w (1 - w / 2s; 1/2 when w = s).
      const double causal = op.causal ? 1.0 - keys / (2.0 * s) : 1.0;
      c.fused_attention = true;
      c.fused_attention_v1 = attention == AttentionImpl::flash1;
      // The mean keys a query visits: the scores per query (the whole sequence's K and V are
      // gathered under cp, and balanced chunks keep the causal half on every rank).
      c.attention_keys = keys * causal;
      c.attention_causal = op.causal;
      c.flops_fwd = 4.0 * ss_h * causal * scale;
      c.flops_bwd = 10.0 * ss_h * causal * scale;      // recomputes QK^T (FlashAttention-2)
      const double lse = heads * sq * 4.0;             // fp32 log-sum-exp per head and local token
      c.mem_fwd_bytes = (q + kv_all + o) * elem * scale + lse * scale;
      c.mem_bwd_bytes = (2.0 * (q + kv_all) + 2.0 * o) * elem * scale + lse * scale;
      c.serial_mem_fwd_bytes = c.serial_mem_bwd_bytes = 0;
      c.kernels_fwd = 1;
      c.kernels_bwd = 2;                               // preprocessing (dO·O) + the backward kernel
      // The fused kernel's tensor-core work: per head, (s x d) x (d x s) tiles with K = head_dim.
      c.saved_bytes = lse * scale;
      c.recomputed_by_selective = false;
    } else {
      // Batched QK^T and AV (K = head_dim), plus separate passes over the scores (the graph's
      // score traffic beyond Q, K, V and the context, 1/cp of it on a cp rank).
      const double qkv_graph = s * (heads + 2.0 * kv) * d, o_graph = s * heads * d;
      c.mem_fwd_bytes = (q + kv_all + o) * elem * scale;
      c.mem_bwd_bytes = 2.0 * (q + kv_all + o) * elem * scale;
      c.serial_mem_fwd_bytes = std::max(0.0, op.mem_elems_fwd - qkv_graph - o_graph) * elem * scale / cp;
      c.serial_mem_bwd_bytes = std::max(0.0, op.mem_elems_bwd - 2.0 * (qkv_graph + o_graph)) * elem * scale / cp;
      const int passes = op.dropout_p > 0 ? 2 : 1;     // scale/mask/softmax (+ dropout)
      c.kernels_fwd = 2 + passes;
      c.kernels_bwd = 4 + passes;
    }
  }
  if (prec == Precision::fp8 && runs_in_fp8(op) && c.gemm_m > 0) {
    const double groups = op.expert && op.num_experts > 0 ? static_cast<double>(op.num_experts) / ep : 1.0;
    apply_fp8(op, fp8 ? *fp8 : Fp8Context{}, elem, groups, c);
  }
  return c;
}

}  // namespace trainplan::plan
