// JSON views of the simulator's options and results (deterministic: no wall time).
#include <string>

#include "trainplan/simulator/simulate.hpp"

namespace trainplan::sim {
namespace {

json::Json array_of(const std::vector<double>& v) {
  json::Json a = json::Json::array();
  for (double x : v) a.push_back(x);
  return a;
}

json::Json by_purpose(const std::array<double, kNumPurposes>& v) {
  json::Json o = json::Json::object();
  for (int p = 0; p < kNumPurposes; ++p)
    o[std::string(plan::comm_purpose_name(static_cast<plan::CommPurpose>(p)))] = v[static_cast<size_t>(p)];
  return o;
}

}  // namespace

json::Json to_json(const Breakdown& b) {
  json::Json j;
  j["critical_rank"] = b.critical_rank;
  j["step_time_s"] = b.step_time_s;
  j["compute_s"] = b.compute_s;
  j["optimizer_s"] = b.optimizer_s;
  j["bubble_s"] = b.bubble_s;
  j["exposed_comm_s"] = by_purpose(b.exposed_comm_s);
  j["exposed_comm_total_s"] = b.exposed_comm_total_s();
  j["other_s"] = b.other_s;
  return j;
}

json::Json to_json(const SimOptions& o) {
  json::Json j;
  j["fidelity"] = std::string(fidelity_name(o.fidelity));
  j["dp_algorithm"] = std::string(plan::dp_algorithm_name(o.dp_algorithm));
  j["other_algorithm"] = std::string(collective_algorithm_name(o.other_algorithm));
  if (o.precision) j["precision"] = std::string(precision_name(*o.precision));
  json::Json c;
  c["gemm_efficiency"] = o.compute.gemm_efficiency;
  if (o.compute.gemm_efficiency_scale != 1) c["gemm_efficiency_scale"] = o.compute.gemm_efficiency_scale;
  c["attention_efficiency"] = o.compute.attention_efficiency;
  c["memory_efficiency"] = o.compute.memory_efficiency;
  c["vector_efficiency"] = o.compute.vector_efficiency;
  c["gemm_shape_effects"] = o.compute.gemm_shape_effects;
  c["kernel_overhead_s"] = o.compute.kernel_overhead_s;
  j["compute"] = std::move(c);
  if (o.calibration) {
    json::Json cal;
    cal["gpu"] = o.calibration->gpu;
    cal["source"] = o.calibration->source;
    cal["entries"] = static_cast<int64_t>(o.calibration->entries().size());
    j["calibration"] = std::move(cal);
  }
  j["overlap_slowdown"] = o.overlap_slowdown;
  j["comm_launch_s"] = o.comm_launch_s;
  j["straggler_stddev"] = o.straggler_stddev;
  j["straggler_seed"] = o.straggler_seed;
  j["record_timeline"] = o.record_timeline;
  if (!o.timeline_ranks.empty()) j["timeline_ranks"] = o.timeline_ranks;
  return j;
}

json::Json to_json(const StepResult& r) {
  json::Json j;
  j["step_time_s"] = r.step_time_s;
  j["breakdown"] = to_json(r.breakdown);
  j["peak_memory_bytes"] = array_of(r.peak_memory_bytes);
  j["gpu_utilization"] = array_of(r.gpu_utilization);
  j["flops_utilization"] = array_of(r.flops_utilization);
  j["bytes_sent"] = array_of(r.bytes_sent);
  j["bytes_received"] = array_of(r.bytes_received);
  j["bytes_sent_by_purpose"] = by_purpose(r.bytes_sent_by_purpose);
  if (r.inter_az_bytes > 0) j["inter_az_bytes"] = r.inter_az_bytes;  // only for plans across AZs
  json::Json s;
  s["events"] = r.stats.events;
  s["tasks_simulated"] = r.stats.tasks_simulated;
  s["ranks_simulated"] = r.stats.ranks_simulated;
  s["comm_instances"] = r.stats.comm_instances;
  s["coflows"] = r.stats.coflows;
  s["rate_recomputations"] = r.stats.rate_recomputations;
  j["stats"] = std::move(s);
  return j;
}

}  // namespace trainplan::sim
