// File: trainplan/hwprofiles/placement.hpp
//
// Where a job's instances sit (Availability Zones, placement group) and what crossing an AZ or
// Region boundary costs in time and money. The facts come from the catalog key "placement"
// (catalog/placement.json, each with its source):
//
//   const hw::PlacementFacts& f = catalog.placement();
//   f.inter_az_latency_s;                      // one-way, node to node across two AZs
//   hw::inter_az_bandwidth_bytes_per_s(inst, f); // TCP over ENA between AZs, per instance
//   f.inter_az_usd_per_gb;                     // charged in each direction
//   hw::inter_region_usd_per_gb(f, "us-east-1", "eu-west-1");  // 0.02: by the source region
//
// EFA's OS-bypass traffic stays in one subnet, hence one AZ: instances of one AZ talk over EFA
// (the instance's fabric), instances of different AZs over TCP (NCCL's socket transport,
// staged through host memory). A Placement splits a cluster's instances into contiguous blocks,
// one per AZ, as evenly as possible (the first count % azs AZs take one instance more).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace trainplan::hw {

struct InstanceType;

enum class PlacementGroup { cluster };
std::string_view placement_group_name(PlacementGroup g);

/// How a job's instances are placed. Default: all in one AZ, one cluster placement group.
/// With azs > 1 each AZ's block is its own cluster placement group (a cluster placement group
/// never spans AZs).
struct Placement {
  int azs = 1;
  PlacementGroup group = PlacementGroup::cluster;
  bool operator==(const Placement&) const = default;
};

/// Most AZs one Region offers (us-east-1 has six).
inline constexpr int kMaxAzs = 6;

/// AZ of each of `count` instances split over `azs` AZs in contiguous blocks, as evenly as
/// possible (sizes differ by at most one, larger blocks first). Requires 1 <= azs <= count.
std::vector<int> az_of_nodes(int count, int azs);

/// One source Region's inter-region transfer prices (USD per GB out of `from`).
struct InterRegionPrice {
  std::string from;
  double usd_per_gb = 0;                   // to any other Region
  std::map<std::string, double> to;        // cheaper (or dearer) named destinations
  std::string source;
};

/// Catalog key "placement".
struct PlacementFacts {
  double inter_az_latency_s = 0;           // one-way, node to node, between two AZs
  double single_flow_bandwidth_bytes_per_s = 0;  // one TCP flow outside a cluster placement group
  int nccl_socket_flows = 0;               // TCP flows of one NCCL socket connection (threads x sockets)
  double inter_az_usd_per_gb = 0;          // charged in each direction
  std::map<std::string, std::string> sources;  // fact -> source id
  std::vector<InterRegionPrice> inter_region;
  bool present() const { return nccl_socket_flows > 0; }
};

/// Bandwidth per direction between an instance and the other AZs: NCCL's socket connection
/// (nccl_socket_flows TCP flows of single_flow_bandwidth each), capped at the instance's
/// network bandwidth (multi-flow traffic within a Region may use all of it).
double inter_az_bandwidth_bytes_per_s(const InstanceType& instance, const PlacementFacts& facts);

/// USD for `bytes` sent from one AZ to another: billed leaving the first AZ and again entering
/// the second (inter_az_usd_per_gb in each direction).
double inter_az_transfer_usd(double bytes, const PlacementFacts& facts);

/// USD per GB moved from Region `from` to Region `to` (0 when they are the same). Throws Error
/// naming the region and listing the known ones when `from` has no price.
double inter_region_usd_per_gb(const PlacementFacts& facts, const std::string& from, const std::string& to);

/// Regions with an inter-region price, in catalog order.
std::vector<std::string> priced_regions(const PlacementFacts& facts);

}  // namespace trainplan::hw
