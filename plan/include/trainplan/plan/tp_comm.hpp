// File: trainplan/plan/tp_comm.hpp
//
// The tensor-parallel collectives of one layer unit (Megatron-LM rules), shared by the
// analytical estimate and the lowering so both count the same traffic.
//
//   for (const auto& c : plan::tp_collectives(graph, unit, /*sequence_parallel=*/true))
//     // c.phase, c.kind, c.op, c.before_op, c.elems_per_sample
//
// Without sequence parallelism: a row-parallel linear (attention output, MLP down) all-reduces
// its output in forward; a group of column-parallel linears reading the same input (QKV, MLP
// up/gate, LM head) all-reduces the input gradient in backward; the vocab-parallel embedding
// all-reduces its output in forward; the vocab-parallel cross-entropy all-reduces the logit max
// (s elements) and then the target logit and sum of exponentials (2s elements) in forward.
// With sequence parallelism the forward all-reduce after a row-parallel linear becomes a
// reduce-scatter, the column group's input is all-gathered first, and backward mirrors it
// (all-gather of the output gradient before a row-parallel linear, reduce-scatter of the input
// gradient after a column group); the embedding reduce-scatters its output.
// Sizes are the whole tensor S per sample at tp = 1 (nccl-tests "size" for all-reduce; the
// gathered size for all-gather; the input size for reduce-scatter), of the rank's 1/cp of the
// tokens under context parallelism.
#pragma once

#include <vector>

#include "trainplan/models/model.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan {

struct TpCollective {
  Phase phase = Phase::forward;   // forward or backward
  CollectiveKind kind = CollectiveKind::all_reduce;
  int op = -1;                    // op it belongs to
  /// Forward: true if it runs before the op (all-gather of a column group's input), false if
  /// after (row output). Backward: true if it runs before the op's backward (all-gather of the
  /// output gradient), false if after (input gradient of a column group).
  bool before_op = false;
  double elems_per_sample = 0;
};

/// Collectives of unit `unit` for tp > 1, in program order within each phase (forward ones in
/// forward op order; backward ones in backward (reverse) op order). `cp`: context-parallel
/// degree (every size is divided by it).
std::vector<TpCollective> tp_collectives(const models::ModelGraph& graph, int unit, bool sequence_parallel, int cp = 1);

/// Bytes per element a collective moves: the training precision's, except under fp8 the
/// sequence-parallel all-gather of an FP8 linear's input (forward), which Transformer Engine
/// runs on the quantized tensor (layernorm_linear.py / linear.py: gather_along_first_dim with
/// the input quantizer): 1 byte. Gradients (reduce-scatters, backward gathers) stay 16-bit.
double tp_collective_element_bytes(const models::ModelGraph& graph, const TpCollective& c, Precision precision);

}  // namespace trainplan::plan
