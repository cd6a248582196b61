// activation_peak_bytes(): the activation peak of a lowered step without lowering it. Each
// unit contributes what its forward leaves allocated and how far its backward rises above
// that (recomputation allocates before the frees); the schedule is replayed with those.
#include <algorithm>

#include "lower.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::plan {

double activation_peak_bytes(const Plan& plan, const PlanContext& ctx, int stage) {
  TP_ASSERT(stage >= 0 && stage < plan.pp);
  TP_ASSERT(plan.stages.size() == static_cast<size_t>(plan.pp * plan.vp));
  const auto& graph = ctx.graph;
  const Precision prec = plan.precision_or(ctx.precision);
  const bool sp = plan.sequence_parallel && plan.tp > 1;
  const size_t units = graph.units().size();
  // Per unit: bytes its forward keeps until its backward, and the backward's excursion.
  std::vector<double> kept(units, 0.0), excursion(units, 0.0);
  for (size_t u = 0; u < units; ++u) {
    const auto& ops = graph.units()[u].ops;
    std::vector<double> saved;
    saved.reserve(ops.size());
    double total = 0;
    for (int id : ops) {
      saved.push_back(detail::op_cost(graph.ops()[static_cast<size_t>(id)], plan.micro_batch, plan.tp, sp, prec).saved_bytes);
      total += saved.back();
    }
    switch (plan.recompute) {
      case Recompute::none:
        kept[u] = total;
        break;
      case Recompute::selective: {
        double live = 0;
        for (size_t i = 0; i < ops.size(); ++i)
          if (!graph.ops()[static_cast<size_t>(ops[i])].dropped_by_selective_recompute) live += saved[i];
        kept[u] = live;
        // Backward in reverse op order: a dropped op is re-materialized, then every op frees.
        const double start = live;
        for (size_t i = ops.size(); i-- > 0;) {
          if (graph.ops()[static_cast<size_t>(ops[i])].dropped_by_selective_recompute) {
            live += saved[i];
            excursion[u] = std::max(excursion[u], live - start);
          }
          live -= saved[i];
        }
        break;
      }
      case Recompute::full:
        if (u > 0) {
          const double in = graph.units()[u - 1].output_elems * bytes_per_element(prec) * static_cast<double>(plan.micro_batch);
          kept[u] = sp ? in / plan.tp : in;
        }
        excursion[u] = total;
        break;
    }
  }
  double live = 0, peak = 0;
  for (const PipelineStep& step : pipeline_order(plan.schedule, plan.pp, plan.vp, plan.num_micro_batches, stage)) {
    const StageAssignment& a = plan.stages[static_cast<size_t>(step.chunk * plan.pp + stage)];
    if (step.phase == Phase::forward) {
      for (int u = a.first_unit; u <= a.last_unit; ++u) live += kept[static_cast<size_t>(u)];
      peak = std::max(peak, live);
    } else {
      for (int u = a.last_unit; u >= a.first_unit; --u) {
        peak = std::max(peak, live + excursion[static_cast<size_t>(u)]);
        live -= kept[static_cast<size_t>(u)];
      }
    }
  }
  return peak;
}

}  // namespace trainplan::plan
