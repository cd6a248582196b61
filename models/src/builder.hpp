// Building blocks of build_graph: op constructors with their FLOP, memory-traffic and
// parameter formulas, and the unit bookkeeping. Private to the models library.
//
// Elementwise FLOPs per element (forward / backward) are the constants below; they are
// small next to the matmuls and documented in models/README.md.
#pragma once

#include <string>
#include <vector>

#include "trainplan/models/model.hpp"

namespace trainplan::models::detail {

struct ElementwiseCost {
  double fwd;  // FLOPs per element forward
  double bwd;  // FLOPs per element backward
};
inline constexpr ElementwiseCost kLayerNormCost{5, 10};  // mean, variance, normalize, scale, shift
inline constexpr ElementwiseCost kRmsNormCost{4, 8};     // square-mean, normalize, scale
inline constexpr ElementwiseCost kBatchNormCost{5, 10};
inline constexpr ElementwiseCost kGeluCost{8, 16};       // erf/tanh form; backward recomputes it
inline constexpr ElementwiseCost kReluCost{1, 1};
inline constexpr ElementwiseCost kSwigluCost{5, 10};     // per output element: silu(g) * u
inline constexpr ElementwiseCost kGegluCost{9, 18};      // per output element: gelu(g) * u
inline constexpr ElementwiseCost kSoftcapCost{3, 3};     // per score / logit: divide, tanh, multiply
inline constexpr ElementwiseCost kResidualCost{1, 1};    // add; backward adds at the fork
inline constexpr ElementwiseCost kDropoutCost{2, 1};     // draw + scale; backward scale
inline constexpr ElementwiseCost kSoftmaxCost{5, 4};     // per score: scale, max, exp, sum, divide
inline constexpr ElementwiseCost kRotaryCost{3, 3};      // per Q/K element: 2 multiplies, 1 add
inline constexpr ElementwiseCost kCrossEntropyCost{5, 2};  // per logit: softmax + log; p - onehot
inline constexpr ElementwiseCost kMoeCombineCost{2, 4};  // per routed element: w y + sum; w dy, dot(dout, y)

/// Accumulates ops into units and produces the ModelGraph.
class GraphBuilder {
 public:
  explicit GraphBuilder(ModelSpec spec) : spec_(std::move(spec)) {}

  /// Starts the next unit; ops added afterwards belong to it.
  void begin_unit(std::string name);
  /// Adds `op` to the current unit, assigning its id; returns the id.
  int add(Op op);
  /// The op with this id (to read its shape while building).
  const Op& op(int id) const { return ops_[static_cast<size_t>(id)]; }
  /// Finishes: unit sums, output ops and sizes, edges from op inputs. Checks that each
  /// op reads only its own unit and the previous unit's output op.
  ModelGraph finish();

 private:
  ModelSpec spec_;
  std::vector<Op> ops_;
  std::vector<Unit> units_;
};

/// Elements of a shape.
double elems(const std::vector<int64_t>& shape);

/// y = x W (+ b): x {m, k} from op `x` (or from the batch when x < 0: no input gradient).
Op make_linear(std::string name, TpSplit tp, int x, int64_t m, int64_t k, int64_t n, bool bias);
/// Embedding lookup of `rows` ids from `input` in a table {table_rows, h}.
Op make_embedding(std::string name, TpSplit tp, BatchInput input, int64_t rows, int64_t table_rows, int64_t h);
/// layernorm / rmsnorm / batchnorm over `x` with out_shape `shape`; `channels` learnable scales.
Op make_norm(std::string name, OpKind kind, int x, std::vector<int64_t> shape, int64_t channels, bool bias, double eps);
/// Elementwise op on `inputs` with output `shape`.
Op make_elementwise(std::string name, OpKind kind, TpSplit tp, std::vector<int> inputs, std::vector<int64_t> shape,
                    ElementwiseCost cost);
Op make_activation(std::string name, Activation act, TpSplit tp, int x, std::vector<int64_t> shape);
Op make_dropout(std::string name, TpSplit tp, int x, std::vector<int64_t> shape, double p);
Op make_residual(std::string name, TpSplit tp, int a, int b, std::vector<int64_t> shape);
/// Cross-entropy of `rows` x `classes` logits from op `x`.
Op make_loss(std::string name, TpSplit tp, int x, int64_t rows, int64_t classes);

/// Saved-activation attributes, set after construction.
void set_saved(Op& op, double elems, double mask_bytes, bool tp_sharded, bool dropped_by_selective = false);

}  // namespace trainplan::models::detail
