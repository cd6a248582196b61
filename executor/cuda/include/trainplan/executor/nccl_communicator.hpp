// File: trainplan/executor/nccl_communicator.hpp
//
// The Communicator interface over NCCL, for ranks that each own one GPU (one thread or one
// process per GPU, see nccl_launch.hpp). Communicators of the plan's groups are created on
// first use among the group's members (the first member puts an NCCL unique id in the
// rendezvous store; member i is NCCL rank i, so collective order is the group's order), each
// with its own CUDA stream: an operation waits for the work queued so far on the rank's compute
// stream (a CUDA event, not a host synchronization), runs on the group's stream, and completes
// when its end event has passed, so compute keeps running while communication is in flight.
//
//   run_rank_threads(2, [&](int rank, Rendezvous& store) {
//     std::unique_ptr<Backend> be = make_backend("cuda");                 // GPU `rank`
//     CommGroup world{.id = 0, .ranks = {0, 1}, .name = "world"};
//     NcclOptions o;
//     o.groups = {world};                                                 // created up front
//     auto comm = make_nccl_communicator(store, rank, 2, *be, be->default_stream(), o);
//     comm->all_reduce(world, /*tag=*/1, grads, ReduceOp::sum);
//   });
//
// Fault handling: communicators are non-blocking (ncclConfig_t::blocking = 0); every wait polls
// ncclCommGetAsyncError and the rendezvous for another rank's abort, and a wait longer than
// the timeout (or an NCCL error) aborts this rank's communicators (ncclCommAbort), publishes
// the failure in the store and throws Error naming the operation, the group and the cause, so a
// dead peer ends the job with a message instead of a hang.
//
// Rules NCCL imposes that the in-process communicator does not: the members of a group issue
// its collectives in the same order (tags are not matched); messages between two ranks arrive
// in the order they were sent (tags are checked on arrival and a mismatch is an error); two
// ranks cannot share a GPU (checked when a group is created, naming both ranks): run more
// ranks than GPUs with the in-process communicator instead. Sends are eager (the data is copied
// to a staging buffer when the send starts), as the interface requires.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/nccl_launch.hpp"

namespace trainplan::executor {

struct NcclOptions {
  /// Seconds an operation (or a communicator's creation) may take before the rank aborts.
  double timeout_s = 300;
  /// Groups (e.g. StepProgram::groups) whose communicators are created when the communicator
  /// is: every rank first publishes the ids it owns, then starts all its non-blocking inits,
  /// then waits, so this cannot deadlock. Groups not listed are created at first use, which
  /// waits for every member to use them too: ranks whose first uses form a cycle (each waiting
  /// in a creation the next one has not reached) stop at the timeout, naming the communicator.
  std::vector<CommGroup> groups;
  /// Ranks this rank exchanges messages with (both directions are created up front, as for
  /// `groups`); a ring of eager sends needs its neighbours listed here.
  std::vector<int> peers;
};

/// The NCCL communicator of global rank `rank` of `world_size`, for tensors of `backend` (a
/// CUDA backend) produced and consumed in order on `compute`. The store must be shared by all
/// ranks of the job and outlive the communicator. Throws Error for another backend.
std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous& store, int rank, int world_size, Backend& backend,
                                                     Stream& compute, const NcclOptions& options = {});

/// "2.28.9" (the linked NCCL library).
std::string nccl_version();

}  // namespace trainplan::executor
