// A plan's memory per stage and analytical estimate as JSON (`trainplan check` in numbers).
#include "trainplan/planner/check.hpp"

#include <cmath>

#include "trainplan/planner/search.hpp"

namespace trainplan::planner {

json::Json to_json(const plan::MemoryBreakdown& m) {
  return {{"stage", m.stage},
          {"params_on_rank", m.params_on_rank},
          {"weights_bytes", m.weights_bytes},
          {"gradients_bytes", m.gradients_bytes},
          {"optimizer_bytes", m.optimizer_bytes},
          {"activations_bytes", m.activations_bytes},
          {"micro_batches_in_flight", m.micro_batches_in_flight},
          {"workspace_bytes", m.workspace_bytes},
          {"comm_buffer_bytes", m.comm_buffer_bytes},
          {"framework_bytes", m.framework_bytes},
          {"total_bytes", m.total_bytes()},
          {"capacity_bytes", m.capacity_bytes},
          {"fits", m.fits()}};
}

json::Json to_json(const StepEstimate& e) {
  json::Json comm = json::Json::object();
  for (auto purpose : plan::kCommPurposes) comm[std::string(plan::comm_purpose_name(purpose))] = e.exposed_comm_s(purpose);
  return {{"step_time_s", e.step_time_s},
          {"compute_s", e.compute_s},
          {"recompute_s", e.recompute_s},
          {"bubble_s", e.bubble_s},
          {"optimizer_s", e.optimizer_s},
          {"host_s", e.host_s},
          {"exposed_comm_s", comm},
          {"exposed_comm_total_s", e.exposed_comm_total_s()},
          {"model_flops_per_step", e.model_flops_per_step},
          {"hardware_flops_per_step", e.hardware_flops_per_step},
          {"tokens_per_s", e.tokens_per_s},
          {"mfu", e.mfu},
          {"hfu", e.hfu}};
}

json::Json check_json(const plan::Plan& p, const plan::PlanContext& ctx) {
  json::Json j;
  j["model"] = ctx.model_spec.name;
  j["instance_type"] = p.instance_type;
  j["instance_count"] = p.instance_count;
  j["gpus"] = ctx.cluster.num_gpus();
  j["software"] = ctx.software.name;
  json::Json stages = json::Json::array();
  bool fits = true;
  for (const auto& m : plan::memory_per_stage(p, ctx)) {
    fits = fits && m.fits();
    stages.push_back(to_json(m));
  }
  j["memory_per_stage"] = stages;
  j["fits"] = fits;
  j["peak_memory_bytes"] = plan::peak_memory(p, ctx).total_bytes();
  const StepEstimate e = estimate_step(p, ctx);
  j["estimate"] = to_json(e);
  if (p.training_tokens > 0) {
    const double steps = std::ceil(p.training_tokens / (static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample()));
    const double t = steps * e.step_time_s;
    j["training_tokens"] = p.training_tokens;
    j["steps"] = steps;
    j["time_to_train_s"] = t;
    const auto price = on_demand_price(*ctx.instance, p.platform);
    j["cost_on_demand_usd"] = price ? json::Json(t / 3600.0 * *price * p.instance_count) : json::Json(nullptr);
  }
  return j;
}

}  // namespace trainplan::planner
