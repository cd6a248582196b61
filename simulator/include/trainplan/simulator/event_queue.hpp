// File: trainplan/simulator/event_queue.hpp
//
// The discrete-event engine's queue: a 4-ary min-heap of plain 32-byte events ordered by
// (time, insertion sequence). Equal times pop in the order they were pushed, so a simulation
// that pushes the same events in the same order replays byte for byte. No allocation per
// event (the heap is one vector that grows to the peak number of pending events), no
// std::function: the consumer switches on `type`.
//
//   sim::EventQueue q;
//   q.push(1.5e-3, kComputeDone, task, version);
//   while (!q.empty()) {
//     sim::Event e = q.pop();          // earliest time; ties: earliest push
//     switch (e.type) { ... }
//   }
//
// A handler that usually pushes one follow-up event can process the top in place:
// take_top() returns it but leaves it in the heap; the next push() overwrites it (one sift
// instead of a pop and a push) and release_top() removes it if nothing was pushed.
#pragma once

#include <cstdint>
#include <vector>

namespace trainplan::sim {

/// One pending event. `type` and the two payload fields mean whatever the consumer says.
struct Event {
  double time_s = 0;  // simulated seconds
  uint64_t seq = 0;   // global insertion sequence (tie-break)
  int32_t type = 0;
  int32_t a = 0;
  int64_t b = 0;
};

/// (time, seq) order, strict.
inline bool event_before(const Event& x, const Event& y) {
  return x.time_s < y.time_s || (x.time_s == y.time_s && x.seq < y.seq);
}

/// A sequence counter shared by every queue of one simulation, so events of different
/// sources (engine queue, network completions) are totally ordered by (time, seq).
class SeqCounter {
 public:
  uint64_t next() { return next_++; }
  uint64_t peek() const { return next_; }

 private:
  uint64_t next_ = 0;
};

class EventQueue {
 public:
  explicit EventQueue(SeqCounter* seq = nullptr) : seq_(seq ? seq : &own_seq_) {}
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  void reserve(size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  /// The earliest event; the queue must not be empty.
  const Event& top() const { return heap_.front(); }

  /// Pushes an event at `time_s`; returns its sequence number. While a taken top is held,
  /// the event replaces it (its time must not be earlier than the held one's).
  uint64_t push(double time_s, int32_t type, int32_t a = 0, int64_t b = 0) {
    Event e{time_s, seq_->next(), type, a, b};
    if (held_) {
      held_ = false;
      sift_down_from(0, e);
      return e.seq;
    }
    heap_.push_back(e);
    sift_up(heap_.size() - 1);
    return e.seq;
  }

  /// The earliest event, left in the heap until the next push() replaces it or release_top()
  /// removes it. The queue must not be empty and no top may be held already.
  Event take_top() {
    held_ = true;
    return heap_.front();
  }
  /// Removes a held top that no push() replaced.
  void release_top() {
    if (held_) {
      held_ = false;
      pop();
    }
  }

  /// Removes and returns the earliest event; the queue must not be empty.
  Event pop() {
    Event out = heap_.front();
    Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down_from_root(last);
    return out;
  }

  void clear() { heap_.clear(); }

 private:
  void sift_up(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / kArity;
      if (!event_before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }

  // Places `e` at `hole` and sifts it down (a replaced root).
  void sift_down_from(size_t hole, const Event& e) {
    const size_t n = heap_.size();
    while (true) {
      const size_t first = kArity * hole + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t last = first + kArity < n ? first + kArity : n;
      for (size_t c = first + 1; c < last; ++c)
        if (event_before(heap_[c], heap_[best])) best = c;
      if (!event_before(heap_[best], e)) break;
      heap_[hole] = heap_[best];
      hole = best;
    }
    heap_[hole] = e;
  }

  // Places `e` (the former last element) starting at the root: moves the hole down along the
  // smallest children, then sifts `e` up from there (fewer comparisons than the textbook
  // sift-down, since `e` usually belongs near the leaves).
  void sift_down_from_root(const Event& e) {
    const size_t n = heap_.size();
    size_t hole = 0;
    while (true) {
      const size_t first = kArity * hole + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t last = first + kArity < n ? first + kArity : n;
      for (size_t c = first + 1; c < last; ++c)
        if (event_before(heap_[c], heap_[best])) best = c;
      heap_[hole] = heap_[best];
      hole = best;
    }
    heap_[hole] = e;
    sift_up(hole);
  }

  // 4 children per node: half the depth of a binary heap, and a node's children share a
  // cache line pair.
  static constexpr size_t kArity = 4;
  SeqCounter own_seq_;
  SeqCounter* seq_;
  bool held_ = false;
  std::vector<Event> heap_;
};

}  // namespace trainplan::sim
