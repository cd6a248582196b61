// Results of a simulation: step time, breakdown, per-rank figures, the Timeline.
#include "step_simulator.hpp"

#include <algorithm>
#include <string>

namespace trainplan::sim::detail {

std::vector<Interval> StepSimulator::intervals_of(int s) const {
  std::vector<Interval> out;
  for (int32_t g = task_base_[static_cast<size_t>(s)]; g < task_base_[static_cast<size_t>(s) + 1]; ++g) {
    const plan::Task& t = *tasks_[static_cast<size_t>(g)];
    const double start = ts_[static_cast<size_t>(g)].start_s, end = ts_[static_cast<size_t>(g)].end_s;
    if (t.kind == plan::TaskKind::compute) {
      out.push_back({start, end, t.phase == plan::Phase::optimizer ? IntervalKind::optimizer : IntervalKind::compute});
    } else if (is_comm(t.kind)) {
      const double active = instances_[static_cast<size_t>(ts_[static_cast<size_t>(g)].instance)].active_s;
      const plan::CommPurpose purpose = instances_[static_cast<size_t>(ts_[static_cast<size_t>(g)].instance)].purpose;
      out.push_back({active, end, IntervalKind::comm, purpose});
      if (purpose == plan::CommPurpose::pp) out.push_back({start, active, IntervalKind::pp_wait});
    }
  }
  return out;
}

StepResult StepSimulator::collect(double wall_s) {
  StepResult r;
  const size_t num_sim = ranks_.size();
  std::vector<double> last_end(num_sim, 0), busy(num_sim, 0);
  const std::vector<double>& flops = flops_;
  for (const TaskState& st : ts_) {
    const auto s = static_cast<size_t>(st.owner);
    last_end[s] = std::max(last_end[s], st.end_s);
    if (st.kind == plan::TaskKind::compute) busy[s] += st.end_s - st.start_s;
  }
  size_t critical = 0;
  for (size_t s = 0; s < num_sim; ++s)
    if (last_end[s] > last_end[critical]) critical = s;
  r.step_time_s = num_sim ? last_end[critical] : 0;
  r.breakdown = classify(intervals_of(static_cast<int>(critical)), r.step_time_s, ranks_[critical].rank);

  const size_t world = p_.ranks.size();
  r.peak_memory_bytes.resize(world);
  r.gpu_utilization.resize(world);
  r.flops_utilization.resize(world);
  r.bytes_sent.resize(world);
  r.bytes_received.resize(world);
  for (size_t rank = 0; rank < world; ++rank) {
    const size_t s = static_cast<size_t>(sim_of_rank_[static_cast<size_t>(sym_.rep_of[rank])]);
    const plan::RankProgram& rp = p_.ranks[rank];
    r.peak_memory_bytes[rank] = rp.static_bytes + ranks_[s].mem_peak;
    r.gpu_utilization[rank] = r.step_time_s > 0 ? busy[s] / r.step_time_s : 0;
    r.flops_utilization[rank] = r.step_time_s > 0 ? flops[s] / (model_.tensor_peak_flops_per_s() * r.step_time_s) : 0;
    r.bytes_sent[rank] = gpu_sent_[static_cast<size_t>(rp.gpu)];
    r.bytes_received[rank] = gpu_received_[static_cast<size_t>(rp.gpu)];
  }
  r.bytes_sent_by_purpose = sent_by_purpose_;
  r.inter_az_bytes = inter_az_bytes_;

  plan::Timeline& tl = r.timeline;
  tl.source = "predicted";
  tl.step_time_s = r.step_time_s;
  tl.streams = p_.streams;
  tl.peak_memory_bytes = r.peak_memory_bytes;
  tl.meta["simulator"] = to_json(opt_);
  tl.meta["gpu"] = gpu_.name;
  tl.meta["precision"] = std::string(precision_name(precision_));
  tl.meta["world_size"] = static_cast<int64_t>(world);
  if (opt_.record_timeline) {
    std::vector<size_t> shown;
    if (opt_.timeline_ranks.empty()) {
      for (size_t rank = 0; rank < world; ++rank) shown.push_back(rank);
    } else {
      for (int rank : opt_.timeline_ranks) {
        if (rank < 0 || rank >= static_cast<int>(world))
          throw Error("timeline_ranks names rank " + std::to_string(rank) + " but the program has " +
                      std::to_string(world) + " ranks");
        shown.push_back(static_cast<size_t>(rank));
      }
      std::sort(shown.begin(), shown.end());
      shown.erase(std::unique(shown.begin(), shown.end()), shown.end());
    }
    // A rank of a symmetric class whose representative is also shown, and whose events would
    // be the representative's (same tasks, labels and sizes; the times are the class's), can
    // be an alias of it.
    auto same_events = [&](size_t rank, size_t rep) {
      if (sym_.header_only[rank]) return true;  // shows its representative's tasks anyway
      const auto& a = p_.ranks[rank].tasks;
      const auto& b = p_.ranks[rep].tasks;
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (a[i].id != b[i].id || a[i].stream != b[i].stream || a[i].kind != b[i].kind || a[i].phase != b[i].phase ||
            a[i].purpose != b[i].purpose || a[i].mem_bytes != b[i].mem_bytes || a[i].alloc_bytes != b[i].alloc_bytes ||
            a[i].bytes != b[i].bytes || a[i].flops != b[i].flops || a[i].label != b[i].label)
          return false;
      return true;
    };
    std::vector<size_t> stored;
    for (size_t rank : shown) {
      const auto rep = static_cast<size_t>(sym_.rep_of[rank]);
      if (opt_.timeline_aliases && rep != rank && !sym_.header_only[rep] &&
          std::binary_search(shown.begin(), shown.end(), rep) && same_events(rank, rep))
        tl.aliases.push_back({static_cast<int>(rank), static_cast<int>(rep)});
      else
        stored.push_back(rank);
    }
    size_t total = 0;
    for (size_t rank : stored)
      total += p_.ranks[static_cast<size_t>(sym_.header_only[rank] ? sym_.rep_of[rank] : static_cast<int>(rank))].tasks.size();
    tl.events.reserve(total);
    for (size_t rank : stored) {
      const int32_t base = task_base_[static_cast<size_t>(sim_of_rank_[static_cast<size_t>(sym_.rep_of[rank])])];
      // A header-only rank shows its representative's tasks (its own program renamed).
      const plan::RankProgram& source = sym_.header_only[rank] ? p_.ranks[static_cast<size_t>(sym_.rep_of[rank])] : p_.ranks[rank];
      for (const plan::Task& t : source.tasks) {
        const size_t g = static_cast<size_t>(base + t.id);
        plan::TimelineEvent e;
        e.rank = static_cast<int>(rank);
        e.task = t.id;
        e.stream = t.stream;
        e.kind = t.kind;
        e.start_s = ts_[g].start_s;
        e.end_s = ts_[g].end_s;
        e.bytes = t.kind == plan::TaskKind::compute ? t.mem_bytes
                  : (t.kind == plan::TaskKind::alloc || t.kind == plan::TaskKind::free) ? t.alloc_bytes
                                                                                         : t.bytes;
        e.flops = t.flops;
        e.label = t.label;
        e.phase = t.phase;
        e.purpose = t.purpose;
        tl.events.push_back(std::move(e));
      }
    }
  }
  stats_.tasks_simulated = static_cast<int64_t>(tasks_.size());
  stats_.ranks_simulated = static_cast<int>(num_sim);
  stats_.rate_recomputations = net_.recomputations();
  stats_.wall_s = wall_s;
  r.stats = stats_;
  return r;
}

}  // namespace trainplan::sim::detail
