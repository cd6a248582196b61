// What a collective computes, shared by the in-process communicator (ranks as threads) and
// the multi-process one (tcp_world.cpp), so both give the same bits: each element is reduced
// in double over the members in group order, then rounded once to the tensor's dtype,
// whatever the order in which the members arrived. Also the argument checks both share.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/tensor.hpp"

namespace trainplan::executor::comm {

enum class CollKind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier };
std::string_view coll_name(CollKind kind);
/// "0,1,3".
std::string ranks_text(const std::vector<int>& ranks);

/// The data movement of a collective whose n members have all arrived. ins[m] is member m's
/// input (`in_numel` elements of `dtype`; for a broadcast only the root's is read), outs[m]
/// its output or nullptr when it receives nothing (reduce: every member but the root;
/// broadcast: the root; barrier: all). all_reduce and reduce may run in place (ins[m] ==
/// outs[m]); reduce_scatter's out holds in_numel / n elements, all_gather's n * in_numel.
void run_collective(CollKind kind, ReduceOp op, int root_index, DType dtype, int64_t in_numel,
                    const std::vector<const void*>& ins, const std::vector<void*>& outs);

/// Elements member m receives (0 when it receives nothing).
int64_t output_numel(CollKind kind, int members, int member, int root_index, int64_t in_numel);

/// Argument checks (Error naming the operation and the argument): the tensor is defined and
/// host-accessible; `numeric` also f32 or f64. `who` names the communicator in the message.
void check_host(const Tensor& t, std::string_view op, std::string_view arg, std::string_view who);
void check_numeric(const Tensor& t, std::string_view op, std::string_view arg, std::string_view who);
/// reduce_scatter: in holds group size x out, same dtype, no overlap; all_gather: out holds
/// group size x in.
void check_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out, const Tensor& in);
void check_all_gather(const CommGroup& g, int64_t tag, const Tensor& out, const Tensor& in);

/// Waits (on `cv`, holding `lock`) until one of `reqs` is done or `deadline` passes: true when
/// one is, false at the deadline. A request's failure is thrown (throw_if_failed_locked), and
/// `check_aborted()` throws when the run was aborted. Shared by both communicators' wait_any.
template <class Request, class CheckAborted>
bool wait_any_locked(const std::vector<Request*>& reqs, std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                     std::chrono::steady_clock::time_point deadline, CheckAborted&& check_aborted) {
  auto any_done = [&] {
    for (Request* r : reqs) {
      r->throw_if_failed_locked();
      if (r->done_locked()) return true;
    }
    return false;
  };
  while (true) {
    if (any_done()) return true;
    check_aborted();
    if (cv.wait_until(lock, deadline) == std::cv_status::timeout) return any_done();
  }
}

}  // namespace trainplan::executor::comm
