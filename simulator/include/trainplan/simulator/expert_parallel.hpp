// File: trainplan/simulator/expert_parallel.hpp
//
// Expert parallelism's all-to-all as the step simulator times it: one phase in which every
// member of a group sends S/n to every other member (collectives.hpp, "any all_to_all"), all
// the plan's ep groups at once (they run the same layer at the same time), so links that
// several groups cross (a node's NICs when ep spans nodes) are shared; plus the launch cost
// (the all-to-all is outside NCCL's ring/tree latency model). Uncontended by other traffic:
// S x (n-1)/n over the slowest member's share of its links, plus the largest route latency.
//
//   double t = sim::all_to_all_s(bytes, plan::ep_groups(plan), sim::ClusterTopology(ctx.cluster));
#pragma once

#include <vector>

#include "trainplan/simulator/topology.hpp"

namespace trainplan::sim {

/// Seconds of an all-to-all of `bytes` per rank (the nccl-tests size S: each rank's whole send
/// buffer) run by every group of `groups` at once (GPU ids of `topology`, equal sizes), plus
/// `comm_launch_s`; 0 when the groups have fewer than two members or `bytes` is 0.
double all_to_all_s(double bytes, const std::vector<std::vector<int>>& groups, const Topology& topology,
                    double comm_launch_s = 5e-6);

}  // namespace trainplan::sim
