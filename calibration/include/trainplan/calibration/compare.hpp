// File: trainplan/calibration/compare.hpp
//
// Measured next to predicted: one Chrome trace (Perfetto) holding the predicted and the measured
// timeline of one run as two processes, each rank's streams as threads ("rank 0 / compute"), so
// the two step times and every task line up on one time axis.
//
//   json::Json t = calibration::comparison_trace(predicted, measured, "profile.json");
//   json::write_file("compare.trace.json", t);
#pragma once

#include <string>

#include "trainplan/core/json.hpp"
#include "trainplan/plan/timeline.hpp"

namespace trainplan::calibration {

/// pid 1: "predicted (<label>)", pid 2: "measured (<measured.source>)"; tid = rank * 64 +
/// stream; complete events in microseconds with task, phase, bytes and FLOPs as args
/// (alloc / free left out).
json::Json comparison_trace(const plan::Timeline& predicted, const plan::Timeline& measured,
                            const std::string& predicted_label);

}  // namespace trainplan::calibration
