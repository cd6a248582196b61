// StepProgram invariants (check_program) and its JSON form (to_json).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/plan/step_program.hpp"

namespace trainplan::plan {
namespace {

bool is_comm(TaskKind k) { return k == TaskKind::send || k == TaskKind::recv || k == TaskKind::collective; }

std::string where(const StepProgram& p, int rank, int task) {
  const Task& t = p.ranks[static_cast<size_t>(rank)].tasks[static_cast<size_t>(task)];
  return "rank " + std::to_string(rank) + " task " + std::to_string(task) + " (\"" + t.label + "\")";
}

struct CommRef {
  int64_t comm_id;
  int rank;
  int task;
};

std::string check_structure(const StepProgram& p) {
  const int world = static_cast<int>(p.ranks.size());
  if (world == 0) return "the program has no ranks";
  if (p.world_size != world) return "world_size is " + std::to_string(p.world_size) + " but there are " + std::to_string(world) + " ranks";
  if (!p.symmetry_class.empty() && p.symmetry_class.size() != p.ranks.size())
    return "symmetry_class has " + std::to_string(p.symmetry_class.size()) + " entries for " + std::to_string(world) + " ranks";
  for (size_t i = 0; i < p.symmetry_class.size(); ++i) {
    const int c = p.symmetry_class[i];
    if (c < 0 || c > static_cast<int>(i) || p.symmetry_class[static_cast<size_t>(c)] != c)
      return "symmetry_class[" + std::to_string(i) + "] = " + std::to_string(c) + " is not a lower-or-equal rank representing itself";
  }
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const Group& grp = p.groups[g];
    if (grp.id != static_cast<int>(g)) return "group " + std::to_string(g) + " says it is group " + std::to_string(grp.id);
    std::vector<int> sorted = grp.ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.empty() || sorted.front() < 0 || sorted.back() >= world || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return "group " + std::to_string(g) + " has an unknown or repeated rank, or none";
  }
  for (int r = 0; r < world; ++r) {
    const RankProgram& rp = p.ranks[static_cast<size_t>(r)];
    if (rp.rank != r) return "ranks[" + std::to_string(r) + "] says it is rank " + std::to_string(rp.rank);
    if (rp.static_bytes < 0) return "rank " + std::to_string(r) + " has negative static_bytes";
    std::map<int64_t, std::pair<double, bool>> buffers;  // id -> (bytes, freed)
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      const int id = static_cast<int>(i);
      if (t.id != id) return where(p, r, id) + ": id is " + std::to_string(t.id);
      if (t.stream < 0 || t.stream >= static_cast<int>(p.streams.size())) return where(p, r, id) + ": unknown stream " + std::to_string(t.stream);
      for (int d : t.deps)
        if (d < 0 || d >= id) return where(p, r, id) + ": dependency " + std::to_string(d) + " is not an earlier task of the rank";
      if (t.flops < 0 || t.mem_bytes < 0 || t.bytes < 0 || t.alloc_bytes < 0) return where(p, r, id) + ": negative flops or bytes";
      if (!(t.issue_s >= 0)) return where(p, r, id) + ": negative or NaN issue_s";
      if (!(t.issue_tail_s >= 0)) return where(p, r, id) + ": negative or NaN issue_tail_s";
      if (is_comm(t.kind) && t.comm_id < 0) return where(p, r, id) + ": communication without a comm_id";
      if ((t.kind == TaskKind::send || t.kind == TaskKind::recv) && (t.peer < 0 || t.peer >= world || t.peer == r))
        return where(p, r, id) + ": bad peer rank " + std::to_string(t.peer);
      if (t.kind == TaskKind::collective) {
        if (t.group < 0 || t.group >= static_cast<int>(p.groups.size())) return where(p, r, id) + ": unknown group " + std::to_string(t.group);
        const auto& members = p.groups[static_cast<size_t>(t.group)].ranks;
        if (std::find(members.begin(), members.end(), r) == members.end())
          return where(p, r, id) + ": the rank is not a member of group " + std::to_string(t.group);
      }
      if (t.kind == TaskKind::alloc) {
        if (t.buffer_id < 0) return where(p, r, id) + ": alloc without a buffer_id";
        if (!buffers.emplace(t.buffer_id, std::make_pair(t.alloc_bytes, false)).second)
          return where(p, r, id) + ": buffer " + std::to_string(t.buffer_id) + " allocated twice";
      }
      if (t.kind == TaskKind::free) {
        auto it = buffers.find(t.buffer_id);
        if (it == buffers.end()) return where(p, r, id) + ": frees buffer " + std::to_string(t.buffer_id) + " that was not allocated before";
        if (it->second.second) return where(p, r, id) + ": buffer " + std::to_string(t.buffer_id) + " freed twice";
        if (it->second.first != t.alloc_bytes)
          return where(p, r, id) + ": frees " + std::to_string(t.alloc_bytes) + " bytes of buffer " + std::to_string(t.buffer_id) + " allocated with " +
                 std::to_string(it->second.first);
        it->second.second = true;
      }
    }
    for (const auto& [buf, state] : buffers)
      if (!state.second) return "rank " + std::to_string(r) + ": buffer " + std::to_string(buf) + " is never freed";
  }
  return "";
}

// Communication tasks of lowered ranks sorted by comm_id; checks the matching rules.
std::string check_matching(const StepProgram& p, const std::vector<bool>& lowered, std::vector<CommRef>& refs) {
  for (const RankProgram& rp : p.ranks)
    for (const Task& t : rp.tasks)
      if (is_comm(t.kind)) refs.push_back({t.comm_id, rp.rank, t.id});
  std::stable_sort(refs.begin(), refs.end(), [](const CommRef& a, const CommRef& b) { return a.comm_id < b.comm_id; });
  for (size_t i = 0; i < refs.size();) {
    size_t j = i;
    while (j < refs.size() && refs[j].comm_id == refs[i].comm_id) ++j;
    const Task& first = p.ranks[static_cast<size_t>(refs[i].rank)].tasks[static_cast<size_t>(refs[i].task)];
    const std::string at = where(p, refs[i].rank, refs[i].task) + " comm_id " + std::to_string(refs[i].comm_id);
    if (first.kind == TaskKind::collective) {
      const auto& members = p.groups[static_cast<size_t>(first.group)].ranks;
      size_t expected = 0;
      for (int m : members) expected += lowered[static_cast<size_t>(m)] ? 1 : 0;
      std::vector<int> seen;
      for (size_t k = i; k < j; ++k) {
        const Task& t = p.ranks[static_cast<size_t>(refs[k].rank)].tasks[static_cast<size_t>(refs[k].task)];
        if (t.kind != TaskKind::collective || t.group != first.group || t.collective != first.collective || t.bytes != first.bytes)
          return at + ": the tasks sharing it differ in kind, group or bytes (" + where(p, refs[k].rank, refs[k].task) + ")";
        seen.push_back(refs[k].rank);
      }
      std::sort(seen.begin(), seen.end());
      if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) return at + ": a rank has two tasks of this collective";
      if (seen.size() != expected)
        return at + ": " + std::to_string(seen.size()) + " of the " + std::to_string(expected) + " group members have a task";
    } else {
      if (j - i > 2) return at + ": more than two tasks share a point-to-point comm_id";
      const Task* send = nullptr;
      const Task* recv = nullptr;
      int send_rank = -1, recv_rank = -1;
      for (size_t k = i; k < j; ++k) {
        const Task& t = p.ranks[static_cast<size_t>(refs[k].rank)].tasks[static_cast<size_t>(refs[k].task)];
        if (t.kind == TaskKind::send && !send) send = &t, send_rank = refs[k].rank;
        else if (t.kind == TaskKind::recv && !recv) recv = &t, recv_rank = refs[k].rank;
        else return at + ": a point-to-point comm_id needs one send and one recv";
      }
      if (!send || !recv) {
        const int peer = send ? send->peer : recv ? recv->peer : -1;
        if (peer >= 0 && lowered[static_cast<size_t>(peer)]) return at + ": has no matching " + (send ? "recv" : "send") + " on rank " + std::to_string(peer);
      } else {
        if (send->peer != recv_rank || recv->peer != send_rank) return at + ": send and recv do not name each other as peers";
        if (send->bytes != recv->bytes) return at + ": send and recv differ in bytes";
      }
    }
    i = j;
  }
  return "";
}

// Runs the program with zero durations: a task starts once its deps have finished and the
// previous task of its stream has started; local tasks finish when they start; communication
// finishes when every party has started it. Reports a task that never starts or finishes.
std::string check_liveness(const StepProgram& p, const std::vector<CommRef>& refs) {
  const size_t world = p.ranks.size();
  std::vector<size_t> base(world + 1, 0);
  for (size_t r = 0; r < world; ++r) base[r + 1] = base[r] + p.ranks[r].tasks.size();
  const size_t n = base[world];
  std::vector<int32_t> pending(n, 0), stream_next(n, -1), dep_off(n + 1, 0), slot(n, -1);
  std::vector<uint8_t> done(n, 0);
  for (size_t r = 0; r < world; ++r) {
    std::vector<int32_t> last(p.streams.size(), -1);
    for (const Task& t : p.ranks[r].tasks) {
      const size_t g = base[r] + static_cast<size_t>(t.id);
      pending[g] = static_cast<int32_t>(t.deps.size());
      int32_t& prev = last[static_cast<size_t>(t.stream)];
      if (prev >= 0) {
        stream_next[static_cast<size_t>(prev)] = static_cast<int32_t>(g);
        ++pending[g];
      }
      prev = static_cast<int32_t>(g);
      for (int d : t.deps) ++dep_off[base[r] + static_cast<size_t>(d) + 1];
    }
  }
  for (size_t i = 0; i < n; ++i) dep_off[i + 1] += dep_off[i];
  std::vector<int32_t> dependents(static_cast<size_t>(dep_off[n]));
  {
    std::vector<int32_t> fill(dep_off.begin(), dep_off.end() - 1);
    for (size_t r = 0; r < world; ++r)
      for (const Task& t : p.ranks[r].tasks)
        for (int d : t.deps) dependents[static_cast<size_t>(fill[base[r] + static_cast<size_t>(d)]++)] = static_cast<int32_t>(base[r] + static_cast<size_t>(t.id));
  }
  // Slots: one per comm_id, with the number of parties.
  std::vector<int32_t> slot_size, slot_arrived;
  std::vector<std::vector<int32_t>> slot_tasks;
  for (size_t i = 0; i < refs.size();) {
    size_t j = i;
    while (j < refs.size() && refs[j].comm_id == refs[i].comm_id) ++j;
    const int32_t s = static_cast<int32_t>(slot_size.size());
    slot_size.push_back(static_cast<int32_t>(j - i));
    slot_arrived.push_back(0);
    slot_tasks.emplace_back();
    for (size_t k = i; k < j; ++k) {
      const size_t g = base[static_cast<size_t>(refs[k].rank)] + static_cast<size_t>(refs[k].task);
      slot[g] = s;
      slot_tasks.back().push_back(static_cast<int32_t>(g));
    }
    i = j;
  }
  std::vector<int32_t> ready;
  for (size_t g = 0; g < n; ++g)
    if (pending[g] == 0) ready.push_back(static_cast<int32_t>(g));
  size_t finished = 0;
  auto finish = [&](int32_t g) {
    done[static_cast<size_t>(g)] = 1;
    ++finished;
    for (int32_t k = dep_off[static_cast<size_t>(g)]; k < dep_off[static_cast<size_t>(g) + 1]; ++k)
      if (--pending[static_cast<size_t>(dependents[static_cast<size_t>(k)])] == 0) ready.push_back(dependents[static_cast<size_t>(k)]);
  };
  while (!ready.empty()) {
    const int32_t g = ready.back();
    ready.pop_back();
    const int32_t next = stream_next[static_cast<size_t>(g)];
    if (next >= 0 && --pending[static_cast<size_t>(next)] == 0) ready.push_back(next);
    const int32_t s = slot[static_cast<size_t>(g)];
    if (s < 0) {
      finish(g);
    } else if (++slot_arrived[static_cast<size_t>(s)] == slot_size[static_cast<size_t>(s)]) {
      for (int32_t m : slot_tasks[static_cast<size_t>(s)]) finish(m);
    }
  }
  if (finished == n) return "";
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < p.ranks[r].tasks.size(); ++i)
      if (!done[base[r] + i])
        return where(p, static_cast<int>(r), static_cast<int>(i)) + " never finishes: the program deadlocks (" + std::to_string(n - finished) +
               " tasks stuck)";
  return "";
}

json::Json ints(const std::vector<int>& v) {
  json::Json a = json::Json::array();
  for (int x : v) a.push_back(x);
  return a;
}

json::Json task_json(const Task& t) {
  json::Json j;
  j["id"] = t.id;
  j["kind"] = std::string(task_kind_name(t.kind));
  j["stream"] = t.stream;
  j["deps"] = ints(t.deps);
  j["label"] = t.label;
  if (t.phase != Phase::none) j["phase"] = std::string(phase_name(t.phase));
  if (t.micro_batch >= 0) j["micro_batch"] = t.micro_batch;
  if (t.unit >= 0) j["unit"] = t.unit;
  if (t.virtual_stage >= 0) j["virtual_stage"] = t.virtual_stage;
  if (t.op >= 0) j["op"] = t.op;
  if (!t.ops.empty()) j["ops"] = ints(t.ops);
  switch (t.kind) {
    case TaskKind::compute:
      j["flops"] = t.flops;
      j["mem_bytes"] = t.mem_bytes;
      if (t.op_kind >= 0) j["op_kind"] = std::string(models::op_kind_name(static_cast<models::OpKind>(t.op_kind)));
      if (t.gemm_m > 0) j["gemm_mnk"] = {t.gemm_m, t.gemm_n, t.gemm_k};
      break;
    case TaskKind::send:
    case TaskKind::recv:
    case TaskKind::collective:
      if (t.kind == TaskKind::collective) {
        j["collective"] = std::string(collective_kind_name(t.collective));
        j["group"] = t.group;
      } else {
        j["peer"] = t.peer;
      }
      j["bytes"] = t.bytes;
      j["purpose"] = std::string(comm_purpose_name(t.purpose));
      j["role"] = std::string(tensor_role_name(t.role));
      j["comm_id"] = t.comm_id;
      if (t.issue_s > 0) j["issue_s"] = t.issue_s;
      if (t.issue_tail_s > 0) j["issue_tail_s"] = t.issue_tail_s;
      break;
    case TaskKind::alloc:
    case TaskKind::free:
      j["buffer"] = std::string(buffer_kind_name(t.buffer));
      j["alloc_bytes"] = t.alloc_bytes;
      j["buffer_id"] = t.buffer_id;
      break;
  }
  return j;
}

}  // namespace

std::string check_program(const StepProgram& program) {
  if (std::string e = check_structure(program); !e.empty()) return e;
  std::vector<bool> lowered(program.ranks.size());
  bool all = true;
  for (size_t r = 0; r < program.ranks.size(); ++r) {
    lowered[r] = !program.ranks[r].tasks.empty();
    all = all && lowered[r];
  }
  std::vector<CommRef> refs;
  if (std::string e = check_matching(program, lowered, refs); !e.empty()) return e;
  if (all) return check_liveness(program, refs);
  return "";
}

json::Json to_json(const StepProgram& p) {
  json::Json doc;
  doc["world_size"] = p.world_size;
  doc["dp"] = p.dp;
  doc["tp"] = p.tp;
  doc["pp"] = p.pp;
  doc["vp"] = p.vp;
  if (p.cp > 1) doc["cp"] = p.cp;  // written only with context parallelism (cp = 1 programs unchanged)
  doc["num_micro_batches"] = p.num_micro_batches;
  doc["micro_batch"] = p.micro_batch;
  doc["granularity"] = p.granularity == Granularity::op ? "op" : "layer";
  doc["streams"] = p.streams;
  json::Json groups = json::Json::array();
  for (const Group& g : p.groups) {
    json::Json j;
    j["id"] = g.id;
    j["purpose"] = std::string(comm_purpose_name(g.purpose));
    j["ranks"] = ints(g.ranks);
    groups.push_back(std::move(j));
  }
  doc["groups"] = std::move(groups);
  doc["symmetry_class"] = ints(p.symmetry_class);
  json::Json ranks = json::Json::array();
  for (const RankProgram& rp : p.ranks) {
    json::Json j;
    j["rank"] = rp.rank;
    j["gpu"] = rp.gpu;
    j["dp_rank"] = rp.dp_rank;
    j["tp_rank"] = rp.tp_rank;
    j["pp_rank"] = rp.pp_rank;
    if (p.cp > 1) j["cp_rank"] = rp.cp_rank;
    j["static_bytes"] = rp.static_bytes;
    json::Json tasks = json::Json::array();
    for (const Task& t : rp.tasks) tasks.push_back(task_json(t));
    j["tasks"] = std::move(tasks);
    ranks.push_back(std::move(j));
  }
  doc["ranks"] = std::move(ranks);
  return doc;
}

}  // namespace trainplan::plan
