// File: trainplan/executor/backend_module.hpp
//
// The C entry point of a backend module: a shared library `libtrainplan_backend_<name>.so`
// that the registry (src/registry.cpp) opens with dlopen the first time the backend is asked
// for, so a program that never uses a device backend never loads its libraries (CUDA,
// cuBLAS, NCCL). A module exports exactly one symbol,
//
//   extern "C" const TrainplanBackendModule* trainplan_backend_register_<name>(void);
//
// returning a table that lives as long as the process. The registry refuses a module whose
// `abi_version` or `trainplan_version` differs from its own (the module carries its own copy
// of the executor's code, so both sides must be built from the same sources). The table's
// functions never throw: errors come back as text.
//
//   // in the module (executor/cuda/src/module_entry.cpp)
//   extern "C" TRAINPLAN_BACKEND_EXPORT const TrainplanBackendModule* trainplan_backend_register_cuda() {
//     return &kModule;
//   }
#pragma once

#include <cstddef>

namespace trainplan::executor {
class Backend;
}

/// Bumped whenever this table or the Backend class (backend.hpp, tensor.hpp) changes layout.
inline constexpr int kTrainplanBackendAbi = 2;

extern "C" {

/// Error text of a failed call (NUL-terminated, truncated to fit).
struct TrainplanBackendError {
  char message[1024];
  char hint[512];
};

struct TrainplanBackendModule {
  int abi_version;                // kTrainplanBackendAbi the module was built with
  const char* trainplan_version;  // "0.1.0": the project version the module was built from
  const char* name;               // "cuda"
  const char* build;              // what the module was built with: "CUDA 13.0.88, cuBLAS, cuBLASLt"
  /// 0 when the backend is usable on this machine; otherwise 1 with the reason in `error`
  /// ("no CUDA device: ...").
  int (*probe)(TrainplanBackendError* error);
  /// A new backend (owned by the caller, deleted through Backend's virtual destructor), or
  /// nullptr with the reason in `error`.
  trainplan::executor::Backend* (*create)(TrainplanBackendError* error);
  /// Times all-reduces over the device's collective library (NCCL for cuda) on `ranks` devices
  /// of this machine, one thread per device, float32 buffers from 1 KiB up to `max_bytes`: the
  /// JSON text of the table (executor/cuda: run_nccl_benchmark's format, times are rank 0's)
  /// goes to `*json_out` (released with `free_text`). Returns 0, or 1 with the reason in
  /// `error` (fewer devices than `ranks`, an NCCL failure). Null when the backend has no
  /// collective library.
  int (*collective_benchmark)(int ranks, long long max_bytes, char** json_out, TrainplanBackendError* error);
  void (*free_text)(char* text);
  /// How many devices this machine has for the backend (0 on error).
  int (*device_count)(void);
};

}  // extern "C"

#define TRAINPLAN_BACKEND_EXPORT __attribute__((visibility("default")))
