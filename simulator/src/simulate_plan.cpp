#include "trainplan/simulator/simulate_plan.hpp"

#include <chrono>

namespace trainplan::sim {

PlanSimResult simulate_plan(const plan::Plan& p, const plan::PlanContext& ctx, const PlanSimOptions& options) {
  const bool large = p.world_size() > kFullFidelityMaxGpus;
  PlanSimResult out;
  out.fidelity = options.fidelity.value_or(large ? Fidelity::symmetric : Fidelity::full);
  out.granularity = options.granularity.value_or(large ? plan::Granularity::layer : plan::Granularity::op);
  plan::LowerOptions lo;
  lo.granularity = out.granularity;
  lo.memory_events = options.memory_events;
  lo.representatives_only = out.fidelity == Fidelity::symmetric;
  lo.threads = options.threads;
  const auto t0 = std::chrono::steady_clock::now();
  const plan::StepProgram program = plan::lower(p, ctx, lo);
  out.lower_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& r : program.ranks) out.tasks += static_cast<int64_t>(r.tasks.size());
  SimOptions so = with_software(options.sim, ctx.software);
  const SimOptions from_plan = options_for(p);
  so.dp_algorithm = from_plan.dp_algorithm;
  so.precision = p.precision_or(ctx.precision);
  so.fidelity = out.fidelity;
  out.step = simulate_step(program, ctx.cluster, so);
  return out;
}

}  // namespace trainplan::sim
