// File: trainplan/calibration/validate.hpp
//
// Checks predictions against published measurements (the format of
// ../shared/validation/published-results.json): every training-throughput point that maps
// onto a catalog cluster is turned into a plan and predicted by the simulator (and, when the
// caller supplies one, by an analytical estimate); every collective benchmark is simulated on
// its cluster; SMDDP-vs-DDP speedups and Horovod scaling efficiencies are ratios of two
// simulations of one plan under the two settings. Points that cannot be mapped are kept with
// the reason.
//
//   calibration::ValidationOptions o;
//   o.analytical_step_s = [](const plan::Plan& p, const plan::PlanContext& ctx) {
//     return planner::estimate_step(p, ctx).step_time_s;  // wired by the CLI (planner is above)
//   };
//   calibration::ValidationReport r = calibration::validate_published("published-results.json", catalog, o);
//   for (const auto& s : r.sources) s.title, s.mape, s.points;
//   json::write_file("validation.json", calibration::to_json(r));
//
// The analytical estimate lives in planner/, which sits above calibration/ (ARCHITECTURE.md),
// so it comes in as a callback: without one the analytical columns are absent
// (ValidationReport::analytical is false, to_json leaves them out).
//
// Convention: training points are compared on the step time (seconds per optimizer step),
// the quantity every source measured; a source's TFLOP/s are converted back to a step time
// with that source's own FLOP formula (e.g. Narayanan et al.'s 96·B·s·l·h²(1 + s/6h + V/16lh),
// which counts the recomputed forward: hardware FLOPs), tokens/s with the global batch's
// tokens. Model TFLOP/s per GPU (6N + attention, no recomputation) are then recomputed from
// the measured and the predicted step time on one convention. Collectives are compared on
// nccl-tests bus bandwidth (busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for
// all-gather).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::calibration {

/// Whether a published value is a measurement or only a bound on the quantity.
enum class PublishedBound { none, lower, upper };

struct ValidationPoint {
  std::string id;
  std::string kind;          // training_throughput, collective_benchmark, ...
  std::string source;        // source title
  std::string locator;
  std::string verification;
  bool mapped = false;
  std::string reason;        // why not mapped
  std::string cluster;       // "16 x dgx-a100-80gb"
  std::string setup;         // "gpt3-175b tp8 pp12 dp4 mb1 full recompute"
  std::vector<std::string> assumptions;  // what the point leaves open and we assumed
  std::string metric;        // "step_time_s", "busbw_GBps", "throughput_ratio" or "scaling_efficiency"
  std::string measured_from; // how the measured value was obtained (the FLOP convention)
  double measured = 0;
  double predicted = 0;      // simulator
  double predicted_analytical = 0;  // analytical estimate (training points; 0 without one)
  double error = 0;          // (predicted - measured) / measured
  double error_analytical = 0;
  bool fits_memory = true;   // our memory model's verdict on the published plan
  double peak_memory_bytes = 0;      // predicted peak per GPU (plan::peak_memory)
  double memory_capacity_bytes = 0;
  std::string framework;     // software stack named by the source (NeMo, Megatron-LM, ...)
  std::string gpu;           // catalog GPU of the mapped cluster
  int num_gpus = 0;
  int gpus_per_node = 0;
  double model_tflops_measured = 0;   // per GPU, one convention (6N + attention)
  double model_tflops_predicted = 0;
  /// The source says the published value only bounds what the system does (see
  /// published_bound): `lower` = the true value of the compared metric is at least `measured`,
  /// `upper` = at most. A bound point is no estimate of the metric, so it stays out of MAPE
  /// and bias; `bound_consistent` says whether the prediction lies on the bound's side.
  PublishedBound bound = PublishedBound::none;
  bool bound_consistent = false;
};

struct SourceSummary {
  std::string title;
  std::string metric;
  int points = 0;
  int unmapped = 0;
  double mape = 0;             // simulator, on the metric (step time or busbw)
  double mape_analytical = 0;  // analytical estimate (training points)
  /// Training: MAPE of the throughput (TFLOP/s per GPU = work / step time), i.e. the mean of
  /// |measured step / predicted step - 1|.
  double mape_throughput = 0;
  double mean_error = 0;       // signed: > 0 over-predicts the metric
  int bounds = 0;              // mapped points that are bounds (left out of points, MAPE and bias)
  int bounds_consistent = 0;   // of those, predicted on the bound's side
};

struct ValidationReport {
  std::string file;
  std::vector<ValidationPoint> points;
  std::vector<SourceSummary> sources;
  /// Over all mapped training points (step time) and collective points (busbw).
  SourceSummary training;
  SourceSummary collectives;
  /// Data-parallel library points (relative_speedup: SMDDP vs PyTorch DDP throughput ratio;
  /// scaling_efficiency: Horovod on n GPUs vs one), each compared as a ratio of two simulations.
  SourceSummary libraries;
  /// Whether training points carry an analytical estimate (ValidationOptions::analytical_step_s).
  bool analytical = false;
  /// Mapped training points by group: "single node" / "multi-node", "GPU <generation>",
  /// "framework <stack>", sorted by name.
  std::vector<SourceSummary> groups;
  /// Leave-one-source-out MAPE is defined (no calibration table): it equals training.mape,
  /// since no constant of the uncalibrated model is set from a validation point.
  bool loso_available = false;
};

struct ValidationOptions {
  int threads = 0;
  std::shared_ptr<const sim::CalibrationTable> calibration;  // none: uncalibrated
  /// Applies the calibration of a point's GPU type (a profile) to its simulator options; set
  /// by front ends that load profiles (trainplan validate: planner/calibrated.hpp). Returns
  /// whether it calibrated anything. Called from several threads at once.
  std::function<bool(const hw::GpuSpec&, sim::SimOptions&)> calibrate;
  /// Only points whose id contains this (empty: all).
  std::string filter;
  /// The analytical step time (seconds) of a mapped training point's plan, or none. Called from
  /// several threads at once (`threads`); an Error it throws unmaps the point with its message.
  std::function<double(const plan::Plan&, const plan::PlanContext&)> analytical_step_s;
};

ValidationReport validate_published(const std::string& path, const hw::Catalog& catalog, const ValidationOptions& options = {});
ValidationReport validate_published_json(const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                                         const ValidationOptions& options = {});
json::Json to_json(const ValidationReport& report);

/// What a point's notes say its published value is: a lower or an upper bound on the quantity
/// it reports (busbw, throughput or step time, as published), or a measurement (`none`). A note
/// that scopes the bound to node counts ("treat 3-4 node values as lower bounds", "the 2-node
/// value is an upper bound") applies to the points on those many nodes (num_gpus /
/// gpus_per_node) only; an unscoped "lower bound" / "upper bound" to the point itself.
PublishedBound published_bound(const json::Json& point);

/// The year a published point ran: the first four-digit year of its source date ("2021-04",
/// "2023-2024"), else a container or framework release "YY.MM" ("25.11" is 2025) in the date,
/// source title, locator, notes or architecture notes, else a four-digit year there.
std::optional<int> published_year(const json::Json& point);

}  // namespace trainplan::calibration
