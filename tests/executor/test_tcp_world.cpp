// The multi-process communicator (TcpWorld) with its "processes" as threads of this test, each
// joining the job through a TCP rendezvous on loopback: every collective and message gives
// the same bits as the in-process communicator on the same inputs (the fixed reduction order),
// whichever process holds a group's leader; a process that vanishes, an abort and a rank that
// never arrives are errors naming the rank, never hangs.
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "executor_test_util.hpp"
#include "runtime_fixture.hpp"
#include "trainplan/executor/in_process.hpp"
#include "trainplan/executor/tcp_world.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace {

// Joins `process_of_rank.size()` ranks held by P processes (threads), sharing one store.
struct Job {
  std::unique_ptr<TcpRendezvous> store = TcpRendezvous::serve("127.0.0.1", 0);
  std::vector<std::unique_ptr<TcpWorld>> worlds;  // by process

  Job(const std::vector<int>& process_of_rank, double timeout_s, const std::string& prefix) {
    int processes = 0;
    for (int p : process_of_rank) processes = std::max(processes, p + 1);
    worlds.resize(static_cast<size_t>(processes));
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(processes));
    for (int p = 0; p < processes; ++p)
      threads.emplace_back([&, p] {
        try {
          auto client = TcpRendezvous::connect("127.0.0.1", store->port(), 10);
          TcpWorldOptions o;
          o.timeout_s = timeout_s;
          o.connect_timeout_s = 20;
          o.key_prefix = prefix;
          worlds[static_cast<size_t>(p)] = TcpWorld::join(*client, p, process_of_rank, "127.0.0.1", o);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(p)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const std::string& e : errors) REQUIRE(e.empty());
  }
  TcpWorld& of_rank(int rank) {
    for (auto& w : worlds) {
      if (!w) continue;
      const auto local = w->local_ranks();
      if (std::find(local.begin(), local.end(), rank) != local.end()) return *w;
    }
    FAIL("no process holds rank " << rank);
    throw;
  }
  Communicator& comm(int rank) { return of_rank(rank).communicator(rank); }
};

// Every kind of operation on several groups; returns each rank's outputs as raw bytes.
std::vector<std::vector<std::byte>> exercise(const std::function<Communicator&(int)>& comm_of, int world) {
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(world));
  const std::vector<CommGroup> groups = {
      {0, {0, 1, 2, 3, 4, 5}, "world"},
      {1, {4, 1, 3}, "odd order, leader in the last process"},
      {2, {2, 5}, "pair"},
  };
  const std::vector<std::string> errors = run_ranks(world, [&](int r) {
    Device dev;
    Rng rng(100 + static_cast<uint64_t>(r));
    Communicator& c = comm_of(r);
    std::vector<Tensor> results;
    for (const CommGroup& g : groups) {
      const int me = g.index_of(r);
      if (me < 0) continue;
      const int n = g.size();
      const int64_t tag = 10 * g.id;
      // Sizes vary, so element counts do not line up by accident.
      Tensor ar = dev.put(DType::f32, {37}, random_values(rng, 37));
      Tensor ard = dev.put(DType::f64, {5}, random_values(rng, 5, 3.0));
      Tensor mx = dev.put(DType::f32, {9}, random_values(rng, 9));
      Tensor rs_in = dev.put(DType::f32, {static_cast<int64_t>(n) * 11}, random_values(rng, static_cast<size_t>(n) * 11));
      Tensor rs_out = dev.zeros({11}, DType::f32);
      Tensor ag_in = dev.put(DType::f64, {7}, random_values(rng, 7));
      Tensor ag_out = dev.zeros({static_cast<int64_t>(n) * 7});
      Tensor bc = dev.put(DType::f32, {13}, random_values(rng, 13));
      Tensor red = dev.put(DType::f32, {6}, random_values(rng, 6));
      std::vector<std::shared_ptr<CommRequest>> reqs;
      reqs.push_back(c.start_all_reduce(g, tag + 1, ar, ReduceOp::sum));
      reqs.push_back(c.start_all_reduce(g, tag + 2, ard, ReduceOp::sum));
      reqs.push_back(c.start_all_reduce(g, tag + 3, mx, ReduceOp::max));
      reqs.push_back(c.start_reduce_scatter(g, tag + 4, rs_out, rs_in, ReduceOp::sum));
      reqs.push_back(c.start_all_gather(g, tag + 5, ag_out, ag_in));
      reqs.push_back(c.start_broadcast(g, tag + 6, bc, g.ranks.back()));
      reqs.push_back(c.start_reduce(g, tag + 7, red, ReduceOp::sum, g.ranks[static_cast<size_t>(n / 2)]));
      reqs.push_back(c.start_barrier(g, tag + 8));
      // All-to-all with counts that vary per pair (some zero): member i sends (3 i + 5 j + id) % 4
      // elements to member j.
      auto count = [&](int i, int j) { return static_cast<int64_t>((3 * i + 5 * j + g.id) % 4); };
      std::vector<int64_t> send_counts, recv_counts;
      for (int j = 0; j < n; ++j) {
        send_counts.push_back(count(me, j));
        recv_counts.push_back(count(j, me));
      }
      int64_t total_send = 0, total_recv = 0;
      for (int j = 0; j < n; ++j) total_send += send_counts[static_cast<size_t>(j)], total_recv += recv_counts[static_cast<size_t>(j)];
      Tensor a2a_in = dev.put(DType::f32, {total_send}, random_values(rng, static_cast<size_t>(total_send)));
      Tensor a2a_out = dev.zeros({total_recv}, DType::f32);
      for (auto& q : reqs) q->wait();
      c.all_to_all_v(g, tag + 9, a2a_out, recv_counts, a2a_in, send_counts);
      for (const Tensor& t : {ar, ard, mx, rs_out, ag_out, bc, red, a2a_out}) results.push_back(t);
    }
    // A ring of messages (across processes and inside one), received before and after the send.
    Tensor msg = dev.put(DType::f32, {17}, random_values(rng, 17));
    Tensor got = dev.zeros({17}, DType::f32);
    auto recv = c.start_recv((r + world - 1) % world, 99, got);
    if (r % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    c.start_send((r + 1) % world, 99, msg)->wait();
    recv->wait();
    results.push_back(got);
    auto& bytes = out[static_cast<size_t>(r)];
    for (const Tensor& t : results) {
      const auto* p = static_cast<const std::byte*>(t.data());
      bytes.insert(bytes.end(), p, p + t.size_bytes());
    }
  });
  for (const std::string& e : errors) REQUIRE(e.empty());
  return out;
}

}  // namespace

TEST_CASE("executor: the tcp communicator gives the in-process communicator's bits for every operation",
          "[executor][communicator][tcp]") {
  const int world = 6;
  InProcessWorld reference(world, {.timeout_s = 20});
  const auto expected = exercise([&](int r) -> Communicator& { return reference.communicator(r); }, world);
  // One rank per process, and several ranks per process (leaders local and remote).
  for (const std::vector<int>& layout : {std::vector<int>{0, 1, 2, 3, 4, 5}, std::vector<int>{0, 0, 1, 1, 2, 2},
                                         std::vector<int>{0, 0, 0, 1, 1, 1}}) {
    Job job(layout, 20, "exercise");
    const auto got = exercise([&](int r) -> Communicator& { return job.comm(r); }, world);
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << ", processes " << job.worlds.size());
      CHECK(got[static_cast<size_t>(r)] == expected[static_cast<size_t>(r)]);
    }
    std::vector<std::thread> closers;
    for (auto& w : job.worlds) closers.emplace_back([&w] { w->close(); });
    for (auto& t : closers) t.join();
    for (auto& w : job.worlds) CHECK_FALSE(w->aborted());
  }
}

TEST_CASE("executor: a process that vanishes fails the others' waits at once, naming its ranks",
          "[executor][communicator][tcp]") {
  Job job({0, 0, 1, 1, 2, 2}, 60, "vanish");
  CommGroup all{0, {0, 1, 2, 3, 4, 5}, "world"};
  Device dev;
  Tensor x = dev.put(DType::f32, {4}, {1, 2, 3, 4});
  auto req = job.comm(0).start_all_reduce(all, 1, x, ReduceOp::sum);
  job.worlds[1].reset();  // process 1 (ranks 2, 3) goes away without a goodbye
  REQUIRE_ERROR_CONTAINS(req->wait(), "ranks 2,3 (process 1");
  // The disconnect, not the 60 s wait timeout, ends the waits: the message says which.
  REQUIRE_ERROR_CONTAINS(job.comm(4).barrier(all, 2), "disconnected without saying goodbye: the process died or was killed");
  CHECK(job.worlds[0]->aborted());
}

TEST_CASE("executor: an abort in one process reaches every process with its message", "[executor][communicator][tcp]") {
  Job job({0, 1, 2}, 60, "abort");
  CommGroup all{0, {0, 1, 2}, "world"};
  auto barrier = job.comm(0).start_barrier(all, 1);
  job.comm(2).abort("the disk is full");
  REQUIRE_ERROR_CONTAINS(barrier->wait(), "rank 2 failed: the disk is full");
  Device dev;
  Tensor x = dev.zeros({2}, DType::f32);
  REQUIRE_ERROR_CONTAINS(job.comm(1).recv(0, 5, x), "rank 2 failed: the disk is full");
}

TEST_CASE("executor: a tcp collective some rank never joins times out naming the missing ranks",
          "[executor][communicator][tcp]") {
  Job job({0, 0, 1}, 0.3, "timeout");
  CommGroup all{0, {0, 1, 2}, "world"};
  Device dev;
  Tensor x = dev.put(DType::f32, {1}, {1});
  auto r0 = job.comm(0).start_all_reduce(all, 7, x, ReduceOp::sum);
  REQUIRE_ERROR_CONTAINS(r0->wait(), "ranks 1,2 have not arrived");
  Tensor y = dev.put(DType::f32, {1}, {1});
  REQUIRE_ERROR_CONTAINS(job.comm(2).all_reduce(all, 8, y, ReduceOp::sum), "no result yet from its leader, rank 0");
  // Members that disagree on the size are told so.
  Tensor a = dev.put(DType::f32, {2}, {1, 2});
  Tensor b = dev.put(DType::f32, {3}, {1, 2, 3});
  CommGroup pair{1, {0, 2}, "pair"};
  auto ra = job.comm(0).start_all_reduce(pair, 9, a, ReduceOp::sum);
  auto rb = job.comm(2).start_all_reduce(pair, 9, b, ReduceOp::sum);
  REQUIRE_ERROR_CONTAINS(rb->wait(), "members pass different sizes");
  REQUIRE_ERROR_CONTAINS(ra->wait(), "members pass different sizes");
}

TEST_CASE("executor: a MoE plan with ep 2 over tcp (one process per rank) leaves the in-process run's bits",
          "[executor][communicator][tcp][moe]") {
  // The expert all-to-alls (all_to_all_v over eager sends) and the expert gradients' reduction
  // cross the processes: the same losses and the same checkpoint shard bytes as in-process.
  RunSpec s;
  s.model = "tiny-moe";
  s.dp = 2, s.ep = 2;
  const int steps = 2;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "trainplan-moe-tcp";
  std::filesystem::remove_all(dir);
  auto in_process = make_runtime(s);
  std::vector<double> expected;
  for (int i = 0; i < steps; ++i) expected.push_back(in_process->step().loss);
  in_process->save_checkpoint((dir / "in-process").string());

  Job job({0, 1}, 20, "moe");
  std::vector<std::vector<double>> losses(2);
  const std::vector<std::string> errors = run_ranks(2, [&](int p) {
    RuntimeOptions o = test_options();
    o.world = std::shared_ptr<CommWorld>(job.worlds[static_cast<size_t>(p)].get(), [](CommWorld*) {});
    auto rt = make_runtime(s, o);
    for (int i = 0; i < steps; ++i) losses[static_cast<size_t>(p)].push_back(rt->step().loss);
    rt->save_checkpoint((dir / "tcp").string());
  });
  for (const std::string& e : errors) REQUIRE(e.empty());
  CHECK(losses[0] == expected);
  CHECK(losses[1] == expected);
  auto bytes = [](const std::filesystem::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  for (int r = 0; r < 2; ++r) {
    const std::string shard = fmt::format("rank-{:05d}.bin", r);
    INFO(shard);
    const std::vector<char> want = bytes(dir / "in-process" / shard);
    CHECK(!want.empty());
    CHECK(bytes(dir / "tcp" / shard) == want);
  }
  std::vector<std::thread> closers;
  for (auto& w : job.worlds) closers.emplace_back([&w] { w->close(); });
  for (auto& t : closers) t.join();
  std::filesystem::remove_all(dir);
}
