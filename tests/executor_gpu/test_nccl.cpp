// The NCCL communicator on the GPUs of this machine (one rank thread per GPU): every
// collective against its definition, eager sends in a ring, the order check of messages, and
// the failure paths: a peer that never arrives ends in an error within the timeout, and two
// ranks on one GPU are refused by name.
#include <chrono>
#include <cmath>
#include <thread>

#include "gpu_test_util.hpp"
#include "trainplan/executor/nccl_communicator.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::gpu_testing;

namespace {

int world_of_gpus() { return std::min(cuda_device_count(), 8); }

// Rank r's value at element i: distinct per rank and element, exact in f32 sums.
double value(int rank, int64_t i) { return static_cast<double>((rank + 1) * 1000 + i % 997); }

}  // namespace

TEST_CASE("nccl: collectives on the GPUs present match their definitions", "[cuda][nccl]") {
  const int n = world_of_gpus();
  INFO(n << " rank(s), NCCL " << nccl_version());
  CommGroup world{0, {}, "world"};
  for (int r = 0; r < n; ++r) world.ranks.push_back(r);
  const int64_t k = 1025;  // elements per rank's chunk
  run_rank_threads(n, [&](int rank, Rendezvous& store) {
    auto be = make_backend("cuda");
    Stream& s = be->default_stream();
    NcclOptions o;
    o.timeout_s = 60;
    o.groups = {world};  // created up front; the messages' pairs below are created up front too
    if (n > 1) o.peers = {(rank + 1) % n, (rank + n - 1) % n};
    if (n == 2) o.peers = {1 - rank};
    auto comm = make_nccl_communicator(store, rank, n, *be, s, o);
    CHECK(comm->rank() == rank);
    CHECK(comm->world_size() == n);
    std::vector<double> mine(static_cast<size_t>(k)), sum(static_cast<size_t>(k), 0.0), max(static_cast<size_t>(k), 0.0);
    for (int64_t i = 0; i < k; ++i) {
      mine[static_cast<size_t>(i)] = value(rank, i);
      for (int r = 0; r < n; ++r) {
        sum[static_cast<size_t>(i)] += value(r, i);
        max[static_cast<size_t>(i)] = std::max(max[static_cast<size_t>(i)], value(r, i));
      }
    }
    Tensor t = be->empty(DType::f32, {k});
    be->upload_values(s, t, mine);
    comm->all_reduce(world, 1, t, ReduceOp::sum);
    CHECK(be->download_values(s, t) == sum);
    be->upload_values(s, t, mine);
    comm->all_reduce(world, 2, t, ReduceOp::max);
    CHECK(be->download_values(s, t) == max);

    // reduce_scatter: member i gets the sum of chunk i of everyone's input.
    Tensor in = be->empty(DType::f32, {n * k}), out = be->empty(DType::f32, {k});
    std::vector<double> big(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n * k; ++i) big[static_cast<size_t>(i)] = value(rank, i);
    be->upload_values(s, in, big);
    comm->reduce_scatter(world, 3, out, in, ReduceOp::sum);
    std::vector<double> want_rs(static_cast<size_t>(k), 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int r = 0; r < n; ++r) want_rs[static_cast<size_t>(i)] += value(r, rank * k + i);
    CHECK(be->download_values(s, out) == want_rs);

    // all_gather: chunk i of the output is member i's input.
    be->upload_values(s, out, mine);
    comm->all_gather(world, 4, in, out);
    std::vector<double> want_ag;
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < k; ++i) want_ag.push_back(value(r, i));
    CHECK(be->download_values(s, in) == want_ag);

    // broadcast from the last rank; reduce onto rank 0 (others keep their data).
    be->upload_values(s, t, mine);
    comm->broadcast(world, 5, t, n - 1);
    std::vector<double> last(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) last[static_cast<size_t>(i)] = value(n - 1, i);
    CHECK(be->download_values(s, t) == last);
    Tensor half = be->empty(DType::f16, {k});
    be->upload_values(s, half, mine);
    comm->reduce(world, 6, half, ReduceOp::sum, 0);
    const std::vector<double> got_reduce = be->download_values(s, half);
    for (int64_t i = 0; i < k; i += 101) {
      const double want = rank == 0 ? sum[static_cast<size_t>(i)] : mine[static_cast<size_t>(i)];
      CHECK(got_reduce[static_cast<size_t>(i)] == Approx(want).epsilon(2e-3));
    }
    comm->barrier(world, 7);

    // Eager sends around the ring: everyone sends before receiving (rendezvous sends would
    // deadlock here, and so would creating the pairs' communicators at first use).
    if (n > 1) {
      Tensor send = be->empty(DType::f32, {k}), recv = be->empty(DType::f32, {k});
      be->upload_values(s, send, mine);
      auto sreq = comm->start_send((rank + 1) % n, 8, send);
      sreq->wait();
      comm->recv((rank + n - 1) % n, 8, recv);
      std::vector<double> prev(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) prev[static_cast<size_t>(i)] = value((rank + n - 1) % n, i);
      CHECK(be->download_values(s, recv) == prev);
    }
  });
}

TEST_CASE("nccl: a peer that never arrives ends the wait with an error instead of a hang", "[cuda][nccl]") {
  const int n = std::max(2, world_of_gpus());
  CommGroup world{0, {}, "world"};
  for (int r = 0; r < n; ++r) world.ranks.push_back(r);
  // Only rank 0 runs: creating the group's communicator waits for the others' GPU identity in
  // the store and gives up after the timeout, aborting.
  auto store = make_in_process_rendezvous();
  auto be = make_backend("cuda");
  Stream& s = be->default_stream();
  NcclOptions o;
  o.timeout_s = 2;
  auto comm = make_nccl_communicator(*store, 0, n, *be, s, o);
  Tensor t = be->zeros(s, DType::f32, {16});
  REQUIRE_ERROR_CONTAINS(comm->all_reduce(world, 1, t, ReduceOp::sum), "was not set within 2 s");
}

TEST_CASE("nccl: a rank that stops before a collective makes the others fail with the operation's name",
          "[cuda][nccl]") {
  const int n = world_of_gpus();
  if (n < 2) {
    WARN("needs two GPUs: skipped");
    return;
  }
  CommGroup world{0, {0, 1}, "world"};
  std::string error0;
  run_rank_threads(2, [&](int rank, Rendezvous& store) {
    auto be = make_backend("cuda");
    Stream& s = be->default_stream();
    NcclOptions o;
    o.timeout_s = 3;
    auto comm = make_nccl_communicator(store, rank, 2, *be, s, o);
    Tensor t = be->zeros(s, DType::f32, {16});
    comm->all_reduce(world, 1, t, ReduceOp::sum);  // both: creates the communicator
    if (rank == 1) return;                          // rank 1 "dies"
    try {
      comm->all_reduce(world, 2, t, ReduceOp::sum);
    } catch (const Error& e) {
      error0 = e.what();
    }
  });
  // A timeout ("did not complete within 3 s") or NCCL's own error once the peer's resources go.
  INFO(error0);
  CHECK(error0.find("all_reduce tag 2 on world group 0") != std::string::npos);
}

TEST_CASE("nccl: two ranks on one GPU are refused, naming both", "[cuda][nccl]") {
  std::vector<std::string> errors(2);
  CommGroup world{0, {0, 1}, "world"};
  auto store = make_in_process_rendezvous();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      try {
        CudaBackendOptions o;
        o.device = 0;  // both on GPU 0
        auto be = make_cuda_backend(o);
        Stream& s = be->default_stream();
        NcclOptions no;
        no.timeout_s = 10;
        auto comm = make_nccl_communicator(*store, rank, 2, *be, s, no);
        Tensor t = be->zeros(s, DType::f32, {4});
        comm->all_reduce(world, 1, t, ReduceOp::sum);
      } catch (const Error& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    INFO(e);
    CHECK(e.find("ranks 0 and 1 are on the same GPU") != std::string::npos);
  }
}

TEST_CASE("nccl: the communicator refuses cpu tensors and non-cuda backends", "[cuda][nccl]") {
  auto store = make_in_process_rendezvous();
  auto cpu = make_backend("cpu");
  REQUIRE_ERROR_CONTAINS(make_nccl_communicator(*store, 0, 1, *cpu, cpu->default_stream()), "is not a cuda backend");
  auto be = make_backend("cuda");
  auto comm = make_nccl_communicator(*store, 0, 1, *be, be->default_stream());
  Tensor host = cpu->zeros(cpu->default_stream(), DType::f32, {4});
  REQUIRE_ERROR_CONTAINS(comm->all_reduce(CommGroup{0, {0}, "world"}, 1, host, ReduceOp::sum),
                         "the NCCL communicator moves cuda tensors");
}

TEST_CASE("nccl: the module's collective benchmark (trainplan bench --backend cuda) times all-reduce by size",
          "[cuda][nccl]") {
  const int n = world_of_gpus();
  if (n < 2) {
    REQUIRE_ERROR_CONTAINS(backend_collective_benchmark("cuda", 2, 1 << 20), "needs that many");
    WARN("needs two GPUs for the timing: only the refusal checked");
    return;
  }
  const json::Json t = backend_collective_benchmark("cuda", n, int64_t{1} << 22);
  CHECK(t.at("ranks").get<int>() == n);
  int rows = 0;
  double prev = 0;
  for (const auto& e : t.at("entries")) {
    CHECK(e.at("collective") == "all_reduce");
    const double bytes = e.at("size_bytes").get<double>(), secs = e.at("duration_s").get<double>();
    CHECK(secs > 0);
    // nccl-tests' busbw = bytes / t x 2 (n - 1) / n.
    CHECK(e.at("busbw_bytes_per_s").get<double>() == Approx(bytes / secs * 2.0 * (n - 1) / n).epsilon(1e-6));
    CHECK(bytes > prev);
    prev = bytes;
    ++rows;
  }
  CHECK(rows >= 10);  // 1 KiB .. 4 MiB
}
