// Small statistics shared by the spot trace fitter and the Monte Carlo (private).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace trainplan::sim::detail {

/// z of a two-sided 95% normal interval.
inline constexpr double kZ95 = 1.959963984540054;

/// Quantile q in [0, 1] of sorted, non-empty data, interpolating linearly between order
/// statistics (Hyndman & Fan type 7, the default of R and NumPy).
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(std::floor(pos));
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return sorted[i] + (pos - static_cast<double>(i)) * (sorted[j] - sorted[i]);
}

}  // namespace trainplan::sim::detail
