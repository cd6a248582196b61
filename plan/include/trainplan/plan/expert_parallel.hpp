// File: trainplan/plan/expert_parallel.hpp
//
// Where expert parallelism sits in the rank layout (plan/README.md, "Expert parallelism").
// The dp * cp ranks of a (pp, tp) position, at data-parallel position flat = dp_rank * cp +
// cp_rank, split into ep groups of ep consecutive positions (ep rank = flat % ep): Megatron-Core
// orders expert ranks tp-ep-dp-pp (ep inside dp, right after tp), so with tp * ep <= GPUs per
// node every all-to-all stays on NVLink. The expert-dp groups gather the positions with the
// same ep rank (flat / ep = 0 .. expert_dp - 1): they hold the same experts and reduce their
// gradients. The lowering, the analytical estimate and the tests share these lists.
//
//   for (const auto& g : plan::ep_groups(plan)) ...   // ranks of every all-to-all group
#pragma once

#include <vector>

#include "trainplan/plan/plan.hpp"

namespace trainplan::plan {

/// The ep groups (ep ranks each), ordered by (pp rank, tp rank, expert-dp rank); ranks in ep
/// rank order. Empty when ep = 1.
std::vector<std::vector<int>> ep_groups(const Plan& plan);
/// The expert-dp groups (expert_dp ranks each), ordered by (pp rank, tp rank, ep rank). Empty
/// when ep = 1 or expert_dp = 1.
std::vector<std::vector<int>> expert_dp_groups(const Plan& plan);

}  // namespace trainplan::plan
