// Cross-entropy pieces over a (vocab-parallel) logits slice, one block per token row, and the
// optimizer kernels: deterministic sum of squares (fp64 block partials summed in order),
// clip scale, AdamW with optional 16-bit model copy.
#include <cmath>

#include "device_common.cuh"

namespace trainplan::executor::cuda {
namespace {

__global__ void ce_local_max_kernel(DevPtr max, CDevPtr logits, int64_t v) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * v;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, ld(logits, base + j));
  m = block_max(m, scratch);
  if (threadIdx.x == 0) st(max, blockIdx.x, m);
}

__global__ void ce_local_sum_exp_kernel(DevPtr sum_exp, CDevPtr logits, CDevPtr max, int64_t v) {
  __shared__ float scratch[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * v;
  const float m = ld(max, blockIdx.x);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += expf(ld(logits, base + j) - m);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) st(sum_exp, blockIdx.x, sum);
}

__global__ void ce_local_target_logit_kernel(DevPtr target_logit, CDevPtr logits, const int32_t* targets, int64_t n,
                                             int64_t v, int64_t vocab_begin) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t j = static_cast<int64_t>(targets[i]) - vocab_begin;
  st(target_logit, i, (j >= 0 && j < v) ? ld(logits, i * v + j) : 0.0f);
}

__global__ void ce_combine_kernel(DevPtr losses, CDevPtr max, CDevPtr sum_exp, CDevPtr target_logit, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  st(losses, i, logf(ld(sum_exp, i)) + (ld(max, i) - ld(target_logit, i)));
}

__global__ void ce_backward_kernel(DevPtr dlogits, CDevPtr logits, const int32_t* targets, CDevPtr max, CDevPtr sum_exp,
                                   int64_t v, int64_t vocab_begin, float scale) {
  const int64_t row = blockIdx.x, base = row * v;
  const float m = ld(max, row), inv_sum = 1.0f / ld(sum_exp, row);
  const int64_t target = static_cast<int64_t>(targets[row]) - vocab_begin;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float p = expf(ld(logits, base + j) - m) * inv_sum;
    st(dlogits, base + j, scale * (p - (j == target ? 1.0f : 0.0f)));
  }
}

__global__ void sum_squares_partials_kernel(double* partials, CDevPtr x, int64_t n) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = ld(x, i);
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_squares_final_kernel(DevPtr out, const double* partials, int blocks) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) sum += partials[b];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) st(out, 0, static_cast<float>(static_cast<double>(ld(out, 0)) + sum));
}

__global__ void clip_scale_kernel(DevPtr scale, CDevPtr sum_squares, double max_norm) {
  const double norm = sqrt(static_cast<double>(ld(sum_squares, 0)));
  st(scale, 0, static_cast<float>(max_norm > 0 ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0));
}

__global__ void adamw_kernel(DevPtr params, CDevPtr grads, DevPtr m, DevPtr v, CDevPtr scale, DevPtr model_copy,
                             int64_t n, AdamWArgs a) {
  const float s = ld(scale, 0);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = ld(grads, i) * s;
    const float mi = a.beta1 * ld(m, i) + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * ld(v, i) + (1.0f - a.beta2) * g * g;
    st(m, i, mi);
    st(v, i, vi);
    const float p = ld(params, i);
    const float update = (mi / a.correction1) / (sqrtf(vi / a.correction2) + a.eps) + a.weight_decay * p;
    const float next = p - a.learning_rate * update;
    st(params, i, next);
    if (model_copy.p) st(model_copy, i, next);
  }
}

unsigned row_blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void ce_local_max(DevPtr max, CDevPtr logits, int64_t n, int64_t v, cudaStream_t s) {
  ce_local_max_kernel<<<static_cast<unsigned>(n), row_threads(v), 0, s>>>(max, logits, v);
  TP_CUDA_CHECK_LAUNCH("ce_local_max_kernel");
}
void ce_local_sum_exp(DevPtr sum_exp, CDevPtr logits, CDevPtr max, int64_t n, int64_t v, cudaStream_t s) {
  ce_local_sum_exp_kernel<<<static_cast<unsigned>(n), row_threads(v), 0, s>>>(sum_exp, logits, max, v);
  TP_CUDA_CHECK_LAUNCH("ce_local_sum_exp_kernel");
}
void ce_local_target_logit(DevPtr target_logit, CDevPtr logits, const int32_t* targets, int64_t n, int64_t v,
                           int64_t vocab_begin, cudaStream_t s) {
  ce_local_target_logit_kernel<<<row_blocks(n), kThreads, 0, s>>>(target_logit, logits, targets, n, v, vocab_begin);
  TP_CUDA_CHECK_LAUNCH("ce_local_target_logit_kernel");
}
void ce_combine(DevPtr losses, CDevPtr max, CDevPtr sum_exp, CDevPtr target_logit, int64_t n, cudaStream_t s) {
  ce_combine_kernel<<<row_blocks(n), kThreads, 0, s>>>(losses, max, sum_exp, target_logit, n);
  TP_CUDA_CHECK_LAUNCH("ce_combine_kernel");
}
void ce_backward(DevPtr dlogits, CDevPtr logits, const int32_t* targets, CDevPtr max, CDevPtr sum_exp, int64_t n,
                 int64_t v, int64_t vocab_begin, float dloss_scale, cudaStream_t s) {
  ce_backward_kernel<<<static_cast<unsigned>(n), row_threads(v), 0, s>>>(dlogits, logits, targets, max, sum_exp, v,
                                                                          vocab_begin, dloss_scale);
  TP_CUDA_CHECK_LAUNCH("ce_backward_kernel");
}
void sum_squares(DevPtr out, CDevPtr x, int64_t count, double* partials, cudaStream_t s) {
  const int blocks = grid_blocks(count, kThreads);
  sum_squares_partials_kernel<<<blocks, kThreads, 0, s>>>(partials, x, count);
  TP_CUDA_CHECK_LAUNCH("sum_squares_partials_kernel");
  sum_squares_final_kernel<<<1, kThreads, 0, s>>>(out, partials, blocks);
  TP_CUDA_CHECK_LAUNCH("sum_squares_final_kernel");
}
void clip_scale(DevPtr scale, CDevPtr sum_squares, double max_norm, cudaStream_t s) {
  clip_scale_kernel<<<1, 1, 0, s>>>(scale, sum_squares, max_norm);
  TP_CUDA_CHECK_LAUNCH("clip_scale_kernel");
}
void adamw_step(DevPtr params, CDevPtr grads, DevPtr m, DevPtr v, CDevPtr scale, DevPtr model_copy, int64_t count,
                const AdamWArgs& args, cudaStream_t s) {
  adamw_kernel<<<grid_blocks(count, kThreads), kThreads, 0, s>>>(params, grads, m, v, scale, model_copy, count, args);
  TP_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace trainplan::executor::cuda
