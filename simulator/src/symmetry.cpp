#include "symmetry.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "trainplan/core/error.hpp"

namespace trainplan::sim::detail {
namespace {

// The first field in which two tasks differ beyond renaming, or nullptr.
const char* task_difference(const plan::Task& a, const plan::Task& b) {
  if (a.kind != b.kind) return "kind";
  if (a.stream != b.stream) return "stream";
  if (a.deps != b.deps) return "deps";
  if (a.phase != b.phase) return "phase";
  if (a.flops != b.flops) return "flops";
  if (a.mem_bytes != b.mem_bytes) return "mem_bytes";
  if (a.op_kind != b.op_kind) return "op_kind";
  if (a.gemm_m != b.gemm_m || a.gemm_n != b.gemm_n || a.gemm_k != b.gemm_k) return "gemm shape";
  if (a.ops.size() != b.ops.size()) return "ops";
  if (a.collective != b.collective) return "collective";
  if (a.bytes != b.bytes) return "bytes";
  if (a.issue_s != b.issue_s) return "issue_s";
  if (a.issue_tail_s != b.issue_tail_s) return "issue_tail_s";
  if (a.purpose != b.purpose) return "purpose";
  if (a.alloc_bytes != b.alloc_bytes) return "alloc_bytes";
  return nullptr;
}

Symmetry finish(const plan::StepProgram& program, const std::vector<int>& class_key) {
  const int world = static_cast<int>(program.ranks.size());
  Symmetry s;
  s.rep_of.assign(static_cast<size_t>(world), -1);
  std::map<int, int> rep_of_key;  // class key -> lowest rank with tasks (else lowest rank)
  for (int r = 0; r < world; ++r) {
    auto [it, inserted] = rep_of_key.emplace(class_key[static_cast<size_t>(r)], r);
    if (!inserted && program.ranks[static_cast<size_t>(it->second)].tasks.empty() &&
        !program.ranks[static_cast<size_t>(r)].tasks.empty())
      it->second = r;
  }
  for (const auto& [key, rep] : rep_of_key) s.reps.push_back(rep);
  std::sort(s.reps.begin(), s.reps.end());
  std::map<int, size_t> index_of_rep;
  for (size_t i = 0; i < s.reps.size(); ++i) index_of_rep[s.reps[i]] = i;
  s.members.resize(s.reps.size());
  s.header_only.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    int rep = rep_of_key[class_key[static_cast<size_t>(r)]];
    s.rep_of[static_cast<size_t>(r)] = rep;
    s.members[index_of_rep[rep]].push_back(r);
    if (program.ranks[static_cast<size_t>(r)].tasks.empty() && !program.ranks[static_cast<size_t>(rep)].tasks.empty()) {
      s.header_only[static_cast<size_t>(r)] = 1;
      s.any_header_only = true;
    }
  }
  s.only_representatives_have_tasks = true;
  for (int r = 0; r < world; ++r)
    if (s.rep_of[static_cast<size_t>(r)] != r && !s.header_only[static_cast<size_t>(r)] &&
        !program.ranks[static_cast<size_t>(r)].tasks.empty())
      s.only_representatives_have_tasks = false;
  return s;
}

}  // namespace

int rename(const plan::StepProgram& program, int rep, int member, int x) {
  const auto& r = program.ranks[static_cast<size_t>(rep)];
  const auto& m = program.ranks[static_cast<size_t>(member)];
  const auto& rx = program.ranks[static_cast<size_t>(x)];
  const int dp = std::max(1, program.dp), cp = std::max(1, program.cp);
  const int d = ((rx.dp_rank + m.dp_rank - r.dp_rank) % dp + dp) % dp;
  const int c = ((rx.cp_rank + m.cp_rank - r.cp_rank) % cp + cp) % cp;
  return program.rank_of(d, rx.tp_rank, rx.pp_rank, c);
}

Symmetry identity_symmetry(const plan::StepProgram& program) {
  std::vector<int> key(program.ranks.size());
  for (size_t r = 0; r < key.size(); ++r) key[r] = static_cast<int>(r);
  return finish(program, key);
}

Symmetry symmetric_classes(const plan::StepProgram& program) {
  const size_t world = program.ranks.size();
  std::vector<int> key(world);
  if (!program.symmetry_class.empty()) {
    if (program.symmetry_class.size() != world)
      throw Error("symmetry_class has " + std::to_string(program.symmetry_class.size()) + " entries for " +
                  std::to_string(world) + " ranks");
    for (size_t r = 0; r < world; ++r) key[r] = program.symmetry_class[r];
  } else {
    std::map<std::pair<int, int>, int> ids;
    for (size_t r = 0; r < world; ++r) {
      const auto& rp = program.ranks[r];
      key[r] = ids.emplace(std::make_pair(rp.pp_rank, rp.tp_rank), static_cast<int>(ids.size())).first->second;
    }
  }
  Symmetry s = finish(program, key);
  if (s.any_header_only) {
    // Header-only ranks are renamed by dp (and cp) translation: the layout must be
    // rank_of(dp, tp, pp, cp).
    for (const auto& rp : program.ranks)
      if (rp.dp_rank < 0 || rp.dp_rank >= program.dp || rp.tp_rank < 0 || rp.tp_rank >= program.tp ||
          rp.pp_rank < 0 || rp.pp_rank >= program.pp || rp.cp_rank < 0 || rp.cp_rank >= std::max(1, program.cp) ||
          program.rank_of(rp.dp_rank, rp.tp_rank, rp.pp_rank, rp.cp_rank) != rp.rank)
        throw Error("rank " + std::to_string(rp.rank) + " has coordinates (dp " + std::to_string(rp.dp_rank) + ", tp " +
                    std::to_string(rp.tp_rank) + ", pp " + std::to_string(rp.pp_rank) + ", cp " + std::to_string(rp.cp_rank) +
                    ") that do not match the rank layout; ranks without tasks cannot be renamed")
            .hint("lower every rank, or keep the layout rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank");
  }
  for (size_t c = 0; c < s.reps.size(); ++c) {
    const plan::RankProgram& rep = program.ranks[static_cast<size_t>(s.reps[c])];
    for (int m : s.members[c]) {
      const plan::RankProgram& mine = program.ranks[static_cast<size_t>(m)];
      if (s.header_only[static_cast<size_t>(m)]) {
        if (mine.tp_rank != rep.tp_rank || mine.pp_rank != rep.pp_rank)
          throw Error("symmetric fidelity: rank " + std::to_string(m) + " has no tasks and is not a dp (or cp) replica of its "
                      "class representative rank " + std::to_string(rep.rank))
              .hint("symmetry classes of a representatives-only program group ranks by (pp_rank, tp_rank)");
        continue;
      }
      if (mine.tasks.size() != rep.tasks.size())
        throw Error("symmetric fidelity: rank " + std::to_string(m) + " has " + std::to_string(mine.tasks.size()) +
                    " tasks, its class representative rank " + std::to_string(rep.rank) + " has " +
                    std::to_string(rep.tasks.size()))
            .hint("simulate with full fidelity, or fix the program's symmetry_class");
      for (size_t i = 0; i < rep.tasks.size(); ++i)
        if (const char* what = mine.tasks[i].id != static_cast<int>(i) ? "id" : task_difference(mine.tasks[i], rep.tasks[i]))
          throw Error("symmetric fidelity: rank " + std::to_string(m) + " task " + std::to_string(i) + " (" +
                      mine.tasks[i].label + ") differs in " + what + " from its class representative rank " +
                      std::to_string(rep.rank))
              .hint("simulate with full fidelity, or fix the program's symmetry_class");
    }
  }
  return s;
}

}  // namespace trainplan::sim::detail
