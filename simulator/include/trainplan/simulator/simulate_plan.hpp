// File: trainplan/simulator/simulate_plan.hpp
//
// One call from a validated plan to a simulated step: lowers the plan (plan::lower) with the
// granularity and fidelity that suit its size, then simulates it (simulate_step).
//
//   sim::PlanSimResult r = sim::simulate_plan(plan, ctx);        // automatic choices
//   r.step.step_time_s; r.step.breakdown; r.fidelity; r.granularity; r.tasks
//
// Automatic choices: up to kFullFidelityMaxGpus GPUs every rank is lowered op by op and
// simulated; above, one rank per symmetry class is lowered layer by layer and simulated with
// symmetric fidelity (exact for the symmetric programs lowering produces; tested).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::sim {

inline constexpr int kFullFidelityMaxGpus = 64;

struct PlanSimOptions {
  std::optional<Fidelity> fidelity;               // unset: automatic
  std::optional<plan::Granularity> granularity;   // unset: automatic
  /// Base simulator options; dp_algorithm and precision are taken from the plan.
  SimOptions sim;
  /// Keep alloc/free events (peak memory per rank); off makes large runs cheaper.
  bool memory_events = true;
  /// Threads for lowering (0: all cores).
  int threads = 1;
};

struct PlanSimResult {
  StepResult step;
  Fidelity fidelity = Fidelity::full;
  plan::Granularity granularity = plan::Granularity::op;
  int64_t tasks = 0;          // tasks lowered (all ranks, or the representatives)
  double lower_wall_s = 0;    // not deterministic; never written to JSON
};

/// Lowers and simulates `plan` (validated against `ctx`). Deterministic.
PlanSimResult simulate_plan(const plan::Plan& plan, const plan::PlanContext& ctx, const PlanSimOptions& options = {});

/// Model FLOPs utilization of a simulated step: the model's training FLOPs (6N + attention,
/// no recomputation) of the global batch / (step time x GPUs x the dense peak of the plan's
/// precision).
double simulated_mfu(const plan::Plan& plan, const plan::PlanContext& ctx, double step_time_s);

/// The result as `trainplan simulate --json` writes it: to_json(StepResult) plus "fidelity",
/// "granularity" and "mfu".
json::Json to_json(const PlanSimResult& result, const plan::Plan& plan, const plan::PlanContext& ctx);

/// Reads a calibration table for simulating `plan`: Error (at the table's /gpu or /precision)
/// when it was measured on another GPU type or in another precision.
std::shared_ptr<const CalibrationTable> read_calibration_for(const std::string& path, const plan::Plan& plan,
                                                             const plan::PlanContext& ctx);

}  // namespace trainplan::sim
