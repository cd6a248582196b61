// The step simulator's engine (private): one StepSimulator runs one simulate_step() call.
// Setup (checks, flattening, communication instances, patterns) is in step_simulator_setup.cpp,
// the event loop in step_simulator.cpp, the results in step_simulator_results.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "breakdown.hpp"
#include "comm_index.hpp"
#include "symmetry.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/event_queue.hpp"
#include "trainplan/simulator/network.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim::detail {


enum EventType : int32_t {
  kComputeDone = 0,  // a = task, b = version of the rank's running compute
  kTransfer = 1,     // a = instance, b = phase: latency over, data starts moving (phase ==
                     // number of phases: the instance is complete)
  kHostIssued = 2,   // a = simulated rank: its host has issued the head of its compute queue
};

inline constexpr double kNever = -1;

inline Precision default_precision(const hw::GpuSpec& gpu) {
  return gpu.peak_flops.count(Precision::bf16) ? Precision::bf16 : Precision::fp16;
}

inline CollectiveAlgorithm algorithm_for(plan::CommPurpose purpose, const SimOptions& o) {
  switch (purpose) {
    case plan::CommPurpose::dp:
    case plan::CommPurpose::zero_grad:
    case plan::CommPurpose::zero_param: return from_dp_algorithm(o.dp_algorithm);
    case plan::CommPurpose::ps: return CollectiveAlgorithm::parameter_server;
    default: return o.other_algorithm;
  }
}

inline Error task_error(int rank, int task, const std::string& label, const std::string& what) {
  return Error("rank " + std::to_string(rank) + " task " + std::to_string(task) + " (\"" + label + "\"): " + what);
}

class StepSimulator {
 public:
  StepSimulator(const plan::StepProgram& program, const Topology& topology, const hw::GpuSpec& gpu,
                const SimOptions& options)
      : p_(program),
        topo_(topology),
        gpu_(gpu),
        opt_(options),
        precision_(options.precision.value_or(default_precision(gpu))),
        model_(gpu, precision_, options.compute, options.calibration.get()),
        queue_(&seq_),
        net_(link_capacities(topology)) {}

  StepResult run();

 private:
  struct RankState {
    int rank = 0;
    int gpu = 0;
    double speed = 1;       // straggler factor (work per second)
    int running = -1;       // compute task on the engine
    double work_left_s = 0; // at full speed, as of last_s
    double last_s = 0;
    double rate = 1;        // 1, or slower while collectives overlap the running task
    int64_t version = 0;
    int32_t queue_head = 0, queue_tail = 0;  // into compute_queue_
    int comm_active = 0;
    int sms_taken = 0;      // SMs held by the rank's running NCCL collectives (their channels)
    // Per stream: active collectives and the SMs the stream's kernel holds. Collectives on one
    // stream run one kernel at a time on a GPU (CUDA stream order), so a stream holds the SMs
    // of one collective however many of its collectives the simulator runs at once.
    std::vector<std::pair<int32_t, int32_t>> stream_sms;
    double mem_now = 0, mem_peak = 0;        // live allocations
    // Host model (SimOptions::host): the CPU thread issuing this rank's compute tasks in
    // program order (host_order_[host_next .. host_end)), its clock, and the last layer
    // boundary it passed.
    int32_t host_next = 0, host_end = 0;
    double host_s = 0;
    double floor_s = 0;   // the running task ends no earlier (its last kernel's issue + share)
    double wake_s = kNever;  // a pending kHostIssued event's time
    int32_t host_unit = -2, host_phase = -1, host_mb = -2, host_chunk = -2;
    bool host_stepped = false;  // the per-step cost (and sync) was paid
  };
  struct Instance {
    int32_t expected = 0;
    int32_t arrived = 0;
    int32_t member_off = 0;
    int32_t pattern = -1;
    double size_bytes = 0;
    double active_s = kNever;  // when every member had arrived and data started moving
    plan::CommPurpose purpose = plan::CommPurpose::none;
    NcclProtocol protocol = NcclProtocol::simple;  // chosen when the instance begins
    int sm_channels = 0;                           // SMs its kernel holds on each member
    double tail_end_s = 0;                         // no member completes before (plan::Task::issue_tail_s)
  };

  static std::vector<double> link_capacities(const Topology& t) {
    std::vector<double> c;
    for (const LinkSpec& l : t.links()) c.push_back(l.bandwidth_bytes_per_s);
    return c;
  }

  // setup
  void validate_program() const;
  void validate_task(int rank, int index, const plan::Task& t) const;
  void flatten();
  int pattern_for_collective(const CommItem& t, const std::vector<int>& groups);
  int new_instance(const CommItem& first, int32_t expected);
  void build_instances_full(const CommIndex& index);
  void build_instances_symmetric(const CommIndex& index);
  void merge_duplicate_links();
  int pattern_for_p2p(const std::vector<FlowEnds>& pairs);
  const std::vector<int>& ring_of_group(int group, bool chain_from_root);
  int intern(std::vector<int64_t> key, CommPattern pattern);
  const std::vector<int>& renamed_copies(int group, int s, int rep);
  int group_shifted(int group, int shift, int rep, int member);
  const std::vector<FlowEnds>& renamed_pairs(int peer, bool send, int s, int rep);

  // run
  void start_task(int t);
  void notify_stream(int t) {
    const TaskState& st = ts_[static_cast<size_t>(t)];
    for (const int n : {st.stream_next, st.stream_next_memory})
      if (n >= 0 && --ts_[static_cast<size_t>(n)].pending == 0) ready_.push_back(n);
  }
  void finish(int t);
  void begin_next_compute(int s);
  // Issues the rank's compute tasks on its host clock up to the first one it cannot issue yet
  // (a sync task whose dependencies have not finished).
  void advance_host(int s);
  bool host_on() const { return opt_.host.enabled(); }
  void comm_activity(int s, int stream, int delta, int sms);
  // Speed of rank s's running compute task: 1, 1/(1 + overlap_slowdown) while data moves,
  // or t(all SMs) / t(SMs - taken) under SM contention.
  double compute_rate(const RankState& rs);
  // Duration of a compute task with `sms_taken` SMs held by other kernels, memoized like
  // compute_duration.
  double compute_duration_sms(const plan::Task& t, int sms_taken);
  void arrive(int inst, int t);
  void begin_instance(int inst);
  void schedule_phase(int inst, int phase, double t0);
  void on_transfer(int inst, int phase);
  void phase_done(int inst, int phase);
  void complete(int inst);
  void drain();
  [[noreturn]] void report_stall() const;

  // Duration of a compute task at full speed, memoized per (phase, ops) when the program
  // carries op costs (every micro-batch repeats the same merged tasks).
  double compute_duration(const plan::Task& t);

  // results
  StepResult collect(double wall_s);
  std::vector<Interval> intervals_of(int s) const;

  const plan::StepProgram& p_;
  const Topology& topo_;
  const hw::GpuSpec& gpu_;
  const SimOptions& opt_;
  Precision precision_;
  ComputeModel model_;
  std::unordered_map<uint64_t, double> duration_memo_;
  std::unordered_map<uint64_t, double> duration_sms_memo_;  // (duration key, SMs taken)
  SeqCounter seq_;
  EventQueue queue_;
  FlowNetwork net_;
  double now_ = 0;
  SimStats stats_;

  Symmetry sym_;
  std::vector<int> sim_of_rank_;      // rank -> simulated index (-1 if replicated)
  std::vector<int32_t> task_base_;    // simulated index -> first global task
  std::vector<const plan::Task*> tasks_;
  // What the run loop needs of a task, in one cache line.
  struct TaskState {
    double value = 0;          // compute: seconds at its rank's speed; alloc/free: +/- bytes
    double start_s = kNever;
    double end_s = kNever;
    int32_t owner = 0;         // simulated rank index
    int32_t pending = 0;       // unfinished deps + (previous task of the stream not started)
    int32_t stream_next = -1;         // the next non-memory task of the stream
    int32_t stream_next_memory = -1;  // the memory task right after it on the stream
    int32_t instance = -1;     // communication instance
    plan::TaskKind kind = plan::TaskKind::compute;
  };
  std::vector<TaskState> ts_;
  // Host model (empty when off), per global task: kernels issued, when the first and the last
  // kernel are issued (kNever: not yet), when a sync task became ready; per rank the compute
  // tasks in program order.
  std::vector<double> host_kernels_, issue_first_, issue_end_, ready_s_;
  std::vector<int32_t> host_order_;
  std::vector<int32_t> dep_off_, dep_list_;
  std::vector<double> flops_;                   // per simulated rank
  std::vector<CommItem> comm_items_;    // full fidelity: gathered by flatten()
  std::vector<int32_t> compute_queue_;
  std::vector<RankState> ranks_;
  std::vector<int32_t> ready_;

  std::vector<Instance> instances_;
  std::vector<int32_t> members_;
  std::deque<CommPattern> patterns_;  // stable addresses: coflows point at their LinkUses
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& v) const {
      uint64_t h = 0x9e3779b97f4a7c15ULL;
      for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 0x100000001b3ULL + (h >> 29);
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<std::vector<int64_t>, int, KeyHash> pattern_ids_;
  std::unordered_map<uint64_t, int> single_group_patterns_;  // (group, kind, algorithm) -> pattern
  std::unordered_map<uint64_t, int> single_pair_patterns_;   // (src gpu, dst gpu) -> pattern
  std::map<std::vector<int>, int> group_by_members_;          // sorted ranks -> group id
  // Collective: (0, group, kind, bytes); send/recv: (1, sender, receiver, 0).
  struct SymmetricKey {
    int32_t p2p = 0, a = 0, b = 0;
    double bytes = 0;
    bool operator==(const SymmetricKey& o) const { return p2p == o.p2p && a == o.a && b == o.b && bytes == o.bytes; }
  };
  struct SymmetricKeyHash {
    size_t operator()(const SymmetricKey& k) const {
      uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(k.a)) << 32 | static_cast<uint32_t>(k.b)) * 0x9e3779b97f4a7c15ULL;
      return static_cast<size_t>(h ^ (std::hash<double>{}(k.bytes) + static_cast<uint64_t>(k.p2p)));
    }
  };
  std::unordered_map<SymmetricKey, int, SymmetricKeyHash> symmetric_patterns_;  // representatives-only
  std::unordered_map<uint64_t, std::vector<int>> renamed_groups_;      // (group, class) -> groups
  std::unordered_map<uint64_t, int> group_by_shift_;                   // (group, dp shift) -> group
  std::unordered_map<uint64_t, std::vector<FlowEnds>> renamed_pairs_;  // (peer, send, class) -> pairs
  std::vector<std::vector<int>> ring_cache_[2];  // [chain_from_root][group]
  std::vector<double> gpu_sent_, gpu_received_;
  std::array<double, kNumPurposes> sent_by_purpose_{};
  double inter_az_bytes_ = 0;
};

}  // namespace trainplan::sim::detail
