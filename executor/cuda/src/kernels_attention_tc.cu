// Attention on tensor cores (FlashAttention-2 structure, nvcuda::wmma 16x16x16 fragments of bf16
// or f16 with fp32 accumulation), forward and backward, for head dims of
// kTensorCoreHeadDims on compute capability 8.0 and later (bf16 fragments need sm_80; on
// older targets the kernel bodies compile empty and the host never picks this path).
//
// Tiles: a block of 4 warps owns 64 rows (queries in the forward and dQ kernels, keys in the
// dK/dV kernel); warp w owns rows 16 w .. 16 w + 15 of every per-row buffer, so after the
// block-wide tile loads only __syncwarp is needed. The other side walks tiles of 64 rows staged
// in shared memory. Rows past the sequence end are loaded as zeros and masked.
// - forward: S = Q K^T (fp32), online softmax per row (running max m, sum l in shared memory),
//   P rounded to the element type, O (fp32 in shared memory) = O * exp(m_old - m_new) + P V;
//   out = O / l, lse = m + log l.
// - backward: dvec = rowsum(dO * O) (attention_dvec); dQ kernel: S = Q K^T, dP = dO V^T,
//   dS = P (dP - dvec) scale with P = exp(S scale - lse), dQ += dS K (fragments kept across the
//   key tiles); dK/dV kernel per (batch, KV head, key tile) over the query heads of the group and
//   their query tiles: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q. No atomics: every
//   output element has one owner.
// P and dS enter the second products rounded to the element type (as in FlashAttention-2 and
// the unfused path), hence the unfused path's 16-bit tolerances in the GPU tests.
//
// Shared memory (bytes, head dim D, ldh = D + 8): forward 3 * 64 ldh * 2 (Q, K, V) + 64 * 68 * 4
// (S) + 64 * 72 * 2 (P) + 64 (D + 4) * 4 (O) + 3 * 64 * 4 (m, l, rescale); backward
// 4 * 64 ldh * 2 + 2 * 64 * 68 * 4 (S, dP) + 64 * 72 * 2 + 2 * 64 * 4 (lse, dvec). D = 128:
// 110.75 KiB and 111.5 KiB. Paddings keep every fragment pointer 32-byte aligned and spread
// shared-memory banks.
#include <mma.h>

#include <type_traits>

#include "device_common.cuh"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTcWarps = 4;
constexpr int kTile = 64;                // rows per block and per staged tile, 16 per warp
constexpr int kPadH = 8;                 // 16-bit elements of padding per shared row
constexpr int kPadF = 4;                 // fp32 elements of padding per shared row
constexpr int kLdS = kTile + kPadF;      // row stride of the fp32 score buffers
constexpr int kLdP = kTile + kPadH;      // row stride of the 16-bit probability buffer
[[maybe_unused]] constexpr int kTileChunks = kTile / 16;  // 16-wide chunks of a tile (unused below sm_80)

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;

constexpr int64_t forward_bytes(int64_t d) {
  const int64_t ldh = d + kPadH;
  return 3 * kTile * ldh * 2 + kTile * kLdS * 4 + kTile * kLdP * 2 + kTile * (d + kPadF) * 4 + 3 * kTile * 4;
}
constexpr int64_t backward_bytes(int64_t d) {
  const int64_t ldh = d + kPadH;
  return 4 * kTile * ldh * 2 + 2 * kTile * kLdS * 4 + kTile * kLdP * 2 + 2 * kTile * 4;
}

// kTile rows x D columns of one head from a row-major (.., row_len) tensor into shared memory
// with row stride ld, 16 bytes at a time; rows past the sequence end read as zeros. The host
// checks that the tensors are 16-byte aligned; row_len, col and D are multiples of 16 elements.
template <int D, class T>
__device__ __forceinline__ void load_tile16(T* dst, int ld, const T* src, int64_t first_row, int64_t seq,
                                            int64_t row_len, int64_t col) {
  constexpr int kVecs = D / 8;  // 8 elements of 2 bytes per 16-byte vector
  for (int i = threadIdx.x; i < kTile * kVecs; i += blockDim.x) {
    const int r = i / kVecs, c = (i - r * kVecs) * 8;
    const int64_t t = first_row + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < seq) v = *reinterpret_cast<const uint4*>(src + t * row_len + col + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
}

// acc += A (16 x K, row-major at a, stride lda) B, with B given as the transpose of a row-major
// (16 x K) block at bt (stride ldb): A B^T of two row-major blocks.
template <int K, class T>
__device__ __forceinline__ void mma_abt(Acc& acc, const T* a, int lda, const T* bt, int ldb) {
#pragma unroll
  for (int k = 0; k < K / 16; ++k) {
    FragA<T> fa;
    FragBCol<T> fb;
    wmma::load_matrix_sync(fa, a + k * 16, lda);
    wmma::load_matrix_sync(fb, bt + k * 16, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// acc += A (16 x kTile, row-major at a, stride lda) B (kTile x 16, row-major at b, stride ldb).
template <class T>
__device__ __forceinline__ void mma_ab(Acc& acc, const T* a, int lda, const T* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kTileChunks; ++k) {
    FragA<T> fa;
    FragBRow<T> fb;
    wmma::load_matrix_sync(fa, a + k * 16, lda);
    wmma::load_matrix_sync(fb, b + k * 16 * ldb, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// Writes the D/16 accumulators of a warp's 16 rows (first row `first_row` of the sequence) to
// columns col.. of a row-major (.., row_len) tensor, through the warp's 16 x 16 fp32 scratch.
template <int D, class T>
__device__ __forceinline__ void store_rows(T* dst, int64_t row_len, int64_t col, int64_t first_row, int64_t seq,
                                          const Acc (&acc)[D / 16], float* scratch) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(scratch, acc[n], kLdS, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int rr = e >> 4, c = e & 15;
      const int64_t t = first_row + rr;
      if (t < seq) dst[t * row_len + col + n * 16 + c] = from_float<T>(scratch[rr * kLdS + c]);
    }
    __syncwarp();
  }
}

template <int D, class T>
__global__ void __launch_bounds__(kTcWarps * 32) attn_tc_fwd_kernel(T* out, DevPtr lse, const T* qkv, AttnDims d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char tc_smem[];
  constexpr int ldh = D + kPadH, ldo = D + kPadF;
  T* q_sh = reinterpret_cast<T*>(tc_smem);
  T* k_sh = q_sh + kTile * ldh;
  T* v_sh = k_sh + kTile * ldh;
  float* s_sh = reinterpret_cast<float*>(v_sh + kTile * ldh);
  T* p_sh = reinterpret_cast<T*>(s_sh + kTile * kLdS);
  float* o_sh = reinterpret_cast<float*>(p_sh + kTile * kLdP);
  float* m_sh = o_sh + kTile * ldo;
  float* l_sh = m_sh + kTile;
  float* c_sh = l_sh + kTile;
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16;
  const int64_t T_ = d.seq, row = d.qkv_row();
  const int64_t b = blockIdx.y / d.heads, h = blockIdx.y % d.heads;
  const HeadColumns cols(d, h);
  const T* base = qkv + b * T_ * row;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile16<D>(q_sh, ldh, base, t0, T_, row, cols.q);
  for (int i = threadIdx.x; i < kTile * ldo; i += blockDim.x) o_sh[i] = 0.0f;
  if (threadIdx.x < kTile) {
    m_sh[threadIdx.x] = -INFINITY;
    l_sh[threadIdx.x] = 0.0f;
  }
  const int64_t key_end = d.causal && t0 + kTile < T_ ? t0 + kTile : T_;
  for (int64_t s0 = 0; s0 < key_end; s0 += kTile) {
    __syncthreads();  // the previous K, V tiles are consumed (first pass: Q, O, m, l are set)
    load_tile16<D>(k_sh, ldh, base, s0, T_, row, cols.k);
    load_tile16<D>(v_sh, ldh, base, s0, T_, row, cols.v);
    __syncthreads();
    // S (16 x 64, the warp's rows) = Q K^T.
#pragma unroll
    for (int n = 0; n < kTileChunks; ++n) {
      Acc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_abt<D>(acc, q_sh + r0 * ldh, ldh, k_sh + n * 16 * ldh, ldh);
      wmma::store_matrix_sync(s_sh + r0 * kLdS + n * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax: lane j takes keys j and j + 32 of each of the warp's rows.
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr;
      const int64_t t = t0 + r;
      float x[2], p[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int c = lane + 32 * j;
        const int64_t s = s0 + c;
        const bool valid = t < T_ && s < T_ && (!d.causal || s <= t);
        x[j] = valid ? s_sh[r * kLdS + c] * d.scale : -INFINITY;
      }
      const float m_old = m_sh[r];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(x[0], x[1])));
      float corr = 1.0f;  // every key so far masked: O and l are still 0
      if (m_new == -INFINITY) {
        p[0] = p[1] = 0.0f;
      } else {
#pragma unroll
        for (int j = 0; j < 2; ++j) p[j] = x[j] == -INFINITY ? 0.0f : expf(x[j] - m_new);
        corr = expf(m_old - m_new);  // 0 on the first tile with a key (m_old = -inf)
      }
      p_sh[r * kLdP + lane] = from_float<T>(p[0]);
      p_sh[r * kLdP + lane + 32] = from_float<T>(p[1]);
      const float tile_sum = warp_sum(p[0] + p[1]);
      __syncwarp();  // every lane read m_sh[r] before lane 0 replaces it
      if (lane == 0) {
        m_sh[r] = m_new;
        l_sh[r] = l_sh[r] * corr + tile_sum;
        c_sh[r] = corr;
      }
    }
    __syncwarp();
    // O = O * corr + P V, 16 columns at a time; the warp's first 16 x 16 of S is the scratch.
    float* scratch = s_sh + r0 * kLdS;
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      Acc acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_ab(acc, p_sh + r0 * kLdP, kLdP, v_sh + n * 16, ldh);
      wmma::store_matrix_sync(scratch, acc, kLdS, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int rr = e >> 4, c = e & 15;
        float& o = o_sh[(r0 + rr) * ldo + n * 16 + c];
        o = o * c_sh[r0 + rr] + scratch[rr * kLdS + c];
      }
      __syncwarp();
    }
  }
  const int64_t out_row = d.heads * D;
  for (int rr = 0; rr < 16; ++rr) {
    const int r = r0 + rr;
    const int64_t t = t0 + r;
    if (t >= T_) break;  // warp-uniform; later rows are past the end too
    const float l = l_sh[r];
    const float inv_l = 1.0f / l;
    for (int c = lane; c < D; c += 32) out[(b * T_ + t) * out_row + h * D + c] = from_float<T>(o_sh[r * ldo + c] * inv_l);
    if (lane == 0) st(lse, (b * d.heads + h) * T_ + t, m_sh[r] + logf(l));
  }
#endif
}

// Shared memory of the backward kernels (backward_bytes): two 16-bit tiles of the block's own
// rows (loaded once), two of the rows it walks, the fp32 S and dP buffers (row stride kLdS), the
// 16-bit P / dS buffer (kLdP) and the walked rows' lse and dvec.
template <int D, class T>
struct BackwardShared {
  T* own[2];
  T* other[2];
  float *s, *dp;
  T* p;
  float *lse, *dvec;
  __device__ explicit BackwardShared(unsigned char* smem) {
    constexpr int ldh = D + kPadH;
    T* tiles = reinterpret_cast<T*>(smem);
    own[0] = tiles;
    own[1] = tiles + kTile * ldh;
    other[0] = tiles + 2 * kTile * ldh;
    other[1] = tiles + 3 * kTile * ldh;
    s = reinterpret_cast<float*>(tiles + 4 * kTile * ldh);
    dp = s + kTile * kLdS;
    p = reinterpret_cast<T*>(dp + kTile * kLdS);
    lse = reinterpret_cast<float*>(p + kTile * kLdP);
    dvec = lse + kTile;
  }
};

// S = own[0] other[0]^T and dP = own[1] other[1]^T (fp32) for the warp's 16 rows r0.., all
// kTile columns; ends with __syncwarp, so the warp may read both at once.
template <int D, class T>
__device__ __forceinline__ void score_products(const BackwardShared<D, T>& sh, int r0) {
  constexpr int ldh = D + kPadH;
#pragma unroll
  for (int n = 0; n < kTileChunks; ++n) {
    Acc s_acc, dp_acc;
    wmma::fill_fragment(s_acc, 0.0f);
    wmma::fill_fragment(dp_acc, 0.0f);
    mma_abt<D>(s_acc, sh.own[0] + r0 * ldh, ldh, sh.other[0] + n * 16 * ldh, ldh);
    mma_abt<D>(dp_acc, sh.own[1] + r0 * ldh, ldh, sh.other[1] + n * 16 * ldh, ldh);
    wmma::store_matrix_sync(sh.s + r0 * kLdS + n * 16, s_acc, kLdS, wmma::mem_row_major);
    wmma::store_matrix_sync(sh.dp + r0 * kLdS + n * 16, dp_acc, kLdS, wmma::mem_row_major);
  }
  __syncwarp();
}

template <int D, class T>
__global__ void __launch_bounds__(kTcWarps * 32)
    attn_tc_bwd_dq_kernel(T* dqkv, const T* dout, const T* qkv, CDevPtr lse, const float* dvec, AttnDims d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char tc_smem[];
  constexpr int ldh = D + kPadH;
  const BackwardShared<D, T> sh(tc_smem);
  T *q_sh = sh.own[0], *do_sh = sh.own[1], *k_sh = sh.other[0], *v_sh = sh.other[1], *ds_sh = sh.p;
  float *s_sh = sh.s, *dp_sh = sh.dp, *lse_sh = sh.lse, *dvec_sh = sh.dvec;
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16;
  const int64_t T_ = d.seq, row = d.qkv_row(), out_row = d.heads * D;
  const int64_t b = blockIdx.y / d.heads, h = blockIdx.y % d.heads;
  const HeadColumns cols(d, h);
  const T* base = qkv + b * T_ * row;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile16<D>(q_sh, ldh, base, t0, T_, row, cols.q);
  load_tile16<D>(do_sh, ldh, dout + b * T_ * out_row, t0, T_, out_row, h * D);
  load_row_stats(lse_sh, dvec_sh, lse, dvec, d, b, h, t0, kTile);
  Acc dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int64_t key_end = d.causal && t0 + kTile < T_ ? t0 + kTile : T_;
  for (int64_t s0 = 0; s0 < key_end; s0 += kTile) {
    __syncthreads();
    load_tile16<D>(k_sh, ldh, base, s0, T_, row, cols.k);
    load_tile16<D>(v_sh, ldh, base, s0, T_, row, cols.v);
    __syncthreads();
    score_products(sh, r0);  // S = Q K^T, dP = dO V^T for the warp's 16 query rows
    for (int e = lane; e < 16 * kTile; e += 32) {
      const int r = r0 + e / kTile, c = e % kTile;
      const int64_t t = t0 + r, s = s0 + c;
      float ds = 0.0f;
      if (t < T_ && s < T_ && (!d.causal || s <= t)) {
        const float p = expf(s_sh[r * kLdS + c] * d.scale - lse_sh[r]);
        ds = p * (dp_sh[r * kLdS + c] - dvec_sh[r]) * d.scale;
      }
      ds_sh[r * kLdP + c] = from_float<T>(ds);
    }
    __syncwarp();
    // dQ += dS K.
#pragma unroll
    for (int n = 0; n < D / 16; ++n) mma_ab(dq[n], ds_sh + r0 * kLdP, kLdP, k_sh + n * 16, ldh);
  }
  __syncwarp();
  store_rows<D>(dqkv + b * T_ * row, row, cols.q, t0 + r0, T_, dq, s_sh + r0 * kLdS);
#endif
}

// A block owns kTile keys of one (batch, KV head); rows of the per-row buffers are keys,
// columns queries.
template <int D, class T>
__global__ void __launch_bounds__(kTcWarps * 32)
    attn_tc_bwd_dkv_kernel(T* dqkv, const T* dout, const T* qkv, CDevPtr lse, const float* dvec, AttnDims d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char tc_smem[];
  constexpr int ldh = D + kPadH;
  const BackwardShared<D, T> sh(tc_smem);
  T *k_sh = sh.own[0], *v_sh = sh.own[1], *q_sh = sh.other[0], *do_sh = sh.other[1], *p_sh = sh.p;
  float *s_sh = sh.s, *dp_sh = sh.dp, *lse_sh = sh.lse, *dvec_sh = sh.dvec;
  const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 5) * 16;
  const int64_t T_ = d.seq, row = d.qkv_row(), out_row = d.heads * D;
  const int64_t group = d.heads / d.kv_heads;
  const int64_t b = blockIdx.y / d.kv_heads, kvh = blockIdx.y % d.kv_heads;
  const HeadColumns kv_cols(d, kvh * group);  // any query head of the group names the same K, V
  const T* base = qkv + b * T_ * row;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kTile;
  load_tile16<D>(k_sh, ldh, base, s0, T_, row, kv_cols.k);
  load_tile16<D>(v_sh, ldh, base, s0, T_, row, kv_cols.v);
  Acc dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int64_t query_begin = d.causal ? s0 : 0;  // causal: queries t >= the tile's first key
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = kvh * group + g;
    for (int64_t t0 = query_begin; t0 < T_; t0 += kTile) {
      __syncthreads();  // the previous Q, dO tiles are consumed (first pass: K, V are loaded)
      load_tile16<D>(q_sh, ldh, base, t0, T_, row, h * D);
      load_tile16<D>(do_sh, ldh, dout + b * T_ * out_row, t0, T_, out_row, h * D);
      load_row_stats(lse_sh, dvec_sh, lse, dvec, d, b, h, t0, kTile);
      __syncthreads();
      score_products(sh, r0);  // S^T = K Q^T, dP^T = V dO^T for the warp's 16 keys
      // P^T to p_sh (element type); dS^T over S^T in place (fp32).
      for (int e = lane; e < 16 * kTile; e += 32) {
        const int r = r0 + e / kTile, c = e % kTile;
        const int64_t s = s0 + r, t = t0 + c;
        float p = 0.0f, ds = 0.0f;
        if (s < T_ && t < T_ && (!d.causal || s <= t)) {
          p = expf(s_sh[r * kLdS + c] * d.scale - lse_sh[c]);
          ds = p * (dp_sh[r * kLdS + c] - dvec_sh[c]) * d.scale;
        }
        p_sh[r * kLdP + c] = from_float<T>(p);
        s_sh[r * kLdS + c] = ds;
      }
      __syncwarp();
      // dV += P^T dO.
#pragma unroll
      for (int n = 0; n < D / 16; ++n) mma_ab(dv[n], p_sh + r0 * kLdP, kLdP, do_sh + n * 16, ldh);
      __syncwarp();  // P^T is consumed: its rows take dS^T
      for (int e = lane; e < 16 * kTile; e += 32) {
        const int r = r0 + e / kTile, c = e % kTile;
        p_sh[r * kLdP + c] = from_float<T>(s_sh[r * kLdS + c]);
      }
      __syncwarp();
      // dK += dS^T Q.
#pragma unroll
      for (int n = 0; n < D / 16; ++n) mma_ab(dk[n], p_sh + r0 * kLdP, kLdP, q_sh + n * 16, ldh);
    }
  }
  __syncwarp();
  T* dst = dqkv + b * T_ * row;
  store_rows<D>(dst, row, kv_cols.k, s0 + r0, T_, dk, s_sh + r0 * kLdS);
  store_rows<D>(dst, row, kv_cols.v, s0 + r0, T_, dv, s_sh + r0 * kLdS);
#endif
}

template <int D, class T>
void launch_tc_forward(void* out, DevPtr lse, const void* qkv, const AttnDims& d, cudaStream_t s) {
  constexpr int64_t bytes = forward_bytes(D);
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_tc_fwd_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((d.seq + kTile - 1) / kTile), static_cast<unsigned>(d.batch * d.heads));
  attn_tc_fwd_kernel<D, T>
      <<<grid, kTcWarps * 32, bytes, s>>>(static_cast<T*>(out), lse, static_cast<const T*>(qkv), d);
  TP_CUDA_CHECK_LAUNCH("attn_tc_fwd_kernel");
}

template <int D, class T>
void launch_tc_backward(void* dqkv, const void* dout, const void* qkv, CDevPtr lse, const float* dvec,
                        const AttnDims& d, cudaStream_t s) {
  constexpr int64_t bytes = backward_bytes(D);
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_tc_bwd_dq_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  TP_CUDA_CHECK(cudaFuncSetAttribute(attn_tc_bwd_dkv_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const unsigned tiles = static_cast<unsigned>((d.seq + kTile - 1) / kTile);
  attn_tc_bwd_dq_kernel<D, T><<<dim3(tiles, static_cast<unsigned>(d.batch * d.heads)), kTcWarps * 32, bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, dvec, d);
  TP_CUDA_CHECK_LAUNCH("attn_tc_bwd_dq_kernel");
  attn_tc_bwd_dkv_kernel<D, T><<<dim3(tiles, static_cast<unsigned>(d.batch * d.kv_heads)), kTcWarps * 32, bytes, s>>>(
      static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, dvec, d);
  TP_CUDA_CHECK_LAUNCH("attn_tc_bwd_dkv_kernel");
}

// Calls fn(D, T{}) for a covered head dim and 16-bit dtype (the host checked both).
template <class Fn>
void dispatch_tc(Dt dtype, int64_t head_dim, Fn&& fn) {
  auto by_dim = [&](auto t) {
    switch (head_dim) {
      case 16: fn(std::integral_constant<int, 16>{}, t); break;
      case 32: fn(std::integral_constant<int, 32>{}, t); break;
      case 64: fn(std::integral_constant<int, 64>{}, t); break;
      case 80: fn(std::integral_constant<int, 80>{}, t); break;
      case 96: fn(std::integral_constant<int, 96>{}, t); break;
      case 128: fn(std::integral_constant<int, 128>{}, t); break;
      default: TP_ASSERT(false && "head dim not covered by the tensor-core attention");
    }
  };
  if (dtype == Dt::bf16)
    by_dim(__nv_bfloat16{});
  else if (dtype == Dt::f16)
    by_dim(__half{});
  else
    TP_ASSERT(false && "the tensor-core attention takes bf16 or f16");
}

}  // namespace

bool tensor_core_attention_head_dim(int64_t head_dim) {
  for (int64_t d : kTensorCoreHeadDims)
    if (d == head_dim) return true;
  return false;
}

int64_t tensor_core_attention_shared_bytes(int64_t head_dim) {
  return forward_bytes(head_dim) > backward_bytes(head_dim) ? forward_bytes(head_dim) : backward_bytes(head_dim);
}

void attention_forward_tc(Dt dtype, void* out, DevPtr lse, const void* qkv, const AttnDims& d, cudaStream_t s) {
  dispatch_tc(dtype, d.head_dim, [&](auto dim, auto t) { launch_tc_forward<decltype(dim)::value, decltype(t)>(out, lse, qkv, d, s); });
}

void attention_backward_tc(Dt dtype, void* dqkv, const void* dout, const void* qkv, const void* out, CDevPtr lse,
                           float* dvec, const AttnDims& d, cudaStream_t s) {
  attention_dvec(dtype, dvec, dout, out, d, s);
  dispatch_tc(dtype, d.head_dim, [&](auto dim, auto t) {
    launch_tc_backward<decltype(dim)::value, decltype(t)>(dqkv, dout, qkv, lse, dvec, d, s);
  });
}

}  // namespace trainplan::executor::cuda
