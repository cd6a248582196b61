// The backend registry's module loading: where modules are looked for, what it says when one
// is missing or unusable, and that nothing but a device backend loads a CUDA library.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "executor_test_util.hpp"

using namespace trainplan;
using namespace trainplan::executor;
namespace fs = std::filesystem;

namespace {

// Sets TRAINPLAN_BACKEND_PATH for the lifetime of the object.
class BackendPath {
 public:
  explicit BackendPath(const std::string& value) {
    if (const char* old = std::getenv("TRAINPLAN_BACKEND_PATH")) old_ = old;
    setenv("TRAINPLAN_BACKEND_PATH", value.c_str(), 1);
  }
  ~BackendPath() {
    if (old_)
      setenv("TRAINPLAN_BACKEND_PATH", old_->c_str(), 1);
    else
      unsetenv("TRAINPLAN_BACKEND_PATH");
  }
  BackendPath(const BackendPath&) = delete;
  BackendPath& operator=(const BackendPath&) = delete;

 private:
  std::optional<std::string> old_;
};

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(TRAINPLAN_BINARY_DIR) / "tests" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

BackendInfo info_of(const std::string& name) {
  for (const BackendInfo& b : backend_infos())
    if (b.name == name) return b;
  FAIL("no backend " << name);
  return {};
}

// The shared libraries mapped into this process, from /proc/self/maps.
std::string mapped_files() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("registry: a backend module that is not on the search path is reported with the folders searched",
          "[executor]") {
  const fs::path empty = fresh_dir("registry-empty");
  BackendPath path(empty.string() + ":" + (empty / "missing").string());
  CHECK(backend_module_search_path() == std::vector<std::string>{empty.string(), (empty / "missing").string()});
  const BackendInfo cuda = info_of("cuda");
  CHECK_FALSE(cuda.available);
  CHECK(cuda.origin.empty());
  CHECK(cuda.why_unavailable == "module libtrainplan_backend_cuda.so not found (looked in: " + empty.string() + ", " +
                                    (empty / "missing").string() + ")");
  REQUIRE_ERROR_CONTAINS(make_backend("cuda"), "backend \"cuda\" is unavailable: module libtrainplan_backend_cuda.so not found");
  REQUIRE_ERROR_CONTAINS(make_backend("cuda"), "TRAINPLAN_BACKEND_PATH");
}

TEST_CASE("registry: a module file that cannot run here says why (no driver, or the dlopen error)", "[executor]") {
  const fs::path dir = fresh_dir("registry-not-a-module");
  std::ofstream(dir / "libtrainplan_backend_cuda.so") << "not an ELF file\n";
  BackendPath path(dir.string());
  // Without the CUDA driver the registry stops before loading the module (cuBLAS alone takes
  // most of a second to load); with it, dlopen refuses the file.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  const BackendInfo cuda = info_of("cuda");
  CHECK_FALSE(cuda.available);
  CHECK(cuda.origin == (dir / "libtrainplan_backend_cuda.so").string());
  if (driver) {
    CHECK(cuda.why_unavailable.find("cannot load module " + cuda.origin + ": ") == 0);
    CHECK(cuda.why_unavailable.find("invalid ELF header") != std::string::npos);
  } else {
    CHECK(cuda.why_unavailable ==
          "no CUDA driver: libcuda.so.1: cannot open shared object file: No such file or directory (module " +
              cuda.origin + ")");
    REQUIRE_ERROR_CONTAINS(make_backend("cuda"), "run on a machine with an NVIDIA GPU and its driver, or use the cpu backend");
  }
}

TEST_CASE("registry: without TRAINPLAN_BACKEND_PATH modules are looked for beside the program and in ../lib/trainplan",
          "[executor]") {
  std::optional<std::string> old;
  if (const char* v = std::getenv("TRAINPLAN_BACKEND_PATH")) old = v;
  unsetenv("TRAINPLAN_BACKEND_PATH");
  const std::vector<std::string> dirs = backend_module_search_path();
  if (old) setenv("TRAINPLAN_BACKEND_PATH", old->c_str(), 1);
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe").parent_path();
  REQUIRE(dirs.size() == 2);
  CHECK(dirs[0] == exe_dir.string());
  CHECK(dirs[1] == (exe_dir.parent_path() / "lib" / "trainplan").string());
}

TEST_CASE("registry: the cpu backend, the runtime and the registry's listing load no CUDA library", "[executor]") {
  const fs::path empty = fresh_dir("registry-no-cuda");
  BackendPath path(empty.string());
  CHECK(backend_names() == std::vector<std::string>{"cpu", "cuda"});
  (void)backend_infos();
  std::unique_ptr<Backend> be = make_backend("cpu");
  Tensor t = be->empty(DType::f32, {4, 4});
  be->fill(be->default_stream(), t, 1.0);
  CHECK(be->download_values(be->default_stream(), t) == std::vector<double>(16, 1.0));
  const std::string maps = mapped_files();
  for (const char* lib : {"libcuda.so", "libcudart", "libcublas", "libnccl"}) {
    INFO(lib);
    CHECK(maps.find(lib) == std::string::npos);
  }
}

TEST_CASE("registry: device counts and the device collective benchmark, asked of backends that have none", "[executor]") {
  const fs::path empty = fresh_dir("registry-collectives");
  BackendPath path(empty.string());
  CHECK(backend_device_count("cpu") == 1);
  CHECK(backend_device_count("cuda") == 0);  // no module on the path: nothing to count
  CHECK(backend_device_count("nonesuch") == 0);
  REQUIRE_ERROR_CONTAINS(backend_collective_benchmark("cpu", 2, 1 << 20), "no device collective library");
  REQUIRE_ERROR_CONTAINS(backend_collective_benchmark("cuda", 2, 1 << 20), "unavailable");
  REQUIRE_ERROR_CONTAINS(backend_collective_benchmark("cudaa", 2, 1 << 20), "unknown backend");
}

TEST_CASE("registry: devices and device communicators, asked of the cpu backend and a missing module", "[executor]") {
  const fs::path empty = fresh_dir("registry-device-comm");
  BackendPath path(empty.string());
  CHECK(make_backend("cpu", 0)->name() == "cpu");
  CHECK(make_backend("cpu", -1)->name() == "cpu");
  REQUIRE_ERROR_CONTAINS(make_backend("cpu", 1), "the cpu backend has one device (0)");
  REQUIRE_ERROR_CONTAINS(make_backend("cuda", 0), "unavailable");
  CHECK_FALSE(backend_has_device_communicator("cpu"));
  CHECK_FALSE(backend_has_device_communicator("cuda"));  // no module on the path
  auto store = make_in_process_rendezvous();
  auto cpu = make_backend("cpu");
  REQUIRE_ERROR_CONTAINS(make_device_communicator("cpu", *store, 0, 1, *cpu, {}, {}, 5), "no device collective library");
  REQUIRE_ERROR_CONTAINS(make_device_communicator("cuda", *store, 0, 1, *cpu, {}, {}, 5), "unavailable");
}
