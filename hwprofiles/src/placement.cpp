// Placement of a job's instances over AZs, and the prices of crossing AZ and Region boundaries.
#include "trainplan/hwprofiles/placement.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::hw {

std::string_view placement_group_name(PlacementGroup g) {
  switch (g) {
    case PlacementGroup::cluster: return "cluster";
  }
  return "?";
}

std::vector<int> az_of_nodes(int count, int azs) {
  TP_ASSERT(azs >= 1 && azs <= count);
  std::vector<int> out;
  out.reserve(static_cast<size_t>(count));
  const int base = count / azs, extra = count % azs;
  for (int z = 0; z < azs; ++z)
    for (int i = 0; i < base + (z < extra ? 1 : 0); ++i) out.push_back(z);
  return out;
}

double inter_az_bandwidth_bytes_per_s(const InstanceType& instance, const PlacementFacts& facts) {
  return std::min(instance.network.bandwidth_bytes_per_s, facts.nccl_socket_flows * facts.single_flow_bandwidth_bytes_per_s);
}

double inter_az_transfer_usd(double bytes, const PlacementFacts& facts) { return bytes / 1e9 * facts.inter_az_usd_per_gb * 2.0; }

std::vector<std::string> priced_regions(const PlacementFacts& facts) {
  std::vector<std::string> out;
  for (const auto& p : facts.inter_region) out.push_back(p.from);
  return out;
}

double inter_region_usd_per_gb(const PlacementFacts& facts, const std::string& from, const std::string& to) {
  if (from == to) return 0.0;
  for (const auto& p : facts.inter_region)
    if (p.from == from) {
      auto it = p.to.find(to);
      return it != p.to.end() ? it->second : p.usd_per_gb;
    }
  throw Error(fmt::format("no inter-region transfer price for data leaving region \"{}\"", from))
      .hint(fmt::format("known regions: {} (catalog/placement.json)", join(priced_regions(facts), ", ")));
}

}  // namespace trainplan::hw
