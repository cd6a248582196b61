// Forward kernels of the CPU backend against independent naive formulas on random shapes.
// Tolerances: f64 results match a double-precision host formula within kF64Tol (relative);
// f32 results within kF32Tol.
#include <cmath>
#include <limits>

#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using trainplan::executor::testing::Device;
using trainplan::executor::testing::draw;
using trainplan::executor::testing::random_ids;
using trainplan::executor::testing::random_values;

namespace {

constexpr double kF64Tol = 1e-12;
constexpr double kF32Tol = 2e-5;

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i]));
    worst = std::max(worst, err);
  }
  INFO(what << ": worst relative error " << worst << " (tolerance " << tol << ")");
  CHECK(worst <= tol);
}


// Attention by the textbook formula: explicit scores, softmax and weighted sum per head.
// qkv rows [Q (H heads) | K (KVH heads) | V (KVH heads)].
std::vector<double> naive_attention(const std::vector<double>& qkv, const AttentionShape& sh,
                                    std::vector<double>* lse_out) {
  const int64_t row = sh.qkv_cols(), D = sh.head_dim, group = sh.heads / sh.kv_heads;
  std::vector<double> out(static_cast<size_t>(sh.tokens() * sh.out_cols()), 0.0);
  if (lse_out) lse_out->assign(static_cast<size_t>(sh.batch * sh.heads * sh.seq), 0.0);
  for (int64_t b = 0; b < sh.batch; ++b)
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t = 0; t < sh.seq; ++t) {
        std::vector<double> scores(static_cast<size_t>(sh.seq), -std::numeric_limits<double>::infinity());
        for (int64_t s = 0; s < sh.seq; ++s) {
          if (sh.causal && s > t) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qkv[static_cast<size_t>((b * sh.seq + t) * row + h * D + d)] *
                   qkv[static_cast<size_t>((b * sh.seq + s) * row + (sh.heads + kvh) * D + d)];
          scores[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(D));
        }
        double mx = -std::numeric_limits<double>::infinity(), z = 0;
        for (double x : scores) mx = std::max(mx, x);
        for (double x : scores) z += std::exp(x - mx);
        if (lse_out) (*lse_out)[static_cast<size_t>((b * sh.heads + h) * sh.seq + t)] = mx + std::log(z);
        for (int64_t s = 0; s < sh.seq; ++s) {
          const double p = std::exp(scores[static_cast<size_t>(s)] - mx) / z;
          for (int64_t d = 0; d < D; ++d)
            out[static_cast<size_t>((b * sh.seq + t) * sh.out_cols() + h * D + d)] +=
                p * qkv[static_cast<size_t>((b * sh.seq + s) * row + (sh.heads + sh.kv_heads + kvh) * D + d)];
        }
      }
    }
  return out;
}

// f64 inputs of a linear (N, IC) -> (N, OC) of random small shape: inp, weight, bias.
struct RandomLinear {
  int64_t n, ic, oc;
  Tensor inp, weight, bias;
  RandomLinear(Device& d, Rng& rng) : n(draw(rng, 2, 6)), ic(draw(rng, 2, 9)), oc(draw(rng, 2, 9)) {
    inp = d.put(DType::f64, {n, ic}, random_values(rng, static_cast<size_t>(n * ic), 1.0));
    weight = d.put(DType::f64, {oc, ic}, random_values(rng, static_cast<size_t>(oc * ic), 1.0));
    bias = d.put(DType::f64, {oc}, random_values(rng, static_cast<size_t>(oc), 1.0));
  }
};

}  // namespace

TEST_CASE("kernels: linear forward equals the naive triple loop bit for bit", "[executor]") {
  Device d;
  Rng rng(101);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t n = draw(rng, 1, 11), ic = draw(rng, 1, 13), oc = draw(rng, 1, 17);
    const bool with_bias = trial % 2 == 0;
    std::vector<double> x = random_values(rng, static_cast<size_t>(n * ic));
    std::vector<double> w = random_values(rng, static_cast<size_t>(oc * ic));
    std::vector<double> b = random_values(rng, static_cast<size_t>(oc));
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor out = d->empty(dt, {n, oc});
      d->linear_forward(d.stream, out, d.put(dt, {n, ic}, x), d.put(dt, {oc, ic}, w),
                        with_bias ? d.put(dt, {oc}, b) : Tensor());
      std::vector<double> got = d.get(out);
      // The same sums in the same order (bias first, then k ascending) in the same precision.
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < oc; ++o) {
          if (dt == DType::f32) {
            float acc = with_bias ? static_cast<float>(b[static_cast<size_t>(o)]) : 0.0f;
            for (int64_t k = 0; k < ic; ++k)
              acc += static_cast<float>(x[static_cast<size_t>(i * ic + k)]) * static_cast<float>(w[static_cast<size_t>(o * ic + k)]);
            CHECK(got[static_cast<size_t>(i * oc + o)] == static_cast<double>(acc));
          } else {
            double acc = with_bias ? b[static_cast<size_t>(o)] : 0.0;
            for (int64_t k = 0; k < ic; ++k) acc += x[static_cast<size_t>(i * ic + k)] * w[static_cast<size_t>(o * ic + k)];
            CHECK(got[static_cast<size_t>(i * oc + o)] == acc);
          }
        }
    }
  }
}

TEST_CASE("kernels: layernorm and rmsnorm forward match their formulas", "[executor]") {
  Device d;
  Rng rng(102);
  const int64_t n = draw(rng, 2, 7), c = draw(rng, 3, 19);
  const double eps = 1e-5;
  std::vector<double> x = random_values(rng, static_cast<size_t>(n * c), 2.0, 0.5);
  std::vector<double> w = random_values(rng, static_cast<size_t>(c), 1.0, 1.0);
  std::vector<double> b = random_values(rng, static_cast<size_t>(c));
  std::vector<double> ln(x.size()), rms(x.size()), means(static_cast<size_t>(n)), rstds(static_cast<size_t>(n)), rms_rstds(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double mean = 0, sq = 0;
    for (int64_t j = 0; j < c; ++j) mean += x[static_cast<size_t>(i * c + j)] / static_cast<double>(c);
    double var = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double v = x[static_cast<size_t>(i * c + j)];
      var += (v - mean) * (v - mean) / static_cast<double>(c);
      sq += v * v / static_cast<double>(c);
    }
    means[static_cast<size_t>(i)] = mean;
    rstds[static_cast<size_t>(i)] = 1 / std::sqrt(var + eps);
    rms_rstds[static_cast<size_t>(i)] = 1 / std::sqrt(sq + eps);
    for (int64_t j = 0; j < c; ++j) {
      const size_t k = static_cast<size_t>(i * c + j);
      ln[k] = (x[k] - mean) / std::sqrt(var + eps) * w[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
      rms[k] = x[k] / std::sqrt(sq + eps) * w[static_cast<size_t>(j)];
    }
  }
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? kF64Tol : kF32Tol;
    Tensor out = d->empty(dt, {n, c}), mean = d->empty(dt, {n}), rstd = d->empty(dt, {n});
    Tensor xin = d.put(dt, {n, c}, x), win = d.put(dt, {c}, w);
    d->layernorm_forward(d.stream, out, mean, rstd, xin, win, d.put(dt, {c}, b), eps);
    check_close(d.get(out), ln, tol, "layernorm out");
    check_close(d.get(mean), means, tol, "layernorm mean");
    check_close(d.get(rstd), rstds, tol, "layernorm rstd");
    d->rmsnorm_forward(d.stream, out, rstd, xin, win, eps);
    check_close(d.get(out), rms, tol, "rmsnorm out");
    check_close(d.get(rstd), rms_rstds, tol, "rmsnorm rstd");
  }
}

TEST_CASE("kernels: gelu, relu and swiglu forward match their formulas", "[executor]") {
  Device d;
  Rng rng(103);
  const int64_t n = draw(rng, 2, 6), f = draw(rng, 2, 9);
  std::vector<double> x = random_values(rng, static_cast<size_t>(n * 2 * f), 2.0);
  std::vector<double> gelu(x.size()), gelu_erf(x.size()), relu(x.size()), swiglu(static_cast<size_t>(n * f));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    gelu[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    gelu_erf[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    relu[i] = v > 0 ? v : 0;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double g = x[static_cast<size_t>(i * 2 * f + j)], u = x[static_cast<size_t>(i * 2 * f + f + j)];
      swiglu[static_cast<size_t>(i * f + j)] = g / (1 + std::exp(-g)) * u;
    }
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? kF64Tol : kF32Tol;
    Tensor in = d.put(dt, {n, 2 * f}, x), out = d->empty(dt, {n, 2 * f}), half = d->empty(dt, {n, f});
    d->gelu_forward(d.stream, out, in);
    check_close(d.get(out), gelu, tol, "gelu");
    // The tanh form approximates the exact (erf) GELU to within 1e-3 (Hendrycks & Gimpel 2016).
    check_close(d.get(out), gelu_erf, 1e-3, "gelu vs erf form");
    d->relu_forward(d.stream, out, in);
    check_close(d.get(out), relu, dt == DType::f64 ? 0.0 : kF32Tol, "relu");
    d->swiglu_forward(d.stream, half, in);
    check_close(d.get(half), swiglu, tol, "swiglu");
    d->gelu_forward(d.stream, in, in);  // in place is allowed for elementwise kernels
    check_close(d.get(in), gelu, tol, "gelu in place");
  }
}

TEST_CASE("kernels: linear + residual in one call equals linear then add, also in place", "[executor]") {
  Device d;
  Rng rng(108);
  const RandomLinear x(d, rng);
  const int64_t n = x.n, oc = x.oc;
  const Tensor &inp = x.inp, &w = x.weight, &bias = x.bias;
  const std::vector<double> res = random_values(rng, static_cast<size_t>(n * oc), 1.0);
  Tensor residual = d.put(DType::f64, {n, oc}, res), out = d->empty(DType::f64, {n, oc});
  Tensor want = d->empty(DType::f64, {n, oc});
  d->linear_residual_forward(d.stream, out, inp, w, bias, residual);
  d->linear_forward(d.stream, want, inp, w, bias);
  d->add(d.stream, want, want, residual);
  CHECK(d.get(out) == d.get(want));
  d->linear_residual_forward(d.stream, residual, inp, w, bias, residual);  // x += linear(inp), in place
  CHECK(d.get(residual) == d.get(want));
  REQUIRE_ERROR_CONTAINS(d->linear_residual_forward(d.stream, out, inp, w, bias, out.slice_rows(0, 1)),
                         "residual has shape");
}

TEST_CASE("kernels: linear + gelu in one call equals linear then gelu, forward and backward", "[executor]") {
  Device d;
  Rng rng(107);
  const RandomLinear x(d, rng);
  const int64_t n = x.n, ic = x.ic, oc = x.oc;
  const Tensor &inp = x.inp, &w = x.weight, &bias = x.bias;
  Tensor pre = d->empty(DType::f64, {n, oc}), out = d->empty(DType::f64, {n, oc});
  Tensor want_pre = d->empty(DType::f64, {n, oc}), want_out = d->empty(DType::f64, {n, oc});
  d->linear_gelu_forward(d.stream, out, pre, inp, w, bias);
  d->linear_forward(d.stream, want_pre, inp, w, bias);
  d->gelu_forward(d.stream, want_out, want_pre);
  CHECK(d.get(pre) == d.get(want_pre));
  CHECK(d.get(out) == d.get(want_out));
  // The next linear (oc -> ic) backward through the GELU.
  Tensor w2 = d.put(DType::f64, {ic, oc}, random_values(rng, static_cast<size_t>(ic * oc), 1.0));
  Tensor dout = d.put(DType::f64, {n, ic}, random_values(rng, static_cast<size_t>(n * ic), 1.0));
  Tensor dpre = d->empty(DType::f64, {n, oc}), dact = d->empty(DType::f64, {n, oc}), want = d->empty(DType::f64, {n, oc});
  Tensor dw = d->zeros(d.stream, DType::f64, {ic, oc}), db = d->zeros(d.stream, DType::f64, {ic});
  Tensor want_dw = d->zeros(d.stream, DType::f64, {ic, oc}), want_db = d->zeros(d.stream, DType::f64, {ic});
  d->linear_backward_gelu(d.stream, dpre, dw, db, dout, out, w2, pre);
  d->linear_backward(d.stream, dact, want_dw, want_db, dout, out, w2);
  d->gelu_backward(d.stream, want, pre, dact);
  CHECK(d.get(dpre) == d.get(want));
  CHECK(d.get(dw) == d.get(want_dw));
  CHECK(d.get(db) == d.get(want_db));
  REQUIRE_ERROR_CONTAINS(d->linear_gelu_forward(d.stream, out, out, inp, w, bias), "out must not overlap");
  REQUIRE_ERROR_CONTAINS(d->linear_backward_gelu(d.stream, Tensor(), dw, db, dout, out, w2, pre), "dpre must be a tensor");
}

TEST_CASE("kernels: attention forward matches the explicit softmax loop", "[executor]") {
  Device d;
  Rng rng(104);
  for (bool causal : {true, false}) {
    AttentionShape sh{draw(rng, 1, 3), draw(rng, 2, 7), 4, 2, draw(rng, 2, 5), causal};
    std::vector<double> qkv = random_values(rng, static_cast<size_t>(sh.tokens() * sh.qkv_cols()));
    std::vector<double> want_lse;
    std::vector<double> want = naive_attention(qkv, sh, &want_lse);
    for (DType dt : {DType::f64, DType::f32}) {
      const double tol = dt == DType::f64 ? kF64Tol : kF32Tol;
      Tensor out = d->empty(dt, {sh.tokens(), sh.out_cols()}), lse = d->empty(dt, {sh.batch, sh.heads, sh.seq});
      d->attention_forward(d.stream, out, lse, d.put(dt, {sh.tokens(), sh.qkv_cols()}, qkv), sh);
      check_close(d.get(out), want, tol, causal ? "causal attention" : "bidirectional attention");
      check_close(d.get(lse), want_lse, tol, "attention log-sum-exp");
    }
  }
}

TEST_CASE("kernels: grouped-query attention equals multi-head attention with repeated K/V heads", "[executor]") {
  Device d;
  Rng rng(105);
  AttentionShape gqa{2, draw(rng, 3, 8), 6, 2, 4, true};
  AttentionShape mha = gqa;
  mha.kv_heads = gqa.heads;
  std::vector<double> qkv = random_values(rng, static_cast<size_t>(gqa.tokens() * gqa.qkv_cols()));
  // Build the MHA input: K and V head h are copies of GQA head h / (heads / kv_heads).
  const int64_t D = gqa.head_dim, group = gqa.heads / gqa.kv_heads;
  std::vector<double> qkv_mha(static_cast<size_t>(mha.tokens() * mha.qkv_cols()));
  for (int64_t r = 0; r < gqa.tokens(); ++r) {
    const double* src = qkv.data() + r * gqa.qkv_cols();
    double* dst = qkv_mha.data() + r * mha.qkv_cols();
    std::copy(src, src + gqa.heads * D, dst);
    for (int64_t h = 0; h < gqa.heads; ++h)
      for (int64_t j = 0; j < D; ++j) {
        dst[(gqa.heads + h) * D + j] = src[(gqa.heads + h / group) * D + j];
        dst[(2 * gqa.heads + h) * D + j] = src[(gqa.heads + gqa.kv_heads + h / group) * D + j];
      }
  }
  Tensor out_gqa = d->empty(DType::f64, {gqa.tokens(), gqa.out_cols()}), out_mha = d->empty(DType::f64, {gqa.tokens(), gqa.out_cols()});
  Tensor lse = d->empty(DType::f64, {gqa.batch, gqa.heads, gqa.seq});
  d->attention_forward(d.stream, out_gqa, lse, d.put({gqa.tokens(), gqa.qkv_cols()}, qkv), gqa);
  d->attention_forward(d.stream, out_mha, lse, d.put({mha.tokens(), mha.qkv_cols()}, qkv_mha), mha);
  CHECK(d.get(out_gqa) == d.get(out_mha));  // the same arithmetic, bit for bit
}

TEST_CASE("kernels: vocab-parallel cross-entropy pieces combine to the full cross-entropy", "[executor]") {
  Device d;
  Stream& s = d.stream;
  Rng rng(106);
  const int64_t n = draw(rng, 3, 9), v = draw(rng, 7, 23);
  std::vector<double> logits = random_values(rng, static_cast<size_t>(n * v), 3.0);
  std::vector<int32_t> targets = random_ids(rng, static_cast<size_t>(n), 0, v);
  // Naive: -log softmax(logits)[target].
  std::vector<double> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double z = 0;
    for (int64_t j = 0; j < v; ++j) z += std::exp(logits[static_cast<size_t>(i * v + j)]);
    want[static_cast<size_t>(i)] = std::log(z) - logits[static_cast<size_t>(i * v + targets[static_cast<size_t>(i)])];
  }
  Tensor tg = d.put_ids(targets);
  // One rank.
  Tensor full = d.put({n, v}, logits), losses = d->empty(DType::f64, {n}), mx = d->empty(DType::f64, {n}),
         se = d->empty(DType::f64, {n});
  d->cross_entropy_forward(s, losses, mx, se, full, tg);
  check_close(d.get(losses), want, kF64Tol, "full cross-entropy");
  Tensor dfull = d->empty(DType::f64, {n, v});
  d->ce_backward(s, dfull, full, tg, 0, mx, se, 0.25);
  std::vector<double> dfull_host = d.get(dfull);

  // Three "tp ranks" with uneven vocabulary ranges; the host plays the all-reduces.
  const int64_t cut1 = draw(rng, 1, v - 2), cut2 = draw(rng, cut1 + 1, v - 1);
  const int64_t bounds[4] = {0, cut1, cut2, v};
  std::vector<Tensor> shards;
  for (int r = 0; r < 3; ++r) {
    const int64_t w = bounds[r + 1] - bounds[r];
    std::vector<double> part(static_cast<size_t>(n * w));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j) part[static_cast<size_t>(i * w + j)] = logits[static_cast<size_t>(i * v + bounds[r] + j)];
    shards.push_back(d.put({n, w}, part));
  }
  std::vector<double> gmax(static_cast<size_t>(n), -1e300), gsum(static_cast<size_t>(n), 0), gtarget(static_cast<size_t>(n), 0);
  Tensor local = d->empty(DType::f64, {n});
  for (const Tensor& sh : shards) {  // all-reduce max
    d->ce_local_max(s, local, sh);
    std::vector<double> m = d.get(local);
    for (size_t i = 0; i < m.size(); ++i) gmax[i] = std::max(gmax[i], m[i]);
  }
  Tensor gmax_dev = d.put({n}, gmax);
  for (int r = 0; r < 3; ++r) {  // all-reduce sum of sum_exp and of the target logit
    d->ce_local_sum_exp(s, local, shards[static_cast<size_t>(r)], gmax_dev);
    std::vector<double> e = d.get(local);
    d->ce_local_target_logit(s, local, shards[static_cast<size_t>(r)], tg, bounds[r]);
    std::vector<double> t = d.get(local);
    for (size_t i = 0; i < e.size(); ++i) {
      gsum[i] += e[i];
      gtarget[i] += t[i];
    }
  }
  Tensor gsum_dev = d.put({n}, gsum), combined = d->empty(DType::f64, {n});
  d->ce_combine(s, combined, gmax_dev, gsum_dev, d.put({n}, gtarget));
  check_close(d.get(combined), want, kF64Tol, "vocab-parallel cross-entropy");
  // Each rank's dlogits is its slice of the full dlogits.
  for (int r = 0; r < 3; ++r) {
    const int64_t w = bounds[r + 1] - bounds[r];
    Tensor dl = d->empty(DType::f64, {n, w});
    d->ce_backward(s, dl, shards[static_cast<size_t>(r)], tg, bounds[r], gmax_dev, gsum_dev, 0.25);
    std::vector<double> got = d.get(dl), slice(static_cast<size_t>(n * w));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j) slice[static_cast<size_t>(i * w + j)] = dfull_host[static_cast<size_t>(i * v + bounds[r] + j)];
    check_close(got, slice, kF64Tol, "vocab-parallel dlogits");
  }
}

TEST_CASE("kernels: vocab-range embeddings summed over the ranges equal the full embedding", "[executor]") {
  Device d;
  Stream& s = d.stream;
  Rng rng(107);
  const int64_t n = draw(rng, 4, 12), c = draw(rng, 2, 9), v = draw(rng, 5, 20), t = 4;
  std::vector<double> table = random_values(rng, static_cast<size_t>(v * c));
  std::vector<double> pos_table = random_values(rng, static_cast<size_t>(t * c));
  std::vector<int32_t> ids = random_ids(rng, static_cast<size_t>(n), 0, v);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % t);
  Tensor ids_dev = d.put_ids(ids);
  // Full token + position embedding, against the definition.
  Tensor full = d->empty(DType::f64, {n, c});
  d->embedding_forward(s, full, ids_dev, d.put({v, c}, table), 0, false);
  d->embedding_forward(s, full, d.put_ids(pos), d.put({t, c}, pos_table), 0, true);
  std::vector<double> want(static_cast<size_t>(n * c));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      want[static_cast<size_t>(i * c + j)] = table[static_cast<size_t>(ids[static_cast<size_t>(i)] * c + j)] +
                                             pos_table[static_cast<size_t>(pos[static_cast<size_t>(i)] * c + j)];
  check_close(d.get(full), want, kF64Tol, "token + position embedding");
  // Two vocabulary ranges: each gives its rows and zeros elsewhere; the sum is the full lookup.
  const int64_t cut = draw(rng, 1, v - 1);
  Tensor lo = d->empty(DType::f64, {n, c}), hi = d->empty(DType::f64, {n, c});
  d->fill(s, lo, 7.0);  // stale values must be overwritten
  d->embedding_forward(s, lo, ids_dev, d.put({cut, c}, std::vector<double>(table.begin(), table.begin() + cut * c)), 0, false);
  d->embedding_forward(s, hi, ids_dev, d.put({v - cut, c}, std::vector<double>(table.begin() + cut * c, table.end())), cut, false);
  std::vector<double> a = d.get(lo), b = d.get(hi), sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  Tensor tokens_only = d->empty(DType::f64, {n, c});
  d->embedding_forward(s, tokens_only, ids_dev, d.put({v, c}, table), 0, false);
  CHECK(sum == d.get(tokens_only));
  for (int64_t i = 0; i < n; ++i)
    if (ids[static_cast<size_t>(i)] >= cut) CHECK(a[static_cast<size_t>(i * c)] == 0.0);
}

TEST_CASE("kernels: adamw matches the update rule with bias correction and decoupled decay", "[executor]") {
  Device d;
  Stream& s = d.stream;
  Rng rng(108);
  const int64_t n = 13;
  AdamWConfig cfg{0.01, 0.9, 0.99, 1e-8, 0.1};
  const double grad_scale = 0.5;
  std::vector<double> p = random_values(rng, n), m(n, 0.0), v(n, 0.0);
  Tensor params = d.put({n}, p), grads = d->empty(DType::f64, {n}), md = d.zeros({n}), vd = d.zeros({n});
  Tensor scale = d.put({1}, {grad_scale}), copy = d->empty(DType::f32, {n});
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<double> g = random_values(rng, n);
    d->upload_values(s, grads, g);
    d->adamw_step(s, params, grads, md, vd, scale, cfg, step, copy);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      const double gi = g[k] * grad_scale;
      m[k] = cfg.beta1 * m[k] + (1 - cfg.beta1) * gi;
      v[k] = cfg.beta2 * v[k] + (1 - cfg.beta2) * gi * gi;
      const double mhat = m[k] / (1 - std::pow(cfg.beta1, step)), vhat = v[k] / (1 - std::pow(cfg.beta2, step));
      p[k] -= cfg.learning_rate * (mhat / (std::sqrt(vhat) + cfg.eps) + cfg.weight_decay * p[k]);
    }
  }
  check_close(d.get(params), p, kF64Tol, "adamw params");
  check_close(d.get(md), m, kF64Tol, "adamw m");
  check_close(d.get(vd), v, kF64Tol, "adamw v");
  std::vector<double> rounded(p.size());
  for (size_t i = 0; i < p.size(); ++i) rounded[i] = static_cast<double>(static_cast<float>(p[i]));
  CHECK(d.get(copy) == rounded);  // the low-precision model copy
}

TEST_CASE("kernels: sharded sums of squares give the global clipping scale", "[executor]") {
  Device d;
  Stream& s = d.stream;
  Rng rng(109);
  std::vector<double> g = random_values(rng, 40, 3.0);
  double norm = 0;
  for (double x : g) norm += x * x;
  norm = std::sqrt(norm);
  Tensor grads = d.put({40}, g), ss = d.zeros({1}), scale = d->empty(DType::f64, {1});
  for (int64_t begin : {0, 7, 25}) {  // three shards [0,7) [7,25) [25,40) accumulate into one sum
    const int64_t end = begin == 0 ? 7 : (begin == 7 ? 25 : 40);
    d->sum_squares(s, ss, grads.flat(begin, end));
  }
  CHECK(std::sqrt(d.get(ss)[0]) == Approx(norm).epsilon(1e-13));
  d->clip_scale(s, scale, ss, norm / 4);
  CHECK(d.get(scale)[0] == Approx((norm / 4) / (norm + 1e-6)).epsilon(1e-13));
  d->clip_scale(s, scale, ss, norm * 2);
  CHECK(d.get(scale)[0] == 1.0);
  d->clip_scale(s, scale, ss, 0.0);  // clipping off
  CHECK(d.get(scale)[0] == 1.0);
}
