// Structural consistency of an instance type. Errors carry a pointer relative to the
// instance object ("/topology/nvlink_lanes"); the catalog loader prefixes file and position.
#include <fmt/format.h>

#include <algorithm>

#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::hw {
namespace {

Error bad(const std::string& pointer, const std::string& message, const std::string& hint) {
  Error e(message);
  e.at("", pointer);
  e.hint(hint);
  return e;
}

void check_topology(const InstanceType& inst) {
  const IntraNodeTopology& t = inst.topology;
  const int g = inst.gpu_count;
  if (t.kind == IntraNodeKind::single && g != 1)
    throw bad("/topology/kind", fmt::format("kind \"single\" needs exactly 1 GPU, the instance has {}", g),
              "use \"pcie\", \"nvlink_mesh\" or \"nvswitch\" for several GPUs");
  if (t.kind != IntraNodeKind::single && g == 1)
    throw bad("/topology/kind", "an instance with 1 GPU has kind \"single\"", "set \"kind\": \"single\"");
  if (t.kind == IntraNodeKind::nvlink_mesh) {
    if (static_cast<int>(t.nvlink_lanes.size()) != g)
      throw bad("/topology/nvlink_lanes", fmt::format("must be {}x{} (one row per GPU)", g, g),
                "nvlink_lanes[i][j] = NVLink lanes between GPU i and GPU j");
    int total = 0;
    for (int i = 0; i < g; ++i) {
      if (static_cast<int>(t.nvlink_lanes[i].size()) != g)
        throw bad(fmt::format("/topology/nvlink_lanes/{}", i), fmt::format("must have {} columns", g),
                  "nvlink_lanes[i][j] = NVLink lanes between GPU i and GPU j");
      for (int j = 0; j < g; ++j) {
        int lanes = t.nvlink_lanes[i][j];
        if (lanes < 0)
          throw bad(fmt::format("/topology/nvlink_lanes/{}/{}", i, j), fmt::format("must not be negative, got {}", lanes),
                    "use 0 for GPUs without a direct NVLink");
        if (i == j && lanes != 0)
          throw bad(fmt::format("/topology/nvlink_lanes/{}/{}", i, j), "a GPU has no NVLink to itself",
                    "put 0 on the diagonal");
        if (lanes != t.nvlink_lanes[j][i])
          throw bad(fmt::format("/topology/nvlink_lanes/{}/{}", i, j),
                    fmt::format("not symmetric: GPU {}->{} has {} lanes but {}->{} has {}", i, j, lanes, j, i,
                                t.nvlink_lanes[j][i]),
                    "NVLink lanes are full duplex: lanes[i][j] must equal lanes[j][i]");
        total += lanes;
      }
    }
    if (total == 0)
      throw bad("/topology/nvlink_lanes", "no NVLink lanes at all", "use kind \"pcie\" for GPUs without NVLink");
    if (!(t.nvlink_lane_bandwidth_bytes_per_s > 0))
      throw bad("/topology/nvlink_lane_bandwidth", "must be positive", "NVLink2/3/4: \"25GBps\" per lane per direction");
  }
  if (t.kind == IntraNodeKind::nvswitch && !(t.nvswitch_bandwidth_bytes_per_s > 0))
    throw bad("/topology/nvswitch_bandwidth", "must be positive", "A100: \"300GBps\", H100: \"450GBps\" per direction");
  if (t.nvlink_domain_instances < 1 || (t.nvlink_domain_instances > 1 && t.kind != IntraNodeKind::nvswitch))
    throw bad("/topology/nvlink_domain_instances", "must be 1, or more only for an NVSwitch instance",
              "an UltraServer's NVLink switch domain joins the NVSwitches of n instances (u-p6e-gb200x72: 18)");
  if (!(t.pcie_bandwidth_bytes_per_s > 0))
    throw bad("/topology/pcie_bandwidth", "must be positive", "PCIe Gen4 x16: about \"24GBps\" per direction");
  if (t.sockets < 1) throw bad("/topology/sockets", "must be at least 1", "count the host's CPU sockets");
  if (g > 1 && g % t.sockets != 0)
    throw bad("/topology/sockets", fmt::format("{} GPUs cannot be split evenly over {} sockets", g, t.sockets),
              "GPUs are assigned to sockets evenly in index order");
  if (t.sockets > 1 && !(t.inter_socket_bandwidth_bytes_per_s > 0))
    throw bad("/topology/inter_socket_bandwidth", "must be positive with more than one socket",
              "UPI / Infinity Fabric bandwidth per direction, e.g. \"62GBps\"");
  if (t.gpus_per_pcie_switch < 0)
    throw bad("/topology/gpus_per_pcie_switch", "must not be negative", "use 0 when GPUs sit on CPU root ports");
  if (t.gpus_per_pcie_switch > 0) {
    const int per_socket = g > 1 ? g / t.sockets : 1;
    if (g % t.gpus_per_pcie_switch != 0 || (g > 1 && per_socket % t.gpus_per_pcie_switch != 0))
      throw bad("/topology/gpus_per_pcie_switch",
                fmt::format("{} GPUs per PCIe switch does not divide the {} GPUs of each socket", t.gpus_per_pcie_switch,
                            per_socket),
                "a PCIe switch hangs off one socket");
    if (!(t.pcie_switch_uplink_bytes_per_s > 0))
      throw bad("/topology/pcie_switch_uplink", "must be positive", "PCIe Gen4 x16: about \"24GBps\"");
  }
  if (t.nvlink_latency_s < 0 || t.pcie_latency_s < 0 || t.inter_socket_latency_s < 0)
    throw bad("/topology", "latencies must not be negative", "use e.g. \"1us\"");
}

void check_network(const InstanceType& inst) {
  const NetworkSpec& n = inst.network;
  const int g = inst.gpu_count;
  if (!(n.bandwidth_bytes_per_s > 0))
    throw bad("/network/bandwidth", "must be positive", "the instance's network bandwidth, e.g. \"400Gbps\"");
  if (n.nics < 1) throw bad("/network/nics", "must be at least 1", "1 for ENA-only instances");
  if (n.nics % g != 0 && g % n.nics != 0)
    throw bad("/network/nics", fmt::format("{} NICs cannot be shared evenly by {} GPUs", n.nics, g),
              "the NIC count must divide the GPU count or be a multiple of it");
  if (!(n.latency_s > 0)) throw bad("/network/latency", "must be positive", "e.g. \"15us\" for EFA");
}

void check_prices(const InstanceType& inst) {
  const Prices& p = inst.prices;
  auto positive = [](const std::optional<double>& v) { return !v || *v > 0; };
  if (!positive(p.ec2_on_demand) || !positive(p.sagemaker_on_demand) || !positive(p.spot) ||
      !positive(p.spot_min) || !positive(p.spot_max))
    throw bad("/prices", "prices must be positive", "give USD per instance-hour, or leave the price out");
  if (p.spot_min && p.spot_max && *p.spot_min > *p.spot_max)
    throw bad("/prices/spot_min", "spot_min is above spot_max", "spot_min is the lowest sample");
  if (p.spot_discount && !(*p.spot_discount > 0 && *p.spot_discount < 1))
    throw bad("/prices/spot_discount", "must be between 0 and 1", "e.g. 0.64 for 64% below on-demand");
  const auto& buckets = interruption_buckets();
  if (!p.interruption_bucket.empty() &&
      std::find(buckets.begin(), buckets.end(), p.interruption_bucket) == buckets.end())
    throw bad("/prices/interruption_bucket", fmt::format("unknown bucket \"{}\"", p.interruption_bucket),
              "one of <5%, 5-10%, 10-15%, 15-20%, >20%");
}

}  // namespace

void check_instance(const InstanceType& inst) {
  if (inst.name.empty()) throw bad("/name", "an instance needs a name", "e.g. \"p4d.24xlarge\"");
  if (inst.gpu_count < 1) throw bad("/gpu_count", "must be at least 1", "GPUs per instance");
  if (inst.vcpus < 1) throw bad("/vcpus", "must be at least 1", "vCPUs per instance");
  if (!(inst.host_memory_bytes > 0)) throw bad("/host_memory", "must be positive", "e.g. \"1152GiB\"");
  check_topology(inst);
  check_network(inst);
  check_prices(inst);
}

}  // namespace trainplan::hw
