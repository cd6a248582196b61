// File: trainplan/executor/nccl_launch.hpp
//
// Starting the ranks of a job for the NCCL communicator: who am I (rank, world size, local
// rank) and a rendezvous, a small key-value store all ranks share to exchange NCCL unique ids
// and device identities.
//
// - One process, one thread per GPU:    run_rank_threads(4, [](int rank, Rendezvous& store) {...});
//   (each thread's current device is rank % GPUs; the store is in memory).
// - One process per GPU, any launcher:  LaunchInfo me = detect_launch();
//                                       auto store = connect_rendezvous(me, 300);
//   Under mpirun (OpenMPI), srun (Slurm) or plain environment variables the rank comes from
//   OMPI_COMM_WORLD_RANK / SLURM_PROCID / TRAINPLAN_RANK (and the matching sizes and local
//   ranks); the store is a TCP server on rank 0 at TRAINPLAN_RENDEZVOUS=host:port (or
//   MASTER_ADDR and MASTER_PORT). No MPI library is needed: mpirun / srun only start the
//   processes, the TCP store exchanges the ids, so the same binary runs where MPI is missing.
//
//   export TRAINPLAN_RENDEZVOUS=node0:29500
//   mpirun -np 16 -H node0:8,node1:8 ./trainer      # or: srun -N2 --ntasks-per-node=8 ./trainer
//
// Errors: a get() that times out names the key, the store and the timeout; a TCP client that
// cannot reach the server within the timeout names host:port.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace trainplan::executor {

/// A key-value store shared by the ranks of one job. Thread-safe.
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
  /// The port served or connected to.
  int port() const;

  struct Impl;

 private:
  explicit TcpRendezvous(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Where this process sits in the job.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index among the ranks of this node: its GPU
  int local_world_size = 1;
  std::string launcher;      // "single", "mpirun", "srun", "env"
  std::string rendezvous_host;
  int rendezvous_port = 0;   // 0: not given (a single rank needs none)
  /// "rank 3 of 16 (local 3 of 8) under mpirun, rendezvous node0:29500".
  std::string describe() const;
};

/// The launch from environment variables (see the file comment), looked up through `env`
/// (std::getenv by default). Throws Error when the variables are inconsistent (rank outside
/// the world, a multi-rank job without a rendezvous address).
LaunchInfo detect_launch(const std::function<const char*(const char*)>& env = {});

/// The job's store: rank 0 serves on the rendezvous port, the others connect (waiting up to
/// timeout_s for the server). A single-rank job gets an in-process store.
std::shared_ptr<Rendezvous> connect_rendezvous(const LaunchInfo& launch, double timeout_s);

/// Runs fn(rank, store) on `world_size` threads of this process sharing one in-process
/// store; on each thread the current CUDA device is rank % (visible GPUs) (none is set when
/// there is no GPU). Returns when all threads have finished; rethrows the first error (the
/// others keep running to their end, so fn must not wait forever for a failed rank: the NCCL
/// communicator's timeout and abort see to that).
void run_rank_threads(int world_size, const std::function<void(int rank, Rendezvous& store)>& fn);

}  // namespace trainplan::executor
