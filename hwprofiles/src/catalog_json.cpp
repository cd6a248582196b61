// Machine-readable catalog entries: SI units with the unit in the key, missing values null.
#include "trainplan/hwprofiles/catalog.hpp"

#include <set>

#include "trainplan/core/strings.hpp"

namespace trainplan::hw {
namespace {

json::Json optional_number(const std::optional<double>& v) { return v ? json::Json(*v) : json::Json(nullptr); }
json::Json prices_json(const Prices& p);

json::Json string_map(const std::map<std::string, std::string>& m, const std::vector<std::string>& order) {
  json::Json out = json::Json::object();
  for (const auto& key : order)
    if (auto it = m.find(key); it != m.end()) out[key] = it->second;
  return out;
}

}  // namespace

json::Json to_json(const Source& s) {
  json::Json j;
  j["id"] = s.id;
  j["description"] = s.description;
  j["date"] = s.date;
  j["verified"] = s.verified;
  return j;
}

json::Json to_json(const GpuSpec& g) {
  json::Json j;
  j["name"] = g.name;
  j["arch"] = g.arch;
  j["compute_capability"] = g.compute_capability;
  if (!g.executable()) j["runtime"] = g.runtime;  // "neuron": planned and simulated, not executed
  j["memory_bytes"] = g.memory_bytes;
  j["memory_type"] = g.memory_type;
  j["memory_bandwidth_bytes_per_s"] = g.memory_bandwidth_bytes_per_s;
  json::Json peaks = json::Json::object();
  for (const auto& [p, flops] : g.peak_flops) peaks[std::string(precision_name(p))] = flops;
  j["peak_flops_per_s"] = peaks;
  j["tdp_w"] = g.tdp_w;
  j["sm_count"] = g.sm_count;
  j["cublas_workspace_bytes"] = g.cublas_workspace_bytes;
  json::Json mamf = json::Json::object();
  for (const auto& [p, flops] : g.mamf_flops) mamf[std::string(precision_name(p))] = flops;
  j["mamf_flops_per_s"] = mamf;
  json::Json sustained = json::Json::object();
  for (const auto& [p, flops] : g.sustained_matmul_flops) sustained[std::string(precision_name(p))] = flops;
  j["sustained_matmul_flops_per_s"] = sustained;
  j["sources"] = string_map(g.sources, gpu_source_groups());
  j["notes"] = g.notes;
  return j;
}

json::Json to_json(const InstanceType& inst) {
  json::Json j;
  j["name"] = inst.name;
  j["family"] = inst.family;
  j["aws"] = inst.aws;
  j["description"] = inst.description;
  j["gpu"] = inst.gpu;
  j["gpu_count"] = inst.gpu_count;
  j["vcpus"] = inst.vcpus;
  j["host_memory_bytes"] = inst.host_memory_bytes;
  j["cpu"] = inst.cpu;

  const IntraNodeTopology& t = inst.topology;
  json::Json topo;
  topo["kind"] = std::string(intra_node_kind_name(t.kind));
  if (t.kind == IntraNodeKind::nvlink_mesh) {
    topo["nvlink_lanes"] = t.nvlink_lanes;
    topo["nvlink_lane_bandwidth_bytes_per_s"] = t.nvlink_lane_bandwidth_bytes_per_s;
  }
  if (t.kind == IntraNodeKind::nvswitch) topo["nvswitch_bandwidth_bytes_per_s"] = t.nvswitch_bandwidth_bytes_per_s;
  if (t.nvlink_domain_instances > 1) topo["nvlink_domain_instances"] = t.nvlink_domain_instances;
  if (t.kind == IntraNodeKind::nvlink_mesh || t.kind == IntraNodeKind::nvswitch) topo["nvlink_latency_s"] = t.nvlink_latency_s;
  topo["pcie_generation"] = t.pcie_generation;
  topo["pcie_bandwidth_bytes_per_s"] = t.pcie_bandwidth_bytes_per_s;
  topo["pcie_latency_s"] = t.pcie_latency_s;
  topo["gpus_per_pcie_switch"] = t.gpus_per_pcie_switch;
  topo["pcie_switch_uplink_bytes_per_s"] = t.pcie_switch_uplink_bytes_per_s;
  topo["sockets"] = t.sockets;
  topo["inter_socket_bandwidth_bytes_per_s"] = t.inter_socket_bandwidth_bytes_per_s;
  topo["inter_socket_latency_s"] = t.inter_socket_latency_s;
  j["topology"] = topo;

  const NetworkSpec& n = inst.network;
  json::Json net;
  net["bandwidth_bytes_per_s"] = n.bandwidth_bytes_per_s;
  net["burstable"] = n.burstable;
  net["nics"] = n.nics;
  net["efa"] = n.efa;
  net["gpudirect_rdma"] = n.gpudirect_rdma;
  net["latency_s"] = n.latency_s;
  if (n.nccl_net_latency_s > 0) net["nccl_net_latency_s"] = n.nccl_net_latency_s;
  if (n.efa) net["nccl_simple_only"] = n.nccl_simple_only;
  net["fabric"] = n.fabric;
  j["network"] = net;

  const StorageSpec& s = inst.storage;
  json::Json st;
  st["local_nvme_bytes"] = s.local_nvme_bytes;
  st["nvme_devices"] = s.nvme_devices;
  st["nvme_read_bandwidth_bytes_per_s"] = s.nvme_read_bandwidth_bytes_per_s;
  st["nvme_write_bandwidth_bytes_per_s"] = s.nvme_write_bandwidth_bytes_per_s;
  st["ebs_bandwidth_bytes_per_s"] = s.ebs_bandwidth_bytes_per_s;
  j["storage"] = st;

  j["prices"] = prices_json(inst.prices);
  j["sources"] = string_map(inst.sources, instance_source_groups());
  j["notes"] = inst.notes;
  j["file"] = inst.file;
  return j;
}

namespace {
json::Json prices_json(const Prices& p) {
  json::Json pr;
  pr["region"] = p.region;
  pr["ec2_on_demand_usd_per_hour"] = optional_number(p.ec2_on_demand);
  pr["sagemaker_on_demand_usd_per_hour"] = optional_number(p.sagemaker_on_demand);
  pr["sagemaker_estimated"] = p.sagemaker_estimated;
  pr["sagemaker_uplift"] = optional_number(p.sagemaker_uplift);
  pr["spot_usd_per_hour"] = optional_number(p.spot);
  pr["spot_min_usd_per_hour"] = optional_number(p.spot_min);
  pr["spot_max_usd_per_hour"] = optional_number(p.spot_max);
  pr["spot_estimated"] = p.spot_estimated;
  pr["spot_discount"] = optional_number(p.spot_discount);
  pr["interruption_bucket"] = p.interruption_bucket.empty() ? json::Json(nullptr) : json::Json(p.interruption_bucket);
  if (p.capacity_block) pr["capacity_block_usd_per_hour"] = *p.capacity_block;
  return pr;
}
}  // namespace

json::Json to_json(const CpuInstanceType& c) {
  json::Json j;
  j["name"] = c.name;
  j["family"] = c.family;
  j["gpu_count"] = 0;
  j["description"] = c.description;
  j["cpu"] = c.cpu;
  j["vcpus"] = c.vcpus;
  j["cores"] = c.cores;
  j["host_memory_bytes"] = c.host_memory_bytes;
  j["network"] = {{"bandwidth_bytes_per_s", c.network.bandwidth_bytes_per_s},
                  {"burst_bandwidth_bytes_per_s", c.burst_bandwidth_bytes_per_s},
                  {"burstable", c.network.burstable},
                  {"latency_s", c.network.latency_s},
                  {"fabric", c.network.fabric}};
  j["prices"] = prices_json(c.prices);
  j["sources"] = c.sources;
  j["notes"] = c.notes;
  j["file"] = c.file;
  return j;
}

json::Json catalog_json(const Catalog& cat) {
  json::Json doc;
  doc["instances"] = json::Json::array();
  for (const auto& n : cat.instance_names()) doc["instances"].push_back(to_json(cat.instance(n)));
  json::Json gpus = json::Json::object();
  for (const auto& g : cat.gpu_names()) gpus[g] = to_json(cat.gpu(g));
  doc["gpus"] = gpus;
  doc["cpu_instances"] = json::Json::array();
  for (const auto& n : cat.cpu_instance_names()) doc["cpu_instances"].push_back(to_json(cat.cpu_instance(n)));
  json::Json sources = json::Json::object();
  for (const auto& [id, s] : cat.sources()) sources[id] = to_json(s);
  doc["sources"] = sources;
  doc["regions"] = region_table_json(cat.region_table());
  json::Json software = json::Json::object();
  for (const auto& [name, s] : cat.software_stacks()) {
    json::Json kernels = json::Json::object();
    for (const auto& [op_class, scale] : s.kernels) kernels[op_class] = scale;
    json::Json src = json::Json::object();
    for (const auto& [field, ref] : s.sources) src[field] = ref;
    json::Json grad_reduce = json::Json::object();
    for (const auto& [from, to] : s.grad_reduce) grad_reduce[std::string(precision_name(from))] = std::string(precision_name(to));
    software[name] = {{"description", s.description}, {"launch_s", s.launch_s}, {"kernel_gap_s", s.kernel_gap_s},
                      {"layer_hook_s", s.layer_hook_s}, {"micro_batch_s", s.micro_batch_s}, {"step_s", s.step_s},
                      {"sync_before_optimizer", s.sync_before_optimizer}, {"zero3_tensor_sync", s.zero3_tensor_sync},
                      {"zero3_tensor_issue_s", s.zero3_tensor_issue_s}, {"zero3_rank_view_s", s.zero3_rank_view_s},
                      {"zero3_rank_copy_s", s.zero3_rank_copy_s},
                      {"zero3_recompute_gathers", s.zero3_recompute_gathers},
                      {"fused_attention", s.fused_attention.empty() ? "gpu-best" : s.fused_attention}, {"grad_reduce", grad_reduce},
                      {"fp32_main_grads", s.fp32_main_grads}, {"grad_epilogue", s.grad_epilogue}, {"kernels", kernels}, {"sources", src}};
  }
  doc["software"] = software;
  doc["selected_region"] = cat.region().empty() ? std::string(kCatalogRegion) : cat.region();
  return doc;
}

json::Json region_table_json(const RegionTable& table) {
  json::Json instances = json::Json::object();
  for (const auto& [type, regions] : table.instances) {
    json::Json per = json::Json::object();
    for (const auto& [region, o] : regions) {
      json::Json e = {{"zones", o.zones}};
      if (o.ec2_on_demand) e["ec2_on_demand_usd_per_hour"] = *o.ec2_on_demand;
      if (o.spot_min) e["spot_min_usd_per_hour"] = *o.spot_min;
      if (o.spot_max) e["spot_max_usd_per_hour"] = *o.spot_max;
      per[region] = e;
    }
    instances[type] = per;
  }
  return {{"names", table.names}, {"source", table.source}, {"instances", instances}, {"notes", table.notes}};
}

json::Json instance_sources_json(const Catalog& cat, const InstanceType& inst) {
  std::set<std::string> ids;
  for (const auto& [group, ref] : inst.sources)
    for (const auto& id : split(ref, '+')) ids.insert(id);
  for (const auto& [group, ref] : cat.gpu(inst.gpu).sources)
    for (const auto& id : split(ref, '+')) ids.insert(id);
  json::Json out = json::Json::object();
  for (const auto& id : ids) out[id] = to_json(cat.source(id));
  return out;
}

}  // namespace trainplan::hw
