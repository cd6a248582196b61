#include "builder.hpp"

#include <numeric>

#include "trainplan/core/error.hpp"

namespace trainplan::models::detail {

double elems(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

void GraphBuilder::begin_unit(std::string name) {
  Unit u;
  u.index = static_cast<int>(units_.size());
  u.name = std::move(name);
  units_.push_back(std::move(u));
}

int GraphBuilder::add(Op op) {
  TP_ASSERT_MSG(!units_.empty(), "begin_unit before add");
  op.id = static_cast<int>(ops_.size());
  op.unit = units_.back().index;
  for (int in : op.inputs) TP_ASSERT(in >= 0 && in < op.id);
  units_.back().ops.push_back(op.id);
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

ModelGraph GraphBuilder::finish() {
  std::vector<std::pair<int, int>> edges;
  for (auto& u : units_) {
    TP_ASSERT_MSG(!u.ops.empty(), "every unit has at least one op");
    u.output_op = u.ops.back();
    for (int id : u.ops) {
      const Op& o = ops_[static_cast<size_t>(id)];
      u.params += o.params;
      u.flops_fwd += o.flops_fwd;
      u.flops_bwd += o.flops_bwd;
      u.saved_elems += o.saved_elems;
      u.saved_mask_bytes += o.saved_mask_bytes;
      for (int in : o.inputs) {
        const Op& producer = ops_[static_cast<size_t>(in)];
        TP_ASSERT_MSG(producer.unit == u.index ||
                          (producer.unit == u.index - 1 && units_[static_cast<size_t>(u.index - 1)].output_op == in),
                      "an op reads only its unit and the previous unit's output");
        edges.emplace_back(in, id);
      }
    }
  }
  for (size_t i = 0; i + 1 < units_.size(); ++i)
    units_[i].output_elems = elems(ops_[static_cast<size_t>(units_[i].output_op)].out_shape);
  units_.back().output_elems = 0;  // the loss ends the model
  return ModelGraph(std::move(spec_), std::move(ops_), std::move(units_), std::move(edges));
}

Op make_linear(std::string name, TpSplit tp, int x, int64_t m, int64_t k, int64_t n, bool bias) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::linear;
  op.tp_split = tp;
  if (x >= 0) op.inputs = {x};
  const double md = static_cast<double>(m), kd = static_cast<double>(k), nd = static_cast<double>(n);
  const bool input_grad = x >= 0;
  op.flops_fwd = 2 * md * nd * kd;
  op.flops_bwd = (input_grad ? 4 : 2) * md * nd * kd;
  op.params = kd * nd + (bias ? nd : 0);
  op.has_bias = bias;
  op.mem_elems_fwd = md * kd + kd * nd + md * nd;
  op.mem_elems_bwd = md * nd + md * kd + 2 * kd * nd + (input_grad ? md * kd : 0);
  op.m = m;
  op.n = n;
  op.k = k;
  op.out_shape = {m, n};
  op.weight_shape = {k, n};
  return op;
}

Op make_embedding(std::string name, TpSplit tp, BatchInput input, int64_t rows, int64_t table_rows, int64_t h) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::embedding;
  op.tp_split = tp;
  op.batch_input = input;
  op.params = static_cast<double>(table_rows) * static_cast<double>(h);
  const double out = static_cast<double>(rows) * static_cast<double>(h);
  op.mem_elems_fwd = 2 * out;
  op.mem_elems_bwd = 2 * out;
  op.out_shape = {rows, h};
  op.weight_shape = {table_rows, h};
  return op;
}

Op make_norm(std::string name, OpKind kind, int x, std::vector<int64_t> shape, int64_t channels, bool bias, double eps) {
  TP_ASSERT(kind == OpKind::layernorm || kind == OpKind::rmsnorm || kind == OpKind::batchnorm);
  const ElementwiseCost cost = kind == OpKind::rmsnorm     ? kRmsNormCost
                               : kind == OpKind::batchnorm ? kBatchNormCost
                                                           : kLayerNormCost;
  Op op = make_elementwise(std::move(name), kind, kind == OpKind::batchnorm ? TpSplit::none : TpSplit::replicated,
                           {x}, std::move(shape), cost);
  op.has_bias = bias;
  op.norm_eps = eps;
  op.params = static_cast<double>(channels) * (bias ? 2 : 1);
  op.weight_shape = {channels};
  op.mem_elems_fwd += op.params;
  op.mem_elems_bwd += 2 * op.params;
  return op;
}

Op make_elementwise(std::string name, OpKind kind, TpSplit tp, std::vector<int> inputs, std::vector<int64_t> shape,
                    ElementwiseCost cost) {
  Op op;
  op.name = std::move(name);
  op.kind = kind;
  op.tp_split = tp;
  const double n = elems(shape);
  const double reads = static_cast<double>(inputs.size());
  op.inputs = std::move(inputs);
  op.flops_fwd = cost.fwd * n;
  op.flops_bwd = cost.bwd * n;
  // Forward reads every input and writes the output; backward reads the output gradient and
  // what was saved, and writes one gradient per input.
  op.mem_elems_fwd = (reads + 1) * n;
  op.mem_elems_bwd = (1 + 2 * reads) * n;
  op.out_shape = std::move(shape);
  return op;
}

Op make_activation(std::string name, Activation act, TpSplit tp, int x, std::vector<int64_t> shape) {
  ElementwiseCost cost = kReluCost;
  switch (act) {
    case Activation::gelu: cost = kGeluCost; break;
    case Activation::swiglu: cost = kSwigluCost; break;
    case Activation::geglu: cost = kGegluCost; break;
    case Activation::relu: break;
  }
  Op op = make_elementwise(std::move(name), OpKind::activation, tp, {x}, std::move(shape), cost);
  op.activation = act;
  if (is_gated(act)) {  // reads [gate | up], twice the output
    const double n = elems(op.out_shape);
    op.mem_elems_fwd = 3 * n;
    op.mem_elems_bwd = 5 * n;
  }
  return op;
}

Op make_dropout(std::string name, TpSplit tp, int x, std::vector<int64_t> shape, double p) {
  Op op = make_elementwise(std::move(name), OpKind::dropout, tp, {x}, std::move(shape), kDropoutCost);
  op.dropout_p = p;
  return op;
}

Op make_residual(std::string name, TpSplit tp, int a, int b, std::vector<int64_t> shape) {
  return make_elementwise(std::move(name), OpKind::residual, tp, {a, b}, std::move(shape), kResidualCost);
}

Op make_loss(std::string name, TpSplit tp, int x, int64_t rows, int64_t classes) {
  Op op = make_elementwise(std::move(name), OpKind::loss, tp, {x}, {rows, classes}, kCrossEntropyCost);
  op.batch_input = BatchInput::labels;
  op.out_shape = {1};
  const double logits = static_cast<double>(rows) * static_cast<double>(classes);
  op.mem_elems_fwd = 2 * logits;
  op.mem_elems_bwd = 2 * logits;
  return op;
}

void set_saved(Op& op, double elems_saved, double mask_bytes, bool tp_sharded, bool dropped_by_selective) {
  op.saved_elems = elems_saved;
  op.saved_mask_bytes = mask_bytes;
  op.saved_tp_sharded = tp_sharded;
  op.dropped_by_selective_recompute = dropped_by_selective;
}

}  // namespace trainplan::models::detail
