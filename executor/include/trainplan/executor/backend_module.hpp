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
class Communicator;
class Rendezvous;
struct CommGroup;
}

/// Bumped whenever this table or the Backend class (backend.hpp, tensor.hpp) changes layout.
inline constexpr int kTrainplanBackendAbi = 3;

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
  /// A new backend on device `device` (0-based; -1: the calling thread's current device, as
  /// `create`), or nullptr with the reason in `error` (no such device).
  trainplan::executor::Backend* (*create_on_device)(int device, TrainplanBackendError* error);
  /// The device collective library's communicator (NCCL for cuda) of global rank `rank` of
  /// `world`, moving tensors of `backend` (made by this module) in their own dtype, ordered
  /// after the work queued on the backend's default stream. The ranks exchange the library's
  /// ids through `store` (every rank of the job passes the same store); the communicators of
  /// groups[0..n_groups) and of the message pairs with peers[0..n_peers) are created before it
  /// returns, so every rank must call it at the same time (one thread or process each). Two
  /// ranks on one device are refused. Null with the reason in `error`; the member is null when
  /// the module has no collective library (built without NCCL).
  trainplan::executor::Communicator* (*create_communicator)(trainplan::executor::Rendezvous* store, int rank, int world,
                                                            trainplan::executor::Backend* backend,
                                                            const trainplan::executor::CommGroup* groups, int n_groups,
                                                            const int* peers, int n_peers, double timeout_s,
                                                            TrainplanBackendError* error);
};

}  // extern "C"

#define TRAINPLAN_BACKEND_EXPORT __attribute__((visibility("default")))
