// A process of a multi-process job (`trainplan execute` and `bench` under mpirun, srun, a
// torchrun-style environment or `trainplan launch`): which ranks it holds and the TCP world it
// talks to the other processes over.
#pragma once

#include <memory>
#include <vector>

#include "trainplan/executor/launch.hpp"
#include "trainplan/executor/tcp_world.hpp"

namespace trainplan::cli {

// This process's part of a multi-process job (empty world: every rank is a thread here).
struct Job {
  executor::LaunchInfo launch;
  std::shared_ptr<executor::Rendezvous> store;
  std::shared_ptr<executor::TcpWorld> world;
  std::vector<int> ranks;
  bool primary() const { return launch.rank == 0; }
};

/// Joins the job the launch environment describes (a world of one process: none) for a plan of
/// `plan_world_size` ranks, world size / processes consecutive ranks per process.
Job join_job(int plan_world_size, double timeout_s);

}  // namespace trainplan::cli
