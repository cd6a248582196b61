#include "trainplan/hwprofiles/catalog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "catalog_parse.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::hw {

const std::vector<std::string>& instance_source_groups() {
  static const std::vector<std::string> kGroups = {
      "hardware", "topology",      "pcie",      "network",          "efa",
      "gpudirect_rdma", "network_latency", "storage", "ebs",         "ec2_on_demand",
      "sagemaker", "sagemaker_uplift", "spot",   "spot_discount",    "interruption"};
  return kGroups;
}

const std::vector<std::string>& gpu_source_groups() {
  static const std::vector<std::string> kGroups = {"memory",   "peaks",           "tdp", "compute_capability",
                                                   "sm_count", "cublas_workspace", "mamf"};
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

Catalog Catalog::from_documents(std::vector<std::pair<std::string, json::Json>> documents) {
  detail::ParsedCatalog parsed = detail::parse_catalog(std::move(documents));
  Catalog c;
  c.gpus_ = std::move(parsed.gpus);
  c.instances_ = std::move(parsed.instances);
  c.instance_order_ = std::move(parsed.instance_order);
  c.sources_ = std::move(parsed.sources);
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
  if (ec) throw Error("cannot list the directory: " + ec.message()).at(dir);
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

const InstanceType& Catalog::instance(const std::string& name) const {
  auto it = instances_.find(name);
  if (it == instances_.end())
    throw Error(fmt::format("unknown instance type \"{}\"", name))
        .hint(suggestion(name, instance_names()) + " (`trainplan catalog` lists them)");
  return it->second;
}

const InstanceType* Catalog::find_instance(const std::string& name) const {
  auto it = instances_.find(name);
  return it == instances_.end() ? nullptr : &it->second;
}

bool Catalog::has_instance(const std::string& name) const { return instances_.count(name) != 0; }

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

Catalog load_catalog(const std::string& dir, const std::string& price_file) {
  Catalog c = dir.empty() ? Catalog::builtin() : Catalog::load_dir(dir);
  if (!price_file.empty()) c.apply_price_file(price_file);
  return c;
}

}  // namespace trainplan::hw
