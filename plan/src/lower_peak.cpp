// activation_peak_bytes(): the activation peak of a lowered step without lowering it. Each
// unit contributes what its forward leaves allocated and how far its forward and its backward
// rise above that (unit_activation_profile: recomputation, context parallelism's gathered
// K, V); the schedule is replayed with those.
#include <algorithm>

#include "lower.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/plan/memory.hpp"

namespace trainplan::plan {

UnitActivationProfile unit_activation_profile(const Plan& plan, const PlanContext& ctx, int unit) {
  const auto& graph = ctx.graph;
  const Precision prec = plan.precision_or(ctx.precision);
  const bool sp = plan.sequence_parallel && plan.tp > 1;
  const auto& ops = graph.units()[static_cast<size_t>(unit)].ops;
  const bool selective = plan.recompute == Recompute::selective;
  const bool full = unit_recompute(plan.recompute, graph.units()[static_cast<size_t>(unit)]) == Recompute::full;
  std::vector<OpCost> costs;
  costs.reserve(ops.size());
  for (int id : ops) costs.push_back(op_cost(graph.ops()[static_cast<size_t>(id)], plan, prec));
  // The unit's input under full recomputation (unit 0's are token ids: nothing).
  const double checkpoint = full ? unit_activation_bytes(graph, unit, plan.micro_batch, plan.tp, sp, Recompute::full, prec,
                                                         plan.attention, plan.cp)
                                 : 0.0;
  // The lowering's order (lower_templates.cpp). Forward: each op allocates what it keeps right
  // before it runs (selective: not the dropped ops; full: only the checkpoint, at the start);
  // cp's gathered K, V is allocated before the attention and freed right after it.
  double live = checkpoint, peak = checkpoint;
  for (const OpCost& c : costs) {
    if (!full && !(selective && c.recomputed_by_selective)) live += c.saved_bytes;
    peak = std::max(peak, live + c.cp_kv_bytes);
  }
  UnitActivationProfile out;
  out.kept_bytes = live;
  out.forward_rise_bytes = peak - live;
  // Backward, starting from what the forward kept. Full recomputation first re-runs the
  // forward, allocating every op (and gathering K, V again around the attention).
  const double kept = live;
  peak = kept;
  if (full)
    for (const OpCost& c : costs) {
      live += c.saved_bytes;
      peak = std::max(peak, live + c.cp_kv_bytes);
    }
  // cp: K, V are gathered again at the start of the unit's backward (prefetched, overlapping
  // the backward of the ops after the attention) and held until the attention's backward ends.
  double gathered = 0;
  for (const OpCost& c : costs) gathered += c.cp_kv_bytes;
  live += gathered;
  peak = std::max(peak, live);
  for (auto it = costs.rbegin(); it != costs.rend(); ++it) {
    const OpCost& c = *it;
    if (selective && c.recomputed_by_selective) live += c.saved_bytes;  // re-materialized before its backward
    live += c.cp_kv_bytes;                                              // dK, dV of the whole sequence
    peak = std::max(peak, live);
    live -= c.saved_bytes;                                              // released after its backward
    live -= 2.0 * c.cp_kv_bytes;                                        // the gathered K, V; dK, dV after the reduce-scatter
  }
  out.backward_rise_bytes = peak - kept;
  return out;
}

double activation_peak_bytes(const Plan& plan, const PlanContext& ctx, int stage) {
  TP_ASSERT(stage >= 0 && stage < plan.pp);
  TP_ASSERT(plan.stages.size() == static_cast<size_t>(plan.pp * plan.vp));
  const size_t units = ctx.graph.units().size();
  // Per unit of this stage: bytes its forward keeps until its backward, and the forward's and
  // the backward's excursions above that.
  std::vector<double> kept(units, 0.0), forward_rise(units, 0.0), backward_rise(units, 0.0);
  for (int v = 0; v < plan.vp; ++v) {
    const StageAssignment& a = plan.stages[static_cast<size_t>(v * plan.pp + stage)];
    for (int u = a.first_unit; u <= a.last_unit; ++u) {
      const UnitActivationProfile prof = unit_activation_profile(plan, ctx, u);
      kept[static_cast<size_t>(u)] = prof.kept_bytes;
      forward_rise[static_cast<size_t>(u)] = prof.forward_rise_bytes;
      backward_rise[static_cast<size_t>(u)] = prof.backward_rise_bytes;
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
      for (int u = a.first_unit; u <= a.last_unit; ++u) {
        peak = std::max(peak, live + kept[static_cast<size_t>(u)] + forward_rise[static_cast<size_t>(u)]);
        live += kept[static_cast<size_t>(u)];
      }
    } else {
      for (int u = a.last_unit; u >= a.first_unit; --u) {
        peak = std::max(peak, live + backward_rise[static_cast<size_t>(u)]);
        live -= kept[static_cast<size_t>(u)];
      }
    }
  }
  return peak + extra;
}

}  // namespace trainplan::plan
