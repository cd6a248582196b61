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
//   hw::Catalog cat2 = hw::load_catalog(opts.catalog_dir, opts.price_file);  // what the CLI uses
//
// Unknown names throw trainplan::Error with the closest known name as the hint. The file
// format (fields, units, sources, price files) is documented in hwprofiles/README.md.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"
#include "trainplan/hwprofiles/capacity_block.hpp"
#include "trainplan/hwprofiles/placement.hpp"
#include "trainplan/hwprofiles/software.hpp"

namespace trainplan::hw {

/// Where a number comes from: a citation and the date it was read or published.
struct Source {
  std::string id;           // "price_list_2026"
  std::string description;  // what the source is, enough to find it again
  std::string date;         // ISO date: "2026-09-24", "2026-09" or "2026" ("undated" for a
                            // user price file without a date)
  bool verified = true;     // false: from memory / secondary, marked unverified in the data
};

/// Field groups an instance names a source for (InstanceType::sources keys), in display
/// order: hardware, topology, pcie, network, efa, gpudirect_rdma, network_latency, storage,
/// ebs, ec2_on_demand, sagemaker, sagemaker_uplift, spot, spot_discount, interruption,
/// capacity_block (filled from the catalog's Capacity Block offers, never named by an instance).
const std::vector<std::string>& instance_source_groups();
/// Field groups of a GPU (GpuSpec::sources keys): memory, peaks, tdp, compute_capability,
/// sm_count, cublas_workspace (all required), mamf and sustained_matmul (required when the
/// field is given).
const std::vector<std::string>& gpu_source_groups();
/// AWS Spot Advisor interruption-frequency buckets, lowest first.
const std::vector<std::string>& interruption_buckets();

struct GpuSpec {
  std::string name;                 // "A100-SXM4-40GB"
  std::string arch;                 // "Ampere"; "Blackwell" (10.0) for B200; "Trainium2" for AWS chips
  std::string compute_capability;   // "8.0" (the executor builds sm_80 for it); empty for a Neuron chip
  /// Software stack that drives the accelerator: "cuda" (NVIDIA GPUs: planned, simulated and
  /// executed) or "neuron" (AWS Trainium: planned and simulated only, `trainplan execute`
  /// refuses it since no backend here runs Neuron code).
  std::string runtime = "cuda";
  double memory_bytes = 0;          // HBM/GDDR capacity as sold (40 GB = 40e9... see catalog)
  double memory_bandwidth_bytes_per_s = 0;
  /// Dense peak FLOP/s per precision (tensor cores where they exist; fp32 is the CUDA-core
  /// peak). A precision missing here is not supported (T4 and V100 have no bf16).
  std::map<Precision, double> peak_flops;
  double tdp_w = 0;
  /// Streaming multiprocessors (the simulator's GEMM wave quantization runs tiles in waves of
  /// this many).
  int sm_count = 0;
  /// Maximum achievable matmul FLOP/s measured per precision (MAMF, ml-engineering's
  /// benchmark); a precision without a measurement is absent.
  std::map<Precision, double> mamf_flops;
  /// Matmul FLOP/s the GPU holds under sustained load, at its board power limit, per precision
  /// (large GEMMs back to back for tens of seconds, the state of a training step); MAMF is a
  /// short burst at boost clock. A precision without a measurement is absent.
  std::map<Precision, double> sustained_matmul_flops;
  /// The cuBLAS / cuBLASLt workspace NVIDIA recommends for this architecture (cuBLAS API
  /// reference, cublasSetWorkspace: 32 MiB on Hopper, 4 MiB before); the memory model, the
  /// lowering and the CUDA backend all use it.
  double cublas_workspace_bytes = 0;
  std::string memory_type;          // "HBM2", "GDDR6" ...
  std::string source;               // source id of the peaks (== sources.at("peaks"))
  /// Field group (gpu_source_groups()) -> source id.
  std::map<std::string, std::string> sources;
  std::vector<std::string> notes;   // caveats shown by `trainplan catalog`
  std::string file;                 // catalog file it came from

  bool supports(Precision p) const { return peak_flops.count(p) != 0; }
  /// True when an executor backend here can run on this accelerator (runtime "cuda").
  bool executable() const { return runtime == "cuda"; }
  /// Peak for `p`; throws Error if unsupported.
  double peak_flops_per_s(Precision p) const;
  /// Measured maximum matmul FLOP/s over the dense peak for `p`; nullopt where not measured.
  std::optional<double> mamf_fraction(Precision p) const;
  /// Sustained matmul FLOP/s over the dense peak for `p`; nullopt where not measured.
  std::optional<double> sustained_matmul_fraction(Precision p) const;
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
  /// One-hop latencies: a direct NVLink, GPU<->NVSwitch, one PCIe link, socket<->socket.
  double nvlink_latency_s = 0;
  double pcie_latency_s = 0;
  double inter_socket_latency_s = 0;
  /// PCIe generation of the GPU host link (3, 4, 5), for display.
  int pcie_generation = 0;
  /// nvswitch only: instances whose GPUs share one NVLink switch domain (an EC2 UltraServer:
  /// 18 for u-p6e-gb200x72, 4 GPUs each = 72 GPUs). 1 = the NVLink domain ends at the
  /// instance (every other type). Instances 0..n-1 of a cluster form the first domain, n..2n-1
  /// the next, and so on.
  int nvlink_domain_instances = 1;
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
  /// The latency the network plugin reports to NCCL for one message (ncclNetProperties_t
  /// latency; aws-ofi-nccl's per-platform figure on EFA, none from NCCL's own InfiniBand and
  /// socket transports): NCCL's tuning model adds it to every network step of a collective,
  /// twice under the Simple protocol (the flush). 0: none reported.
  double nccl_net_latency_s = 0;
  /// The network plugin limits NCCL to the Simple protocol (aws-ofi-nccl sets NCCL_PROTO=simple
  /// where EFA does not keep the 128-byte write order LL128 needs). Default: true on EFA.
  bool nccl_simple_only = false;
  /// True when AWS sells the size as "up to N Gbps": bandwidth_bytes_per_s is then the
  /// baseline (sustained) figure, and short bursts can go faster.
  bool burstable = false;

  /// Bandwidth of one NIC device, per direction (bandwidth / nics).
  double nic_bandwidth_bytes_per_s() const { return nics > 0 ? bandwidth_bytes_per_s / nics : 0.0; }
};

struct StorageSpec {
  double local_nvme_bytes = 0;          // 0: EBS only
  int nvme_devices = 0;
  double nvme_read_bandwidth_bytes_per_s = 0;   // aggregate
  double nvme_write_bandwidth_bytes_per_s = 0;  // aggregate
  double ebs_bandwidth_bytes_per_s = 0;       // 0: unknown (not given)
};

/// Prices in USD per instance-hour for `region` (us-east-1 unless --region (select_region) or a
/// user price file says otherwise). Missing prices are nullopt, never zero.
struct Prices {
  std::optional<double> ec2_on_demand;
  std::optional<double> sagemaker_on_demand;
  /// True when sagemaker_on_demand was derived from EC2 × an uplift factor (see source).
  bool sagemaker_estimated = false;
  /// SageMaker/EC2 price ratio used where no SageMaker price is known (family figure).
  std::optional<double> sagemaker_uplift;
  /// Spot price used by the cost model: the midpoint of spot_min..spot_max where samples
  /// exist, else EC2 × (1 - spot_discount) with spot_estimated = true.
  std::optional<double> spot;
  std::optional<double> spot_min;     // lowest sampled spot price over availability zones
  std::optional<double> spot_max;     // highest sampled spot price
  bool spot_estimated = false;
  /// Fraction saved by spot vs on-demand observed for the family (0.64 = 64% cheaper).
  std::optional<double> spot_discount;
  /// AWS Spot Advisor bucket: "<5%", "5-10%", "10-15%", "15-20%", ">20%" (monthly rate).
  std::string interruption_bucket;
  std::string region;
  /// EC2 Capacity Block for ML reservation price in `region` (USD per instance-hour, paid up
  /// front for whole days / weeks: capacity_block.hpp), from the catalog's offers or a price
  /// file; nullopt where none is published. `capacity_block_rules` are the catalog's rules.
  std::optional<double> capacity_block;
  CapacityBlockRules capacity_block_rules;
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
  std::string cpu;        // host CPUs, e.g. "2x Intel Xeon Platinum 8275CL"
  std::vector<std::string> notes;  // caveats (stale prices, missing listings) for display
  /// Field group (instance_source_groups(): "hardware", "topology", "network", "ec2_on_demand",
  /// ...) -> source id; "a+b" names two sources. Groups without a value are absent; an
  /// estimated price names the source of its factor (sagemaker_uplift, spot_discount).
  std::map<std::string, std::string> sources;
  std::string file;       // catalog file it came from
};

/// A CPU-only instance type (no GPU): what classic ML (gradient-boosted trees, planner/classic_ml.hpp)
/// runs on. Its own catalog table (`cpu_families` in a catalog file, hwprofiles/README.md): GPU
/// plans, simulation and execution refuse it by name (Catalog::instance says so).
struct CpuInstanceType {
  std::string name;       // "m5.large" (SageMaker calls it "ml.m5.large")
  std::string family;     // "m5"
  std::string cpu;        // "Intel Xeon Platinum 8175M or 8259CL"
  std::string description;
  int vcpus = 0;
  /// Physical cores: vcpus / threads_per_core (2 with Hyper-Threading).
  int cores = 0;
  double host_memory_bytes = 0;
  /// bandwidth_bytes_per_s is the sustained baseline; burstable sizes ("up to N Gbps") can go to
  /// burst_bandwidth_bytes_per_s for short transfers (network I/O credits).
  NetworkSpec network;
  double burst_bandwidth_bytes_per_s = 0;
  Prices prices;          // EC2 and SageMaker on-demand, spot (derived like a GPU instance's)
  /// Field group -> source id: hardware, network, network_latency, ec2_on_demand, sagemaker,
  /// sagemaker_uplift, spot_discount (groups without a value are absent).
  std::map<std::string, std::string> sources;
  std::vector<std::string> notes;
  std::string file;
};

/// One instance type's figures in one region (catalog key "regions", hwprofiles/README.md):
/// AWS Price List prices as collected by a snapshot (regions.json names it).
struct RegionOffer {
  std::optional<double> ec2_on_demand;  // USD per instance-hour; absent = none listed
  std::optional<double> spot_min;       // lowest spot sample over the zones
  std::optional<double> spot_max;       // highest spot sample
  std::vector<std::string> zones;       // availability-zone ids offering the type ("use1-az1")
};

/// Per-region prices and availability. A type listed in `instances` is offered exactly in the
/// regions under it; a type not listed has no regional figures (unknown, not "not offered").
struct RegionTable {
  std::vector<std::string> names;  // known regions, in display order
  std::string source;              // source id of every figure
  /// instance type -> region -> figures.
  std::map<std::string, std::map<std::string, RegionOffer>> instances;
  /// instance type -> caveat added to its notes when a region other than the catalog's own is selected.
  std::map<std::string, std::string> notes;
};

/// The region of the built-in catalog's own prices (hwprofiles/catalog/*.json).
inline constexpr const char* kCatalogRegion = "us-east-1";

class Catalog {
 public:
  /// The catalog compiled into the binary. Loaded once; throws Error if the embedded data is
  /// malformed (which a test prevents).
  static const Catalog& builtin();
  /// Reads every *.json under `dir` (same format as the built-in catalog).
  static Catalog load_dir(const std::string& dir);
  /// Parses catalog files given as (display name, text) pairs.
  static Catalog from_texts(const std::vector<std::pair<std::string, std::string>>& files);
  /// Parses catalog files already read as JSON (display name, document), e.g. files a caller
  /// parses once and combines with others many times.
  static Catalog from_documents(std::vector<std::pair<std::string, json::Json>> documents);

  const GpuSpec& gpu(const std::string& name) const;
  const InstanceType& instance(const std::string& name) const;
  bool has_instance(const std::string& name) const;
  const Source& source(const std::string& id) const;

  /// Instance names in catalog order (family order of the files, then size).
  std::vector<std::string> instance_names() const;
  std::vector<std::string> gpu_names() const;
  const std::map<std::string, Source>& sources() const { return sources_; }

  /// Overrides prices from a user file:
  ///   {"region": "eu-west-1", "source": "our EDP quote 2026-10", "date": "2026-10-01",
  ///    "prices": {"p4d.24xlarge": {"ec2_on_demand": 19.5, "spot": 7.1,
  ///                                "sagemaker_on_demand": 25.0, "interruption_bucket": "5-10%"}}}
  /// Prices are USD per instance-hour. Only the listed instances change (their region becomes
  /// the file's, or the entry's own "region"). A new EC2 price also re-derives the estimated
  /// SageMaker and spot prices of that instance. The file becomes a source with id
  /// "user:<name>" dated by "date" (default: "undated").
  /// Unknown instances or fields are errors naming the file and pointer.
  void apply_price_file(const std::string& path);
  void apply_price_json(const json::Json& doc, const std::string& name);

  /// The instance named `name`, or nullptr.
  const InstanceType* find_instance(const std::string& name) const;

  /// CPU instance types (no GPU), in catalog order. `name` may carry SageMaker's "ml." prefix.
  /// Unknown names throw Error with the closest CPU name.
  const CpuInstanceType& cpu_instance(const std::string& name) const;
  const CpuInstanceType* find_cpu_instance(const std::string& name) const;
  std::vector<std::string> cpu_instance_names() const { return cpu_order_; }
  /// The ids of the sources behind CPU instance `c`'s SageMaker on-demand price (`spot` false)
  /// or its SageMaker managed spot price (`spot` true: SageMaker x EC2 spot / EC2 on-demand)
  /// that are not verified: a derived price's factor and the EC2 price it multiplies included. Empty when every source was verified (or there is no price).
  /// Commands print a note beside a price whose list is not empty.
  std::vector<std::string> unverified_price_sources(const CpuInstanceType& c, bool spot) const;

  /// Adds the first `gpus` GPUs of instance `name` as an instance of their own, for runs that
  /// use part of a node (nccl-tests or training on 1, 2 or 4 GPUs of an 8-GPU node): the NVLink
  /// lanes among those GPUs, the sockets and PCIe switches they sit on, the NICs local to them
  /// (network bandwidth in proportion), vCPUs, host memory and prices in proportion. Named
  /// "<name>:<gpus>gpu"; returns the name (adding it once). Throws Error when `gpus` is not in
  /// [1, gpu_count) or does not fill whole sockets / PCIe switches / NICs beyond the first.
  std::string add_partial_instance(const std::string& name, int gpus);
  /// Adds instance `name` with its GPU network replaced by `nics` NICs of
  /// `nic_bandwidth_bytes_per_s` each (per direction), for systems a source describes as a
  /// catalog node with another network (nccl-tests on DGX A100-class nodes with 4 x 200 Gb/s
  /// HDR instead of 8): everything else, prices included, is `name`'s. Named
  /// "<name>:<nics>x<Gb/s>Gbps"; returns the name (adding it once), `why` goes to its notes.
  /// Throws Error for an unknown name, `nics` outside [1, 64] or a bandwidth that is not > 0.
  std::string add_network_variant(const std::string& name, int nics, double nic_bandwidth_bytes_per_s,
                                  const std::string& why);
  /// Multiplies instance `name`'s network bandwidth (every NIC's share) by `factor` in (0, 1]
  /// and adds `why` to its notes: the fraction of the line rate a software stack achieves
  /// (validate's PyTorch DDP baseline on p3dn: NCCL over aws-ofi-nccl, 2019-2021). Throws
  /// Error for an unknown name or a factor outside (0, 1].
  void derate_network(const std::string& name, double factor, const std::string& why);
  const std::map<std::string, GpuSpec>& gpus() const { return gpus_; }

  /// EC2 Capacity Blocks for ML (catalog key "capacity_blocks"): the reservation rules and the
  /// published prices per instance type and region (capacity_block.hpp).
  const CapacityBlockRules& capacity_block_rules() const { return cb_rules_; }
  const std::vector<CapacityBlockOffer>& capacity_block_offers() const { return cb_offers_; }
  /// The offer for `instance_type` in `region`, or nullptr (no published block price there).
  const CapacityBlockOffer* capacity_block_offer(const std::string& instance_type, const std::string& region) const;

  /// Placement facts (catalog key "placement", placement.hpp): inter-AZ latency and bandwidth
  /// rules, inter-AZ and inter-region transfer prices. Not present() in a catalog without one.
  const PlacementFacts& placement() const { return placement_; }
  /// Per-region prices and availability (catalog key "regions"; empty names when absent).
  const RegionTable& region_table() const { return regions_; }
  /// Software stacks (catalog key "software", software.hpp), by name.
  const std::map<std::string, SoftwareStack>& software_stacks() const { return software_; }
  /// The stack named `name`; throws Error listing the known stacks for another name.
  const SoftwareStack& software(const std::string& name) const;
  /// Prices every AWS GPU instance for `region` (`trainplan --region`): the catalog's own
  /// figures in kCatalogRegion (us-east-1, the primary sources); elsewhere the region table's
  /// on-demand price and spot samples (SageMaker and missing spot re-estimated from the family
  /// factors, the Capacity Block offer of that region). A type the table lists without `region`
  /// keeps no price and is not offered there (offered_regions()); a type the table does not
  /// list keeps no price (a note says so). Throws Error naming the known regions for another
  /// name. CPU instances keep their us-east-1 prices (a note says so). Call before user
  /// price files (apply_price_file), which then apply on top.
  void select_region(const std::string& region);
  /// The region chosen with select_region(); empty when none was (the catalog's own prices).
  const std::string& region() const { return region_; }
  /// Regions of the table offering `instance_type`; nullopt when the table does not list it.
  std::optional<std::vector<std::string>> offered_regions(const std::string& instance_type) const;
  /// False when a region other than kCatalogRegion was selected and the table says
  /// `instance_type` is not offered there (a type a user price file prices counts as offered).
  bool offered_in_selected_region(const std::string& instance_type) const;

 private:
  std::map<std::string, GpuSpec> gpus_;
  std::map<std::string, InstanceType> instances_;
  std::vector<std::string> instance_order_;
  std::map<std::string, Source> sources_;
  std::map<std::string, CpuInstanceType> cpu_instances_;
  std::vector<std::string> cpu_order_;
  CapacityBlockRules cb_rules_;
  std::vector<CapacityBlockOffer> cb_offers_;
  PlacementFacts placement_;
  RegionTable regions_;
  std::map<std::string, SoftwareStack> software_;
  std::string region_;
  std::set<std::string> user_priced_;  // instances a user price file priced
  // Sets `instance`'s Capacity Block price from the offer of its price region (none: reset).
  void price_capacity_block(InstanceType& instance) const;
  // Makes `region` the instance's price region, dropping the prices of the old one (and their
  // sources); the family factors (SageMaker uplift, spot discount) stay.
  static void move_to_region(InstanceType& instance, const std::string& region);
};

/// The catalog a command should use: the built-in one, or every *.json under `dir` when
/// `dir` is not empty; priced for `region` when not empty (Catalog::select_region); then the
/// user price file `price_file` when not empty.
Catalog load_catalog(const std::string& dir, const std::string& price_file, const std::string& region = "");

/// Machine-readable descriptions (SI units, unit in the key), for `trainplan catalog --json`.
json::Json to_json(const Source& source);
json::Json to_json(const GpuSpec& gpu);
json::Json to_json(const InstanceType& instance);
json::Json to_json(const CpuInstanceType& instance);
/// The whole catalog as `trainplan catalog --json` writes it: {"instances": [...], "gpus":
/// {name: gpu}, "sources": {id: source}}.
json::Json catalog_json(const Catalog& catalog);
/// The region table as `catalog --json` carries it: {"names": [...], "source": id, "instances":
/// {type: {region: {"ec2_on_demand_usd_per_hour", "spot_min_usd_per_hour", "spot_max_usd_per_hour",
/// "zones"}}}}.
json::Json region_table_json(const RegionTable& table);
/// The sources named by an instance's and its GPU's field groups ("a+b" names two), by id.
json::Json instance_sources_json(const Catalog& catalog, const InstanceType& instance);

/// Checks the internal consistency of an instance type (GPU count vs topology matrix,
/// sockets, PCIe switches, NICs, prices). Throws Error without a location; the catalog
/// loader adds file and pointer. Cluster::build calls it too.
void check_instance(const InstanceType& instance);

}  // namespace trainplan::hw
