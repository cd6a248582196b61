// Host-only parts of the CUDA backend's library, tagged [host]: they need no GPU and run in
// every CI build (`trainplan_tests_executor_gpu --host-only`). One thread per GPU, the check
// macros' error text, the registry on a machine without a GPU. (The rendezvous stores and the
// launch environment are the CPU executor's: tests/executor/test_launch.cpp.)
#include <atomic>
#include <thread>

#include <cublas_api.h>
#include <fmt/format.h>

#include "check.hpp"
#include "gpu_test_util.hpp"
#include "trainplan/executor/nccl_launch.hpp"

using namespace trainplan;
using namespace trainplan::executor;


TEST_CASE("launch: one thread per rank, errors rethrown after all threads ended", "[host]") {
  std::atomic<int> ran{0};
  run_rank_threads(3, [&](int rank, Rendezvous& store) {
    store.set(fmt::format("r{}", rank), "x");
    for (int r = 0; r < 3; ++r) store.get(fmt::format("r{}", r), 10);
    ++ran;
  });
  CHECK(ran == 3);
  REQUIRE_ERROR_CONTAINS(run_rank_threads(2,
                                          [](int rank, Rendezvous&) {
                                            if (rank == 1) throw Error("rank 1 broke");
                                          }),
                         "rank 1 broke");
}

TEST_CASE("cuda: check macros throw the project error with the call text, file:line and the library's message",
          "[host]") {
  const int line = __LINE__ + 2;
  try {
    TP_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL("no error thrown");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("cuda: cudaErrorInvalidValue failed at") != std::string::npos);
    CHECK(what.find("test_host.cpp:" + std::to_string(line)) != std::string::npos);
    CHECK(what.find("cudaErrorInvalidValue: invalid argument") != std::string::npos);
  }
  auto cublas_fails = [] { TP_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED); };
  REQUIRE_ERROR_CONTAINS(cublas_fails(), "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST_CASE("cuda: the registry uses the backend linked into this program and says why it is unavailable without a GPU",
          "[host]") {
  const std::vector<std::string> names = backend_names();
  REQUIRE(std::find(names.begin(), names.end(), "cuda") != names.end());
  for (const BackendInfo& info : backend_infos()) {
    if (info.name != "cuda") continue;
    CHECK(info.origin == "linked into this program");
    CHECK(info.build.find("CUDA ") == 0);
    CHECK(info.available == (cuda_device_count() > 0));
    if (!info.available) {
      CHECK(info.why_unavailable.find("no CUDA device") != std::string::npos);
      REQUIRE_ERROR_CONTAINS(make_backend("cuda"), "backend \"cuda\" is unavailable: no CUDA device");
    }
  }
}
