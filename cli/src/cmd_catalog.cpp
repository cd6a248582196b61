// `trainplan catalog [NAME] [--json] [--regions]`: the hardware catalog. Without NAME, one line
// per instance type (GPUs, memory, interconnect, network, prices); with NAME, one instance in
// detail: GPU peaks, topology and its GPU-to-GPU link matrix, network, storage, prices, the
// regions offering it and the source and date of each figure; --regions: the region table.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

namespace trainplan::cli {
namespace {

std::string gbps(double bytes_per_s) {
  const double g = bytes_per_s * 8.0 / 1e9;
  return g == std::floor(g) ? fmt::format("{:.0f} Gbps", g) : fmt::format("{:.3g} Gbps", g);
}

std::string gb_per_s(double bytes_per_s) {
  const double gb = bytes_per_s / 1e9;
  return gb >= 100 ? fmt::format("{:.0f} GB/s", gb) : fmt::format("{:.3g} GB/s", gb);
}

// Decimal sizes, as storage is sold: "900 GB", "30.72 TB".
std::string disk_size(double bytes) {
  return bytes >= 1e13 ? fmt::format("{:.4g} TB", bytes / 1e12) : fmt::format("{:.0f} GB", bytes / 1e9);
}

std::string usd(const std::optional<double>& v, bool estimated) {
  if (!v) return "-";
  return fmt::format("{}{:.{}f}", estimated ? "~" : "", *v, *v < 10 ? 3 : 2);
}

// "6" or "4-5": NVLink lanes per GPU over the GPUs of the instance.
std::string lanes_per_gpu(const hw::IntraNodeTopology& t) {
  int most = 0, least = 1 << 30;
  for (const auto& row : t.nvlink_lanes) {
    int sum = 0;
    for (int l : row) sum += l;
    most = std::max(most, sum);
    least = std::min(least, sum);
  }
  return least == most ? std::to_string(most) : fmt::format("{}-{}", least, most);
}

// `neuron`: Trainium's NeuronLink, which the catalog models as one switch per instance.
std::string interconnect(const hw::InstanceType& inst, bool neuron) {
  const auto& t = inst.topology;
  std::string s;
  switch (t.kind) {
    case hw::IntraNodeKind::single: return "- (1 GPU)";
    case hw::IntraNodeKind::pcie: s = fmt::format("PCIe Gen{}", t.pcie_generation); break;
    case hw::IntraNodeKind::nvlink_mesh:
      s = fmt::format("NVLink mesh {} x {:.0f} GB/s", lanes_per_gpu(t), t.nvlink_lane_bandwidth_bytes_per_s / 1e9);
      break;
    case hw::IntraNodeKind::nvswitch:
      s = fmt::format("{} {}", neuron ? "NeuronLink" : "NVSwitch", gb_per_s(t.nvswitch_bandwidth_bytes_per_s));
      break;
  }
  if (t.sockets > 1) s += fmt::format(", {} sockets", t.sockets);
  return s;
}

std::string network(const hw::InstanceType& inst) {
  const auto& n = inst.network;
  std::string s = gbps(n.bandwidth_bytes_per_s);
  if (n.burstable) s += " base";
  if (n.efa || n.nics > 1) s += fmt::format(" {}{}", n.efa ? "EFA" : n.fabric, n.nics > 1 ? fmt::format(" x{}", n.nics) : "");
  else s += " " + n.fabric;
  if (n.gpudirect_rdma) s += " GDR";
  return s;
}

std::string source_line(const hw::Catalog& cat, const std::string& ref) {
  std::string out;
  for (const auto& id : split(ref, '+')) {
    const hw::Source& s = cat.source(id);
    out += fmt::format("{}{} ({}{})", out.empty() ? "" : " + ", id, s.date, s.verified ? "" : ", unverified");
  }
  return out;
}

void print_list(const hw::Catalog& cat) {
  std::set<std::string> regions;
  for (const auto& name : cat.instance_names())
    if (const auto& r = cat.instance(name).prices.region; !r.empty()) regions.insert(r);
  const bool region_column = regions.size() > 1;  // a price file moved some instances elsewhere
  std::vector<std::string> headers{"instance", "GPUs", ">GPU mem", "interconnect", "network", ">EC2 $/h",
                                   ">SageMaker $/h", ">spot $/h", "interrupt"};
  if (region_column) headers.push_back("region");
  Table t(headers);
  for (const auto& name : cat.instance_names()) {
    const auto& inst = cat.instance(name);
    const auto& gpu = cat.gpu(inst.gpu);
    const auto& p = inst.prices;
    std::string ec2 = p.ec2_on_demand ? usd(p.ec2_on_demand, false) : !inst.aws ? "-" : cat.offered_in_selected_region(name) ? "n/a" : "not offered";
    std::vector<std::string> row{
        name, fmt::format("{}x {}", inst.gpu_count, inst.gpu), units::format_bytes(gpu.memory_bytes), interconnect(inst, !gpu.executable()),
        network(inst), ec2, usd(p.sagemaker_on_demand, p.sagemaker_estimated), usd(p.spot, p.spot_estimated),
        !inst.aws && p.interruption_bucket.empty() ? "-" : p.interruption_bucket.empty() ? "?" : p.interruption_bucket};
    if (region_column) row.push_back(p.region);
    t.add(row);
  }
  std::fputs(t.render().c_str(), stdout);
  std::printf(
      "\nprices: USD per instance-hour, Linux, %s. ~ = estimated (SageMaker: EC2 x the family's\n"
      "uplift; spot: EC2 x (1 - the family's observed discount)); spot without ~ is the midpoint of sampled\n"
      "prices. n/a = no on-demand listing; ? = Spot Advisor interruption bucket unknown; - = not an AWS\n"
      "instance. `trainplan catalog NAME` shows one instance with the source and date of each figure.\n",
      region_column ? "region as listed" : ("region " + join(std::vector<std::string>(regions.begin(), regions.end()), ", ")).c_str());
}

// "32.77 | 5.09-9.61 | 3 AZ": one type's figures in one region; "-" where it is not offered.
std::string region_cell(const hw::RegionOffer& o) {
  const std::string spot = o.spot_min ? fmt::format("{}-{}", *o.spot_min, *o.spot_max) : "no sample";
  return fmt::format("{} | {} | {} AZ", o.ec2_on_demand ? fmt::format("{}", *o.ec2_on_demand) : "n/a", spot, o.zones.size());
}

void print_region_note(const hw::Catalog& cat) {
  const auto& rt = cat.region_table();
  std::printf("\ncells: EC2 on-demand USD/h | lowest-highest spot sample over the zones | availability zones offering it;\n"
              "- = not offered in that region, n/a = no on-demand price listed. Source: %s. The catalog's own\n"
              "%s prices (`trainplan catalog`) are used there; this table's %s column is the snapshot's, for comparison.\n"
              "Prices: --region R (default %s).\n",
              source_line(cat, rt.source).c_str(), hw::kCatalogRegion, hw::kCatalogRegion, hw::kCatalogRegion);
}

// `catalog --regions`: every type of the region table, one column per region.
void print_regions(const hw::Catalog& cat) {
  const auto& rt = cat.region_table();
  if (rt.names.empty()) {
    std::printf("the catalog has no region table: prices are %s's (give others with --prices FILE)\n", hw::kCatalogRegion);
    return;
  }
  std::vector<std::string> headers{"instance"};
  headers.insert(headers.end(), rt.names.begin(), rt.names.end());
  Table t(headers);
  std::vector<std::string> unlisted;
  for (const auto& name : cat.instance_names()) {
    if (!cat.instance(name).aws) continue;
    const auto it = rt.instances.find(name);
    if (it == rt.instances.end()) {
      unlisted.push_back(name);
      continue;
    }
    std::vector<std::string> row{name};
    for (const auto& region : rt.names) {
      const auto o = it->second.find(region);
      row.push_back(o == it->second.end() ? "-" : region_cell(o->second));
    }
    t.add(row);
  }
  std::fputs(t.render().c_str(), stdout);
  print_region_note(cat);
  if (!unlisted.empty())
    std::printf("not in the table (prices for %s only; elsewhere no price, give one with --prices FILE): %s\n", hw::kCatalogRegion,
                join(unlisted, ", ").c_str());
}

// `catalog NAME`: the type's row of the region table.
void print_instance_regions(const hw::Catalog& cat, const hw::InstanceType& inst) {
  if (!inst.aws) return;
  const auto& rt = cat.region_table();
  const auto it = rt.instances.find(inst.name);
  if (it == rt.instances.end()) {
    std::printf("\nregions: not in the catalog's region table (its prices above are %s's; other regions: --prices FILE)\n", hw::kCatalogRegion);
    return;
  }
  std::printf("\nregions (%zu of %zu in the table offer it):\n", it->second.size(), rt.names.size());
  Table t({"region", ">EC2 $/h", ">spot min-max", ">AZs", "zones"});
  for (const auto& region : rt.names) {
    const auto o = it->second.find(region);
    if (o == it->second.end()) {
      t.add({region, "-", "-", "0", "not offered"});
      continue;
    }
    t.add({region, o->second.ec2_on_demand ? fmt::format("{}", *o->second.ec2_on_demand) : "n/a",
           o->second.spot_min ? fmt::format("{}-{}", *o->second.spot_min, *o->second.spot_max) : "no sample",
           std::to_string(o->second.zones.size()), join(o->second.zones, ", ")});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  std::printf("  source: %s; in %s the catalog's own prices above are used\n", source_line(cat, rt.source).c_str(),
              hw::kCatalogRegion);
}

std::string cpu_network(const hw::CpuInstanceType& c) {
  const std::string base = gbps(c.network.bandwidth_bytes_per_s);
  return c.network.burstable ? fmt::format("{} base, up to {}", base, gbps(c.burst_bandwidth_bytes_per_s)) : base;
}

void print_cpu_list(const hw::Catalog& cat) {
  if (cat.cpu_instance_names().empty()) return;
  std::printf("\nCPU instances (no GPU; classic ML: `trainplan plan --model xgboost`):\n");
  Table t({"instance", ">vCPUs", ">cores", ">memory", "network", ">EC2 $/h", ">SageMaker $/h", ">spot $/h"});
  bool marked = false;
  for (const auto& name : cat.cpu_instance_names()) {
    const auto& c = cat.cpu_instance(name);
    const auto& p = c.prices;
    // " *": the price rests on a source the catalog marks unverified.
    auto mark = [&](const char* group) -> std::string {
      const auto it = c.sources.find(group);
      if (it == c.sources.end()) return "";
      for (const auto& id : split(it->second, '+'))
        if (!cat.source(id).verified) return marked = true, " *";
      return "";
    };
    t.add({name, std::to_string(c.vcpus), std::to_string(c.cores), units::format_bytes(c.host_memory_bytes), cpu_network(c),
           usd(p.ec2_on_demand, false) + mark("ec2_on_demand"), usd(p.sagemaker_on_demand, p.sagemaker_estimated) + mark("sagemaker"),
           usd(p.spot, p.spot_estimated) + mark("spot")});
  }
  std::fputs(t.render().c_str(), stdout);
  if (marked)
    std::printf("* = the price rests on an unverified source (recalled or secondary, not read on AWS's pricing pages);\n"
                "`trainplan catalog NAME` names it.\n");
}

void print_software_list(const hw::Catalog& cat) {
  if (cat.software_stacks().empty()) return;
  std::printf("\nsoftware stacks (plan field \"software\", `trainplan plan --stack`; default %s):\n", hw::kDefaultSoftware);
  Table t({"stack", ">launch/kernel", ">GPU gap", ">layer hook", ">micro-batch", ">step", "sync", "fuses", "description"});
  for (const auto& [name, s] : cat.software_stacks()) {
    const std::string fused = hw::fused_classes(s);
    t.add({name, units::format_duration(s.launch_s), units::format_duration(s.kernel_gap_s), units::format_duration(s.layer_hook_s),
           units::format_duration(s.micro_batch_s), units::format_duration(s.step_s), s.sync_before_optimizer ? "yes" : "no",
           fused.empty() ? "-" : fused, s.description});
  }
  std::fputs(t.render().c_str(), stdout);
  std::set<std::string> ids;
  for (const auto& [name, s] : cat.software_stacks())
    for (const auto& [field, ref] : s.sources) ids.insert(ref);
  std::printf("sources:");
  for (const auto& ref : ids) std::printf(" %s;", source_line(cat, ref).c_str());
  std::printf("\n");
}

void print_cpu_instance(const hw::Catalog& cat, const hw::CpuInstanceType& c) {
  std::printf("%s: CPU instance, %s (%s)\n", c.name.c_str(), c.description.c_str(), c.family.c_str());
  std::printf("  CPU:      %s, %d vCPUs = %d cores\n", c.cpu.c_str(), c.vcpus, c.cores);
  std::printf("  memory:   %s\n", units::format_bytes(c.host_memory_bytes).c_str());
  std::printf("  network:  %s, %s, latency %s\n", cpu_network(c).c_str(), c.network.fabric.c_str(),
              units::format_duration(c.network.latency_s).c_str());
  const auto& p = c.prices;
  std::printf("  prices (%s, USD/h): EC2 %s, SageMaker %s, spot %s\n", p.region.c_str(), usd(p.ec2_on_demand, false).c_str(),
              usd(p.sagemaker_on_demand, p.sagemaker_estimated).c_str(), usd(p.spot, p.spot_estimated).c_str());
  for (const auto& n : c.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("\nsources:\n");
  for (const auto& [group, ref] : c.sources) std::printf("  %-17s %s\n", group.c_str(), source_line(cat, ref).c_str());
}

void print_matrix(const std::vector<std::vector<std::string>>& m, const std::string& indent) {
  std::vector<std::string> headers{""};
  for (size_t j = 0; j < m.size(); ++j) headers.push_back(fmt::format("GPU{}", j));
  Table t(headers);
  for (size_t i = 0; i < m.size(); ++i) {
    std::vector<std::string> row{fmt::format("GPU{}", i)};
    row.insert(row.end(), m[i].begin(), m[i].end());
    t.add(row);
  }
  std::fputs(t.render(indent).c_str(), stdout);
}

void print_instance(const hw::Catalog& cat, const hw::InstanceType& inst) {
  const auto& gpu = cat.gpu(inst.gpu);
  const auto& t = inst.topology;
  std::printf("%s (%s family%s): %s\n", inst.name.c_str(), inst.family.c_str(), inst.aws ? "" : ", generic, not AWS",
              inst.description.c_str());
  std::printf("  defined in %s\n\n", inst.file.c_str());

  if (gpu.executable())
    std::printf("GPU: %d x %s (%s, compute capability %s), %s %s at %s, %.0f W\n", inst.gpu_count, gpu.name.c_str(),
                gpu.arch.c_str(), gpu.compute_capability.c_str(), units::format_bytes(gpu.memory_bytes).c_str(),
                gpu.memory_type.c_str(), gb_per_s(gpu.memory_bandwidth_bytes_per_s).c_str(), gpu.tdp_w);
  else
    std::printf("accelerator: %d x %s (%s, runtime %s: planned and simulated, not executed), %s %s at %s\n", inst.gpu_count,
                gpu.name.c_str(), gpu.arch.c_str(), gpu.runtime.c_str(), units::format_bytes(gpu.memory_bytes).c_str(),
                gpu.memory_type.c_str(), gb_per_s(gpu.memory_bandwidth_bytes_per_s).c_str());
  std::string peaks;
  for (const auto& [p, flops] : gpu.peak_flops)
    peaks += fmt::format("{}{} {}", peaks.empty() ? "" : ", ", precision_name(p), units::format_flops_rate(flops));
  std::printf("  dense peak: %s\n", peaks.c_str());
  // Measured matmul rates by precision, each with its share of that precision's dense peak.
  auto measured = [&](const char* label, const std::map<Precision, double>& rates) {
    std::string line;
    for (const auto& [p, flops] : rates)
      line += fmt::format("{}{} {} ({:.1f}% of peak)", line.empty() ? "" : ", ", precision_name(p),
                          units::format_flops_rate(flops), 100.0 * flops / gpu.peak_flops.at(p));
    if (!line.empty()) std::printf("  %s: %s\n", label, line.c_str());
  };
  measured("measured max matmul (MAMF)", gpu.mamf_flops);
  measured("sustained matmul at the power limit", gpu.sustained_matmul_flops);
  if (gpu.executable())
    std::printf("  %d SMs; cuBLAS workspace %s\n", gpu.sm_count, units::format_bytes(gpu.cublas_workspace_bytes).c_str());
  else
    std::printf("  %d NeuronCores per chip\n", gpu.sm_count);
  std::printf("  16-bit training precision: %s%s\n", std::string(precision_name(gpu.preferred_half_precision())).c_str(),
              gpu.supports(Precision::bf16) ? "" : " (no bf16 on this GPU)");
  for (const auto& n : gpu.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("host: %d vCPU, %s memory%s%s\n\n", inst.vcpus, units::format_bytes(inst.host_memory_bytes).c_str(),
              inst.cpu.empty() ? "" : ", ", inst.cpu.c_str());

  std::printf("topology: %s\n", interconnect(inst, !gpu.executable()).c_str());
  if (t.kind == hw::IntraNodeKind::nvlink_mesh)
    std::printf("  NVLink: %s per lane per direction, %s lanes per GPU, latency %s per hop\n",
                gb_per_s(t.nvlink_lane_bandwidth_bytes_per_s).c_str(), lanes_per_gpu(t).c_str(),
                units::format_duration(t.nvlink_latency_s).c_str());
  if (t.kind == hw::IntraNodeKind::nvswitch)
    std::printf("  %s: %s per %s per direction, latency %s per %s-switch hop\n",
                gpu.executable() ? "NVSwitch" : "NeuronLink (modelled as one switch, estimated rate)",
                gb_per_s(t.nvswitch_bandwidth_bytes_per_s).c_str(), gpu.executable() ? "GPU" : "chip",
                units::format_duration(t.nvlink_latency_s).c_str(), gpu.executable() ? "GPU" : "chip");
  if (t.nvlink_domain_instances > 1)
    std::printf("  NVLink domain: %d instances (%d GPUs, an UltraServer) share one NVLink switch domain; across domains EFA\n",
                t.nvlink_domain_instances, t.nvlink_domain_instances * inst.gpu_count);
  std::printf("  PCIe Gen%d: %s per GPU per direction", t.pcie_generation, gb_per_s(t.pcie_bandwidth_bytes_per_s).c_str());
  if (t.gpus_per_pcie_switch > 0)
    std::printf(", %d GPUs per PCIe switch (uplink %s)", t.gpus_per_pcie_switch,
                gb_per_s(t.pcie_switch_uplink_bytes_per_s).c_str());
  std::printf("\n  %d CPU socket%s", t.sockets, t.sockets > 1 ? "s" : "");
  if (t.sockets > 1)
    std::printf(", GPUs 0-%d on socket 0; socket-to-socket %s", inst.gpu_count / t.sockets - 1,
                gb_per_s(t.inter_socket_bandwidth_bytes_per_s).c_str());
  std::printf("\n");

  hw::Cluster cluster = hw::Cluster::build(inst, 1, cat);
  if (inst.gpu_count > 1) {
    std::printf("\nGPU-to-GPU links (as nvidia-smi topo -m: NV<n> = n NVLink lanes, NVS = NVSwitch, PIX = same PCIe\n"
                "switch, NODE = same CPU socket, SYS = across sockets):\n");
    print_matrix(cluster.intra_node_matrix(), "  ");
    std::printf("\nGPU-to-GPU route: bottleneck GB/s per direction / hops (GPUs do not forward):\n");
    std::vector<std::vector<std::string>> routes(static_cast<size_t>(inst.gpu_count));
    for (int a = 0; a < inst.gpu_count; ++a)
      for (int b = 0; b < inst.gpu_count; ++b) {
        const auto& r = cluster.route(a, b);
        routes[static_cast<size_t>(a)].push_back(
            a == b ? "-" : fmt::format("{:.0f}/{}", r.bottleneck_bandwidth_bytes_per_s / 1e9, r.hops));
      }
    print_matrix(routes, "  ");
  }

  const auto& n = inst.network;
  std::printf("\nnetwork: %s (%s)%s over %s, %d %s%s; node-to-node latency %s\n", gbps(n.bandwidth_bytes_per_s).c_str(),
              gb_per_s(n.bandwidth_bytes_per_s).c_str(), n.burstable ? " sustained baseline (bursts higher)" : "",
              n.fabric.c_str(), n.nics, n.efa ? "EFA device" : "NIC", n.nics > 1 ? "s" : "",
              units::format_duration(n.latency_s).c_str());
  std::printf("  GPUDirect RDMA: %s; per NIC %s\n", n.gpudirect_rdma ? "yes" : "no (traffic staged through host memory)",
              gbps(n.nic_bandwidth_bytes_per_s()).c_str());
  if (n.efa && !gpu.compute_capability.empty())
    std::printf("  NCCL over aws-ofi-nccl: %s; %s\n",
                n.nccl_simple_only ? "Simple protocol only (NCCL_PROTO=simple)" : "LL, LL128 and Simple",
                n.nccl_net_latency_s > 0
                    ? fmt::format("the plugin reports {} per message, which NCCL's model adds to each network step (twice "
                                  "under Simple)", units::format_duration(n.nccl_net_latency_s)).c_str()
                    : "no latency reported to NCCL");
  const auto& s = inst.storage;
  std::printf("storage: local NVMe %s", s.local_nvme_bytes > 0 ? fmt::format("{} ({} device{})", disk_size(s.local_nvme_bytes),
                                                                            s.nvme_devices, s.nvme_devices > 1 ? "s" : "").c_str()
                                                              : "none");
  if (s.nvme_read_bandwidth_bytes_per_s > 0) std::printf(", read %s", gb_per_s(s.nvme_read_bandwidth_bytes_per_s).c_str());
  if (s.nvme_write_bandwidth_bytes_per_s > 0) std::printf(", write %s", gb_per_s(s.nvme_write_bandwidth_bytes_per_s).c_str());
  std::printf("; EBS %s\n", s.ebs_bandwidth_bytes_per_s > 0 ? gbps(s.ebs_bandwidth_bytes_per_s).c_str() : "unknown");

  const auto& p = inst.prices;
  auto src = [&](const char* group) {
    auto it = inst.sources.find(group);
    return it == inst.sources.end() ? std::string() : source_line(cat, it->second);
  };
  std::printf("\nprices (USD per instance-hour%s):\n", p.region.empty() ? "" : (", " + p.region).c_str());
  Table pt({"", ">USD/h", "how", "source"});
  pt.add({"EC2 on-demand", p.ec2_on_demand || !inst.aws ? usd(p.ec2_on_demand, false) : "n/a",
          !p.ec2_on_demand ? (inst.aws ? "no on-demand listing (see notes)" : "not an AWS instance")
          : src("ec2_on_demand").rfind("user:", 0) == 0 ? "user price"
                                                         : "list price",
          src("ec2_on_demand")});
  pt.add({"SageMaker training", usd(p.sagemaker_on_demand, p.sagemaker_estimated),
          p.sagemaker_estimated ? fmt::format("estimated: EC2 x {:.3g}", *p.sagemaker_uplift)
          : p.sagemaker_on_demand ? "given"
                                  : "unknown",
          src("sagemaker")});
  std::string spot_how = p.spot_estimated ? fmt::format("estimated: EC2 x (1 - {:.0f}%)", *p.spot_discount * 100)
                         : p.spot_min     ? fmt::format("midpoint of samples {:.4g}-{:.4g}", *p.spot_min, *p.spot_max)
                         : p.spot         ? "given"
                                          : "unknown";
  pt.add({"spot", usd(p.spot, p.spot_estimated), spot_how, src("spot")});
  const bool bucket = !p.interruption_bucket.empty();
  pt.add({"interruption", bucket ? p.interruption_bucket : inst.aws ? "?" : "-",
          bucket ? "Spot Advisor bucket" : inst.aws ? "Spot Advisor bucket not found" : "not an AWS instance",
          src("interruption")});
  std::fputs(pt.render("  ").c_str(), stdout);
  print_instance_regions(cat, inst);

  if (!inst.notes.empty()) {
    std::printf("\nnotes:\n");
    for (const auto& note : inst.notes) std::printf("  - %s\n", note.c_str());
  }
  std::printf("\nsources (field group: id (date) - what it is):\n");
  std::set<std::string> shown;
  for (const auto& group : hw::instance_source_groups()) {
    auto it = inst.sources.find(group);
    if (it == inst.sources.end()) continue;
    std::printf("  %s: %s\n", group.c_str(), source_line(cat, it->second).c_str());
    for (const auto& id : split(it->second, '+')) shown.insert(id);
  }
  for (const auto& [group, ref] : gpu.sources) {
    std::printf("  gpu %s: %s\n", group.c_str(), source_line(cat, ref).c_str());
    for (const auto& id : split(ref, '+')) shown.insert(id);
  }
  std::printf("\n");
  for (const auto& id : shown) std::printf("  [%s] %s\n", id.c_str(), cat.source(id).description.c_str());
}

void run(const std::string& name, bool as_json, bool regions) {
  const hw::Catalog& cat = user_catalog();
  if (regions) {
    if (!name.empty()) throw Error("--regions lists every type; `trainplan catalog NAME` shows one type's regions").at("--regions").hint("give one or the other");
    if (as_json) std::fputs(json::dump(hw::region_table_json(cat.region_table())).c_str(), stdout);
    else print_regions(cat);
    return;
  }
  if (name.empty()) {
    if (as_json) {
      std::fputs(json::dump(hw::catalog_json(cat)).c_str(), stdout);
    } else {
      print_list(cat);
      print_cpu_list(cat);
      print_software_list(cat);
    }
    return;
  }
  if (const hw::CpuInstanceType* c = cat.find_cpu_instance(name)) {
    if (as_json) std::fputs(json::dump(hw::to_json(*c)).c_str(), stdout);
    else print_cpu_instance(cat, *c);
    return;
  }
  const hw::InstanceType& inst = cat.instance(name);
  if (!as_json) {
    print_instance(cat, inst);
    return;
  }
  std::fputs(json::dump(hw::instance_detail_json(cat, inst)).c_str(), stdout);
}

}  // namespace

void add_catalog_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("catalog", "List the hardware catalog, or show one instance type in detail");
  auto name = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("name", *name, "Instance type to show (e.g. p3dn.24xlarge); all when omitted");
  auto regions = std::make_shared<bool>(false);
  cmd->add_flag("--json", *as_json, "Write JSON (SI units) instead of text");
  cmd->add_flag("--regions", *regions, "Per-region EC2 on-demand price, spot samples and availability zones of each type");
  cmd->callback([name, as_json, regions] { run(*name, *as_json, *regions); });
}

}  // namespace trainplan::cli
