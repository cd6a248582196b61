// Flow network: weighted max-min fair sharing of link bandwidth among coflows, recomputed per
// connected component of the links touched since the last update.
#include "trainplan/simulator/network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "trainplan/core/error.hpp"

namespace trainplan::sim {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// Relative slack under which a link counts as saturated / a rate as unchanged.
constexpr double kRelEps = 1e-12;
}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacity_bytes_per_s) {
  links_.resize(capacity_bytes_per_s.size());
  for (size_t i = 0; i < links_.size(); ++i) {
    TP_ASSERT(capacity_bytes_per_s[i] > 0);
    links_[i].capacity = capacity_bytes_per_s[i];
  }
}

int FlowNetwork::start(std::span<const LinkUse> uses, double bytes_per_flow, double now, int64_t tag) {
  TP_ASSERT(bytes_per_flow > 0);
  TP_ASSERT(!uses.empty());
  int id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int>(coflows_.size());
    coflows_.emplace_back();
  }
  Coflow& c = coflows_[static_cast<size_t>(id)];
  c = Coflow{};
  c.uses = uses.data();
  c.num_uses = static_cast<int32_t>(uses.size());
  c.active = true;
  c.remaining_bytes = bytes_per_flow;
  c.rate = 0;
  c.last_s = now;
  c.finish_s = kInf;
  c.tag = tag;
  for (const LinkUse& u : uses) {
    TP_ASSERT(u.link >= 0 && static_cast<size_t>(u.link) < links_.size() && u.multiplicity > 0);
    links_[static_cast<size_t>(u.link)].members.push_back({id, u.multiplicity});
    touch(u.link);
  }
  ++active_count_;
  return id;
}

void FlowNetwork::touch(int link) {
  LinkState& l = links_[static_cast<size_t>(link)];
  if (!l.dirty) {
    l.dirty = true;
    dirty_links_.push_back(link);
  }
}

void FlowNetwork::remove_from_links(int id) {
  const Coflow& c = coflows_[static_cast<size_t>(id)];
  for (int32_t i = 0; i < c.num_uses; ++i) {
    const int link = c.uses[i].link;
    auto& members = links_[static_cast<size_t>(link)].members;
    // Ordered erase keeps member order a function of the event history only.
    auto it = std::find_if(members.begin(), members.end(), [id](const Member& m) { return m.coflow == id; });
    TP_ASSERT(it != members.end());
    members.erase(it);
    touch(link);
  }
}

void FlowNetwork::settle(Coflow& c, double now) {
  if (now > c.last_s) {
    c.remaining_bytes -= c.rate * (now - c.last_s);
    if (c.remaining_bytes < 0) c.remaining_bytes = 0;
    c.last_s = now;
  }
}

double FlowNetwork::next_time_s() const { return coflows_[static_cast<size_t>(heap_.front())].finish_s; }
uint64_t FlowNetwork::next_seq() const { return coflows_[static_cast<size_t>(heap_.front())].finish_seq; }

int64_t FlowNetwork::pop_finished() {
  const int id = heap_.front();
  Coflow& c = coflows_[static_cast<size_t>(id)];
  heap_remove(id);
  c.active = false;
  c.remaining_bytes = 0;
  remove_from_links(id);
  --active_count_;
  free_ids_.push_back(id);
  return c.tag;
}

void FlowNetwork::schedule(int id, SeqCounter& seq) {
  Coflow& c = coflows_[static_cast<size_t>(id)];
  double finish = c.rate > 0 ? c.last_s + c.remaining_bytes / c.rate : kInf;
  c.finish_s = finish;
  c.finish_seq = seq.next();
  if (c.heap_pos < 0) {
    if (finish < kInf) heap_push(id);
  } else if (finish < kInf) {
    heap_fix(id);
  } else {
    heap_remove(id);
  }
}

void FlowNetwork::update_rates(double now, SeqCounter& seq) {
  if (dirty_links_.empty()) return;
  // Components in the order their first link was touched (deterministic).
  ++epoch_;
  std::vector<int> dirty;
  dirty.swap(dirty_links_);
  for (int link : dirty) links_[static_cast<size_t>(link)].dirty = false;
  for (int seed : dirty) {
    if (links_[static_cast<size_t>(seed)].mark == epoch_) continue;
    comp_links_.clear();
    comp_coflows_.clear();
    links_[static_cast<size_t>(seed)].mark = epoch_;
    comp_links_.push_back(seed);
    for (size_t i = 0; i < comp_links_.size(); ++i) {
      const LinkState& l = links_[static_cast<size_t>(comp_links_[i])];
      for (const Member& m : l.members) {
        Coflow& c = coflows_[static_cast<size_t>(m.coflow)];
        if (c.mark == epoch_) continue;
        c.mark = epoch_;
        comp_coflows_.push_back(m.coflow);
        for (int32_t u = 0; u < c.num_uses; ++u) {
          LinkState& l2 = links_[static_cast<size_t>(c.uses[u].link)];
          if (l2.mark != epoch_) {
            l2.mark = epoch_;
            comp_links_.push_back(c.uses[u].link);
          }
        }
      }
    }
    if (!comp_coflows_.empty()) water_fill(now, seq);
  }
  dirty.clear();
  if (dirty_links_.empty()) dirty_links_.swap(dirty);  // keep the capacity
}

// Progressive filling with weights: all unfrozen coflows grow at the same rate; the link with
// the smallest fair share residual / weight saturates first and freezes its coflows at that
// share. Freezing a coflow at rate s <= share(l) never lowers another link's share, so a lazy
// min-heap of shares (re-pushed when found stale) finds each bottleneck in order.
void FlowNetwork::water_fill(double now, SeqCounter& seq) {
  ++recomputations_;
  coflows_rated_ += static_cast<int64_t>(comp_coflows_.size());
  old_rates_.clear();
  for (int id : comp_coflows_) {
    Coflow& c = coflows_[static_cast<size_t>(id)];
    settle(c, now);
    old_rates_.push_back(c.rate);
  }
  share_heap_.clear();
  for (int link : comp_links_) {
    LinkState& l = links_[static_cast<size_t>(link)];
    l.residual = l.capacity;
    l.weight = 0;
    for (const Member& m : l.members) l.weight += m.multiplicity;
    if (l.weight > 0) share_heap_.push_back({l.residual / static_cast<double>(l.weight), link});
  }
  auto heap_cmp = [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
    return a.first > b.first || (a.first == b.first && a.second > b.second);
  };
  std::make_heap(share_heap_.begin(), share_heap_.end(), heap_cmp);
  // frozen_ is indexed by coflow id; grow lazily.
  if (frozen_.size() < coflows_.size()) frozen_.resize(coflows_.size(), 0);
  for (int id : comp_coflows_) frozen_[static_cast<size_t>(id)] = 0;
  while (!share_heap_.empty()) {
    std::pop_heap(share_heap_.begin(), share_heap_.end(), heap_cmp);
    auto [share, link] = share_heap_.back();
    share_heap_.pop_back();
    LinkState& l = links_[static_cast<size_t>(link)];
    if (l.weight <= 0) continue;
    double current = std::max(0.0, l.residual) / static_cast<double>(l.weight);
    if (current > share * (1 + kRelEps) + 0.0) {
      share_heap_.push_back({current, link});
      std::push_heap(share_heap_.begin(), share_heap_.end(), heap_cmp);
      continue;
    }
    // `link` is the bottleneck of its remaining coflows: freeze them at `current`.
    for (const Member& m : l.members) {
      const auto cid = static_cast<size_t>(m.coflow);
      if (frozen_[cid]) continue;
      frozen_[cid] = 1;
      Coflow& c = coflows_[cid];
      c.rate = current;
      for (int32_t u = 0; u < c.num_uses; ++u) {
        LinkState& l2 = links_[static_cast<size_t>(c.uses[u].link)];
        l2.residual -= current * c.uses[u].multiplicity;
        l2.weight -= c.uses[u].multiplicity;
      }
    }
  }
  // A coflow whose rate did not change keeps its finish time (and its place among ties).
  for (size_t i = 0; i < comp_coflows_.size(); ++i) {
    const int id = comp_coflows_[i];
    if (coflows_[static_cast<size_t>(id)].rate != old_rates_[i] || coflows_[static_cast<size_t>(id)].heap_pos < 0)
      schedule(id, seq);
  }
}

// ---- indexed heap of finish times --------------------------------------------------------

bool FlowNetwork::heap_less(int a, int b) const {
  const Coflow& x = coflows_[static_cast<size_t>(a)];
  const Coflow& y = coflows_[static_cast<size_t>(b)];
  return x.finish_s < y.finish_s || (x.finish_s == y.finish_s && x.finish_seq < y.finish_seq);
}

void FlowNetwork::heap_push(int id) {
  coflows_[static_cast<size_t>(id)].heap_pos = static_cast<int32_t>(heap_.size());
  heap_.push_back(id);
  heap_up(heap_.size() - 1);
}

void FlowNetwork::heap_remove(int id) {
  const auto pos = static_cast<size_t>(coflows_[static_cast<size_t>(id)].heap_pos);
  TP_ASSERT(pos < heap_.size());
  const int last = heap_.back();
  heap_.pop_back();
  coflows_[static_cast<size_t>(id)].heap_pos = -1;
  if (pos < heap_.size()) {
    heap_[pos] = last;
    coflows_[static_cast<size_t>(last)].heap_pos = static_cast<int32_t>(pos);
    heap_up(pos);
    heap_down(static_cast<size_t>(coflows_[static_cast<size_t>(last)].heap_pos));
  }
}

void FlowNetwork::heap_fix(int id) {
  const auto pos = static_cast<size_t>(coflows_[static_cast<size_t>(id)].heap_pos);
  heap_up(pos);
  heap_down(static_cast<size_t>(coflows_[static_cast<size_t>(id)].heap_pos));
}

void FlowNetwork::heap_up(size_t i) {
  const int id = heap_[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!heap_less(id, heap_[parent])) break;
    heap_[i] = heap_[parent];
    coflows_[static_cast<size_t>(heap_[i])].heap_pos = static_cast<int32_t>(i);
    i = parent;
  }
  heap_[i] = id;
  coflows_[static_cast<size_t>(id)].heap_pos = static_cast<int32_t>(i);
}

void FlowNetwork::heap_down(size_t i) {
  const size_t n = heap_.size();
  const int id = heap_[i];
  while (true) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_less(heap_[child + 1], heap_[child])) ++child;
    if (!heap_less(heap_[child], id)) break;
    heap_[i] = heap_[child];
    coflows_[static_cast<size_t>(heap_[i])].heap_pos = static_cast<int32_t>(i);
    i = child;
  }
  heap_[i] = id;
  coflows_[static_cast<size_t>(id)].heap_pos = static_cast<int32_t>(i);
}

}  // namespace trainplan::sim
