// Per-op costs on one tp rank. See op_cost.hpp.
#include "trainplan/plan/op_cost.hpp"

#include <algorithm>

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

double op_params_on_rank(const models::Op& op, int tp) { return splits_params(op.tp_split) ? op.params / tp : op.params; }

OpCost op_cost(const models::Op& op, int64_t micro_batch, int tp, bool sp, Precision prec, AttentionImpl attention, int cp) {
  TP_ASSERT(cp >= 1);
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
  c.params = op_params_on_rank(op, tp);

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
    const double ss_h = s * s * heads * d / cp;        // per sample, all heads: this rank's 1/cp of the scores
    const double q = sq * heads * d;                   // local queries
    const double kv_all = 2.0 * s * kv * d;            // K and V of the whole sequence (gathered when cp > 1)
    const double o = sq * heads * d;                   // the local context
    const double scale = b / div;                      // this rank's share of the micro-batch
    if (cp > 1) c.cp_kv_bytes = kv_all * elem * scale;
    c.gemm_m = static_cast<int64_t>(b * heads / div * sq);
    c.gemm_n = static_cast<int64_t>(s);
    c.gemm_k = op.head_dim;
    if (is_fused_attention(attention)) {
      const double causal = op.causal ? 0.5 : 1.0;     // masked blocks are skipped
      c.fused_attention = true;
      c.fused_attention_v1 = attention == AttentionImpl::flash1;
      // Under cp the K and V of the whole sequence are gathered and the local queries (balanced
      // chunks) still see half of it on average under a causal mask.
      c.attention_keys = s * causal;
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
  return c;
}

}  // namespace trainplan::plan
