// File: trainplan/executor/backend.hpp
//
// The backend interface: device memory, streams and events, host<->device copies, and the
// forward/backward kernels a transformer training step needs. The CPU reference backend and
// the CUDA backend implement the same interface (the way ggml and faiss do it); the registry
// (registry.hpp) is the only place that knows which backends were compiled in.
//
//   std::unique_ptr<Backend> be = make_backend("cpu");
//   Stream& s = be->default_stream();
//   Tensor x = be->empty(DType::f32, {n, c}), y = be->empty(DType::f32, {n, oc});
//   Tensor w = be->empty(DType::f32, {oc, c}), b = be->empty(DType::f32, {oc});
//   be->upload_values(s, x, host_x);                 // explicit copy host -> device
//   ... (w, b likewise)
//   auto start = be->create_event(), stop = be->create_event();
//   be->record(*start, s);
//   be->linear_forward(s, y, x, w, b);              // y = x W^T + b, queued on s
//   be->record(*stop, s);
//   std::vector<double> host_y = be->download_values(s, y);   // synchronizes s
//   double kernel_s = be->elapsed_s(*start, *stop);
//
// Conventions every kernel follows (and every backend must keep):
// - Shapes are explicit and checked; a tensor is read as a matrix of rows() x cols() (tokens
//   as rows, so sequence-parallel slices of the token rows are plain row ranges). Shapes in
//   the comments: N token rows (= batch * seq, or a slice of it), C features, V vocabulary.
// - Weight layout is PyTorch's: a linear weight is (out_features, in_features) and
//   y = x W^T + b. An embedding table is (rows, C). (The models library describes weight
//   shapes as {in, out}; the executor transposes nothing, it allocates (out, in).)
// - Weight and bias gradients ACCUMULATE (dW += ...), so micro-batches and tied weights
//   sum into one gradient; zero them with fill() before a step. Input gradients are
//   WRITTEN (dx = ...); a residual branch is summed with accumulate().
// - Outputs must not overlap inputs unless a kernel says so; where it does, only exact
//   in-place use (same start, same size) is allowed, never a partial overlap.
// - Kernels are queued on a stream and may run asynchronously: read results only after
//   synchronize() (download_values() does it). The CPU backend runs each call to completion
//   before returning, in a fixed order (bit-reproducible, single-threaded).
// - Element types: a backend throws trainplan::Error for a dtype it does not compute in. The
//   CPU backend computes in f32 or f64 and rejects bf16/f16 (all floating tensors of one call
//   must then share one dtype); the CUDA backend stores bf16/f16/f32 and accumulates in f32.
// - Argument errors (wrong shapes, dtypes, aliasing) throw trainplan::Error naming the
//   kernel and the argument; the checks are shared by all backends (backend.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/executor/tensor.hpp"

namespace trainplan::executor {

/// An in-order queue of work on a device (a CUDA stream). Created by Backend::create_stream;
/// only the backend that created it may use it.
class Stream {
 public:
  virtual ~Stream() = default;
};

/// A marker recorded on a stream: it completes when the work queued before it has finished.
/// Used for cross-stream ordering (Backend::wait) and timing (Backend::elapsed_s).
class Event {
 public:
  virtual ~Event() = default;
};

/// Shape of one causal (or bidirectional) attention call. Q has `heads` heads and K, V have
/// `kv_heads` heads (grouped-query attention when kv_heads < heads; query head h reads
/// key/value head h / (heads / kv_heads)). Under tensor parallelism these are the local
/// head counts of one rank.
struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 1;
  bool causal = true;  // decoders: token t attends to tokens <= t

  int64_t tokens() const { return batch * seq; }
  /// Columns of the attention output: heads * head_dim.
  int64_t out_cols() const { return heads * head_dim; }
  /// Columns of the fused qkv input: (heads + 2 * kv_heads) * head_dim.
  int64_t qkv_cols() const { return (heads + 2 * kv_heads) * head_dim; }
};

/// AdamW hyperparameters (Loshchilov & Hutter 2019, decoupled weight decay).
struct AdamWConfig {
  double learning_rate = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  /// Decoupled: p -= lr * weight_decay * p, independent of the gradient. Pass 0 for
  /// parameters that are not decayed (biases, norm weights).
  double weight_decay = 0.1;
};

class Backend {
 public:
  Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend();

  /// "cpu", "cuda".
  virtual std::string_view name() const = 0;
  /// One line for logs: the device and what it computes in.
  virtual std::string description() const = 0;
  /// Whether the kernels accept floating tensors of this dtype.
  virtual bool supports(DType dtype) const = 0;
  /// True when work runs as it is queued (the CPU): the host clock then times it exactly, and
  /// waiting for a stream costs nothing. Device backends queue work and time it with events.
  virtual bool runs_when_queued() const { return false; }

  // ---- memory ------------------------------------------------------------------------------
  /// A new device buffer of `size_bytes` (contents undefined). Freed with its last Tensor.
  std::shared_ptr<Buffer> allocate(size_t size_bytes);
  /// A new tensor on its own buffer (contents undefined).
  Tensor empty(DType dtype, const Shape& shape);
  /// A new tensor filled with zeros (queued on `stream`).
  Tensor zeros(Stream& stream, DType dtype, const Shape& shape);
  /// Bytes of the buffers alive now, and the most alive at once since the last reset_peak().
  size_t allocated_bytes() const;
  size_t peak_allocated_bytes() const;
  void reset_peak();

  // ---- streams, events, timing -------------------------------------------------------------
  virtual Stream& default_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  /// Marks the point in `stream` after all work queued so far.
  virtual void record(Event& event, Stream& stream) = 0;
  /// Work queued on `stream` after this call starts only after `event` has completed.
  virtual void wait(Stream& stream, Event& event) = 0;
  /// Blocks the host until all work queued on `stream` has finished.
  virtual void synchronize(Stream& stream) = 0;
  /// Blocks the host until `event` has completed.
  virtual void synchronize(Event& event) = 0;
  /// Seconds between two completed events (end after start), measured on the device.
  virtual double elapsed_s(Event& start, Event& end) = 0;
  /// Host monotonic clock in seconds (std::chrono::steady_clock), for timing host work.
  static double now_s();

  // ---- copies (asynchronous on `stream`: keep host memory alive until synchronized) ---------
  /// dst <- host bytes; host.size() must equal dst.size_bytes().
  void upload(Stream& stream, const Tensor& dst, std::span<const std::byte> host);
  /// host bytes <- src; host.size() must equal src.size_bytes().
  void download(Stream& stream, std::span<std::byte> host, const Tensor& src);
  /// dst <- src on the device; equal dtype and numel.
  void copy(Stream& stream, const Tensor& dst, const Tensor& src);
  /// dst (floating, numel values) <- values rounded to dst's dtype. Synchronizes `stream`
  /// before returning (the converted bytes are a temporary).
  void upload_values(Stream& stream, const Tensor& dst, std::span<const double> values);
  /// dst (i32) <- ids. Synchronizes `stream` before returning.
  void upload_ids(Stream& stream, const Tensor& dst, std::span<const int32_t> ids);
  /// The values of a floating tensor, as doubles. Synchronizes `stream`.
  std::vector<double> download_values(Stream& stream, const Tensor& src);
  /// The values of an i32 tensor. Synchronizes `stream`.
  std::vector<int32_t> download_ids(Stream& stream, const Tensor& src);

  // ---- elementwise -------------------------------------------------------------------------
  /// x[i] = value for every element (zeroing gradients, initial constants).
  void fill(Stream& stream, const Tensor& x, double value);
  /// out = a + b elementwise (the residual add); equal shapes. out may be a or b.
  /// Backward of the residual add is the identity for both inputs.
  void add(Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b);
  /// y += x elementwise; equal numel (summing gradient branches).
  void accumulate(Stream& stream, const Tensor& y, const Tensor& x);

  // ---- embedding ---------------------------------------------------------------------------
  /// out[n] (+)= table[ids[n] - row_begin] when row_begin <= ids[n] < row_begin + R, else
  /// adds nothing (writes 0 unless `accumulate`).
  /// out: (N,C) float; ids: N i32; table: (R,C) float, rows [row_begin, row_begin + R) of
  /// the full table. Vocab-parallel embedding: each tp rank passes its vocabulary range and
  /// an all-reduce sums the partial results. Token + position embedding: a second call with
  /// the position table, position ids and accumulate = true.
  void embedding_forward(Stream& stream, const Tensor& out, const Tensor& ids, const Tensor& table,
                         int64_t row_begin, bool accumulate);
  /// dtable[ids[n] - row_begin] += dout[n] for the ids in range, in increasing n.
  /// dtable: (R,C); dout: (N,C); ids: N i32.
  void embedding_backward(Stream& stream, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                          int64_t row_begin);

  // ---- normalization -----------------------------------------------------------------------
  /// LayerNorm over the last dimension: out = (inp - mean) * rstd * weight + bias,
  /// rstd = 1 / sqrt(var + eps) with the biased variance.
  /// out, inp: (N,C); weight, bias: C (bias optional); mean, rstd: N (saved for backward).
  void layernorm_forward(Stream& stream, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& inp, const Tensor& weight, const Tensor& bias, double eps);
  /// dinp (N,C) =; dweight (C) +=; dbias (C, optional) +=. dout, inp: (N,C); mean, rstd: N.
  void layernorm_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd);
  /// RMSNorm: out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps).
  /// out, inp: (N,C); weight: C; rstd: N (saved for backward).
  void rmsnorm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, double eps);
  /// dinp (N,C) =; dweight (C) +=.
  void rmsnorm_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& rstd);

  // ---- linear ------------------------------------------------------------------------------
  /// out = inp W^T + bias. out: (N,OC); inp: (N,IC); weight: (OC,IC); bias: OC (optional).
  /// Column-parallel: each tp rank holds rows of W (its output features); row-parallel: each
  /// holds columns of W (its input features) as its own (OC, IC/t) tensor and passes the bias
  /// on one rank only, before the all-reduce.
  void linear_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                      const Tensor& bias);
  /// dinp (N,IC, optional) = dout W; dweight (OC,IC) += dout^T inp; dbias (OC, optional)
  /// += column sums of dout. dout: (N,OC).
  void linear_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dout, const Tensor& inp, const Tensor& weight);

  /// A linear plus a residual in one call: out = inp W^T + bias + residual (N,OC); out may be
  /// residual (in place). The same result as linear_forward then add; a backend may fuse them
  /// (CUDA: cuBLASLt with beta = 1 reading the residual as C).
  void linear_residual_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                               const Tensor& bias, const Tensor& residual);
  /// A linear followed by GELU in one call: pre = inp W^T + bias (N,OC), kept for the
  /// backward; out = gelu(pre) (N,OC). The same result as linear_forward then gelu_forward; a
  /// backend may fuse them (CUDA: the cuBLASLt GELU_AUX_BIAS epilogue).
  void linear_gelu_forward(Stream& stream, const Tensor& out, const Tensor& pre, const Tensor& inp,
                           const Tensor& weight, const Tensor& bias);
  /// linear_backward of a product whose input was act = gelu(pre), followed by gelu_backward:
  /// dpre (N,IC) = gelu'(pre) * (dout W); dweight (OC,IC) += dout^T act; dbias (OC, optional) +=
  /// column sums of dout. A backend may fuse the first product with the GELU derivative (CUDA:
  /// the cuBLASLt DGELU epilogue).
  void linear_backward_gelu(Stream& stream, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                            const Tensor& dout, const Tensor& act, const Tensor& weight, const Tensor& pre);

  // ---- activations -------------------------------------------------------------------------
  /// GELU, tanh approximation (GPT-2, Megatron):
  /// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out, inp: equal numel; out may be inp
  /// (then the input is gone for backward). The same holds for relu.
  void gelu_forward(Stream& stream, const Tensor& out, const Tensor& inp);
  /// dinp = dout * gelu'(inp); dinp may be dout (in place).
  void gelu_backward(Stream& stream, const Tensor& dinp, const Tensor& inp, const Tensor& dout);
  /// out = max(x, 0).
  void relu_forward(Stream& stream, const Tensor& out, const Tensor& inp);
  /// dinp = dout where inp > 0, else 0.
  void relu_backward(Stream& stream, const Tensor& dinp, const Tensor& inp, const Tensor& dout);
  /// SwiGLU on a fused gate|up input: out[n,j] = silu(inp[n,j]) * inp[n,F+j],
  /// silu(g) = g / (1 + exp(-g)). out: (N,F); inp: (N,2F), each row [gate (F) | up (F)].
  /// Column-parallel: each rank's local fc output is [its gate shard | its up shard].
  void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& inp);
  /// dinp (N,2F) =. dout: (N,F).
  void swiglu_backward(Stream& stream, const Tensor& dinp, const Tensor& inp, const Tensor& dout);

  // ---- attention ---------------------------------------------------------------------------
  /// Multi-head / grouped-query attention, out = softmax(Q K^T / sqrt(head_dim) [+ causal
  /// mask]) V per head. qkv: (B*T, (H + 2*KVH)*D), each token row [Q heads | K heads |
  /// V heads], each head D contiguous values; out: (B*T, H*D), heads concatenated;
  /// lse: (B,H,T), the log-sum-exp of each score row, saved for backward (which recomputes
  /// the probabilities from Q, K and lse, so no T x T matrix is kept).
  void attention_forward(Stream& stream, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                         const AttentionShape& shape);
  /// dqkv (B*T, (H+2KVH)*D) =. dout: (B*T, H*D); out and lse: from the forward.
  void attention_backward(Stream& stream, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                          const Tensor& out, const Tensor& lse, const AttentionShape& shape);

  /// Rotary position embedding (RoPE) of the Q and K heads of a fused qkv tensor, in the
  /// half-split form of GPT-NeoX and Hugging Face Llama: in each head, dims j and j + D/2
  /// (j < D/2) rotate together by the angle pos * theta^(-2j/D), pos = row % T:
  ///   out[j] = x[j] cos - x[j + D/2] sin,  out[j + D/2] = x[j + D/2] cos + x[j] sin.
  /// V columns are copied unchanged. `inverse` rotates by the opposite angle: the map is
  /// orthogonal, so the inverse is also the backward (dqkv = rotary(dqkv_rotated, inverse)).
  /// out, inp: (B*T, (H + 2*KVH)*D); D must be even; out may be inp (in place).
  /// Under tensor parallelism the local heads rotate exactly as the global ones.
  void rotary(Stream& stream, const Tensor& out, const Tensor& inp, const AttentionShape& shape, double theta,
              bool inverse);

  // ---- cross-entropy over a (possibly vocab-parallel) vocabulary ----------------------------
  // With the vocabulary split over tp ranks, rank r holds logits (N, Vr) of vocab entries
  // [v0, v0 + Vr). The loss is computed in local pieces with an all-reduce between them:
  //   ce_local_max        -> all-reduce max  -> max
  //   ce_local_sum_exp    -> all-reduce sum  -> sum_exp   (uses the global max)
  //   ce_local_target_logit -> all-reduce sum -> target_logit
  //   ce_combine: loss[n] = log(sum_exp[n]) + max[n] - target_logit[n]
  // On one rank (v0 = 0, Vr = V) the pieces are the full cross-entropy.
  /// max: N = max over the local logits of each row. logits: (N,Vr).
  void ce_local_max(Stream& stream, const Tensor& max, const Tensor& logits);
  /// sum_exp: N = sum_j exp(logits[n,j] - max[n]) over the local logits.
  void ce_local_sum_exp(Stream& stream, const Tensor& sum_exp, const Tensor& logits, const Tensor& max);
  /// target_logit: N = logits[n, targets[n] - vocab_begin] if the target is local, else 0.
  /// targets: N i32 (global vocabulary ids).
  void ce_local_target_logit(Stream& stream, const Tensor& target_logit, const Tensor& logits,
                             const Tensor& targets, int64_t vocab_begin);
  /// losses: N = log(sum_exp) + max - target_logit (losses may be any of the three inputs).
  void ce_combine(Stream& stream, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                  const Tensor& target_logit);
  /// dlogits (N,Vr) = dloss_scale * (softmax(logits) - onehot(targets)) on the local slice,
  /// with the global max and sum_exp. dloss_scale is d(total loss)/d(loss[n]), the same for
  /// every row (1 / tokens for a mean over the global batch). dlogits may be logits.
  void ce_backward(Stream& stream, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                   int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp, double dloss_scale);
  /// The whole cross-entropy on one rank: losses (N) per row, max and sum_exp (N) kept for
  /// ce_backward. Composed of the pieces above.
  void cross_entropy_forward(Stream& stream, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                             const Tensor& logits, const Tensor& targets);

  // ---- mixture of experts ------------------------------------------------------------------
  // The router's logits come from linear_forward (weight (E, C)); moe_dispatch moves token rows
  // with embedding_forward / embedding_backward (a row gather / scatter-add by index). These
  // kernels are the rest. Backends without them (all but the CPU) throw an Error naming the
  // kernel: MoE runs on the CPU backend.
  /// probs (N,E) = softmax(logits (N,E)); each row keeps its k largest probabilities (ties:
  /// the lower expert index) in decreasing order: experts (N,k) i32 = their indices, weights
  /// (N,k) = the kept probabilities over their sum (renormalised).
  void router_forward(Stream& stream, const Tensor& weights, const Tensor& experts, const Tensor& probs,
                      const Tensor& logits);
  /// dlogits (N,E) = from dweights (N,k) through the renormalisation and the softmax (kept
  /// experts only: the top-k choice itself has no gradient).
  void router_backward(Stream& stream, const Tensor& dlogits, const Tensor& dweights, const Tensor& weights,
                       const Tensor& experts, const Tensor& probs);
  /// out (N,C) = sum_i weights[n,i] y[rows[n,i]], i in order; rows (N,k) i32 index the routed
  /// copies y (R,C); a negative row (a dropped copy) adds nothing.
  void moe_combine_forward(Stream& stream, const Tensor& out, const Tensor& y, const Tensor& weights,
                           const Tensor& rows);
  /// dy (R,C) = weights[n,i] dout[n] at rows[n,i] (0 elsewhere); dweights (N,k) =
  /// dot(dout[n], y[rows[n,i]]) (0 for a dropped copy).
  void moe_combine_backward(Stream& stream, const Tensor& dy, const Tensor& dweights, const Tensor& dout,
                            const Tensor& y, const Tensor& weights, const Tensor& rows);

  // ---- optimizer ---------------------------------------------------------------------------
  // Global-norm gradient clipping, split so it works on sharded gradients:
  //   sum_squares on every local gradient tensor -> all-reduce sum -> clip_scale -> adamw_step
  /// out[0] += sum of x^2 (accumulated in double on the CPU). out: 1 element.
  void sum_squares(Stream& stream, const Tensor& out, const Tensor& x);
  /// scale[0] = min(1, max_norm / (sqrt(sum_squares[0]) + 1e-6)); 1 when max_norm <= 0
  /// (no clipping). scale, sum_squares: 1 element each.
  void clip_scale(Stream& stream, const Tensor& scale, const Tensor& sum_squares, double max_norm);
  /// One AdamW step on fp32 (or f64) master weights, elementwise over P elements:
  ///   g = grads * scale[0]; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  ///   p -= lr * ((m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p).
  /// params, m, v: P (same dtype); grads: P; scale: 1 element; step >= 1 (bias correction).
  /// model_copy (optional, P): receives the updated params in its own dtype (the 16-bit
  /// model weights of mixed precision).
  void adamw_step(Stream& stream, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const Tensor& scale, const AdamWConfig& config, int64_t step, const Tensor& model_copy);

 protected:
  /// Allocation of the concrete backend; accounting is done by allocate().
  virtual std::unique_ptr<Buffer> allocate_impl(size_t size_bytes) = 0;
  virtual void upload_impl(Stream& stream, const Tensor& dst, const std::byte* host) = 0;
  virtual void download_impl(Stream& stream, std::byte* host, const Tensor& src) = 0;
  virtual void copy_impl(Stream& stream, const Tensor& dst, const Tensor& src) = 0;

  // Kernels, called after the shared argument checks of the public methods above.
  virtual void fill_impl(Stream& s, const Tensor& x, double value) = 0;
  virtual void add_impl(Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) = 0;
  virtual void accumulate_impl(Stream& s, const Tensor& y, const Tensor& x) = 0;
  virtual void embedding_forward_impl(Stream& s, const Tensor& out, const Tensor& ids, const Tensor& table,
                                      int64_t row_begin, bool accumulate) = 0;
  virtual void embedding_backward_impl(Stream& s, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                                       int64_t row_begin) = 0;
  virtual void layernorm_forward_impl(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                      double eps) = 0;
  virtual void layernorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight,
                                       const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                       const Tensor& weight, const Tensor& mean, const Tensor& rstd) = 0;
  virtual void rmsnorm_forward_impl(Stream& s, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                                    const Tensor& weight, double eps) = 0;
  virtual void rmsnorm_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                                     const Tensor& inp, const Tensor& weight, const Tensor& rstd) = 0;
  virtual void linear_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                   const Tensor& bias) = 0;
  virtual void linear_backward_impl(Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                    const Tensor& dout, const Tensor& inp, const Tensor& weight) = 0;
  // Unfused by default: linear_*_impl, then add_impl / gelu_*_impl.
  virtual void linear_residual_forward_impl(Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                                            const Tensor& bias, const Tensor& residual);
  virtual void linear_gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& pre, const Tensor& inp,
                                        const Tensor& weight, const Tensor& bias);
  virtual void linear_backward_gelu_impl(Stream& s, const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                                         const Tensor& dout, const Tensor& act, const Tensor& weight,
                                         const Tensor& pre);
  virtual void gelu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  virtual void relu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) = 0;
  virtual void relu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  virtual void swiglu_forward_impl(Stream& s, const Tensor& out, const Tensor& inp) = 0;
  virtual void swiglu_backward_impl(Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;
  virtual void attention_forward_impl(Stream& s, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                      const AttentionShape& shape) = 0;
  virtual void attention_backward_impl(Stream& s, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                       const Tensor& out, const Tensor& lse, const AttentionShape& shape) = 0;
  virtual void rotary_impl(Stream& s, const Tensor& out, const Tensor& inp, const AttentionShape& shape, double theta,
                           bool inverse) = 0;
  virtual void ce_local_max_impl(Stream& s, const Tensor& max, const Tensor& logits) = 0;
  virtual void ce_local_sum_exp_impl(Stream& s, const Tensor& sum_exp, const Tensor& logits,
                                     const Tensor& max) = 0;
  virtual void ce_local_target_logit_impl(Stream& s, const Tensor& target_logit, const Tensor& logits,
                                          const Tensor& targets, int64_t vocab_begin) = 0;
  virtual void ce_combine_impl(Stream& s, const Tensor& losses, const Tensor& max, const Tensor& sum_exp,
                               const Tensor& target_logit) = 0;
  virtual void ce_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                int64_t vocab_begin, const Tensor& max, const Tensor& sum_exp,
                                double dloss_scale) = 0;
  // MoE kernels: the default throws an Error naming the kernel (the CPU backend overrides them).
  virtual void router_forward_impl(Stream& s, const Tensor& weights, const Tensor& experts, const Tensor& probs,
                                   const Tensor& logits);
  virtual void router_backward_impl(Stream& s, const Tensor& dlogits, const Tensor& dweights, const Tensor& weights,
                                    const Tensor& experts, const Tensor& probs);
  virtual void moe_combine_forward_impl(Stream& s, const Tensor& out, const Tensor& y, const Tensor& weights,
                                        const Tensor& rows);
  virtual void moe_combine_backward_impl(Stream& s, const Tensor& dy, const Tensor& dweights, const Tensor& dout,
                                         const Tensor& y, const Tensor& weights, const Tensor& rows);
  virtual void sum_squares_impl(Stream& s, const Tensor& out, const Tensor& x) = 0;
  virtual void clip_scale_impl(Stream& s, const Tensor& scale, const Tensor& sum_squares, double max_norm) = 0;
  virtual void adamw_step_impl(Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m,
                               const Tensor& v, const Tensor& scale, const AdamWConfig& config, int64_t step,
                               const Tensor& model_copy) = 0;

 private:
  struct MemoryCounters;
  std::shared_ptr<MemoryCounters> memory_;
};

}  // namespace trainplan::executor
