// The step simulator: tasks of every simulated rank on one event queue; compute on a per-GPU
// engine, communication as phases of coflows on the flow network.
#include "trainplan/simulator/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "breakdown.hpp"
#include "comm_index.hpp"
#include "symmetry.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/event_queue.hpp"
#include "trainplan/simulator/network.hpp"

namespace trainplan::sim {
namespace {

using detail::CommIndex;
using detail::is_comm;
using detail::CommItem;

enum EventType : int32_t {
  kComputeDone = 0,  // a = task, b = version of the rank's running compute
  kTransfer = 1,     // a = instance, b = phase: latency over, data starts moving (phase ==
                     // number of phases: the instance is complete)
};

constexpr double kNever = -1;

Precision default_precision(const hw::GpuSpec& gpu) {
  return gpu.peak_flops.count(Precision::bf16) ? Precision::bf16 : Precision::fp16;
}

CollectiveAlgorithm algorithm_for(plan::CommPurpose purpose, const SimOptions& o) {
  switch (purpose) {
    case plan::CommPurpose::dp:
    case plan::CommPurpose::zero_grad:
    case plan::CommPurpose::zero_param: return from_dp_algorithm(o.dp_algorithm);
    case plan::CommPurpose::ps: return CollectiveAlgorithm::parameter_server;
    default: return o.other_algorithm;
  }
}

Error task_error(int rank, int task, const std::string& label, const std::string& what) {
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
    double rate = 1;        // 1, or 1/(1+overlap_slowdown) while data moves
    int64_t version = 0;
    int32_t queue_head = 0, queue_tail = 0;  // into compute_queue_
    int comm_active = 0;
    double mem_now = 0, mem_peak = 0;        // live allocations
  };
  struct Instance {
    int32_t expected = 0;
    int32_t arrived = 0;
    int32_t member_off = 0;
    int32_t pattern = -1;
    double size_bytes = 0;
    double active_s = kNever;  // when every member had arrived and data started moving
    plan::CommPurpose purpose = plan::CommPurpose::none;
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
  int pattern_for_collective(const detail::CommItem& t, const std::vector<int>& groups);
  int new_instance(const detail::CommItem& first, int32_t expected);
  void build_instances_full(const CommIndex& index);
  void build_instances_symmetric(const CommIndex& index);
  int pattern_for_p2p(const std::vector<FlowEnds>& pairs);
  const std::vector<int>& ring_of_group(int group, bool chain_from_root);
  int intern(std::vector<int64_t> key, CommPattern pattern);
  const std::vector<int>& renamed_copies(int group, int s, int rep);
  const std::vector<FlowEnds>& renamed_pairs(int peer, bool send, int s, int rep);

  // run
  void start_task(int t);
  void notify_stream(int t) {
    const int n = ts_[static_cast<size_t>(t)].stream_next;
    if (n >= 0 && --ts_[static_cast<size_t>(n)].pending == 0) ready_.push_back(n);
  }
  void finish(int t);
  void begin_next_compute(int s);
  void comm_activity(int s, int delta);
  void arrive(int inst, int t);
  void begin_instance(int inst);
  void schedule_phase(int inst, int phase, double t0);
  void on_transfer(int inst, int phase);
  void phase_done(int inst, int phase);
  void complete(int inst);
  void drain();
  [[noreturn]] void report_stall() const;

  // results
  StepResult collect(double wall_s);
  std::vector<detail::Interval> intervals_of(int s) const;

  const plan::StepProgram& p_;
  const Topology& topo_;
  const hw::GpuSpec& gpu_;
  const SimOptions& opt_;
  Precision precision_;
  ComputeModel model_;
  SeqCounter seq_;
  EventQueue queue_;
  FlowNetwork net_;
  double now_ = 0;
  SimStats stats_;

  detail::Symmetry sym_;
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
    int32_t stream_next = -1;
    int32_t instance = -1;     // communication instance
    plan::TaskKind kind = plan::TaskKind::compute;
  };
  std::vector<TaskState> ts_;
  std::vector<int32_t> dep_off_, dep_list_;
  std::vector<double> flops_;                   // per simulated rank
  std::vector<detail::CommItem> comm_items_;    // full fidelity: gathered by flatten()
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
  std::unordered_map<uint64_t, std::vector<int>> renamed_groups_;      // (group, class) -> groups
  std::unordered_map<uint64_t, std::vector<FlowEnds>> renamed_pairs_;  // (peer, send, class) -> pairs
  std::vector<std::vector<int>> ring_cache_[2];  // [chain_from_root][group]
  std::vector<double> gpu_sent_, gpu_received_;
  std::array<double, kNumPurposes> sent_by_purpose_{};
};

// ---- setup ---------------------------------------------------------------------------------

void StepSimulator::validate_program() const {
  const int world = static_cast<int>(p_.ranks.size());
  if (world < 1) throw Error("the program has no ranks");
  if (p_.world_size != 0 && p_.world_size != world)
    throw Error("world_size is " + std::to_string(p_.world_size) + " but the program has " + std::to_string(world) + " ranks");
  for (int r = 0; r < world; ++r) {
    const plan::RankProgram& rp = p_.ranks[static_cast<size_t>(r)];
    if (rp.rank != r) throw Error("ranks[" + std::to_string(r) + "] says it is rank " + std::to_string(rp.rank));
    if (rp.gpu < 0 || rp.gpu >= topo_.num_gpus())
      throw Error("rank " + std::to_string(r) + " runs on GPU " + std::to_string(rp.gpu) + " but the cluster has " +
                  std::to_string(topo_.num_gpus()) + " GPUs")
          .hint("the plan's world size must match the cluster");
    if (opt_.fidelity == Fidelity::full && rp.tasks.empty() && r < static_cast<int>(p_.symmetry_class.size())) {
      const int rep = p_.symmetry_class[static_cast<size_t>(r)];
      if (rep >= 0 && rep < world && rep != r && !p_.ranks[static_cast<size_t>(rep)].tasks.empty())
        throw Error("rank " + std::to_string(r) + " has no tasks but its class representative rank " + std::to_string(rep) +
                    " has: a representatives-only program")
            .hint("simulate it with symmetric fidelity, or lower every rank for full fidelity");
    }
  }
}

// Task-level checks, run by flatten() on the simulated ranks (in symmetric fidelity the other
// ranks were checked equal to their representative).
void StepSimulator::validate_task(int r, int i, const plan::Task& t) const {
  if (t.id != i) throw task_error(r, i, t.label, "id is " + std::to_string(t.id));
  if (t.stream < 0 || (!p_.streams.empty() && t.stream >= static_cast<int>(p_.streams.size())))
    throw task_error(r, t.id, t.label, "unknown stream " + std::to_string(t.stream));
  for (int d : t.deps)
    if (d < 0 || d >= t.id)
      throw task_error(r, t.id, t.label, "dependency " + std::to_string(d) + " is not an earlier task of the rank");
  if ((t.kind == plan::TaskKind::send || t.kind == plan::TaskKind::recv) &&
      (t.peer < 0 || t.peer >= static_cast<int>(p_.ranks.size())))
    throw task_error(r, t.id, t.label, "unknown peer rank " + std::to_string(t.peer));
  if (t.flops < 0 || t.mem_bytes < 0 || t.bytes < 0 || t.alloc_bytes < 0)
    throw task_error(r, t.id, t.label, "negative flops or bytes");
}

void StepSimulator::flatten() {
  const int world = static_cast<int>(p_.ranks.size());
  sim_of_rank_.assign(static_cast<size_t>(world), -1);
  for (size_t s = 0; s < sym_.reps.size(); ++s) sim_of_rank_[static_cast<size_t>(sym_.reps[s])] = static_cast<int>(s);
  const size_t num_sim = sym_.reps.size();
  task_base_.assign(num_sim + 1, 0);
  for (size_t s = 0; s < num_sim; ++s)
    task_base_[s + 1] = task_base_[s] + static_cast<int32_t>(p_.ranks[static_cast<size_t>(sym_.reps[s])].tasks.size());
  const size_t n = static_cast<size_t>(task_base_[num_sim]);
  tasks_.resize(n);
  ts_.assign(n, TaskState{});
  dep_off_.assign(n + 1, 0);
  ranks_.resize(num_sim);

  // Straggler speed per GPU; a class runs at its slowest member's speed.
  auto speed_of_gpu = [&](int gpu) {
    if (opt_.straggler_stddev <= 0) return 1.0;
    return std::max(0.1, Rng(opt_.straggler_seed).fork(static_cast<uint64_t>(gpu)).normal(1.0, opt_.straggler_stddev));
  };

  // One pass over the simulated tasks: hot state, stream order, forward deps (flat), the
  // number of dependents of each task, and (full fidelity) the communication items.
  std::vector<int32_t> last_on_stream;
  std::vector<int32_t> deps_flat, deps_off(n + 1, 0);
  int32_t compute_total = 0;
  const bool full = opt_.fidelity == Fidelity::full;
  if (full) comm_items_.clear();
  flops_.assign(num_sim, 0);
  for (size_t s = 0; s < num_sim; ++s) {
    const plan::RankProgram& rp = p_.ranks[static_cast<size_t>(sym_.reps[s])];
    RankState& rs = ranks_[s];
    rs.rank = rp.rank;
    rs.gpu = rp.gpu;
    rs.speed = std::numeric_limits<double>::infinity();
    for (int m : sym_.members[s]) rs.speed = std::min(rs.speed, speed_of_gpu(p_.ranks[static_cast<size_t>(m)].gpu));
    const int32_t base = task_base_[s];
    last_on_stream.assign(p_.streams.empty() ? 64 : p_.streams.size(), -1);
    rs.queue_head = rs.queue_tail = compute_total;
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const plan::Task& t = rp.tasks[i];
      validate_task(rp.rank, static_cast<int>(i), t);
      const auto g = static_cast<size_t>(base + t.id);
      TaskState& st = ts_[g];
      tasks_[g] = &t;
      st.kind = t.kind;
      st.owner = static_cast<int32_t>(s);
      st.pending = static_cast<int32_t>(t.deps.size());
      switch (t.kind) {
        case plan::TaskKind::compute:
          st.value = model_.duration_s(t) / rs.speed;
          flops_[s] += t.flops;
          ++compute_total;
          break;
        case plan::TaskKind::alloc: st.value = t.alloc_bytes; break;
        case plan::TaskKind::free: st.value = -t.alloc_bytes; break;
        default:
          if (full) {
            if (t.comm_id < 0)
              throw task_error(rp.rank, t.id, t.label, "communication task without a comm_id");
            comm_items_.push_back(CommItem::of(rp.rank, t));
          }
          break;
      }
      if (static_cast<size_t>(t.stream) >= last_on_stream.size()) last_on_stream.resize(static_cast<size_t>(t.stream) + 1, -1);
      int32_t& prev = last_on_stream[static_cast<size_t>(t.stream)];
      if (prev >= 0) {
        ts_[static_cast<size_t>(prev)].stream_next = static_cast<int32_t>(g);
        ++st.pending;
      }
      prev = static_cast<int32_t>(g);
      deps_off[g] = static_cast<int32_t>(deps_flat.size());
      for (int d : t.deps) {
        deps_flat.push_back(base + d);
        ++dep_off_[static_cast<size_t>(base + d) + 1];
      }
    }
  }
  deps_off[n] = static_cast<int32_t>(deps_flat.size());
  compute_queue_.assign(static_cast<size_t>(compute_total), -1);
  // Dependents in CSR form, each list in increasing task order.
  for (size_t i = 0; i < n; ++i) dep_off_[i + 1] += dep_off_[i];
  dep_list_.assign(static_cast<size_t>(dep_off_[n]), 0);
  std::vector<int32_t> fill(dep_off_.begin(), dep_off_.end() - 1);
  for (size_t g = 0; g < n; ++g)
    for (int32_t i = deps_off[g]; i < deps_off[g + 1]; ++i) {
      const auto src = static_cast<size_t>(deps_flat[static_cast<size_t>(i)]);
      dep_list_[static_cast<size_t>(fill[src]++)] = static_cast<int32_t>(g);
    }
  gpu_sent_.assign(static_cast<size_t>(topo_.num_gpus()), 0);
  gpu_received_.assign(static_cast<size_t>(topo_.num_gpus()), 0);
}

// The groups that `group` of representative `rep` (simulated index s) becomes in the
// programs of the class's header-only members.
const std::vector<int>& StepSimulator::renamed_copies(int group, int s, int rep) {
  auto [it, inserted] = renamed_groups_.try_emplace((static_cast<uint64_t>(group) << 32) | static_cast<uint32_t>(s));
  if (!inserted) return it->second;
  if (group_by_members_.empty())
    for (const plan::Group& g : p_.groups) {
      std::vector<int> key = g.ranks;
      std::sort(key.begin(), key.end());
      group_by_members_.emplace(std::move(key), g.id);
    }
  std::vector<int> key;
  for (int member : sym_.members[static_cast<size_t>(s)]) {
    if (!sym_.header_only[static_cast<size_t>(member)]) continue;
    key.clear();
    for (int r : p_.groups[static_cast<size_t>(group)].ranks) key.push_back(detail::rename(p_, rep, member, r));
    std::sort(key.begin(), key.end());
    auto g = group_by_members_.find(key);
    if (g == group_by_members_.end())
      throw Error("symmetric fidelity: rank " + std::to_string(member) + " (no tasks) would use a group that is not in "
                  "the program's groups (group " + std::to_string(group) + " of rank " + std::to_string(rep) + " renamed)")
          .hint("list every group in StepProgram::groups, or lower every rank");
    it->second.push_back(g->second);
  }
  return it->second;
}

// The (src, dst) GPU pairs that a send to / recv from `peer` of representative `rep`
// (simulated index s) becomes in the programs of the class's header-only members.
const std::vector<FlowEnds>& StepSimulator::renamed_pairs(int peer, bool send, int s, int rep) {
  const uint64_t key = (static_cast<uint64_t>(peer) << 33) | (static_cast<uint64_t>(send) << 32) | static_cast<uint32_t>(s);
  auto [it, inserted] = renamed_pairs_.try_emplace(key);
  if (!inserted) return it->second;
  for (int member : sym_.members[static_cast<size_t>(s)]) {
    if (!sym_.header_only[static_cast<size_t>(member)]) continue;
    const int peer_gpu = p_.ranks[static_cast<size_t>(detail::rename(p_, rep, member, peer))].gpu;
    const int own_gpu = p_.ranks[static_cast<size_t>(member)].gpu;
    it->second.push_back(send ? FlowEnds{own_gpu, peer_gpu} : FlowEnds{peer_gpu, own_gpu});
  }
  return it->second;
}

int StepSimulator::intern(std::vector<int64_t> key, CommPattern pattern) {
  auto [it, inserted] = pattern_ids_.emplace(std::move(key), static_cast<int>(patterns_.size()));
  if (inserted) patterns_.push_back(std::move(pattern));
  return it->second;
}

const std::vector<int>& StepSimulator::ring_of_group(int group, bool chain_from_root) {
  auto& cache = ring_cache_[chain_from_root ? 1 : 0];
  if (cache.size() < p_.groups.size()) cache.resize(p_.groups.size());
  std::vector<int>& ring = cache[static_cast<size_t>(group)];
  if (ring.empty()) {
    const plan::Group& g = p_.groups[static_cast<size_t>(group)];
    std::vector<int> gpus;
    for (int r : g.ranks) gpus.push_back(p_.ranks[static_cast<size_t>(r)].gpu);
    ring = topo_.ring_order(gpus);
    if (chain_from_root && !gpus.empty()) {
      auto root = std::find(ring.begin(), ring.end(), gpus[0]);
      std::rotate(ring.begin(), root, ring.end());
    }
  }
  return ring;
}

int StepSimulator::pattern_for_collective(const detail::CommItem& t, const std::vector<int>& groups) {
  const plan::Group& g0 = p_.groups[static_cast<size_t>(groups[0])];
  const plan::CommPurpose purpose = t.purpose != plan::CommPurpose::none ? t.purpose : g0.purpose;
  const bool chain = t.collective == plan::CollectiveKind::broadcast || t.collective == plan::CollectiveKind::reduce;
  auto build = [&](CollectiveAlgorithm a) {
    const uint64_t fast = groups.size() == 1 ? (static_cast<uint64_t>(groups[0]) << 16) |
                                                    (static_cast<uint64_t>(t.collective) << 8) | static_cast<uint64_t>(a)
                                              : 0;
    if (groups.size() == 1) {
      auto f = single_group_patterns_.find(fast);
      if (f != single_group_patterns_.end()) return f->second;
    }
    std::vector<int64_t> key{0, static_cast<int64_t>(t.collective), static_cast<int64_t>(a)};
    for (int g : groups) key.push_back(g);
    auto it = pattern_ids_.find(key);
    if (it != pattern_ids_.end()) return it->second;
    std::vector<std::vector<int>> copies;
    for (int g : groups) copies.push_back(ring_of_group(g, chain));
    const int id = intern(std::move(key), build_pattern(t.collective, a, copies, topo_));
    if (groups.size() == 1) single_group_patterns_.emplace(fast, id);
    return id;
  };
  CollectiveAlgorithm a = algorithm_for(purpose, opt_);
  if (a != CollectiveAlgorithm::automatic) return build(a);
  const int ring = build(CollectiveAlgorithm::ring);
  const int tree = build(CollectiveAlgorithm::tree);
  const double t_ring = patterns_[static_cast<size_t>(ring)].uncontended_time_s(t.bytes);
  const double t_tree = patterns_[static_cast<size_t>(tree)].uncontended_time_s(t.bytes);
  return t_tree < t_ring ? tree : ring;
}

int StepSimulator::pattern_for_p2p(const std::vector<FlowEnds>& pairs) {
  if (pairs.size() == 1) {
    const uint64_t fast = (static_cast<uint64_t>(pairs[0].src_gpu) << 32) | static_cast<uint32_t>(pairs[0].dst_gpu);
    auto f = single_pair_patterns_.find(fast);
    if (f != single_pair_patterns_.end()) return f->second;
    const int id = intern({1, static_cast<int64_t>(fast)}, build_p2p_pattern(pairs, topo_));
    single_pair_patterns_.emplace(fast, id);
    return id;
  }
  std::vector<int64_t> key{1};
  for (const FlowEnds& f : pairs) key.push_back((static_cast<int64_t>(f.src_gpu) << 32) | f.dst_gpu);
  auto it = pattern_ids_.find(key);
  if (it != pattern_ids_.end()) return it->second;
  return intern(std::move(key), build_p2p_pattern(pairs, topo_));
}

// One instance per set of simulated tasks that together run one communication. Full fidelity:
// the tasks sharing a comm_id. Symmetric: the representatives' counterparts (same task index)
// of the comm_id's tasks, and the data moved is that of every renamed copy (the comm_ids of
// the class members at those task indices, or for header-only members the representative's
// communication renamed), so the network carries the whole cluster's load.
int StepSimulator::new_instance(const CommItem& first, int32_t expected) {
  Instance inst;
  inst.expected = expected;
  inst.member_off = static_cast<int32_t>(members_.size());
  inst.size_bytes = first.bytes;
  inst.purpose = first.purpose;
  if (first.kind == plan::TaskKind::collective && first.purpose == plan::CommPurpose::none)
    inst.purpose = p_.groups[static_cast<size_t>(first.group)].purpose;
  members_.resize(members_.size() + static_cast<size_t>(expected), -1);
  instances_.push_back(inst);
  return static_cast<int>(instances_.size()) - 1;
}

void StepSimulator::build_instances_full(const CommIndex& index) {
  std::vector<int> groups(1);
  std::vector<FlowEnds> pairs(1);
  for (int slot = 0; slot < index.slots(); ++slot) {
    const auto refs = index.refs(slot);
    const CommItem& first = refs[0];
    const int inst = new_instance(first, static_cast<int32_t>(refs.size()));
    if (first.kind == plan::TaskKind::collective) {
      groups[0] = first.group;
      instances_[static_cast<size_t>(inst)].pattern = pattern_for_collective(first, groups);
    } else {
      const CommItem& send = first.kind == plan::TaskKind::send ? refs[0] : refs[1];
      pairs[0] = {p_.ranks[static_cast<size_t>(send.rank)].gpu, p_.ranks[static_cast<size_t>(send.peer)].gpu};
      instances_[static_cast<size_t>(inst)].pattern = pattern_for_p2p(pairs);
    }
    // Every rank is simulated, in rank order.
    for (const CommItem& r : refs) ts_[static_cast<size_t>(task_base_[static_cast<size_t>(r.rank)] + r.task)].instance = inst;
  }
}

void StepSimulator::build_instances_symmetric(const CommIndex& index) {
  std::vector<int32_t> mapped;
  std::vector<int> groups;
  std::vector<FlowEnds> pairs;
  const size_t n = tasks_.size();
  for (size_t g = 0; g < n; ++g) {
    if (!is_comm(ts_[g].kind) || ts_[g].instance >= 0) continue;
    const plan::Task& t = *tasks_[g];
    const auto refs = index.refs(index.slot(t.comm_id));
    mapped.clear();
    for (const CommItem& r : refs) {
      const int rep = sym_.rep_of[static_cast<size_t>(r.rank)];
      mapped.push_back(task_base_[static_cast<size_t>(sim_of_rank_[static_cast<size_t>(rep)])] + r.task);
    }
    std::sort(mapped.begin(), mapped.end());
    mapped.erase(std::unique(mapped.begin(), mapped.end()), mapped.end());
    if (mapped.front() != static_cast<int32_t>(g))
      throw task_error(ranks_[static_cast<size_t>(ts_[g].owner)].rank, t.id, t.label,
                       "symmetric fidelity: its communication does not map consistently onto the class "
                       "representatives")
          .hint("simulate with full fidelity, or fix the program's symmetry_class");
    const int inst = new_instance(refs[0], static_cast<int32_t>(mapped.size()));
    for (int32_t m : mapped) ts_[static_cast<size_t>(m)].instance = inst;

    // Copies: what every class member runs at the members' task indices.
    const bool collective = t.kind == plan::TaskKind::collective;
    groups.clear();
    pairs.clear();
    auto add_slot = [&](int c) {
      for (const CommItem& r : index.refs(c)) {
        if (collective) {
          groups.push_back(r.group);
          return;
        }
        if (r.kind == plan::TaskKind::send)
          pairs.push_back({p_.ranks[static_cast<size_t>(r.rank)].gpu, p_.ranks[static_cast<size_t>(r.peer)].gpu});
      }
    };
    for (int32_t m : mapped) {
      const int s = ts_[static_cast<size_t>(m)].owner;
      const int task = m - task_base_[static_cast<size_t>(s)];
      const int rep = sym_.reps[static_cast<size_t>(s)];
      const plan::Task& rt = *tasks_[static_cast<size_t>(m)];
      for (int member : sym_.members[static_cast<size_t>(s)])
        if (!sym_.header_only[static_cast<size_t>(member)])
          add_slot(index.slot(p_.ranks[static_cast<size_t>(member)].tasks[static_cast<size_t>(task)].comm_id));
      if (sym_.any_header_only) {
        // The header-only members' copies depend only on (group or peer, class): cached.
        if (collective) {
          const auto& renamed = renamed_copies(rt.group, s, rep);
          groups.insert(groups.end(), renamed.begin(), renamed.end());
        } else {
          const auto& renamed = renamed_pairs(rt.peer, rt.kind == plan::TaskKind::send, s, rep);
          pairs.insert(pairs.end(), renamed.begin(), renamed.end());
        }
      }
    }
    if (collective) {
      std::sort(groups.begin(), groups.end());
      groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
      instances_[static_cast<size_t>(inst)].pattern = pattern_for_collective(refs[0], groups);
    } else {
      std::sort(pairs.begin(), pairs.end(), [](const FlowEnds& a, const FlowEnds& b) {
        return a.src_gpu < b.src_gpu || (a.src_gpu == b.src_gpu && a.dst_gpu < b.dst_gpu);
      });
      pairs.erase(std::unique(pairs.begin(), pairs.end(),
                              [](const FlowEnds& a, const FlowEnds& b) { return a.src_gpu == b.src_gpu && a.dst_gpu == b.dst_gpu; }),
                  pairs.end());
      instances_[static_cast<size_t>(inst)].pattern = pattern_for_p2p(pairs);
    }
  }
}

// ---- run -----------------------------------------------------------------------------------

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

void StepSimulator::begin_next_compute(int s) {
  RankState& rs = ranks_[static_cast<size_t>(s)];
  if (rs.running >= 0 || rs.queue_head == rs.queue_tail) return;
  const int t = compute_queue_[static_cast<size_t>(rs.queue_head++)];
  rs.running = t;
  ts_[static_cast<size_t>(t)].start_s = now_;
  notify_stream(t);
  rs.work_left_s = ts_[static_cast<size_t>(t)].value;
  rs.last_s = now_;
  rs.rate = rs.comm_active > 0 && opt_.overlap_slowdown > 0 ? 1.0 / (1.0 + opt_.overlap_slowdown) : 1.0;
  queue_.push(now_ + rs.work_left_s / rs.rate, kComputeDone, t, ++rs.version);
}

void StepSimulator::comm_activity(int s, int delta) {
  RankState& rs = ranks_[static_cast<size_t>(s)];
  const bool was = rs.comm_active > 0;
  rs.comm_active += delta;
  const bool is = rs.comm_active > 0;
  if (was == is || opt_.overlap_slowdown <= 0 || rs.running < 0) return;
  rs.work_left_s -= (now_ - rs.last_s) * rs.rate;
  if (rs.work_left_s < 0) rs.work_left_s = 0;
  rs.last_s = now_;
  rs.rate = is ? 1.0 / (1.0 + opt_.overlap_slowdown) : 1.0;
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
  for (int32_t i = 0; i < in.expected; ++i) {
    const int32_t t = members_[static_cast<size_t>(in.member_off + i)];
    comm_activity(ts_[static_cast<size_t>(t)].owner, +1);
  }
  ++stats_.comm_instances;
  schedule_phase(inst, 0, now_ + opt_.comm_launch_s);
}

void StepSimulator::schedule_phase(int inst, int phase, double t0) {
  const CommPattern& pat = patterns_[static_cast<size_t>(instances_[static_cast<size_t>(inst)].pattern)];
  const double latency = phase < static_cast<int>(pat.phases.size()) ? pat.phases[static_cast<size_t>(phase)].latency_s : 0.0;
  queue_.push(t0 + latency, kTransfer, inst, phase);
}

void StepSimulator::on_transfer(int inst, int phase) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  const CommPattern& pat = patterns_[static_cast<size_t>(in.pattern)];
  if (phase == static_cast<int>(pat.phases.size())) {
    complete(inst);
    return;
  }
  const CommPhase& ph = pat.phases[static_cast<size_t>(phase)];
  const double bytes = ph.bytes_factor * in.size_bytes;
  if (bytes > 0 && !ph.uses.empty()) {
    net_.start(ph.uses, bytes, now_, static_cast<int64_t>(inst) * 8 + phase);
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
    for (const FlowEnds& f : ph.flows) {
      gpu_sent_[static_cast<size_t>(f.src_gpu)] += bytes;
      gpu_received_[static_cast<size_t>(f.dst_gpu)] += bytes;
    }
    sent_by_purpose_[static_cast<size_t>(in.purpose)] += bytes * static_cast<double>(ph.flows.size());
  }
  schedule_phase(inst, phase + 1, now_);
}

void StepSimulator::complete(int inst) {
  const Instance& in = instances_[static_cast<size_t>(inst)];
  for (int32_t i = 0; i < in.expected; ++i) {
    const int32_t t = members_[static_cast<size_t>(in.member_off + i)];
    comm_activity(ts_[static_cast<size_t>(t)].owner, -1);
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
  sym_ = opt_.fidelity == Fidelity::symmetric ? detail::symmetric_classes(p_) : detail::identity_symmetry(p_);
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
  }
  queue_.reserve(1024);
  stats_.setup_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
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
      const Event e = queue_.pop();
      now_ = e.time_s;
      if (e.type == kComputeDone) {
        RankState& rs = ranks_[static_cast<size_t>(ts_[static_cast<size_t>(e.a)].owner)];
        if (e.b != rs.version || rs.running != e.a) continue;  // superseded by a rate change
        ++stats_.events;
        rs.running = -1;
        finish(e.a);
        begin_next_compute(ts_[static_cast<size_t>(e.a)].owner);
      } else {
        ++stats_.events;
        on_transfer(e.a, static_cast<int>(e.b));
      }
    }
    drain();
  }
  for (size_t g = 0; g < tasks_.size(); ++g)
    if (ts_[g].end_s < 0) report_stall();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return collect(wall);
}

// ---- results -------------------------------------------------------------------------------

std::vector<detail::Interval> StepSimulator::intervals_of(int s) const {
  std::vector<detail::Interval> out;
  for (int32_t g = task_base_[static_cast<size_t>(s)]; g < task_base_[static_cast<size_t>(s) + 1]; ++g) {
    const plan::Task& t = *tasks_[static_cast<size_t>(g)];
    const double start = ts_[static_cast<size_t>(g)].start_s, end = ts_[static_cast<size_t>(g)].end_s;
    if (t.kind == plan::TaskKind::compute) {
      out.push_back({start, end, t.phase == plan::Phase::optimizer ? detail::IntervalKind::optimizer : detail::IntervalKind::compute});
    } else if (is_comm(t.kind)) {
      const double active = instances_[static_cast<size_t>(ts_[static_cast<size_t>(g)].instance)].active_s;
      const plan::CommPurpose purpose = instances_[static_cast<size_t>(ts_[static_cast<size_t>(g)].instance)].purpose;
      out.push_back({active, end, detail::IntervalKind::comm, purpose});
      if (purpose == plan::CommPurpose::pp) out.push_back({start, active, detail::IntervalKind::pp_wait});
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
  r.breakdown = detail::classify(intervals_of(static_cast<int>(critical)), r.step_time_s, ranks_[critical].rank);

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
    size_t total = 0;
    for (size_t rank = 0; rank < world; ++rank)
      total += p_.ranks[static_cast<size_t>(sym_.header_only[rank] ? sym_.rep_of[rank] : static_cast<int>(rank))].tasks.size();
    tl.events.reserve(total);
    for (size_t rank = 0; rank < world; ++rank) {
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

}  // namespace

// ---- public API ------------------------------------------------------------------------------

std::string_view fidelity_name(Fidelity f) { return f == Fidelity::symmetric ? "symmetric" : "full"; }

double Breakdown::exposed_comm_total_s() const {
  double total = 0;
  for (double v : exposed_comm_s) total += v;
  return total;
}

SimOptions options_for(const plan::Plan& plan) {
  SimOptions o;
  o.dp_algorithm = plan.dp_algorithm;
  o.precision = plan.precision;
  return o;
}

StepResult simulate_step(const plan::StepProgram& program, const Topology& topology, const hw::GpuSpec& gpu,
                         const SimOptions& options) {
  if (options.overlap_slowdown < 0) throw Error("overlap_slowdown must be >= 0");
  if (options.comm_launch_s < 0) throw Error("comm_launch_s must be >= 0");
  if (options.straggler_stddev < 0) throw Error("straggler_stddev must be >= 0");
  StepSimulator sim(program, topology, gpu, options);
  return sim.run();
}

StepResult simulate_step(const plan::StepProgram& program, const hw::Cluster& cluster, const SimOptions& options) {
  ClusterTopology topology(cluster);
  return simulate_step(program, topology, cluster.gpu_spec(), options);
}

}  // namespace trainplan::sim
