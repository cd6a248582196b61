// MPI bootstrap (launch.hpp): under mpirun without a rendezvous address, MPI carries process
// 0's TCP store address to every process. MPI is used for nothing else: the communicator and
// the store are TCP, so the same code runs under srun, torchrun-style variables and
// `trainplan launch`. Compiled with MPI only when CMake found it (TRAINPLAN_HAVE_MPI).
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/executor/launch.hpp"

#if TRAINPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace trainplan::executor {

#if TRAINPLAN_HAVE_MPI

namespace {
bool g_initialized = false;
}  // namespace

bool mpi_available() { return true; }

LaunchInfo mpi_bootstrap(const LaunchInfo& launch, std::shared_ptr<Rendezvous>& store) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw Error("launch: MPI_Init failed");
    g_initialized = true;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != launch.rank || size != launch.world_size)
    throw Error(fmt::format("launch: MPI says rank {} of {}, the environment {}", rank, size, launch.describe()));
  LaunchInfo out = launch;
  std::array<char, 256> address{};
  std::unique_ptr<TcpRendezvous> server;
  if (rank == 0) {
    out.rendezvous_host = default_rendezvous_host(launch);
    server = TcpRendezvous::serve(out.rendezvous_host, 0);
    out.rendezvous_port = server->port();
    const std::string text = fmt::format("{}:{}", out.rendezvous_host, out.rendezvous_port);
    std::memcpy(address.data(), text.data(), std::min(text.size(), address.size() - 1));
  }
  if (MPI_Bcast(address.data(), static_cast<int>(address.size()), MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    throw Error("launch: MPI_Bcast of the rendezvous address failed");
  if (rank == 0) {
    store = std::move(server);
    return out;
  }
  const std::string text(address.data());
  const size_t colon = text.rfind(':');
  out.rendezvous_host = text.substr(0, colon);
  out.rendezvous_port = std::stoi(text.substr(colon + 1));
  store = TcpRendezvous::connect(out.rendezvous_host, out.rendezvous_port, 300);
  return out;
}

void mpi_finalize() {
  if (!g_initialized) return;
  g_initialized = false;
  MPI_Finalize();
}

#else

bool mpi_available() { return false; }

LaunchInfo mpi_bootstrap(const LaunchInfo& launch, std::shared_ptr<Rendezvous>&) {
  throw Error(fmt::format("launch: {} needs MPI to find the rendezvous, and this trainplan was built without MPI",
                          launch.describe()))
      .hint("set MASTER_ADDR and MASTER_PORT for every process, or build with libopenmpi-dev installed");
}

void mpi_finalize() {}

#endif

}  // namespace trainplan::executor
