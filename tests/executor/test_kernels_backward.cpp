// Backward kernels of the CPU backend against central finite differences of their forward
// kernels, in f64 on small random shapes. Each test takes loss = sum(out * R) for a fixed
// random R, so the analytic gradients come from the backward kernel with dout = R.
#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using trainplan::executor::testing::check_gradient;
using trainplan::executor::testing::Device;
using trainplan::executor::testing::draw;
using trainplan::executor::testing::dot;
using trainplan::executor::testing::random_ids;
using trainplan::executor::testing::random_values;

namespace {

constexpr double kFdEps = 1e-6;  // central-difference step (f64)
constexpr double kFdTol = 1e-6;  // relative tolerance (floor 1) between analytic and numeric

size_t sz(int64_t n) { return static_cast<size_t>(n); }

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

}  // namespace

TEST_CASE("kernels: embedding backward matches finite differences", "[executor]") {
  Device d;
  Rng rng(201);
  const int64_t n = draw(rng, 3, 10), c = draw(rng, 2, 6), rows = draw(rng, 3, 7), row_begin = 2;
  // Some ids fall outside the local range [2, 2 + rows) and must contribute nothing.
  std::vector<int32_t> ids = random_ids(rng, sz(n), 0, row_begin + rows + 2);
  std::vector<double> table = random_values(rng, sz(rows * c)), r = random_values(rng, sz(n * c));
  Tensor ids_dev = d.put_ids(ids), out = d->empty(DType::f64, {n, c});
  auto loss = [&] {
    d->embedding_forward(d.stream, out, ids_dev, d.put({rows, c}, table), row_begin, false);
    return dot(d.get(out), r);
  };
  std::vector<double> initial = random_values(rng, sz(rows * c));
  Tensor dtable = d.put({rows, c}, initial);  // gradients accumulate onto what is there
  d->embedding_backward(d.stream, dtable, d.put({n, c}, r), ids_dev, row_begin);
  check_gradient("embedding dtable", table, minus(d.get(dtable), initial), loss, kFdEps, kFdTol);
}

TEST_CASE("kernels: layernorm backward matches finite differences", "[executor]") {
  Device d;
  Rng rng(202);
  const int64_t n = draw(rng, 2, 5), c = draw(rng, 3, 8);
  std::vector<double> x = random_values(rng, sz(n * c), 1.5, 0.3), w = random_values(rng, sz(c), 0.5, 1.0),
                      b = random_values(rng, sz(c)), r = random_values(rng, sz(n * c));
  Tensor out = d->empty(DType::f64, {n, c}), mean = d->empty(DType::f64, {n}), rstd = d->empty(DType::f64, {n});
  auto loss = [&] {
    d->layernorm_forward(d.stream, out, mean, rstd, d.put({n, c}, x), d.put({c}, w), d.put({c}, b), 1e-5);
    return dot(d.get(out), r);
  };
  loss();
  Tensor dx = d->empty(DType::f64, {n, c}), dw = d.zeros({c}), db = d.zeros({c});
  d->layernorm_backward(d.stream, dx, dw, db, d.put({n, c}, r), d.put({n, c}, x), d.put({c}, w), mean, rstd);
  std::vector<double> gx = d.get(dx), gw = d.get(dw), gb = d.get(db);
  check_gradient("layernorm dinp", x, gx, loss, kFdEps, kFdTol);
  check_gradient("layernorm dweight", w, gw, loss, kFdEps, kFdTol);
  check_gradient("layernorm dbias", b, gb, loss, kFdEps, kFdTol);
}

TEST_CASE("kernels: rmsnorm backward matches finite differences", "[executor]") {
  Device d;
  Rng rng(203);
  const int64_t n = draw(rng, 2, 5), c = draw(rng, 3, 8);
  std::vector<double> x = random_values(rng, sz(n * c), 1.5, 0.3), w = random_values(rng, sz(c), 0.5, 1.0),
                      r = random_values(rng, sz(n * c));
  Tensor out = d->empty(DType::f64, {n, c}), rstd = d->empty(DType::f64, {n});
  auto loss = [&] {
    d->rmsnorm_forward(d.stream, out, rstd, d.put({n, c}, x), d.put({c}, w), 1e-5);
    return dot(d.get(out), r);
  };
  loss();
  Tensor dx = d->empty(DType::f64, {n, c}), dw = d.zeros({c});
  d->rmsnorm_backward(d.stream, dx, dw, d.put({n, c}, r), d.put({n, c}, x), d.put({c}, w), rstd);
  std::vector<double> gx = d.get(dx), gw = d.get(dw);
  check_gradient("rmsnorm dinp", x, gx, loss, kFdEps, kFdTol);
  check_gradient("rmsnorm dweight", w, gw, loss, kFdEps, kFdTol);
}

TEST_CASE("kernels: linear backward matches finite differences and accumulates weight gradients", "[executor]") {
  Device d;
  Rng rng(204);
  const int64_t n = draw(rng, 2, 9), ic = draw(rng, 2, 7), oc = draw(rng, 2, 9);
  std::vector<double> x = random_values(rng, sz(n * ic)), w = random_values(rng, sz(oc * ic)),
                      b = random_values(rng, sz(oc)), r = random_values(rng, sz(n * oc));
  Tensor out = d->empty(DType::f64, {n, oc});
  auto loss = [&] {
    d->linear_forward(d.stream, out, d.put({n, ic}, x), d.put({oc, ic}, w), d.put({oc}, b));
    return dot(d.get(out), r);
  };
  std::vector<double> w0 = random_values(rng, sz(oc * ic)), b0 = random_values(rng, sz(oc));
  Tensor dx = d->empty(DType::f64, {n, ic}), dw = d.put({oc, ic}, w0), db = d.put({oc}, b0);
  d->linear_backward(d.stream, dx, dw, db, d.put({n, oc}, r), d.put({n, ic}, x), d.put({oc, ic}, w));
  std::vector<double> gx = d.get(dx), gw = minus(d.get(dw), w0), gb = minus(d.get(db), b0);
  check_gradient("linear dinp", x, gx, loss, kFdEps, kFdTol);
  check_gradient("linear dweight", w, gw, loss, kFdEps, kFdTol);
  check_gradient("linear dbias", b, gb, loss, kFdEps, kFdTol);
  // Without dinp (the first layer of a model) the weight gradients are the same.
  Tensor dw2 = d.zeros({oc, ic});
  d->linear_backward(d.stream, Tensor(), dw2, Tensor(), d.put({n, oc}, r), d.put({n, ic}, x), d.put({oc, ic}, w));
  std::vector<double> gw2 = d.get(dw2);
  for (size_t i = 0; i < gw.size(); ++i) CHECK(gw2[i] == Approx(gw[i]).epsilon(1e-12).margin(1e-12));
}

TEST_CASE("kernels: gelu, relu and swiglu backward match finite differences", "[executor]") {
  Device d;
  Rng rng(205);
  const int64_t n = draw(rng, 2, 5), f = draw(rng, 2, 7);
  std::vector<double> x = random_values(rng, sz(n * 2 * f), 1.5);
  for (double& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;  // keep relu's kink away from the difference stencil
  std::vector<double> r2 = random_values(rng, sz(n * 2 * f)), r1 = random_values(rng, sz(n * f));
  Tensor out2 = d->empty(DType::f64, {n, 2 * f}), out1 = d->empty(DType::f64, {n, f});
  Tensor dx = d->empty(DType::f64, {n, 2 * f});
  for (const char* which : {"gelu", "relu"}) {
    const bool gelu = std::string(which) == "gelu";
    auto loss = [&] {
      if (gelu) d->gelu_forward(d.stream, out2, d.put({n, 2 * f}, x));
      else d->relu_forward(d.stream, out2, d.put({n, 2 * f}, x));
      return dot(d.get(out2), r2);
    };
    if (gelu) d->gelu_backward(d.stream, dx, d.put({n, 2 * f}, x), d.put({n, 2 * f}, r2));
    else d->relu_backward(d.stream, dx, d.put({n, 2 * f}, x), d.put({n, 2 * f}, r2));
    check_gradient(which, x, d.get(dx), loss, kFdEps, kFdTol);
  }
  auto loss = [&] {
    d->swiglu_forward(d.stream, out1, d.put({n, 2 * f}, x));
    return dot(d.get(out1), r1);
  };
  d->swiglu_backward(d.stream, dx, d.put({n, 2 * f}, x), d.put({n, f}, r1));
  check_gradient("swiglu", x, d.get(dx), loss, kFdEps, kFdTol);
}

TEST_CASE("kernels: attention backward matches finite differences (causal, GQA, bidirectional)", "[executor]") {
  Device d;
  Rng rng(206);
  const AttentionShape shapes[] = {
      {2, draw(rng, 2, 5), 2, 2, 3, true},   // multi-head, causal
      {1, draw(rng, 3, 5), 4, 2, 2, true},   // grouped-query, causal
      {2, draw(rng, 2, 4), 2, 1, 3, false},  // multi-query, bidirectional
  };
  for (const AttentionShape& sh : shapes) {
    std::vector<double> qkv = random_values(rng, sz(sh.tokens() * sh.qkv_cols()));
    std::vector<double> r = random_values(rng, sz(sh.tokens() * sh.out_cols()));
    Tensor out = d->empty(DType::f64, {sh.tokens(), sh.out_cols()}), lse = d->empty(DType::f64, {sh.batch, sh.heads, sh.seq});
    auto loss = [&] {
      d->attention_forward(d.stream, out, lse, d.put({sh.tokens(), sh.qkv_cols()}, qkv), sh);
      return dot(d.get(out), r);
    };
    loss();
    Tensor dqkv = d->empty(DType::f64, {sh.tokens(), sh.qkv_cols()});
    d->fill(d.stream, dqkv, 3.0);  // dqkv is written, not accumulated
    d->attention_backward(d.stream, dqkv, d.put({sh.tokens(), sh.out_cols()}, r), d.put({sh.tokens(), sh.qkv_cols()}, qkv),
                          out, lse, sh);
    INFO("heads " << sh.heads << ", kv_heads " << sh.kv_heads << ", causal " << sh.causal);
    check_gradient("attention dqkv", qkv, d.get(dqkv), loss, kFdEps, kFdTol);
  }
}

TEST_CASE("kernels: cross-entropy backward matches finite differences of the mean loss", "[executor]") {
  Device d;
  Rng rng(207);
  const int64_t n = draw(rng, 2, 6), v = draw(rng, 3, 11);
  std::vector<double> logits = random_values(rng, sz(n * v), 2.0);
  Tensor tg = d.put_ids(random_ids(rng, sz(n), 0, v));
  Tensor losses = d->empty(DType::f64, {n}), mx = d->empty(DType::f64, {n}), se = d->empty(DType::f64, {n});
  auto loss = [&] {
    d->cross_entropy_forward(d.stream, losses, mx, se, d.put({n, v}, logits), tg);
    double sum = 0;
    for (double l : d.get(losses)) sum += l;
    return sum / static_cast<double>(n);
  };
  loss();
  Tensor dl = d.put({n, v}, logits);  // in place: dlogits may be the logits
  d->ce_backward(d.stream, dl, dl, tg, 0, mx, se, 1.0 / static_cast<double>(n));
  check_gradient("cross-entropy dlogits", logits, d.get(dl), loss, kFdEps, kFdTol);
}

TEST_CASE("kernels: residual add backward is the identity for both inputs", "[executor]") {
  Device d;
  Rng rng(208);
  const int64_t n = 5;
  std::vector<double> a = random_values(rng, n), b = random_values(rng, n), r = random_values(rng, n);
  Tensor out = d->empty(DType::f64, {n});
  auto loss = [&] {
    d->add(d.stream, out, d.put({n}, a), d.put({n}, b));
    return dot(d.get(out), r);
  };
  check_gradient("add da", a, r, loss, kFdEps, kFdTol);
  check_gradient("add db", b, r, loss, kFdEps, kFdTol);
  // accumulate() sums gradient branches: y += x.
  Tensor y = d.put({n}, a);
  d->accumulate(d.stream, y, d.put({n}, b));
  std::vector<double> got = d.get(y);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == a[i] + b[i]);
}
