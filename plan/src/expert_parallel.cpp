// Expert-parallel groups of the rank layout. See expert_parallel.hpp.
#include "trainplan/plan/expert_parallel.hpp"

namespace trainplan::plan {
namespace {

// The rank at data-parallel position `flat` (= dp_rank * cp + cp_rank) of (pp rank s, tp rank t).
int rank_at(const Plan& p, int flat, int t, int s) {
  const int d = flat / p.cp, c = flat % p.cp;
  return ((s * p.dp + d) * p.cp + c) * p.tp + t;
}

// Groups of `size` positions per (pp, tp, outer): position = position_of(outer, inner).
template <typename F>
std::vector<std::vector<int>> groups_of(const Plan& p, int outer_count, int size, F position_of) {
  std::vector<std::vector<int>> out;
  for (int s = 0; s < p.pp; ++s)
    for (int t = 0; t < p.tp; ++t)
      for (int o = 0; o < outer_count; ++o) {
        std::vector<int> g;
        for (int i = 0; i < size; ++i) g.push_back(rank_at(p, position_of(o, i), t, s));
        out.push_back(std::move(g));
      }
  return out;
}

}  // namespace

std::vector<std::vector<int>> ep_groups(const Plan& plan) {
  if (plan.ep <= 1) return {};
  return groups_of(plan, plan.expert_dp(), plan.ep, [&](int e, int j) { return e * plan.ep + j; });
}

std::vector<std::vector<int>> expert_dp_groups(const Plan& plan) {
  if (plan.ep <= 1 || plan.expert_dp() <= 1) return {};
  return groups_of(plan, plan.ep, plan.expert_dp(), [&](int j, int e) { return e * plan.ep + j; });
}

}  // namespace trainplan::plan
