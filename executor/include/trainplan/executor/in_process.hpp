// File: trainplan/executor/in_process.hpp
//
// The in-process communicator: every rank is a thread of this process, each with its own
// backend, and collectives move data between their host-accessible tensors (the CPU backend).
// Reductions run in a fixed order: each element is summed in double over the members in
// group order, then rounded once to the tensor's dtype, whatever the order in which the
// ranks arrived, so results are reproducible bit for bit. The last member to arrive does the
// work; sends are eager (copied when they start).
//
//   InProcessWorld world(2, {.timeout_s = 10});
//   std::thread t0([&] { world.communicator(0).all_reduce(g, 1, a0, ReduceOp::sum); });
//   std::thread t1([&] { world.communicator(1).all_reduce(g, 1, a1, ReduceOp::sum); });
//
// A wait longer than `timeout_s` throws Error naming the operation, the group, the tag and the
// ranks that have not arrived (a deadlock fails instead of hanging); abort() wakes everyone.
#pragma once

#include <memory>
#include <vector>

#include "trainplan/executor/communicator.hpp"

namespace trainplan::executor {

namespace detail {
struct InProcessState;  // the rendezvous table (in_process.cpp)
}  // namespace detail

struct InProcessOptions {
  /// Seconds a rank may wait for the others in one operation before it fails as a deadlock.
  double timeout_s = 60;
};

class InProcessWorld final : public CommWorld {
 public:
  explicit InProcessWorld(int world_size, InProcessOptions options = {});
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int world_size() const override;
  /// Every rank: 0 .. world_size-1.
  std::vector<int> local_ranks() const override;
  /// The communicator of `rank` (0 .. world_size-1); use it from that rank's thread.
  Communicator& communicator(int rank) override;
  /// Whether some rank aborted, and its message.
  bool aborted() const override;
  std::string abort_message() const override;

 private:
  std::shared_ptr<detail::InProcessState> state_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace trainplan::executor
