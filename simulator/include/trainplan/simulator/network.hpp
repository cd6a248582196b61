// File: trainplan/simulator/network.hpp
//
// Flow-level network model: transfers share link bandwidth max-min fairly (progressive
// filling), and rates are recomputed incrementally, only over the connected component of links
// and transfers touched by an arrival or a departure.
//
// The unit of sharing is a *coflow*: `flows` equal-sized flows that advance together at one
// rate (the phase of a collective: every ring edge, every tree edge, every pair of an
// all-to-all; a send/recv is a coflow of one flow). A coflow crosses link l with multiplicity
// m_l (how many of its flows use l) and takes m_l * rate of the link; max-min fairness is over
// coflow rates with those weights. Equal rates within a phase are what a pipelined ring or tree
// does (every chunk waits for the slowest hop), and it is how identical flows are grouped: one
// entity and one event per phase instead of one per flow.
//
//   sim::FlowNetwork net({100e9, 100e9});          // two links, bytes/s
//   sim::SeqCounter seq;
//   std::vector<sim::LinkUse> path{{0, 1}, {1, 1}};
//   int id = net.start(path, 1e9, /*now=*/0.0, /*tag=*/7);
//   net.update_rates(0.0, seq);                    // after every batch of starts
//   net.next_time_s();                             // 0.01 s
//   int64_t tag = net.pop_finished();              // 7
//
// Latency is not modelled here: the caller delays start() by the route latency.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trainplan/simulator/event_queue.hpp"

namespace trainplan::sim {

/// A coflow uses `link` with `multiplicity` of its flows.
struct LinkUse {
  int32_t link = 0;
  int32_t multiplicity = 1;
};

class FlowNetwork {
 public:
  explicit FlowNetwork(std::vector<double> capacity_bytes_per_s);

  /// Starts a coflow at `now`. `uses` must stay valid until it finishes (the simulator keeps
  /// them in its pattern cache) and name each link once. `bytes_per_flow` > 0. Its rate is 0
  /// until the next update_rates(). Returns the coflow id.
  int start(std::span<const LinkUse> uses, double bytes_per_flow, double now, int64_t tag);

  /// Recomputes max-min fair rates over the components touched since the last call and
  /// reschedules the finish times of the coflows whose rate changed. Finish events get
  /// sequence numbers from `seq`, so they interleave deterministically with engine events.
  void update_rates(double now, SeqCounter& seq);
  bool dirty() const { return !dirty_links_.empty(); }

  /// Earliest finish among active coflows (requires has_next()).
  bool has_next() const { return !heap_.empty(); }
  double next_time_s() const;
  uint64_t next_seq() const;
  /// Removes the earliest-finishing coflow (at next_time_s()) and returns its tag.
  int64_t pop_finished();

  /// Current per-flow rate of an active coflow (bytes/s).
  double rate(int id) const { return coflows_[static_cast<size_t>(id)].rate; }
  int active_coflows() const { return active_count_; }
  /// How many times the water-filling ran and how many coflows it rated in total.
  int64_t recomputations() const { return recomputations_; }
  int64_t coflows_rated() const { return coflows_rated_; }

 private:
  struct Coflow {
    const LinkUse* uses = nullptr;
    int32_t num_uses = 0;
    bool active = false;
    double remaining_bytes = 0;  // per flow, as of last_s
    double rate = 0;             // per flow
    double last_s = 0;
    double finish_s = 0;
    uint64_t finish_seq = 0;
    int64_t tag = 0;
    int32_t heap_pos = -1;
    uint32_t mark = 0;           // component epoch
  };
  struct Member {
    int32_t coflow;
    int32_t multiplicity;
  };
  struct LinkState {
    double capacity = 0;
    std::vector<Member> members;
    uint32_t mark = 0;
    bool dirty = false;
    // Water-filling scratch.
    double residual = 0;
    int64_t weight = 0;
  };

  void touch(int link);
  void remove_from_links(int id);
  void settle(Coflow& c, double now);
  void schedule(int id, SeqCounter& seq);
  void water_fill(double now, SeqCounter& seq);

  // Indexed min-heap of active coflows by (finish_s, finish_seq).
  bool heap_less(int a, int b) const;
  void heap_push(int id);
  void heap_remove(int id);
  void heap_fix(int id);
  void heap_up(size_t i);
  void heap_down(size_t i);

  std::vector<LinkState> links_;
  std::vector<Coflow> coflows_;
  std::vector<int> free_ids_;
  std::vector<int> heap_;
  std::vector<int> dirty_links_;
  int active_count_ = 0;
  uint32_t epoch_ = 0;
  int64_t recomputations_ = 0;
  int64_t coflows_rated_ = 0;
  // Scratch of one component.
  std::vector<int> comp_links_;
  std::vector<int> comp_coflows_;
  std::vector<uint8_t> frozen_;
  std::vector<double> old_rates_;
  std::vector<std::pair<double, int>> share_heap_;
};

}  // namespace trainplan::sim
