#include "comm_index.hpp"

#include <algorithm>
#include <string>

#include "trainplan/core/error.hpp"

namespace trainplan::sim::detail {
namespace {

Error comm_error(const plan::StepProgram& p, TaskRef r, int64_t comm_id, const std::string& what) {
  const plan::Task& t = p.ranks[static_cast<size_t>(r.rank)].tasks[static_cast<size_t>(r.task)];
  return Error("rank " + std::to_string(r.rank) + " task " + std::to_string(r.task) + " (\"" + t.label + "\") comm_id " +
               std::to_string(comm_id) + ": " + what)
      .hint("every send needs one recv with the same comm_id, bytes and swapped peers; every collective one "
            "task per group member (plan::check_program finds these)");
}

}  // namespace

CommIndex::CommIndex(const plan::StepProgram& program) {
  struct Item {
    int64_t id;
    TaskRef ref;
  };
  std::vector<Item> items;
  for (const auto& rp : program.ranks)
    for (const auto& t : rp.tasks) {
      if (!is_comm(t.kind)) continue;
      TaskRef ref{rp.rank, t.id};
      if (t.comm_id < 0) throw comm_error(program, ref, t.comm_id, "communication task without a comm_id");
      items.push_back({t.comm_id, ref});
    }
  if (items.empty()) {
    offsets_.push_back(0);
    return;
  }
  int64_t lo = items[0].id, hi = items[0].id;
  for (const Item& it : items) lo = std::min(lo, it.id), hi = std::max(hi, it.id);
  // Ids are usually dense (0 .. n): counting sort; otherwise a comparison sort.
  dense_ = static_cast<uint64_t>(hi - lo) <= 4 * static_cast<uint64_t>(items.size()) + 1024;
  if (dense_) {
    min_id_ = lo;
    const size_t range = static_cast<size_t>(hi - lo) + 1;
    std::vector<int32_t> count(range, 0);
    for (const Item& it : items) ++count[static_cast<size_t>(it.id - lo)];
    slot_of_id_.assign(range, -1);
    offsets_.push_back(0);
    for (size_t i = 0; i < range; ++i)
      if (count[i] > 0) {
        slot_of_id_[i] = static_cast<int32_t>(offsets_.size()) - 1;
        offsets_.push_back(offsets_.back() + count[i]);
      }
    std::vector<int32_t> fill(offsets_.begin(), offsets_.end() - 1);
    refs_.resize(items.size());
    for (const Item& it : items) {
      const int32_t s = slot_of_id_[static_cast<size_t>(it.id - lo)];
      refs_[static_cast<size_t>(fill[static_cast<size_t>(s)]++)] = it.ref;
    }
  } else {
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.id < b.id; });
    offsets_.push_back(0);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i == 0 || items[i].id != items[i - 1].id) {
        if (i > 0) offsets_.push_back(static_cast<int32_t>(i));
        ids_.push_back(items[i].id);
      }
      refs_.push_back(items[i].ref);
    }
    offsets_.push_back(static_cast<int32_t>(items.size()));
  }
  validate(program);
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

void CommIndex::validate(const plan::StepProgram& p) const {
  auto task = [&](TaskRef r) -> const plan::Task& { return p.ranks[static_cast<size_t>(r.rank)].tasks[static_cast<size_t>(r.task)]; };
  std::vector<int> ranks;
  for (int s = 0; s < slots(); ++s) {
    auto refs = this->refs(s);
    const plan::Task& first = task(refs[0]);
    const int64_t id = first.comm_id;
    if (first.kind == plan::TaskKind::collective) {
      if (first.group < 0 || first.group >= static_cast<int>(p.groups.size()))
        throw comm_error(p, refs[0], id, "unknown group " + std::to_string(first.group));
      const plan::Group& g = p.groups[static_cast<size_t>(first.group)];
      ranks.clear();
      for (TaskRef r : refs) {
        const plan::Task& t = task(r);
        if (t.kind != plan::TaskKind::collective || t.collective != first.collective || t.bytes != first.bytes ||
            t.group != first.group)
          throw comm_error(p, r, id, "differs from rank " + std::to_string(refs[0].rank) +
                                         " in kind, collective, bytes or group");
        ranks.push_back(r.rank);
      }
      std::vector<int> members = g.ranks;
      std::sort(members.begin(), members.end());
      std::sort(ranks.begin(), ranks.end());
      if (ranks != members)
        throw comm_error(p, refs[0], id, "has " + std::to_string(refs.size()) + " tasks on ranks that are not exactly the " +
                                             std::to_string(g.ranks.size()) + " members of group " +
                                             std::to_string(g.id));
    } else {
      if (refs.size() != 2) throw comm_error(p, refs[0], id, std::to_string(refs.size()) + " tasks share this comm_id, a send/recv pair needs 2");
      TaskRef sr = refs[0], rr = refs[1];
      if (task(sr).kind == plan::TaskKind::recv) std::swap(sr, rr);
      const plan::Task& send = task(sr);
      const plan::Task& recv = task(rr);
      if (send.kind != plan::TaskKind::send || recv.kind != plan::TaskKind::recv)
        throw comm_error(p, refs[0], id, "is not one send and one recv");
      if (send.peer != rr.rank || recv.peer != sr.rank)
        throw comm_error(p, sr, id, "send to rank " + std::to_string(send.peer) + " is matched by a recv on rank " +
                                        std::to_string(rr.rank) + " from rank " + std::to_string(recv.peer));
      if (send.bytes != recv.bytes)
        throw comm_error(p, sr, id, "send bytes " + std::to_string(send.bytes) + " != recv bytes " + std::to_string(recv.bytes));
    }
  }
}

}  // namespace trainplan::sim::detail
