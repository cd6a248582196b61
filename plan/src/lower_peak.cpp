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
  // Per unit of this stage: bytes its forward keeps until its backward, and the backward's
  // excursion above that.
  std::vector<double> kept(units, 0.0), excursion(units, 0.0);
  std::vector<char> mine(units, 0);
  for (int v = 0; v < plan.vp; ++v) {
    const StageAssignment& a = plan.stages[static_cast<size_t>(v * plan.pp + stage)];
    for (int u = a.first_unit; u <= a.last_unit; ++u) mine[static_cast<size_t>(u)] = 1;
  }
  for (size_t u = 0; u < units; ++u) {
    if (!mine[u]) continue;
    const auto& ops = graph.units()[u].ops;
    std::vector<double> saved;
    std::vector<char> dropped;
    saved.reserve(ops.size());
    double total = 0;
    for (int id : ops) {
      const OpCost c = op_cost(graph.ops()[static_cast<size_t>(id)], plan.micro_batch, plan.tp, sp, prec, plan.attention);
      saved.push_back(c.saved_bytes);
      dropped.push_back(c.recomputed_by_selective ? 1 : 0);
      total += saved.back();
    }
    switch (plan.recompute) {
      case Recompute::none:
        kept[u] = total;
        break;
      case Recompute::selective: {
        double live = 0;
        for (size_t i = 0; i < ops.size(); ++i)
          if (!dropped[i]) live += saved[i];
        kept[u] = live;
        // Backward in reverse op order: a dropped op is re-materialized, then every op frees.
        const double start = live;
        for (size_t i = ops.size(); i-- > 0;) {
          if (dropped[i]) {
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
  // The schedules repeat after their warm-up, so a few micro-batches give the peak of many:
  // 1F1B holds at most pp - stage in flight and interleaved 1F1B its warm-up plus one chunk,
  // both reached within 2*pp micro-batches (m is a multiple of pp for interleaved, and m == pp
  // is its own case); GPipe keeps every forward, so its peak grows by one micro-batch's kept
  // bytes per extra micro-batch. Tested equal to the full replay.
  int64_t m = plan.num_micro_batches;
  double extra = 0;
  if (plan.schedule == Schedule::gpipe && m > 1) {
    double per_mb = 0;
    for (size_t u = 0; u < units; ++u) per_mb += kept[u];
    extra = static_cast<double>(m - 1) * per_mb;
    m = 1;
  } else if (m > 2 * static_cast<int64_t>(plan.pp) && m != plan.pp) {
    m = 2 * static_cast<int64_t>(plan.pp);
  }
  double live = 0, peak = 0;
  for (const PipelineStep& step : pipeline_order(plan.schedule, plan.pp, plan.vp, m, stage)) {
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
  return peak + extra;
}

}  // namespace trainplan::plan
