// Check macros of the CUDA backend: every CUDA runtime, cuBLAS(Lt) and NCCL call goes through
// one of them, so a failure throws trainplan::Error with the call text, file:line and the
// library's own error name and message instead of being ignored.
//
//   TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   TP_CUDA_CHECK_LAUNCH("my_kernel");              // cudaGetLastError after a launch
//   TP_CUBLAS_CHECK(cublasLtMatmul(...));
//   TP_NCCL_CHECK(ncclAllReduce(...));             // ncclInProgress counts as success here
//
// The error text reads
//   "cuda: cudaMemcpyAsync(dst, src, n, ...) failed at executor/cuda/src/x.cpp:42:
//    cudaErrorInvalidValue: invalid argument".
// Out-of-memory errors are not thrown here: the allocator checks them itself, to name the
// memory in use (CudaBackend::allocate_impl).
#pragma once

#include <string>

#include <cuda_runtime_api.h>

namespace trainplan::executor::cuda {

/// Throws trainplan::Error for a failed CUDA runtime call.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
/// Throws trainplan::Error for a failed cuBLAS / cuBLASLt call (status is a cublasStatus_t).
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
/// Throws trainplan::Error for a failed NCCL call (status is an ncclResult_t); `detail` is
/// ncclGetLastError's text when available.
[[noreturn]] void throw_nccl_error(int status, const char* call, const char* file, int line,
                                   const std::string& detail);

/// "file.cpp:12" with the path shortened to start at "executor/".
std::string source_location(const char* file, int line);

}  // namespace trainplan::executor::cuda

#define TP_CUDA_CHECK(call)                                                                 \
  do {                                                                                      \
    const cudaError_t tp_status_ = (call);                                                  \
    if (tp_status_ != cudaSuccess)                                                          \
      ::trainplan::executor::cuda::throw_cuda_error(tp_status_, #call, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: launch-configuration errors surface here (not asynchronous faults,
/// which the next synchronizing call reports through TP_CUDA_CHECK).
#define TP_CUDA_CHECK_LAUNCH(kernel_name)                                                        \
  do {                                                                                           \
    const cudaError_t tp_status_ = cudaGetLastError();                                           \
    if (tp_status_ != cudaSuccess)                                                               \
      ::trainplan::executor::cuda::throw_cuda_error(tp_status_, "launch of " kernel_name, __FILE__, \
                                                    __LINE__);                                   \
  } while (0)

#define TP_CUBLAS_CHECK(call)                                                                           \
  do {                                                                                                  \
    const int tp_status_ = static_cast<int>(call);                                                      \
    if (tp_status_ != 0) ::trainplan::executor::cuda::throw_cublas_error(tp_status_, #call, __FILE__, __LINE__); \
  } while (0)
