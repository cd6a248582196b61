// What front ends need around simulate_plan: the result as JSON with the MFU, and a
// calibration table checked against the plan's GPU and precision.
#include <fmt/format.h>

#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::sim {

double simulated_mfu(const plan::Plan& p, const plan::PlanContext& ctx, double step_time_s) {
  const double peak = ctx.gpu->peak_flops_per_s(p.precision_or(ctx.precision));
  const double model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  return model_flops / (step_time_s * p.world_size() * peak);
}

json::Json to_json(const PlanSimResult& r, const plan::Plan& p, const plan::PlanContext& ctx) {
  json::Json j = to_json(r.step);
  j["fidelity"] = std::string(fidelity_name(r.fidelity));
  j["granularity"] = r.granularity == plan::Granularity::op ? "op" : "layer";
  j["mfu"] = simulated_mfu(p, ctx, r.step.step_time_s);
  return j;
}

std::shared_ptr<const CalibrationTable> read_calibration_for(const std::string& path, const plan::Plan& p,
                                                             const plan::PlanContext& ctx) {
  auto cal = std::make_shared<CalibrationTable>(CalibrationTable::read_file(path));
  const Precision want = p.precision_or(ctx.precision);
  if (!cal->gpu.empty() && cal->gpu != ctx.gpu->name)
    throw Error(fmt::format("the calibration table is for {}, the plan runs on {}", cal->gpu, ctx.gpu->name))
        .at(path, "/gpu")
        .hint("use the calibration profile measured on this GPU type (scripts/device-check.sh writes one per GPU)");
  if (cal->precision && *cal->precision != want)
    throw Error(fmt::format("the calibration table is for {}, the plan trains in {}", precision_name(*cal->precision),
                            precision_name(want)))
        .at(path, "/precision")
        .hint("use the calibration profile measured in the plan's precision");
  return cal;
}

}  // namespace trainplan::sim
