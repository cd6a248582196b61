// File: trainplan/executor/registry.hpp
//
// The backend registry: the only place that knows which backends exist. "cpu" is built in;
// "cuda" is a module, libtrainplan_backend_cuda.so (built when CMake finds the CUDA toolkit),
// that the registry opens with dlopen the first time "cuda" is asked for, so nothing else in
// the program loads a CUDA library. Everything else asks the registry.
//
//   for (const BackendInfo& b : backend_infos()) std::cout << b.name << ": " << b.description;
//   std::unique_ptr<Backend> be = make_backend("cpu");
//   make_backend("cudaa");  // Error: unknown backend "cudaa" — did you mean "cuda"? ...
//   make_backend("cuda");   // on a machine without a GPU: Error: backend "cuda" is
//                           // unavailable: no CUDA driver: libcuda.so.1: cannot open ...
//
// Where modules are looked for (backend_module_search_path()): the folders of the
// environment variable TRAINPLAN_BACKEND_PATH (colon-separated) when it is set, else the
// folder of the running program and <that folder>/../lib/trainplan (where `cmake --install`
// puts the module). A program that links a backend itself (the GPU tests) uses its own copy.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/launch.hpp"

namespace trainplan::executor {

struct BackendInfo {
  std::string name;         // "cpu"
  std::string description;  // what it is and computes in (set when available)
  /// "built in", the module's path, or "linked into this program"; empty when no module was
  /// found.
  std::string origin;
  std::string build;        // what a module was built with: "CUDA 13.0.88, cuBLAS, cuBLASLt"
  /// Usable on this machine; otherwise `why_unavailable` says why: the module was not found
  /// (and where it was looked for), it failed to load (the dlopen error), there is no driver
  /// or no device.
  bool available = true;
  std::string why_unavailable;
};

/// Every backend this program knows, in a fixed order ("cpu" first), with its state here.
/// Looks for the modules and, where a module's driver is present, loads it.
std::vector<BackendInfo> backend_infos();
/// Their names ("cpu", "cuda"); loads nothing.
std::vector<std::string> backend_names();
/// Creates a backend by name, loading its module on first use. Throws Error for an unknown
/// name (with a suggestion) or a backend that is unavailable here (with the reason).
std::unique_ptr<Backend> make_backend(std::string_view name);
/// The same on device `device` of the backend (0-based; -1: its default, as make_backend).
/// The cpu backend has one device (0). Throws Error for a device the machine lacks.
std::unique_ptr<Backend> make_backend(std::string_view name, int device);
/// Whether the backend has a device collective library the runtime can use on its tensors
/// (cuda built with NCCL: true; cpu: false). Loads the module; false when it is unavailable.
bool backend_has_device_communicator(std::string_view name);
/// The device collective library's communicator (NCCL for "cuda") of global rank `rank` of
/// `world`, for tensors of `backend` (made by make_backend(name, ...)), ids exchanged through
/// `store`; the communicators of `groups` and of the message pairs with `peers` are created
/// before it returns, so every rank calls it at the same time (its own thread or process).
/// Throws Error for a backend without one, two ranks on one device, or the library's failure.
std::unique_ptr<Communicator> make_device_communicator(std::string_view name, Rendezvous& store, int rank, int world,
                                                       Backend& backend, const std::vector<CommGroup>& groups,
                                                       const std::vector<int>& peers, double timeout_s);
/// How many devices the backend has on this machine (1 for "cpu": one process; 0 when the
/// module is missing or unavailable). Loads the module.
int backend_device_count(std::string_view name);
/// Times all-reduces over the backend's collective library (NCCL for "cuda") on `ranks`
/// devices of this machine, one thread per device, from 1 KiB to `max_bytes`: {"ranks", "gpu",
/// "entries": [{"collective", "size_bytes", "duration_s", "algbw_bytes_per_s",
/// "busbw_bytes_per_s"}]}. Throws Error for a backend without one ("cpu": its in-process and
/// TCP communicators are timed by trainplan bench itself), an unavailable backend, or the
/// module's failure (fewer devices than ranks, an NCCL error), with its reason.
json::Json backend_collective_benchmark(std::string_view name, int ranks, int64_t max_bytes);

/// The folders searched for backend modules, in order (see the top of this file).
std::vector<std::string> backend_module_search_path();

}  // namespace trainplan::executor
