// Mixture-of-experts kernels of the CPU backend: the router (softmax, top-k with ties to the
// lower index, renormalised weights) and the combine (weighted sum of each token's routed
// copies) against naive formulas, and their backward kernels against central finite
// differences of the forward, in f64 on small random shapes (loss = sum(out * R)).
#include <algorithm>
#include <numeric>

#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using trainplan::executor::testing::check_gradient;
using trainplan::executor::testing::Device;
using trainplan::executor::testing::dot;
using trainplan::executor::testing::random_values;

namespace {

constexpr double kFdEps = 1e-6;
constexpr double kFdTol = 1e-6;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

struct Routed {
  std::vector<double> weights, probs;
  std::vector<int32_t> experts;
};

Routed route(Device& d, const std::vector<double>& logits, int64_t n, int64_t e, int64_t k) {
  Tensor w = d->empty(DType::f64, {n, k}), x = d->empty(DType::i32, {n, k}), p = d->empty(DType::f64, {n, e});
  d->router_forward(d.stream, w, x, p, d.put({n, e}, logits));
  return {d.get(w), d.get(p), d->download_ids(d.stream, x)};
}

}  // namespace

TEST_CASE("kernels: router keeps the top-k softmax probabilities renormalised, ties to the lower expert", "[executor]") {
  Device d;
  Rng rng(301);
  const int64_t n = 6, e = 5, k = 2;
  std::vector<double> z = random_values(rng, sz(n * e));
  // Row 0: experts 1 and 3 tie for the top; row 1: experts 0, 2 and 4 tie for second place.
  z[0 * e + 1] = z[0 * e + 3] = 3.0;
  z[1 * e + 1] = 4.0;
  z[1 * e + 0] = z[1 * e + 2] = z[1 * e + 4] = 2.0;
  const Routed r = route(d, z, n, e, k);
  for (int64_t j = 0; j < n; ++j) {
    // Naive: softmax in double, indices sorted by (-p, index).
    std::vector<double> p(sz(e));
    double mx = *std::max_element(z.begin() + j * e, z.begin() + (j + 1) * e), sum = 0;
    for (int64_t x = 0; x < e; ++x) sum += p[sz(x)] = std::exp(z[sz(j * e + x)] - mx);
    for (double& v : p) v /= sum;
    std::vector<int64_t> idx(sz(e));
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[sz(a)] != p[sz(b)] ? p[sz(a)] > p[sz(b)] : a < b; });
    const double kept = p[sz(idx[0])] + p[sz(idx[1])];
    for (int64_t x = 0; x < e; ++x) CHECK(r.probs[sz(j * e + x)] == Approx(p[sz(x)]).epsilon(1e-14));
    for (int64_t i = 0; i < k; ++i) {
      CHECK(r.experts[sz(j * k + i)] == idx[sz(i)]);
      CHECK(r.weights[sz(j * k + i)] == Approx(p[sz(idx[sz(i)])] / kept).epsilon(1e-14));
    }
  }
  CHECK(r.experts[0] == 1);
  CHECK(r.experts[1] == 3);
  CHECK(r.experts[2] == 1);
  CHECK(r.experts[3] == 0);
}

TEST_CASE("kernels: router backward matches finite differences", "[executor]") {
  Device d;
  Rng rng(302);
  for (int64_t k : {1, 2, 3}) {
    const int64_t n = 5, e = 6;
    std::vector<double> z = random_values(rng, sz(n * e), 1.5), rr = random_values(rng, sz(n * k));
    const Routed base = route(d, z, n, e, k);
    // The perturbation never changes the choice: the gaps between logits are far above eps.
    auto loss = [&] {
      const Routed r = route(d, z, n, e, k);
      REQUIRE(r.experts == base.experts);
      return dot(r.weights, rr);
    };
    Tensor dz = d->empty(DType::f64, {n, e}), experts = d->empty(DType::i32, {n, k});
    d->upload_ids(d.stream, experts, base.experts);
    d->router_backward(d.stream, dz, d.put({n, k}, rr), d.put({n, k}, base.weights), experts,
                       d.put({n, e}, base.probs));
    const std::vector<double> g = d.get(dz);
    check_gradient("router dlogits, k = " + std::to_string(k), z, g, loss, kFdEps, kFdTol);
    if (k == 1)  // one renormalised weight is always 1: no gradient reaches the logits
      for (double v : g) CHECK(v == 0.0);
  }
}

TEST_CASE("kernels: combine sums each token's weighted copies, dropped copies add nothing", "[executor]") {
  Device d;
  Rng rng(303);
  const int64_t n = 4, k = 2, c = 3, r = n * k;
  std::vector<int32_t> rows(sz(n * k));
  std::iota(rows.begin(), rows.end(), 0);
  std::reverse(rows.begin(), rows.end());
  rows[3] = -1;  // token 1's second copy was dropped
  std::vector<double> y = random_values(rng, sz(r * c)), w = random_values(rng, sz(n * k)), rr = random_values(rng, sz(n * c));
  Tensor out = d->empty(DType::f64, {n, c}), rows_dev = d->empty(DType::i32, {n, k});
  d->upload_ids(d.stream, rows_dev, rows);
  auto loss = [&] {
    d->moe_combine_forward(d.stream, out, d.put({r, c}, y), d.put({n, k}, w), rows_dev);
    return dot(d.get(out), rr);
  };
  loss();
  const std::vector<double> o = d.get(out);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t x = 0; x < c; ++x) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i)
        if (rows[sz(j * k + i)] >= 0) want += w[sz(j * k + i)] * y[sz(rows[sz(j * k + i)] * c + x)];
      CHECK(o[sz(j * c + x)] == Approx(want).epsilon(1e-14));
    }
  Tensor dy = d->empty(DType::f64, {r, c}), dw = d->empty(DType::f64, {n, k});
  d->moe_combine_backward(d.stream, dy, dw, d.put({n, c}, rr), d.put({r, c}, y), d.put({n, k}, w), rows_dev);
  const std::vector<double> gy = d.get(dy), gw = d.get(dw);
  check_gradient("combine dy", y, gy, loss, kFdEps, kFdTol);
  check_gradient("combine dweights", w, gw, loss, kFdEps, kFdTol);
  // Row 4 of y (token 1's dropped copy) is read by no token: its gradient is exactly 0.
  for (int64_t x = 0; x < c; ++x) CHECK(gy[sz(4 * c + x)] == 0.0);
}

TEST_CASE("kernels: MoE kernels reject bad arguments by name", "[executor]") {
  Device d;
  Tensor logits = d.zeros({3, 4}), probs = d.zeros({3, 4}), w = d.zeros({3, 5}), x = d.zeros({3, 5}, DType::i32);
  REQUIRE_ERROR_CONTAINS(d->router_forward(d.stream, w, x, probs, logits), "router_forward: top-k 5");
  Tensor w2 = d.zeros({3, 2}), x2 = d.zeros({3, 2}, DType::i32), y = d.zeros({6, 4}), out = d.zeros({3, 4});
  std::vector<int32_t> bad = {0, 1, 2, 3, 4, 4};
  d->upload_ids(d.stream, x2, bad);
  REQUIRE_ERROR_CONTAINS(d->moe_combine_forward(d.stream, out, y, w2, x2), "rows[5] = 4 is outside [0, 6) or repeated");
}
