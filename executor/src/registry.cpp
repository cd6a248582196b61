// The backend registry: the one file that knows which backends exist. "cpu" is built in;
// "cuda" is a module (libtrainplan_backend_cuda.so, backend_module.hpp) opened with dlopen the
// first time it is asked for, so planning, simulation and the CPU executor never load CUDA.
#include "trainplan/executor/registry.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "cpu_backend.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/backend_module.hpp"

namespace trainplan::executor {
namespace {

namespace fs = std::filesystem;

// A backend that lives in a module.
struct ModuleSpec {
  const char* name;         // "cuda"
  const char* file;         // the module's file name
  const char* entry;        // its exported entry point (backend_module.hpp)
  // A system library the module's own libraries load at run time; without it the backend
  // cannot run, so the registry checks it before paying for loading the module (cuBLAS alone
  // takes 0.6-1 s to load).
  const char* needs_library;
  const char* needs_what;
};
constexpr ModuleSpec kModules[] = {
    {"cuda", "libtrainplan_backend_cuda.so", "trainplan_backend_register_cuda", "libcuda.so.1", "CUDA driver"},
};

// The outcome of looking for a module backend.
struct Resolved {
  const TrainplanBackendModule* module = nullptr;
  std::string origin;  // the module's path, or "linked into this program"
  std::string why;     // set when module is null
  std::string hint;
};

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

std::string abi_mismatch(const TrainplanBackendModule& m) {
  if (m.abi_version == kTrainplanBackendAbi && std::string_view(m.trainplan_version) == TRAINPLAN_VERSION) return "";
  return fmt::format("was built for backend ABI {} (trainplan {}), this program uses ABI {} (trainplan {})",
                     m.abi_version, m.trainplan_version, kTrainplanBackendAbi, TRAINPLAN_VERSION);
}

// Loaded modules by path: opened once, never closed (backends they made may still be alive).
const TrainplanBackendModule* load_module(const std::string& path, const ModuleSpec& spec, Resolved& out) {
  static std::mutex mutex;
  static std::map<std::string, const TrainplanBackendModule*> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    out.why = fmt::format("cannot load module {}: {}", path, dl_error());
    out.hint = "install the libraries it names (ldd shows them), or use the cpu backend";
    return nullptr;
  }
  using Register = const TrainplanBackendModule* (*)();
  auto reg = reinterpret_cast<Register>(dlsym(handle, spec.entry));
  if (!reg) {
    out.why = fmt::format("module {} has no entry point {}", path, spec.entry);
    out.hint = "the file is not a trainplan backend module; rebuild it";
    return nullptr;
  }
  const TrainplanBackendModule* module = reg();
  if (const std::string bad = abi_mismatch(*module); !bad.empty()) {
    out.why = fmt::format("module {} {}", path, bad);
    out.hint = "use the module built with this trainplan (cmake --build, cmake --install)";
    return nullptr;
  }
  loaded.emplace(path, module);
  return module;
}

Resolved resolve(const ModuleSpec& spec) {
  Resolved out;
  // A program that links the backend itself (the GPU tests, the CUDA benchmarks) exports the
  // entry point: use that copy rather than loading a second one.
  if (void* self = dlsym(RTLD_DEFAULT, spec.entry)) {
    const TrainplanBackendModule* m = reinterpret_cast<const TrainplanBackendModule* (*)()>(self)();
    out.origin = "linked into this program";
    if (const std::string bad = abi_mismatch(*m); !bad.empty()) {
      out.why = "the linked-in backend " + bad;
      return out;
    }
    out.module = m;
    return out;
  }
  std::vector<std::string> dirs = backend_module_search_path();
  std::string path;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(dir) / spec.file, ec)) {
      path = (fs::path(dir) / spec.file).string();
      break;
    }
  }
  if (path.empty()) {
    out.why = fmt::format("module {} not found (looked in: {})", spec.file, dirs.empty() ? "nothing" : join(dirs, ", "));
    out.hint = fmt::format(
        "the module is built when CMake finds the CUDA toolkit; keep it beside the program, in <program "
        "folder>/{} (where cmake --install puts it) or in a folder named by TRAINPLAN_BACKEND_PATH; or use the "
        "cpu backend",
        TRAINPLAN_BACKEND_INSTALL_RELDIR);
    return out;
  }
  out.origin = path;
  // RTLD_NOLOAD first: a driver the process already holds costs nothing to confirm.
  void* needed = dlopen(spec.needs_library, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (!needed) needed = dlopen(spec.needs_library, RTLD_LAZY | RTLD_LOCAL);
  if (!needed) {
    out.why = fmt::format("no {}: {} (module {})", spec.needs_what, dl_error(), path);
    out.hint = "run on a machine with an NVIDIA GPU and its driver, or use the cpu backend";
    return out;
  }
  out.module = load_module(path, spec, out);
  return out;
}

const ModuleSpec* module_spec(std::string_view name) {
  for (const ModuleSpec& s : kModules)
    if (name == s.name) return &s;
  return nullptr;
}

void copy_into(std::string& out, const char* text) { out = text ? text : ""; }

// Empty when the module's backend is usable here, else why not.
std::string probe(const TrainplanBackendModule& m, std::string* hint = nullptr) {
  TrainplanBackendError err{};
  if (m.probe(&err) == 0) return "";
  if (hint) copy_into(*hint, err.hint);
  return err.message;
}

std::unique_ptr<Backend> create(const TrainplanBackendModule& m, int device = -1) {
  TrainplanBackendError err{};
  Backend* backend = device < 0 ? m.create(&err) : m.create_on_device(device, &err);
  if (!backend) throw Error(fmt::format("backend \"{}\": {}", m.name, err.message)).hint(err.hint);
  return std::unique_ptr<Backend>(backend);
}

}  // namespace

std::vector<std::string> backend_module_search_path() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TRAINPLAN_BACKEND_PATH"); env && *env) {
    for (const std::string& d : split(env, ':'))
      if (!d.empty()) dirs.push_back(d);
    return dirs;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return dirs;
  const fs::path dir = exe.parent_path();
  dirs.push_back(dir.string());
  dirs.push_back((dir / TRAINPLAN_BACKEND_INSTALL_RELDIR).lexically_normal().string());
  return dirs;
}

std::vector<BackendInfo> backend_infos() {
  std::vector<BackendInfo> out;
  BackendInfo cpu;
  cpu.name = "cpu";
  cpu.origin = "built in";
  cpu.description = make_cpu_backend()->description();
  out.push_back(std::move(cpu));
  for (const ModuleSpec& spec : kModules) {
    BackendInfo info;
    info.name = spec.name;
    Resolved r = resolve(spec);
    info.origin = r.origin;
    if (r.module) {
      info.build = r.module->build;
      info.why_unavailable = probe(*r.module);
    } else {
      info.why_unavailable = r.why;
    }
    info.available = info.why_unavailable.empty();
    if (info.available) {
      try {
        info.description = create(*r.module)->description();
      } catch (const Error& e) {
        info.available = false;
        info.why_unavailable = e.message();
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"cpu"};
  for (const ModuleSpec& spec : kModules) names.push_back(spec.name);
  return names;
}

namespace {

// The loaded, usable module of a backend; throws Error naming why not.
const TrainplanBackendModule& usable_module(std::string_view name) {
  const ModuleSpec* spec = module_spec(name);
  if (!spec) throw Error(fmt::format("unknown backend \"{}\"", name)).hint(suggestion(name, backend_names()));
  Resolved r = resolve(*spec);
  std::string hint = r.hint;
  std::string why = r.module ? probe(*r.module, &hint) : r.why;
  if (!why.empty())
    throw Error(fmt::format("backend \"{}\" is unavailable: {}", name, why))
        .hint(hint.empty() ? "use the cpu backend, or run on a machine where it is available" : hint);
  return *r.module;
}

}  // namespace

std::unique_ptr<Backend> make_backend(std::string_view name) {
  if (name == "cpu") return make_cpu_backend();
  return create(usable_module(name));
}

std::unique_ptr<Backend> make_backend(std::string_view name, int device) {
  if (name == "cpu") {
    if (device > 0)
      throw Error(fmt::format("the cpu backend has one device (0), not device {}", device))
          .hint("ranks of the cpu backend share the host");
    return make_cpu_backend();
  }
  return create(usable_module(name), device);
}

bool backend_has_device_communicator(std::string_view name) {
  if (name == "cpu") return false;
  try {
    return usable_module(name).create_communicator != nullptr;
  } catch (const Error&) {
    return false;
  }
}

std::unique_ptr<Communicator> make_device_communicator(std::string_view name, Rendezvous& store, int rank, int world,
                                                       Backend& backend, const std::vector<CommGroup>& groups,
                                                       const std::vector<int>& peers, double timeout_s) {
  if (name == "cpu")
    throw Error("the cpu backend has no device collective library")
        .hint("its ranks talk through the in-process or TCP communicator");
  const TrainplanBackendModule& m = usable_module(name);
  if (!m.create_communicator)
    throw Error(fmt::format("backend \"{}\" was built without a collective library ({})", name, m.build))
        .hint("install NCCL (libnccl-dev) and build again, or let the runtime stage collectives through host memory");
  TrainplanBackendError err{};
  Communicator* comm = m.create_communicator(&store, rank, world, &backend, groups.data(), static_cast<int>(groups.size()),
                                             peers.data(), static_cast<int>(peers.size()), timeout_s, &err);
  if (!comm) throw Error(fmt::format("backend \"{}\": {}", name, err.message)).hint(err.hint);
  return std::unique_ptr<Communicator>(comm);
}

int backend_device_count(std::string_view name) {
  if (name == "cpu") return 1;
  try {
    const TrainplanBackendModule& m = usable_module(name);
    return m.device_count ? m.device_count() : 0;
  } catch (const Error&) {
    return 0;
  }
}

json::Json backend_collective_benchmark(std::string_view name, int ranks, int64_t max_bytes) {
  if (name == "cpu")
    throw Error("the cpu backend has no device collective library")
        .hint("trainplan bench --backend cpu times the in-process communicator, or TCP under a launcher");
  const TrainplanBackendModule& m = usable_module(name);
  if (!m.collective_benchmark) throw Error(fmt::format("backend \"{}\" has no collective benchmark", name));
  TrainplanBackendError err{};
  char* text = nullptr;
  if (m.collective_benchmark(ranks, static_cast<long long>(max_bytes), &text, &err) != 0)
    throw Error(fmt::format("backend \"{}\": {}", name, err.message)).hint(err.hint);
  const std::string owned = text ? text : "";
  if (text) m.free_text(text);
  return json::parse_text(owned, fmt::format("the {} module's collective benchmark", name));
}

}  // namespace trainplan::executor
