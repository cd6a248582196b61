// The event loop: tasks start when ready, compute runs on the per-GPU engine, communication
// runs as phases of coflows on the flow network.
#include "step_simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace trainplan::sim::detail {

void StepSimulator::finish(int t) {
  ts_[static_cast<size_t>(t)].end_s = now_;
  for (int32_t i = dep_off_[static_cast<size_t>(t)]; i < dep_off_[static_cast<size_t>(t) + 1]; ++i) {
    const int32_t d = dep_list_[static_cast<size_t>(i)];
    if (--ts_[static_cast<size_t>(d)].pending == 0) ready_.push_back(d);
  }
}

void StepSimulator::start_task(int t) {
  const int s = ts_[static_cast<size_t>(t)].owner;
  RankState& rs = ranks_[static_cast<size_t>(s)];
  switch (ts_[static_cast<size_t>(t)].kind) {
    case plan::TaskKind::compute:
      compute_queue_[static_cast<size_t>(rs.queue_tail++)] = t;
      if (host_on() && issue_end_[static_cast<size_t>(t)] < 0) {
        ready_s_[static_cast<size_t>(t)] = now_;
        advance_host(s);
      }
      begin_next_compute(s);
      return;
    case plan::TaskKind::alloc:
    case plan::TaskKind::free:
      ts_[static_cast<size_t>(t)].start_s = now_;
      notify_stream(t);
      rs.mem_now += ts_[static_cast<size_t>(t)].value;
      rs.mem_peak = std::max(rs.mem_peak, rs.mem_now);
      finish(t);
      return;
    default:
      ts_[static_cast<size_t>(t)].start_s = now_;
      notify_stream(t);
      arrive(ts_[static_cast<size_t>(t)].instance, t);
      return;
  }
}

void StepSimulator::advance_host(int s) {
  RankState& rs = ranks_[static_cast<size_t>(s)];
  const HostModel& h = opt_.host;
  while (rs.host_next < rs.host_end) {
    const auto g = static_cast<size_t>(host_order_[static_cast<size_t>(rs.host_next)]);
    const plan::Task& t = *tasks_[g];
    double pre = 0;
    if (t.phase == plan::Phase::optimizer) {
      if (!rs.host_stepped) {
        // The grad-norm / loss `.item()`: the host waits until the optimizer's inputs are ready.
        if (h.sync_before_optimizer) {
          if (ready_s_[g] < 0) return;
          rs.host_s = std::max(rs.host_s, ready_s_[g]);
        }
        pre += h.step_s;
        rs.host_stepped = true;
      }
    } else {
      if (t.micro_batch != rs.host_mb) pre += h.micro_batch_s;
      if (t.unit != rs.host_unit || static_cast<int32_t>(t.phase) != rs.host_phase || t.micro_batch != rs.host_mb ||
          t.virtual_stage != rs.host_chunk)
        pre += h.layer_hook_s;
      rs.host_unit = t.unit;
      rs.host_phase = static_cast<int32_t>(t.phase);
      rs.host_mb = t.micro_batch;
      rs.host_chunk = t.virtual_stage;
    }
    const double k = host_kernels_[g];
    const double begin = rs.host_s + pre;
    issue_first_[g] = begin + std::min(1.0, k) * h.launch_s;
    issue_end_[g] = begin + k * h.launch_s;
    rs.host_s = issue_end_[g];
    ++rs.host_next;
  }
}

void StepSimulator::begin_next_compute(int s) {
  RankState& rs = ranks_[static_cast<size_t>(s)];
  if (rs.running >= 0 || rs.queue_head == rs.queue_tail) return;
  const int t = compute_queue_[static_cast<size_t>(rs.queue_head)];
  rs.floor_s = 0;
  if (host_on()) {
    // The GPU runs the task once the host has issued its first kernel; it ends no earlier than
    // the last kernel's share of the task after the last issue.
    const double first = issue_first_[static_cast<size_t>(t)];
    if (first < 0) return;  // the host waits at a sync before it; advance_host() resumes
    if (first > now_) {
      if (rs.wake_s != first) {
        rs.wake_s = first;
        queue_.push(first, kHostIssued, s, 0);
      }
      return;
    }
    const double k = host_kernels_[static_cast<size_t>(t)];
    if (k > 0) rs.floor_s = issue_end_[static_cast<size_t>(t)] + ts_[static_cast<size_t>(t)].value / std::max(1.0, k);
  }
  ++rs.queue_head;
  rs.running = t;
  ts_[static_cast<size_t>(t)].start_s = now_;
  notify_stream(t);
  rs.work_left_s = ts_[static_cast<size_t>(t)].value;
  rs.last_s = now_;
  rs.rate = compute_rate(rs);
  queue_.push(now_ + rs.work_left_s / rs.rate, kComputeDone, t, ++rs.version);
}

double StepSimulator::compute_rate(const RankState& rs) {
  if (rs.running < 0) return 1.0;
  if (opt_.overlap_slowdown > 0) return rs.comm_active > 0 ? 1.0 / (1.0 + opt_.overlap_slowdown) : 1.0;
  if (!opt_.sm_contention || rs.sms_taken <= 0) return 1.0;
  const plan::Task& t = *tasks_[static_cast<size_t>(rs.running)];
  const double full = compute_duration(t);
  const double shared = compute_duration_sms(t, rs.sms_taken);
  return shared > full && full > 0 ? full / shared : 1.0;
}

void StepSimulator::comm_activity(int s, int stream, int delta, int sms) {
  RankState& rs = ranks_[static_cast<size_t>(s)];
  rs.comm_active += delta;
  if (sms > 0) {
    if (static_cast<size_t>(stream) >= rs.stream_sms.size()) rs.stream_sms.resize(static_cast<size_t>(stream) + 1, {0, 0});
    auto& [active, held] = rs.stream_sms[static_cast<size_t>(stream)];
    if (delta > 0 && active++ == 0) rs.sms_taken += (held = sms);
    if (delta < 0 && --active == 0) rs.sms_taken -= held;
  }
  if (rs.running < 0) return;
  const double rate = compute_rate(rs);
  if (rate == rs.rate) return;
  rs.work_left_s -= (now_ - rs.last_s) * rs.rate;
  if (rs.work_left_s < 0) rs.work_left_s = 0;
  rs.last_s = now_;
  rs.rate = rate;
  queue_.push(now_ + rs.work_left_s / rs.rate, kComputeDone, rs.running, ++rs.version);
}

void StepSimulator::arrive(int inst, int t) {
  Instance& in = instances_[static_cast<size_t>(inst)];
  members_[static_cast<size_t>(in.member_off + in.arrived++)] = t;
  if (in.arrived == in.expected) begin_instance(inst);
}

void StepSimulator::begin_instance(int inst) {
  Instance& in = instances_[static_cast<size_t>(inst)];
  in.active_s = now_;
  const CommPattern& pat = patterns_[static_cast<size_t>(in.pattern)];
  in.sm_channels = pat.nccl ? pat.timing.sm_channels : 0;
  for (int32_t i = 0; i < in.expected; ++i) {
    const int32_t t = members_[static_cast<size_t>(in.member_off + i)];
    comm_activity(ts_[static_cast<size_t>(t)].owner, tasks_[static_cast<size_t>(t)]->stream, +1, in.sm_channels);
  }
  ++stats_.comm_instances;
  in.protocol = pat.protocol_for(in.size_bytes);
  // The host's issue time of the slowest member (plan::Task::issue_s) precedes the transfer;
  // what it issues after the launch (issue_tail_s) runs alongside and bounds the completion.
  double issue_s = 0, tail_s = 0;
  for (int32_t i = 0; i < in.expected; ++i) {
    const plan::Task& t = *tasks_[static_cast<size_t>(members_[static_cast<size_t>(in.member_off + i)])];
    issue_s = std::max(issue_s, t.issue_s);
    tail_s = std::max(tail_s, t.issue_s + t.issue_tail_s);
  }
  in.tail_end_s = now_ + tail_s;
  // NCCL's base latency includes its launch; the per-hop model adds comm_launch_s.
  schedule_phase(inst, 0, now_ + issue_s + (pat.nccl ? 0.0 : opt_.comm_launch_s) + pat.start_delay_s);
}

void StepSimulator::schedule_phase(int inst, int phase, double t0) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  const CommPattern& pat = patterns_[static_cast<size_t>(in.pattern)];
  const double latency =
      phase < static_cast<int>(pat.phases.size()) ? pat.phase_latency_s(phase, in.protocol, in.size_bytes) : 0.0;
  queue_.push(t0 + latency, kTransfer, inst, phase);
}

void StepSimulator::on_transfer(int inst, int phase) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  const CommPattern& pat = patterns_[static_cast<size_t>(in.pattern)];
  if (phase == static_cast<int>(pat.phases.size())) {
    if (now_ < in.tail_end_s) queue_.push(in.tail_end_s, kTransfer, inst, phase);  // the host still issues
    else complete(inst);
    return;
  }
  const CommPhase& ph = pat.phases[static_cast<size_t>(phase)];
  const double bytes = ph.bytes_factor * in.size_bytes;
  if (bytes > 0 && !ph.uses.empty()) {
    // The protocol's overhead (LL flags, LL128 line headers) travels as extra wire bytes.
    const double wire = bytes / pat.bandwidth_share(in.protocol, in.size_bytes);
    net_.start(ph.uses, wire, now_, static_cast<int64_t>(inst) * 8 + phase);
    ++stats_.coflows;
  } else {
    phase_done(inst, phase);
  }
}

void StepSimulator::phase_done(int inst, int phase) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  const CommPhase& ph = patterns_[static_cast<size_t>(in.pattern)].phases[static_cast<size_t>(phase)];
  const double bytes = ph.bytes_factor * in.size_bytes;
  if (bytes > 0) {
    // Bytes GPUs send and receive: a host end (-1: a parameter server) counts for no GPU.
    for (const FlowEnds& f : ph.flows) {
      if (f.src_gpu >= 0) {
        gpu_sent_[static_cast<size_t>(f.src_gpu)] += bytes;
        sent_by_purpose_[static_cast<size_t>(in.purpose)] += bytes;
        if (f.dst_gpu >= 0 && topo_.zone_of(f.src_gpu) != topo_.zone_of(f.dst_gpu)) inter_az_bytes_ += bytes;
      }
      if (f.dst_gpu >= 0) gpu_received_[static_cast<size_t>(f.dst_gpu)] += bytes;
    }
  }
  schedule_phase(inst, phase + 1, now_);
}

void StepSimulator::complete(int inst) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  for (int32_t i = 0; i < in.expected; ++i) {
    const int32_t t = members_[static_cast<size_t>(in.member_off + i)];
    comm_activity(ts_[static_cast<size_t>(t)].owner, tasks_[static_cast<size_t>(t)]->stream, -1, in.sm_channels);
    finish(t);
  }
}

void StepSimulator::drain() {
  for (size_t i = 0; i < ready_.size(); ++i) start_task(ready_[i]);
  ready_.clear();
}

void StepSimulator::report_stall() const {
  for (size_t g = 0; g < tasks_.size(); ++g) {
    if (ts_[g].end_s >= 0) continue;
    const plan::Task& t = *tasks_[g];
    const int rank = ranks_[static_cast<size_t>(ts_[g].owner)].rank;
    std::string why;
    if (ts_[g].start_s < 0 && ts_[g].pending > 0) {
      why = "never started: waiting for its dependencies or the previous task of its stream";
    } else if (ts_[g].instance >= 0) {
      const Instance& in = instances_[static_cast<size_t>(ts_[g].instance)];
      why = "communication comm_id " + std::to_string(t.comm_id) + " never completed: " + std::to_string(in.arrived) +
            " of " + std::to_string(in.expected) + " participants arrived";
    } else {
      why = "never finished";
    }
    throw task_error(rank, t.id, t.label, "the step cannot finish (deadlock): " + why)
        .hint("the first task that cannot finish is shown; check the order of sends/recvs and collectives on "
              "each rank (plan::check_program)");
  }
  TP_ASSERT_MSG(false, "report_stall called without a stalled task");
  std::abort();
}

StepResult StepSimulator::run() {
  const auto wall_start = std::chrono::steady_clock::now();
  validate_program();
  sym_ = opt_.fidelity == Fidelity::symmetric ? symmetric_classes(p_) : identity_symmetry(p_);
  flatten();
  {
    if (opt_.fidelity == Fidelity::full) {
      CommIndex index(p_, std::move(comm_items_));
      build_instances_full(index);
    } else {
      CommIndex index(p_, CommIndex::collect(p_), &sym_.header_only);
      build_instances_symmetric(index);
    }
    comm_items_ = {};
    merge_duplicate_links();
  }
  queue_.reserve(1024);
  stats_.setup_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (host_on())
    for (size_t s = 0; s < ranks_.size(); ++s) advance_host(static_cast<int>(s));
  for (size_t g = 0; g < tasks_.size(); ++g)
    if (ts_[g].pending == 0) ready_.push_back(static_cast<int32_t>(g));
  drain();
  while (true) {
    const bool hq = !queue_.empty();
    const bool hn = net_.has_next();
    if (net_.dirty()) {
      const bool event_now = (hq && queue_.top().time_s <= now_) || (hn && net_.next_time_s() <= now_);
      if (!event_now) {
        net_.update_rates(now_, seq_);
        continue;
      }
    }
    if (!hq && !hn) break;
    const bool take_net =
        hn && (!hq || net_.next_time_s() < queue_.top().time_s ||
               (net_.next_time_s() == queue_.top().time_s && net_.next_seq() < queue_.top().seq));
    if (take_net) {
      now_ = net_.next_time_s();
      const int64_t tag = net_.pop_finished();
      ++stats_.events;
      phase_done(static_cast<int>(tag / 8), static_cast<int>(tag % 8));
    } else {
      // Handled in place: the first event it pushes replaces it in the heap.
      const Event e = queue_.take_top();
      now_ = e.time_s;
      if (e.type == kComputeDone) {
        RankState& rs = ranks_[static_cast<size_t>(ts_[static_cast<size_t>(e.a)].owner)];
        if (e.b != rs.version || rs.running != e.a) {  // superseded by a rate change
          queue_.release_top();
          continue;
        }
        if (now_ < rs.floor_s) {  // the host has not issued the task's last kernel yet
          queue_.push(rs.floor_s, kComputeDone, e.a, ++rs.version);
          queue_.release_top();
          continue;
        }
        ++stats_.events;
        rs.running = -1;
        finish(e.a);
        begin_next_compute(ts_[static_cast<size_t>(e.a)].owner);
      } else if (e.type == kHostIssued) {
        RankState& rs = ranks_[static_cast<size_t>(e.a)];
        if (rs.wake_s == now_) rs.wake_s = kNever;
        begin_next_compute(e.a);
      } else {
        ++stats_.events;
        on_transfer(e.a, static_cast<int>(e.b));
      }
    }
    drain();
    queue_.release_top();
  }
  for (size_t g = 0; g < tasks_.size(); ++g)
    if (ts_[g].end_s < 0) report_stall();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return collect(wall);
}

}  // namespace trainplan::sim::detail
