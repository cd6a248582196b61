// File: trainplan/executor/communicator.hpp
//
// The communicator interface: collectives on process groups (the tp, pp and dp groups of a
// plan) and point-to-point messages between ranks, asynchronous like NCCL's: a call starts the
// operation and returns a request; the tensors involved must stay alive and untouched until
// the request has completed. One Communicator object belongs to one rank.
//
// Implementations: the in-process communicator (ranks as threads of one process, with a fixed
// reduction order, so results are reproducible bit for bit; see in_process.hpp), the
// multi-process one over TCP with the same order (tcp_world.hpp), and NCCL
// (nccl_communicator.hpp). A CommWorld hands out the communicators of the ranks a process holds.
//
//   InProcessWorld world(4, {.timeout_s = 30});
//   // on the thread of rank r:
//   Communicator& comm = world.communicator(r);
//   CommGroup dp{.id = 0, .ranks = {0, 1, 2, 3}, .name = "dp"};
//   comm.all_reduce(dp, /*tag=*/7, grads, ReduceOp::sum);            // blocking helper
//   auto req = comm.start_all_gather(dp, /*tag=*/8, gathered, shard);  // asynchronous
//   ... other work ...
//   req->wait();
//
// Matching: every member of a collective passes the same group and the same `tag`; a send and
// its recv pass the same tag (and each other's rank). A tag is used once per run and group
// (the runtime builds it from the step and the program's comm_id).
// Errors (trainplan::Error): a member that does not arrive within the timeout (the message
// names the group, the tag and the ranks that have not arrived), members that disagree on the
// operation or the sizes, and any rank that aborted the world (its message is passed on), so a
// deadlock fails a test instead of hanging it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainplan/executor/tensor.hpp"

namespace trainplan::executor {

enum class ReduceOp { sum, max };
/// "sum", "max".
std::string_view reduce_op_name(ReduceOp op);

/// A set of ranks that communicate together, in collective order: member i contributes chunk
/// i of a reduce-scatter's input and receives chunk i of an all-gather's output.
struct CommGroup {
  int id = -1;              // unique per group (the StepProgram's group index, or a runtime id)
  std::vector<int> ranks;   // global ranks, in collective order
  std::string name;         // for messages: "tp", "dp", "pp", "world"

  int size() const { return static_cast<int>(ranks.size()); }
  /// Position of `rank` in the group; -1 when it is not a member.
  int index_of(int rank) const;
  /// "dp group 3 (ranks 0,2,4,6)".
  std::string describe() const;
};

/// A started communication. Completion is observed with test() or wait(); both throw the
/// communicator's errors (timeout, mismatch, aborted world).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  /// True once this rank's part has completed (its output tensors hold the result).
  virtual bool test() = 0;
  /// Blocks until completion or the communicator's timeout (then throws Error).
  virtual void wait() = 0;
  /// Host monotonic time (Backend::now_s()) at which the operation completed; valid after
  /// test() returned true or wait() returned.
  virtual double completed_at_s() const = 0;
  /// "all_reduce tag 12 on tp group 1 (ranks 0,1)", for messages.
  virtual std::string describe() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This rank's global index and the number of ranks.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Seconds a wait may last before it fails as a deadlock.
  virtual double timeout_s() const = 0;

  /// data (any shape, floating) <- op over the members' data, elementwise; the same on every
  /// member (sum: in group order, in double).
  virtual std::shared_ptr<CommRequest> start_all_reduce(const CommGroup& group, int64_t tag, const Tensor& data,
                                                        ReduceOp op) = 0;
  /// out (k elements) <- op over the members' chunk i of in (n * k elements, member i's
  /// chunk is elements [i k, (i + 1) k)), on member i. out must not overlap in.
  virtual std::shared_ptr<CommRequest> start_reduce_scatter(const CommGroup& group, int64_t tag, const Tensor& out,
                                                            const Tensor& in, ReduceOp op) = 0;
  /// out (n * k elements) <- the members' in (k elements each), member i's at [i k, (i+1) k).
  virtual std::shared_ptr<CommRequest> start_all_gather(const CommGroup& group, int64_t tag, const Tensor& out,
                                                        const Tensor& in) = 0;
  /// data <- the data of global rank `root` on every member.
  virtual std::shared_ptr<CommRequest> start_broadcast(const CommGroup& group, int64_t tag, const Tensor& data,
                                                       int root) = 0;
  /// On global rank `root`: data <- op over the members' data; other members' data is left
  /// as it was.
  virtual std::shared_ptr<CommRequest> start_reduce(const CommGroup& group, int64_t tag, const Tensor& data,
                                                    ReduceOp op, int root) = 0;
  /// Completes on every member once all have entered it.
  virtual std::shared_ptr<CommRequest> start_barrier(const CommGroup& group, int64_t tag) = 0;
  /// Sends data to global rank `peer`. The data is copied when the send starts (an eager,
  /// buffered send), so the send completes without waiting for the receiver.
  virtual std::shared_ptr<CommRequest> start_send(int peer, int64_t tag, const Tensor& data) = 0;
  /// data <- the data of the send from global rank `peer` with this tag (equal size).
  virtual std::shared_ptr<CommRequest> start_recv(int peer, int64_t tag, const Tensor& data) = 0;

  /// All-to-all with per-pair counts (MoE dispatch and combine over the expert-parallel group):
  /// member i sends elements [sum of in_counts[0..j), + in_counts[j]) of `in` to member j and
  /// receives out_counts[j] elements from member j into `out`, placed in member order. Counts
  /// are elements (group size each); they must agree pairwise (member i's in_counts[j] is
  /// member j's out_counts[i]), else the receiving member fails naming both sizes. Pure data
  /// movement: the same bits whatever the order of arrival. out must not overlap in.
  /// The default sends and receives each chunk with start_send / start_recv under `tag` and
  /// copies the member's own chunk on the host (host-accessible tensors: the in-process and
  /// TCP communicators); the staging communicator stages device tensors through it. Its
  /// request is a composite: wait on it (or test it), it cannot be passed to wait_any.
  virtual std::shared_ptr<CommRequest> start_all_to_all_v(const CommGroup& group, int64_t tag, const Tensor& out,
                                                          std::span<const int64_t> out_counts, const Tensor& in,
                                                          std::span<const int64_t> in_counts);

  /// Blocks until one of `requests` has completed (true), or `timeout_s` has passed or the
  /// world was aborted (false / Error). Lets a rank wait for "any communication" while its
  /// streams are blocked.
  virtual bool wait_any(std::span<const std::shared_ptr<CommRequest>> requests, double timeout_s) = 0;
  /// Fails the whole world: every rank's pending and later waits throw an Error that carries
  /// `message`. A rank calls it when it cannot go on, so the others do not wait until their
  /// timeout.
  virtual void abort(const std::string& message) = 0;

  // Blocking helpers: start, then wait.
  void all_reduce(const CommGroup& group, int64_t tag, const Tensor& data, ReduceOp op) {
    start_all_reduce(group, tag, data, op)->wait();
  }
  void reduce_scatter(const CommGroup& group, int64_t tag, const Tensor& out, const Tensor& in, ReduceOp op) {
    start_reduce_scatter(group, tag, out, in, op)->wait();
  }
  void all_gather(const CommGroup& group, int64_t tag, const Tensor& out, const Tensor& in) {
    start_all_gather(group, tag, out, in)->wait();
  }
  void broadcast(const CommGroup& group, int64_t tag, const Tensor& data, int root) {
    start_broadcast(group, tag, data, root)->wait();
  }
  void reduce(const CommGroup& group, int64_t tag, const Tensor& data, ReduceOp op, int root) {
    start_reduce(group, tag, data, op, root)->wait();
  }
  void barrier(const CommGroup& group, int64_t tag) { start_barrier(group, tag)->wait(); }
  void all_to_all_v(const CommGroup& group, int64_t tag, const Tensor& out, std::span<const int64_t> out_counts,
                    const Tensor& in, std::span<const int64_t> in_counts) {
    start_all_to_all_v(group, tag, out, out_counts, in, in_counts)->wait();
  }

  void send(int peer, int64_t tag, const Tensor& data) { start_send(peer, tag, data)->wait(); }
  void recv(int peer, int64_t tag, const Tensor& data) { start_recv(peer, tag, data)->wait(); }
};

/// The communicators of the ranks this process holds: all of them (InProcessWorld) or a part
/// (TcpWorld, one process of a job).
class CommWorld {
 public:
  virtual ~CommWorld() = default;
  /// Ranks of the whole job.
  virtual int world_size() const = 0;
  /// The global ranks this process holds, ascending.
  virtual std::vector<int> local_ranks() const = 0;
  /// The communicator of local rank `rank`; use it from that rank's thread.
  virtual Communicator& communicator(int rank) = 0;
  /// Whether some rank (here or in another process) aborted the job, and its message.
  virtual bool aborted() const = 0;
  virtual std::string abort_message() const = 0;
};

}  // namespace trainplan::executor
