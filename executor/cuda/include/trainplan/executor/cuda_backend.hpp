// File: trainplan/executor/cuda_backend.hpp
//
// The CUDA backend: the Backend interface on one NVIDIA GPU. Tensors live in device memory
// (host_accessible() == false), streams are CUDA streams, events are CUDA events (elapsed_s
// is GPU time), copies are cudaMemcpyAsync. Kernels store f32, bf16 or f16 and compute in
// fp32 (sums of squares in fp64): matrix products through cuBLASLt (bias epilogue), attention
// on tensor cores (own FlashAttention-2-style wmma kernel, bf16 / f16), fused (own tiled kernel
// on CUDA cores with online softmax, no T x T matrix in memory) or unfused (cuBLAS batched
// GEMMs + softmax kernel, a T x T workspace per head), own kernels for norms,
// cross-entropy, activations, embedding, rotary and AdamW. bf16 needs compute capability 8.0
// (T4 computes in f16 and f32). Tensors of one call may mix dtypes where the kernel reads them
// elementwise (bf16 activations with f32 norm statistics, f32 master weights with bf16
// gradients); a matrix product needs its two inputs in one dtype.
//
// Normally reached through the registry:
//   std::unique_ptr<Backend> be = make_backend("cuda");   // the calling thread's current GPU
// and directly when options matter:
//   CudaBackendOptions o;
//   o.device = 1;
//   o.attention = CudaAttention::fused;
//   std::unique_ptr<Backend> be = make_cuda_backend(o);
//   if (cuda_device_count() == 0) ...                     // no GPU here
//
// Errors: CUDA / cuBLAS calls throw trainplan::Error naming the call and file:line; running
// out of device memory names the bytes asked for, what this backend holds (live, peak,
// workspaces), the device's free / total memory and the note set by set_cuda_memory_note
// (e.g. the plan's memory breakdown).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

/// How attention_forward / attention_backward run.
enum class CudaAttention {
  automatic,    // tensor_core where it applies; else unfused when the T x T workspace of one head
                // fits attention_workspace_bytes, else fused
  fused,        // own flash-style kernel (CUDA cores, fp32 math); head_dim <= 256
  unfused,      // cuBLAS batched GEMMs (tensor cores) + softmax kernels, T x T workspace per head
  tensor_core,  // own flash-style kernel on tensor cores (wmma, fp32 accumulation): bf16 / f16,
                // head_dim 16, 32, 64, 80, 96 or 128, compute capability >= 8.0; other calls run
                // the fused kernel (said once on stderr per reason)
};
/// "auto", "fused", "unfused", "tensor_core".
std::string_view cuda_attention_name(CudaAttention a);

struct CudaBackendOptions {
  /// GPU index; -1 = the calling thread's current device (cudaGetDevice), so a launcher that
  /// calls cudaSetDevice per rank thread gets one GPU per rank through make_backend("cuda").
  int device = -1;
  CudaAttention attention = CudaAttention::automatic;
  /// Upper bound on the unfused attention's score workspace (the heads of one batch element
  /// are processed in chunks that fit).
  size_t attention_workspace_bytes = size_t{1} << 30;
  /// f32 matrix products on TF32 tensor cores (10-bit mantissa inputs); off: full fp32.
  bool tf32 = false;
  /// cuBLAS / cuBLASLt workspace per stream. 0: the hardware catalog's `cublas_workspace` of
  /// this device's GPU (32 MiB on Hopper, 4 MiB before; the largest in the catalog for a GPU
  /// the catalog does not know).
  size_t gemm_workspace_bytes = 0;
  /// linear_gelu_forward / linear_backward_gelu through cuBLASLt's GELU_AUX_BIAS and DGELU
  /// epilogues (tanh GELU) where the shapes allow (columns a multiple of 8), and
  /// linear_residual_forward with the residual as C (beta = 1); off: the product, then the
  /// GELU / add kernel.
  bool gemm_epilogues = true;
};

/// A CUDA backend on one GPU. Throws Error when the device does not exist or CUDA fails.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options = {});

/// GPUs visible to this process; 0 when there is none or no usable driver.
int cuda_device_count();
/// "" when a GPU is usable; otherwise why not ("no CUDA device: ...", the driver's error).
std::string cuda_unavailable_reason();

struct CudaDeviceInfo {
  int device = 0;
  std::string name;               // "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  double memory_bytes = 0;        // total device memory
  double free_bytes = 0;          // cudaMemGetInfo at the time of the call
  size_t shared_bytes_per_block = 0;  // opt-in maximum
  bool bf16 = false;              // compute capability >= 8.0
  int driver_version = 0, runtime_version = 0;  // 13000 = 13.0
  /// "8.0".
  std::string compute_capability() const;
};
/// Properties and free memory of a GPU (Error if it does not exist).
CudaDeviceInfo cuda_device_info(int device);

/// The GPU of a CUDA backend; -1 for any other backend.
int cuda_backend_device(const Backend& backend);
/// The options a CUDA backend was created with (device resolved); Error for other backends.
CudaBackendOptions cuda_backend_options(const Backend& backend);
/// The attention kernel a CUDA backend runs for (shape, dtype) on 16-byte aligned tensors:
/// "tensor_core", "fused" or "unfused" (Error for other backends and dtypes it does not compute in).
std::string cuda_attention_kernel(const Backend& backend, const AttentionShape& shape, DType dtype);
/// Bytes of scratch memory (workspaces of kernels, cuBLASLt, attention) the backend holds in
/// addition to its tensors (which Backend::allocated_bytes counts); 0 for other backends.
size_t cuda_workspace_bytes(const Backend& backend);
/// Text added to this backend's out-of-memory errors, e.g. a plan's memory breakdown. Does
/// nothing for other backends.
void set_cuda_memory_note(Backend& backend, std::string note);

}  // namespace trainplan::executor
