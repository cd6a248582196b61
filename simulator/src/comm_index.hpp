// comm_id -> the communication tasks that share it, over the whole program (every rank),
// with the matching rules of plan/step_program.hpp checked once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainplan/plan/step_program.hpp"

namespace trainplan::sim::detail {

struct TaskRef {
  int32_t rank = 0;
  int32_t task = 0;
};

class CommIndex {
 public:
  /// Indexes every send / recv / collective task. Throws Error (naming rank, task, comm_id)
  /// when a task has no comm_id, a send has no single matching recv with equal bytes and
  /// swapped peers, or a collective does not have exactly one task per group member with
  /// equal kind, bytes and group.
  explicit CommIndex(const plan::StepProgram& program);

  /// Dense slot of a comm_id (0 .. slots()-1).
  int slot(int64_t comm_id) const;
  int slots() const { return static_cast<int>(offsets_.size()) - 1; }
  std::span<const TaskRef> refs(int slot) const {
    return {refs_.data() + offsets_[static_cast<size_t>(slot)],
            static_cast<size_t>(offsets_[static_cast<size_t>(slot) + 1] - offsets_[static_cast<size_t>(slot)])};
  }

 private:
  void validate(const plan::StepProgram& program) const;

  bool dense_ = false;
  int64_t min_id_ = 0;
  std::vector<int32_t> slot_of_id_;  // dense: comm_id - min_id -> slot (-1: none)
  std::vector<int64_t> ids_;         // sparse: sorted unique comm ids (slot = position)
  std::vector<int32_t> offsets_;     // slots + 1
  std::vector<TaskRef> refs_;        // grouped by slot, rank-major order within a slot
};

/// Whether a task kind is communication.
inline bool is_comm(plan::TaskKind k) {
  return k == plan::TaskKind::send || k == plan::TaskKind::recv || k == plan::TaskKind::collective;
}

}  // namespace trainplan::sim::detail
