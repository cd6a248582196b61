#include "trainplan/calibration/fit.hpp"

#include <algorithm>
#include <cmath>

#include "trainplan/core/error.hpp"

namespace trainplan::calibration {
namespace {

double huber_weight(double r, double delta) {
  const double a = std::abs(r);
  return a <= delta ? 1.0 : delta / a;
}

// Solves A x = b (p x p, symmetric positive definite after damping) by Gaussian elimination
// with partial pivoting.
std::vector<double> solve(std::vector<std::vector<double>> A, std::vector<double> b) {
  const size_t p = b.size();
  for (size_t c = 0; c < p; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < p; ++r)
      if (std::abs(A[r][c]) > std::abs(A[piv][c])) piv = r;
    std::swap(A[c], A[piv]);
    std::swap(b[c], b[piv]);
    if (A[c][c] == 0) continue;
    for (size_t r = c + 1; r < p; ++r) {
      const double f = A[r][c] / A[c][c];
      for (size_t k = c; k < p; ++k) A[r][k] -= f * A[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(p, 0.0);
  for (size_t i = p; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < p; ++k) s -= A[i][k] * x[k];
    x[i] = A[i][i] != 0 ? s / A[i][i] : 0;
  }
  return x;
}

}  // namespace

LogFit fit_log_linear(const std::vector<std::vector<double>>& X, const std::vector<double>& t,
                      const std::vector<double>& init, double huber_delta) {
  const size_t n = X.size(), p = init.size();
  if (n != t.size()) throw Error("fit: " + std::to_string(n) + " feature rows but " + std::to_string(t.size()) + " times");
  if (n < p)
    throw Error("fit: " + std::to_string(n) + " points for " + std::to_string(p) + " parameters")
        .hint("measure more tasks or shapes: a fit needs more points than parameters");
  std::vector<double> theta(p);
  for (size_t j = 0; j < p; ++j) theta[j] = std::log(std::max(init[j], 1e-300));
  std::vector<double> logt(n);
  for (size_t i = 0; i < n; ++i) logt[i] = std::log(t[i]);

  auto residuals = [&](const std::vector<double>& th, std::vector<double>& r, std::vector<double>& pred) {
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (size_t j = 0; j < p; ++j) s += std::exp(th[j]) * X[i][j];
      pred[i] = s;
      r[i] = std::log(std::max(s, 1e-300)) - logt[i];
    }
  };
  auto cost = [&](const std::vector<double>& r) {
    double c = 0;
    for (double v : r) {
      const double a = std::abs(v);
      c += a <= huber_delta ? 0.5 * v * v : huber_delta * (a - 0.5 * huber_delta);
    }
    return c;
  };
  std::vector<double> r(n), pred(n);
  residuals(theta, r, pred);
  double c = cost(r), lambda = 1e-3;
  LogFit out;
  for (int it = 0; it < 200; ++it) {
    out.iterations = it + 1;
    std::vector<std::vector<double>> A(p, std::vector<double>(p, 0.0));
    std::vector<double> g(p, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double w = huber_weight(r[i], huber_delta);
      std::vector<double> J(p);
      for (size_t j = 0; j < p; ++j) J[j] = pred[i] > 0 ? std::exp(theta[j]) * X[i][j] / pred[i] : 0;
      for (size_t a = 0; a < p; ++a) {
        g[a] += w * J[a] * r[i];
        for (size_t b = 0; b < p; ++b) A[a][b] += w * J[a] * J[b];
      }
    }
    bool improved = false;
    for (int tries = 0; tries < 20 && !improved; ++tries) {
      auto D = A;
      std::vector<double> rhs(p);
      for (size_t j = 0; j < p; ++j) {
        D[j][j] += lambda * (A[j][j] + 1e-12);
        rhs[j] = -g[j];
      }
      const auto step = solve(D, rhs);
      std::vector<double> th2(p);
      for (size_t j = 0; j < p; ++j) th2[j] = theta[j] + std::clamp(step[j], -5.0, 5.0);
      std::vector<double> r2(n), pred2(n);
      residuals(th2, r2, pred2);
      const double c2 = cost(r2);
      if (c2 <= c) {
        const double gain = c - c2;
        theta = th2, r = r2, pred = pred2;
        lambda = std::max(lambda / 3, 1e-9);
        improved = true;
        if (gain < 1e-12 * std::max(1.0, c)) out.converged = true;
        c = c2;
      } else {
        lambda *= 4;
      }
    }
    if (!improved || out.converged) {
      out.converged = true;
      break;
    }
  }
  out.params.resize(p);
  for (size_t j = 0; j < p; ++j) out.params[j] = std::exp(theta[j]);
  return out;
}

ErrorSummary relative_errors(const std::vector<double>& predicted, const std::vector<double>& measured) {
  TP_ASSERT(predicted.size() == measured.size());
  ErrorSummary s;
  std::vector<double> e;
  for (size_t i = 0; i < predicted.size(); ++i)
    if (measured[i] > 0) e.push_back(std::abs(predicted[i] - measured[i]) / measured[i]);
  s.points = static_cast<int>(e.size());
  if (e.empty()) return s;
  std::sort(e.begin(), e.end());
  s.median_abs = e.size() % 2 ? e[e.size() / 2] : 0.5 * (e[e.size() / 2 - 1] + e[e.size() / 2]);
  s.worst_abs = e.back();
  return s;
}

}  // namespace trainplan::calibration
