// Attention kernels, templated on the element type T of qkv / out / dout / dqkv (float,
// __nv_bfloat16, __half); all arithmetic in fp32.
//
// Fused path (FlashAttention-2 structure on CUDA cores, no T x T matrix in memory):
// - forward: a block owns kBr query rows of one (batch, head); it walks key tiles of kBc keys
//   staged in shared memory; lane j of a warp scores key j of the tile against one query row,
//   an online softmax (running max m, running sum l) rescales the fp32 output accumulators;
//   the row's log-sum-exp m + log(l) is saved for the backward.
// - backward: dvec = rowsum(dout * out); a query-tile kernel recomputes p = exp(s - lse) and
//   accumulates dq; a key-tile kernel loops over the query heads of its KV group and the query
//   tiles and accumulates dk and dv. No atomics: every output element has one owner.
// Unfused path helpers: row softmax of cuBLAS-computed scores and its backward.
#include <cmath>

#include "device_common.cuh"

namespace trainplan::executor::cuda {
namespace {

constexpr int kWarps = 4;                   // warps per block
constexpr int kBr = 16;                     // query rows per block (forward, dq)
constexpr int kBc = 32;                     // keys per tile (one per lane)
constexpr int kRowsPerWarp = kBr / kWarps;  // 4
constexpr int kMaxPer = static_cast<int>(kFusedAttentionMaxHeadDim / 32);  // head dims per lane

// rows x D values of one head from a row-major (.., row_len) tensor into shared [rows][D + 1];
// rows past the sequence end read as 0.
template <class T>
__device__ void load_tile(float* dst, const T* src, int64_t first_row, int rows, int64_t seq, int64_t row_len,
                          int64_t col, int64_t d) {
  const int64_t dp = d + 1;
  for (int64_t i = threadIdx.x; i < rows * d; i += blockDim.x) {
    const int64_t r = i / d, c = i - r * d, t = first_row + r;
    dst[r * dp + c] = t < seq ? to_float(src[t * row_len + col + c]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_shared(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32) attn_fwd_kernel(T* out, DevPtr lse, const T* qkv, AttnDims d) {
  extern __shared__ float smem[];
  const int64_t D = d.head_dim, Dp = D + 1, T_ = d.seq, row = d.qkv_row();
  float* q_sh = smem;
  float* k_sh = q_sh + kBr * Dp;
  float* v_sh = k_sh + kBc * Dp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.y / d.heads, h = blockIdx.y % d.heads;
  const HeadColumns cols(d, h);
  const T* base = qkv + b * T_ * row;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBr;
  load_tile(q_sh, base, t0, kBr, T_, row, cols.q, D);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kMaxPer];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) o[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal && t0 + kBr < T_ ? t0 + kBr : T_;
  for (int64_t s0 = 0; s0 < key_end; s0 += kBc) {
    __syncthreads();  // the previous tile is consumed (and q_sh is loaded)
    load_tile(k_sh, base, s0, kBc, T_, row, cols.k, D);
    load_tile(v_sh, base, s0, kBc, T_, row, cols.v, D);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t t = t0 + r, s = s0 + lane;
      if (t >= T_) continue;  // warp-uniform
      float score = -INFINITY;
      if (s < T_ && (!d.causal || s <= t)) score = dot_shared(q_sh + r * Dp, k_sh + lane * Dp, D) * d.scale;
      const float tile_max = warp_max(score);
      if (tile_max == -INFINITY) continue;  // every key of this tile is masked for row t
      const float m_new = fmaxf(m[rr], tile_max);
      const float p = score == -INFINITY ? 0.0f : expf(score - m_new);
      const float corr = expf(m[rr] - m_new);  // 0 on the first tile (m = -inf)
      l[rr] = l[rr] * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < kMaxPer; ++i) o[rr][i] *= corr;
      for (int j = 0; j < kBc; ++j) {
        const float pj = __shfl_sync(kFullMask, p, j);
        if (pj == 0.0f) continue;
#pragma unroll
        for (int i = 0; i < kMaxPer; ++i) {
          const int64_t c = lane + 32 * i;
          if (c < D) o[rr][i] += pj * v_sh[j * Dp + c];
        }
      }
      m[rr] = m_new;
    }
  }
  const int64_t out_row = d.heads * D;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = t0 + warp * kRowsPerWarp + rr;
    if (t >= T_) continue;
    const float inv_l = 1.0f / l[rr];
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < D) out[(b * T_ + t) * out_row + h * D + c] = from_float<T>(o[rr][i] * inv_l);
    }
    if (lane == 0) st(lse, (b * d.heads + h) * T_ + t, m[rr] + logf(l[rr]));
  }
}

// dvec[(b H + h) T + t] = sum_c dout * out over the head's D columns; one warp per row.
template <class T>
__global__ void attn_dvec_kernel(float* dvec, const T* dout, const T* out, AttnDims d) {
  const int64_t rows = d.batch * d.heads * d.seq, D = d.head_dim;
  const int lane = threadIdx.x & 31;
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < rows;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const int64_t t = w % d.seq, bh = w / d.seq, h = bh % d.heads, b = bh / d.heads;
    const int64_t at = (b * d.seq + t) * d.heads * D + h * D;
    float s = 0.0f;
    for (int64_t c = lane; c < D; c += 32) s += to_float(dout[at + c]) * to_float(out[at + c]);
    s = warp_sum(s);
    if (lane == 0) dvec[w] = s;
  }
}

template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dq_kernel(T* dqkv, const T* dout, const T* qkv, CDevPtr lse, const float* dvec, AttnDims d) {
  extern __shared__ float smem[];
  const int64_t D = d.head_dim, Dp = D + 1, T_ = d.seq, row = d.qkv_row(), out_row = d.heads * D;
  float* q_sh = smem;
  float* do_sh = q_sh + kBr * Dp;
  float* k_sh = do_sh + kBr * Dp;
  float* v_sh = k_sh + kBc * Dp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.y / d.heads, h = blockIdx.y % d.heads;
  const HeadColumns cols(d, h);
  const T* base = qkv + b * T_ * row;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kBr;
  load_tile(q_sh, base, t0, kBr, T_, row, cols.q, D);
  load_tile(do_sh, dout + b * T_ * out_row, t0, kBr, T_, out_row, h * D, D);

  float row_lse[kRowsPerWarp], row_dvec[kRowsPerWarp], dq[kRowsPerWarp][kMaxPer];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = t0 + warp * kRowsPerWarp + rr;
    const int64_t at = (b * d.heads + h) * T_ + (t < T_ ? t : 0);
    row_lse[rr] = ld(lse, at);
    row_dvec[rr] = dvec[at];
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) dq[rr][i] = 0.0f;
  }
  const int64_t key_end = d.causal && t0 + kBr < T_ ? t0 + kBr : T_;
  for (int64_t s0 = 0; s0 < key_end; s0 += kBc) {
    __syncthreads();
    load_tile(k_sh, base, s0, kBc, T_, row, cols.k, D);
    load_tile(v_sh, base, s0, kBc, T_, row, cols.v, D);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t t = t0 + r, s = s0 + lane;
      if (t >= T_) continue;
      float ds = 0.0f;
      if (s < T_ && (!d.causal || s <= t)) {
        const float p = expf(dot_shared(q_sh + r * Dp, k_sh + lane * Dp, D) * d.scale - row_lse[rr]);
        const float dp = dot_shared(do_sh + r * Dp, v_sh + lane * Dp, D);
        ds = p * (dp - row_dvec[rr]) * d.scale;
      }
      for (int j = 0; j < kBc; ++j) {
        const float dsj = __shfl_sync(kFullMask, ds, j);
        if (dsj == 0.0f) continue;
#pragma unroll
        for (int i = 0; i < kMaxPer; ++i) {
          const int64_t c = lane + 32 * i;
          if (c < D) dq[rr][i] += dsj * k_sh[j * Dp + c];
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t t = t0 + warp * kRowsPerWarp + rr;
    if (t >= T_) continue;
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < D) dqkv[(b * T_ + t) * row + cols.q + c] = from_float<T>(dq[rr][i]);
    }
  }
}

// A block owns kBr keys of one (batch, KV head); lane j of a warp takes query j of a tile.
template <class T>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dkv_kernel(T* dqkv, const T* dout, const T* qkv, CDevPtr lse, const float* dvec, AttnDims d) {
  extern __shared__ float smem[];
  const int64_t D = d.head_dim, Dp = D + 1, T_ = d.seq, row = d.qkv_row(), out_row = d.heads * D;
  float* k_sh = smem;
  float* v_sh = k_sh + kBr * Dp;
  float* q_sh = v_sh + kBr * Dp;
  float* do_sh = q_sh + kBc * Dp;
  float* lse_sh = do_sh + kBc * Dp;
  float* dvec_sh = lse_sh + kBc;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = d.heads / d.kv_heads;
  const int64_t b = blockIdx.y / d.kv_heads, kvh = blockIdx.y % d.kv_heads;
  const HeadColumns kv_cols(d, kvh * group);  // any query head of the group names the same K, V
  const T* base = qkv + b * T_ * row;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kBr;
  load_tile(k_sh, base, s0, kBr, T_, row, kv_cols.k, D);
  load_tile(v_sh, base, s0, kBr, T_, row, kv_cols.v, D);

  float dk[kRowsPerWarp][kMaxPer], dv[kRowsPerWarp][kMaxPer];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) dk[rr][i] = dv[rr][i] = 0.0f;

  const int64_t query_begin = d.causal ? s0 : 0;  // causal: queries t >= the tile's first key
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = kvh * group + g;
    for (int64_t t0 = query_begin; t0 < T_; t0 += kBc) {
      __syncthreads();
      load_tile(q_sh, base, t0, kBc, T_, row, h * D, D);
      load_tile(do_sh, dout + b * T_ * out_row, t0, kBc, T_, out_row, h * D, D);
      load_row_stats(lse_sh, dvec_sh, lse, dvec, d, b, h, t0, kBc);
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr;
        const int64_t s = s0 + r, t = t0 + lane;
        if (s >= T_) continue;
        float p = 0.0f, ds = 0.0f;
        if (t < T_ && (!d.causal || t >= s)) {
          p = expf(dot_shared(q_sh + lane * Dp, k_sh + r * Dp, D) * d.scale - lse_sh[lane]);
          const float dp = dot_shared(do_sh + lane * Dp, v_sh + r * Dp, D);
          ds = p * (dp - dvec_sh[lane]) * d.scale;
        }
        for (int j = 0; j < kBc; ++j) {
          const float pj = __shfl_sync(kFullMask, p, j);
          const float dsj = __shfl_sync(kFullMask, ds, j);
          if (pj == 0.0f && dsj == 0.0f) continue;
#pragma unroll
          for (int i = 0; i < kMaxPer; ++i) {
            const int64_t c = lane + 32 * i;
            if (c < D) {
              dv[rr][i] += pj * do_sh[j * Dp + c];
              dk[rr][i] += dsj * q_sh[j * Dp + c];
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t s = s0 + warp * kRowsPerWarp + rr;
    if (s >= T_) continue;
#pragma unroll
    for (int i = 0; i < kMaxPer; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < D) {
        dqkv[(b * T_ + s) * row + kv_cols.k + c] = from_float<T>(dk[rr][i]);
        dqkv[(b * T_ + s) * row + kv_cols.v + c] = from_float<T>(dv[rr][i]);
      }
    }
  }
}

// ---- unfused helpers: one block per score row (chunk head i, query t) --------------------------
__device__ __forceinline__ int64_t chunk_head(const AttnDims& d, const AttnChunk& c, int64_t i) {
  return (c.kv0 + i) * (d.heads / d.kv_heads) + c.j;
}

template <class T>
__global__ void attn_softmax_fwd_kernel(T* probs, DevPtr lse, const float* scores, AttnDims d, AttnChunk c) {
  __shared__ float scratch[32];
  const int64_t T_ = d.seq, t = blockIdx.x, i = blockIdx.y;
  const int64_t len = d.causal ? t + 1 : T_;
  const float* srow = scores + (i * T_ + t) * T_;
  T* prow = probs + (i * T_ + t) * T_;
  float m = -FLT_MAX;
  for (int64_t s = threadIdx.x; s < len; s += blockDim.x) m = fmaxf(m, srow[s]);
  m = block_max(m, scratch);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < len; s += blockDim.x) sum += expf(srow[s] - m);
  sum = block_sum(sum, scratch);
  const float row_lse = m + logf(sum);
  for (int64_t s = threadIdx.x; s < T_; s += blockDim.x)
    prow[s] = from_float<T>(s < len ? expf(srow[s] - row_lse) : 0.0f);
  if (threadIdx.x == 0) st(lse, (c.b * d.heads + chunk_head(d, c, i)) * T_ + t, row_lse);
}

template <class T>
__global__ void attn_softmax_bwd_kernel(T* probs, T* dscores, const float* scores, const float* dprobs, CDevPtr lse,
                                        const T* dout, const T* out, AttnDims d, AttnChunk c) {
  __shared__ float scratch[32];
  const int64_t T_ = d.seq, t = blockIdx.x, i = blockIdx.y, D = d.head_dim;
  const int64_t h = chunk_head(d, c, i);
  const int64_t len = d.causal ? t + 1 : T_;
  const int64_t at = (c.b * T_ + t) * d.heads * D + h * D;
  float dv = 0.0f;
  for (int64_t k = threadIdx.x; k < D; k += blockDim.x) dv += to_float(dout[at + k]) * to_float(out[at + k]);
  dv = block_sum(dv, scratch);
  const float row_lse = ld(lse, (c.b * d.heads + h) * T_ + t);
  const int64_t off = (i * T_ + t) * T_;
  for (int64_t s = threadIdx.x; s < T_; s += blockDim.x) {
    const float p = s < len ? expf(scores[off + s] - row_lse) : 0.0f;
    probs[off + s] = from_float<T>(p);
    dscores[off + s] = from_float<T>(p * (dprobs[off + s] - dv) * d.scale);
  }
}

template <class T>
void launch_forward(void* out, DevPtr lse, const void* qkv, const AttnDims& d, cudaStream_t s) {
  const int64_t bytes = fused_attention_shared_bytes(d.head_dim);
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((d.seq + kBr - 1) / kBr), static_cast<unsigned>(d.batch * d.heads));
  attn_fwd_kernel<T><<<grid, kWarps * 32, bytes, s>>>(static_cast<T*>(out), lse, static_cast<const T*>(qkv), d);
  TP_CUDA_CHECK_LAUNCH("attn_fwd_kernel");
}

template <class T>
void launch_dvec(float* dvec, const void* dout, const void* out, const AttnDims& d, cudaStream_t s) {
  const int64_t rows = d.batch * d.heads * d.seq;
  attn_dvec_kernel<T><<<grid_blocks(rows * 32, kThreads), kThreads, 0, s>>>(dvec, static_cast<const T*>(dout),
                                                                             static_cast<const T*>(out), d);
  TP_CUDA_CHECK_LAUNCH("attn_dvec_kernel");
}

template <class T>
void launch_backward(void* dqkv, const void* dout, const void* qkv, const void* out, CDevPtr lse, float* dvec,
                     const AttnDims& d, cudaStream_t s) {
  launch_dvec<T>(dvec, dout, out, d, s);
  const int64_t bytes = fused_attention_shared_bytes(d.head_dim);
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkv_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const unsigned tiles = static_cast<unsigned>((d.seq + kBr - 1) / kBr);
  attn_bwd_dq_kernel<T><<<dim3(tiles, static_cast<unsigned>(d.batch * d.heads)), kWarps * 32, bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, dvec, d);
  TP_CUDA_CHECK_LAUNCH("attn_bwd_dq_kernel");
  attn_bwd_dkv_kernel<T><<<dim3(tiles, static_cast<unsigned>(d.batch * d.kv_heads)), kWarps * 32, bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, dvec, d);
  TP_CUDA_CHECK_LAUNCH("attn_bwd_dkv_kernel");
}

template <class T>
void launch_softmax_forward(void* probs, DevPtr lse, const float* scores, const AttnDims& d, const AttnChunk& c,
                            cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(d.seq), static_cast<unsigned>(c.count));
  attn_softmax_fwd_kernel<T><<<grid, row_threads(d.seq), 0, s>>>(static_cast<T*>(probs), lse, scores, d, c);
  TP_CUDA_CHECK_LAUNCH("attn_softmax_fwd_kernel");
}

template <class T>
void launch_softmax_backward(void* probs, void* dscores, const float* scores, const float* dprobs, CDevPtr lse,
                             const void* dout, const void* out, const AttnDims& d, const AttnChunk& c,
                             cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(d.seq), static_cast<unsigned>(c.count));
  attn_softmax_bwd_kernel<T><<<grid, row_threads(d.seq), 0, s>>>(
      static_cast<T*>(probs), static_cast<T*>(dscores), scores, dprobs, lse, static_cast<const T*>(dout),
      static_cast<const T*>(out), d, c);
  TP_CUDA_CHECK_LAUNCH("attn_softmax_bwd_kernel");
}

// Calls fn(T{}) for the element type of `dtype`.
template <class Fn>
void dispatch(Dt dtype, Fn&& fn) {
  switch (dtype) {
    case Dt::bf16: fn(__nv_bfloat16{}); break;
    case Dt::f16: fn(__half{}); break;
    default: fn(float{}); break;
  }
}

}  // namespace

int64_t fused_attention_shared_bytes(int64_t head_dim) {
  // The larger of the kernels: dkv holds 2 kBr + 2 kBc rows of D + 1 floats and 2 kBc scalars.
  return static_cast<int64_t>(sizeof(float)) * ((2 * kBr + 2 * kBc) * (head_dim + 1) + 2 * kBc);
}

void attention_forward_fused(Dt dtype, void* out, DevPtr lse, const void* qkv, const AttnDims& d, cudaStream_t s) {
  dispatch(dtype, [&](auto t) { launch_forward<decltype(t)>(out, lse, qkv, d, s); });
}

void attention_dvec(Dt dtype, float* dvec, const void* dout, const void* out, const AttnDims& d, cudaStream_t s) {
  dispatch(dtype, [&](auto t) { launch_dvec<decltype(t)>(dvec, dout, out, d, s); });
}

void attention_backward_fused(Dt dtype, void* dqkv, const void* dout, const void* qkv, const void* out, CDevPtr lse,
                              float* dvec, const AttnDims& d, cudaStream_t s) {
  dispatch(dtype, [&](auto t) { launch_backward<decltype(t)>(dqkv, dout, qkv, out, lse, dvec, d, s); });
}

void attention_softmax_forward(Dt dtype, void* probs, DevPtr lse, const float* scores, const AttnDims& d,
                               const AttnChunk& c, cudaStream_t s) {
  dispatch(dtype, [&](auto t) { launch_softmax_forward<decltype(t)>(probs, lse, scores, d, c, s); });
}

void attention_softmax_backward(Dt dtype, void* probs, void* dscores, const float* scores, const float* dprobs,
                                CDevPtr lse, const void* dout, const void* out, const AttnDims& d, const AttnChunk& c,
                                cudaStream_t s) {
  dispatch(dtype, [&](auto t) {
    launch_softmax_backward<decltype(t)>(probs, dscores, scores, dprobs, lse, dout, out, d, c, s);
  });
}

}  // namespace trainplan::executor::cuda
