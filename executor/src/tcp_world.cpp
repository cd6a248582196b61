// The multi-process communicator (tcp_world.hpp). Per process: one mutex-guarded table, one
// receiver and one sender thread per peer process. Nothing ever sends from a receiver thread
// directly: outgoing frames go through the peer's queue, so two processes that both complete a
// collective at once cannot block each other on full socket buffers.
//
// Collectives: the group's first member is its leader. A member in the leader's process
// registers its tensors in the leader's table entry; a member elsewhere sends its input in a
// CONTRIB frame and waits for a RESULT frame with its output. The leader's process computes
// the collective (collective_math.hpp) when the last member has arrived, in whichever thread
// saw that arrival, writes its local members' outputs and sends the others theirs.
#include "trainplan/executor/tcp_world.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "collective_math.hpp"
#include "socket_io.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/backend.hpp"

namespace trainplan::executor {

namespace {

using comm::CollKind;
using comm::coll_name;
using comm::ranks_text;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x31575054;  // "TPW1"
constexpr const char* kWho = "multi-process communicator";

enum class FrameType : uint8_t { hello = 1, contrib, result, message, abort, bye };

struct Header {
  uint32_t magic = kMagic;
  FrameType type = FrameType::hello;
  CollKind kind = CollKind::barrier;
  uint8_t op = 0;       // ReduceOp
  uint8_t dtype = 0;    // DType; result frames: 1 = the payload is an error message
  int32_t src = 0;      // sending rank (hello: process)
  int32_t dst = 0;      // receiving rank
  int32_t group = 0;
  int32_t member = 0;   // the sender's index in the group
  int32_t group_size = 0;
  int32_t root = -1;
  int64_t tag = 0;
  int64_t numel = 0;
  uint64_t payload_bytes = 0;
};

struct Completion {
  bool done = false;
  std::string error;
  double completed_at_s = 0;
  void finish() {
    done = true;
    completed_at_s = Backend::now_s();
  }
};

struct Slot {
  bool arrived = false;
  int rank = -1;
  bool local = false;
  Tensor in, out;                 // local member
  std::vector<std::byte> payload; // remote member's input
};

// A collective led by a rank of this process.
struct Coll {
  bool have_spec = false;
  CollKind kind = CollKind::barrier;
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  int root = -1;
  int64_t numel = 0;
  int group_id = 0;
  int64_t tag = 0;
  std::vector<int> ranks;  // group order (known once the leader's process starts it locally)
  std::vector<Slot> slots;
  int arrived = 0;
  std::string error;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();

  std::string describe() const {
    return fmt::format("{} tag {} on group {} (ranks {})", coll_name(kind), tag, group_id,
                       ranks.empty() ? "?" : ranks_text(ranks));
  }
  std::vector<int> missing() const {
    std::vector<int> m;
    for (size_t i = 0; i < slots.size(); ++i)
      if (!slots[i].arrived) m.push_back(i < ranks.size() ? ranks[i] : -1);
    return m;
  }
};

// A collective led by another process: this member waits for its output.
struct Await {
  Tensor out;
  int leader = -1;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();
};

// A point-to-point message to a rank of this process.
struct Msg {
  bool sent = false, received = false;
  std::vector<std::byte> payload;
  DType dtype = DType::f32;
  int64_t numel = 0;
  Tensor recv_into;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();
};

using Frame = std::shared_ptr<std::vector<std::byte>>;

Frame make_frame(const Header& h, const void* payload, size_t bytes) {
  auto f = std::make_shared<std::vector<std::byte>>(sizeof(Header) + bytes);
  Header copy = h;
  copy.payload_bytes = bytes;
  std::memcpy(f->data(), &copy, sizeof(Header));
  if (bytes > 0) std::memcpy(f->data() + sizeof(Header), payload, bytes);
  return f;
}

struct Peer {
  int process = -1;
  int fd = -1;
  std::string name;       // "process 1, pid 77 on node1"
  std::thread receiver, sender;
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<Frame> queue;
  bool stop_sender = false;
  bool bye = false;       // under the world mutex
  bool gone = false;      // the connection ended (under the world mutex)
};

}  // namespace

struct detail::TcpWorldState {
  TcpWorldOptions options;
  int process = 0;
  int processes = 1;
  std::vector<int> process_of_rank;
  std::vector<std::unique_ptr<Peer>> peers;  // by process; null for this one

  mutable std::mutex mutex;
  std::condition_variable cv;
  bool aborted = false;
  std::string abort_message;
  bool abort_sent = false;  // this process told the others
  std::atomic<bool> closing{false};
  std::map<std::pair<int, int64_t>, std::shared_ptr<Coll>> colls;
  std::map<std::tuple<int, int64_t, int>, std::shared_ptr<Await>> awaits;
  std::map<std::tuple<int, int, int64_t>, std::shared_ptr<Msg>> msgs;

  int world_size() const { return static_cast<int>(process_of_rank.size()); }
  bool is_local(int rank) const { return process_of_rank[static_cast<size_t>(rank)] == process; }
  std::vector<int> ranks_of(int p) const {
    std::vector<int> r;
    for (size_t i = 0; i < process_of_rank.size(); ++i)
      if (process_of_rank[i] == p) r.push_back(static_cast<int>(i));
    return r;
  }

  void enqueue(int to_process, Frame f) {
    Peer& p = *peers[static_cast<size_t>(to_process)];
    {
      std::lock_guard lock(p.queue_mutex);
      p.queue.push_back(std::move(f));
    }
    p.queue_cv.notify_one();
  }
  void send_to_rank(int rank, const Header& h, const void* payload, size_t bytes) {
    enqueue(process_of_rank[static_cast<size_t>(rank)], make_frame(h, payload, bytes));
  }

  // Caller holds the mutex. The first failure wins; everyone waiting wakes up.
  void abort_locked(const std::string& message) {
    if (!aborted) {
      aborted = true;
      abort_message = message;
    }
    cv.notify_all();
  }

  // ---- collectives (caller holds the mutex) ------------------------------------------------

  // A member's arrival at the leader's table; `local` members pass their tensors, remote ones
  // their payload. Completes the collective when it was the last.
  void arrive_locked(const std::shared_ptr<Coll>& c_ptr, int member, int rank, CollKind kind, ReduceOp op, DType dtype,
                     int root, int64_t numel, int group_size, bool local, const Tensor& in, const Tensor& out,
                     std::vector<std::byte> payload) {
    Coll& c = *c_ptr;
    std::string mismatch;
    if (!c.have_spec) {
      c.have_spec = true;
      c.kind = kind, c.op = op, c.dtype = dtype, c.root = root, c.numel = numel;
      c.slots.resize(static_cast<size_t>(group_size));
    } else if (c.kind != kind || c.op != op || c.root != root || static_cast<int>(c.slots.size()) != group_size) {
      mismatch = fmt::format("rank {} started {} ({}, root {}) on a group of {} but another member started {} ({}, root {}) "
                             "on a group of {}",
                             rank, coll_name(kind), reduce_op_name(op), root, group_size, coll_name(c.kind),
                             reduce_op_name(c.op), c.root, c.slots.size());
    } else if (c.numel != numel || c.dtype != dtype) {
      mismatch = fmt::format("{}: members pass different sizes ({} {} and {} {})", c.describe(), c.numel,
                             dtype_name(c.dtype), numel, dtype_name(dtype));
    }
    if (member < 0 || member >= static_cast<int>(c.slots.size())) {
      if (mismatch.empty()) mismatch = fmt::format("{}: rank {} claims member index {}", c.describe(), rank, member);
    } else {
      Slot& s = c.slots[static_cast<size_t>(member)];
      if (s.arrived && mismatch.empty())
        mismatch = fmt::format("rank {}: {} was started twice", rank, c.describe());
      s.arrived = true;
      s.rank = rank;
      s.local = local;
      s.in = in;
      s.out = out;
      s.payload = std::move(payload);
      ++c.arrived;
    }
    if (!c.ranks.empty())
      for (size_t m = 0; m < c.slots.size() && mismatch.empty(); ++m)
        if (c.slots[m].arrived && c.slots[m].rank != c.ranks[m])
          mismatch = fmt::format("{}: rank {} arrived as member {}, the group says rank {}", c.describe(),
                                 c.slots[m].rank, m, c.ranks[m]);
    if (!mismatch.empty() && c.error.empty()) c.error = mismatch;
    if (c.arrived == static_cast<int>(c.slots.size()) || !c.error.empty()) complete_locked(c_ptr);
  }

  void complete_locked(const std::shared_ptr<Coll>& c_ptr) {
    Coll& c = *c_ptr;
    colls.erase({c.group_id, c.tag});
    Header h;
    h.type = FrameType::result;
    h.group = c.group_id;
    h.tag = c.tag;
    if (!c.error.empty()) {
      h.dtype = 1;
      for (const Slot& s : c.slots)
        if (s.arrived && !s.local) {
          h.dst = s.rank;
          send_to_rank(s.rank, h, c.error.data(), c.error.size());
        }
      c.completion->error = c.error;
    } else {
      const int n = static_cast<int>(c.slots.size());
      const int root_index = c.root >= 0 ? static_cast<int>(std::find(c.ranks.begin(), c.ranks.end(), c.root) - c.ranks.begin()) : -1;
      std::vector<const void*> ins;
      std::vector<void*> outs;
      std::vector<std::vector<std::byte>> remote_out(static_cast<size_t>(n));
      const size_t elem = dtype_size_bytes(c.dtype);
      for (int m = 0; m < n; ++m) {
        Slot& s = c.slots[static_cast<size_t>(m)];
        ins.push_back(s.local ? (s.in.defined() ? s.in.data() : nullptr) : static_cast<const void*>(s.payload.data()));
        const int64_t out_n = comm::output_numel(c.kind, n, m, root_index, c.numel);
        if (out_n == 0) {
          outs.push_back(nullptr);
        } else if (s.local) {
          outs.push_back(s.out.data());
        } else {
          remote_out[static_cast<size_t>(m)].resize(static_cast<size_t>(out_n) * elem);
          outs.push_back(remote_out[static_cast<size_t>(m)].data());
        }
      }
      if (c.kind != CollKind::barrier) comm::run_collective(c.kind, c.op, root_index, c.dtype, c.numel, ins, outs);
      for (int m = 0; m < n; ++m) {
        const Slot& s = c.slots[static_cast<size_t>(m)];
        if (s.local) continue;
        h.dst = s.rank;
        const auto& bytes = remote_out[static_cast<size_t>(m)];
        send_to_rank(s.rank, h, bytes.data(), bytes.size());
      }
    }
    for (Slot& s : c.slots) s.in = s.out = Tensor();
    c.completion->finish();
    cv.notify_all();
  }

  void on_contrib_locked(const Header& h, std::vector<std::byte> payload) {
    auto& slot = colls[{h.group, h.tag}];
    if (!slot) {
      slot = std::make_shared<Coll>();
      slot->group_id = h.group;
      slot->tag = h.tag;
    }
    const std::shared_ptr<Coll> c = slot;
    arrive_locked(c, h.member, h.src, h.kind, static_cast<ReduceOp>(h.op), static_cast<DType>(h.dtype), h.root, h.numel,
                  h.group_size, false, Tensor(), Tensor(), std::move(payload));
  }

  void on_result_locked(const Header& h, std::vector<std::byte> payload) {
    auto it = awaits.find({h.group, h.tag, h.dst});
    if (it == awaits.end()) {
      abort_locked(fmt::format("protocol error: a result for rank {} (group {}, tag {}) that nobody waits for", h.dst,
                               h.group, h.tag));
      return;
    }
    std::shared_ptr<Await> a = it->second;
    awaits.erase(it);
    if (h.dtype == 1) {
      a->completion->error = std::string(reinterpret_cast<const char*>(payload.data()), payload.size());
    } else if (!payload.empty()) {
      if (payload.size() != a->out.size_bytes())
        a->completion->error = fmt::format("group {} tag {}: the leader sent {} bytes, rank {} expects {}", h.group, h.tag,
                                           payload.size(), h.dst, a->out.describe());
      else
        std::memcpy(a->out.data(), payload.data(), payload.size());
    }
    a->out = Tensor();
    a->completion->finish();
    cv.notify_all();
  }

  // ---- messages (caller holds the mutex) ---------------------------------------------------

  std::shared_ptr<Msg>& msg_slot(int src, int dst, int64_t tag) {
    auto& slot = msgs[{src, dst, tag}];
    if (!slot) slot = std::make_shared<Msg>();
    return slot;
  }

  void deliver_locked(Msg& m, int src, int dst, int64_t tag, const std::byte* data, size_t bytes) {
    if (m.recv_into.size_bytes() != bytes || m.recv_into.dtype() != m.dtype)
      m.completion->error = fmt::format("send/recv tag {} from rank {} to rank {}: the send has {} bytes of {}, the recv "
                                        "expects {}",
                                        tag, src, dst, bytes, dtype_name(m.dtype), m.recv_into.describe());
    else if (bytes > 0)
      std::memcpy(m.recv_into.data(), data, bytes);
    m.recv_into = Tensor();
    m.completion->finish();
    msgs.erase({src, dst, tag});
    cv.notify_all();
  }

  void on_message_locked(const Header& h, std::vector<std::byte> payload) {
    std::shared_ptr<Msg> m = msg_slot(h.src, h.dst, h.tag);
    if (m->sent) {
      abort_locked(fmt::format("rank {}: send tag {} to rank {} was started twice", h.src, h.tag, h.dst));
      return;
    }
    m->sent = true;
    m->dtype = static_cast<DType>(h.dtype);
    m->numel = h.numel;
    if (m->received)
      deliver_locked(*m, h.src, h.dst, h.tag, payload.data(), payload.size());
    else
      m->payload = std::move(payload);
  }

  // ---- threads --------------------------------------------------------------------------------

  void receive_loop(Peer& peer) {
    std::string failure;
    try {
      while (true) {
        Header h;
        if (!net::recv_all(peer.fd, &h, sizeof(h), peer.name)) break;
        if (h.magic != kMagic) throw Error(fmt::format("{} sent a frame that is not ours (bad magic)", peer.name));
        if (h.payload_bytes > (uint64_t{1} << 40)) throw Error(fmt::format("{} sent a corrupt frame", peer.name));
        std::vector<std::byte> payload(static_cast<size_t>(h.payload_bytes));
        if (!payload.empty() && !net::recv_all(peer.fd, payload.data(), payload.size(), peer.name))
          throw Error(fmt::format("{} closed its connection in the middle of a frame", peer.name));
        std::lock_guard lock(mutex);
        switch (h.type) {
          case FrameType::contrib: on_contrib_locked(h, std::move(payload)); break;
          case FrameType::result: on_result_locked(h, std::move(payload)); break;
          case FrameType::message: on_message_locked(h, std::move(payload)); break;
          case FrameType::abort:
            abort_locked(std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
            break;
          case FrameType::bye:
            peer.bye = true;
            cv.notify_all();
            break;
          case FrameType::hello: break;
        }
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::lock_guard lock(mutex);
    peer.gone = true;
    if (!peer.bye && !closing) peer_lost_locked(peer, failure);
    cv.notify_all();
  }

  // Caller holds the mutex. A peer's connection broke before its goodbye, seen by the receive
  // thread (end of stream) or the send thread (EPIPE / ECONNRESET), whichever comes first: both
  // name the peer's ranks, so every survivor reports the same cause.
  void peer_lost_locked(const Peer& peer, const std::string& detail) {
    std::vector<int> ranks = ranks_of(peer.process);
    abort_locked(fmt::format("rank{} {} ({}) disconnected without saying goodbye: the process died or was killed{}",
                             ranks.size() > 1 ? "s" : "", ranks_text(ranks), peer.name,
                             detail.empty() ? "" : " (" + detail + ")"));
  }

  void send_loop(Peer& peer) {
    while (true) {
      Frame f;
      {
        std::unique_lock lock(peer.queue_mutex);
        peer.queue_cv.wait(lock, [&] { return peer.stop_sender || !peer.queue.empty(); });
        if (peer.queue.empty()) return;
        f = std::move(peer.queue.front());
        peer.queue.pop_front();
      }
      try {
        net::send_all(peer.fd, f->data(), f->size(), peer.name);
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        if (!closing && !peer.bye) peer_lost_locked(peer, e.what());
        return;
      }
    }
  }

  // Ends the threads: queued frames are sent first, then the connections are shut down.
  void shutdown_peers() {
    closing = true;
    for (auto& p : peers) {
      if (!p) continue;
      {
        std::lock_guard lock(p->queue_mutex);
        p->stop_sender = true;
      }
      p->queue_cv.notify_all();
    }
    for (auto& p : peers)
      if (p && p->sender.joinable()) p->sender.join();
    for (auto& p : peers)
      if (p && p->fd >= 0) ::shutdown(p->fd, SHUT_RDWR);
    for (auto& p : peers)
      if (p && p->receiver.joinable()) p->receiver.join();
    for (auto& p : peers)
      if (p && p->fd >= 0) {
        ::close(p->fd);
        p->fd = -1;
      }
  }
};

namespace {

using State = detail::TcpWorldState;

class TcpRequest final : public CommRequest {
 public:
  TcpRequest(std::shared_ptr<State> state, std::shared_ptr<Completion> c, int rank, std::string what,
             std::function<std::string()> pending)
      : state_(std::move(state)), c_(std::move(c)), rank_(rank), what_(std::move(what)), pending_(std::move(pending)) {}

  void throw_if_failed_locked() const {
    if (!c_->error.empty()) throw Error(c_->error);
    if (!c_->done && state_->aborted)
      throw Error(fmt::format("rank {}: {}: the run was aborted: {}", rank_, what_, state_->abort_message));
  }
  bool done_locked() const { return c_->done; }

  bool test() override {
    std::lock_guard lock(state_->mutex);
    throw_if_failed_locked();
    return c_->done;
  }
  void wait() override {
    std::unique_lock lock(state_->mutex);
    const auto deadline = Clock::now() + std::chrono::duration<double>(state_->options.timeout_s);
    while (true) {
      throw_if_failed_locked();
      if (c_->done) return;
      if (state_->cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        throw_if_failed_locked();
        if (c_->done) return;
        throw Error(fmt::format("rank {}: {} timed out after {} s: {} (deadlock, or a process that hangs?)", rank_, what_,
                                state_->options.timeout_s, pending_ ? pending_() : "not complete"))
            .hint("every member of a group must start the collective with the same tag, every recv needs its send; "
                  "check that every process runs and the order of communication tasks in the program");
      }
    }
  }
  double completed_at_s() const override {
    std::lock_guard lock(state_->mutex);
    return c_->completed_at_s;
  }
  std::string describe() const override { return what_; }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<Completion> c_;
  int rank_;
  std::string what_;
  std::function<std::string()> pending_;  // called under the lock
};

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(std::shared_ptr<State> state, int rank) : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return state_->world_size(); }
  double timeout_s() const override { return state_->options.timeout_s; }

  std::shared_ptr<CommRequest> start_all_reduce(const CommGroup& g, int64_t tag, const Tensor& data,
                                                ReduceOp op) override {
    comm::check_numeric(data, "all_reduce", "data", kWho);
    return collective(CollKind::all_reduce, g, tag, data, data, op, -1);
  }
  std::shared_ptr<CommRequest> start_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out,
                                                    const Tensor& in, ReduceOp op) override {
    comm::check_numeric(out, "reduce_scatter", "out", kWho);
    comm::check_numeric(in, "reduce_scatter", "in", kWho);
    comm::check_reduce_scatter(g, tag, out, in);
    return collective(CollKind::reduce_scatter, g, tag, in, out, op, -1);
  }
  std::shared_ptr<CommRequest> start_all_gather(const CommGroup& g, int64_t tag, const Tensor& out,
                                                const Tensor& in) override {
    comm::check_host(out, "all_gather", "out", kWho);
    comm::check_host(in, "all_gather", "in", kWho);
    comm::check_all_gather(g, tag, out, in);
    return collective(CollKind::all_gather, g, tag, in, out, ReduceOp::sum, -1);
  }
  std::shared_ptr<CommRequest> start_broadcast(const CommGroup& g, int64_t tag, const Tensor& data,
                                               int root) override {
    comm::check_host(data, "broadcast", "data", kWho);
    if (g.index_of(root) < 0)
      throw Error(fmt::format("broadcast tag {}: root {} is not in {}", tag, root, g.describe()));
    return collective(CollKind::broadcast, g, tag, data, data, ReduceOp::sum, root);
  }
  std::shared_ptr<CommRequest> start_reduce(const CommGroup& g, int64_t tag, const Tensor& data, ReduceOp op,
                                            int root) override {
    comm::check_numeric(data, "reduce", "data", kWho);
    if (g.index_of(root) < 0) throw Error(fmt::format("reduce tag {}: root {} is not in {}", tag, root, g.describe()));
    return collective(CollKind::reduce, g, tag, data, data, op, root);
  }
  std::shared_ptr<CommRequest> start_barrier(const CommGroup& g, int64_t tag) override {
    return collective(CollKind::barrier, g, tag, Tensor(), Tensor(), ReduceOp::sum, -1);
  }

  std::shared_ptr<CommRequest> start_send(int peer, int64_t tag, const Tensor& data) override {
    comm::check_host(data, "send", "data", kWho);
    check_peer(peer, "send", tag);
    const std::string what = fmt::format("send tag {} from rank {} to rank {}", tag, rank_, peer);
    std::lock_guard lock(state_->mutex);
    if (state_->aborted) throw Error(fmt::format("rank {}: {}: the run was aborted: {}", rank_, what, state_->abort_message));
    if (state_->is_local(peer)) {
      std::shared_ptr<Msg> m = state_->msg_slot(rank_, peer, tag);
      if (m->sent)
        throw Error(fmt::format("rank {}: send tag {} to rank {} was started twice", rank_, tag, peer))
            .hint("a tag identifies one message");
      m->sent = true;
      m->dtype = data.dtype();
      m->numel = data.numel();
      const auto* p = static_cast<const std::byte*>(data.data());
      if (m->received)
        state_->deliver_locked(*m, rank_, peer, tag, p, data.size_bytes());
      else
        m->payload.assign(p, p + data.size_bytes());
    } else {
      Header h;
      h.type = FrameType::message;
      h.src = rank_;
      h.dst = peer;
      h.tag = tag;
      h.dtype = static_cast<uint8_t>(data.dtype());
      h.numel = data.numel();
      state_->send_to_rank(peer, h, data.data(), data.size_bytes());
    }
    auto done = std::make_shared<Completion>();
    done->finish();
    return std::make_shared<TcpRequest>(state_, done, rank_, what, nullptr);
  }

  std::shared_ptr<CommRequest> start_recv(int peer, int64_t tag, const Tensor& data) override {
    comm::check_host(data, "recv", "data", kWho);
    check_peer(peer, "recv", tag);
    const std::string what = fmt::format("send/recv tag {} from rank {} to rank {}", tag, peer, rank_);
    std::lock_guard lock(state_->mutex);
    if (state_->aborted) throw Error(fmt::format("rank {}: {}: the run was aborted: {}", rank_, what, state_->abort_message));
    std::shared_ptr<Msg> m = state_->msg_slot(peer, rank_, tag);
    if (m->received)
      throw Error(fmt::format("rank {}: recv tag {} from rank {} was started twice", rank_, tag, peer))
          .hint("a tag identifies one message");
    m->received = true;
    m->recv_into = data;
    std::shared_ptr<Completion> c = m->completion;
    if (m->sent) {
      std::vector<std::byte> payload = std::move(m->payload);
      state_->deliver_locked(*m, peer, rank_, tag, payload.data(), payload.size());
    }
    return std::make_shared<TcpRequest>(state_, c, rank_, what,
                                        [peer] { return fmt::format("rank {} has not sent it", peer); });
  }

  bool wait_any(std::span<const std::shared_ptr<CommRequest>> requests, double timeout_s) override {
    std::vector<TcpRequest*> reqs;
    for (const auto& r : requests) {
      auto* p = dynamic_cast<TcpRequest*>(r.get());
      TP_ASSERT_MSG(p != nullptr, "wait_any: a request of another communicator");
      reqs.push_back(p);
    }
    std::unique_lock lock(state_->mutex);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
    return comm::wait_any_locked(reqs, lock, state_->cv, deadline, [&] {
      if (state_->aborted) throw Error(fmt::format("rank {}: the run was aborted: {}", rank_, state_->abort_message));
    });
  }

  // The job's first failure (this rank's, or one this process learnt of, such as a peer that
  // disconnected) goes to every other process once, before this one ends.
  void abort(const std::string& message) override {
    std::lock_guard lock(state_->mutex);
    state_->abort_locked(fmt::format("rank {} failed: {}", rank_, message));
    if (state_->abort_sent) return;
    state_->abort_sent = true;
    const std::string& text = state_->abort_message;
    Header h;
    h.type = FrameType::abort;
    h.src = rank_;
    for (const auto& p : state_->peers)
      if (p && !p->gone) state_->enqueue(p->process, make_frame(h, text.data(), text.size()));
  }

 private:
  void check_peer(int peer, std::string_view op, int64_t tag) const {
    if (peer < 0 || peer >= state_->world_size() || peer == rank_)
      throw Error(fmt::format("rank {}: {} tag {}: peer {} is not another rank of the world of {}", rank_, op, tag, peer,
                              state_->world_size()));
  }

  std::shared_ptr<CommRequest> collective(CollKind kind, const CommGroup& g, int64_t tag, const Tensor& in,
                                          const Tensor& out, ReduceOp op, int root) {
    const int me = g.index_of(rank_);
    if (me < 0)
      throw Error(fmt::format("rank {}: {} tag {}: this rank is not a member of {}", rank_, coll_name(kind), tag,
                              g.describe()));
    for (int r : g.ranks)
      if (r < 0 || r >= state_->world_size())
        throw Error(fmt::format("rank {}: {} tag {}: {} names a rank outside the world of {}", rank_, coll_name(kind), tag,
                                g.describe(), state_->world_size()));
    const std::string what = fmt::format("{} tag {} on {}", coll_name(kind), tag, g.describe());
    const int leader = g.ranks.front();
    const DType dtype = in.defined() ? in.dtype() : DType::f32;
    const int64_t numel = in.defined() ? in.numel() : 0;
    std::lock_guard lock(state_->mutex);
    if (state_->aborted) throw Error(fmt::format("rank {}: {}: the run was aborted: {}", rank_, what, state_->abort_message));
    if (state_->is_local(leader)) {
      auto& slot = state_->colls[{g.id, tag}];
      if (!slot) {
        slot = std::make_shared<Coll>();
        slot->group_id = g.id;
        slot->tag = tag;
      }
      const std::shared_ptr<Coll> c = slot;
      if (c->ranks.empty()) c->ranks = g.ranks;
      std::shared_ptr<Completion> completion = c->completion;
      std::weak_ptr<Coll> weak = c;
      state_->arrive_locked(c, me, rank_, kind, op, dtype, root, numel, g.size(), true, in, out, {});
      return std::make_shared<TcpRequest>(state_, completion, rank_, what, [weak] {
        auto c2 = weak.lock();
        return c2 ? fmt::format("ranks {} have not arrived", ranks_text(c2->missing())) : std::string("done");
      });
    }
    // The leader lives in another process: register the wait, then send the input.
    auto a = std::make_shared<Await>();
    a->out = out;
    a->leader = leader;
    const auto key = std::make_tuple(g.id, tag, rank_);
    if (state_->awaits.count(key))
      throw Error(fmt::format("rank {}: {} was started twice", rank_, what)).hint("a tag identifies one collective");
    state_->awaits[key] = a;
    Header h;
    h.type = FrameType::contrib;
    h.kind = kind;
    h.op = static_cast<uint8_t>(op);
    h.dtype = static_cast<uint8_t>(dtype);
    h.src = rank_;
    h.dst = leader;
    h.group = g.id;
    h.member = me;
    h.group_size = g.size();
    h.root = root;
    h.tag = tag;
    h.numel = numel;
    const bool sends_data = kind != CollKind::barrier && (kind != CollKind::broadcast || root == rank_);
    state_->send_to_rank(leader, h, sends_data ? in.data() : nullptr, sends_data ? in.size_bytes() : 0);
    const int leader_process = state_->process_of_rank[static_cast<size_t>(leader)];
    return std::make_shared<TcpRequest>(state_, a->completion, rank_, what, [leader, leader_process] {
      return fmt::format("no result yet from its leader, rank {} in process {} (some member has not arrived)", leader,
                         leader_process);
    });
  }

  std::shared_ptr<State> state_;
  int rank_;
};

struct Address {
  std::string host;
  int port = 0;
  long pid = 0;
  std::string node;
};

Address parse_address(const std::string& text) {
  Address a;
  // "host port pid node"
  std::istringstream in(text);
  in >> a.host >> a.port >> a.pid >> a.node;
  return a;
}

}  // namespace

TcpWorld::TcpWorld(std::shared_ptr<detail::TcpWorldState> state) : state_(std::move(state)) {
  comms_.resize(static_cast<size_t>(state_->world_size()));
  for (int r : local_ranks()) comms_[static_cast<size_t>(r)] = std::make_unique<TcpCommunicator>(state_, r);
}

std::unique_ptr<TcpWorld> TcpWorld::join(Rendezvous& store, int process, const std::vector<int>& process_of_rank,
                                         const std::string& advertise_host, TcpWorldOptions options) {
  if (process_of_rank.empty()) throw Error("tcp world: the job has no ranks");
  int processes = 0;
  for (int p : process_of_rank) processes = std::max(processes, p + 1);
  std::vector<bool> seen(static_cast<size_t>(processes), false);
  for (int p : process_of_rank) {
    if (p < 0) throw Error(fmt::format("tcp world: process index {} is negative", p));
    seen[static_cast<size_t>(p)] = true;
  }
  for (int p = 0; p < processes; ++p)
    if (!seen[static_cast<size_t>(p)]) throw Error(fmt::format("tcp world: process {} holds no rank", p));
  if (process < 0 || process >= processes)
    throw Error(fmt::format("tcp world: process {} is not one of the {} processes holding ranks", process, processes));
  if (!(options.timeout_s > 0)) throw Error(fmt::format("tcp world: timeout must be positive, got {}", options.timeout_s));

  auto st = std::make_shared<detail::TcpWorldState>();
  st->options = options;
  st->process = process;
  st->processes = processes;
  st->process_of_rank = process_of_rank;
  st->peers.resize(static_cast<size_t>(processes));

  int port = 0;
  const int listen_fd = net::listen_tcp(0, port);
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } close_listen{listen_fd};
  char node[256] = {};
  ::gethostname(node, sizeof(node) - 1);
  const auto key = [&](int p) { return fmt::format("{}/addr/{}", options.key_prefix, p); };
  store.set(key(process), fmt::format("{} {} {} {}", advertise_host, port, static_cast<long>(::getpid()),
                                      node[0] ? node : "?"));
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.connect_timeout_s));
  auto peer_name = [&](int p, const Address& a) {
    return fmt::format("process {}, pid {} on {}", p, a.pid, a.node);
  };
  // Connect to every lower process, accept every higher one.
  for (int q = 0; q < process; ++q) {
    const Address a = parse_address(store.get(key(q), options.connect_timeout_s));
    auto peer = std::make_unique<Peer>();
    peer->process = q;
    peer->name = peer_name(q, a);
    peer->fd = net::connect_tcp(peer->name, a.host, a.port, deadline, options.connect_timeout_s);
    Header hello;
    hello.type = FrameType::hello;
    hello.src = process;
    net::send_all(peer->fd, &hello, sizeof(hello), peer->name);
    st->peers[static_cast<size_t>(q)] = std::move(peer);
  }
  for (int accepted = 0; accepted < processes - 1 - process; ++accepted) {
    const int fd = net::accept_until(listen_fd, deadline);
    if (fd < 0) {
      std::vector<int> missing;
      for (int q = process + 1; q < processes; ++q)
        if (!st->peers[static_cast<size_t>(q)]) missing.push_back(q);
      for (auto& p : st->peers)
        if (p) ::close(p->fd);
      throw Error(fmt::format("tcp world: process {} waited {} s for processes {} to connect", process,
                              options.connect_timeout_s, ranks_text(missing)))
          .hint("every process of the job must start (check their output) and reach this one's address");
    }
    Header hello;
    if (!net::recv_all(fd, &hello, sizeof(hello), "a connecting process") || hello.magic != kMagic ||
        hello.type != FrameType::hello || hello.src <= process || hello.src >= processes ||
        st->peers[static_cast<size_t>(hello.src)]) {
      ::close(fd);
      --accepted;  // not one of ours: keep waiting
      continue;
    }
    const Address a = parse_address(store.get(key(hello.src), options.connect_timeout_s));
    auto peer = std::make_unique<Peer>();
    peer->process = hello.src;
    peer->name = peer_name(hello.src, a);
    peer->fd = fd;
    st->peers[static_cast<size_t>(hello.src)] = std::move(peer);
  }
  detail::TcpWorldState* raw = st.get();
  for (auto& p : st->peers)
    if (p) {
      Peer* peer = p.get();
      peer->receiver = std::thread([raw, peer] { raw->receive_loop(*peer); });
      peer->sender = std::thread([raw, peer] { raw->send_loop(*peer); });
    }
  return std::unique_ptr<TcpWorld>(new TcpWorld(std::move(st)));
}

TcpWorld::~TcpWorld() { state_->shutdown_peers(); }

int TcpWorld::world_size() const { return state_->world_size(); }
std::vector<int> TcpWorld::local_ranks() const { return state_->ranks_of(state_->process); }
int TcpWorld::process() const { return state_->process; }
int TcpWorld::processes() const { return state_->processes; }

Communicator& TcpWorld::communicator(int rank) {
  TP_ASSERT_MSG(rank >= 0 && rank < state_->world_size() && comms_[static_cast<size_t>(rank)],
                "communicator of a rank this process does not hold");
  return *comms_[static_cast<size_t>(rank)];
}

bool TcpWorld::aborted() const {
  std::lock_guard lock(state_->mutex);
  return state_->aborted;
}

std::string TcpWorld::abort_message() const {
  std::lock_guard lock(state_->mutex);
  return state_->abort_message;
}

void TcpWorld::abort(const std::string& message) {
  for (const auto& c : comms_)
    if (c) {
      c->abort(message);
      return;
    }
}

void TcpWorld::close() {
  if (state_->closing) return;
  // A barrier of every rank on a group id no program uses.
  CommGroup all{-1, {}, "world"};
  for (int r = 0; r < state_->world_size(); ++r) all.ranks.push_back(r);
  std::vector<std::shared_ptr<CommRequest>> reqs;
  for (int r : local_ranks()) reqs.push_back(communicator(r).start_barrier(all, 0));
  for (auto& r : reqs) r->wait();
  {
    std::unique_lock lock(state_->mutex);
    Header bye;
    bye.type = FrameType::bye;
    bye.src = state_->process;
    for (const auto& p : state_->peers)
      if (p) state_->enqueue(p->process, make_frame(bye, nullptr, 0));
    // Every peer says goodbye too (or its connection ends) before the connections close.
    const auto deadline = Clock::now() + std::chrono::duration<double>(state_->options.timeout_s);
    state_->cv.wait_until(lock, deadline, [&] {
      for (const auto& p : state_->peers)
        if (p && !p->bye && !p->gone) return false;
      return true;
    });
  }
  state_->shutdown_peers();
}

}  // namespace trainplan::executor
