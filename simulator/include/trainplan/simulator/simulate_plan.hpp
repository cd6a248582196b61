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

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

/// The options of `trainplan simulate` as typed (the Python module's simulate() keywords);
/// plan_sim_options() checks and applies them.
struct SimulateRequest {
  std::string fidelity = "auto";     // auto, full, symmetric
  std::string granularity = "auto";  // auto, op, layer
  std::string calibration;           // a calibration table file (empty: the defaults)
  double straggler_stddev = 0;       // [0, kMaxStragglerStddev]
  uint64_t seed = 1;                 // of the straggler jitter
  double overlap_slowdown = 0;       // [0, kMaxOverlapSlowdown]
  std::string trace_ranks = "auto";  // see timeline_ranks
};
inline constexpr double kMaxStragglerStddev = 1;
inline constexpr double kMaxOverlapSlowdown = 10;
/// Above this many GPUs the trace and timeline hold one data-parallel replica by default.
inline constexpr int kTraceAllRanksUpTo = 64;

/// Ranks whose events a recorded timeline keeps: "all", "auto" (every rank up to
/// kTraceAllRanksUpTo GPUs; above, in data-parallel replica 0 (cp 0): the first stage's tp
/// group and tp rank 0 of every later stage, which shows every kind of task and the whole
/// pipeline) or a list such as "0,8-15". Returns the ranks (empty: all) and a description.
/// Errors name `--trace-ranks`.
std::pair<std::vector<int>, std::string> timeline_ranks(const std::string& spec, const plan::Plan& plan);

/// The simulator options of `request` for `plan` (validated against `ctx`): every bound and
/// choice of `trainplan simulate`'s flags checked (Errors name the flag), the calibration
/// table read (read_calibration_for), the timeline recorded when `record_timeline`, for the
/// ranks of timeline_ranks (whose description goes to `*shown_ranks` when given).
/// What a simulation was calibrated with, as outputs name it: "uncalibrated (...)" for "", else
/// "calibration table PATH".
std::string calibration_description(const std::string& calibration_table);

PlanSimOptions plan_sim_options(const SimulateRequest& request, const plan::Plan& plan, const plan::PlanContext& ctx,
                                bool record_timeline, std::string* shown_ranks = nullptr);

}  // namespace trainplan::sim
