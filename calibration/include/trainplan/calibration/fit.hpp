// File: trainplan/calibration/fit.hpp
//
// Robust least squares on log time for models linear in positive parameters:
//
//   t_i ~ sum_j a_j * X_ij,  a_j > 0,
//
// fitted by minimizing sum_i huber(log(sum_j a_j X_ij) - log t_i) over theta_j = log a_j with
// Levenberg-Marquardt steps inside iteratively reweighted least squares (Huber weights,
// threshold `huber_delta` in log units: 0.1 = residuals past about 10 % count linearly, so one
// preempted measurement cannot drag the fit). Every simulator time this library fits has that
// form: a compute task is sum over its op kinds of (1 / efficiency) x roofline seconds plus
// kernel overhead x kernels; a collective is latency + bytes / bandwidth.
//
//   calibration::LogFit f = calibration::fit_log_linear(X, t, {1.0, 1e-6});
//   f.params[j]; f.converged;
#pragma once

#include <vector>

namespace trainplan::calibration {

struct LogFit {
  std::vector<double> params;
  bool converged = false;
  int iterations = 0;
};

/// X: n rows of p non-negative features (each row with some positive entry); t: n positive
/// times; init: p positive starting values. Throws Error when n < p or sizes differ.
LogFit fit_log_linear(const std::vector<std::vector<double>>& X, const std::vector<double>& t,
                      const std::vector<double>& init, double huber_delta = 0.1);

/// Median and worst |relative error| of predictions against measurements (as fractions).
struct ErrorSummary {
  int points = 0;
  double median_abs = 0;
  double worst_abs = 0;
};
ErrorSummary relative_errors(const std::vector<double>& predicted, const std::vector<double>& measured);

}  // namespace trainplan::calibration
