// File: trainplan/executor/nccl_launch.hpp
//
// Starting the ranks of a job for the NCCL communicator. The rendezvous stores and the launch
// environment (mpirun / srun / torchrun-style variables) are in launch.hpp; this adds one
// process with a thread per GPU:
//
//   run_rank_threads(4, [](int rank, Rendezvous& store) {...});
//   (each thread's current device is rank % GPUs; the store is in memory).
#pragma once

#include <functional>

#include "trainplan/executor/launch.hpp"

namespace trainplan::executor {

/// Runs fn(rank, store) on `world_size` threads of this process sharing one in-process
/// store; on each thread the current CUDA device is rank % (visible GPUs) (none is set when
/// there is no GPU). Returns when all threads have finished; rethrows the first error (the
/// others keep running to their end, so fn must not wait forever for a failed rank: the NCCL
/// communicator's timeout and abort see to that).
void run_rank_threads(int world_size, const std::function<void(int rank, Rendezvous& store)>& fn);

}  // namespace trainplan::executor
