// File: trainplan/calibration/published.hpp
//
// Published measured runs (the `../shared/validation/published-results.json` format) as
// calibration input: the step times that others measured on a catalog GPU fit the one compute
// parameter that step times identify, the large-GEMM efficiency relative to the simulator's
// default (sim::ComputeModelOptions::gemm_efficiency_scale: what the software stack reaches
// against the MAMF microbenchmark).
//
//   calibration::Profile p = calibration::catalog_gpu_profile(catalog.gpu("H100-SXM5-80GB"));
//   calibration::PublishedFit f = calibration::fit_published(p, doc, "published-results.json", catalog);
//   p.gemm_efficiency_scale;  // fitted; p.fit has the group with train / held-back errors
//
// How: each training-throughput point that maps onto the profile's GPU (validate_published()'s
// mapping: the plan the source states, its step time from its own FLOP convention) is
// simulated as `trainplan validate` simulates it. A step time is, to first order, linear in
// x = 1 / scale (compute scales with 1 / efficiency; communication and the bubble do not), so
// two simulations per point (scale 1 and 0.8) give a surrogate t_i(x) = a_i + b_i x; the
// scale minimizes the Huber loss of log(t_i(x) / measured_i) over the training points
// (golden-section search), then the surrogate is rebuilt around the estimate and the search
// repeated. Every reported error comes from a full simulation at the final scale, never from
// the surrogate. One point in `heldout_every` (by a hash of its id) is held back and scored.
//
// Fitting to published runs is the user's choice for their own runs; the default profiles that
// trainplan ships are fitted from measurements only (calibration/profiles/README.md).
#pragma once

#include <string>
#include <vector>

#include "trainplan/calibration/profile.hpp"
#include "trainplan/calibration/validate.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::calibration {

struct PublishedPointFit {
  std::string id;
  std::string setup;     // "gpt3-175b tp8 pp12 dp4 mb1 full recompute"
  double measured_s = 0;
  double before_s = 0;   // the simulator without the fit (scale 1)
  double after_s = 0;    // with the fitted scale
  bool heldout = false;
};

struct PublishedFit {
  std::string gpu;
  std::vector<PublishedPointFit> points;
  int simulations = 0;   // full validation passes run
  int other_points = 0;  // training points of the document on other GPU types (not used)
};

/// Whether a JSON document is in the published-results format (an object with "data_points").
bool is_published_results(const json::Json& doc);

/// Fits p.gemm_efficiency_scale to the document's training-throughput points on p.hardware (a
/// catalog GPU) and appends the fit group. `base` carries threads and a calibration hook for
/// other parameters (left as given). Throws Error (at `name`) when fewer than two points map
/// onto that GPU, naming the GPUs that have points.
PublishedFit fit_published(Profile& p, const json::Json& doc, const std::string& name, const hw::Catalog& catalog,
                           const FitOptions& options = {}, const ValidationOptions& base = {});

}  // namespace trainplan::calibration
