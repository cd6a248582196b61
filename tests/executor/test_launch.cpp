// The launch helpers (launch.hpp): the rendezvous stores (in-process, TCP), the launch
// environment of mpirun / srun / torchrun-style variables, and which ranks a process holds.
#include <atomic>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "test_support.hpp"
#include "trainplan/executor/launch.hpp"

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

TEST_CASE("rendezvous: the in-process store hands values between threads and times out naming the key", "[executor][launch]") {
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

TEST_CASE("rendezvous: the tcp store serves many clients (set, get, overwrite, 1 MiB values, waits)", "[executor][launch]") {
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

TEST_CASE("rendezvous: connecting to a tcp store nobody serves fails within the timeout, naming host:port", "[executor][launch]") {
  int port = 0;
  {
    auto probe = TcpRendezvous::serve("127.0.0.1", 0);  // a port that was free a moment ago
    port = probe->port();
  }
  // A hang would end at CTest's timeout; the message shows the connect gave up by itself.
  REQUIRE_ERROR_CONTAINS(TcpRendezvous::connect("127.0.0.1", port, 0.3),
                         "cannot reach the tcp store at 127.0.0.1:" + std::to_string(port));
}

TEST_CASE("launch: ranks come from mpirun, srun or TRAINPLAN_* variables, the rendezvous from host:port", "[executor][launch]") {
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

TEST_CASE("launch: inconsistent environments are errors with a hint", "[executor][launch]") {
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RANK", "0"}, {"TRAINPLAN_WORLD_SIZE", "4"}})),
                         "4 ranks under env but no rendezvous address");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"RANK", "0"}, {"WORLD_SIZE", "4"}})),
                         "TRAINPLAN_RENDEZVOUS=host:port");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}})),
                         "srun rank 4 is outside the world of 4 ranks");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RANK", "x"}, {"TRAINPLAN_WORLD_SIZE", "2"}})),
                         "TRAINPLAN_RANK=x is not a non-negative integer");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RANK", "0"}})), "TRAINPLAN_WORLD_SIZE is not");
  REQUIRE_ERROR_CONTAINS(detect_launch(fake_env({{"TRAINPLAN_RENDEZVOUS", "nohost"}})), "is not host:port");
}

TEST_CASE("launch: torchrun-style variables (trainplan launch), and mpirun without an address (MPI finds it)",
          "[executor][launch]") {
  const LaunchInfo torch = detect_launch(fake_env({{"RANK", "3"},
                                                   {"WORLD_SIZE", "4"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "2"},
                                                   {"MASTER_ADDR", "10.1.2.3"},
                                                   {"MASTER_PORT", "29500"}}));
  CHECK(torch.launcher == "torchrun");
  CHECK(torch.rank == 3);
  CHECK(torch.world_size == 4);
  CHECK(torch.local_rank == 1);
  CHECK_FALSE(torch.single_node());
  CHECK(torch.describe() == "rank 3 of 4 (local 1 of 2) under torchrun, rendezvous 10.1.2.3:29500");
  // mpirun's own variables win over torchrun's.
  const LaunchInfo both = detect_launch(fake_env(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "8"}}));
  CHECK(both.launcher == "mpirun");
  CHECK(both.world_size == 2);
  CHECK(both.rendezvous_port == 0);  // connect_rendezvous bootstraps through MPI
  CHECK(both.single_node());
}

TEST_CASE("launch: a process holds world / processes consecutive ranks, and an uneven split is refused",
          "[executor][launch]") {
  CHECK(process_ranks(8, 0, 8) == std::vector<int>{0});
  CHECK(process_ranks(8, 1, 4) == std::vector<int>{2, 3});
  CHECK(process_ranks(8, 1, 2) == std::vector<int>{4, 5, 6, 7});
  REQUIRE_ERROR_CONTAINS(process_ranks(8, 0, 3), "the plan has 8 ranks, which do not divide evenly over 3 processes");
  REQUIRE_ERROR_CONTAINS(process_ranks(8, 3, 3), "process 3 of 3 is not a process of the job");
}
