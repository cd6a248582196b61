// CPU reference kernels (see cpu_kernels.hpp for shapes and conventions).
#include "cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace trainplan::executor::cpu {

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_rs, int64_t a_cs, const T* b, T* c,
          bool accumulate, const T* bias) {
  auto init_row = [&](T* row) {
    if (accumulate) return;
    for (int64_t j = 0; j < n; ++j) row[j] = bias ? bias[j] : T(0);
  };
  // Four output rows at a time share each row of B; the inner loop runs along the rows of B
  // and C (contiguous), which the compiler vectorizes without reordering any sum.
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    T* c0 = c + i * n;
    T* c1 = c0 + n;
    T* c2 = c1 + n;
    T* c3 = c2 + n;
    init_row(c0);
    init_row(c1);
    init_row(c2);
    init_row(c3);
    for (int64_t p = 0; p < k; ++p) {
      const T a0 = a[i * a_rs + p * a_cs], a1 = a[(i + 1) * a_rs + p * a_cs];
      const T a2 = a[(i + 2) * a_rs + p * a_cs], a3 = a[(i + 3) * a_rs + p * a_cs];
      const T* __restrict brow = b + p * n;
      T* __restrict d0 = c0;
      T* __restrict d1 = c1;
      T* __restrict d2 = c2;
      T* __restrict d3 = c3;
      for (int64_t j = 0; j < n; ++j) {
        const T bv = brow[j];
        d0[j] += a0 * bv;
        d1[j] += a1 * bv;
        d2[j] += a2 * bv;
        d3[j] += a3 * bv;
      }
    }
  }
  for (; i < m; ++i) {
    T* __restrict crow = c + i * n;
    init_row(crow);
    for (int64_t p = 0; p < k; ++p) {
      const T av = a[i * a_rs + p * a_cs];
      const T* __restrict brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

template <class T>
void fill(T* x, int64_t count, T value) {
  std::fill(x, x + count, value);
}

template <class T>
void add(T* out, const T* a, const T* b, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template <class T>
void accumulate(T* y, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

// ---- embedding ---------------------------------------------------------------------------------

template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t n, int64_t c, int64_t rows,
                       int64_t row_begin, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    T* o = out + i * c;
    int64_t r = static_cast<int64_t>(ids[i]) - row_begin;
    if (r >= 0 && r < rows) {
      const T* src = table + r * c;
      if (accumulate)
        for (int64_t j = 0; j < c; ++j) o[j] += src[j];
      else
        std::copy(src, src + c, o);
    } else if (!accumulate) {
      std::fill(o, o + c, T(0));
    }
  }
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t c, int64_t rows,
                        int64_t row_begin) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = static_cast<int64_t>(ids[i]) - row_begin;
    if (r < 0 || r >= rows) continue;
    T* d = dtable + r * c;
    const T* g = dout + i * c;
    for (int64_t j = 0; j < c; ++j) d[j] += g[j];
  }
}

// ---- normalization -----------------------------------------------------------------------------

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t n, int64_t c,
                       double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += x[j];
    const double mu = sum / static_cast<double>(c);
    double var = 0;
    for (int64_t j = 0; j < c; ++j) var += (x[j] - mu) * (x[j] - mu);
    var /= static_cast<double>(c);
    const T m = static_cast<T>(mu);
    const T s = static_cast<T>(1.0 / std::sqrt(var + eps));
    T* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = (x[j] - m) * s * weight[j] + (bias ? bias[j] : T(0));
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    const T* g = dout + i * c;
    const T m = mean[i], s = rstd[i];
    // dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
    double sum_dnorm = 0, sum_dnorm_xhat = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (x[j] - m) * s;
      const T dnorm = g[j] * weight[j];
      sum_dnorm += dnorm;
      sum_dnorm_xhat += dnorm * xhat;
    }
    const T mean_dnorm = static_cast<T>(sum_dnorm / static_cast<double>(c));
    const T mean_dnorm_xhat = static_cast<T>(sum_dnorm_xhat / static_cast<double>(c));
    T* dx = dinp + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (x[j] - m) * s;
      dweight[j] += g[j] * xhat;
      if (dbias) dbias[j] += g[j];
      dx[j] = s * (g[j] * weight[j] - mean_dnorm - xhat * mean_dnorm_xhat);
    }
  }
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t n, int64_t c, double eps) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    double sum_sq = 0;
    for (int64_t j = 0; j < c; ++j) sum_sq += static_cast<double>(x[j]) * x[j];
    const T s = static_cast<T>(1.0 / std::sqrt(sum_sq / static_cast<double>(c) + eps));
    T* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = x[j] * s * weight[j];
    rstd[i] = s;
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t n,
                      int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    const T* x = inp + i * c;
    const T* g = dout + i * c;
    const T s = rstd[i];
    // dx = rstd * (dnorm - xhat * mean(dnorm * xhat)), xhat = x * rstd, dnorm = dout * weight.
    double sum_dnorm_xhat = 0;
    for (int64_t j = 0; j < c; ++j) sum_dnorm_xhat += (g[j] * weight[j]) * (x[j] * s);
    const T mean_dnorm_xhat = static_cast<T>(sum_dnorm_xhat / static_cast<double>(c));
    T* dx = dinp + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = x[j] * s;
      dweight[j] += g[j] * xhat;
      dx[j] = s * (g[j] * weight[j] - xhat * mean_dnorm_xhat);
    }
  }
}

// ---- linear ------------------------------------------------------------------------------------

template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n, int64_t ic, int64_t oc) {
  // out = inp W^T: the GEMM wants B = W^T (ic, oc) row-major.
  std::vector<T> wt(static_cast<size_t>(ic * oc));
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < ic; ++i) wt[static_cast<size_t>(i * oc + o)] = weight[o * ic + i];
  gemm<T>(n, oc, ic, inp, ic, 1, wt.data(), out, false, bias);
}

template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t n,
                     int64_t ic, int64_t oc) {
  if (dinp) gemm<T>(n, ic, oc, dout, oc, 1, weight, dinp, false, nullptr);       // dout (n,oc) W (oc,ic)
  if (dweight) gemm<T>(oc, ic, n, dout, 1, oc, inp, dweight, true, nullptr);    // dout^T (oc,n) inp (n,ic)
  if (dbias)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < oc; ++o) dbias[o] += dout[i * oc + o];
}

// ---- activations -------------------------------------------------------------------------------

template <class T>
void gelu_forward(T* out, const T* inp, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    const T th = std::tanh(u);
    const T du = static_cast<T>(kGeluScale) * (T(1) + T(3) * static_cast<T>(kGeluCubic) * x * x);
    dinp[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
  }
}

template <class T>
void relu_forward(T* out, const T* inp, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <class T>
void relu_backward(T* dinp, const T* inp, const T* dout, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dinp[i] = inp[i] > T(0) ? dout[i] : T(0);
}

template <class T>
void swiglu_forward(T* out, const T* inp, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = inp + i * 2 * f;
    const T* up = gate + f;
    for (int64_t j = 0; j < f; ++j) {
      const T sig = T(1) / (T(1) + std::exp(-gate[j]));
      out[i * f + j] = gate[j] * sig * up[j];
    }
  }
}

template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t f) {
  for (int64_t i = 0; i < n; ++i) {
    const T* gate = inp + i * 2 * f;
    const T* up = gate + f;
    T* dgate = dinp + i * 2 * f;
    T* dup = dgate + f;
    for (int64_t j = 0; j < f; ++j) {
      const T g = gate[j];
      const T sig = T(1) / (T(1) + std::exp(-g));
      const T d = dout[i * f + j];
      dgate[j] = d * up[j] * (sig + g * sig * (T(1) - sig));
      dup[j] = d * g * sig;
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------

namespace {
// Column offsets of head h's Q, K and V in a qkv row.
struct QkvLayout {
  int64_t heads, kv_heads, head_dim;
  int64_t row() const { return (heads + 2 * kv_heads) * head_dim; }
  int64_t kv_of(int64_t h) const { return h / (heads / kv_heads); }
  int64_t q(int64_t h) const { return h * head_dim; }
  int64_t k(int64_t h) const { return (heads + kv_of(h)) * head_dim; }
  int64_t v(int64_t h) const { return (heads + kv_heads + kv_of(h)) * head_dim; }
};

template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                       int64_t head_dim, bool causal) {
  const QkvLayout L{heads, kv_heads, head_dim};
  const int64_t row = L.row(), out_row = heads * head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  std::vector<T> p(static_cast<size_t>(seq));
  for (int64_t b = 0; b < batch; ++b) {
    const T* base = qkv + b * seq * row;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        const T* q = base + t * row + L.q(h);
        const int64_t len = causal ? t + 1 : seq;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t s = 0; s < len; ++s) {
          p[static_cast<size_t>(s)] = dot(q, base + s * row + L.k(h), head_dim) * scale;
          mx = std::max(mx, p[static_cast<size_t>(s)]);
        }
        double sum = 0;
        for (int64_t s = 0; s < len; ++s) sum += std::exp(static_cast<double>(p[static_cast<size_t>(s)] - mx));
        const T l = static_cast<T>(static_cast<double>(mx) + std::log(sum));
        lse[(b * heads + h) * seq + t] = l;
        T* o = out + (b * seq + t) * out_row + h * head_dim;
        std::fill(o, o + head_dim, T(0));
        for (int64_t s = 0; s < len; ++s) {
          const T w = std::exp(p[static_cast<size_t>(s)] - l);
          const T* v = base + s * row + L.v(h);
          for (int64_t d = 0; d < head_dim; ++d) o[d] += w * v[d];
        }
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t batch,
                        int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim, bool causal) {
  const QkvLayout L{heads, kv_heads, head_dim};
  const int64_t row = L.row(), out_row = heads * head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  std::fill(dqkv, dqkv + batch * seq * row, T(0));
  for (int64_t b = 0; b < batch; ++b) {
    const T* base = qkv + b * seq * row;
    T* dbase = dqkv + b * seq * row;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        const T* q = base + t * row + L.q(h);
        T* dq = dbase + t * row + L.q(h);
        const T* g = dout + (b * seq + t) * out_row + h * head_dim;
        const T* o = out + (b * seq + t) * out_row + h * head_dim;
        const T l = lse[(b * heads + h) * seq + t];
        // sum_s p_s (dout . v_s) = dout . out: the softmax backward's row term.
        const T row_term = dot(g, o, head_dim);
        const int64_t len = causal ? t + 1 : seq;
        for (int64_t s = 0; s < len; ++s) {
          const T* k = base + s * row + L.k(h);
          const T* v = base + s * row + L.v(h);
          const T p = std::exp(dot(q, k, head_dim) * scale - l);
          const T dscore = p * (dot(g, v, head_dim) - row_term) * scale;
          T* dk = dbase + s * row + L.k(h);
          T* dv = dbase + s * row + L.v(h);
          for (int64_t d = 0; d < head_dim; ++d) {
            dq[d] += dscore * k[d];
            dk[d] += dscore * q[d];
            dv[d] += p * g[d];
          }
        }
      }
    }
  }
}

// ---- cross-entropy -----------------------------------------------------------------------------

template <class T>
void ce_local_max(T* max, const T* logits, int64_t n, int64_t v) {
  for (int64_t i = 0; i < n; ++i) max[i] = *std::max_element(logits + i * v, logits + (i + 1) * v);
}

template <class T>
void ce_local_sum_exp(T* sum_exp, const T* logits, const T* max, int64_t n, int64_t v) {
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(logits[i * v + j] - max[i]));
    sum_exp[i] = static_cast<T>(sum);
  }
}

template <class T>
void ce_local_target_logit(T* target_logit, const T* logits, const int32_t* targets, int64_t n, int64_t v,
                           int64_t vocab_begin) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = static_cast<int64_t>(targets[i]) - vocab_begin;
    target_logit[i] = (j >= 0 && j < v) ? logits[i * v + j] : T(0);
  }
}

template <class T>
void ce_combine(T* losses, const T* max, const T* sum_exp, const T* target_logit, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    losses[i] = static_cast<T>(std::log(static_cast<double>(sum_exp[i])) + (max[i] - target_logit[i]));
}

template <class T>
void ce_backward(T* dlogits, const T* logits, const int32_t* targets, const T* max, const T* sum_exp, int64_t n,
                 int64_t v, int64_t vocab_begin, double dloss_scale) {
  const T scale = static_cast<T>(dloss_scale);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t target = static_cast<int64_t>(targets[i]) - vocab_begin;
    const T inv_sum = T(1) / sum_exp[i];
    for (int64_t j = 0; j < v; ++j) {
      const T p = std::exp(logits[i * v + j] - max[i]) * inv_sum;
      dlogits[i * v + j] = scale * (p - (j == target ? T(1) : T(0)));
    }
  }
}

// ---- optimizer ---------------------------------------------------------------------------------

template <class T>
void sum_squares(T* out, const T* x, int64_t count) {
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(x[i]) * x[i];
  out[0] = static_cast<T>(static_cast<double>(out[0]) + sum);
}

template <class T>
void clip_scale(T* scale, const T* sum_squares, double max_norm) {
  const double norm = std::sqrt(static_cast<double>(sum_squares[0]));
  scale[0] = static_cast<T>(max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0);
}

template <class T>
void adamw_step(T* params, const T* grads, T* m, T* v, const T* scale, int64_t count, double learning_rate,
                double beta1, double beta2, double eps, double weight_decay, int64_t step) {
  const double correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double s = static_cast<double>(scale[0]);
  for (int64_t i = 0; i < count; ++i) {
    const double g = static_cast<double>(grads[i]) * s;
    const double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
    const double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double p = static_cast<double>(params[i]);
    const double update = (mi / correction1) / (std::sqrt(vi / correction2) + eps) + weight_decay * p;
    params[i] = static_cast<T>(p - learning_rate * update);
  }
}

// ---- instantiations ----------------------------------------------------------------------------

template <class T>
void rotary(T* out, const T* inp, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
            double theta, bool inverse) {
  const QkvLayout L{heads, kv_heads, head_dim};
  const int64_t row = L.row(), half = head_dim / 2, rotated = (heads + kv_heads) * head_dim;
  // Angles depend on the position and the pair index only: one table of cos / sin per row.
  std::vector<double> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t n = 0; n < batch * seq; ++n) {
    const double pos = static_cast<double>(n % seq);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = pos * std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
      cos_t[static_cast<size_t>(j)] = std::cos(angle);
      sin_t[static_cast<size_t>(j)] = inverse ? -std::sin(angle) : std::sin(angle);
    }
    const T* x = inp + n * row;
    T* y = out + n * row;
    for (int64_t h = 0; h < heads + kv_heads; ++h) {
      const T* xh = x + h * head_dim;
      T* yh = y + h * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const double a = static_cast<double>(xh[j]), b = static_cast<double>(xh[j + half]);
        const double c = cos_t[static_cast<size_t>(j)], s = sin_t[static_cast<size_t>(j)];
        yh[j] = static_cast<T>(a * c - b * s);
        yh[j + half] = static_cast<T>(b * c + a * s);
      }
    }
    if (out != inp)
      for (int64_t i = rotated; i < row; ++i) y[i] = x[i];
  }
}

template <class T>
void router_forward(T* weights, int32_t* experts, T* probs, const T* logits, int64_t n, int64_t e, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(e));
  for (int64_t j = 0; j < n; ++j) {
    const T* z = logits + j * e;
    T* p = probs + j * e;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t x = 0; x < e; ++x) mx = std::max(mx, static_cast<double>(z[x]));
    double sum = 0;
    for (int64_t x = 0; x < e; ++x) sum += std::exp(static_cast<double>(z[x]) - mx);
    for (int64_t x = 0; x < e; ++x) p[x] = static_cast<T>(std::exp(static_cast<double>(z[x]) - mx) / sum);
    for (int64_t x = 0; x < e; ++x) order[static_cast<size_t>(x)] = x;
    // Larger probability first; equal probabilities keep the lower expert index first.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double kept = 0;
    for (int64_t i = 0; i < k; ++i) kept += static_cast<double>(p[order[static_cast<size_t>(i)]]);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t x = order[static_cast<size_t>(i)];
      experts[j * k + i] = static_cast<int32_t>(x);
      weights[j * k + i] = static_cast<T>(static_cast<double>(p[x]) / kept);
    }
  }
}

template <class T>
void router_backward(T* dlogits, const T* dweights, const T* weights, const int32_t* experts, const T* probs,
                     int64_t n, int64_t e, int64_t k) {
  std::vector<double> g(static_cast<size_t>(e));
  for (int64_t j = 0; j < n; ++j) {
    const T* p = probs + j * e;
    // w_i = p_{x_i} / S with S the kept sum: dL/dp_{x_i} = (dw_i - sum_l dw_l w_l) / S.
    double kept = 0, dot = 0;
    for (int64_t i = 0; i < k; ++i) {
      kept += static_cast<double>(p[experts[j * k + i]]);
      dot += static_cast<double>(dweights[j * k + i]) * static_cast<double>(weights[j * k + i]);
    }
    std::fill(g.begin(), g.end(), 0.0);
    for (int64_t i = 0; i < k; ++i)
      g[static_cast<size_t>(experts[j * k + i])] = (static_cast<double>(dweights[j * k + i]) - dot) / kept;
    // Softmax: dz_x = p_x (g_x - sum_y p_y g_y).
    double pg = 0;
    for (int64_t x = 0; x < e; ++x) pg += static_cast<double>(p[x]) * g[static_cast<size_t>(x)];
    for (int64_t x = 0; x < e; ++x)
      dlogits[j * e + x] = static_cast<T>(static_cast<double>(p[x]) * (g[static_cast<size_t>(x)] - pg));
  }
}

template <class T>
void moe_combine_forward(T* out, const T* y, const T* weights, const int32_t* rows, int64_t n, int64_t c,
                         int64_t k) {
  for (int64_t j = 0; j < n; ++j) {
    T* o = out + j * c;
    for (int64_t x = 0; x < c; ++x) o[x] = T(0);
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = rows[j * k + i];
      if (r < 0) continue;
      const T w = weights[j * k + i];
      const T* yr = y + static_cast<int64_t>(r) * c;
      for (int64_t x = 0; x < c; ++x) o[x] += w * yr[x];
    }
  }
}

template <class T>
void moe_combine_backward(T* dy, T* dweights, const T* dout, const T* y, const T* weights, const int32_t* rows,
                          int64_t n, int64_t c, int64_t k, int64_t r) {
  std::fill(dy, dy + r * c, T(0));
  for (int64_t j = 0; j < n; ++j) {
    const T* g = dout + j * c;
    for (int64_t i = 0; i < k; ++i) {
      const int32_t row = rows[j * k + i];
      if (row < 0) {
        dweights[j * k + i] = T(0);
        continue;
      }
      const T w = weights[j * k + i];
      const T* yr = y + static_cast<int64_t>(row) * c;
      T* d = dy + static_cast<int64_t>(row) * c;
      double dot = 0;
      for (int64_t x = 0; x < c; ++x) {
        d[x] += w * g[x];
        dot += static_cast<double>(g[x]) * static_cast<double>(yr[x]);
      }
      dweights[j * k + i] = static_cast<T>(dot);
    }
  }
}

#define TP_CPU_KERNELS(T)                                                                                      \
  template void gemm<T>(int64_t, int64_t, int64_t, const T*, int64_t, int64_t, const T*, T*, bool, const T*);  \
  template void fill<T>(T*, int64_t, T);                                                                       \
  template void add<T>(T*, const T*, const T*, int64_t);                                                       \
  template void accumulate<T>(T*, const T*, int64_t);                                                          \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t, bool);  \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);       \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double);      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,   \
                                      int64_t);                                                                \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                      \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);         \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);                \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);       \
  template void gelu_forward<T>(T*, const T*, int64_t);                                                        \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                                             \
  template void relu_forward<T>(T*, const T*, int64_t);                                                        \
  template void relu_backward<T>(T*, const T*, const T*, int64_t);                                             \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t);                                             \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t);                                  \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, bool);     \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,   \
                                      int64_t, int64_t, bool);                                                 \
  template void rotary<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, double, bool);            \
  template void ce_local_max<T>(T*, const T*, int64_t, int64_t);                                               \
  template void ce_local_sum_exp<T>(T*, const T*, const T*, int64_t, int64_t);                                 \
  template void ce_local_target_logit<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t);             \
  template void ce_combine<T>(T*, const T*, const T*, const T*, int64_t);                                      \
  template void ce_backward<T>(T*, const T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t,    \
                               double);                                                                        \
  template void router_forward<T>(T*, int32_t*, T*, const T*, int64_t, int64_t, int64_t);                     \
  template void router_backward<T>(T*, const T*, const T*, const int32_t*, const T*, int64_t, int64_t, int64_t); \
  template void moe_combine_forward<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t);      \
  template void moe_combine_backward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t, \
                                        int64_t, int64_t);                                                     \
  template void sum_squares<T>(T*, const T*, int64_t);                                                         \
  template void clip_scale<T>(T*, const T*, double);                                                           \
  template void adamw_step<T>(T*, const T*, T*, T*, const T*, int64_t, double, double, double, double, double, \
                              int64_t);

TP_CPU_KERNELS(float)
TP_CPU_KERNELS(double)
#undef TP_CPU_KERNELS

}  // namespace trainplan::executor::cpu
