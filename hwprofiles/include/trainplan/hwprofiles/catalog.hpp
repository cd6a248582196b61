// File: trainplan/hwprofiles/catalog.hpp
//
// The hardware catalog: GPU types, instance types (intra-node topology, network, storage,
// prices) and the sources every number comes from. The built-in catalog is the JSON under
// hwprofiles/catalog/, embedded in the binary at build time.
//
//   const hw::Catalog& cat = hw::Catalog::builtin();
//   const hw::InstanceType& p4d = cat.instance("p4d.24xlarge");
//   const hw::GpuSpec& a100 = cat.gpu(p4d.gpu);
//   double peak = a100.peak_flops_per_s(Precision::bf16);   // 312e12
//
//   hw::Catalog mine = hw::Catalog::builtin();
//   mine.apply_price_file("prices-eu-west-1.json");          // user prices override
//
// Unknown names throw trainplan::Error with the closest known name as the hint.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"

namespace trainplan::hw {

/// Where a number comes from: a citation and the date it was read or published.
struct Source {
  std::string id;           // "price_list_2026"
  std::string description;  // what the source is, enough to find it again
  std::string date;         // ISO date ("2026-09-24") or year-month
  bool verified = true;     // false: from memory / secondary, marked unverified in the data
};

struct GpuSpec {
  std::string name;                 // "A100-SXM4-40GB"
  std::string arch;                 // "Ampere"
  std::string compute_capability;   // "8.0" (the executor builds sm_80 for it)
  double memory_bytes = 0;          // HBM/GDDR capacity as sold (40 GB = 40e9... see catalog)
  double memory_bandwidth_bytes_per_s = 0;
  /// Dense peak FLOP/s per precision (tensor cores where they exist; fp32 is the CUDA-core
  /// peak). A precision missing here is not supported (T4 and V100 have no bf16).
  std::map<Precision, double> peak_flops;
  double tdp_w = 0;
  std::string source;               // source id

  bool supports(Precision p) const { return peak_flops.count(p) != 0; }
  /// Peak for `p`; throws Error if unsupported.
  double peak_flops_per_s(Precision p) const;
  /// The 16-bit training precision this GPU should use: bf16 where supported, else fp16.
  Precision preferred_half_precision() const;
};

/// How the GPUs inside one instance talk to each other.
enum class IntraNodeKind {
  single,       // one GPU
  pcie,         // PCIe through host bridges / PCIe switches (g4dn, g5, g6, g6e)
  nvlink_mesh,  // direct NVLink lanes between some pairs (p3.8xlarge, p3.16xlarge, p3dn)
  nvswitch,     // every GPU to NVSwitch (p4d, p4de, p5, DGX)
};
std::string_view intra_node_kind_name(IntraNodeKind k);

struct IntraNodeTopology {
  IntraNodeKind kind = IntraNodeKind::single;
  /// nvlink_mesh only: nvlink_lanes[i][j] = number of NVLink lanes between GPU i and j.
  std::vector<std::vector<int>> nvlink_lanes;
  /// Per lane, per direction (NVLink2: 25 GB/s).
  double nvlink_lane_bandwidth_bytes_per_s = 0;
  /// nvswitch only: per GPU, per direction (A100: 300 GB/s, H100: 450 GB/s).
  double nvswitch_bandwidth_bytes_per_s = 0;
  /// Effective GPU<->host PCIe bandwidth per GPU, per direction.
  double pcie_bandwidth_bytes_per_s = 0;
  /// GPUs sharing one PCIe switch (their traffic to the host/NIC shares its uplink); 0 = none.
  int gpus_per_pcie_switch = 0;
  /// PCIe switch uplink to the CPU root complex, per direction.
  double pcie_switch_uplink_bytes_per_s = 0;
  /// CPU sockets; GPUs are split evenly across them in index order.
  int sockets = 1;
  /// Socket-to-socket (UPI / Infinity Fabric) bandwidth per direction.
  double inter_socket_bandwidth_bytes_per_s = 0;
  /// One-hop latencies.
  double nvlink_latency_s = 0;
  double pcie_latency_s = 0;
};

struct NetworkSpec {
  /// Aggregate instance network bandwidth, per direction ("400 Gbps" -> 50e9 B/s).
  double bandwidth_bytes_per_s = 0;
  /// Network interfaces used by GPU traffic (EFA devices; 1 for ENA-only instances). GPUs are
  /// split evenly across them in index order.
  int nics = 1;
  bool efa = false;
  bool gpudirect_rdma = false;
  /// Node-to-node one-way latency (NIC + fabric).
  double latency_s = 0;
  std::string fabric;  // "EFA v1", "ENA", "InfiniBand HDR" ...
};

struct StorageSpec {
  double local_nvme_bytes = 0;          // 0: EBS only
  int nvme_devices = 0;
  double nvme_read_bandwidth_bytes_per_s = 0;   // aggregate
  double nvme_write_bandwidth_bytes_per_s = 0;  // aggregate
  double ebs_bandwidth_bytes_per_s = 0;
};

/// Prices in USD per instance-hour for the catalog region (us-east-1 unless a user price file
/// says otherwise). Missing prices are nullopt, never zero.
struct Prices {
  std::optional<double> ec2_on_demand;
  std::optional<double> sagemaker_on_demand;
  /// True when sagemaker_on_demand was derived from EC2 × an uplift factor (see source).
  bool sagemaker_estimated = false;
  std::optional<double> spot;
  /// AWS Spot Advisor bucket: "<5%", "5-10%", "10-15%", "15-20%", ">20%" (monthly rate).
  std::string interruption_bucket;
  std::string region;
};

struct InstanceType {
  std::string name;       // "p4d.24xlarge", or a generic cluster node "dgx-a100-80gb"
  std::string family;     // "p4d"
  std::string gpu;        // GpuSpec name
  int gpu_count = 0;
  int vcpus = 0;
  double host_memory_bytes = 0;
  IntraNodeTopology topology;
  NetworkSpec network;
  StorageSpec storage;
  Prices prices;
  bool aws = true;        // false for generic clusters (DGX) that have no AWS prices
  std::string description;
  /// Field group ("hardware", "network", "topology", "storage", "prices", ...) -> source id.
  std::map<std::string, std::string> sources;
  std::string file;       // catalog file it came from
};

class Catalog {
 public:
  /// The catalog compiled into the binary. Loaded once; throws Error if the embedded data is
  /// malformed (which a test prevents).
  static const Catalog& builtin();
  /// Reads every *.json under `dir` (same format as the built-in catalog).
  static Catalog load_dir(const std::string& dir);
  /// Parses catalog files given as (display name, text) pairs.
  static Catalog from_texts(const std::vector<std::pair<std::string, std::string>>& files);

  const GpuSpec& gpu(const std::string& name) const;
  const InstanceType& instance(const std::string& name) const;
  bool has_instance(const std::string& name) const;
  const Source& source(const std::string& id) const;

  /// Instance names in catalog order (family order of the files, then size).
  std::vector<std::string> instance_names() const;
  std::vector<std::string> gpu_names() const;
  const std::map<std::string, Source>& sources() const { return sources_; }

  /// Overrides prices from a user file:
  ///   {"region": "eu-west-1", "source": "our EDP quote 2026-10",
  ///    "prices": {"p4d.24xlarge": {"ec2_on_demand": 19.5, "spot": 7.1,
  ///                                "sagemaker_on_demand": 25.0, "interruption_bucket": "5-10%"}}}
  /// Unknown instances or fields are errors naming the file and pointer.
  void apply_price_file(const std::string& path);
  void apply_price_json(const json::Json& doc, const std::string& name);

 private:
  std::map<std::string, GpuSpec> gpus_;
  std::map<std::string, InstanceType> instances_;
  std::vector<std::string> instance_order_;
  std::map<std::string, Source> sources_;
};

}  // namespace trainplan::hw
