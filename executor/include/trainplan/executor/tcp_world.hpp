// File: trainplan/executor/tcp_world.hpp
//
// The CPU communicator across processes: one process of a job holds some of the plan's ranks
// (threads, each with its own backend), and the processes talk over TCP (a full mesh of
// connections; loopback on one machine). Results are bit for bit those of the in-process
// communicator: every collective is computed by its group's first member (the leader), each
// element reduced in double over the members in group order and rounded once
// (collective_math.hpp), whatever the order in which the members arrived. Sends are eager.
//
//   LaunchInfo me = detect_launch();
//   auto store = connect_rendezvous(me, 300);
//   std::vector<int> process_of_rank = ...;            // e.g. rank r -> r / ranks_per_process
//   auto world = TcpWorld::join(*store, me.rank, process_of_rank, "127.0.0.1");
//   Communicator& comm = world->communicator(rank);    // on that rank's thread; as in-process
//   ...
//   world->close();                                    // orderly end: barrier, then goodbye
//
// Failure without hangs: a process that dies (SIGKILL, crash) closes its connections without
// a goodbye; every other process notices at once (end of stream) and fails every pending and
// later wait with "rank R (process P, pid N on HOST) disconnected ... it died or was killed".
// A rank that fails calls abort(): its message goes to every process. Keepalive probes notice
// a vanished machine within about 25 s, and no wait lasts longer than timeout_s.
//
// Wire format: frames of a fixed header (type, collective kind, reduce op, dtype, source and
// destination rank, group id and member index, root, tag, element count, payload bytes) and a
// payload, in the host's byte order: every process of a job runs on the same architecture.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/launch.hpp"

namespace trainplan::executor {

struct TcpWorldOptions {
  /// Seconds a wait may last before it fails (a deadlock, or a peer that hangs).
  double timeout_s = 60;
  /// Seconds to wait for every process to publish its address and connect.
  double connect_timeout_s = 300;
  /// Prefix of this world's keys in the rendezvous store (several worlds may share one store).
  std::string key_prefix = "tcp_world";
};

namespace detail {
struct TcpWorldState;
}  // namespace detail

class TcpWorld final : public CommWorld {
 public:
  /// Joins the job as process `process`; process_of_rank[r] is the process holding rank r
  /// (every process 0 .. P-1 holds at least one). Publishes "advertise_host:port" in `store`,
  /// connects to every other process and returns when the mesh is complete. Throws Error
  /// naming the process that did not show up within connect_timeout_s.
  static std::unique_ptr<TcpWorld> join(Rendezvous& store, int process, const std::vector<int>& process_of_rank,
                                        const std::string& advertise_host, TcpWorldOptions options = {});
  /// Without close(): the connections drop as if the process died (after the frames already
  /// queued, such as an abort message, have been sent).
  ~TcpWorld() override;
  TcpWorld(const TcpWorld&) = delete;
  TcpWorld& operator=(const TcpWorld&) = delete;

  int world_size() const override;
  std::vector<int> local_ranks() const override;
  Communicator& communicator(int rank) override;
  bool aborted() const override;
  std::string abort_message() const override;

  int process() const;
  int processes() const;
  /// Fails the job from this process (as its first rank's Communicator::abort): every process's
  /// waits throw an Error carrying the job's first failure.
  void abort(const std::string& message);
  /// Orderly end, called by every process: a barrier of all ranks, then a goodbye to every
  /// peer, so that closing the connections is not taken for a crash. Throws Error when the
  /// job failed meanwhile.
  void close();

 private:
  explicit TcpWorld(std::shared_ptr<detail::TcpWorldState> state);
  std::shared_ptr<detail::TcpWorldState> state_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // indexed by global rank; null if not local
};

}  // namespace trainplan::executor
