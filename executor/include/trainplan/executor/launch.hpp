// File: trainplan/executor/launch.hpp
//
// Starting the processes of a job: who am I (process index, process count, local index) and a
// rendezvous, a small key-value store every process shares (addresses of the processes, NCCL
// unique ids). Used by the CPU runtime across processes (tcp_world.hpp) and by NCCL.
//
//   LaunchInfo me = detect_launch();             // from mpirun / srun / torchrun-style variables
//   auto store = connect_rendezvous(me, 300);    // rank 0 serves a TCP store, the others connect
//
// Launchers and the variables read (first match wins):
//   mpirun (OpenMPI)   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   srun (Slurm)       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   env                TRAINPLAN_RANK, TRAINPLAN_WORLD_SIZE, TRAINPLAN_LOCAL_RANK, ..._LOCAL_WORLD_SIZE
//   torchrun           RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (`trainplan launch` sets these)
// The store is a TCP server on process 0 at TRAINPLAN_RENDEZVOUS=host:port, or MASTER_ADDR and
// MASTER_PORT. Under mpirun without either, the processes find it through MPI itself (process
// 0 serves on a free port and broadcasts its address with MPI_Bcast) when trainplan was built
// with MPI; the other launchers need the address.
//
//   export MASTER_ADDR=node0 MASTER_PORT=29500
//   mpirun -np 16 -H node0:8,node1:8 trainplan execute plan.json   # or srun, or trainplan launch
//
// "Rank" here is a launcher's process index; a process may hold several ranks of a plan
// (process_ranks).
//
// Errors: a get() that times out names the key, the store and the timeout; a TCP client that
// cannot reach the server within the timeout names host:port.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trainplan::executor {

/// A key-value store shared by the processes (or rank threads) of one job. Thread-safe.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  /// Sets (or overwrites) a key; values are arbitrary bytes.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value of `key`, waiting up to `timeout_s` seconds for some rank to set it.
  virtual std::string get(const std::string& key, double timeout_s) = 0;
  /// The value if it is set now.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  /// "in-process store", "tcp store at node0:29500".
  virtual std::string describe() const = 0;
  /// The address of this machine as the other processes reach it ("" when unknown): a TCP
  /// client's local address on its connection to the store.
  virtual std::string local_address() const { return ""; }
};

/// A store in this process's memory (ranks as threads).
std::shared_ptr<Rendezvous> make_in_process_rendezvous();

/// The TCP store: `serve` listens on host:port (port 0: a free port, see port()) and answers
/// clients until destroyed; its own set/get work on its table directly. `connect` is a
/// client, retrying until the server accepts or `timeout_s` passes.
class TcpRendezvous final : public Rendezvous {
 public:
  static std::unique_ptr<TcpRendezvous> serve(const std::string& host, int port);
  static std::unique_ptr<TcpRendezvous> connect(const std::string& host, int port, double timeout_s);
  ~TcpRendezvous() override;
  TcpRendezvous(const TcpRendezvous&) = delete;
  TcpRendezvous& operator=(const TcpRendezvous&) = delete;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, double timeout_s) override;
  std::optional<std::string> try_get(const std::string& key) override;
  std::string describe() const override;
  std::string local_address() const override;
  /// The port served or connected to.
  int port() const;

  struct Impl;

 private:
  explicit TcpRendezvous(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Where this process sits in the job.
struct LaunchInfo {
  int rank = 0;              // process index
  int world_size = 1;        // processes
  int local_rank = 0;        // index among the processes of this node: its GPU
  int local_world_size = 1;
  std::string launcher;      // "single", "mpirun", "srun", "env", "torchrun"
  std::string rendezvous_host;
  int rendezvous_port = 0;   // 0: not given (one process needs none; mpirun finds it through MPI)
  /// "rank 3 of 16 (local 3 of 8) under mpirun, rendezvous node0:29500".
  std::string describe() const;
  /// Every process of the job runs on this node (the local world is the world).
  bool single_node() const { return local_world_size == world_size; }
};

/// The launch from environment variables (see the file comment), looked up through `env`
/// (std::getenv by default). Throws Error when the variables are inconsistent (rank outside
/// the world, a multi-process job without a rendezvous address outside mpirun).
LaunchInfo detect_launch(const std::function<const char*(const char*)>& env = {});

/// The job's store: process 0 serves on the rendezvous port, the others connect (waiting up
/// to timeout_s for the server). A single process gets an in-process store. Under mpirun
/// without an address, MPI carries process 0's address (mpi_bootstrap); without MPI compiled
/// in that is an Error with a hint.
std::shared_ptr<Rendezvous> connect_rendezvous(const LaunchInfo& launch, double timeout_s);

/// The address process 0 serves the store on when nobody gave one: 127.0.0.1 when the job
/// runs on one node, else this machine's first non-loopback IPv4 address (or its host name).
std::string default_rendezvous_host(const LaunchInfo& launch);

/// Whether this build can bootstrap through MPI (CMake found MPI).
bool mpi_available();
/// MPI bootstrap: MPI_Init, then `launch` with process 0's TCP store address broadcast to
/// every process (process 0 starts serving it here and keeps it in `store`). Errors when MPI
/// is not compiled in.
LaunchInfo mpi_bootstrap(const LaunchInfo& launch, std::shared_ptr<Rendezvous>& store);
/// MPI_Finalize when mpi_bootstrap initialized MPI (call after a successful run only: it
/// waits for every process).
void mpi_finalize();

/// The plan ranks process `process` of `processes` holds: world_size / processes consecutive
/// ranks. Throws Error when the plan's ranks do not divide evenly over the processes.
std::vector<int> process_ranks(int world_size, int process, int processes);

}  // namespace trainplan::executor
