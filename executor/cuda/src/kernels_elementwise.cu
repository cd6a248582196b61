// Elementwise kernels of the CUDA backend: fill, add, accumulate, activations, rotary,
// embedding lookup and its gradient, bias rows. Grid-stride loops over 64-bit indices.
#include <cmath>

#include <cub/device/device_radix_sort.cuh>

#include "device_common.cuh"
#include "trainplan/core/error.hpp"

namespace trainplan::executor::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void fill_kernel(DevPtr x, int64_t n, float value) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) st(x, i, value);
}
__global__ void add_kernel(DevPtr out, CDevPtr a, CDevPtr b, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) st(out, i, ld(a, i) + ld(b, i));
}
__global__ void accumulate_kernel(DevPtr y, CDevPtr x, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) st(y, i, ld(y, i) + ld(x, i));
}
__global__ void gelu_forward_kernel(DevPtr out, CDevPtr inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = ld(inp, i);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    st(out, i, 0.5f * x * (1.0f + tanhf(u)));
  }
}
__global__ void gelu_backward_kernel(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = ld(inp, i);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    st(dinp, i, ld(dout, i) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
  }
}
__global__ void relu_forward_kernel(DevPtr out, CDevPtr inp, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = ld(inp, i);
    st(out, i, x > 0.0f ? x : 0.0f);
  }
}
__global__ void relu_backward_kernel(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) st(dinp, i, ld(inp, i) > 0.0f ? ld(dout, i) : 0.0f);
}
// One element j of row r: gate = inp[r, j], up = inp[r, F + j].
__global__ void swiglu_forward_kernel(DevPtr out, CDevPtr inp, int64_t n, int64_t f) {
  for (int64_t i = first_index(); i < n * f; i += grid_stride()) {
    const int64_t r = i / f, j = i - r * f;
    const float g = ld(inp, r * 2 * f + j), up = ld(inp, r * 2 * f + f + j);
    const float sig = 1.0f / (1.0f + expf(-g));
    st(out, i, g * sig * up);
  }
}
__global__ void swiglu_backward_kernel(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t n, int64_t f) {
  for (int64_t i = first_index(); i < n * f; i += grid_stride()) {
    const int64_t r = i / f, j = i - r * f;
    const float g = ld(inp, r * 2 * f + j), up = ld(inp, r * 2 * f + f + j);
    const float sig = 1.0f / (1.0f + expf(-g));
    const float d = ld(dout, i);
    st(dinp, r * 2 * f + j, d * up * (sig + g * sig * (1.0f - sig)));
    st(dinp, r * 2 * f + f + j, d * g * sig);
  }
}
// One rotated pair (row, head among the first H + KVH, j < D/2); angles in double as on the CPU.
__global__ void rotary_kernel(DevPtr out, CDevPtr inp, int64_t rows, int64_t seq, int64_t rotated_heads, int64_t row_len,
                              int64_t head_dim, double theta, bool inverse) {
  const int64_t half = head_dim / 2, per_row = rotated_heads * half;
  for (int64_t i = first_index(); i < rows * per_row; i += grid_stride()) {
    const int64_t r = i / per_row, rest = i - r * per_row, h = rest / half, j = rest - h * half;
    const double pos = static_cast<double>(r % seq);
    const double angle = pos * pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
    double s, c;
    sincos(angle, &s, &c);
    if (inverse) s = -s;
    const int64_t at = r * row_len + h * head_dim + j;
    const double a = ld(inp, at), b = ld(inp, at + half);
    st(out, at, static_cast<float>(a * c - b * s));
    st(out, at + half, static_cast<float>(b * c + a * s));
  }
}
// Copies the V columns [from, row_len) of each row.
__global__ void copy_columns_kernel(DevPtr out, CDevPtr inp, int64_t rows, int64_t row_len, int64_t from) {
  const int64_t width = row_len - from;
  for (int64_t i = first_index(); i < rows * width; i += grid_stride()) {
    const int64_t r = i / width, j = from + (i - r * width);
    st(out, r * row_len + j, ld(inp, r * row_len + j));
  }
}
// One block per token row.
__global__ void embedding_forward_kernel(DevPtr out, const int32_t* ids, CDevPtr table, int64_t c, int64_t rows,
                                         int64_t row_begin, bool accumulate) {
  const int64_t n = blockIdx.x;
  const int64_t r = static_cast<int64_t>(ids[n]) - row_begin;
  const bool hit = r >= 0 && r < rows;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float v = hit ? ld(table, r * c + j) : 0.0f;
    if (accumulate) {
      if (hit) st(out, n * c + j, ld(out, n * c + j) + v);
    } else {
      st(out, n * c + j, v);
    }
  }
}
// key[i] = the table row of token i (ids[i] - row_begin), or `rows` when outside the table;
// order[i] = i.
__global__ void embedding_keys_kernel(int32_t* keys, int32_t* order, const int32_t* ids, int64_t n, int64_t rows,
                                      int64_t row_begin) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t r = static_cast<int64_t>(ids[i]) - row_begin;
    keys[i] = static_cast<int32_t>(r >= 0 && r < rows ? r : rows);
    order[i] = static_cast<int32_t>(i);
  }
}
// Block (sorted position i, column chunk y): the first position of each table row's run sums
// the run's token rows in increasing token order (the radix sort is stable), then adds once.
__global__ void embedding_backward_kernel(DevPtr dtable, CDevPtr dout, const int32_t* keys, const int32_t* order,
                                          int64_t n, int64_t rows, int64_t c) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int32_t key = keys[i];
  if (j >= c || key >= rows || (i > 0 && keys[i - 1] == key)) return;
  float sum = 0.0f;
  for (int64_t k = i; k < n && keys[k] == key; ++k) sum += ld(dout, static_cast<int64_t>(order[k]) * c + j);
  const int64_t at = static_cast<int64_t>(key) * c + j;
  st(dtable, at, ld(dtable, at) + sum);
}
// Bits of the radix sort's keys: enough for 0 .. rows.
int key_bits(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= rows) ++bits;
  return bits;
}
// The radix sort's workspace, rounded to 256 bytes: it comes first in the scratch (256-byte
// aligned), the four int32 arrays after it.
size_t embedding_sort_bytes(int64_t n) {
  size_t bytes = 0;
  TP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(n)));
  return (bytes + 255) / 256 * 256;
}
__global__ void write_int64_kernel(int64_t* dst, int64_t value) { *dst = value; }
__global__ void add_bias_rows_kernel(DevPtr out, CDevPtr bias, int64_t n, int64_t c) {
  for (int64_t i = first_index(); i < n * c; i += grid_stride()) st(out, i, ld(out, i) + ld(bias, i % c));
}

}  // namespace

int grid_blocks(int64_t work_items, int threads_per_block) {
  // Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
  constexpr int64_t kMaxBlocks = 4096;
  int64_t blocks = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

#define TP_LAUNCH_1D(kernel, count, stream, ...)                                        \
  do {                                                                                  \
    kernel<<<grid_blocks(count, kThreads), kThreads, 0, stream>>>(__VA_ARGS__);         \
    TP_CUDA_CHECK_LAUNCH(#kernel);                                                      \
  } while (0)

void fill(DevPtr x, int64_t count, float value, cudaStream_t s) { TP_LAUNCH_1D(fill_kernel, count, s, x, count, value); }
void add(DevPtr out, CDevPtr a, CDevPtr b, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(add_kernel, count, s, out, a, b, count);
}
void accumulate(DevPtr y, CDevPtr x, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(accumulate_kernel, count, s, y, x, count);
}
void gelu_forward(DevPtr out, CDevPtr inp, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(gelu_forward_kernel, count, s, out, inp, count);
}
void gelu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(gelu_backward_kernel, count, s, dinp, inp, dout, count);
}
void relu_forward(DevPtr out, CDevPtr inp, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(relu_forward_kernel, count, s, out, inp, count);
}
void relu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t count, cudaStream_t s) {
  TP_LAUNCH_1D(relu_backward_kernel, count, s, dinp, inp, dout, count);
}
void swiglu_forward(DevPtr out, CDevPtr inp, int64_t n, int64_t f, cudaStream_t s) {
  TP_LAUNCH_1D(swiglu_forward_kernel, n * f, s, out, inp, n, f);
}
void swiglu_backward(DevPtr dinp, CDevPtr inp, CDevPtr dout, int64_t n, int64_t f, cudaStream_t s) {
  TP_LAUNCH_1D(swiglu_backward_kernel, n * f, s, dinp, inp, dout, n, f);
}
void rotary(DevPtr out, CDevPtr inp, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
            double theta, bool inverse, cudaStream_t s) {
  const int64_t rows = batch * seq, row_len = (heads + 2 * kv_heads) * head_dim;
  const int64_t rotated = heads + kv_heads;
  TP_LAUNCH_1D(rotary_kernel, rows * rotated * (head_dim / 2), s, out, inp, rows, seq, rotated, row_len, head_dim, theta,
               inverse);
  if (out.p != inp.p) {
    const int64_t from = rotated * head_dim;
    TP_LAUNCH_1D(copy_columns_kernel, rows * (row_len - from), s, out, inp, rows, row_len, from);
  }
}
void embedding_forward(DevPtr out, const int32_t* ids, CDevPtr table, int64_t n, int64_t c, int64_t rows,
                       int64_t row_begin, bool accumulate, cudaStream_t s) {
  embedding_forward_kernel<<<static_cast<unsigned>(n), row_threads(c), 0, s>>>(out, ids, table, c, rows, row_begin,
                                                                                 accumulate);
  TP_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}
size_t embedding_backward_scratch_bytes(int64_t n) {
  return embedding_sort_bytes(n) + 4 * static_cast<size_t>(n) * sizeof(int32_t);
}
void embedding_backward(DevPtr dtable, CDevPtr dout, const int32_t* ids, int64_t n, int64_t rows, int64_t row_begin,
                        int64_t c, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  if (n == 0 || c == 0) return;
  size_t sort_bytes = embedding_sort_bytes(n);
  TP_ASSERT(scratch_bytes >= sort_bytes + 4 * static_cast<size_t>(n) * sizeof(int32_t));
  auto* keys = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + sort_bytes);
  int32_t* order = keys + n;
  int32_t* sorted_keys = order + n;
  int32_t* sorted_order = sorted_keys + n;
  TP_LAUNCH_1D(embedding_keys_kernel, n, s, keys, order, ids, n, rows, row_begin);
  TP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch, sort_bytes, keys, sorted_keys, order, sorted_order,
                                                static_cast<int>(n), 0, key_bits(rows), s));
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>((c + kThreads - 1) / kThreads));
  embedding_backward_kernel<<<grid, kThreads, 0, s>>>(dtable, dout, sorted_keys, sorted_order, n, rows, c);
  TP_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}
void write_int64(int64_t* dst, int64_t value, cudaStream_t s) {
  write_int64_kernel<<<1, 1, 0, s>>>(dst, value);
  TP_CUDA_CHECK_LAUNCH("write_int64_kernel");
}
void add_bias_rows(DevPtr out, CDevPtr bias, int64_t n, int64_t c, cudaStream_t s) {
  TP_LAUNCH_1D(add_bias_rows_kernel, n * c, s, out, bias, n, c);
}

}  // namespace trainplan::executor::cuda
