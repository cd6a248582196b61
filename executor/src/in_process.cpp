// In-process communicator (see in_process.hpp): a rendezvous table under one mutex. Each
// collective is an entry keyed by (group id, tag) that collects the members' tensors; the last
// member to arrive moves the data (outside the lock) and marks it done. Point-to-point messages
// are keyed by (source, destination, tag); the payload is copied when the send starts.
#include "trainplan/executor/in_process.hpp"

#include "collective_math.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

int CommGroup::index_of(int rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

std::string CommGroup::describe() const {
  std::vector<std::string> r;
  for (int x : ranks) r.push_back(std::to_string(x));
  return fmt::format("{} group {} (ranks {})", name.empty() ? "comm" : name, id, join(r, ","));
}

namespace {

using comm::CollKind;
using comm::coll_name;
using comm::ranks_text;

struct Member {
  bool arrived = false;
  Tensor in, out;
};

struct Collective {
  CollKind kind = CollKind::all_reduce;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  CommGroup group;
  int64_t tag = 0;
  std::vector<Member> members;
  int arrived = 0;
  bool done = false;
  std::string error;  // a mismatch between members: every member's request throws it
  double completed_at_s = 0;

  std::string describe() const { return fmt::format("{} tag {} on {}", coll_name(kind), tag, group.describe()); }
  std::vector<int> missing() const {
    std::vector<int> m;
    for (size_t i = 0; i < members.size(); ++i)
      if (!members[i].arrived) m.push_back(group.ranks[i]);
    return m;
  }
};

struct Message {
  int src = 0, dst = 0;
  int64_t tag = 0;
  bool sent = false, received = false;
  std::vector<std::byte> payload;  // the send's bytes (copied at send time)
  DType dtype = DType::f32;
  int64_t numel = 0;
  Tensor recv_into;  // the receiver's tensor, when the recv started first
  bool done = false;
  std::string error;
  double completed_at_s = 0;
  std::string describe() const { return fmt::format("send/recv tag {} from rank {} to rank {}", tag, src, dst); }
};

}  // namespace

struct detail::InProcessState {
  int world_size = 0;
  InProcessOptions options;
  mutable std::mutex mutex;
  std::condition_variable cv;
  bool aborted = false;
  std::string abort_message;
  std::map<std::pair<int, int64_t>, std::shared_ptr<Collective>> collectives;
  std::map<std::tuple<int, int, int64_t>, std::shared_ptr<Message>> messages;

  Error aborted_error(const std::string& what) const {
    return Error(fmt::format("{}: the run was aborted: {}", what, abort_message));
  }
};

namespace {

using State = detail::InProcessState;

// The data movement of a collective whose members have all arrived. Runs outside the lock:
// every member's tensors are pinned until the collective is marked done.
void run_collective(Collective& c) {
  if (c.kind == CollKind::barrier) return;
  std::vector<const void*> ins;
  std::vector<void*> outs;
  const int root = c.root >= 0 ? c.group.index_of(c.root) : -1;
  for (size_t m = 0; m < c.members.size(); ++m) {
    ins.push_back(c.members[m].in.data());
    const bool receives = comm::output_numel(c.kind, static_cast<int>(c.members.size()), static_cast<int>(m), root,
                                             c.members[0].in.numel()) > 0;
    outs.push_back(receives ? c.members[m].out.data() : nullptr);
  }
  comm::run_collective(c.kind, c.op, root, c.members[0].in.dtype(), c.members[0].in.numel(), ins, outs);
}

class InProcessRequest final : public CommRequest {
 public:
  InProcessRequest(std::shared_ptr<State> state, std::shared_ptr<Collective> coll, int rank)
      : state_(std::move(state)), coll_(std::move(coll)), rank_(rank) {}
  InProcessRequest(std::shared_ptr<State> state, std::shared_ptr<Message> msg, int rank)
      : state_(std::move(state)), msg_(std::move(msg)), rank_(rank) {}
  // A request that completed when it started (eager send).
  InProcessRequest(std::shared_ptr<State> state, std::string what, double completed_at_s)
      : state_(std::move(state)), rank_(-1), immediate_(true), what_(std::move(what)),
        immediate_at_s_(completed_at_s) {}

  // Caller holds the state's mutex.
  bool done_locked() const {
    if (immediate_) return true;
    return coll_ ? coll_->done : msg_->done;
  }
  void throw_if_failed_locked() const {
    const std::string& err = immediate_ ? no_error_ : coll_ ? coll_->error : msg_->error;
    if (!err.empty()) throw Error(err);
    if (!done_locked() && state_->aborted) throw state_->aborted_error(fmt::format("rank {}: {}", rank_, describe()));
  }

  bool test() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    throw_if_failed_locked();
    return done_locked();
  }

  void wait() override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(state_->options.timeout_s);
    while (true) {
      throw_if_failed_locked();
      if (done_locked()) return;
      if (state_->cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        throw_if_failed_locked();
        if (done_locked()) return;
        throw timeout_error_locked();
      }
    }
  }

  double completed_at_s() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (immediate_) return immediate_at_s_;
    return coll_ ? coll_->completed_at_s : msg_->completed_at_s;
  }

  std::string describe() const override {
    if (immediate_) return what_;
    return coll_ ? coll_->describe() : msg_->describe();
  }

  Error timeout_error_locked() const {
    const double t = state_->options.timeout_s;
    if (coll_)
      return Error(fmt::format("rank {}: {} timed out after {} s: ranks {} have not arrived (deadlock?)", rank_,
                               coll_->describe(), t, ranks_text(coll_->missing())))
          .hint("every member of a group must start the collective with the same tag; check the order of "
                "communication tasks in the program");
    return Error(fmt::format("rank {}: {} timed out after {} s: rank {} has not sent it (deadlock?)", rank_,
                             msg_->describe(), t, msg_->src))
        .hint("every recv needs a send with the same tag; check the order of pipeline tasks in the program");
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Collective> coll_;
  std::shared_ptr<Message> msg_;
  int rank_;
  bool immediate_ = false;
  std::string what_;
  double immediate_at_s_ = 0;
  const std::string no_error_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<State> state, int rank) : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size; }
  double timeout_s() const override { return state_->options.timeout_s; }

  std::shared_ptr<CommRequest> start_all_reduce(const CommGroup& g, int64_t tag, const Tensor& data,
                                                ReduceOp op) override {
    numeric(data, "all_reduce", "data");
    return collective(CollKind::all_reduce, g, tag, data, data, op, -1);
  }
  std::shared_ptr<CommRequest> start_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out,
                                                    const Tensor& in, ReduceOp op) override {
    numeric(out, "reduce_scatter", "out");
    numeric(in, "reduce_scatter", "in");
    comm::check_reduce_scatter(g, tag, out, in);
    return collective(CollKind::reduce_scatter, g, tag, in, out, op, -1);
  }
  std::shared_ptr<CommRequest> start_all_gather(const CommGroup& g, int64_t tag, const Tensor& out,
                                                const Tensor& in) override {
    host(out, "all_gather", "out");
    host(in, "all_gather", "in");
    comm::check_all_gather(g, tag, out, in);
    return collective(CollKind::all_gather, g, tag, in, out, ReduceOp::sum, -1);
  }
  std::shared_ptr<CommRequest> start_broadcast(const CommGroup& g, int64_t tag, const Tensor& data,
                                               int root) override {
    host(data, "broadcast", "data");
    if (g.index_of(root) < 0)
      throw Error(fmt::format("broadcast tag {}: root {} is not in {}", tag, root, g.describe()));
    return collective(CollKind::broadcast, g, tag, data, data, ReduceOp::sum, root);
  }
  std::shared_ptr<CommRequest> start_reduce(const CommGroup& g, int64_t tag, const Tensor& data, ReduceOp op,
                                            int root) override {
    numeric(data, "reduce", "data");
    if (g.index_of(root) < 0) throw Error(fmt::format("reduce tag {}: root {} is not in {}", tag, root, g.describe()));
    return collective(CollKind::reduce, g, tag, data, data, op, root);
  }
  std::shared_ptr<CommRequest> start_barrier(const CommGroup& g, int64_t tag) override {
    return collective(CollKind::barrier, g, tag, Tensor(), Tensor(), ReduceOp::sum, -1);
  }

  std::shared_ptr<CommRequest> start_send(int peer, int64_t tag, const Tensor& data) override {
    host(data, "send", "data");
    check_peer(peer, "send", tag);
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (state_->aborted) throw state_->aborted_error(fmt::format("rank {}: send tag {} to rank {}", rank_, tag, peer));
    auto& slot = state_->messages[{rank_, peer, tag}];
    if (!slot) slot = std::make_shared<Message>();
    Message& m = *slot;
    if (m.sent)
      throw Error(fmt::format("rank {}: send tag {} to rank {} was started twice", rank_, tag, peer))
          .hint("a tag identifies one message");
    m.src = rank_;
    m.dst = peer;
    m.tag = tag;
    m.sent = true;
    m.dtype = data.dtype();
    m.numel = data.numel();
    const double now = Backend::now_s();
    if (m.received) {
      // The receiver is waiting with its tensor pinned: copy straight into it.
      deliver_locked(m, static_cast<const std::byte*>(data.data()), data.size_bytes(), now);
      state_->messages.erase({rank_, peer, tag});
    } else {
      const auto* p = static_cast<const std::byte*>(data.data());
      m.payload.assign(p, p + data.size_bytes());
    }
    state_->cv.notify_all();
    return std::make_shared<InProcessRequest>(state_, fmt::format("send tag {} from rank {} to rank {}", tag, rank_, peer),
                                              now);
  }

  std::shared_ptr<CommRequest> start_recv(int peer, int64_t tag, const Tensor& data) override {
    host(data, "recv", "data");
    check_peer(peer, "recv", tag);
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (state_->aborted) throw state_->aborted_error(fmt::format("rank {}: recv tag {} from rank {}", rank_, tag, peer));
    auto key = std::make_tuple(peer, rank_, tag);
    auto& slot = state_->messages[key];
    if (!slot) slot = std::make_shared<Message>();
    std::shared_ptr<Message> msg = slot;
    Message& m = *msg;
    if (m.received)
      throw Error(fmt::format("rank {}: recv tag {} from rank {} was started twice", rank_, tag, peer))
          .hint("a tag identifies one message");
    m.src = peer;
    m.dst = rank_;
    m.tag = tag;
    m.received = true;
    m.recv_into = data;
    if (m.sent) {
      std::vector<std::byte> payload = std::move(m.payload);
      deliver_locked(m, payload.data(), payload.size(), Backend::now_s());
      state_->messages.erase(key);
    }
    state_->cv.notify_all();
    return std::make_shared<InProcessRequest>(state_, msg, rank_);
  }

  bool wait_any(std::span<const std::shared_ptr<CommRequest>> requests, double timeout_s) override {
    std::vector<InProcessRequest*> reqs;
    for (const auto& r : requests) {
      auto* p = dynamic_cast<InProcessRequest*>(r.get());
      TP_ASSERT_MSG(p != nullptr, "wait_any: a request of another communicator");
      reqs.push_back(p);
    }
    std::unique_lock<std::mutex> lock(state_->mutex);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
    return comm::wait_any_locked(reqs, lock, state_->cv, deadline, [&] {
      if (state_->aborted) throw state_->aborted_error(fmt::format("rank {}", rank_));
    });
  }

  void abort(const std::string& message) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->aborted) {
      state_->aborted = true;
      state_->abort_message = fmt::format("rank {} failed: {}", rank_, message);
    }
    state_->cv.notify_all();
  }

 private:
  void host(const Tensor& t, std::string_view op, std::string_view arg) const {
    comm::check_host(t, op, arg, "in-process communicator");
  }
  void numeric(const Tensor& t, std::string_view op, std::string_view arg) const {
    comm::check_numeric(t, op, arg, "in-process communicator");
  }
  void check_peer(int peer, std::string_view op, int64_t tag) const {
    if (peer < 0 || peer >= state_->world_size || peer == rank_)
      throw Error(fmt::format("rank {}: {} tag {}: peer {} is not another rank of the world of {}", rank_, op, tag, peer,
                              state_->world_size));
  }

  // Caller holds the lock. Copies a payload into the receiver's tensor and completes the message.
  void deliver_locked(Message& m, const std::byte* data, size_t size_bytes, double now) {
    if (m.recv_into.size_bytes() != size_bytes || m.recv_into.dtype() != m.dtype)
      m.error = fmt::format("{}: the send has {} bytes of {}, the recv expects {}", m.describe(), size_bytes,
                            dtype_name(m.dtype), m.recv_into.describe());
    else
      std::memcpy(m.recv_into.data(), data, size_bytes);
    m.recv_into = Tensor();
    m.done = true;
    m.completed_at_s = now;
  }

  std::shared_ptr<CommRequest> collective(CollKind kind, const CommGroup& g, int64_t tag, const Tensor& in,
                                          const Tensor& out, ReduceOp op, int root) {
    const int me = g.index_of(rank_);
    if (me < 0)
      throw Error(fmt::format("rank {}: {} tag {}: this rank is not a member of {}", rank_, coll_name(kind), tag,
                              g.describe()));
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (state_->aborted)
      throw state_->aborted_error(fmt::format("rank {}: {} tag {} on {}", rank_, coll_name(kind), tag, g.describe()));
    auto key = std::make_pair(g.id, tag);
    auto& slot = state_->collectives[key];
    if (!slot) {
      slot = std::make_shared<Collective>();
      slot->kind = kind;
      slot->op = op;
      slot->root = root;
      slot->group = g;
      slot->tag = tag;
      slot->members.resize(g.ranks.size());
    }
    std::shared_ptr<Collective> c = slot;
    Member& m = c->members[static_cast<size_t>(me)];
    if (m.arrived)
      throw Error(fmt::format("rank {}: {} was started twice", rank_, c->describe())).hint("a tag identifies one collective");
    m.arrived = true;
    m.in = in;
    m.out = out;
    ++c->arrived;
    // Members must agree on what they do.
    const Member* first = nullptr;
    for (const Member& x : c->members)
      if (x.arrived && &x != &m) first = &x;
    std::string mismatch;
    if (c->kind != kind || c->op != op || c->root != root || c->group.ranks != g.ranks)
      mismatch = fmt::format("rank {} started {} ({}, root {}) on ranks {} but another member started {}", rank_,
                             coll_name(kind), reduce_op_name(op), root, ranks_text(g.ranks), c->describe());
    else if (first && (first->in.numel() != in.numel() || first->in.dtype() != in.dtype()))
      mismatch = fmt::format("{}: members pass different sizes ({} and {})", c->describe(), first->in.describe(),
                             in.describe());
    if (!mismatch.empty() && c->error.empty()) c->error = mismatch;
    if (c->arrived == g.size() || !c->error.empty()) {
      state_->collectives.erase(key);
      if (c->error.empty()) {
        lock.unlock();
        run_collective(*c);
        lock.lock();
      }
      for (Member& x : c->members) x.in = x.out = Tensor();
      c->done = true;
      c->completed_at_s = Backend::now_s();
      state_->cv.notify_all();
    }
    return std::make_shared<InProcessRequest>(state_, c, rank_);
  }

  std::shared_ptr<State> state_;
  int rank_;
};

}  // namespace

InProcessWorld::InProcessWorld(int world_size, InProcessOptions options)
    : state_(std::make_shared<detail::InProcessState>()) {
  if (world_size < 1) throw Error(fmt::format("in-process world: needs at least one rank, got {}", world_size));
  if (!(options.timeout_s > 0)) throw Error(fmt::format("in-process world: timeout must be positive, got {}", options.timeout_s));
  state_->world_size = world_size;
  state_->options = options;
  for (int r = 0; r < world_size; ++r) comms_.push_back(std::make_unique<InProcessCommunicator>(state_, r));
}

InProcessWorld::~InProcessWorld() = default;

int InProcessWorld::world_size() const { return state_->world_size; }

std::vector<int> InProcessWorld::local_ranks() const {
  std::vector<int> all;
  for (int r = 0; r < state_->world_size; ++r) all.push_back(r);
  return all;
}

Communicator& InProcessWorld::communicator(int rank) {
  TP_ASSERT(rank >= 0 && rank < state_->world_size);
  return *comms_[static_cast<size_t>(rank)];
}

bool InProcessWorld::aborted() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->aborted;
}

std::string InProcessWorld::abort_message() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->abort_message;
}

}  // namespace trainplan::executor
