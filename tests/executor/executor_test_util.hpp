// Helpers of the executor tests: random host data, f64 device tensors and central finite
// differences.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::executor::testing {

/// n values drawn from N(mean, stddev^2).
/// A uniform integer in [lo, hi].
inline int64_t draw(Rng& rng, int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1))); }

inline std::vector<double> random_values(Rng& rng, size_t n, double stddev = 1.0, double mean = 0.0) {
  std::vector<double> v(n);
  for (double& x : v) x = rng.normal(mean, stddev);
  return v;
}

/// n ids uniform in [lo, hi).
inline std::vector<int32_t> random_ids(Rng& rng, size_t n, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo))));
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

/// Runs fn(rank) on one thread per rank; rethrows nothing (the errors are returned per rank).
inline std::vector<std::string> run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

/// A CPU backend with its default stream and helpers to move host vectors in and out.
struct Device {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  Stream& stream = backend->default_stream();

  Tensor put(DType dtype, const Shape& shape, const std::vector<double>& values) {
    Tensor t = backend->empty(dtype, shape);
    backend->upload_values(stream, t, values);
    return t;
  }
  Tensor put(const Shape& shape, const std::vector<double>& values) { return put(DType::f64, shape, values); }
  Tensor put_ids(const std::vector<int32_t>& ids) {
    Tensor t = backend->empty(DType::i32, {static_cast<int64_t>(ids.size())});
    backend->upload_ids(stream, t, ids);
    return t;
  }
  Tensor zeros(const Shape& shape, DType dtype = DType::f64) { return backend->zeros(stream, dtype, shape); }
  std::vector<double> get(const Tensor& t) { return backend->download_values(stream, t); }
  Backend& operator*() { return *backend; }
  Backend* operator->() { return backend.get(); }
};

/// Central finite differences of loss() with respect to each x[i] (x is perturbed in place and
/// restored), compared with analytic[i]: |analytic - numeric| <= tol * max(1, |numeric|).
/// `what` names the input in failure messages. Checks every element unless `indices` is given.
inline void check_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                           const std::function<double()>& loss, double eps, double tol,
                           std::vector<size_t> indices = {}) {
  REQUIRE(x.size() == analytic.size());
  if (indices.empty())
    for (size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  double worst = 0;
  for (size_t i : indices) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    const double err = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, err);
    INFO(what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
    CHECK(err <= tol);
  }
  INFO(what << ": worst relative error " << worst);
  SUCCEED();
}

}  // namespace trainplan::executor::testing
