// Error texts of the CUDA, cuBLAS and NCCL check macros (check.hpp).
#include "check.hpp"

#include <string_view>

#include <cublas_api.h>
#include <fmt/format.h>

#include "trainplan/core/error.hpp"

namespace trainplan::executor::cuda {

std::string source_location(const char* file, int line) {
  std::string_view path(file);
  const size_t at = path.rfind("executor/");
  if (at != std::string_view::npos) path = path.substr(at);
  return fmt::format("{}:{}", path, line);
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuda: {} failed at {}: {}: {}", call, source_location(file, line),
                          cudaGetErrorName(status), cudaGetErrorString(status)));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  const auto s = static_cast<cublasStatus_t>(status);
  throw Error(fmt::format("cublas: {} failed at {}: {} ({})", call, source_location(file, line),
                          cublasGetStatusName(s), cublasGetStatusString(s)));
}

void throw_nccl_error(int status, const char* call, const char* file, int line, const std::string& detail) {
  throw Error(fmt::format("nccl: {} failed at {}: error {}{}", call, source_location(file, line), status,
                          detail.empty() ? std::string() : ": " + detail));
}

}  // namespace trainplan::executor::cuda
