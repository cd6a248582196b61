// Device helpers shared by the kernels: typed loads and stores through DevPtr / CDevPtr,
// element conversion for the templated kernels, and warp / block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "check.hpp"
#include "kernels.hpp"

namespace trainplan::executor::cuda {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kThreads = 256;  // threads per block of the memory-bound kernels

// ---- element conversion -------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// Loads and stores through a runtime dtype (the switch is uniform across a warp).
__device__ __forceinline__ float ld(CDevPtr p, int64_t i) {
  switch (p.t) {
    case Dt::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.p)[i]);
    case Dt::f16: return __half2float(static_cast<const __half*>(p.p)[i]);
    default: return static_cast<const float*>(p.p)[i];
  }
}
__device__ __forceinline__ void st(DevPtr p, int64_t i, float v) {
  switch (p.t) {
    case Dt::bf16: static_cast<__nv_bfloat16*>(p.p)[i] = __float2bfloat16_rn(v); break;
    case Dt::f16: static_cast<__half*>(p.p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p.p)[i] = v; break;
  }
}

// Column offsets of head h's Q, K, V in a qkv row (query head h reads KV head h / (H / KVH)).
struct HeadColumns {
  int64_t q, k, v;
  __device__ HeadColumns(const AttnDims& d, int64_t h) {
    const int64_t kvh = h / (d.heads / d.kv_heads);
    q = h * d.head_dim;
    k = (d.heads + kvh) * d.head_dim;
    v = (d.heads + d.kv_heads + kvh) * d.head_dim;
  }
};

// lse and dvec (B*H*T each) of rows t0 .. t0 + count - 1 of head (b, h) into shared memory, one
// row per thread (threads < count); rows past the sequence end read row 0's (masked by callers).
__device__ __forceinline__ void load_row_stats(float* lse_sh, float* dvec_sh, CDevPtr lse, const float* dvec,
                                               const AttnDims& d, int64_t b, int64_t h, int64_t t0, int count) {
  if (static_cast<int>(threadIdx.x) < count) {
    const int64_t t = t0 + threadIdx.x;
    const int64_t at = (b * d.heads + h) * d.seq + (t < d.seq ? t : 0);
    lse_sh[threadIdx.x] = ld(lse, at);
    dvec_sh[threadIdx.x] = dvec[at];
  }
}

// ---- reductions ---------------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values; the trailing barrier lets the caller reuse it at once.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -FLT_MAX;
  m = warp_max(m);
  __syncthreads();
  return m;
}

// Threads per block for a row of `cols` elements: a multiple of 32 in [32, kThreads].
inline int row_threads(int64_t cols) {
  int64_t t = (cols + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > kThreads ? kThreads : t));
}

}  // namespace trainplan::executor::cuda
