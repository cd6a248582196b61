// Expert parallelism's all-to-all time (expert_parallel.hpp).
#include "trainplan/simulator/expert_parallel.hpp"

#include "trainplan/simulator/collectives.hpp"

namespace trainplan::sim {

double all_to_all_s(double bytes, const std::vector<std::vector<int>>& groups, const Topology& topology, double comm_launch_s) {
  if (groups.empty() || groups[0].size() < 2 || !(bytes > 0)) return 0.0;
  const CommPattern pattern = build_pattern(plan::CollectiveKind::all_to_all, CollectiveAlgorithm::ring, groups, topology);
  return pattern.uncontended_time_s(bytes) + (pattern.nccl ? 0.0 : comm_launch_s);
}

}  // namespace trainplan::sim
