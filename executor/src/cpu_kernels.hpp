// The CPU reference kernels on raw pointers, templated on the element type T (float or
// double; instantiated in cpu_kernels.cpp). Shapes are passed explicitly; the Backend layer
// has already checked them. Every kernel is single-threaded with a fixed loop order, so the
// results are bit-reproducible; long reductions (norm statistics, softmax sums, sums of
// squares) accumulate in double. Outputs marked "=" are written, "+=" accumulated.
#pragma once

#include <cstdint>

namespace trainplan::executor::cpu {

/// c (M,N) row-major = (accumulate ? c : bias broadcast over rows, or 0) + A B, where
/// A(m,k) = a[m*a_row_stride + k*a_col_stride] and b is (K,N) row-major. Each element is
/// summed over k in increasing order, so the result equals the naive triple loop bit for bit.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row_stride, int64_t a_col_stride, const T* b,
          T* c, bool accumulate, const T* bias);

// Elementwise, count elements.
template <class T> void fill(T* x, int64_t count, T value);
template <class T> void add(T* out, const T* a, const T* b, int64_t count);
template <class T> void accumulate(T* y, const T* x, int64_t count);

// out: (n,c) =/+=; ids: n; table: (rows,c) holding rows [row_begin, row_begin + rows).
template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t n, int64_t c, int64_t rows,
                       int64_t row_begin, bool accumulate);
// dtable: (rows,c) +=; dout: (n,c).
template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t c, int64_t rows,
                        int64_t row_begin);

// out, inp: (n,c); weight, bias (nullable): c; mean, rstd: n.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t n, int64_t c,
                       double eps);
// dinp (n,c) =; dweight (c) +=; dbias (c, nullable) +=.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t n, int64_t c);
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t n, int64_t c, double eps);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int64_t n,
                      int64_t c);

// out: (n,oc) =; inp: (n,ic); weight: (oc,ic); bias: oc (nullable).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n, int64_t ic, int64_t oc);
// dinp (n,ic, nullable) =; dweight (oc,ic, nullable) +=; dbias (oc, nullable) +=; dout: (n,oc).
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t n,
                     int64_t ic, int64_t oc);

// count elements; out may be inp, dinp may be dout.
template <class T> void gelu_forward(T* out, const T* inp, int64_t count);
template <class T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t count);
template <class T> void relu_forward(T* out, const T* inp, int64_t count);
template <class T> void relu_backward(T* dinp, const T* inp, const T* dout, int64_t count);
// out: (n,f); inp: (n,2f) rows [gate | up].
template <class T> void swiglu_forward(T* out, const T* inp, int64_t n, int64_t f);
// dinp: (n,2f) =; dout: (n,f).
template <class T> void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t f);

// qkv: (b*t, (h + 2 kvh) d); out: (b*t, h d); lse: (b, h, t).
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                       int64_t head_dim, bool causal);
// dqkv: (b*t, (h + 2 kvh) d) =.
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t batch,
                        int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim, bool causal);

// out, inp: (b*t, (h + 2 kvh) d); rotates the first (h + kvh) heads of each row by
// pos = row % seq, copies the v heads. out may be inp.
template <class T>
void rotary(T* out, const T* inp, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
            double theta, bool inverse);

// logits: (n,v) local vocabulary slice; max, sum_exp, target_logit, losses: n; targets: n.
template <class T> void ce_local_max(T* max, const T* logits, int64_t n, int64_t v);
template <class T> void ce_local_sum_exp(T* sum_exp, const T* logits, const T* max, int64_t n, int64_t v);
template <class T>
void ce_local_target_logit(T* target_logit, const T* logits, const int32_t* targets, int64_t n, int64_t v,
                           int64_t vocab_begin);
template <class T>
void ce_combine(T* losses, const T* max, const T* sum_exp, const T* target_logit, int64_t n);
// dlogits (n,v) = (may be logits).
template <class T>
void ce_backward(T* dlogits, const T* logits, const int32_t* targets, const T* max, const T* sum_exp, int64_t n,
                 int64_t v, int64_t vocab_begin, double dloss_scale);

// Mixture of experts. logits, probs: (n,e); weights: (n,k); experts: (n,k) i32.
// probs = softmax(logits); each row keeps its k largest probabilities (ties: the lower
// expert index), in decreasing order, and weights = kept probs / their sum.
template <class T>
void router_forward(T* weights, int32_t* experts, T* probs, const T* logits, int64_t n, int64_t e, int64_t k);
// dlogits (n,e) = the gradient through the renormalised kept weights and the softmax.
template <class T>
void router_backward(T* dlogits, const T* dweights, const T* weights, const int32_t* experts, const T* probs,
                     int64_t n, int64_t e, int64_t k);
// out (n,c) = sum_i weights[j,i] y[rows[j,i]] (rows < 0: dropped, adds nothing); y: (r,c).
template <class T>
void moe_combine_forward(T* out, const T* y, const T* weights, const int32_t* rows, int64_t n, int64_t c,
                         int64_t k);
// dy (r,c) = (rows no token reads are 0); dweights (n,k) = dot(dout[j], y[rows[j,i]]).
template <class T>
void moe_combine_backward(T* dy, T* dweights, const T* dout, const T* y, const T* weights, const int32_t* rows,
                          int64_t n, int64_t c, int64_t k, int64_t r);

// out[0] += sum x^2.
template <class T> void sum_squares(T* out, const T* x, int64_t count);
template <class T> void clip_scale(T* scale, const T* sum_squares, double max_norm);
// params, grads, m, v: count; scale: 1.
template <class T>
void adamw_step(T* params, const T* grads, T* m, T* v, const T* scale, int64_t count, double learning_rate,
                double beta1, double beta2, double eps, double weight_decay, int64_t step);

}  // namespace trainplan::executor::cpu
