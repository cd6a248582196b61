#include "comm_index.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::sim::detail {
namespace {

Error comm_error(const plan::StepProgram& p, const CommItem& r, const std::string& what) {
  const plan::Task& t = p.ranks[static_cast<size_t>(r.rank)].tasks[static_cast<size_t>(r.task)];
  return Error("rank " + std::to_string(r.rank) + " task " + std::to_string(r.task) + " (\"" + t.label + "\") comm_id " +
               std::to_string(r.comm_id) + ": " + what)
      .hint("every send needs one recv with the same comm_id, bytes and swapped peers; every collective one "
            "task per group member (plan::check_program finds these)");
}

}  // namespace

std::vector<CommItem> CommIndex::collect(const plan::StepProgram& program) {
  std::vector<CommItem> items;
  for (const auto& rp : program.ranks)
    for (const auto& t : rp.tasks) {
      if (!is_comm(t.kind)) continue;
      items.push_back(CommItem::of(rp.rank, t));
      if (t.comm_id < 0) throw comm_error(program, items.back(), "communication task without a comm_id");
    }
  return items;
}

CommIndex::CommIndex(const plan::StepProgram& program, std::vector<CommItem> items, const std::vector<char>* header_only) {
  if (items.empty()) {
    offsets_.push_back(0);
    return;
  }
  int64_t lo = items[0].comm_id, hi = items[0].comm_id;
  for (const CommItem& it : items) lo = std::min(lo, it.comm_id), hi = std::max(hi, it.comm_id);
  // Ids are usually dense (0 .. n): counting sort; otherwise a comparison sort.
  dense_ = static_cast<uint64_t>(hi - lo) <= 4 * static_cast<uint64_t>(items.size()) + 1024;
  if (dense_) {
    min_id_ = lo;
    const size_t range = static_cast<size_t>(hi - lo) + 1;
    std::vector<int32_t> count(range, 0);
    for (const CommItem& it : items) ++count[static_cast<size_t>(it.comm_id - lo)];
    slot_of_id_.assign(range, -1);
    offsets_.push_back(0);
    for (size_t i = 0; i < range; ++i)
      if (count[i] > 0) {
        slot_of_id_[i] = static_cast<int32_t>(offsets_.size()) - 1;
        offsets_.push_back(offsets_.back() + count[i]);
      }
    std::vector<int32_t> fill(offsets_.begin(), offsets_.end() - 1);
    items_.resize(items.size());
    for (const CommItem& it : items) {
      const int32_t s = slot_of_id_[static_cast<size_t>(it.comm_id - lo)];
      items_[static_cast<size_t>(fill[static_cast<size_t>(s)]++)] = it;
    }
  } else {
    items_ = std::move(items);
    std::stable_sort(items_.begin(), items_.end(), [](const CommItem& a, const CommItem& b) { return a.comm_id < b.comm_id; });
    offsets_.push_back(0);
    for (size_t i = 0; i < items_.size(); ++i)
      if (i == 0 || items_[i].comm_id != items_[i - 1].comm_id) {
        if (i > 0) offsets_.push_back(static_cast<int32_t>(i));
        ids_.push_back(items_[i].comm_id);
      }
    offsets_.push_back(static_cast<int32_t>(items_.size()));
  }
  validate(program, header_only);
}

int CommIndex::slot(int64_t comm_id) const {
  if (dense_) {
    const int64_t i = comm_id - min_id_;
    if (i < 0 || i >= static_cast<int64_t>(slot_of_id_.size())) return -1;
    return slot_of_id_[static_cast<size_t>(i)];
  }
  auto it = std::lower_bound(ids_.begin(), ids_.end(), comm_id);
  if (it == ids_.end() || *it != comm_id) return -1;
  return static_cast<int>(it - ids_.begin());
}

void CommIndex::validate(const plan::StepProgram& p, const std::vector<char>* header_only) const {
  std::vector<int> ranks, members, missing;
  for (int s = 0; s < slots(); ++s) {
    auto refs = this->refs(s);
    const CommItem& first = refs[0];
    if (first.kind == plan::TaskKind::collective) {
      if (first.group < 0 || first.group >= static_cast<int>(p.groups.size()))
        throw comm_error(p, first, "unknown group " + std::to_string(first.group));
      const plan::Group& g = p.groups[static_cast<size_t>(first.group)];
      ranks.clear();
      for (const CommItem& r : refs) {
        if (r.kind != plan::TaskKind::collective || r.collective != first.collective || r.bytes != first.bytes ||
            r.group != first.group)
          throw comm_error(p, r, "differs from rank " + std::to_string(first.rank) + " in kind, collective, bytes or group");
        ranks.push_back(r.rank);
      }
      // refs are in rank order: sorted already.
      members = g.ranks;
      std::sort(members.begin(), members.end());
      bool ok = std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
                std::includes(members.begin(), members.end(), ranks.begin(), ranks.end());
      if (ok && ranks.size() != members.size()) {
        // Members without a task must be ranks lowered as a header only.
        missing.clear();
        std::set_difference(members.begin(), members.end(), ranks.begin(), ranks.end(), std::back_inserter(missing));
        for (int m : missing) ok = ok && header_only && (*header_only)[static_cast<size_t>(m)];
      }
      if (!ok)
        throw comm_error(p, first, "has " + std::to_string(refs.size()) + " tasks on ranks that are not exactly the " +
                                       std::to_string(g.ranks.size()) + " members of group " + std::to_string(g.id));
    } else {
      if (refs.size() == 1 && header_only && first.peer >= 0 && first.peer < static_cast<int>(header_only->size()) &&
          (*header_only)[static_cast<size_t>(first.peer)])
        throw comm_error(p, first, "its peer rank " + std::to_string(first.peer) +
                                       " has no tasks (representatives-only program) and is not a class "
                                       "representative; matching it is not supported");
      if (refs.size() != 2)
        throw comm_error(p, first, std::to_string(refs.size()) + " tasks share this comm_id, a send/recv pair needs 2");
      const CommItem* send = &refs[0];
      const CommItem* recv = &refs[1];
      if (send->kind == plan::TaskKind::recv) std::swap(send, recv);
      if (send->kind != plan::TaskKind::send || recv->kind != plan::TaskKind::recv)
        throw comm_error(p, first, "is not one send and one recv");
      if (send->peer != recv->rank || recv->peer != send->rank)
        throw comm_error(p, *send, "send to rank " + std::to_string(send->peer) + " is matched by a recv on rank " +
                                       std::to_string(recv->rank) + " from rank " + std::to_string(recv->peer));
      if (send->bytes != recv->bytes)
        throw comm_error(p, *send, "send bytes " + std::to_string(send->bytes) + " != recv bytes " + std::to_string(recv->bytes));
    }
  }
}

}  // namespace trainplan::sim::detail
