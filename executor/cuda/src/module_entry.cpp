// The module's entry point (backend_module.hpp): what libtrainplan_backend_cuda.so exports to
// the registry. Also linked into the programs that link the CUDA library themselves (the GPU
// tests, the CUDA benchmarks), which export it so their registry uses their own copy.
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/backend_module.hpp"
#include "trainplan/executor/cuda_backend.hpp"

namespace {

template <size_t N>
void copy_text(const std::string& text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

int probe(TrainplanBackendError* error) {
  try {
    const std::string why = trainplan::executor::cuda_unavailable_reason();
    if (why.empty()) return 0;
    copy_text(why, error->message);
    copy_text("run on a machine with an NVIDIA GPU, or use the cpu backend", error->hint);
  } catch (const std::exception& e) {
    copy_text(e.what(), error->message);
  }
  return 1;
}

trainplan::executor::Backend* create(TrainplanBackendError* error) {
  try {
    return trainplan::executor::make_cuda_backend().release();
  } catch (const trainplan::Error& e) {
    copy_text(e.message(), error->message);
    copy_text(e.hint_text(), error->hint);
  } catch (const std::exception& e) {
    copy_text(e.what(), error->message);
  }
  return nullptr;
}

const TrainplanBackendModule kModule = {kTrainplanBackendAbi, TRAINPLAN_VERSION, "cuda", TRAINPLAN_CUDA_BUILD,
                                        probe, create};

}  // namespace

extern "C" TRAINPLAN_BACKEND_EXPORT const TrainplanBackendModule* trainplan_backend_register_cuda() {
  return &kModule;
}
