// LayerNorm / RMSNorm forward and backward (one block per row, fp32 statistics) and the
// deterministic two-stage column reductions behind the weight and bias gradients: each block
// sums its rows into its own row of `partials`, then add_partials sums the blocks in order.
#include "device_common.cuh"

namespace trainplan::executor::cuda {
namespace {

constexpr int kMaxPartialBlocks = 256;

__global__ void layernorm_forward_kernel(DevPtr out, DevPtr mean, DevPtr rstd, CDevPtr inp, CDevPtr weight,
                                         CDevPtr bias, int64_t c, float eps) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * c;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum += ld(inp, base + j);
  const float mu = block_sum(sum, scratch) / static_cast<float>(c);
  float var = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = ld(inp, base + j) - mu;
    var += d * d;
  }
  var = block_sum(var, scratch) / static_cast<float>(c);
  const float rs = 1.0f / sqrtf(var + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (ld(inp, base + j) - mu) * rs;
    st(out, base + j, xhat * ld(weight, j) + (bias.p ? ld(bias, j) : 0.0f));
  }
  if (threadIdx.x == 0) {
    st(mean, blockIdx.x, mu);
    st(rstd, blockIdx.x, rs);
  }
}

// Rows blockIdx.x, blockIdx.x + gridDim.x, ...; thread-owned columns of the partial rows.
__global__ void layernorm_backward_kernel(DevPtr dinp, float* partials_dw, float* partials_db, CDevPtr dout,
                                          CDevPtr inp, CDevPtr weight, CDevPtr mean, CDevPtr rstd, int64_t n,
                                          int64_t c) {
  __shared__ float scratch[32];
  float* pdw = partials_dw + static_cast<int64_t>(blockIdx.x) * c;
  float* pdb = partials_db ? partials_db + static_cast<int64_t>(blockIdx.x) * c : nullptr;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    pdw[j] = 0.0f;
    if (pdb) pdb[j] = 0.0f;
  }
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t base = row * c;
    const float mu = ld(mean, row), rs = ld(rstd, row);
    float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float xhat = (ld(inp, base + j) - mu) * rs;
      const float dnorm = ld(dout, base + j) * ld(weight, j);
      sum_dnorm += dnorm;
      sum_dnorm_xhat += dnorm * xhat;
    }
    const float mean_dnorm = block_sum(sum_dnorm, scratch) / static_cast<float>(c);
    const float mean_dnorm_xhat = block_sum(sum_dnorm_xhat, scratch) / static_cast<float>(c);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float xhat = (ld(inp, base + j) - mu) * rs;
      const float g = ld(dout, base + j);
      pdw[j] += g * xhat;
      if (pdb) pdb[j] += g;
      st(dinp, base + j, rs * (g * ld(weight, j) - mean_dnorm - xhat * mean_dnorm_xhat));
    }
  }
}

__global__ void rmsnorm_forward_kernel(DevPtr out, DevPtr rstd, CDevPtr inp, CDevPtr weight, int64_t c, float eps) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * c;
  float sum_sq = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float x = ld(inp, base + j);
    sum_sq += x * x;
  }
  const float rs = 1.0f / sqrtf(block_sum(sum_sq, scratch) / static_cast<float>(c) + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) st(out, base + j, ld(inp, base + j) * rs * ld(weight, j));
  if (threadIdx.x == 0) st(rstd, blockIdx.x, rs);
}

__global__ void rmsnorm_backward_kernel(DevPtr dinp, float* partials_dw, CDevPtr dout, CDevPtr inp, CDevPtr weight,
                                        CDevPtr rstd, int64_t n, int64_t c) {
  __shared__ float scratch[32];
  float* pdw = partials_dw + static_cast<int64_t>(blockIdx.x) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) pdw[j] = 0.0f;
  for (int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int64_t base = row * c;
    const float rs = ld(rstd, row);
    float sum_dnorm_xhat = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
      sum_dnorm_xhat += ld(dout, base + j) * ld(weight, j) * (ld(inp, base + j) * rs);
    const float mean_dnorm_xhat = block_sum(sum_dnorm_xhat, scratch) / static_cast<float>(c);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float xhat = ld(inp, base + j) * rs;
      const float g = ld(dout, base + j);
      pdw[j] += g * xhat;
      st(dinp, base + j, rs * (g * ld(weight, j) - xhat * mean_dnorm_xhat));
    }
  }
}

__global__ void column_sum_partials_kernel(float* partials, CDevPtr x, int64_t n, int64_t c) {
  float* p = partials + static_cast<int64_t>(blockIdx.x) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float sum = 0.0f;
    for (int64_t row = blockIdx.x; row < n; row += gridDim.x) sum += ld(x, row * c + j);
    p[j] = sum;
  }
}

__global__ void add_partials_kernel(DevPtr dst, const float* partials, int blocks, int64_t c) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float sum = 0.0f;
  for (int b = 0; b < blocks; ++b) sum += partials[static_cast<int64_t>(b) * c + j];
  st(dst, j, ld(dst, j) + sum);
}

}  // namespace

int partial_blocks(int64_t n) {
  return static_cast<int>(n < 1 ? 1 : (n > kMaxPartialBlocks ? kMaxPartialBlocks : n));
}

void layernorm_forward(DevPtr out, DevPtr mean, DevPtr rstd, CDevPtr inp, CDevPtr weight, CDevPtr bias, int64_t n,
                       int64_t c, float eps, cudaStream_t s) {
  layernorm_forward_kernel<<<static_cast<unsigned>(n), row_threads(c), 0, s>>>(out, mean, rstd, inp, weight, bias, c,
                                                                                 eps);
  TP_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}
void layernorm_backward(DevPtr dinp, float* partials_dw, float* partials_db, CDevPtr dout, CDevPtr inp,
                        CDevPtr weight, CDevPtr mean, CDevPtr rstd, int64_t n, int64_t c, cudaStream_t s) {
  layernorm_backward_kernel<<<partial_blocks(n), row_threads(c), 0, s>>>(dinp, partials_dw, partials_db, dout, inp,
                                                                           weight, mean, rstd, n, c);
  TP_CUDA_CHECK_LAUNCH("layernorm_backward_kernel");
}
void rmsnorm_forward(DevPtr out, DevPtr rstd, CDevPtr inp, CDevPtr weight, int64_t n, int64_t c, float eps,
                     cudaStream_t s) {
  rmsnorm_forward_kernel<<<static_cast<unsigned>(n), row_threads(c), 0, s>>>(out, rstd, inp, weight, c, eps);
  TP_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}
void rmsnorm_backward(DevPtr dinp, float* partials_dw, CDevPtr dout, CDevPtr inp, CDevPtr weight, CDevPtr rstd,
                      int64_t n, int64_t c, cudaStream_t s) {
  rmsnorm_backward_kernel<<<partial_blocks(n), row_threads(c), 0, s>>>(dinp, partials_dw, dout, inp, weight, rstd, n,
                                                                         c);
  TP_CUDA_CHECK_LAUNCH("rmsnorm_backward_kernel");
}
void column_sum_partials(float* partials, CDevPtr x, int64_t n, int64_t c, cudaStream_t s) {
  column_sum_partials_kernel<<<partial_blocks(n), row_threads(c), 0, s>>>(partials, x, n, c);
  TP_CUDA_CHECK_LAUNCH("column_sum_partials_kernel");
}
void add_partials(DevPtr dst, const float* partials, int blocks, int64_t c, cudaStream_t s) {
  add_partials_kernel<<<static_cast<unsigned>((c + kThreads - 1) / kThreads), kThreads, 0, s>>>(dst, partials, blocks,
                                                                                                 c);
  TP_CUDA_CHECK_LAUNCH("add_partials_kernel");
}

}  // namespace trainplan::executor::cuda
