// The NCCL communicator (nccl_communicator.hpp). One State per rank holds the communicators
// created so far (per group, per ordered pair of ranks for messages), each with its own CUDA
// stream. Keys in the rendezvous store are prefixed with "nccl/<instance>/", the instance being
// how many NCCL communicators this rank created before on the same store (equal on all ranks
// when they create them in the same order), so ids of a previous communicator are never reused.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "backend_impl.hpp"
#include "check.hpp"
#include "kernels.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/nccl_communicator.hpp"

// ncclInProgress is the normal answer of a non-blocking communicator: the call goes on in the
// background, which the caller then polls with ncclCommGetAsyncError.
#define TP_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    const ncclResult_t tp_status_ = (call);                                                        \
    if (tp_status_ != ncclSuccess && tp_status_ != ncclInProgress)                                 \
      ::trainplan::executor::cuda::throw_nccl_error(                                               \
          static_cast<int>(tp_status_), #call, __FILE__, __LINE__,                                 \
          std::string(ncclGetErrorString(tp_status_)) + "; " + ncclGetLastError(nullptr));         \
  } while (0)

namespace trainplan::executor {
namespace {

using cuda::CudaBackend;
using cuda::DeviceGuard;

double now_s() { return Backend::now_s(); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
  }
  return ncclFloat32;
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

std::string ranks_csv(const std::vector<int>& ranks) {
  std::vector<std::string> r;
  for (int x : ranks) r.push_back(std::to_string(x));
  return join(r, ",");
}

struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::string name;  // "dp group 3 (ranks 0,2)", "messages from rank 0 to rank 1"
  bool aborted = false;
  uint64_t seen_allocations = 0;
};

// A message staging buffer whose send is still in flight.
struct InFlightSend {
  std::shared_ptr<Buffer> staging;
  cudaEvent_t sent = nullptr;
};

// Everything one rank's communicator owns; requests keep it alive.
struct State {
  Rendezvous& store;
  int rank = 0, world = 1;
  CudaBackend* backend = nullptr;
  cudaStream_t compute = nullptr;
  NcclOptions options;
  std::string prefix;  // "nccl/<instance>/"
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<NcclComm>> comms;
  std::vector<InFlightSend> sends;
  cudaEvent_t ready = nullptr;  // marks the compute stream's position before an operation
  int64_t* pinned_tags = nullptr;  // header slots of receives
  size_t next_tag_slot = 0;
  bool aborted = false;
  std::string abort_message;
  double last_store_poll_s = 0;
  static constexpr size_t kTagSlots = 4096;

  State(Rendezvous& s, int r, int w, CudaBackend* be, cudaStream_t c, const NcclOptions& o)
      : store(s), rank(r), world(w), backend(be), compute(c), options(o) {}

  ~State() {
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != backend->device() &&
                          cudaSetDevice(backend->device()) == cudaSuccess;
    // Sends still in flight: give the receivers the timeout, then abort.
    const double deadline = now_s() + std::min(options.timeout_s, 10.0);
    for (InFlightSend& s : sends) {
      while (!aborted && cudaEventQuery(s.sent) == cudaErrorNotReady && now_s() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (cudaEventQuery(s.sent) == cudaErrorNotReady) abort_all("destroyed with a send in flight");
    }
    for (auto& [key, c] : comms) {
      if (!c->aborted) {
        // Finalize flushes the communicator's work; non-blocking, so poll it (bounded).
        ncclResult_t state = ncclCommFinalize(c->comm);
        const double end = now_s() + std::min(options.timeout_s, 10.0);
        while (state == ncclInProgress && now_s() < end) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          if (ncclCommGetAsyncError(c->comm, &state) != ncclSuccess) break;
        }
        if (state == ncclSuccess)
          (void)ncclCommDestroy(c->comm);
        else
          (void)ncclCommAbort(c->comm);
      }
      if (c->stream) (void)cudaStreamDestroy(c->stream);
    }
    for (InFlightSend& s : sends) (void)cudaEventDestroy(s.sent);
    if (ready) (void)cudaEventDestroy(ready);
    if (pinned_tags) (void)cudaFreeHost(pinned_tags);
    if (switched) (void)cudaSetDevice(previous);
  }

  // Aborts every communicator of this rank (no throw). Caller may hold the mutex or not.
  void abort_all(const std::string& message) {
    if (!aborted) {
      aborted = true;
      abort_message = message;
      try {
        store.set(prefix + "abort", fmt::format("rank {}: {}", rank, message));
      } catch (const Error&) {
        // The store may be gone with the failing peer; the local abort still happens.
      }
    }
    for (auto& [key, c] : comms)
      if (!c->aborted) {
        (void)ncclCommAbort(c->comm);
        c->aborted = true;
      }
  }

  [[noreturn]] void fail(const std::string& message) {
    abort_all(message);
    throw Error(fmt::format("rank {}: {}", rank, message))
        .hint("NCCL communicators of this rank were aborted; a peer may have died, run out of memory or issued "
              "collectives in another order");
  }

  // Throws when this rank or another one aborted, or a communicator reports an error.
  void check_health(const NcclComm* c, const std::string& what) {
    if (aborted) throw Error(fmt::format("rank {}: {}: the job was aborted: {}", rank, what, abort_message));
    if (c) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress)
        fail(fmt::format("{}: NCCL error on {}: {}; {}", what, c->name, ncclGetErrorString(state),
                         ncclGetLastError(c->comm)));
    }
    const double now = now_s();
    if (now - last_store_poll_s > 0.5) {
      last_store_poll_s = now;
      if (std::optional<std::string> other = store.try_get(prefix + "abort")) {
        abort_all(*other);
        throw Error(fmt::format("rank {}: {}: another rank aborted the job: {}", rank, what, *other));
      }
    }
  }

  // Polls a non-blocking communicator until its last call has been enqueued (or it is ready).
  void wait_enqueued(NcclComm& c, const std::string& what) {
    const double deadline = now_s() + options.timeout_s;
    while (true) {
      ncclResult_t state = ncclSuccess;
      TP_NCCL_CHECK(ncclCommGetAsyncError(c.comm, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        fail(fmt::format("{}: NCCL error on {}: {}; {}", what, c.name, ncclGetErrorString(state),
                         ncclGetLastError(c.comm)));
      if (now_s() > deadline) fail(fmt::format("{} did not finish within {} s", what, options.timeout_s));
      check_health(nullptr, what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // A communicator's creation happens in three steps, so that creating several at once cannot
  // deadlock: (1) member 0 publishes a fresh NCCL unique id (never waits), (2) every member
  // reads the id and starts the non-blocking init, (3) every member waits for its inits.
  struct Pending {
    std::string key, name;
    std::vector<int> members;
  };

  void publish_id(const Pending& p) {
    if (p.members.front() != rank) return;
    ncclUniqueId id{};
    TP_NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(prefix + "id/" + p.key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  }

  NcclComm& start_init(const Pending& p) {
    const int me = static_cast<int>(std::find(p.members.begin(), p.members.end(), rank) - p.members.begin());
    TP_ASSERT(me < static_cast<int>(p.members.size()));
    // NCCL cannot put two ranks of one communicator on one GPU: say so instead of hanging.
    std::map<std::string, int> gpu_of;
    for (int r : p.members) {
      const std::string gpu = store.get(prefix + fmt::format("gpu/{}", r), options.timeout_s);
      auto [pos, fresh] = gpu_of.emplace(gpu, r);
      if (!fresh)
        throw Error(fmt::format("rank {}: {}: ranks {} and {} are on the same GPU ({}); NCCL runs one rank per GPU",
                                rank, p.name, pos->second, r, gpu))
            .hint("run as many ranks as GPUs, or run the plan's ranks with the in-process communicator, which may "
                  "share GPUs");
    }
    ncclUniqueId id{};
    const std::string bytes = store.get(prefix + "id/" + p.key, options.timeout_s);
    if (bytes.size() != sizeof(id)) throw Error(fmt::format("rank {}: {}: corrupt NCCL id in the store", rank, p.name));
    std::memcpy(&id, bytes.data(), sizeof(id));
    auto c = std::make_unique<NcclComm>();
    c->name = p.name;
    DeviceGuard guard(backend->device());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    TP_NCCL_CHECK(ncclCommInitRankConfig(&c->comm, static_cast<int>(p.members.size()), id, me, &config));
    TP_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    NcclComm& ref = *c;
    comms.emplace(p.key, std::move(c));
    return ref;
  }

  void wait_ready(NcclComm& c, const std::vector<int>& members) {
    try {
      wait_enqueued(c, fmt::format("creating the NCCL communicator of {} (ranks {})", c.name, ranks_csv(members)));
    } catch (...) {
      c.aborted = true;  // fail() aborted it already
      throw;
    }
  }

  // Creates the given communicators together (steps 1-3 over all of them).
  void create(const std::vector<Pending>& list) {
    std::vector<Pending> fresh;
    for (const Pending& p : list)
      if (!comms.count(p.key) && std::find_if(fresh.begin(), fresh.end(), [&](const Pending& q) { return q.key == p.key; }) == fresh.end())
        fresh.push_back(p);
    for (const Pending& p : fresh) publish_id(p);
    std::vector<NcclComm*> started;
    for (const Pending& p : fresh) started.push_back(&start_init(p));
    for (size_t i = 0; i < fresh.size(); ++i) wait_ready(*started[i], fresh[i].members);
  }

  // The communicator of `members` (global ranks in NCCL rank order), created on first use when
  // it was not created up front; creation on first use waits for every member to use it too.
  NcclComm& comm(const std::string& key, const std::vector<int>& members, const std::string& name) {
    auto it = comms.find(key);
    if (it == comms.end()) {
      create({Pending{key, name, members}});
      it = comms.find(key);
    }
    if (it->second->aborted) throw Error(fmt::format("rank {}: {} was aborted: {}", rank, name, abort_message));
    return *it->second;
  }

  static Pending group_comm(const CommGroup& g) {
    return Pending{fmt::format("group/{}/{}", g.id, ranks_csv(g.ranks)), g.describe(), g.ranks};
  }
  static Pending pair_comm(int src, int dst) {
    return Pending{fmt::format("p2p/{}/{}", src, dst), fmt::format("messages from rank {} to rank {}", src, dst),
                   {src, dst}};
  }

  // The operation's stream waits for the compute stream's work so far and for allocations.
  void order_after_compute(NcclComm& c) {
    TP_CUDA_CHECK(cudaEventRecord(ready, compute));
    TP_CUDA_CHECK(cudaStreamWaitEvent(c.stream, ready, 0));
    backend->context()->order_after_allocations(c.stream, c.seen_allocations);
  }

  void reap_sends() {
    sends.erase(std::remove_if(sends.begin(), sends.end(),
                               [](InFlightSend& s) {
                                 if (cudaEventQuery(s.sent) != cudaSuccess) return false;
                                 (void)cudaEventDestroy(s.sent);
                                 return true;
                               }),
                sends.end());
  }
};

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(std::shared_ptr<State> state, NcclComm* comm, cudaEvent_t done, std::string what,
              std::function<void()> on_complete)
      : state_(std::move(state)), comm_(comm), done_(done), what_(std::move(what)), on_complete_(std::move(on_complete)) {}
  ~NcclRequest() override {
    if (done_) (void)cudaEventDestroy(done_);
  }

  bool test() override {
    if (completed_) return true;
    std::lock_guard lock(state_->mutex);
    state_->check_health(comm_, what_);
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    TP_CUDA_CHECK(q);
    completed_ = true;
    completed_at_s_ = now_s();
    if (on_complete_) on_complete_();
    return true;
  }

  void wait() override {
    const double deadline = now_s() + state_->options.timeout_s;
    auto pause = std::chrono::microseconds(20);
    while (!test()) {
      if (now_s() > deadline) {
        std::lock_guard lock(state_->mutex);
        state_->fail(fmt::format("{} did not complete within {} s", what_, state_->options.timeout_s));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  double completed_at_s() const override { return completed_at_s_; }
  std::string describe() const override { return what_; }

 private:
  std::shared_ptr<State> state_;
  NcclComm* comm_;
  cudaEvent_t done_;
  std::string what_;
  std::function<void()> on_complete_;
  bool completed_ = false;
  double completed_at_s_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Rendezvous& store, int rank, int world, CudaBackend& backend, Stream& compute,
                   const NcclOptions& options) {
    if (world < 1 || rank < 0 || rank >= world)
      throw Error(fmt::format("nccl communicator: rank {} is outside the world of {} ranks", rank, world));
    if (!(options.timeout_s > 0)) throw Error(fmt::format("nccl communicator: timeout must be positive, got {}", options.timeout_s));
    DeviceGuard guard(backend.device());
    state_ = std::make_shared<State>(store, rank, world, &backend, backend.stream_of(compute).handle(), options);
    State& s = *state_;
    TP_CUDA_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
    TP_CUDA_CHECK(cudaMallocHost(&s.pinned_tags, State::kTagSlots * sizeof(int64_t)));
    // This rank's instance number on the store, then its GPU identity (host and PCI bus).
    const std::string count_key = fmt::format("nccl/instances/{}", rank);
    const int instance = [&] {
      std::optional<std::string> before = store.try_get(count_key);
      return before ? std::stoi(*before) + 1 : 0;
    }();
    store.set(count_key, std::to_string(instance));
    s.prefix = fmt::format("nccl/{}/", instance);
    char bus[64] = {};
    TP_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), backend.device()));
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
    store.set(s.prefix + fmt::format("gpu/{}", rank), fmt::format("{} {}", host, bus));
    // The communicators named up front, created together (cannot deadlock, see State::create).
    std::vector<State::Pending> up_front;
    for (const CommGroup& g : options.groups)
      if (g.index_of(rank) >= 0) up_front.push_back(State::group_comm(g));
    for (int peer : options.peers) {
      if (peer < 0 || peer >= world || peer == rank)
        throw Error(fmt::format("nccl communicator: peer {} of rank {} is not another rank of the world of {}", peer,
                                rank, world));
      // Both directions, in the same order on both ranks (the lower rank's sends first).
      const int lo = std::min(rank, peer), hi = std::max(rank, peer);
      up_front.push_back(State::pair_comm(lo, hi));
      up_front.push_back(State::pair_comm(hi, lo));
    }
    std::lock_guard lock(s.mutex);
    s.create(up_front);
  }

  int rank() const override { return state_->rank; }
  int world_size() const override { return state_->world; }
  double timeout_s() const override { return state_->options.timeout_s; }

  std::shared_ptr<CommRequest> start_all_reduce(const CommGroup& g, int64_t tag, const Tensor& data,
                                                ReduceOp op) override {
    return collective("all_reduce", g, tag, {&data}, [&](NcclComm& c) {
      TP_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), static_cast<size_t>(data.numel()), nccl_type(data.dtype()),
                                  nccl_op(op), c.comm, c.stream));
    });
  }
  std::shared_ptr<CommRequest> start_reduce_scatter(const CommGroup& g, int64_t tag, const Tensor& out,
                                                    const Tensor& in, ReduceOp op) override {
    if (in.numel() != out.numel() * g.size() || in.dtype() != out.dtype())
      throw Error(fmt::format("rank {}: reduce_scatter tag {} on {}: in {} must hold {} chunks of out {}", rank(), tag,
                              g.describe(), in.describe(), g.size(), out.describe()));
    return collective("reduce_scatter", g, tag, {&out, &in}, [&](NcclComm& c) {
      TP_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()), nccl_type(out.dtype()),
                                      nccl_op(op), c.comm, c.stream));
    });
  }
  std::shared_ptr<CommRequest> start_all_gather(const CommGroup& g, int64_t tag, const Tensor& out,
                                                const Tensor& in) override {
    if (out.numel() != in.numel() * g.size() || in.dtype() != out.dtype())
      throw Error(fmt::format("rank {}: all_gather tag {} on {}: out {} must hold {} chunks of in {}", rank(), tag,
                              g.describe(), out.describe(), g.size(), in.describe()));
    return collective("all_gather", g, tag, {&out, &in}, [&](NcclComm& c) {
      TP_NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()), c.comm,
                                  c.stream));
    });
  }
  std::shared_ptr<CommRequest> start_broadcast(const CommGroup& g, int64_t tag, const Tensor& data, int root) override {
    const int root_index = root_of(g, root, "broadcast", tag);
    return collective("broadcast", g, tag, {&data}, [&](NcclComm& c) {
      TP_NCCL_CHECK(ncclBroadcast(data.data(), data.data(), static_cast<size_t>(data.numel()), nccl_type(data.dtype()),
                                  root_index, c.comm, c.stream));
    });
  }
  std::shared_ptr<CommRequest> start_reduce(const CommGroup& g, int64_t tag, const Tensor& data, ReduceOp op,
                                            int root) override {
    const int root_index = root_of(g, root, "reduce", tag);
    return collective("reduce", g, tag, {&data}, [&](NcclComm& c) {
      TP_NCCL_CHECK(ncclReduce(data.data(), data.data(), static_cast<size_t>(data.numel()), nccl_type(data.dtype()),
                               nccl_op(op), root_index, c.comm, c.stream));
    });
  }
  std::shared_ptr<CommRequest> start_barrier(const CommGroup& g, int64_t tag) override {
    auto token = state_->backend->allocate(sizeof(float));
    std::shared_ptr<Buffer> keep = token;
    return collective(
        "barrier", g, tag, {},
        [&](NcclComm& c) {
          TP_CUDA_CHECK(cudaMemsetAsync(token->data(), 0, sizeof(float), c.stream));
          TP_NCCL_CHECK(ncclAllReduce(token->data(), token->data(), 1, ncclFloat32, ncclSum, c.comm, c.stream));
        },
        [keep] {});
  }

  std::shared_ptr<CommRequest> start_send(int peer, int64_t tag, const Tensor& data) override {
    State& s = *state_;
    std::lock_guard lock(s.mutex);
    const std::string what = fmt::format("send tag {} from rank {} to rank {}", tag, s.rank, peer);
    check_peer(peer, what);
    check_tensor(data, what, "data");
    s.check_health(nullptr, what);
    s.reap_sends();
    NcclComm& c = pair(s.rank, peer);
    DeviceGuard guard(s.backend->device());
    const size_t bytes = data.size_bytes();
    std::shared_ptr<Buffer> staging = s.backend->allocate(bytes + sizeof(int64_t));
    s.order_after_compute(c);
    // The tag header by a one-thread kernel: a copy from pageable memory would block the host.
    cuda::write_int64(static_cast<int64_t*>(staging->data()), tag, c.stream);
    if (bytes > 0)
      TP_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(staging->data()) + sizeof(int64_t), data.data(), bytes,
                                    cudaMemcpyDeviceToDevice, c.stream));
    cudaEvent_t copied = event(c);
    TP_NCCL_CHECK(ncclSend(staging->data(), bytes + sizeof(int64_t), ncclUint8, 1, c.comm, c.stream));
    s.wait_enqueued(c, what);
    InFlightSend f{staging, nullptr};
    TP_CUDA_CHECK(cudaEventCreateWithFlags(&f.sent, cudaEventDisableTiming));
    TP_CUDA_CHECK(cudaEventRecord(f.sent, c.stream));
    s.sends.push_back(f);
    // The send is complete for the caller once its data is copied (eager semantics).
    return std::make_shared<NcclRequest>(state_, &c, copied, what, nullptr);
  }

  std::shared_ptr<CommRequest> start_recv(int peer, int64_t tag, const Tensor& data) override {
    State& s = *state_;
    std::lock_guard lock(s.mutex);
    const std::string what = fmt::format("recv tag {} from rank {} to rank {}", tag, peer, s.rank);
    check_peer(peer, what);
    check_tensor(data, what, "data");
    s.check_health(nullptr, what);
    NcclComm& c = pair(peer, s.rank);
    DeviceGuard guard(s.backend->device());
    const size_t bytes = data.size_bytes();
    std::shared_ptr<Buffer> staging = s.backend->allocate(bytes + sizeof(int64_t));
    s.order_after_compute(c);
    TP_NCCL_CHECK(ncclRecv(staging->data(), bytes + sizeof(int64_t), ncclUint8, 0, c.comm, c.stream));
    s.wait_enqueued(c, what);
    if (bytes > 0)
      TP_CUDA_CHECK(cudaMemcpyAsync(data.data(), static_cast<const std::byte*>(staging->data()) + sizeof(int64_t),
                                    bytes, cudaMemcpyDeviceToDevice, c.stream));
    int64_t* slot = s.pinned_tags + (s.next_tag_slot++ % State::kTagSlots);
    TP_CUDA_CHECK(cudaMemcpyAsync(slot, staging->data(), sizeof(int64_t), cudaMemcpyDeviceToHost, c.stream));
    cudaEvent_t done = event(c);
    State* raw = state_.get();
    return std::make_shared<NcclRequest>(state_, &c, done, what, [raw, slot, tag, what, staging]() mutable {
      staging.reset();
      if (*slot != tag)
        raw->fail(fmt::format("{}: the message that arrived has tag {}; messages between two ranks must be received "
                              "in the order they were sent",
                              what, *slot));
    });
  }

  // MoE expert parallelism runs on the CPU backend; its all-to-all is not an NCCL operation here.
  std::shared_ptr<CommRequest> start_all_to_all_v(const CommGroup& g, int64_t tag, const Tensor&,
                                                  std::span<const int64_t>, const Tensor&,
                                                  std::span<const int64_t>) override {
    throw Error(fmt::format("NCCL communicator: all_to_all_v (tag {} on {}) is not implemented: MoE expert "
                            "parallelism runs on the CPU backend",
                            tag, g.describe()))
        .hint("execute MoE plans with --backend cpu");
  }
  bool wait_any(std::span<const std::shared_ptr<CommRequest>> requests, double timeout_s) override {
    const double deadline = now_s() + timeout_s;
    auto pause = std::chrono::microseconds(20);
    while (true) {
      for (const auto& r : requests)
        if (r->test()) return true;
      if (now_s() > deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  void abort(const std::string& message) override {
    std::lock_guard lock(state_->mutex);
    state_->abort_all(message);
  }

 private:
  void check_peer(int peer, const std::string& what) const {
    if (peer < 0 || peer >= state_->world || peer == state_->rank)
      throw Error(fmt::format("rank {}: {}: peer {} is not another rank of the world of {}", state_->rank, what, peer,
                              state_->world));
  }
  void check_tensor(const Tensor& t, const std::string& what, std::string_view arg) const {
    if (!t.defined()) throw Error(fmt::format("rank {}: {}: {} is undefined", state_->rank, what, arg));
    if (t.buffer()->backend_name() != "cuda")
      throw Error(fmt::format("rank {}: {}: {} lives on backend \"{}\"; the NCCL communicator moves cuda tensors",
                              state_->rank, what, arg, t.buffer()->backend_name()));
  }
  int root_of(const CommGroup& g, int root, std::string_view op, int64_t tag) const {
    const int index = g.index_of(root);
    if (index < 0)
      throw Error(fmt::format("rank {}: {} tag {}: root {} is not a member of {}", state_->rank, op, tag, root,
                              g.describe()));
    return index;
  }
  cudaEvent_t event(NcclComm& c) const {
    cudaEvent_t e = nullptr;
    TP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TP_CUDA_CHECK(cudaEventRecord(e, c.stream));
    return e;
  }
  NcclComm& pair(int src, int dst) {
    const State::Pending p = State::pair_comm(src, dst);
    return state_->comm(p.key, p.members, p.name);
  }

  template <class Issue>
  std::shared_ptr<CommRequest> collective(std::string_view op, const CommGroup& g, int64_t tag,
                                          std::initializer_list<const Tensor*> tensors, Issue&& issue,
                                          std::function<void()> on_complete = nullptr) {
    State& s = *state_;
    std::lock_guard lock(s.mutex);
    const std::string what = fmt::format("{} tag {} on {}", op, tag, g.describe());
    if (g.index_of(s.rank) < 0)
      throw Error(fmt::format("rank {}: {}: this rank is not a member of the group", s.rank, what));
    for (const Tensor* t : tensors) check_tensor(*t, what, "a tensor");
    s.check_health(nullptr, what);
    const State::Pending p = State::group_comm(g);
    NcclComm& c = s.comm(p.key, p.members, p.name);
    DeviceGuard guard(s.backend->device());
    s.order_after_compute(c);
    issue(c);
    s.wait_enqueued(c, what);
    return std::make_shared<NcclRequest>(state_, &c, event(c), what, std::move(on_complete));
  }

  std::shared_ptr<State> state_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous& store, int rank, int world_size, Backend& backend,
                                                     Stream& compute, const NcclOptions& options) {
  CudaBackend* be = cuda::as_cuda(backend);
  if (!be)
    throw Error(fmt::format("nccl communicator: backend \"{}\" is not a cuda backend", backend.name()))
        .hint("NCCL moves GPU memory; the in-process communicator serves the cpu backend");
  return std::make_unique<NcclCommunicator>(store, rank, world_size, *be, compute, options);
}

std::string nccl_version() {
  int v = 0;
  TP_NCCL_CHECK(ncclGetVersion(&v));
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z for versions >= 2.9.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

}  // namespace trainplan::executor
