// Machine-readable views of one instance type's topology and of a cluster (SI units, unit in
// the key): what `trainplan catalog NAME --json` and the Python module's cluster summary show.
#include <algorithm>
#include <map>

#include "trainplan/hwprofiles/cluster.hpp"

namespace trainplan::hw {

json::Json instance_detail_json(const Catalog& cat, const InstanceType& inst) {
  const Cluster cluster = Cluster::build(inst, 1, cat);
  json::Json doc;
  doc["instance"] = to_json(inst);
  doc["gpu"] = to_json(cat.gpu(inst.gpu));
  doc["link_matrix"] = cluster.intra_node_matrix();
  json::Json bw = json::Json::array();
  for (int a = 0; a < inst.gpu_count; ++a) {
    json::Json row = json::Json::array();
    for (int b = 0; b < inst.gpu_count; ++b)
      row.push_back(a == b ? json::Json(nullptr) : json::Json(cluster.route(a, b).bottleneck_bandwidth_bytes_per_s));
    bw.push_back(row);
  }
  doc["route_bandwidth_bytes_per_s"] = bw;
  doc["sources"] = instance_sources_json(cat, inst);
  return doc;
}

json::Json cluster_summary_json(const Cluster& cluster) {
  json::Json j;
  j["instance_type"] = cluster.instance().name;
  j["gpu"] = cluster.gpu_spec().name;
  j["nodes"] = cluster.num_nodes();
  j["gpus_per_node"] = cluster.gpus_per_node();
  j["gpus"] = cluster.num_gpus();
  std::map<std::string, int> vertices;
  for (const auto& v : cluster.vertices()) ++vertices[std::string(vertex_kind_name(v.kind))];
  j["vertices"] = vertices;
  struct Kind {
    int count = 0;
    double min_bw = 0, max_bw = 0;
  };
  std::map<std::string, Kind> kinds;
  for (const auto& l : cluster.links()) {
    auto& k = kinds[std::string(link_kind_name(l.kind))];
    k.min_bw = k.count ? std::min(k.min_bw, l.bandwidth_bytes_per_s) : l.bandwidth_bytes_per_s;
    k.max_bw = k.count ? std::max(k.max_bw, l.bandwidth_bytes_per_s) : l.bandwidth_bytes_per_s;
    ++k.count;
  }
  json::Json links = json::Json::object();
  for (const auto& [name, k] : kinds)
    links[name] = {{"directed_links", k.count}, {"min_bandwidth_bytes_per_s", k.min_bw}, {"max_bandwidth_bytes_per_s", k.max_bw}};
  j["links"] = links;
  j["link_matrix"] = cluster.intra_node_matrix();
  if (cluster.num_gpus() > 1) {
    const int far = cluster.num_nodes() > 1 ? cluster.gpus_per_node() : cluster.num_gpus() - 1;
    const Route& r = cluster.route(0, far);
    j["farthest_route"] = {{"from_gpu", 0},
                           {"to_gpu", far},
                           {"hops", r.hops},
                           {"bottleneck_bandwidth_bytes_per_s", r.bottleneck_bandwidth_bytes_per_s},
                           {"latency_s", r.latency_s}};
  }
  return j;
}

}  // namespace trainplan::hw
