// File: trainplan/executor/registry.hpp
//
// The backend registry: the only place that knows which backends were compiled into this
// build ("cpu" always; "cuda" when the CUDA toolkit was found). Everything else asks it.
//
//   for (const BackendInfo& b : backend_infos()) std::cout << b.name << ": " << b.description;
//   std::unique_ptr<Backend> be = make_backend("cpu");
//   make_backend("cdua");   // Error: unknown backend "cdua" — did you mean "cuda"? ...
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

struct BackendInfo {
  std::string name;         // "cpu"
  std::string description;  // what it is and computes in
  /// Compiled in and usable on this machine (a compiled-in CUDA backend is unavailable on a
  /// machine without a GPU); `why_unavailable` says why not.
  bool available = true;
  std::string why_unavailable;
};

/// The backends compiled into this build, in a fixed order ("cpu" first).
std::vector<BackendInfo> backend_infos();
/// Their names.
std::vector<std::string> backend_names();
/// Creates a backend by name. Throws Error for an unknown name (with a suggestion) or a
/// backend that is compiled in but unavailable here (with the reason).
std::unique_ptr<Backend> make_backend(std::string_view name);

}  // namespace trainplan::executor
