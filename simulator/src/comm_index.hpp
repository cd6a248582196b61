// comm_id -> the communication tasks that share it, over the whole program (every rank),
// with the matching rules of plan/step_program.hpp checked once. Each entry carries what
// matching and instance building need, so neither touches the Task structs again.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainplan/plan/step_program.hpp"

namespace trainplan::sim::detail {

/// One communication task.
struct CommItem {
  int64_t comm_id = -1;
  int32_t rank = 0;
  int32_t task = 0;
  int32_t group = -1;  // collective
  int32_t peer = -1;   // send / recv
  double bytes = 0;
  plan::TaskKind kind = plan::TaskKind::collective;
  plan::CollectiveKind collective = plan::CollectiveKind::all_reduce;
  plan::CommPurpose purpose = plan::CommPurpose::none;
  /// A gradient collective that moves no op's gradients: the gradient norm's scalar all-reduce
  /// (plan::lower; the executor tells it the same way), a plain NCCL call whose algorithm NCCL's
  /// tuner picks, not the gradient reduction the plan's dp algorithm sets.
  bool scalar = false;

  static CommItem of(int rank, const plan::Task& t) {
    return {t.comm_id, rank, t.id, t.group, t.peer, t.bytes, t.kind, t.collective, t.purpose,
            t.role == plan::TensorRole::grads && t.ops.empty() && t.op < 0};
  }
};

class CommIndex {
 public:
  /// The communication tasks of every rank, in rank order then task order. Throws Error when
  /// one has no comm_id.
  static std::vector<CommItem> collect(const plan::StepProgram& program);

  /// Indexes `items` (all communication tasks of `program`, in rank order then task order).
  /// Throws Error (naming rank, task, comm_id) when a send has no single matching recv with
  /// equal bytes and swapped peers, or a collective does not have exactly one task per group
  /// member with equal kind, bytes and group. Group members flagged in `header_only` (ranks
  /// lowered without tasks) may be missing from a collective. refs(slot) keep the items' order.
  CommIndex(const plan::StepProgram& program, std::vector<CommItem> items,
            const std::vector<char>* header_only = nullptr);

  /// Dense slot of a comm_id (0 .. slots()-1), -1 if unknown.
  int slot(int64_t comm_id) const;
  int slots() const { return static_cast<int>(offsets_.size()) - 1; }
  std::span<const CommItem> refs(int slot) const {
    return {items_.data() + offsets_[static_cast<size_t>(slot)],
            static_cast<size_t>(offsets_[static_cast<size_t>(slot) + 1] - offsets_[static_cast<size_t>(slot)])};
  }

 private:
  void validate(const plan::StepProgram& program, const std::vector<char>* header_only) const;

  bool dense_ = false;
  int64_t min_id_ = 0;
  std::vector<int32_t> slot_of_id_;  // dense: comm_id - min_id -> slot (-1: none)
  std::vector<int64_t> ids_;         // sparse: sorted unique comm ids (slot = position)
  std::vector<int32_t> offsets_;     // slots + 1
  std::vector<CommItem> items_;      // grouped by slot, rank-major order within a slot
};

/// Whether a task kind is communication.
inline bool is_comm(plan::TaskKind k) {
  return k == plan::TaskKind::send || k == plan::TaskKind::recv || k == plan::TaskKind::collective;
}

}  // namespace trainplan::sim::detail
