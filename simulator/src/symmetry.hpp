// Symmetry classes of a StepProgram: ranks that run the same program up to renaming of peers
// and groups. Symmetric fidelity simulates one representative per class (its lowest rank).
#pragma once

#include <vector>

#include "trainplan/plan/step_program.hpp"

namespace trainplan::sim::detail {

struct Symmetry {
  std::vector<int> rep_of;                    // rank -> representative rank
  std::vector<int> reps;                      // representatives, ascending
  std::vector<std::vector<int>> members;      // per representative (index as in reps), ascending
};

/// Every rank its own class.
Symmetry identity_symmetry(const plan::StepProgram& program);

/// Classes from program.symmetry_class (or, when empty, by (pp_rank, tp_rank)); each class is
/// checked member by member against its representative (same tasks, kinds, streams, deps,
/// FLOPs, bytes); throws Error naming the first difference.
Symmetry symmetric_classes(const plan::StepProgram& program);

}  // namespace trainplan::sim::detail
