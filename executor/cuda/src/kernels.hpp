// Host-callable launchers of the CUDA backend's own kernels (the *.cu files of this folder).
// Every launcher queues its kernels on `stream`, checks the launch (TP_CUDA_CHECK_LAUNCH) and
// returns; nothing here synchronizes. Shapes were checked by the Backend layer.
//
// Element types: memory-bound kernels take each tensor as a DevPtr / CDevPtr (a device
// address with its runtime dtype, f32 / bf16 / f16), so one call may mix dtypes (bf16
// activations with f32 statistics, f32 master weights with bf16 gradients); all arithmetic is
// fp32 (reductions of sums of squares in fp64). Attention is templated on the element type of
// qkv / out (all four of its big tensors share one dtype). Reductions are deterministic: fixed
// block partials summed in a fixed order, never floating-point atomics.
//
// Shapes in the comments: N token rows, C features, V vocabulary slice, B batch, T sequence,
// H query heads, KVH key/value heads, D head dim, F the SwiGLU half width.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

// Host-and-device functions of types shared by the C++ host code and the CUDA kernels.
#if defined(__CUDACC__)
#define TP_HOST_DEVICE __host__ __device__
#else
#define TP_HOST_DEVICE
#endif

namespace trainplan::executor::cuda {

/// Device element types of the CUDA kernels.
enum class Dt : int32_t { f32 = 0, bf16 = 1, f16 = 2 };

/// Size in bytes of one element.
constexpr int64_t dt_size(Dt t) { return t == Dt::f32 ? 4 : 2; }

/// A device address with its element type; p == nullptr stands for an absent optional tensor.
struct DevPtr {
  void* p = nullptr;
  Dt t = Dt::f32;
};
struct CDevPtr {
  const void* p = nullptr;
  Dt t = Dt::f32;
  CDevPtr() = default;
  TP_HOST_DEVICE CDevPtr(const void* ptr, Dt type) : p(ptr), t(type) {}
  TP_HOST_DEVICE CDevPtr(DevPtr d) : p(d.p), t(d.t) {}  // NOLINT: a writable tensor is also readable
};

/// Grid size (blocks) the launchers use for grid-stride loops and for block partials.
int grid_blocks(int64_t work_items, int threads_per_block);
/// Blocks (rows of `partials`) the two-stage column reductions use for N rows; the caller
/// allocates partials of partial_blocks(n) * C floats.
int partial_blocks(int64_t n);

// ---- elementwise (kernels_elementwise.cu) -------------------------------------------------------
void fill(DevPtr x, int64_t count, float value, cudaStream_t stream);
void add(DevPtr out, CDevPtr a, CDevPtr b, int64_t count, cudaStream_t stream);
void accumulate(DevPtr y, CDevPtr x, int64_t count, cudaStream_t stream);
void gelu_forward(DevPtr out, CDevPtr inp, int64_t count, cudaStream_t stream);
void gelu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t count, cudaStream_t stream);
void relu_forward(DevPtr out, CDevPtr inp, int64_t count, cudaStream_t stream);
void relu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t count, cudaStream_t stream);
/// out: (N,F); inp: (N,2F) rows [gate | up].
void swiglu_forward(DevPtr out, CDevPtr inp, int64_t n, int64_t f, cudaStream_t stream);
/// dinp: (N,2F) =; dout: (N,F).
void swiglu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t n, int64_t f, cudaStream_t stream);
/// out, inp: (B*T, (H + 2 KVH) D); rotates the Q and K heads by pos = row % T; out may be inp.
void rotary(DevPtr out, CDevPtr inp, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
            double theta, bool inverse, cudaStream_t stream);
/// out (N,C) =/+= table[ids[n] - row_begin] for ids in [row_begin, row_begin + rows).
void embedding_forward(DevPtr out, const int32_t* ids, CDevPtr table, int64_t n, int64_t c, int64_t rows,
                       int64_t row_begin, bool accumulate, cudaStream_t stream);
/// dtable (rows, C) += the rows of dout (N, C) whose ids[i] - row_begin fall in [0, rows), each
/// table row summing its tokens in increasing token order (deterministic) in fp32 before one
/// add: a stable radix sort of the token rows by table row on the device (no host round trip).
/// scratch: embedding_backward_scratch_bytes(n) bytes.
size_t embedding_backward_scratch_bytes(int64_t n);
void embedding_backward(DevPtr dtable, CDevPtr dout, const int32_t* ids, int64_t n, int64_t rows, int64_t row_begin,
                        int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t stream);
/// *dst = value, queued on the stream (a message header; no host synchronization).
void write_int64(int64_t* dst, int64_t value, cudaStream_t stream);
/// out (N,C) += bias (C) broadcast over rows (the linear's bias when no epilogue applies).
void add_bias_rows(DevPtr out, CDevPtr bias, int64_t n, int64_t c, cudaStream_t stream);

// ---- normalization and column reductions (kernels_norm.cu) -------------------------------------
/// out (N,C), mean (N), rstd (N) of LayerNorm; bias optional.
void layernorm_forward(DevPtr out, DevPtr mean, DevPtr rstd, CDevPtr inp, CDevPtr weight, CDevPtr bias, int64_t n,
                       int64_t c, float eps, cudaStream_t stream);
/// dinp (N,C) =; per-block partial sums of dweight and dbias (optional) into
/// partials_dw / partials_db (partial_blocks(n) x C floats, overwritten).
void layernorm_backward(DevPtr dinp, float* partials_dw, float* partials_db, CDevPtr dout, CDevPtr inp,
                        CDevPtr weight, CDevPtr mean, CDevPtr rstd, int64_t n, int64_t c, cudaStream_t stream);
void rmsnorm_forward(DevPtr out, DevPtr rstd, CDevPtr inp, CDevPtr weight, int64_t n, int64_t c, float eps,
                     cudaStream_t stream);
void rmsnorm_backward(DevPtr dinp, float* partials_dw, CDevPtr dout, CDevPtr inp, CDevPtr weight, CDevPtr rstd,
                      int64_t n, int64_t c, cudaStream_t stream);
/// Per-block partial column sums of x (N,C) into partials (partial_blocks(n) x C, overwritten).
void column_sum_partials(float* partials, CDevPtr x, int64_t n, int64_t c, cudaStream_t stream);
/// dst (C) += sum over blocks of partials (blocks x C), blocks summed in order.
void add_partials(DevPtr dst, const float* partials, int blocks, int64_t c, cudaStream_t stream);

// ---- cross-entropy and optimizer (kernels_loss.cu) ---------------------------------------------
void ce_local_max(DevPtr max, CDevPtr logits, int64_t n, int64_t v, cudaStream_t stream);
void ce_local_sum_exp(DevPtr sum_exp, CDevPtr logits, CDevPtr max, int64_t n, int64_t v, cudaStream_t stream);
void ce_local_target_logit(DevPtr target_logit, CDevPtr logits, const int32_t* targets, int64_t n, int64_t v,
                           int64_t vocab_begin, cudaStream_t stream);
void ce_combine(DevPtr losses, CDevPtr max, CDevPtr sum_exp, CDevPtr target_logit, int64_t n, cudaStream_t stream);
void ce_backward(DevPtr dlogits, CDevPtr logits, const int32_t* targets, CDevPtr max, CDevPtr sum_exp, int64_t n,
                 int64_t v, int64_t vocab_begin, float dloss_scale, cudaStream_t stream);
/// out[0] += sum x^2 (fp64 accumulation); partials: grid_blocks(count, 256) doubles.
void sum_squares(DevPtr out, CDevPtr x, int64_t count, double* partials, cudaStream_t stream);
void clip_scale(DevPtr scale, CDevPtr sum_squares, double max_norm, cudaStream_t stream);

struct AdamWArgs {
  float learning_rate, beta1, beta2, eps, weight_decay;
  float correction1, correction2;  // 1 - beta^step
};
/// One AdamW step over `count` elements; model_copy (optional) receives the new params.
void adamw_step(DevPtr params, CDevPtr grads, DevPtr m, DevPtr v, CDevPtr scale, DevPtr model_copy, int64_t count,
                const AdamWArgs& args, cudaStream_t stream);

// ---- attention (kernels_attention.cu) -----------------------------------------------------------
struct AttnDims {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool causal;
  float scale;  // 1 / sqrt(head_dim)
  TP_HOST_DEVICE int64_t qkv_row() const { return (heads + 2 * kv_heads) * head_dim; }
};

/// Largest head_dim of the fused kernels, and the dynamic shared memory they need.
constexpr int64_t kFusedAttentionMaxHeadDim = 256;
int64_t fused_attention_shared_bytes(int64_t head_dim);

/// Fused (flash-style, tiled, online softmax, fp32 accumulation) attention: out (B*T, H*D),
/// lse (B,H,T); qkv (B*T, (H + 2 KVH) D); `dtype` is that of qkv and out.
void attention_forward_fused(Dt dtype, void* out, DevPtr lse, const void* qkv, const AttnDims& d,
                             cudaStream_t stream);
/// dqkv (B*T, (H + 2 KVH) D) =; dvec: B*H*T floats of scratch (rowsum(dout * out)).
void attention_backward_fused(Dt dtype, void* dqkv, const void* dout, const void* qkv, const void* out,
                              CDevPtr lse, float* dvec, const AttnDims& d, cudaStream_t stream);

/// rowsum(dout * out) per (batch, head, row): dvec (B*H*T floats); dout, out (B*T, H*D).
void attention_dvec(Dt dtype, float* dvec, const void* dout, const void* out, const AttnDims& d, cudaStream_t stream);

/// Attention on tensor cores (kernels_attention_tc.cu: wmma bf16 / f16 fragments, fp32
/// accumulation and softmax statistics, FlashAttention-2 tiles of 64): the head dims it is
/// compiled for, and the dynamic shared memory of its largest kernel. Needs compute capability
/// 8.0, a bf16 / f16 dtype and 16-byte aligned tensors; the caller checks all of them.
inline constexpr int64_t kTensorCoreHeadDims[] = {16, 32, 64, 80, 96, 128};
bool tensor_core_attention_head_dim(int64_t head_dim);
int64_t tensor_core_attention_shared_bytes(int64_t head_dim);
/// As attention_forward_fused / attention_backward_fused, on tensor cores.
void attention_forward_tc(Dt dtype, void* out, DevPtr lse, const void* qkv, const AttnDims& d, cudaStream_t stream);
void attention_backward_tc(Dt dtype, void* dqkv, const void* dout, const void* qkv, const void* out, CDevPtr lse,
                           float* dvec, const AttnDims& d, cudaStream_t stream);

/// Pieces of the unfused attention (scores and probabilities by cuBLAS GEMMs of one batch
/// element and one query head per KV head group: heads h = (kv0 + i) * G + j, i < count).
/// scores: count x T x T fp32, already scaled; probs: count x T x T of `dtype`.
struct AttnChunk {
  int64_t b, j, kv0, count;
};
/// probs = softmax(scores) row by row (masked entries 0); lse[b, h, t] of each row.
void attention_softmax_forward(Dt dtype, void* probs, DevPtr lse, const float* scores, const AttnDims& d,
                               const AttnChunk& c, cudaStream_t stream);
/// probs = exp(scores - lse); dscores = probs * (dprobs - rowsum(dout * out)) * scale, both of
/// `dtype`; dout, out: (B*T, H*D) of `dtype`.
void attention_softmax_backward(Dt dtype, void* probs, void* dscores, const float* scores, const float* dprobs,
                                CDevPtr lse, const void* dout, const void* out, const AttnDims& d, const AttnChunk& c,
                                cudaStream_t stream);

}  // namespace trainplan::executor::cuda
