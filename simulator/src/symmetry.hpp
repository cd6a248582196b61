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
  /// Ranks lowered as a header only (LowerOptions::representatives_only): no tasks, while
  /// their representative has tasks. They run their representative's program renamed by a
  /// data-parallel (and context-parallel) translation (see rename()).
  std::vector<char> header_only;
  bool any_header_only = false;
  /// Every rank is a representative or header-only (a representatives-only program).
  bool only_representatives_have_tasks = false;
};

/// The rank that `x` becomes when the program of `rep` is renamed to that of `member` (two
/// ranks of one class: same tp and pp rank): dp_rank shifted by dp(member) - dp(rep) modulo
/// dp, cp_rank likewise modulo cp, tp and pp rank kept.
int rename(const plan::StepProgram& program, int rep, int member, int x);

/// Every rank its own class.
Symmetry identity_symmetry(const plan::StepProgram& program);

/// Classes from program.symmetry_class (or, when empty, by (pp_rank, tp_rank)); the
/// representative is the lowest member with tasks. Each member with tasks is checked against
/// its representative (same tasks, kinds, streams, deps, FLOPs, bytes); members without tasks
/// are header-only and must share the representative's tp and pp rank in a program whose
/// rank layout is rank_of(dp, tp, pp, cp). Throws Error naming the first difference.
Symmetry symmetric_classes(const plan::StepProgram& program);

}  // namespace trainplan::sim::detail
