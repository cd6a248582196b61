// The step-time breakdown of one rank from its task intervals (see Breakdown in simulate.hpp
// for the categories).
#pragma once

#include <vector>

#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/simulate.hpp"

namespace trainplan::sim::detail {

enum class IntervalKind { compute, optimizer, comm, pp_wait };

struct Interval {
  double start_s = 0;
  double end_s = 0;
  IntervalKind kind = IntervalKind::compute;
  plan::CommPurpose purpose = plan::CommPurpose::none;  // comm only
};

/// Classifies every instant of [0, step_time_s] (see Breakdown). Intervals may overlap.
Breakdown classify(const std::vector<Interval>& intervals, double step_time_s, int rank);

}  // namespace trainplan::sim::detail
