// Host-only parts of the CUDA backend's library, tagged [host]: they need no GPU and run in
// every CI build (`trainplan_tests_executor_gpu --host-only`). The rendezvous stores, the
// launch environment, the check macros' error text, the registry on a machine without a GPU.
#include <atomic>
#include <map>
#include <thread>

#include <cublas_api.h>
#include <fmt/format.h>

#include "check.hpp"
#include "gpu_test_util.hpp"
#include "trainplan/executor/nccl_launch.hpp"

using namespace trainplan;
using namespace trainplan::executor;

namespace {

// An environment made of a map, for detect_launch.
std::function<const char*(const char*)> fake_env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("rendezvous: the in-process store hands values between threads and times out naming the key", "[host]") {
  auto store = make_in_process_rendezvous();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store->set("nccl/id", std::string("\0\1\2binary", 9));
  });
  CHECK(store->get("nccl/id", 10) == std::string("\0\1\2binary", 9));
  writer.join();
  CHECK(store->try_get("absent") == std::nullopt);
  REQUIRE_ERROR_CONTAINS(store->get("absent", 0.05), "key \"absent\" was not set within 0.05 s in the in-process store");
}

TEST_CASE("rendezvous: the tcp store serves many clients (set, get, overwrite, 1 MiB values, waits)", "[host]") {
  auto server = TcpRendezvous::serve("127.0.0.1", 0);
  const int port = server->port();
  REQUIRE(port > 0);
  constexpr int kClients = 6;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      auto client = TcpRendezvous::connect("127.0.0.1", port, 10);
      client->set("rank/" + std::to_string(c), "gpu " + std::to_string(c));
      // Each waits for its neighbour's key, set by another client at about the same time.
      const std::string next = client->get("rank/" + std::to_string((c + 1) % kClients), 10);
      if (next == "gpu " + std::to_string((c + 1) % kClients)) ++ok;
    });
  for (auto& t : clients) t.join();
  CHECK(ok == kClients);
  auto client = TcpRendezvous::connect("localhost", port, 10);
  const std::string big(1 << 20, 'x');
  client->set("big", big);
  CHECK(server->get("big", 1) == big);
  server->set("k", "v1");
  server->set("k", "v2");
  CHECK(client->get("k", 1) == "v2");
  CHECK(client->try_get("nothing") == std::nullopt);
  REQUIRE_ERROR_CONTAINS(client->get("nothing", 0.1), "was not set within 0.1 s in the tcp store at localhost:");
  CHECK(client->describe().find(std::to_string(port)) != std::string::npos);
}

TEST_CASE("rendezvous: connecting to a tcp store nobody serves fails within the timeout, naming host:port", "[host]") {
  int port = 0;
  {
    auto probe = TcpRendezvous::serve("127.0.0.1", 0);  // a port that was free a moment ago
    port = probe->port();
  }
  REQUIRE_ERROR_CONTAINS(TcpRendezvous::connect("127.0.0.1", port, 0.3),
                         "cannot reach the tcp store at 127.0.0.1:" + std::to_string(port));
}

TEST_CASE("launch: ranks come from mpirun, srun or TRAINPLAN_* variables, the rendezvous from host:port", "[host]") {
  const LaunchInfo single = detect_launch(fake_env({}));
  CHECK(single.launcher == "single");
  CHECK(single.world_size == 1);
  CHECK(single.rank == 0);

  const LaunchInfo mpi = detect_launch(fake_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                                 {"OMPI_COMM_WORLD_SIZE", "16"},
                                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "5"},
                                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                                                 {"TRAINPLAN_RENDEZVOUS", "node0:29500"}}));
  CHECK(mpi.launcher == "mpirun");
  CHECK(mpi.rank == 5);
  CHECK(mpi.world_size == 16);
  CHECK(mpi.local_rank == 5);
  CHECK(mpi.local_world_size == 8);
  CHECK(mpi.rendezvous_host == "node0");
  CHECK(mpi.rendezvous_port == 29500);
  CHECK(mpi.describe() == "rank 5 of 16 (local 5 of 8) under mpirun, rendezvous node0:29500");

  const LaunchInfo slurm = detect_launch(fake_env(
      {{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}, {"MASTER_ADDR", "10.0.0.7"},
       {"MASTER_PORT", "6000"}}));
  CHECK(slurm.launcher == "srun");
  CHECK(slurm.rank == 9);
  CHECK(slurm.local_rank == 1);
  CHECK(slurm.rendezvous_host == "10.0.0.7");
  CHECK(slurm.rendezvous_port == 6000);

  const LaunchInfo env = detect_launch(
      fake_env({{"TRAINPLAN_RANK", "1"}, {"TRAINPLAN_WORLD_SIZE", "2"}, {"TRAINPLAN_RENDEZVOUS", "[::1]:7"}}));
  CHECK(env.launcher == "env");
  CHECK(env.local_rank == 1);
  CHECK(env.rendezvous_host == "[::1]");
  CHECK(env.rendezvous_port == 7);
}

TEST_CASE("launch: inconsistent environments are errors with a hint", "[host]") {
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}})),
                         "4 ranks under mpirun but no rendezvous address");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}})),
                         "TRAINPLAN_RENDEZVOUS=host:port");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}})),
                         "srun rank 4 is outside the world of 4 ranks");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RANK", "x"}, {"TRAINPLAN_WORLD_SIZE", "2"}})),
                         "TRAINPLAN_RANK=x is not a non-negative integer");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RANK", "0"}})), "TRAINPLAN_WORLD_SIZE is not");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RENDEZVOUS", "nohost"}})), "is not host:port");
}

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
