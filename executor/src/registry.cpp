// The backend registry: the one file that knows which backends this build contains.
#include "trainplan/executor/registry.hpp"

#include <functional>

#include <fmt/format.h>

#include "cpu_backend.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#if TRAINPLAN_HAVE_CUDA
#include "trainplan/executor/cuda_backend.hpp"
#endif

namespace trainplan::executor {
namespace {

struct Entry {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
  // Empty when usable here; otherwise why not (e.g. no GPU on this machine).
  std::function<std::string()> why_unavailable;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> kEntries = {
      {"cpu", make_cpu_backend, [] { return std::string(); }},
#if TRAINPLAN_HAVE_CUDA
      // The calling thread's current GPU (cudaSetDevice per rank thread picks one per rank).
      {"cuda", [] { return make_cuda_backend(); }, cuda_unavailable_reason},
#endif
  };
  return kEntries;
}

}  // namespace

std::vector<BackendInfo> backend_infos() {
  std::vector<BackendInfo> out;
  for (const Entry& e : entries()) {
    BackendInfo info;
    info.name = e.name;
    info.why_unavailable = e.why_unavailable();
    info.available = info.why_unavailable.empty();
    info.description = info.available ? e.make()->description() : "";
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const Entry& e : entries()) names.push_back(e.name);
  return names;
}

std::unique_ptr<Backend> make_backend(std::string_view name) {
  for (const Entry& e : entries()) {
    if (e.name != name) continue;
    std::string why = e.why_unavailable();
    if (!why.empty())
      throw Error(fmt::format("backend \"{}\" is compiled in but unavailable: {}", name, why))
          .hint("use the cpu backend, or run on a machine where it is available");
    return e.make();
  }
  std::vector<std::string> known = backend_names();
  // Names that this build could have had but does not: say so rather than "unknown".
  if (name == "cuda")
    throw Error("backend \"cuda\" is not compiled into this build")
        .hint(fmt::format("compiled in: {}; the CUDA backend is built when the CUDA toolkit is found",
                          join(known, ", ")));
  throw Error(fmt::format("unknown backend \"{}\"", name)).hint(suggestion(name, known));
}

}  // namespace trainplan::executor
