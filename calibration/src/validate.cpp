// Validation against published measurements. See validate.hpp.
#include "trainplan/calibration/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <map>
#include <regex>
#include <set>
#include <memory>
#include <tuple>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/core/thread_pool.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/simulate_plan.hpp"
#include "trainplan/simulator/collectives.hpp"

namespace trainplan::calibration {
namespace {

using json::Json;

// A number at j[key]: a JSON number, or a string that is one decimal number and nothing else
// ("8", " 2048 ", "1.5e3": sources transcribed as text); nullopt otherwise ("3 days", "1.2M",
// "0x10", "nan").
std::optional<double> num(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return std::nullopt;
  const Json& v = j[key];
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& raw = v.get<std::string>();
  const size_t first = raw.find_first_not_of(" \t"), last = raw.find_last_not_of(" \t");
  const std::string t = first == std::string::npos ? std::string() : raw.substr(first, last - first + 1);
  if (t.empty() || t.size() > 64 || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}
// A count at j[key] in [min, max]; nullopt when absent. Any other value (0 GPUs, tp 0, 2^40
// layers, 1.5) throws, which skips the point with that reason: published points are read
// through these two helpers, never cast from a raw number.
std::optional<int64_t> whole(const Json& j, const char* key, int64_t min, int64_t max) {
  const auto v = num(j, key);
  if (!v) return std::nullopt;
  if (*v != std::floor(*v) || *v < static_cast<double>(min) || *v > static_cast<double>(max))
    throw Error(fmt::format("\"{}\" must be a whole number {}, got {:g}", key, checked::range_text(min, max), *v));
  return static_cast<int64_t>(*v);
}
// A measured value at j[key] that must be positive (a rate or time of 0 has no error ratio).
std::optional<double> measured(const Json& j, const char* key) {
  const auto v = num(j, key);
  if (v && !(*v > 0)) throw Error(fmt::format("the measured \"{}\" must be positive, got {:g}", key, *v));
  return v;
}
// j[key], or null when j is not an object or has no such member (a const operator[] on a
// missing key is undefined behaviour in nlohmann::json).
const Json& member(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}
std::string str(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}
bool contains(const std::string& hay, std::string_view needle) { return to_lower(hay).find(to_lower(needle)) != std::string::npos; }

// The inter-node network a point states: NIC count (0 when not stated) and per-node
// bandwidth per direction in Gb/s (0 when not stated), from text such as "8x 200 Gb/s HDR
// InfiniBand per node", "4x 200G HDR IB", "4x HDR", "800 Gbps per node (InfiniBand EDR, 12.5
// GB/s per link)" or "1600 Gbps node-to-node RoCE". An InfiniBand generation without a rate
// gives the rate per port (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s).
struct StatedNetwork {
  int nics = 0;
  double gbps = 0;  // per node
  double per_gpu_gbps = 0;  // "400 Gb/s per GPU": one NIC of this rate per GPU
  std::string fabric;
};
StatedNetwork stated_network(const std::string& text) {
  StatedNetwork out;
  const std::string t = to_lower(text);
  double generation_rate = 0;
  for (const auto& [word, rate] : std::initializer_list<std::pair<const char*, double>>{
           {"edr", 100}, {"hdr", 200}, {"ndr", 400}, {"xdr", 800}})
    if (t.find(word) != std::string::npos) {
      generation_rate = rate;
      out.fabric = fmt::format("InfiniBand {}{}{}", static_cast<char>(std::toupper(word[0])), static_cast<char>(std::toupper(word[1])),
                               static_cast<char>(std::toupper(word[2])));
    }
  if (out.fabric.empty() && t.find("roce") != std::string::npos) out.fabric = "RoCE";
  // Numbers in order with what follows each: "<n>x" is a count, "<r> gb/s" / "gbps" / "g " a rate.
  int count = 0;
  double rate = 0;
  for (size_t i = 0; i < t.size();) {
    if (!std::isdigit(static_cast<unsigned char>(t[i])) || (i > 0 && (std::isalnum(static_cast<unsigned char>(t[i - 1])) || t[i - 1] == '.'))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < t.size() && (std::isdigit(static_cast<unsigned char>(t[j])) || t[j] == '.')) ++j;
    const double v = std::atof(t.substr(i, j - i).c_str());
    size_t k = j;
    while (k < t.size() && t[k] == ' ') ++k;
    // The unit from the text as written: "Gb/s", "Gbps", "Gbit", "G" are bits; "GB/s" (bytes) is not a line rate.
    const std::string rest = text.substr(k, 5);
    const bool gigabit = rest.rfind("Gb/s", 0) == 0 || rest.rfind("Gbps", 0) == 0 || rest.rfind("gbps", 0) == 0 ||
                         rest.rfind("Gbit", 0) == 0 ||
                         (rest.rfind("G", 0) == 0 && (rest.size() < 2 || !std::isalpha(static_cast<unsigned char>(rest[1]))));
    if ((rest.rfind("x", 0) == 0 || rest.rfind("X", 0) == 0) && count == 0 && v >= 1 && v <= 64 && v == std::floor(v))
      count = static_cast<int>(v);
    else if (gigabit && rate == 0)
      rate = v;
    i = j;
  }
  if (count > 0) {
    out.nics = count;
    const double per_port = rate > 0 ? rate : generation_rate;
    out.gbps = per_port * count;
  } else if (rate > 0 && (t.find("per gpu") != std::string::npos || t.find("per nic") != std::string::npos)) {
    out.per_gpu_gbps = rate;  // one NIC per GPU (the caller knows how many GPUs)
  } else if (rate > 0 && t.find("node") != std::string::npos) {  // "per node", "node-to-node": the node's total
    out.gbps = rate;
    if (generation_rate > 0 && std::fmod(rate, generation_rate) == 0) out.nics = static_cast<int>(rate / generation_rate);
  }
  return out;
}

// Lower-case alphanumeric tokens of `s` ("NVIDIA L40S 48GB" -> nvidia, l40s, 48gb).
std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.back().empty()) out.emplace_back();
  }
  if (out.back().empty()) out.pop_back();
  return out;
}
bool has_token(const std::vector<std::string>& t, std::string_view w) { return std::find(t.begin(), t.end(), w) != t.end(); }
bool has_token_prefix(const std::vector<std::string>& t, std::string_view w) {
  return std::any_of(t.begin(), t.end(), [&](const std::string& x) { return x.rfind(w, 0) == 0; });
}

// Whether `text` names the GPU family `family` ("H200"): the name not glued to a letter before
// it ("GH200" is another product) except a count's "x" ("8xH200"), nor to a digit after it.
bool names_family(const std::string& text, std::string_view family) {
  const std::string t = to_lower(text), f = to_lower(family);
  for (size_t at = t.find(f); at != std::string::npos; at = t.find(f, at + 1)) {
    const bool counted = at >= 2 && t[at - 1] == 'x' && std::isdigit(static_cast<unsigned char>(t[at - 2]));
    const bool before = at == 0 || !std::isalpha(static_cast<unsigned char>(t[at - 1])) || counted;
    const bool after = at + f.size() >= t.size() || !std::isdigit(static_cast<unsigned char>(t[at + f.size()]));
    if (before && after) return true;
  }
  return false;
}

// Whether the GPU a point names can be the catalog GPU `g`: its family (the first token of the
// catalog name: "l40s" of "L40S", "a100" of "A100-SXM4-80GB") is a token of the stated name,
// and a stated form factor (SXM, PCIe, NVL) and memory size ("80GB" or gpu_mem_gb, within
// 15 %: catalog sizes are as sold) agree with the catalog GPU's.
bool names_gpu(const Json& hw, const std::vector<std::string>& stated, const hw::GpuSpec& g) {
  const std::vector<std::string> cat = tokens(g.name);
  if (cat.empty() || !has_token(stated, cat.front())) return false;
  const bool cat_sxm = has_token_prefix(cat, "sxm"), stated_sxm = has_token_prefix(stated, "sxm");
  const bool stated_pcie = has_token(stated, "pcie") || has_token(stated, "nvl");
  if ((stated_pcie && !has_token(cat, "pcie")) || (stated_sxm && !cat_sxm)) return false;
  std::optional<double> gb = num(hw, "gpu_mem_gb");
  for (const auto& t : stated) {
    const size_t digits = t.find_first_not_of("0123456789");
    if (!gb && digits > 0 && digits != std::string::npos && t.substr(digits) == "gb") gb = std::stod(t.substr(0, digits));
  }
  const double cat_gb = g.memory_bytes / (1024.0 * 1024 * 1024);
  return !gb || std::fabs(*gb - cat_gb) <= 0.15 * cat_gb;
}

// A point's cluster from the catalog itself, when no known system below describes it: an
// instance type its system or network text names (the longest name, "ml.g5.48xlarge" ->
// g5.48xlarge), else a catalog node whose GPU the point names (names_gpu): with the stated
// GPUs per node when given, else the one whose GPU count equals the run's, the smallest that
// holds it, or the largest that divides it; a node that is not an AWS instance (it takes the stated
// network, with_stated_network) unless the text says EFA, AWS or SageMaker. "" when none fits.
std::string map_cluster_by_gpu(const Json& hw, const hw::Catalog& catalog, int num_gpus, std::vector<std::string>& assumptions) {
  const std::string gpu = str(hw, "gpu"), inter = str(hw, "inter_node"), system = str(hw, "system");
  const std::vector<std::string> stated = tokens(gpu);
  const std::string text = to_lower(system + " " + inter);
  std::string named;
  for (const auto& n : catalog.instance_names())
    if (text.find(to_lower(n)) != std::string::npos && n.size() > named.size() && catalog.has_instance(n) &&
        (stated.empty() || names_gpu(hw, stated, catalog.gpu(catalog.instance(n).gpu))))
      named = n;
  if (!named.empty()) return named;
  if (stated.empty()) return "";
  const auto per_node = num(hw, "gpus_per_node");
  const bool aws = contains(text, "efa") || contains(text, "aws") || contains(text, "sagemaker") || contains(text, "ec2");
  std::string best;
  auto score = [&](const hw::InstanceType& i) {
    // Exact GPUs per node first, then one node that holds the run, the network kind the text
    // implies, and the smallest such node (else the largest, for a run over several).
    const int count = i.gpu_count;
    const bool exact = per_node ? count == static_cast<int>(*per_node) : count == num_gpus;
    const bool fits = num_gpus <= count;
    return std::make_tuple(exact, fits, i.aws == aws, fits ? -count : count);
  };
  for (const auto& n : catalog.instance_names()) {
    if (!catalog.has_instance(n)) continue;
    const hw::InstanceType& i = catalog.instance(n);
    if (i.gpu_count <= 0 || !names_gpu(hw, stated, catalog.gpu(i.gpu))) continue;
    if (per_node && i.gpu_count < static_cast<int>(*per_node)) continue;
    const int per = per_node ? static_cast<int>(*per_node) : i.gpu_count;  // fewer: part of the node (node_catalog)
    if (num_gpus > per && num_gpus % per != 0) continue;
    if (best.empty() || score(i) > score(catalog.instance(best))) best = n;
  }
  if (!best.empty())
    assumptions.push_back(fmt::format("{} GPUs ({}) modelled as the catalog's {} ({} x {}, {})", num_gpus, gpu, best,
                                      catalog.instance(best).gpu_count, catalog.instance(best).gpu,
                                      catalog.instance(best).aws ? "an AWS instance" : "a reference node"));
  return best;
}

// Which catalog cluster a point's hardware is. Empty + reason when none fits.
std::string map_cluster(const Json& hw, const hw::Catalog& catalog, int num_gpus, std::vector<std::string>& assumptions,
                        std::string& reason) {
  const std::string gpu = str(hw, "gpu");
  const std::string inter = str(hw, "inter_node");
  const std::string system = str(hw, "system");
  // What the point says of its system, for the assumptions: the system, else the interconnect.
  const std::string stated_system = !system.empty() ? system : !inter.empty() ? inter : "no system or interconnect stated";
  const bool single_node = num_gpus <= 8;
  std::string name;
  // A GPU of a catalog family in a form factor or memory size the catalog lacks (A100 PCIe,
  // H100 NVL) runs at other clocks, power and links: not modelled as the SXM part.
  const std::vector<std::string> stated = tokens(gpu);
  std::vector<std::string> family;
  bool variant = false;
  for (const auto& [n, g] : catalog.gpus())
    if (const auto t = tokens(n); !t.empty() && has_token(stated, t.front())) family.push_back(n), variant = variant || names_gpu(hw, stated, g);
  if (!family.empty() && !variant) {
    reason = fmt::format("no catalog cluster has a {}: the catalog's {} differ in form factor or memory", gpu, join(family, ", "));
    return "";
  }
  // InfiniBand named any way a source writes it ("InfiniBand", "IB", "NDR", "HDR", "400 Gb/s").
  const bool infiniband = contains(inter, "infiniband") || contains(inter, "ib ") || contains(inter, " ib") ||
                          contains(inter, "NDR") || contains(inter, "HDR") || contains(inter, "ConnectX");
  if (names_family(gpu, "H200")) {
    if (contains(inter, "EFA") || contains(system, "p5e") || single_node || infiniband) {
      name = contains(system, "p5en") ? "p5en.48xlarge" : "p5e.48xlarge";
      if (!contains(inter, "EFA") && !contains(system, "p5e"))
        assumptions.push_back(fmt::format("8-GPU H200 node ({}) modelled as a {} (NVSwitch; 3200 Gb/s per node, as 8 x 400 Gb/s)",
                                          stated_system, name));
    }
  } else if (names_family(gpu, "H100")) {
    if (contains(inter, "EFA") || contains(system, "p5.48xlarge")) {
      name = "p5.48xlarge";
    } else if (contains(inter, "NDR") || contains(system, "DGX H100")) {
      name = "dgx-h100";
    } else if (infiniband || (single_node && inter.empty()) || contains(system, "HGX") || contains(system, "DGX") || contains(system, "Eos") ||
               (single_node && (contains(gpu, "SXM") || contains(system, "NVSwitch")))) {
      name = "dgx-h100";
      assumptions.push_back(fmt::format("8-GPU H100 NVSwitch node ({}) modelled as a DGX H100 (8 x 400 Gb/s InfiniBand NDR)",
                                        stated_system));
    }
  } else if (names_family(gpu, "A100")) {
    const bool gb80 = contains(gpu, "80") || num(hw, "gpu_mem_gb").value_or(0) >= 80;
    if (contains(inter, "EFA") || contains(system, "p4d")) {
      name = gb80 ? "p4de.24xlarge" : "p4d.24xlarge";
    } else if (contains(inter, "HDR") || contains(inter, "1600") || contains(inter, "RoCE") || contains(system, "DGX A100") ||
               contains(system, "Selene")) {
      name = gb80 ? "dgx-a100-80gb" : "dgx-a100-40gb";
    } else if (infiniband || contains(system, "HGX") || contains(system, "DGX")) {
      name = gb80 ? "dgx-a100-80gb" : "dgx-a100-40gb";
      assumptions.push_back(fmt::format("8-GPU A100 NVSwitch node ({}) modelled as a {} (8 x 200 Gb/s InfiniBand HDR)",
                                        stated_system, name));
    } else if (single_node && (contains(system, "NVSwitch") || contains(gpu, "SXM"))) {
      name = gb80 ? "dgx-a100-80gb" : "dgx-a100-40gb";
      assumptions.push_back(fmt::format("single 8-GPU A100 NVSwitch node ({}) modelled as a {} node", stated_system, name));
    }
    if (contains(gpu, "unverified")) assumptions.push_back("GPU variant marked unverified by the source");
  } else if (names_family(gpu, "P100")) {
    // The Horovod benchmarks: "4 Pascal GPUs" per server, "RoCE-capable 25 Gbit/s network".
    const auto per_node = num(hw, "gpus_per_node");
    if ((!per_node || *per_node == 4) && (inter.empty() || contains(inter, "RoCE") || contains(inter, "25 G"))) {
      name = "p100-pcie-4gpu-roce25";
      assumptions.push_back(fmt::format("4-GPU Pascal servers ({}) modelled as 4 x P100 PCIe 16 GB on CPU root ports, one 25 Gbit/s "
                                        "RoCE NIC on the CPU (no GPUDirect RDMA): the source names neither variant nor layout",
                                        stated_system));
    }
  } else if (names_family(gpu, "V100")) {
    if (contains(gpu, "SXM3") || contains(system, "DGX-2") || contains(str(hw, "intra_node"), "DGX-2")) {
      // V100 SXM3 exists only in the DGX-2 (and HGX-2 boards of the same design).
      name = "dgx-2";
      if (!contains(system, "DGX-2") && !contains(str(hw, "intra_node"), "DGX-2"))
        assumptions.push_back(fmt::format("V100 SXM3 ({}) modelled as DGX-2 nodes (16 GPUs on NVSwitch, 8 x 100 Gb/s EDR InfiniBand)",
                                          system.empty() ? gpu : system));
    } else if (contains(system, "p3dn") || (contains(inter, "100 Gbps") && contains(inter, "EFA"))) {
      name = "p3dn.24xlarge";
    } else if (contains(system, "p3.16xlarge") || contains(inter, "p3.16xlarge")) {
      name = "p3.16xlarge";
    } else if (single_node && (contains(system, "DGX-1") || contains(system, "NVLink") || contains(gpu, "SXM2"))) {
      // DGX-1V and p3.16xlarge / p3dn.24xlarge share the 8-GPU NVLink hybrid cube-mesh.
      const bool gb32 = contains(gpu, "32") || num(hw, "gpu_mem_gb").value_or(0) >= 32;
      name = gb32 ? "p3dn.24xlarge" : "p3.16xlarge";
      assumptions.push_back(fmt::format("one 8-GPU V100 NVLink hybrid cube-mesh node ({}) modelled as a {}",
                                        system.empty() ? gpu : system, name));
    }
  }
  if (name.empty()) name = map_cluster_by_gpu(hw, catalog, num_gpus, assumptions);
  if (name.empty() && gpu.empty()) {
    reason = "the GPU is not given (hardware.gpu)";
    return "";
  }
  if (name.empty()) {
    const std::string where = inter.empty() ? system : inter;
    reason = where.empty() ? fmt::format("no catalog cluster has a {} (the catalog's GPUs: trainplan catalog)", gpu)
                           : fmt::format("no catalog cluster for {} with \"{}\"", gpu, where);
    return "";
  }
  const auto& inst = catalog.instance(name);
  // Nodes of fewer GPUs than the catalog node (4 per node): part of it per node (node_catalog).
  const auto stated_per_node = num(hw, "gpus_per_node");
  const int per = stated_per_node && *stated_per_node >= 1 && *stated_per_node < inst.gpu_count ? static_cast<int>(*stated_per_node)
                                                                                                 : inst.gpu_count;
  if (num_gpus < per) return name;  // part of one node: see on_part_of_node
  if (num_gpus % per != 0) {
    reason = fmt::format("{} GPUs is not a whole number of {} nodes ({} GPUs each)", num_gpus, name, per);
    return "";
  }
  return name;
}

// A generic (non-AWS) node whose stated inter-node network differs from the catalog's: the
// catalog gains the node with the stated NICs and bandwidth (hw::Catalog::add_network_variant),
// with the assumption listed; `cluster` is renamed and `local` holds the catalog. AWS instances
// keep their catalog network (the instance name fixes it).
void with_stated_network(const Json& hw, const hw::Catalog& catalog, std::string& cluster, std::optional<hw::Catalog>& local,
                         std::vector<std::string>& assumptions) {
  const hw::InstanceType& base = catalog.instance(cluster);
  const std::string text = str(hw, "inter_node");
  if (base.aws || text.empty()) return;
  StatedNetwork n = stated_network(text);
  if (n.per_gpu_gbps > 0) n.nics = base.gpu_count, n.gbps = n.per_gpu_gbps * base.gpu_count;
  if (n.gbps <= 0) return;
  const double base_gbps = base.network.bandwidth_bytes_per_s * 8 / 1e9;
  const int nics = n.nics > 0 ? n.nics : base.network.nics;
  if (std::fabs(n.gbps - base_gbps) <= 1e-6 * base_gbps && nics == base.network.nics) return;
  if (base.gpu_count % nics != 0 && nics % base.gpu_count != 0) return;  // no even GPU-to-NIC layout: keep the node's
  if (!local) local.emplace(catalog);
  cluster = local->add_network_variant(cluster, nics, n.gbps * 1e9 / 8 / nics,
                                       fmt::format("network as the source states it: \"{}\"", text));
  assumptions.push_back(fmt::format("network as stated (\"{}\"): {} with {} x {:g} Gb/s{} instead of its {} x {:g} Gb/s{}", text,
                                    base.name, nics, n.gbps / nics, n.nics > 0 ? "" : " (NIC count of the catalog node)",
                                    base.network.nics, base_gbps / base.network.nics,
                                    n.fabric.empty() ? "" : fmt::format("; fabric {}", n.fabric)));
}

// A run on fewer GPUs than one `cluster` node holds runs on the first `gpus` of them: the
// catalog gains that part of the node as an instance (hw::Catalog::add_partial_instance).
// Returns the catalog to use and renames `cluster`; nullptr (with `reason`) when the part
// cannot be built.
const hw::Catalog* on_part_of_node(const hw::Catalog& catalog, std::string& cluster, int gpus,
                                   std::optional<hw::Catalog>& local, std::vector<std::string>& assumptions,
                                   std::string& reason) {
  const hw::Catalog& from = local ? *local : catalog;
  const int per_node = from.instance(cluster).gpu_count;
  if (gpus >= per_node) return &from;
  if (!local) local.emplace(catalog);
  try {
    const std::string part = local->add_partial_instance(cluster, gpus);
    assumptions.push_back(fmt::format("{} of the {} GPUs of one {} node (their NVLink, PCIe and NICs)", gpus, per_node, cluster));
    cluster = part;
  } catch (const Error& e) {
    reason = e.what();
    return nullptr;
  }
  return &*local;
}

// The catalog for a point's `gpus` on `cluster`: part of a node (on_part_of_node), the stated
// network (with_stated_network). nullptr (with `reason`) when the part cannot be built.
const hw::Catalog* node_catalog(const Json& hw, const hw::Catalog& catalog, std::string& cluster, int gpus,
                                std::optional<hw::Catalog>& local, std::vector<std::string>& assumptions, std::string& reason) {
  // A run over nodes of fewer GPUs than the catalog node (gpus_per_node 4 of an 8-GPU node):
  // each node is that part of the catalog node, with the stated network per node.
  const int node = catalog.instance(cluster).gpu_count;
  if (const auto per = num(hw, "gpus_per_node"); per && *per >= 1 && *per < node && gpus > *per) {
    local.emplace(catalog);
    try {
      const std::string part = local->add_partial_instance(cluster, static_cast<int>(*per));
      assumptions.push_back(fmt::format("nodes of {} GPUs: {} of the {} GPUs of a {} node each (their NVLink, PCIe and NICs)", *per, *per,
                                        node, cluster));
      cluster = part;
    } catch (const Error& e) {
      reason = e.what();
      return nullptr;
    }
    const hw::Catalog parted = *local;
    with_stated_network(hw, parted, cluster, local, assumptions);
    return &*local;
  }
  with_stated_network(hw, catalog, cluster, local, assumptions);
  return on_part_of_node(catalog, cluster, gpus, local, assumptions, reason);
}

// A model name reduced for matching: lower-case letters, digits and dots ("Llama-2 70B" ->
// "llama270b"); Llama 3.1 / 3.2 / 3.3 at 8B and 70B have Llama 3's shapes (their model
// cards), so "llama3.1" reads as "llama3" unless the catalog has the name itself.
std::string model_key(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The catalog model a point names when it does not state the shape: a catalog name or display
// name ("llama2-70b", "Llama 2 70B") whose key (model_key) is in the point's name, or the point's
// name in exactly one catalog key; the longest such key wins. A stated parameter count must be
// within 15 % of the catalog model's. "" when none fits (or the name is in several keys).
std::string catalog_model_named(const Json& m) {
  const std::string name = model_key(str(m, "name"));
  if (name.size() < 4 || name.find_first_of("0123456789") == std::string::npos) return "";
  std::string with_31 = name;
  for (const char* v : {"llama3.1", "llama3.2", "llama3.3"})
    if (auto at = with_31.find(v); at != std::string::npos) with_31.replace(at, 8, "llama3");
  std::string best;
  std::set<std::string> containing;
  size_t best_len = 0;
  for (const auto& s : models::ModelCatalog::builtin().specs()) {
    if (s.family == models::Family::mlp || s.name.find("tiny") != std::string::npos) continue;
    for (const std::string& key : {model_key(s.name), model_key(s.display_name)}) {
      if (key.find_first_of("0123456789") == std::string::npos) continue;
      if ((name.find(key) != std::string::npos || with_31.find(key) != std::string::npos) && key.size() > best_len)
        best = s.name, best_len = key.size();
      if (key.find(name) != std::string::npos) containing.insert(s.name);
    }
  }
  if (best.empty() && containing.size() == 1) best = *containing.begin();
  if (best.empty()) return "";
  if (const auto params_b = num(m, "params_b"); params_b && *params_b > 0) {
    const double params = models::build_graph(models::ModelCatalog::builtin().spec(best)).total_params() / 1e9;
    if (std::fabs(params - *params_b) > 0.15 * *params_b) return "";
  }
  return best;
}

// Attention heads a point leaves out while it states layers and hidden size: those of a catalog
// model of that shape (the stated layers and hidden, and vocabulary / FFN where stated; the
// model the point's name names first), else head dimension 128 (Llama, Mistral, Qwen, GPT-3
// from 6.7B, MPT from 7B), else 64, with kv heads = heads unless stated; listed. Heads only set
// the attention's head dimension: the FLOPs and parameters do not depend on them.
void infer_heads(const Json& m, int64_t layers, int64_t hidden, int64_t& heads, int64_t& kv, std::vector<std::string>& assumptions) {
  const auto stated = [&](const char* key) { return whole(m, key, 1, limits::kMaxVocab).value_or(0); };
  const std::string named = catalog_model_named(m);
  const models::ModelSpec* from = nullptr;
  for (const auto& s : models::ModelCatalog::builtin().specs()) {
    if (s.layers != layers || s.hidden != hidden || s.num_experts > 0) continue;
    if ((stated("vocab") && s.vocab != stated("vocab")) || (stated("ffn_hidden") && s.ffn_hidden != stated("ffn_hidden"))) continue;
    if (kv && s.kv_heads != kv) continue;
    if (!from || s.name == named) from = &s;
  }
  if (from) {
    heads = from->heads;
    if (!kv) kv = from->kv_heads;
    assumptions.push_back(fmt::format("attention heads not stated: {} ({} kv), as the catalog's {} of the same layers and hidden size",
                                      heads, kv, from->name));
    return;
  }
  const int64_t head_dim = hidden % 128 == 0 ? 128 : hidden % 64 == 0 ? 64 : 0;
  if (!head_dim) return;
  heads = hidden / head_dim;
  if (kv && heads % kv != 0) kv = 0;
  assumptions.push_back(fmt::format("attention heads not stated: {} (head dimension {})", heads, head_dim));
}

// The routed experts a point states: model.num_experts / experts_per_token, else what its name
// or notes write ("Mixtral 8x7B": 8 experts; "64 experts", "256 routed experts"; "top-2",
// "top_k 8", "8 active experts"; "shared expert"). 0 where nothing says.
struct StatedExperts {
  int64_t experts = 0, top_k = 0;
  bool shared = false;
  bool from_text = false;  // experts read from the name or notes, not a field
};
StatedExperts stated_experts(const Json& m) {
  auto get = [&](const char* key) { return whole(m, key, 1, limits::kMaxVocab).value_or(0); };
  StatedExperts out{get("num_experts"), get("experts_per_token"), false, false};
  // Each read up to its first 1000 characters (libstdc++'s regex recurses per character, as in
  // published_bound); counts of at most 6 digits (std::stoll cannot overflow).
  const std::string text = to_lower(str(m, "name").substr(0, 1000) + " ; " + str(m, "arch_notes").substr(0, 1000));
  static const std::regex experts_re(R"((\d{1,6})\s*(?:routed\s+)?experts)");
  static const std::regex mixtral_re(R"((?:^|[^\d.])(\d{1,6})\s*x\s*\d+(?:\.\d+)?\s*b\b)");
  static const std::regex top_re(R"(top[-_ ]?(?:k\s*=?\s*)?(\d{1,6}))");
  static const std::regex active_re(R"((\d{1,6})\s*(?:active|activated)\s+experts)");
  auto number = [&](const std::regex& re) -> int64_t {
    std::smatch mt;
    return std::regex_search(text, mt, re) ? std::stoll(mt[1].str()) : 0;
  };
  if (!out.experts) {
    out.experts = number(experts_re);
    if (!out.experts) out.experts = number(mixtral_re);
    out.from_text = out.experts > 0;
  }
  if (!out.top_k) {
    out.top_k = number(top_re);
    if (!out.top_k) out.top_k = number(active_re);
  }
  out.shared = out.experts > 0 && contains(text, "shared expert");
  if (out.experts < 2 || out.top_k > out.experts) out = StatedExperts{};
  return out;
}

// The model of a point: the catalog model with the point's shape, else one built from the
// shape (decoder-only; Llama-style with SwiGLU, RMSNorm, rotary and untied embeddings when the
// point's notes, grouped-query attention or a non-4h FFN say so; GPT-style otherwise). What a
// built model assumes goes to `assumptions`. nullopt (with `reason`) without layers, hidden
// size and heads.
std::optional<models::ModelSpec> map_model(const Json& m, std::vector<std::string>& assumptions, std::string& reason) {
  auto get = [&](const char* key) { return whole(m, key, 1, limits::kMaxVocab).value_or(0); };
  const int64_t layers = get("layers"), hidden = get("hidden");
  int64_t heads = get("heads"), kv_stated = get("kv_heads");
  if (layers && hidden && !heads) infer_heads(m, layers, hidden, heads, kv_stated, assumptions);
  if (!layers || !hidden || !heads) {
    if (const std::string named = catalog_model_named(m); !named.empty()) {
      assumptions.push_back(fmt::format("shape not stated: the catalog's {} (\"{}\")", named, str(m, "name")));
      return models::ModelCatalog::builtin().spec(named);
    }
    reason = "the model's layers / hidden / heads are not given, and its name is no catalog model's";
    return std::nullopt;
  }
  const int64_t kv = kv_stated ? kv_stated : heads;
  std::string best;
  // A mixture-of-experts point states its routed experts (num_experts, experts_per_token, or in
  // its name / notes): it matches only a catalog MoE model with those; a point that states none
  // never matches a MoE entry of the same attention shape (Mixtral 8x7B and Llama 3 8B) unless
  // its name names that entry.
  StatedExperts moe = stated_experts(m);
  if (!moe.experts) {
    if (const std::string named = catalog_model_named(m); !named.empty()) {
      const models::ModelSpec& n = models::ModelCatalog::builtin().spec(named);
      if (n.is_moe() && n.layers == layers && n.hidden == hidden) {
        moe.experts = n.num_experts;
        moe.top_k = n.experts_per_token;
        assumptions.push_back(fmt::format("experts not stated: {} routed, top {}, as the catalog's {} the name names", n.num_experts,
                                          n.experts_per_token, n.display_name));
      }
    }
  } else if (moe.from_text) {
    assumptions.push_back(fmt::format("mixture of experts read from the name / notes: {} routed experts{}", moe.experts,
                                      moe.top_k ? fmt::format(", top {}", moe.top_k) : ""));
  }
  const int64_t experts = moe.experts, top_k = moe.top_k;
  for (const auto& s : models::ModelCatalog::builtin().specs()) {
    if (s.num_experts != experts || (top_k && s.experts_per_token != top_k)) continue;
    if (s.layers != layers || s.hidden != hidden || s.heads != heads || s.kv_heads != kv) continue;
    if (get("vocab") && s.vocab != get("vocab")) continue;
    if (get("ffn_hidden") && s.ffn_hidden != get("ffn_hidden")) continue;
    if (best.empty() || (get("seq_len") && s.seq_len == get("seq_len"))) best = s.name;
  }
  if (!best.empty()) return models::ModelCatalog::builtin().spec(best);
  const std::string notes = to_lower(str(m, "arch_notes") + " " + str(m, "name"));
  const int64_t ffn = get("ffn_hidden");
  // Mixture-of-experts decoders are Llama-style (Mixtral, Qwen-MoE, DeepSeek, DBRX).
  const bool llama = experts > 0 || kv != heads || contains(notes, "llama") || contains(notes, "swiglu") ||
                     contains(notes, "rmsnorm") || contains(notes, "mistral") || contains(notes, "qwen") || (ffn && ffn != 4 * hidden);
  models::ModelSpec spec;
  spec.family = llama ? models::Family::llama : models::Family::gpt;
  spec.layers = layers;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.kv_heads = kv;
  spec.ffn_hidden = ffn;
  spec.seq_len = get("seq_len") ? get("seq_len") : 2048;
  spec.vocab = get("vocab");
  if (!spec.vocab) {
    spec.vocab = llama ? 32000 : 51200;
    assumptions.push_back(fmt::format("vocabulary not stated: {} assumed", spec.vocab));
  }
  if (!get("seq_len")) assumptions.push_back("sequence length not stated: 2048 assumed");
  if (llama) {
    spec.norm = models::Norm::rmsnorm;
    spec.activation = models::Activation::swiglu;
    spec.position = models::PositionEmbedding::rotary;
    spec.tied_embeddings = false;
    spec.bias = false;
  } else {
    spec.norm = models::Norm::layernorm;
    spec.activation = models::Activation::gelu;
    spec.position = models::PositionEmbedding::learned;
  }
  spec.dropout = false;
  if (experts > 0) {
    // Every block a MoE block of `experts` routed experts, each the stated FFN's width (the
    // published shapes give one FFN width: Mixtral's config states the expert's).
    spec.num_experts = experts;
    spec.experts_per_token = top_k ? top_k : 2;
    if (!top_k) assumptions.push_back("experts per token not stated: top 2 (Mixtral, DBRX 4, DeepSeek / Qwen3 8) assumed");
    if (moe.shared) {
      spec.shared_expert_ffn_hidden = ffn;
      assumptions.push_back("shared expert: one, of the routed experts' width");
    }
  }
  spec.name = fmt::format("{}-l{}-h{}-a{}{}{}", llama ? "llama-shape" : "gpt-shape", layers, hidden, heads,
                          kv != heads ? fmt::format("-kv{}", kv) : "",
                          experts > 0 ? fmt::format("-e{}k{}", spec.num_experts, spec.experts_per_token) : "");
  spec.display_name = spec.name;
  spec.source = "built from the published shape";
  assumptions.push_back(fmt::format("no catalog model has this shape: built as a {} decoder ({}, {}, {}{}{})",
                                    llama ? "Llama-style" : "GPT-style", models::norm_name(spec.norm),
                                    models::activation_name(spec.activation), models::position_name(spec.position),
                                    spec.tied_embeddings ? ", tied embeddings" : "",
                                    experts > 0 ? fmt::format(", {} experts top {}", spec.num_experts, spec.experts_per_token) : ""));
  // A stated parameter count the built model misses by far says the shape is not what was
  // trained (most often a mixture of experts stated as its dense attention shape): scoring it
  // would compare another model.
  if (const auto params_b = num(m, "params_b"); params_b && *params_b > 0) {
    const double built = models::build_graph(spec).total_params() / 1e9;
    if (std::fabs(built - *params_b) > 0.3 * *params_b) {
      reason = fmt::format("the stated shape builds a {:.3g}B-parameter {} model where the point states {:.3g}B{}", built,
                           experts > 0 ? "mixture-of-experts" : "dense", *params_b,
                           experts > 0 ? "" : " (a mixture of experts? state model.num_experts and experts_per_token)");
      return std::nullopt;
    }
  }
  return spec;
}

// The measured step time of a training point and how it was obtained.
// A TFLOP/s convention a source states once ("F=96Bslh^2(...)" on its Table 1 points) and its
// other points refer to ("as Table 1"): the source titles whose points state the Narayanan et
// al. formula.
using FormulaSources = std::set<std::string>;
FormulaSources sources_stating_96bslh(const std::vector<const Json*>& points) {
  FormulaSources out;
  for (const Json* p : points)
    if (contains(str(member(*p, "metrics"), "tflops_kind"), "96Bslh")) out.insert(str(member(*p, "source"), "title"));
  return out;
}

// FLOPs per sample that recomputation adds (the hardware FLOPs of HFU beyond the model FLOPs):
// the forward of every layer full recomputation re-runs (plan::unit_recompute), or of the ops
// selective recomputation drops and re-runs (none under fused attention, which keeps no scores).
double recompute_flops_per_sample(const models::ModelGraph& g, const plan::Plan& p) {
  double f = 0;
  if (p.recompute == plan::Recompute::full) {
    for (const auto& u : g.units())
      if (plan::unit_recompute(p.recompute, u) == plan::Recompute::full) f += u.flops_fwd;
  } else if (p.recompute == plan::Recompute::selective && p.attention == plan::AttentionImpl::unfused) {
    for (const auto& op : g.ops())
      if (op.dropped_by_selective_recompute) f += op.flops_fwd;
  }
  return f;
}

// The FLOPs a point's TFLOP/s counts: `model` (6N + attention, MFU's numerator), `hardware`
// (model + recomputed, HFU's numerator) or neither when its convention is not stated.
enum class FlopConvention { unknown, model, hardware };
FlopConvention flop_convention(const std::string& kind) {
  // A named formula converts only by that formula (measured_step), with its own l and h.
  if (contains(kind, "96Bslh")) return FlopConvention::unknown;
  const bool hardware = contains(kind, "hardware") || contains(kind, "hfu") || contains(kind, "incl. recompute") ||
                        contains(kind, "including recompute") || contains(kind, "with recompute");
  if (hardware) return FlopConvention::hardware;
  if (contains(kind, "model") || contains(kind, "mfu")) return FlopConvention::model;
  return FlopConvention::unknown;
}

struct StepFlops {
  double model = 0;     // per step, no recomputation
  double hardware = 0;  // per step, with the plan's recomputation
  double dense_peak = 0;  // per GPU: the peak an MFU divides by when the source names none
  Precision precision = Precision::bf16;  // the run's (plan::PlanContext::precision), whose peak that is
};

std::optional<double> measured_step(const Json& point, const plan::Plan& p, int64_t seq, int gpus, const FormulaSources& formula,
                                    const StepFlops& flops, std::string& how) {
  const double model_flops = flops.model;
  const Json& x = member(point, "metrics");
  const Json& m = member(point, "model");
  if (auto t = measured(x, "step_time_s")) {
    how = "step time as published";
    return *t;
  }
  const double tokens = static_cast<double>(p.global_batch) * static_cast<double>(seq);
  if (auto r = measured(x, "tokens_per_s")) {
    how = "global batch tokens / published tokens per second";
    return tokens / *r;
  }
  if (auto r = measured(x, "tokens_per_s_per_gpu")) {
    how = "global batch tokens / (published tokens per second per GPU x GPUs)";
    return tokens / (*r * gpus);
  }
  if (auto r = measured(x, "samples_per_s")) {
    how = "global batch / published samples per second";
    return static_cast<double>(p.global_batch) / *r;
  }
  if (auto tf = measured(x, "tflops_per_gpu")) {
    const std::string kind = str(x, "tflops_kind");
    const auto layers = whole(m, "layers", 1, limits::kMaxLayers);
    const auto hidden = whole(m, "hidden", 1, limits::kMaxWidth);
    // "as Table 1": the convention of the source's own Table 1, when that source's points state it.
    const bool same_as_table = contains(kind, "as Table") && formula.count(str(member(point, "source"), "title")) > 0;
    if ((contains(kind, "96Bslh") || same_as_table) && layers && hidden) {
      // Narayanan et al. 2021, eq. 3 (counts the recomputed forward).
      const double B = static_cast<double>(p.global_batch), s = static_cast<double>(seq),
                   l = static_cast<double>(*layers), h = static_cast<double>(*hidden),
                   V = static_cast<double>(whole(m, "vocab", 1, limits::kMaxVocab).value_or(51200));
      const double F = 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
      how = same_as_table ? "published TFLOP/s per GPU (\"as Table 1\") converted with the source's F = 96Bslh^2(1 + s/6h + V/16lh)"
                          : "published TFLOP/s per GPU converted with the source's F = 96Bslh^2(1 + s/6h + V/16lh)";
      return F / (*tf * 1e12 * gpus);
    }
    // Model FLOPs (MFU's numerator: forward + backward of every matmul and the attention, no
    // recomputation): the model graph's training FLOPs of the step.
    const FlopConvention convention = flop_convention(kind);
    if (convention == FlopConvention::model && model_flops > 0) {
      how = fmt::format("published model TFLOP/s per GPU (\"{}\") converted with the model's training FLOPs per step (6N + attention, "
                        "no recomputation)", kind);
      return model_flops / (*tf * 1e12 * gpus);
    }
    // Hardware FLOPs (HFU's numerator): the model's plus what the plan's recomputation re-runs.
    if (convention == FlopConvention::hardware && flops.hardware > 0) {
      how = fmt::format("published hardware TFLOP/s per GPU (\"{}\") converted with the model's training FLOPs per step plus the "
                        "{} recomputation's forward FLOPs", kind, plan::recompute_name(p.recompute));
      return flops.hardware / (*tf * 1e12 * gpus);
    }
  }
  // MFU / HFU with the peak the source divided by; without one, the GPU's dense tensor peak in
  // the run's precision (the datasheet figure NVIDIA's tables quote MFU against: 989 TFLOP/s
  // for bf16, 1979 for FP8 on H100), said in `how`.
  const auto mfu = measured(x, "mfu");
  const auto hfu = measured(x, "hfu");
  const auto stated_peak = measured(member(point, "hardware"), "peak_tflops_used_for_mfu");
  const double peak = stated_peak ? *stated_peak : flops.dense_peak / 1e12;
  const std::string peak_text = stated_peak ? fmt::format("the source's peak {:g} TFLOP/s", peak)
                                            : fmt::format("the GPU's dense {} peak {:g} TFLOP/s (the source names none)",
                                                          precision_name(flops.precision), peak);
  if (mfu && peak > 0 && *mfu <= 1 && model_flops > 0) {
    how = fmt::format("published MFU {:g} x {}, converted with the model's training FLOPs per step", *mfu, peak_text);
    return model_flops / (*mfu * peak * 1e12 * gpus);
  }
  if (hfu && peak > 0 && *hfu <= 1 && flops.hardware > 0) {
    how = fmt::format("published HFU {:g} x {}, converted with the model's training FLOPs per step plus the {} recomputation's forward "
                      "FLOPs", *hfu, peak_text, plan::recompute_name(p.recompute));
    return flops.hardware / (*hfu * peak * 1e12 * gpus);
  }
  return std::nullopt;
}

// Attention: fused (flash) where the source says so or from 2023 on (FlashAttention-2, cuDNN
// fused attention and PyTorch SDPA are the defaults of every framework since); the score matrix
// in memory before (Megatron-LM 2020-2021). A fused kernel before 2023, or an ALiBi model before
// 2024, ran a FlashAttention-1-class kernel: FlashAttention-2 appeared in July 2023 and took
// ALiBi only in flash-attn 2.4 (ALiBi models such as MPT ran the Triton port of
// FlashAttention-1, llm-foundry's attn_impl "triton").
void map_attention(const Json& point, const std::string& arch, plan::Plan& p, ValidationPoint& vp) {
  const int year = published_year(point).value_or(0);
  if (contains(arch, "flash") && ((year > 0 && year < 2023) || (contains(arch, "alibi") && year > 0 && year < 2024))) {
    p.attention = plan::AttentionImpl::flash1;
    vp.assumptions.push_back(fmt::format(
        "flash attention in {}{}: a FlashAttention-1-class kernel (FlashAttention-2 from July 2023; ALiBi in flash-attn "
        "only from 2.4)",
        year, contains(arch, "alibi") ? " with ALiBi" : ""));
  } else if (contains(arch, "flash")) {
    p.attention = plan::AttentionImpl::flash;
  } else if (year >= 2023) {
    p.attention = plan::AttentionImpl::flash;
    vp.assumptions.push_back("attention implementation not stated: fused (flash), the default since 2023");
  } else {
    p.attention = plan::AttentionImpl::unfused;
    vp.assumptions.push_back("attention implementation not stated: unfused (scores in memory), as Megatron-LM before 2022");
  }
}

// A plan on the software stack (catalog key "software") of a point's framework (vp.framework),
// listed among its assumptions: PyTorch FSDP (llm-foundry, torchtitan, any run stating an FSDP
// sharding strategy), Megatron-LM, NeMo (Megatron-core), DeepSpeed, JAX / MaxText / Pax;
// SageMaker, Horovod and DDP runs are PyTorch eager. DeepSpeed
// runs published in 2021 or before ran ZeRO-3 with a device sync before each tensor's gather
// (deepspeed-2021; DeepSpeed PR #1188 of June 2021 coalesced them); later ones on the current stack.
plan::Plan plan_on_stack(ValidationPoint& vp, const Json& point) {
  plan::Plan p;
  static const std::pair<const char*, const char*> kStacks[] = {
      {"NeMo (Megatron-core)", "megatron-core"}, {"PyTorch FSDP (llm-foundry)", "pytorch-fsdp"}, {"DeepSpeed", "deepspeed"},
      {"Megatron-LM", "megatron-lm"},           {"JAX", "jax-xla"},                           {"SageMaker", "pytorch-eager"},
      {"PyTorch FSDP", "pytorch-fsdp"}};
  for (const auto& [framework, stack] : kStacks)
    if (vp.framework == framework) p.software = stack;
  const std::optional<int> year = published_year(point);
  if (p.software == "deepspeed" && year && *year <= 2021) p.software = "deepspeed-2021";
  const std::string text = vp.source + " " + vp.locator;
  if (p.software.empty() && (contains(text, "Horovod") || contains(text, "DDP") || contains(text, "DistributedDataParallel")))
    p.software = "pytorch-eager";
  vp.assumptions.push_back(p.software.empty() ? fmt::format("software stack not identified: {} (the default)", hw::kDefaultSoftware)
                          : p.software == "deepspeed-2021"
                              ? fmt::format("software stack {} ({} published in {}: ZeRO-3 gathers one tensor at a time after a "
                                            "device sync, as before DeepSpeed PR #1188)", p.software, vp.framework, *year)
                              : fmt::format("software stack {} ({})", p.software, vp.framework));
  return p;
}

// The precision a point's data-parallel gradients are reduced in. A Composer FSDP mixed
// precision mode stated beside the precision ("amp_bf16 (mixed-precision mode PURE)") sets it:
// PURE reduces in the autocast precision, DEFAULT and FULL in fp32 (composer_fsdp_mixed_precision
// in the catalog's sources). Otherwise the stack's default (hw::SoftwareStack::grad_reduce);
// a reduction wider than the training precision is listed among the assumptions.
void map_grad_reduce(const std::string& precision_text, plan::Plan& p, const plan::PlanContext& ctx, ValidationPoint& vp) {
  const Precision training = p.precision_or(ctx.precision);
  if (contains(precision_text, "mixed-precision mode") || contains(precision_text, "mp mode")) {
    if (contains(precision_text, "pure")) p.grad_reduce = training == Precision::fp8 ? Precision::bf16 : training;
    else if (contains(precision_text, "default") || contains(precision_text, "full")) p.grad_reduce = Precision::fp32;
  }
  const Precision reduce = plan::grad_reduce_precision(p, ctx);
  if (bytes_per_element(reduce) == bytes_per_element(training)) return;
  vp.assumptions.push_back(
      p.grad_reduce ? fmt::format("gradients reduced in {} (the stated Composer FSDP mixed precision mode: DEFAULT and FULL reduce in "
                                  "fp32, PURE in the training precision)",
                                  precision_name(reduce))
                    : fmt::format("gradients reduced in {}, {} bytes each ({}'s default under {} training)", precision_name(reduce),
                                  bytes_per_element(reduce), ctx.software.name, precision_name(training)));
}

// Megatron-core builds pp*vp model chunks of num_layers / (pp*vp) layers each and refuses a
// layer count they do not divide, unless the embedding and the loss count as layers
// (account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split: NeMo's and
// NVIDIA's Llama 3.1 405B recipes set both), when (num_layers + 2) must be a multiple. A
// published Megatron run whose layers the chunks do not divide but layers + 2 do ran that
// split (the 30-layer 405B proxy on pp 4 x vp 8: embedding alone, one layer per chunk, the
// output layer and loss alone); the plan gets it as explicit stages.
void map_megatron_split(plan::Plan& p, const plan::PlanContext& ctx, ValidationPoint& vp) {
  const int chunks = p.pp * p.vp;
  const int blocks = ctx.graph.num_blocks();
  const int units = static_cast<int>(ctx.graph.units().size());
  if (chunks < 2 || !contains(vp.framework, "Megatron") || units != blocks + 2) return;
  if (blocks % chunks == 0 || units % chunks != 0) return;
  p.stages = plan::even_stages_counting_ends(units, chunks);
  const int per_chunk = units / chunks;
  vp.setup += " emb+loss-split";
  vp.assumptions.push_back(fmt::format(
      "{} layers on pp*vp = {} chunks: Megatron-core's split that counts the embedding and the loss as layers "
      "(account_for_embedding/loss_in_pipeline_split, the only split Megatron-core runs this with): {} units per chunk, the "
      "first chunk the embedding and {} layer(s), the last {} layer(s) and the output layer and loss",
      blocks, chunks, per_chunk, per_chunk - 1, per_chunk - 1));
}

// A mapped training point's predictions: peak memory (plan::peak_memory, with the loss buffer of
// the framework the source names) and the simulated step time, plus the analytical one when the
// caller supplies it.
// The memory model's options for the framework a point ran: llm-foundry's MPT loss defaults to
// flash-attn's fused CrossEntropyLoss (loss_fn "fused_crossentropy"): it reads the 16-bit logits
// and writes a 16-bit gradient, no fp32 copy.
plan::MemoryOptions memory_options_of(const ValidationPoint& vp) {
  plan::MemoryOptions o;
  if (contains(vp.framework, "llm-foundry")) o.loss_bytes_per_logit = 2.0;
  return o;
}

void predict_training(const plan::Plan& p, const plan::PlanContext& ctx, const ValidationOptions& options, int gpus,
                      ValidationPoint& vp) {
  if (contains(vp.framework, "llm-foundry"))
    vp.assumptions.push_back("loss: llm-foundry's default fused cross-entropy (flash-attn) on the 16-bit logits, no fp32 copy");
  const plan::MemoryBreakdown mem = plan::peak_memory(p, ctx, memory_options_of(vp));
  vp.fits_memory = mem.fits();
  vp.peak_memory_bytes = mem.total_bytes();
  vp.memory_capacity_bytes = mem.capacity_bytes;
  vp.gpus_per_node = ctx.instance->gpu_count;
  vp.num_gpus = gpus;
  vp.gpu = ctx.gpu->name;
  // The plan's one prediction: what the planner ranks by and `trainplan simulate` prints above
  // 64 GPUs (layer granularity, one rank per symmetry class, no memory events).
  sim::PlanSimOptions so;
  so.sim.calibration = options.calibration;
  if (options.calibrate) options.calibrate(*ctx.gpu, so.sim);
  so.sim.record_timeline = false;
  so.memory_events = false;
  so.granularity = plan::Granularity::layer;
  so.fidelity = sim::Fidelity::symmetric;
  const auto sim = sim::simulate_plan(p, ctx, so);
  vp.predicted = sim.step.step_time_s;
  vp.error = vp.predicted / vp.measured - 1.0;
  if (options.analytical_step_s) {
    vp.predicted_analytical = options.analytical_step_s(p, ctx);
    vp.error_analytical = vp.predicted_analytical / vp.measured - 1.0;
  }
  const double model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  vp.model_tflops_measured = model_flops / (vp.measured * gpus) / 1e12;
  vp.model_tflops_predicted = model_flops / (vp.predicted * gpus) / 1e12;
}

// The point's parallel layout and batch on `gpus` GPUs, into `p`; false (with vp.reason) when
// they cannot be read. A published dp counts replicas without cp (Megatron's data-parallel
// size); one that counts cp ranks too (tp·pp·dp = GPUs) is divided by cp, listed. The global
// batch is the stated one, else global_batch_tokens / seq, else micro-batch x dp x the stated
// gradient accumulation, each listed.
bool map_layout_and_batch(const Json& q, const Json& m, int gpus, plan::Plan& p, ValidationPoint& vp) {
  p.tp = static_cast<int>(whole(q, "tp", 1, limits::kMaxGpus).value_or(1));
  p.pp = static_cast<int>(whole(q, "pp", 1, limits::kMaxGpus).value_or(1));
  p.cp = static_cast<int>(whole(q, "cp", 1, limits::kMaxGpus).value_or(1));
  const int64_t model_parallel = checked::multiply(checked::multiply(p.tp, p.pp, limits::kMaxGpus, "tp*pp"), p.cp, limits::kMaxGpus, "tp*pp*cp");
  if (!num(q, "tp") || !num(q, "pp")) vp.assumptions.push_back("unstated tp/pp taken as 1");
  if (const auto dp = whole(q, "dp", 1, limits::kMaxGpus)) {
    p.dp = static_cast<int>(*dp);
    if (p.cp > 1 && model_parallel * *dp != gpus && p.tp * p.pp * *dp == gpus && *dp % p.cp == 0) {
      p.dp = static_cast<int>(*dp / p.cp);
      vp.assumptions.push_back(fmt::format("the published dp {} counts the cp ranks (tp·pp·dp = {} GPUs): {} replicas of cp {}", *dp,
                                           gpus, p.dp, p.cp));
    }
  } else if (gpus % model_parallel != 0) {
    vp.reason = fmt::format("{} GPUs is not a multiple of tp·pp·cp = {}", gpus, model_parallel);
    return false;
  } else {
    p.dp = static_cast<int>(gpus / model_parallel);
  }
  const auto mb = whole(q, "micro_batch", 1, limits::kMaxBatch);
  p.micro_batch = mb.value_or(1);
  if (!mb) vp.assumptions.push_back("micro-batch size not given: 1 assumed");
  if (const auto gb = whole(q, "global_batch", 1, limits::kMaxBatch)) {
    p.global_batch = *gb;
    return true;
  }
  const auto seq = whole(m, "seq_len", 1, limits::kMaxSeqLen);
  const auto tokens = whole(q, "global_batch_tokens", 1, limits::kMaxBatch * limits::kMaxSeqLen);
  const auto accum = whole(q, "other_grad_accum", 1, limits::kMaxBatch);
  if (tokens && seq && *tokens % *seq == 0) {
    p.global_batch = *tokens / *seq;
    vp.assumptions.push_back(fmt::format("global batch from the stated {} tokens per step / sequence {}: {}", *tokens, *seq, p.global_batch));
  } else if (mb && accum) {
    p.global_batch = checked::multiply(checked::multiply(*mb, p.dp, limits::kMaxBatch, "micro_batch*dp"), *accum, limits::kMaxBatch,
                                       "micro_batch*dp*grad_accum");
    vp.assumptions.push_back(fmt::format("global batch from micro-batch {} x dp {} x gradient accumulation {}: {}", *mb, p.dp, *accum,
                                         p.global_batch));
  } else {
    vp.reason = "the global batch is not given";
    return false;
  }
  return true;
}

// Megatron-LM before 2021 had no gradient accumulation: `--batch-size` was each data-parallel
// rank's batch, run in one pass (micro-batches and --global-batch-size came with its pipeline
// schedules, Megatron-LM 2.0). A point of that era without a micro-batch runs gb / dp at once.
void megatron_batch_in_one_pass(const Json& point, plan::Plan& p, ValidationPoint& vp) {
  const auto year = published_year(point);
  if (vp.framework != "Megatron-LM" || !year || *year >= 2021 || p.global_batch % p.dp != 0) return;
  p.micro_batch = p.global_batch / p.dp;
  for (auto& a : vp.assumptions)
    if (a == "micro-batch size not given: 1 assumed")
      a = fmt::format("micro-batch size not given: Megatron-LM before 2021 ran each data-parallel rank's batch in one pass, "
                      "global batch / dp = {}", p.micro_batch);
}

// Recomputation the point does not state: none when the plan fits the GPU, else the least that
// does (selective, then full): the published run ran, so it fit. Selective recomputation came
// in 2022 (Korthikanti et al., arXiv 2205.05198, Megatron-LM 3.0): before, a run recomputed
// whole layers (activation checkpointing) or nothing.
void recompute_that_fits(const Json& point, plan::Plan& p, const plan::PlanContext& ctx, ValidationPoint& vp) {
  const plan::MemoryOptions o = memory_options_of(vp);
  p.recompute = plan::Recompute::none;
  const plan::MemoryBreakdown none = plan::peak_memory(p, ctx, o);
  if (none.fits()) {
    vp.assumptions.push_back("recomputation not stated: none assumed (the plan fits without it)");
    return;
  }
  const auto year = published_year(point);
  for (plan::Recompute r : {plan::Recompute::selective, plan::Recompute::full}) {
    if (r == plan::Recompute::selective && year && *year < 2022) continue;
    p.recompute = r;
    if (plan::peak_memory(p, ctx, o).fits()) {
      vp.assumptions.push_back(fmt::format("recomputation not stated: {}, the least that fits (without it {} of {} per GPU)",
                                           plan::recompute_name(r), units::format_bytes(none.total_bytes()),
                                           units::format_bytes(none.capacity_bytes)));
      return;
    }
  }
  p.recompute = plan::Recompute::none;
  vp.assumptions.push_back("recomputation not stated: none assumed (no recomputation makes the plan fit)");
}

// The recomputation a point states: a kind ("selective"; "full", "block", "uniform"), a no in
// any form (false, "none", "off", "disabled") or a yes without a kind (true, "enabled",
// "activation checkpointing", "partitioned activation checkpointing"): full, what a framework's
// plain activation-checkpointing switch recomputes (every layer's forward; Megatron-LM's
// --checkpoint-activations, Hugging Face's gradient_checkpointing, DeepSpeed's
// activation_checkpointing). nullopt when not stated or not understood (recompute_that_fits).
std::optional<plan::Recompute> stated_recompute(const Json& q, ValidationPoint& vp) {
  const Json& v = member(q, "activation_recompute");
  const std::string text = v.is_boolean() ? (v.get<bool>() ? "true" : "false") : str(q, "activation_recompute");
  if (text.empty()) return std::nullopt;
  const std::vector<std::string> t = tokens(text);
  if (has_token(t, "selective")) return plan::Recompute::selective;
  if (has_token(t, "full") || has_token(t, "block") || has_token(t, "uniform")) return plan::Recompute::full;
  for (const char* no : {"none", "no", "off", "false", "disabled", "0", "without"})
    if (has_token(t, no)) return plan::Recompute::none;
  for (const char* yes : {"true", "yes", "on", "enabled", "1"})
    if (has_token(t, yes)) {
      vp.assumptions.push_back(fmt::format("activation recomputation \"{}\" names no kind: full (every layer's forward)", text));
      return plan::Recompute::full;
    }
  if (has_token_prefix(t, "checkpoint") || has_token_prefix(t, "recomput")) {
    vp.assumptions.push_back(fmt::format("activation recomputation \"{}\" names no kind: full (every layer's forward)", text));
    return plan::Recompute::full;
  }
  vp.assumptions.push_back(fmt::format("activation recomputation \"{}\" not understood: treated as not stated", text));
  return std::nullopt;
}

// The kinds scored as a training step: a throughput table's point; a fine-tuning run (a
// training step over every parameter; parameter-efficient fine-tuning is refused in
// map_training); a whole run or an MLPerf result that states a per-step throughput (its
// average over the run).
bool is_training_kind(std::string_view kind) {
  return kind == "training_throughput" || kind == "finetuning_throughput" || kind == "full_training_run" || kind == "mlperf";
}

// Why a point of a training kind is not one training step of the model as built: a
// parameter-efficient fine-tuning (LoRA, adapters, frozen layers) trains a sliver of the
// weights; "" when none. A whole run's average throughput is listed as an assumption.
std::string not_a_full_step(const Json& point, ValidationPoint& vp) {
  if (vp.kind == "training_throughput") return "";
  std::string text = str(point, "kind") + " " + str(member(point, "model"), "name") + " " + str(member(point, "model"), "arch_notes") + " " +
                     str(member(point, "parallelism"), "notes") + " " + str(point, "method");
  if (const Json& n = member(point, "notes"); n.is_array())
    for (const auto& x : n)
      if (x.is_string()) text += " " + x.get<std::string>().substr(0, 1000);
  const std::vector<std::string> t = tokens(text);
  for (const char* peft : {"lora", "qlora", "peft", "adapter", "adapters", "frozen", "freeze", "prefix", "ia3"})
    if (has_token(t, peft))
      return fmt::format("parameter-efficient fine-tuning (\"{}\"): trainplan models training every parameter", peft);
  if (vp.kind == "finetuning_throughput")
    vp.assumptions.push_back("fine-tuning: a training step over every parameter (no LoRA, adapter or frozen layers stated)");
  else
    vp.assumptions.push_back(fmt::format("{}: the run's average throughput, which also holds the evaluation, checkpoint and restart "
                                         "stalls a step prediction leaves out",
                                         vp.kind == "mlperf" ? "an MLPerf result" : "a whole training run"));
  return "";
}

// The point's model, with the sequence length its batch implies when it states none: tokens
// per step / global batch (both stated, dividing evenly), listed.
Json model_with_implied_seq(const Json& model, const Json& q, ValidationPoint& vp) {
  Json m = model;
  if (!m.is_object() || whole(m, "seq_len", 1, limits::kMaxSeqLen)) return m;
  const auto tokens = whole(q, "global_batch_tokens", 1, limits::kMaxBatch * limits::kMaxSeqLen);
  const auto gb = whole(q, "global_batch", 1, limits::kMaxBatch);
  if (!tokens || !gb || *tokens % *gb != 0 || *tokens / *gb > limits::kMaxSeqLen) return m;
  m["seq_len"] = *tokens / *gb;
  vp.assumptions.push_back(fmt::format("sequence length not stated: {} tokens per step / global batch {} = {}", *tokens, *gb, *tokens / *gb));
  return m;
}

void map_training(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, const FormulaSources& formula,
                  ValidationPoint& vp) {
  if (std::string why = not_a_full_step(point, vp); !why.empty()) {
    vp.reason = why;
    return;
  }
  const Json& q = member(point, "parallelism");
  const Json m = model_with_implied_seq(member(point, "model"), q, vp);
  const Json& hwj = member(point, "hardware");
  int gpus = static_cast<int>(whole(hwj, "num_gpus", 1, limits::kMaxGpus).value_or(0));
  if (gpus <= 0) {
    // Not stated: the stated layout's product, when it states dp.
    const auto dp = whole(q, "dp", 1, limits::kMaxGpus);
    if (!dp) {
      vp.reason = "the number of GPUs is not given";
      return;
    }
    int64_t n = *dp;
    for (const char* k : {"tp", "pp", "cp"}) n = checked::multiply(n, whole(q, k, 1, limits::kMaxGpus).value_or(1), limits::kMaxGpus, "tp*pp*cp*dp");
    gpus = static_cast<int>(n);
    vp.assumptions.push_back(fmt::format("number of GPUs not stated: tp·pp·cp·dp = {}", gpus));
  }
  const std::optional<models::ModelSpec> spec = map_model(m, vp.assumptions, vp.reason);
  if (!spec) return;
  // Expert parallelism (Megatron-core's expert_model_parallel_size) splits a MoE model's experts.
  const int ep = static_cast<int>(whole(q, "ep", 1, limits::kMaxGpus).value_or(1));
  if (ep > 1 && !spec->is_moe()) {
    vp.reason = "expert parallelism, but no catalog mixture-of-experts model has the point's shape and experts";
    return;
  }
  const std::string model = spec->name;
  std::string cluster = map_cluster(hwj, catalog, gpus, vp.assumptions, vp.reason);
  if (cluster.empty()) return;
  std::optional<hw::Catalog> local;
  const hw::Catalog* cat = node_catalog(hwj, catalog, cluster, gpus, local, vp.assumptions, vp.reason);
  if (!cat) return;
  const auto& inst = cat->instance(cluster);
  plan::Plan p = plan_on_stack(vp, point);
  p.model = model;
  p.instance_type = cluster;
  p.instance_count = gpus / inst.gpu_count;
  if (!map_layout_and_batch(q, m, gpus, p, vp)) return;
  p.seq_len = whole(m, "seq_len", 1, limits::kMaxSeqLen).value_or(0);
  const std::string fsdp = str(q, "fsdp");
  p.ep = ep;
  if (ep > 1 && !fsdp.empty()) {
    // ZeRO-3 with expert parallelism is not modelled (plan::validate refuses it).
    p.zero_stage = 1;
    vp.assumptions.push_back(fmt::format("FSDP ({}) with ep = {}: modelled as ZeRO-1, without FSDP's parameter all-gathers", fsdp, ep));
  } else if (contains(fsdp, "HYBRID_SHARD")) {
    // Sharded within a node, replicated across nodes (the replicas all-reduce the gradient
    // shards): modelled as the sharding over every data-parallel rank, whose gathers cross
    // the network too, so its communication is an upper bound.
    p.zero_stage = contains(fsdp, "ZERO2") ? 2 : 3;
    vp.assumptions.push_back(fmt::format("FSDP {} (sharded within a node, replicated across): modelled as ZeRO-{} over all {} data-parallel "
                                         "ranks, its gathers crossing nodes (communication an upper bound)", fsdp, p.zero_stage, p.dp));
  } else if (contains(fsdp, "FULL_SHARD")) p.zero_stage = 3;
  else if (contains(fsdp, "SHARD_GRAD_OP")) p.zero_stage = 2;
  else if (auto z = whole(q, "zero_stage", 0, 3)) p.zero_stage = static_cast<int>(*z);
  else if (contains(str(member(point, "source"), "title"), "NeMo") && p.dp * p.cp > 1) {
    // NeMo's Megatron-core recipes shard the optimizer state over the data-parallel ranks
    // (use_distributed_optimizer): ZeRO-1.
    p.zero_stage = 1;
    vp.assumptions.push_back("optimizer sharding not stated: ZeRO-1 (NeMo's distributed optimizer)");
  }
  if (!whole(q, "micro_batch", 1, limits::kMaxBatch)) megatron_batch_in_one_pass(point, p, vp);
  const std::optional<plan::Recompute> rc = stated_recompute(q, vp);
  p.recompute = rc.value_or(plan::Recompute::none);
  if (member(q, "sequence_parallel").is_boolean()) {
    p.sequence_parallel = member(q, "sequence_parallel").get<bool>() && p.tp > 1;
  } else if (p.tp > 1 && contains(str(member(point, "source"), "title"), "NeMo")) {
    p.sequence_parallel = true;
    vp.assumptions.push_back("sequence parallelism not stated: on (NeMo's default with tp > 1)");
  }
  if (auto v = whole(q, "vp_interleave", 1, limits::kMaxLayers); v && *v > 1) {
    p.vp = static_cast<int>(*v);
    p.schedule = plan::Schedule::interleaved_1f1b;
  }
  map_attention(point, str(m, "arch_notes"), p, vp);
  const std::string prec = to_lower(str(point, "precision"));
  if (contains(prec, "fp8")) {
    p.precision = Precision::fp8;
    // The recipe is not stated: TE's delayed scaling with a 1024-step history (both tools'
    // defaults); NeMo's FP8 precision recipe (bf16_with_fp8_mixed) also keeps FP8 parameters
    // (fp8_param_gather = True).
    p.fp8 = plan::Fp8Options{};
    if (contains(str(member(point, "source"), "title"), "NeMo")) {
      p.fp8.fp8_params = true;
      vp.assumptions.push_back("FP8 recipe not stated: delayed scaling, amax history 1024, FP8 parameters (NeMo's bf16_with_fp8_mixed)");
    } else {
      vp.assumptions.push_back("FP8 recipe not stated: delayed scaling, amax history 1024 (Transformer Engine's default)");
    }
  } else if (contains(prec, "bf16") || contains(prec, "bfloat16")) p.precision = Precision::bf16;
  else if (contains(prec, "fp16") || contains(prec, "float16") || contains(prec, "amp") || contains(prec, "mixed")) {
    // Automatic mixed precision without a type is fp16 (torch.cuda.amp's and Apex's default).
    p.precision = Precision::fp16;
    if (!contains(prec, "16")) vp.assumptions.push_back(fmt::format("precision \"{}\": fp16 mixed precision (AMP's default)", prec));
  } else if (contains(prec, "tf32")) p.precision = Precision::tf32;
  else if (contains(prec, "fp32") || contains(prec, "float32")) p.precision = Precision::fp32;
  vp.cluster = fmt::format("{} x {}", p.instance_count, cluster);
  plan::PlanContext ctx = [&] {
    try {
      return plan::resolve(p, *cat, *spec, vp.id);
    } catch (const Error& e) {
      vp.reason = fmt::format("cannot build the plan: {}", e.what());
      throw;
    }
  }();
  if (p.seq_len == 0 && std::none_of(vp.assumptions.begin(), vp.assumptions.end(), [](const std::string& a) {
        return a.rfind("sequence length not stated", 0) == 0;
      }))
    vp.assumptions.push_back(fmt::format("sequence length not stated: {}, the catalog model's", ctx.seq_len));
  map_megatron_split(p, ctx, vp);
  map_grad_reduce(prec, p, ctx, vp);
  if (auto problem = plan::check(p, ctx)) {
    vp.reason = fmt::format("the published configuration is not a valid plan here: {}", *problem);
    return;
  }
  if (!rc) recompute_that_fits(point, p, ctx, vp);
  // (map_megatron_split has noted its split in vp.setup: it goes after the layout.)
  vp.setup = fmt::format("{} seq {} gb {} mb {} tp{} pp{}{}{}{} dp{} zero{} {}{} {} {}", model, ctx.seq_len, p.global_batch,
                         p.micro_batch, p.tp, p.pp, p.vp > 1 ? fmt::format(" vp{}", p.vp) : "",
                         p.cp > 1 ? fmt::format(" cp{}", p.cp) : "", p.ep > 1 ? fmt::format(" ep{}", p.ep) : "", p.dp, p.zero_stage,
                         plan::recompute_name(p.recompute), p.sequence_parallel ? " sp" : "",
                         p.precision ? precision_name(*p.precision) : "", plan::attention_impl_name(p.attention)) +
             vp.setup;
  std::string how;
  const double samples = static_cast<double>(p.global_batch);
  const StepFlops flops{ctx.graph.training_flops_per_sample() * samples,
                        (ctx.graph.training_flops_per_sample() + recompute_flops_per_sample(ctx.graph, p)) * samples,
                        ctx.gpu->peak_flops_per_s(ctx.precision), ctx.precision};
  auto measured = measured_step(point, p, ctx.seq_len, gpus, formula, flops, how);
  if (!measured) {
    vp.reason = "no step time, tokens/s, samples/s, MFU, HFU, or TFLOP/s with its FLOP convention (metrics.tflops_kind: model or "
                "hardware) is given";
    return;
  }
  vp.mapped = true;
  vp.metric = "step_time_s";
  vp.measured = *measured;
  vp.measured_from = how;
  predict_training(p, ctx, options, gpus, vp);
}

void map_collective(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, ValidationPoint& vp) {
  const Json& other = member(member(point, "metrics"), "other");
  const std::string coll = str(other, "collective");
  plan::CollectiveKind kind;
  double factor_num = 2.0;  // busbw = algbw * factor_num * (n - 1) / n
  if (coll == "all_reduce") kind = plan::CollectiveKind::all_reduce;
  else if (coll == "all_gather") kind = plan::CollectiveKind::all_gather, factor_num = 1.0;
  else if (coll == "reduce_scatter") kind = plan::CollectiveKind::reduce_scatter, factor_num = 1.0;
  else {
    vp.reason = fmt::format("collective \"{}\" is not modelled", coll);
    return;
  }
  const auto size = measured(other, "message_bytes");
  if (!size) {
    vp.reason = "the message size is not given";
    return;
  }
  const int n = static_cast<int>(whole(member(point, "hardware"), "num_gpus", 1, limits::kMaxGpus).value_or(0));
  if (n < 2) {
    vp.reason = "fewer than 2 GPUs";
    return;
  }
  std::string cluster = map_cluster(member(point, "hardware"), catalog, n, vp.assumptions, vp.reason);
  if (cluster.empty()) return;
  const double factor = factor_num * (n - 1.0) / n;
  double measured_busbw = 0;
  if (auto b = measured(other, "busbw_GBps")) {
    measured_busbw = *b;
    vp.measured_from = "busbw as published";
  } else if (auto a = measured(other, "algbw_GBps")) {
    measured_busbw = *a * factor;
    vp.measured_from = "published algbw x the nccl-tests bus factor";
  } else {
    vp.reason = "neither busbw nor algbw is given";
    return;
  }
  std::optional<hw::Catalog> local;
  const hw::Catalog* cat = node_catalog(member(point, "hardware"), catalog, cluster, n, local, vp.assumptions, vp.reason);
  if (!cat) return;
  const auto& inst = cat->instance(cluster);
  const int count = n / inst.gpu_count;
  hw::Cluster cl = hw::Cluster::build(inst, count, *cat);
  plan::StepProgram prog;
  prog.world_size = n;
  prog.dp = n;
  prog.streams = {"comm"};
  plan::Group g;
  g.id = 0;
  g.purpose = plan::CommPurpose::none;
  for (int r = 0; r < n; ++r) g.ranks.push_back(r);
  prog.groups.push_back(g);
  for (int r = 0; r < n; ++r) {
    plan::RankProgram rp;
    rp.rank = r;
    rp.gpu = r;
    rp.dp_rank = r;
    plan::Task t;
    t.id = 0;
    t.kind = plan::TaskKind::collective;
    t.collective = kind;
    t.group = 0;
    t.bytes = *size;
    t.comm_id = 0;
    t.label = coll;
    rp.tasks.push_back(t);
    prog.ranks.push_back(std::move(rp));
  }
  prog.symmetry_class.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) prog.symmetry_class[static_cast<size_t>(r)] = r;
  sim::SimOptions so;
  so.record_timeline = false;
  so.calibration = options.calibration;
  if (options.calibrate) options.calibrate(cl.gpu_spec(), so);
  const auto res = sim::simulate_step(prog, cl, so);
  vp.cluster = fmt::format("{} x {}", count, cluster);
  vp.gpus_per_node = inst.gpu_count;
  vp.num_gpus = n;
  vp.gpu = inst.gpu;
  vp.setup = fmt::format("{} of {} on {} GPUs", coll, units::format_bytes(*size), n);
  vp.mapped = true;
  vp.metric = "busbw_GBps";
  vp.measured = measured_busbw;
  vp.predicted = *size / res.step_time_s * factor / 1e9;
  vp.error = vp.predicted / vp.measured - 1.0;
}

// ---- Data-parallel libraries: relative speedups and scaling efficiencies ----------------------

// A data-parallel plan of catalog `model` on `gpus` GPUs of `cluster` (part of one node below
// its GPU count), `mb` samples per GPU per step, no gradient accumulation, with `algorithm`.
struct DpRun {
  std::unique_ptr<hw::Catalog> catalog;  // with the part of a node a one-GPU run uses; ctx points into it
  plan::Plan plan;
  plan::PlanContext ctx;
};
DpRun dp_run(const hw::Catalog& catalog, std::string cluster, int gpus, const std::string& model, int64_t seq, int64_t mb,
             plan::DpAlgorithm algorithm, double bucket_bytes, std::optional<Precision> precision = std::nullopt) {
  auto cat = std::make_unique<hw::Catalog>(catalog);
  if (gpus < cat->instance(cluster).gpu_count) cluster = cat->add_partial_instance(cluster, gpus);
  const auto& inst = cat->instance(cluster);
  plan::Plan p;
  p.model = model;
  p.instance_type = cluster;
  p.instance_count = std::max(1, gpus / inst.gpu_count);
  p.dp = gpus;
  p.micro_batch = mb;
  p.global_batch = mb * gpus;
  p.seq_len = seq;
  p.dp_algorithm = algorithm;
  p.bucket_size_bytes = bucket_bytes;
  p.precision = precision;
  p.software = "pytorch-eager";  // the data-parallel libraries' runs: DDP, Horovod, SMDDP (eager kernels)
  plan::PlanContext ctx = plan::resolve(p, *cat, models::ModelCatalog::builtin().spec(model), model);
  if (auto problem = plan::check(p, ctx)) throw Error(*problem);
  return DpRun{std::move(cat), std::move(p), std::move(ctx)};
}

double simulated_step_s(const DpRun& r, const ValidationOptions& options) {
  sim::PlanSimOptions so;
  so.sim = sim::options_for(r.plan);
  so.sim.calibration = options.calibration;
  if (options.calibrate) options.calibrate(*r.ctx.gpu, so.sim);
  so.sim.record_timeline = false;
  so.memory_events = false;
  so.granularity = plan::Granularity::layer;
  so.fidelity = sim::Fidelity::symmetric;
  return sim::simulate_plan(r.plan, r.ctx, so).step.step_time_s;
}

// The catalog model a source's workload key names ("bert", "resnet101"), or "" when none is.
std::string catalog_model_of(const std::string& key) {
  if (key == "bert") return "bert-large";
  if (key == "resnet101") return "resnet-101";
  if (key == "resnet50") return "resnet-50";
  return "";
}

// The GPU count and catalog cluster of a library point; 0 GPUs (with vp.reason) when none fits.
int library_cluster(const Json& point, const hw::Catalog& catalog, ValidationPoint& vp, std::string& cluster) {
  const int gpus = static_cast<int>(whole(member(point, "hardware"), "num_gpus", 1, limits::kMaxGpus).value_or(0));
  if (gpus < 2) {
    vp.reason = "fewer than 2 GPUs";
    return 0;
  }
  cluster = map_cluster(member(point, "hardware"), catalog, gpus, vp.assumptions, vp.reason);
  return cluster.empty() ? 0 : gpus;
}

// Scores a library point: predicted = step time of `num` / step time of `den` (simulated, and
// analytical when the caller supplies the estimate); the cluster shown is `shown`'s.
void score_ratio(ValidationPoint& vp, const std::string& metric, double measured, const DpRun& num, const DpRun& den,
                 const DpRun& shown, const std::string& cluster, const ValidationOptions& options) {
  vp.mapped = true;
  vp.metric = metric;
  vp.measured = measured;
  vp.predicted = simulated_step_s(num, options) / simulated_step_s(den, options);
  vp.error = vp.predicted / measured - 1.0;
  if (options.analytical_step_s) {
    vp.predicted_analytical = options.analytical_step_s(num.plan, num.ctx) / options.analytical_step_s(den.plan, den.ctx);
    vp.error_analytical = vp.predicted_analytical / measured - 1.0;
  }
  vp.cluster = fmt::format("{} x {}", shown.plan.instance_count, cluster);
  vp.gpu = shown.ctx.gpu->name;
  vp.num_gpus = shown.plan.world_size();
  vp.gpus_per_node = shown.ctx.instance->gpu_count;
}

// NCCL's achieved inter-node throughput on p3dn.24xlarge as a fraction of its 100 Gbps EFA
// line rate, with the aws-ofi-nccl plugin of 2019-2021 (PyTorch 1.6 era). nccl-tests all-reduce
// (forced tree: NCCL_TREE_THRESHOLD=40 GB, so every node's adapter carries about the algbw in
// each direction): ~80 Gb/s on 2 nodes, 50-60 Gb/s on 8 to 32 nodes (NVIDIA/nccl#235,
// maintainer's summary 2019-07-16; aws-ofi-nccl#19: "8 machines throughput is 70% of on-prem
// infiniband, 16 machines is 60%"). The physics: p3dn's EFA has no GPUDirect RDMA, so NCCL's
// proxy thread stages every chunk through host memory and one libfabric endpoint per peer;
// more nodes mean more concurrent flows on the one adapter. 0.80 at 2 nodes, 0.55 (the middle
// of 50-60 Gb/s) from 8 nodes, linear in log2(nodes) between. SMDDP's inter-node path (its own
// EFA transport through the CPUs, Herring, SC20) does not go through aws-ofi-nccl.
constexpr double kNcclEfaP3dnFraction2Nodes = 0.80;
constexpr double kNcclEfaP3dnFraction8Nodes = 0.55;
double nccl_efa_p3dn_fraction(int nodes) {
  if (nodes <= 2) return kNcclEfaP3dnFraction2Nodes;
  if (nodes >= 8) return kNcclEfaP3dnFraction8Nodes;
  const double t = (std::log2(static_cast<double>(nodes)) - 1.0) / 2.0;  // 2 -> 0, 8 -> 1
  return kNcclEfaP3dnFraction2Nodes + t * (kNcclEfaP3dnFraction8Nodes - kNcclEfaP3dnFraction2Nodes);
}

// SMDDP against PyTorch DDP (the SageMaker developer guide's benchmark): the throughput ratio
// SMDDP / DDP = DDP's step time / SMDDP's on the same plan. The guide names the models only:
// BERT is taken as BERT-large at sequence 128 with 64 samples per GPU per step (NVIDIA
// DeepLearningExamples' phase-1 micro-batch on a 32 GB V100), fp16, no gradient accumulation;
// DDP's NCCL ring all-reduce in 25 MB buckets (PyTorch's default), SMDDP with the same buckets.
void map_relative_speedup(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, ValidationPoint& vp) {
  const Json& other = member(member(point, "metrics"), "other");
  const std::string prefix = "smddp_speedup_vs_pytorch_ddp_";
  std::string key, model;
  std::vector<std::string> skipped;
  if (other.is_object())
    for (auto it = other.begin(); it != other.end(); ++it) {
      if (it.key().rfind(prefix, 0) != 0) continue;
      const std::string w = it.key().substr(prefix.size());
      if (model.empty() && !catalog_model_of(w).empty()) key = it.key(), model = catalog_model_of(w);
      else skipped.push_back(w);
    }
  if (model.empty()) {
    vp.reason = skipped.empty() ? "no SMDDP-vs-DDP speedup is given" : fmt::format("no catalog model for {}", join(skipped, ", "));
    return;
  }
  const auto speedup = num(other, key.c_str());
  if (!speedup || !(*speedup > -1)) {
    vp.reason = fmt::format("\"{}\" must be a number above -1", key);
    return;
  }
  std::string cluster;
  const int gpus = library_cluster(point, catalog, vp, cluster);
  if (gpus == 0) return;
  for (const auto& w : skipped) vp.assumptions.push_back(fmt::format("{}: no catalog model, not compared", w));
  vp.assumptions.push_back(fmt::format("{} taken as {} at sequence 128, 64 samples per GPU per step, fp16, no gradient "
                                       "accumulation (NVIDIA DeepLearningExamples' BERT phase-1 micro-batch on a 32 GB V100)",
                                       key.substr(prefix.size()), model));
  vp.assumptions.push_back("PyTorch DDP: NCCL ring all-reduce in 25 MB buckets; SMDDP in the same buckets");
  // DDP's NCCL sees the network NCCL achieved on p3dn then; SMDDP sees the catalog's.
  hw::Catalog ddp_catalog(catalog);
  const int nodes = gpus / std::max(1, catalog.instance(cluster).gpu_count);
  if (cluster == "p3dn.24xlarge" && nodes >= 2) {
    const double f = nccl_efa_p3dn_fraction(nodes);
    ddp_catalog.derate_network(cluster, f, fmt::format("NCCL over aws-ofi-nccl (2019-2021): {:.0f}% of the EFA line rate", 100 * f));
    vp.assumptions.push_back(fmt::format("DDP's NCCL reaches {:.0f} Gb/s of p3dn's 100 Gbps EFA on {} nodes (nccl-tests with aws-ofi-nccl "
                                         "2019: ~80 Gb/s on 2 nodes, 50-60 Gb/s on 8-32; no GPUDirect RDMA on p3dn)",
                                         100 * f, nodes));
  }
  const DpRun ddp = dp_run(ddp_catalog, cluster, gpus, model, 128, 64, plan::DpAlgorithm::ring, 25e6);
  const DpRun smddp = dp_run(catalog, cluster, gpus, model, 128, 64, plan::DpAlgorithm::smddp, 25e6);
  vp.setup = fmt::format("{} seq 128 mb 64 dp{}: DDP (ring) vs SMDDP", model, gpus);
  vp.measured_from = fmt::format("1 + published {} (throughput SMDDP / DDP)", key);
  score_ratio(vp, "throughput_ratio", 1.0 + *speedup, ddp, smddp, ddp, cluster, options);
}

// Horovod's scaling efficiency: throughput on n GPUs / (n x throughput on one) at a fixed batch
// per GPU = step time on one GPU / step time on n (Horovod: NCCL ring all-reduce of 64 MiB
// fusion buffers, its default threshold). The first workload with a catalog model is compared.
void map_scaling_efficiency(const Json& point, const hw::Catalog& catalog, const ValidationOptions& options, ValidationPoint& vp) {
  const Json& eff = member(member(member(point, "metrics"), "other"), "scaling_efficiency");
  std::string cluster;
  const int gpus = library_cluster(point, catalog, vp, cluster);
  if (gpus == 0) return;
  std::string key, model;
  std::vector<std::string> skipped;
  if (eff.is_object())
    for (auto it = eff.begin(); it != eff.end(); ++it) {
      if (model.empty() && !catalog_model_of(it.key()).empty()) key = it.key(), model = catalog_model_of(it.key());
      else skipped.push_back(it.key());
    }
  if (model.empty()) {
    vp.reason = "no workload with a catalog model";
    return;
  }
  for (const auto& w : skipped)
    vp.assumptions.push_back(fmt::format("{}: {}, not compared", w, catalog_model_of(w).empty() ? "no catalog model" : "one workload per point"));
  const auto measured_eff = num(eff, key.c_str());
  if (!measured_eff || !(*measured_eff > 0)) {
    vp.reason = fmt::format("scaling efficiency of {} must be positive", key);
    return;
  }
  const auto mb = whole(member(point, "parallelism"), "micro_batch", 1, limits::kMaxBatch);
  if (!mb) {
    vp.reason = "the batch per GPU is not given";
    return;
  }
  const double fusion = sim::kHorovodFusionThresholdBytes;
  // tf_cnn_benchmarks trains in fp32 unless --use_fp16 is given; the benchmark command has none.
  const DpRun one = dp_run(catalog, cluster, 1, model, 0, *mb, plan::DpAlgorithm::horovod, fusion, Precision::fp32);
  const DpRun many = dp_run(catalog, cluster, gpus, model, 0, *mb, plan::DpAlgorithm::horovod, fusion, Precision::fp32);
  vp.assumptions.push_back(fmt::format("{} as {}, {} per GPU, fp32 (tf_cnn_benchmarks without --use_fp16), Horovod over NCCL "
                                       "with its default 64 MiB fusion threshold", key, model, *mb));
  vp.setup = fmt::format("{} mb {} dp{} (Horovod) vs 1 GPU", model, *mb, gpus);
  vp.measured_from = fmt::format("published scaling efficiency of {}", key);
  score_ratio(vp, "scaling_efficiency", *measured_eff, one, many, many, cluster, options);
}

// The software stack a source ran, from its title, locator and notes.
std::string framework_of(const Json& point) {
  const Json none;
  const Json& source = point.contains("source") ? point["source"] : none;
  std::string notes;
  if (point.contains("notes") && point["notes"].is_array())
    for (const auto& n : point["notes"])
      if (n.is_string()) notes += " " + n.get<std::string>();
  const std::string text = str(source, "title") + " " + str(source, "locator") + " " + str(source, "ref") + notes;
  if (contains(text, "NeMo")) return "NeMo (Megatron-core)";
  if (contains(text, "llm-foundry") || contains(text, "MosaicML") || contains(text, "Composer")) return "PyTorch FSDP (llm-foundry)";
  // DeepSpeed when the point's notes or the source's title / reference name it; a locator
  // ("Table 2 (PTD-P vs ZeRO-3 ...)") names what a table compares, not what each row ran.
  const std::string named = str(source, "title") + " " + str(source, "ref") + notes;
  if (contains(named, "DeepSpeed") || contains(named, "ZeRO")) return "DeepSpeed";
  if (contains(text, "SageMaker")) return "SageMaker";
  if (contains(text, "Megatron")) return "Megatron-LM";
  if (contains(text, "JAX") || contains(text, "MaxText") || contains(text, "Pax")) return "JAX";
  // Other PyTorch FSDP runs (torchtitan, Hugging Face Accelerate / Trainer with FSDP): named, or
  // a sharding strategy stated in parallelism.fsdp.
  const Json& par = point.contains("parallelism") ? point["parallelism"] : none;
  if (contains(text, "torchtitan") || contains(text, "FSDP") || contains(text, "Fully Sharded") || !str(par, "fsdp").empty())
    return "PyTorch FSDP";
  return "other";
}

std::string generation_of(const std::string& gpu) {
  for (const char* g : {"H200", "H100", "A100", "V100", "A10G", "L40S", "L4", "T4"})
    if (contains(gpu, g)) return g;
  return gpu.empty() ? "unknown" : gpu;
}

void summarize(const std::vector<const ValidationPoint*>& pts, SourceSummary& s) {
  double abs_sum = 0, abs_an = 0, abs_tp = 0, signed_sum = 0;
  int n = 0, n_an = 0;
  for (const auto* p : pts) {
    if (!p->mapped) {
      ++s.unmapped;
      continue;
    }
    if (p->bound != PublishedBound::none) {
      ++s.bounds;
      s.bounds_consistent += p->bound_consistent;
      continue;
    }
    ++n;
    abs_sum += std::fabs(p->error);
    signed_sum += p->error;
    if (p->metric == "step_time_s") {
      abs_tp += std::fabs(p->measured / p->predicted - 1.0);
      abs_an += std::fabs(p->error_analytical);
      ++n_an;
    }
  }
  s.points = n;
  if (n) {
    s.mape = abs_sum / n;
    s.mean_error = signed_sum / n;
  }
  if (n_an) {
    s.mape_analytical = abs_an / n_an;
    s.mape_throughput = abs_tp / n_an;
  }
}

// The compared metric's bound from the published value's: a lower bound on a published rate
// (busbw, tokens/s, TFLOP/s) is an upper bound on the step time compared.
void apply_bound(const Json& point, ValidationPoint& vp) {
  PublishedBound b = published_bound(point);
  if (!vp.mapped || b == PublishedBound::none) return;
  if (vp.metric == "step_time_s" && vp.measured_from != "step time as published")
    b = b == PublishedBound::lower ? PublishedBound::upper : PublishedBound::lower;
  vp.bound = b;
  vp.bound_consistent = b == PublishedBound::lower ? vp.predicted >= vp.measured : vp.predicted <= vp.measured;
}

}  // namespace

PublishedBound published_bound(const json::Json& point) {
  if (!point.is_object() || !point.contains("notes") || !point["notes"].is_array()) return PublishedBound::none;
  const Json& hw = member(point, "hardware");
  const auto gpus = whole(hw, "num_gpus", 1, limits::kMaxGpus);
  const auto per_node = whole(hw, "gpus_per_node", 1, limits::kMaxGpus);
  const int64_t nodes = gpus && per_node ? (*gpus + *per_node - 1) / *per_node : 0;  // 0: not stated
  // "3-4 node values as lower bounds", "the 2-node value is an upper bound": scoped to node counts.
  // Node counts of at most 6 digits (std::stoll cannot overflow); a note is read up to its first
  // 1000 characters (libstdc++'s regex recurses per character).
  static const std::regex scoped(R"((\d{1,6})(?:\s*(?:-|to|\xE2\x80\x93)\s*(\d{1,6}))?[\s-]*nodes?\b[^.;]*?\b(lower|upper)[\s-]+bounds?\b)");
  static const std::regex plain(R"(\b(lower|upper)[\s-]+bounds?\b)");
  auto kind = [](const std::string& w) { return w == "lower" ? PublishedBound::lower : PublishedBound::upper; };
  for (const auto& n : point["notes"]) {
    if (!n.is_string()) continue;
    const std::string note = to_lower(n.get<std::string>().substr(0, 1000));
    std::smatch m;
    if (std::regex_search(note, m, scoped)) {
      const int64_t lo = std::stoll(m[1].str()), hi = m[2].matched ? std::stoll(m[2].str()) : lo;
      if (nodes > 0 && nodes >= lo && nodes <= hi) return kind(m[3].str());
      continue;  // scoped to other node counts: says nothing about this point
    }
    if (std::regex_search(note, m, plain)) return kind(m[1].str());
  }
  return PublishedBound::none;
}

std::optional<int> published_year(const json::Json& point) {
  // A four-digit year (19xx or 20xx) in the source's date, e.g. "2021-04" or "2023-2024".
  auto four_digit = [](const std::string& t) -> std::optional<int> {
    for (size_t i = 0; i + 4 <= t.size(); ++i) {
      if (i > 0 && std::isdigit(static_cast<unsigned char>(t[i - 1]))) continue;
      if (!std::all_of(t.begin() + static_cast<long>(i), t.begin() + static_cast<long>(i) + 4,
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        continue;
      if (i + 4 < t.size() && std::isdigit(static_cast<unsigned char>(t[i + 4]))) continue;
      const int y = std::stoi(t.substr(i, 4));
      if (y >= 1990 && y <= 2099) return y;
    }
    return std::nullopt;
  };
  // A container or framework release "YY.MM" (NGC containers, NeMo: "25.11" is 2025-11).
  auto release = [](const std::string& t) -> std::optional<int> {
    for (size_t i = 0; i + 5 <= t.size(); ++i) {
      if (i > 0 && (std::isdigit(static_cast<unsigned char>(t[i - 1])) || t[i - 1] == '.')) continue;
      const auto d = [&](size_t k) { return std::isdigit(static_cast<unsigned char>(t[k])) != 0; };
      if (!(d(i) && d(i + 1) && t[i + 2] == '.' && d(i + 3) && d(i + 4))) continue;
      if (i + 5 < t.size() && (std::isdigit(static_cast<unsigned char>(t[i + 5])))) continue;
      const int yy = std::stoi(t.substr(i, 2)), mm = std::stoi(t.substr(i + 3, 2));
      if (yy >= 17 && yy <= 99 && mm >= 1 && mm <= 12) return 2000 + yy;
    }
    return std::nullopt;
  };
  const Json none;
  const Json& source = point.is_object() && point.contains("source") ? point["source"] : none;
  const std::string date = str(source, "date");
  if (auto y = four_digit(date)) return y;
  if (auto y = release(date)) return y;
  std::string text = str(source, "title") + " " + str(source, "locator");
  if (point.is_object() && point.contains("notes") && point["notes"].is_array())
    for (const auto& n : point["notes"])
      if (n.is_string()) text += " " + n.get<std::string>();
  if (point.is_object() && point.contains("model")) text += " " + str(point["model"], "arch_notes");
  if (auto y = release(text)) return y;
  return four_digit(text);
}

ValidationReport validate_published_json(const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                                         const ValidationOptions& options) {
  json::Reader r(doc, name);
  const auto points = r.field("data_points").items();
  ValidationReport report;
  report.file = name;
  report.analytical = static_cast<bool>(options.analytical_step_s);
  std::vector<const Json*> selected;
  for (const auto& p : points) {
    if (!p.is_object()) throw p.error("a data point must be an object")
        .hint("each entry of data_points is {\"id\": ..., \"kind\": ..., \"model\": {...}, \"parallelism\": {...}, \"hardware\": {...}, \"metrics\": {...}}");
    const std::string id = str(p.value(), "id");
    if (!options.filter.empty() && id.find(options.filter) == std::string::npos) continue;
    selected.push_back(&p.value());
  }
  report.points.resize(selected.size());
  std::vector<const Json*> all;
  for (const auto& p : points) all.push_back(&p.value());
  const FormulaSources formula = sources_stating_96bslh(all);
  ThreadPool pool(static_cast<size_t>(std::max(0, options.threads)));
  pool.parallel_for(selected.size(), [&](size_t i) {
    const Json& point = *selected[i];
    ValidationPoint& vp = report.points[i];
    vp.id = str(point, "id");
    vp.kind = str(point, "kind");
    vp.source = str(member(point, "source"), "title");
    vp.locator = str(member(point, "source"), "locator");
    vp.verification = str(point, "verification");
    vp.framework = framework_of(point);
    try {
      if (is_training_kind(vp.kind)) map_training(point, catalog, options, formula, vp);
      else if (vp.kind == "collective_benchmark") map_collective(point, catalog, options, vp);
      else if (vp.kind == "relative_speedup") map_relative_speedup(point, catalog, options, vp);
      else if (vp.kind == "scaling_efficiency") map_scaling_efficiency(point, catalog, options, vp);
      else vp.reason = fmt::format("kind \"{}\" is not a per-step throughput or collective measurement", vp.kind);
      apply_bound(point, vp);
    } catch (const Error& e) {
      vp.mapped = false;
      if (vp.reason.empty()) vp.reason = e.what();
    }
  });
  // Per source, in the order sources first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ValidationPoint*>> by_source;
  std::vector<const ValidationPoint*> training, collectives, libraries;
  for (const auto& p : report.points) {
    if (!by_source.count(p.source)) order.push_back(p.source);
    by_source[p.source].push_back(&p);
    if (is_training_kind(p.kind)) training.push_back(&p);
    if (p.kind == "collective_benchmark") collectives.push_back(&p);
    if (p.kind == "relative_speedup" || p.kind == "scaling_efficiency") libraries.push_back(&p);
  }
  for (const auto& src : order) {
    SourceSummary s;
    s.title = src;
    summarize(by_source[src], s);
    for (const auto* p : by_source[src])
      if (p->mapped) s.metric = p->metric;
    report.sources.push_back(s);
  }
  // Groups of the training points: single node / multi-node, GPU generation, framework.
  std::map<std::string, std::vector<const ValidationPoint*>> groups;
  std::vector<std::string> group_order;
  auto add_to = [&](const std::string& g, const ValidationPoint* p) {
    if (!groups.count(g)) group_order.push_back(g);
    groups[g].push_back(p);
  };
  for (const auto* p : training) {
    if (!p->mapped) continue;
    add_to(p->num_gpus <= p->gpus_per_node ? "single node" : "multi-node", p);
    add_to("GPU " + generation_of(p->gpu), p);
    add_to("framework " + p->framework, p);
    if (p->kind != "training_throughput") add_to("kind " + p->kind, p);
  }
  std::sort(group_order.begin(), group_order.end());
  for (const auto& g : group_order) {
    SourceSummary s;
    s.title = g;
    s.metric = "step_time_s";
    summarize(groups[g], s);
    report.groups.push_back(s);
  }
  // Leave-one-source-out: each source predicted with every constant set while looking at the
  // other sources only. No constant of the uncalibrated model is set from a validation point
  // (datasheets and microbenchmarks only, simulator/README.md), so without a calibration table
  // every source's held-out prediction is the prediction itself; with one, its provenance is
  // unknown here and no leave-one-source-out figure is given. (p3dn's NCCL network fraction of
  // the SMDDP-vs-DDP baseline comes from nccl-tests of NVIDIA/nccl#235, a point validate cannot
  // score; it touches no training point.)
  report.loso_available = !options.calibration && !options.calibrate;
  report.training.title = "all training points (step time)";
  report.training.metric = "step_time_s";
  summarize(training, report.training);
  report.collectives.title = "all collective benchmarks (bus bandwidth)";
  report.collectives.metric = "busbw_GBps";
  summarize(collectives, report.collectives);
  report.libraries.title = "data-parallel libraries (speedup, scaling efficiency)";
  report.libraries.metric = "ratio";
  summarize(libraries, report.libraries);
  return report;
}

ValidationReport validate_published(const std::string& path, const hw::Catalog& catalog, const ValidationOptions& options) {
  return validate_published_json(json::parse_file(path), path, catalog, options);
}

json::Json to_json(const ValidationReport& r) {
  auto summary = [&r](const SourceSummary& s) {
    Json j = {{"title", s.title}, {"metric", s.metric}, {"points", s.points}, {"unmapped", s.unmapped}, {"mape", s.mape},
              {"mean_error", s.mean_error}};
    if (s.bounds) j["bounds"] = {{"points", s.bounds}, {"consistent", s.bounds_consistent}};
    if (s.metric == "step_time_s") {
      j["mape_throughput"] = s.mape_throughput;
      if (r.analytical) j["mape_analytical"] = s.mape_analytical;
    }
    return j;
  };
  Json j;
  j["file"] = r.file;
  j["convention"] =
      "training points compare step time (s per optimizer step); published TFLOP/s are converted back with the source's own "
      "FLOP formula, tokens/s with the global batch; model TFLOP/s per GPU use 6N + attention per token without recomputation. "
      "Collectives compare nccl-tests busbw. error = predicted / measured - 1. A point whose source calls its value a lower or "
      "upper bound (bound, on the compared metric) is left out of MAPE and bias; bound_consistent says whether the prediction "
      "lies on the bound's side.";
  j["training"] = summary(r.training);
  if (r.loso_available) {
    j["training"]["loso_mape"] = r.training.mape;
    j["loso_method"] =
        "leave-one-source-out: every constant of the uncalibrated model comes from datasheets and microbenchmarks, none from a "
        "validation point, so each source's held-out prediction equals its prediction and loso_mape equals mape";
  }
  Json groups = Json::array();
  for (const auto& g : r.groups) groups.push_back(summary(g));
  j["groups"] = groups;
  j["collectives"] = summary(r.collectives);
  j["libraries"] = summary(r.libraries);
  Json sources = Json::array();
  for (const auto& s : r.sources) sources.push_back(summary(s));
  j["sources"] = sources;
  Json points = Json::array();
  for (const auto& p : r.points) {
    Json q = {{"id", p.id}, {"kind", p.kind}, {"source", p.source}, {"framework", p.framework}, {"mapped", p.mapped}};
    if (!p.mapped) {
      q["reason"] = p.reason;
    } else {
      q["cluster"] = p.cluster;
      q["setup"] = p.setup;
      q["metric"] = p.metric;
      q["measured_from"] = p.measured_from;
      q["measured"] = p.measured;
      q["predicted"] = p.predicted;
      q["error"] = p.error;
      if (p.bound != PublishedBound::none) {
        q["bound"] = p.bound == PublishedBound::lower ? "lower" : "upper";
        q["bound_consistent"] = p.bound_consistent;
      }
      if (p.metric != "busbw_GBps" && r.analytical) {
        q["predicted_analytical"] = p.predicted_analytical;
        q["error_analytical"] = p.error_analytical;
      }
      if (p.metric == "step_time_s") {
        q["model_tflops_per_gpu_measured"] = p.model_tflops_measured;
        q["model_tflops_per_gpu_predicted"] = p.model_tflops_predicted;
        q["fits_memory"] = p.fits_memory;
        q["peak_memory_bytes"] = p.peak_memory_bytes;
        q["memory_capacity_bytes"] = p.memory_capacity_bytes;
      }
    }
    if (!p.assumptions.empty()) q["assumptions"] = p.assumptions;
    points.push_back(q);
  }
  j["points"] = points;
  return j;
}

}  // namespace trainplan::calibration
