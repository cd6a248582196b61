#include "trainplan/hwprofiles/catalog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "catalog_parse.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::hw {

const std::vector<std::string>& instance_source_groups() {
  static const std::vector<std::string> kGroups = {
      "hardware", "topology",      "pcie",      "network",          "efa",
      "gpudirect_rdma", "network_latency", "nccl_net_latency", "nccl_protocols", "storage", "ebs",         "ec2_on_demand",
      "sagemaker", "sagemaker_uplift", "spot",   "spot_discount",    "interruption", "capacity_block"};
  return kGroups;
}

const std::vector<std::string>& gpu_source_groups() {
  static const std::vector<std::string> kGroups = {"memory",   "peaks",           "tdp", "compute_capability",
                                                   "sm_count", "cublas_workspace", "mamf",
                                                   "sustained_matmul"};
  return kGroups;
}

const std::vector<std::string>& interruption_buckets() {
  static const std::vector<std::string> kBuckets = {"<5%", "5-10%", "10-15%", "15-20%", ">20%"};
  return kBuckets;
}

std::string_view intra_node_kind_name(IntraNodeKind k) {
  switch (k) {
    case IntraNodeKind::single: return "single";
    case IntraNodeKind::pcie: return "pcie";
    case IntraNodeKind::nvlink_mesh: return "nvlink_mesh";
    case IntraNodeKind::nvswitch: return "nvswitch";
  }
  return "?";
}

std::optional<double> GpuSpec::mamf_fraction(Precision p) const {
  auto m = mamf_flops.find(p);
  auto peak = peak_flops.find(p);
  if (m == mamf_flops.end() || peak == peak_flops.end()) return std::nullopt;
  return m->second / peak->second;
}

std::optional<double> GpuSpec::sustained_matmul_fraction(Precision p) const {
  auto m = sustained_matmul_flops.find(p);
  auto peak = peak_flops.find(p);
  if (m == sustained_matmul_flops.end() || peak == peak_flops.end()) return std::nullopt;
  return m->second / peak->second;
}

double GpuSpec::peak_flops_per_s(Precision p) const {
  auto it = peak_flops.find(p);
  if (it == peak_flops.end()) {
    std::vector<std::string> supported;
    for (const auto& [prec, flops] : peak_flops) supported.emplace_back(precision_name(prec));
    throw Error(fmt::format("{} does not support {}", name, precision_name(p)))
        .hint(fmt::format("use one of: {}{}", join(supported, ", "),
                          p == Precision::bf16 && supports(Precision::fp16) ? " (fp16 instead of bf16)" : ""));
  }
  return it->second;
}

Precision GpuSpec::preferred_half_precision() const {
  return supports(Precision::bf16) ? Precision::bf16 : Precision::fp16;
}

// ---- Catalog -------------------------------------------------------------------------------

Catalog Catalog::from_texts(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::pair<std::string, json::Json>> documents;
  documents.reserve(files.size());
  for (const auto& [name, text] : files) documents.emplace_back(name, json::parse_text(text, name));
  return from_documents(std::move(documents));
}

const CapacityBlockOffer* Catalog::capacity_block_offer(const std::string& instance_type, const std::string& region) const {
  for (const auto& o : cb_offers_)
    if (o.instance_type == instance_type && o.region == region) return &o;
  return nullptr;
}

void Catalog::price_capacity_block(InstanceType& inst) const {
  inst.prices.capacity_block.reset();
  inst.sources.erase("capacity_block");
  inst.prices.capacity_block_rules = cb_rules_;
  if (const CapacityBlockOffer* o = capacity_block_offer(inst.name, inst.prices.region)) {
    inst.prices.capacity_block = o->usd_per_instance_hour;
    inst.sources["capacity_block"] = o->source;
  }
}

Catalog Catalog::from_documents(std::vector<std::pair<std::string, json::Json>> documents) {
  detail::ParsedCatalog parsed = detail::parse_catalog(std::move(documents));
  Catalog c;
  c.gpus_ = std::move(parsed.gpus);
  c.instances_ = std::move(parsed.instances);
  c.instance_order_ = std::move(parsed.instance_order);
  c.sources_ = std::move(parsed.sources);
  c.cpu_instances_ = std::move(parsed.cpu_instances);
  c.cpu_order_ = std::move(parsed.cpu_order);
  c.cb_rules_ = std::move(parsed.capacity_block_rules);
  c.cb_offers_ = std::move(parsed.capacity_block_offers);
  c.placement_ = std::move(parsed.placement);
  c.regions_ = std::move(parsed.regions);
  c.software_ = std::move(parsed.software);
  for (auto& [name, inst] : c.instances_) c.price_capacity_block(inst);
  return c;
}

const Catalog& Catalog::builtin() {
  static const Catalog kCatalog = [] {
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& [path, text] : detail::embedded_catalog_files())
      files.emplace_back(std::string(path), std::string(text));
    std::sort(files.begin(), files.end());
    return from_texts(files);
  }();
  return kCatalog;
}

Catalog Catalog::load_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("is not a directory").at(dir).hint("give the folder that holds the catalog's *.json files");
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".json") paths.push_back(entry.path().string());
  if (ec) throw Error("cannot list the directory: " + ec.message()).at(dir).hint("check that the folder exists and is readable");
  std::sort(paths.begin(), paths.end());
  if (paths.empty())
    throw Error("has no *.json catalog files").at(dir).hint("copy hwprofiles/catalog/*.json there and edit them");
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& p : paths) files.emplace_back(p, json::read_text_file(p));
  return from_texts(files);
}

const GpuSpec& Catalog::gpu(const std::string& name) const {
  auto it = gpus_.find(name);
  if (it == gpus_.end()) throw Error(fmt::format("unknown GPU \"{}\"", name)).hint(suggestion(name, gpu_names()));
  return it->second;
}

const SoftwareStack& Catalog::software(const std::string& name) const {
  auto it = software_.find(name);
  if (it == software_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, s] : software_) names.push_back(n);
    throw Error(fmt::format("unknown software stack \"{}\"", name))
        .hint(names.empty() ? std::string("the catalog defines no software stacks (catalog key \"software\")")
                            : "one of: " + join(names, ", ") + " (`trainplan catalog` lists them)");
  }
  return it->second;
}

const InstanceType& Catalog::instance(const std::string& name) const {
  auto it = instances_.find(name);
  if (it == instances_.end()) {
    if (find_cpu_instance(name))
      throw Error(fmt::format("{} is a CPU instance (no GPU): GPU plans, simulation and execution need a GPU instance", name))
          .hint("plan classic ML on it with `trainplan plan --model xgboost --instances " + name +
                "`, or pick a GPU type (`trainplan catalog` lists both)");
    throw Error(fmt::format("unknown instance type \"{}\"", name))
        .hint(suggestion(name, instance_names()) + " (`trainplan catalog` lists them)");
  }
  return it->second;
}

namespace {
std::string without_ml_prefix(const std::string& name) { return name.rfind("ml.", 0) == 0 ? name.substr(3) : name; }
}  // namespace

const CpuInstanceType* Catalog::find_cpu_instance(const std::string& name) const {
  auto it = cpu_instances_.find(without_ml_prefix(name));
  return it == cpu_instances_.end() ? nullptr : &it->second;
}

const CpuInstanceType& Catalog::cpu_instance(const std::string& name) const {
  if (const CpuInstanceType* c = find_cpu_instance(name)) return *c;
  if (find_instance(without_ml_prefix(name)))
    throw Error(fmt::format("{} is a GPU instance; classic ML plans run on CPU instances", name))
        .hint("pick a CPU type, e.g. ml.m5.large (`trainplan catalog` lists them)");
  throw Error(fmt::format("unknown CPU instance type \"{}\"", name))
      .hint(suggestion(without_ml_prefix(name), cpu_order_) + " (`trainplan catalog` lists them)");
}

const InstanceType* Catalog::find_instance(const std::string& name) const {
  auto it = instances_.find(name);
  return it == instances_.end() ? nullptr : &it->second;
}

bool Catalog::has_instance(const std::string& name) const { return instances_.count(name) != 0; }

std::vector<std::string> Catalog::unverified_price_sources(const CpuInstanceType& c, bool spot) const {
  const bool estimated = spot ? c.prices.spot_estimated : c.prices.sagemaker_estimated;
  // SageMaker managed spot bills the SageMaker price x EC2 spot / EC2 on-demand; a derived price
  // is EC2 x a factor.
  std::vector<std::string> groups = {"sagemaker"};
  if (spot) groups.insert(groups.end(), {"spot", "ec2_on_demand"});
  else if (estimated) groups.push_back("ec2_on_demand");
  std::vector<std::string> out;
  for (const auto& group : groups) {
    const auto it = c.sources.find(group);
    if (it == c.sources.end()) continue;
    for (const auto& id : split(it->second, '+'))
      if (!source(id).verified && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

void Catalog::derate_network(const std::string& name, double factor, const std::string& why) {
  if (!(factor > 0.0 && factor <= 1.0))
    throw Error(fmt::format("network derating of {} must be in (0, 1], got {}", name, factor)).hint("a fraction of the line rate");
  InstanceType& inst = instances_.at(instance(name).name);  // unknown names throw with a suggestion
  inst.network.bandwidth_bytes_per_s *= factor;
  inst.notes.push_back(why);
}

const Source& Catalog::source(const std::string& id) const {
  auto it = sources_.find(id);
  if (it == sources_.end()) {
    std::vector<std::string> ids;
    for (const auto& [key, s] : sources_) ids.push_back(key);
    throw Error(fmt::format("unknown source id \"{}\"", id)).hint(suggestion(id, ids));
  }
  return it->second;
}

std::vector<std::string> Catalog::instance_names() const { return instance_order_; }

std::vector<std::string> Catalog::gpu_names() const {
  std::vector<std::string> out;
  for (const auto& [name, g] : gpus_) out.push_back(name);
  return out;
}

void Catalog::move_to_region(InstanceType& inst, const std::string& region) {
  Prices& p = inst.prices;
  p.region = region;
  p.ec2_on_demand.reset();
  p.sagemaker_on_demand.reset();
  p.sagemaker_estimated = false;
  p.spot.reset();
  p.spot_min.reset();
  p.spot_max.reset();
  p.spot_estimated = false;
  p.interruption_bucket.clear();
  for (const char* group : {"ec2_on_demand", "sagemaker", "spot", "interruption"}) inst.sources.erase(group);
}

std::optional<std::vector<std::string>> Catalog::offered_regions(const std::string& instance_type) const {
  const auto it = regions_.instances.find(instance_type);
  if (it == regions_.instances.end()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& name : regions_.names)
    if (it->second.count(name)) out.push_back(name);
  return out;
}

bool Catalog::offered_in_selected_region(const std::string& instance_type) const {
  // The catalog's own region: its primary sources decide (every type it lists); a type a user
  // price file priced in the region is taken as offered there.
  if (region_.empty() || region_ == kCatalogRegion || user_priced_.count(instance_type)) return true;
  const auto where = offered_regions(instance_type);
  return !where || std::find(where->begin(), where->end(), region_) != where->end();
}

void Catalog::select_region(const std::string& region) {
  std::vector<std::string> known = regions_.names;
  if (std::find(known.begin(), known.end(), kCatalogRegion) == known.end()) known.insert(known.begin(), kCatalogRegion);
  if (std::find(known.begin(), known.end(), region) == known.end())
    throw Error(fmt::format("unknown region \"{}\"", region))
        .hint("the catalog has prices for: " + join(known, ", ") + " (other regions: give prices with --prices FILE)");
  region_ = region;
  for (auto& [name, inst] : instances_) {
    Prices& p = inst.prices;
    if (!inst.aws || p.region == region) continue;  // generic clusters have no AWS prices; the catalog's own region stays
    // The catalog's prices are for another region: keep the family factors and take this
    // region's figures from the table.
    move_to_region(inst, region);
    const auto listed = regions_.instances.find(name);
    if (listed == regions_.instances.end()) {
      inst.notes.push_back(fmt::format("no price for {} in the catalog (its region table does not list this type): give one with --prices FILE", region));
    } else if (const auto o = listed->second.find(region); o != listed->second.end()) {
      p.ec2_on_demand = o->second.ec2_on_demand;
      p.spot_min = o->second.spot_min;
      p.spot_max = o->second.spot_max;
      if (p.ec2_on_demand) inst.sources["ec2_on_demand"] = regions_.source;
      if (p.spot_min) inst.sources["spot"] = regions_.source;
      if (!inst.notes.empty())
        inst.notes.push_back(fmt::format("prices are {}'s (region table); the notes above on prices describe the catalog's {} figures",
                                         region, kCatalogRegion));
      if (const auto note = regions_.notes.find(name); note != regions_.notes.end()) inst.notes.push_back(note->second);
    } else {
      inst.notes.push_back(fmt::format("not offered in {} (offered in {})", region, join(*offered_regions(name), ", ")));
    }
    detail::derive_prices(inst);
    price_capacity_block(inst);
  }
  for (auto& [name, c] : cpu_instances_)
    if (c.prices.region != region)
      c.notes.push_back(fmt::format("prices are {}'s: the catalog has no CPU instance prices for {}", c.prices.region, region));
}

Catalog load_catalog(const std::string& dir, const std::string& price_file, const std::string& region) {
  Catalog c = dir.empty() ? Catalog::builtin() : Catalog::load_dir(dir);
  if (!region.empty()) c.select_region(region);
  if (!price_file.empty()) c.apply_price_file(price_file);
  return c;
}

}  // namespace trainplan::hw

namespace trainplan::hw {
namespace {

// How many of `per_unit`-sized units `gpus` GPUs occupy: 1 when they fit in one, else a whole
// number of them; 0 when they would split a unit.
int units_for(int gpus, int per_unit) {
  if (per_unit <= 0 || gpus <= per_unit) return 1;
  return gpus % per_unit == 0 ? gpus / per_unit : 0;
}

}  // namespace

std::string Catalog::add_partial_instance(const std::string& name, int gpus) {
  const InstanceType& base = instance(name);
  if (gpus < 1 || gpus >= base.gpu_count)
    throw Error(fmt::format("part of {} must be 1 to {} GPUs, got {}", name, base.gpu_count - 1, gpus))
        .hint("a whole instance is the instance itself");
  const std::string part = fmt::format("{}:{}gpu", name, gpus);
  if (instances_.count(part)) return part;
  InstanceType t = base;
  const double share = static_cast<double>(gpus) / base.gpu_count;
  t.name = part;
  t.gpu_count = gpus;
  auto& topo = t.topology;
  topo.nvlink_domain_instances = 1;  // part of one node: the runs it models stay in that node
  if (!topo.nvlink_lanes.empty()) {
    topo.nvlink_lanes.resize(static_cast<size_t>(gpus));
    for (auto& row : topo.nvlink_lanes) row.resize(static_cast<size_t>(gpus));
  }
  const int sockets = units_for(gpus, base.gpu_count / std::max(1, topo.sockets));
  const int nics = units_for(gpus, base.gpu_count / std::max(1, base.network.nics));
  if (sockets == 0 || nics == 0 || (topo.gpus_per_pcie_switch > 0 && units_for(gpus, topo.gpus_per_pcie_switch) == 0))
    throw Error(fmt::format("{} GPUs of {} would split a CPU socket, PCIe switch or NIC group", gpus, name))
        .hint("use a number of GPUs that fills whole sockets (e.g. 1, 2, 4 of 8)");
  topo.sockets = sockets;
  if (gpus == 1) {  // one GPU talks to nothing but its host
    topo.kind = IntraNodeKind::single;
    topo.nvlink_lanes.clear();
    topo.nvswitch_bandwidth_bytes_per_s = 0;
  }
  if (topo.gpus_per_pcie_switch > gpus) topo.gpus_per_pcie_switch = gpus;
  t.network.bandwidth_bytes_per_s *= static_cast<double>(nics) / base.network.nics;
  t.network.nics = nics;
  t.vcpus = std::max(1, static_cast<int>(base.vcpus * share));
  t.host_memory_bytes = base.host_memory_bytes * share;
  for (auto* price : {&t.prices.ec2_on_demand, &t.prices.sagemaker_on_demand, &t.prices.spot, &t.prices.spot_min,
                      &t.prices.spot_max})
    if (*price) **price *= share;
  t.description = fmt::format("{} of the {} GPUs of one {}", gpus, base.gpu_count, name);
  t.notes.push_back(fmt::format("part of a node: {} of {}'s {} GPUs, NICs and prices in proportion", gpus, name,
                                base.gpu_count));
  check_instance(t);
  instances_.emplace(part, std::move(t));
  instance_order_.push_back(part);
  return part;
}

std::string Catalog::add_network_variant(const std::string& name, int nics, double nic_bandwidth_bytes_per_s,
                                         const std::string& why) {
  const InstanceType& base = instance(name);  // unknown names throw with a suggestion
  if (nics < 1 || nics > 64)
    throw Error(fmt::format("a network variant of {} needs 1 to 64 NICs, got {}", name, nics)).hint("NICs per node");
  if (!(nic_bandwidth_bytes_per_s > 0))
    throw Error(fmt::format("a network variant of {} needs a NIC bandwidth > 0", name)).hint("e.g. 200 Gb/s = 25e9 B/s");
  const std::string variant = fmt::format("{}:{}x{}Gbps", name, nics, std::lround(nic_bandwidth_bytes_per_s * 8 / 1e9));
  if (instances_.count(variant)) return variant;
  InstanceType t = base;
  t.name = variant;
  t.network.nics = nics;
  t.network.bandwidth_bytes_per_s = nics * nic_bandwidth_bytes_per_s;
  t.description = fmt::format("{} with {} x {} Gb/s NICs", name, nics, std::lround(nic_bandwidth_bytes_per_s * 8 / 1e9));
  t.notes.push_back(why);
  check_instance(t);
  instances_.emplace(variant, std::move(t));
  instance_order_.push_back(variant);
  return variant;
}

}  // namespace trainplan::hw
