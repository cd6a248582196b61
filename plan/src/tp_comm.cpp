#include "trainplan/plan/tp_comm.hpp"

#include "trainplan/plan/op_cost.hpp"

#include <algorithm>

namespace trainplan::plan {

std::vector<TpCollective> tp_collectives(const models::ModelGraph& graph, int unit, bool sp, int cp) {
  using models::OpKind;
  using models::TpSplit;
  const auto& ops = graph.ops();
  const auto& u = graph.units()[static_cast<size_t>(unit)];
  std::vector<TpCollective> fwd, bwd;
  auto elems_out = [](const models::Op& op) {
    if (op.m > 0 && op.n > 0) return static_cast<double>(op.m) * static_cast<double>(op.n);
    double e = 1.0;
    for (auto d : op.out_shape) e *= static_cast<double>(d);
    return e;
  };
  auto elems_in = [](const models::Op& op) { return static_cast<double>(op.m) * static_cast<double>(op.k); };

  // A column group: consecutive column-parallel (or vocab-parallel head) linears reading the
  // same input (QKV; SwiGLU gate + up). The first member carries the group's collectives.
  bool prev_column = false;
  for (int id : u.ops) {
    const auto& op = ops[static_cast<size_t>(id)];
    const bool column = op.kind == OpKind::linear && (op.tp_split == TpSplit::column || op.tp_split == TpSplit::vocab);
    if (column && !prev_column) {
      const double s = elems_in(op);
      if (sp) fwd.push_back({Phase::forward, CollectiveKind::all_gather, id, true, s});
      bwd.push_back({Phase::backward, sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, id, false, s});
    }
    prev_column = column;
    if (op.kind == OpKind::linear && op.tp_split == TpSplit::row) {
      const double s = elems_out(op);
      fwd.push_back({Phase::forward, sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, id, false, s});
      if (sp) bwd.push_back({Phase::backward, CollectiveKind::all_gather, id, true, s});
    }
    if (op.kind == OpKind::embedding && op.tp_split == TpSplit::vocab) {
      const double s = elems_out(op);
      fwd.push_back({Phase::forward, sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, id, false, s});
      if (sp) bwd.push_back({Phase::backward, CollectiveKind::all_gather, id, true, s});
    }
    if (op.kind == OpKind::loss && op.tp_split == TpSplit::vocab) {
      // Rows of the logits = tokens per sample.
      double tokens = op.m > 0 ? static_cast<double>(op.m) : graph.tokens_per_sample();
      fwd.push_back({Phase::forward, CollectiveKind::all_reduce, id, false, tokens});
      fwd.push_back({Phase::forward, CollectiveKind::all_reduce, id, false, 2.0 * tokens});
    }
  }
  // Backward runs the ops in reverse order.
  std::reverse(bwd.begin(), bwd.end());
  fwd.insert(fwd.end(), bwd.begin(), bwd.end());
  for (auto& c : fwd) c.elems_per_sample /= cp;  // a cp rank holds 1/cp of the tokens
  return fwd;
}

double tp_collective_element_bytes(const models::ModelGraph& graph, const TpCollective& c, Precision precision) {
  if (precision == Precision::fp8 && c.phase == Phase::forward && c.kind == CollectiveKind::all_gather && c.before_op && c.op >= 0 &&
      runs_in_fp8(graph.ops()[static_cast<size_t>(c.op)]))
    return 1.0;
  return bytes_per_element(precision);
}

}  // namespace trainplan::plan
