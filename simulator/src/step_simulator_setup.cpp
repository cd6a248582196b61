// Setup of a simulation: program checks, flattening into hot task state, communication
// instances and their patterns (with symmetric copies), duplicate-link merging.
#include "step_simulator.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "trainplan/core/random.hpp"

namespace trainplan::sim::detail {

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
  if (t.kind == plan::TaskKind::compute && !p_.op_costs.empty()) {
    const int n = static_cast<int>(p_.op_costs.size());
    if (t.op >= n) throw task_error(r, t.id, t.label, "op " + std::to_string(t.op) + " has no cost in the program");
    for (int o : t.ops)
      if (o < 0 || o >= n) throw task_error(r, t.id, t.label, "merged op " + std::to_string(o) + " has no cost in the program");
  }
}

double StepSimulator::compute_duration(const plan::Task& t) {
  if (p_.op_costs.empty() || (t.op < 0 && t.ops.empty())) return model_.duration_s(t);
  const int first = t.ops.empty() ? t.op : t.ops.front();
  const uint64_t count = t.ops.empty() ? 1 : t.ops.size();
  // Merged tasks are contiguous runs of one unit's ops, so (phase, first op, count) names one.
  const uint64_t key = (static_cast<uint64_t>(t.phase) << 56) | (static_cast<uint64_t>(first) << 24) | count;
  auto it = duration_memo_.find(key);
  if (it != duration_memo_.end()) return it->second;
  const double d = model_.duration_s(t, &p_.op_costs);
  duration_memo_.emplace(key, d);
  return d;
}

double StepSimulator::compute_duration_sms(const plan::Task& t, int sms_taken) {
  if (p_.op_costs.empty() || (t.op < 0 && t.ops.empty())) return model_.duration_s(t, nullptr, sms_taken);
  const int first = t.ops.empty() ? t.op : t.ops.front();
  const uint64_t count = t.ops.empty() ? 1 : t.ops.size();
  // compute_duration's key (phase in bits 56+, first op in 24..47, count below) with the SMs
  // taken in bits 48..55.
  TP_ASSERT(sms_taken > 0 && sms_taken < 256 && first < (1 << 24));
  const uint64_t key = (static_cast<uint64_t>(t.phase) << 56) | (static_cast<uint64_t>(sms_taken) << 48) |
                       (static_cast<uint64_t>(first) << 24) | count;
  auto it = duration_sms_memo_.find(key);
  if (it != duration_sms_memo_.end()) return it->second;
  const double d = model_.duration_s(t, &p_.op_costs, sms_taken);
  duration_sms_memo_.emplace(key, d);
  return d;
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
  host_order_.clear();
  if (host_on()) {
    host_kernels_.assign(n, 0);
    issue_first_.assign(n, kNever);
    issue_end_.assign(n, kNever);
    ready_s_.assign(n, kNever);
  }
  dep_off_.assign(n + 1, 0);
  ranks_.resize(num_sim);

  // Straggler speed per GPU; a class runs at its slowest member's speed.
  auto speed_of_gpu = [&](int gpu) {
    if (opt_.straggler_stddev <= 0) return 1.0;
    return std::max(0.1, Rng(opt_.straggler_seed).fork(static_cast<uint64_t>(gpu)).normal(1.0, opt_.straggler_stddev));
  };

  // One pass over the simulated tasks: hot state, stream order, forward deps (flat), the
  // number of dependents of each task, and (full fidelity) the communication items.
  std::vector<int32_t> last_on_stream, last_work_on_stream;
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
    last_work_on_stream.assign(last_on_stream.size(), -1);
    rs.queue_head = rs.queue_tail = compute_total;
    rs.host_next = static_cast<int32_t>(host_order_.size());
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
          st.value = compute_duration(t) / rs.speed;
          flops_[s] += t.flops;
          ++compute_total;
          if (host_on()) {
            host_kernels_[g] = model_.task_kernels(t, &p_.op_costs);
            host_order_.push_back(static_cast<int32_t>(g));
          }
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
      // Memory tasks are bookkeeping: like any task they wait for the previous task of their
      // stream to have started, but they never hold back the tasks after them, so a program
      // with memory events times exactly like one without (a free after a collective must not
      // hold back the next collective). last_work: the stream's last non-memory task.
      if (static_cast<size_t>(t.stream) >= last_on_stream.size()) {
        last_on_stream.resize(static_cast<size_t>(t.stream) + 1, -1);
        last_work_on_stream.resize(static_cast<size_t>(t.stream) + 1, -1);
      }
      int32_t& prev = last_on_stream[static_cast<size_t>(t.stream)];
      int32_t& prev_work = last_work_on_stream[static_cast<size_t>(t.stream)];
      if (t.kind == plan::TaskKind::alloc || t.kind == plan::TaskKind::free) {
        if (prev >= 0) {
          ts_[static_cast<size_t>(prev)].stream_next_memory = static_cast<int32_t>(g);
          ++st.pending;
        }
      } else {
        if (prev_work >= 0) {
          ts_[static_cast<size_t>(prev_work)].stream_next = static_cast<int32_t>(g);
          ++st.pending;
        }
        prev_work = static_cast<int32_t>(g);
      }
      prev = static_cast<int32_t>(g);
      deps_off[g] = static_cast<int32_t>(deps_flat.size());
      for (int d : t.deps) {
        deps_flat.push_back(base + d);
        ++dep_off_[static_cast<size_t>(base + d) + 1];
      }
    }
    rs.host_end = static_cast<int32_t>(host_order_.size());
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
  const int dp = std::max(1, p_.dp), cp = std::max(1, p_.cp);
  for (int member : sym_.members[static_cast<size_t>(s)]) {
    if (!sym_.header_only[static_cast<size_t>(member)]) continue;
    const auto& m = p_.ranks[static_cast<size_t>(member)];
    const auto& r = p_.ranks[static_cast<size_t>(rep)];
    const int dshift = ((m.dp_rank - r.dp_rank) % dp + dp) % dp;
    const int cshift = ((m.cp_rank - r.cp_rank) % cp + cp) % cp;
    it->second.push_back(group_shifted(group, dshift * cp + cshift, rep, member));
  }
  return it->second;
}

// `group` with every member's dp_rank and cp_rank shifted (`shift` = dp shift * cp + cp shift,
// mod dp and cp); depends on (group, shift) only, so every class shares the work.
int StepSimulator::group_shifted(int group, int shift, int rep, int member) {
  auto [it, inserted] = group_by_shift_.try_emplace((static_cast<uint64_t>(group) << 32) | static_cast<uint32_t>(shift), -1);
  if (!inserted) return it->second;
  if (group_by_members_.empty())
    for (const plan::Group& g : p_.groups) {
      std::vector<int> key = g.ranks;
      std::sort(key.begin(), key.end());
      group_by_members_.emplace(std::move(key), g.id);
    }
  std::vector<int> key;
  for (int r : p_.groups[static_cast<size_t>(group)].ranks) key.push_back(rename(p_, rep, member, r));
  std::sort(key.begin(), key.end());
  auto g = group_by_members_.find(key);
  if (g == group_by_members_.end())
    throw Error("symmetric fidelity: rank " + std::to_string(member) + " (no tasks) would use a group that is not in "
                "the program's groups (group " + std::to_string(group) + " of rank " + std::to_string(rep) + " renamed)")
        .hint("list every group in StepProgram::groups, or lower every rank");
  it->second = g->second;
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
    const int peer_gpu = p_.ranks[static_cast<size_t>(rename(p_, rep, member, peer))].gpu;
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

int StepSimulator::pattern_for_collective(const CommItem& t, const std::vector<int>& groups) {
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
  // The plan's dp algorithm sets how gradients and parameters move; a scalar (the gradient
  // norm) is one torch.distributed all-reduce whose algorithm NCCL's tuner picks (a 4-byte
  // ring over 1024 ranks pays 2 x 1023 step latencies, some 3.5 ms; NCCL's tree takes ~0.1 ms).
  CollectiveAlgorithm a = t.scalar && t.kind == plan::TaskKind::collective ? CollectiveAlgorithm::automatic : algorithm_for(purpose, opt_);
  if (a != CollectiveAlgorithm::automatic) return build(a);
  // NCCL's tuner: the candidate with the lowest uncontended time (ties: the earlier, ring first).
  int best = -1;
  double best_t = 0;
  const std::vector<int> ring0 = ring_of_group(groups[0], chain);
  for (CollectiveAlgorithm c : automatic_candidates(t.collective, ring0, topo_)) {
    const int id = build(c);
    const double time = patterns_[static_cast<size_t>(id)].uncontended_time_s(t.bytes);
    if (best < 0 || time < best_t) best = id, best_t = time;
  }
  return best;
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
    const bool collective = t.kind == plan::TaskKind::collective;

    // In a representatives-only program the copies depend only on the group (and kind and
    // size, which pick the algorithm) or on the (sender, receiver) pair: cached.
    SymmetricKey cache_key;
    if (sym_.only_representatives_have_tasks) {
      if (collective) {
        cache_key = {0, t.group, static_cast<int32_t>(t.collective), t.bytes};
      } else {
        const CommItem& send = refs[0].kind == plan::TaskKind::send ? refs[0] : refs[1];
        cache_key = {1, send.rank, send.peer, 0.0};
      }
      auto it = symmetric_patterns_.find(cache_key);
      if (it != symmetric_patterns_.end()) {
        instances_[static_cast<size_t>(inst)].pattern = it->second;
        continue;
      }
    }

    // Copies: what every class member runs at the members' task indices.
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
    if (sym_.only_representatives_have_tasks)
      symmetric_patterns_.emplace(cache_key, instances_[static_cast<size_t>(inst)].pattern);
  }
}

// Links with the same capacity that every pattern phase uses with the same multiplicity (or
// not at all) impose identical constraints on every coflow at every instant; keeping one of
// them changes no max-min rate. Symmetric fidelity produces many: the copies of a merged
// collective cover every replica's links alike. Phases are rewritten onto one link per class,
// which divides the network's work by the number of replicas.
void StepSimulator::merge_duplicate_links() {
  const auto& links = topo_.links();
  std::vector<std::vector<std::pair<int32_t, int32_t>>> signature(links.size());  // (phase, mult)
  int32_t phase_id = 0;
  for (const CommPattern& pat : patterns_)
    for (const CommPhase& ph : pat.phases) {
      for (const LinkUse& u : ph.uses) signature[static_cast<size_t>(u.link)].push_back({phase_id, u.multiplicity});
      ++phase_id;
    }
  struct SigHash {
    const std::vector<std::vector<std::pair<int32_t, int32_t>>>* sig;
    const std::vector<LinkSpec>* links;
    size_t operator()(int l) const {
      uint64_t h = std::hash<double>{}((*links)[static_cast<size_t>(l)].bandwidth_bytes_per_s);
      for (auto [q, m] : (*sig)[static_cast<size_t>(l)]) h = (h ^ (static_cast<uint64_t>(q) << 8 ^ static_cast<uint64_t>(m))) * 0x100000001b3ULL;
      return static_cast<size_t>(h);
    }
  };
  struct SigEq {
    const std::vector<std::vector<std::pair<int32_t, int32_t>>>* sig;
    const std::vector<LinkSpec>* links;
    bool operator()(int a, int b) const {
      return (*links)[static_cast<size_t>(a)].bandwidth_bytes_per_s == (*links)[static_cast<size_t>(b)].bandwidth_bytes_per_s &&
             (*sig)[static_cast<size_t>(a)] == (*sig)[static_cast<size_t>(b)];
    }
  };
  std::unordered_map<int, int, SigHash, SigEq> first_of_class(links.size(), SigHash{&signature, &links}, SigEq{&signature, &links});
  std::vector<int32_t> rep(links.size());
  bool any = false;
  for (size_t l = 0; l < links.size(); ++l) {
    rep[l] = static_cast<int32_t>(l);
    if (signature[l].empty()) continue;
    auto [it, inserted] = first_of_class.emplace(static_cast<int>(l), static_cast<int>(l));
    if (!inserted) {
      rep[l] = it->second;
      any = true;
    }
  }
  if (!any) return;
  for (CommPattern& pat : patterns_)
    for (CommPhase& ph : pat.phases) {
      std::vector<LinkUse> merged;
      for (const LinkUse& u : ph.uses)
        if (rep[static_cast<size_t>(u.link)] == u.link) merged.push_back(u);
      ph.uses = std::move(merged);
    }
}

}  // namespace trainplan::sim::detail
