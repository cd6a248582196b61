// The in-process communicator: each collective against its definition computed on the host,
// bit-reproducible reductions whatever order the ranks arrive in, and errors instead of hangs
// (a rank that never arrives, members that disagree, an aborted world).
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "executor_test_util.hpp"
#include "trainplan/executor/in_process.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::testing;

namespace {

CommGroup all_ranks(int world) {
  CommGroup g{0, {}, "world"};
  for (int r = 0; r < world; ++r) g.ranks.push_back(r);
  return g;
}

struct Ranks {
  int world;
  std::vector<Device> devices;
  explicit Ranks(int n) : world(n), devices(static_cast<size_t>(n)) {}
  Device& operator[](int r) { return devices[static_cast<size_t>(r)]; }
};

std::vector<float> floats(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("executor: in-process all-reduce sums in group order, bit-identical whatever the arrival order",
          "[executor][communicator]") {
  const int world = 4;
  const int64_t n = 1000;
  Rng rng(11);
  std::vector<std::vector<double>> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(random_values(rng, n, 1.0 + r));
  // The definition: each element summed in double over ranks 0..3, rounded once to float.
  std::vector<float> expected(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < world; ++r) s += static_cast<double>(static_cast<float>(inputs[static_cast<size_t>(r)][static_cast<size_t>(i)]));
    expected[static_cast<size_t>(i)] = static_cast<float>(s);
  }
  for (int order = 0; order < 3; ++order) {
    Ranks ranks(world);
    InProcessWorld w(world);
    std::vector<Tensor> data;
    for (int r = 0; r < world; ++r) data.push_back(ranks[r].put(DType::f32, {n}, inputs[static_cast<size_t>(r)]));
    auto errors = run_ranks(world, [&](int r) {
      // Different arrival orders: rank (r + order) % world arrives last.
      std::this_thread::sleep_for(std::chrono::milliseconds(((r + order) % world) * 3));
      w.communicator(r).all_reduce(all_ranks(world), 1, data[static_cast<size_t>(r)], ReduceOp::sum);
    });
    for (const auto& e : errors) REQUIRE(e.empty());
    for (int r = 0; r < world; ++r) {
      const float* got = data[static_cast<size_t>(r)].data_as<float>();
      REQUIRE(std::memcmp(got, expected.data(), expected.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("executor: in-process reduce-scatter, all-gather, broadcast, reduce and max match their definitions",
          "[executor][communicator]") {
  const int world = 3;
  const int64_t k = 7;
  Rng rng(5);
  Ranks ranks(world);
  InProcessWorld w(world);
  CommGroup g{2, {2, 0, 1}, "tp"};  // collective order differs from rank order
  std::vector<std::vector<double>> big, small;
  std::vector<Tensor> rs_in, rs_out, ag_in, ag_out, bc, red, mx;
  for (int r = 0; r < world; ++r) {
    big.push_back(random_values(rng, static_cast<size_t>(k * world)));
    small.push_back(random_values(rng, static_cast<size_t>(k)));
    rs_in.push_back(ranks[r].put(DType::f64, {k * world}, big.back()));
    rs_out.push_back(ranks[r].zeros({k}));
    ag_in.push_back(ranks[r].put(DType::f64, {k}, small.back()));
    ag_out.push_back(ranks[r].zeros({k * world}));
    bc.push_back(ranks[r].put(DType::f64, {k}, small.back()));
    red.push_back(ranks[r].put(DType::f64, {k}, small.back()));
    mx.push_back(ranks[r].put(DType::f64, {k}, small.back()));
  }
  auto errors = run_ranks(world, [&](int r) {
    Communicator& c = w.communicator(r);
    const auto i = static_cast<size_t>(r);
    c.reduce_scatter(g, 10, rs_out[i], rs_in[i], ReduceOp::sum);
    c.all_gather(g, 11, ag_out[i], ag_in[i]);
    c.broadcast(g, 12, bc[i], /*root=*/1);
    c.reduce(g, 13, red[i], ReduceOp::sum, /*root=*/0);
    c.all_reduce(g, 14, mx[i], ReduceOp::max);
    c.barrier(g, 15);
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < world; ++r) {
    const int pos = g.index_of(r);  // member index in collective order
    const auto got_rs = ranks[r].get(rs_out[static_cast<size_t>(r)]);
    const auto got_ag = ranks[r].get(ag_out[static_cast<size_t>(r)]);
    const auto got_bc = ranks[r].get(bc[static_cast<size_t>(r)]);
    const auto got_red = ranks[r].get(red[static_cast<size_t>(r)]);
    const auto got_mx = ranks[r].get(mx[static_cast<size_t>(r)]);
    for (int64_t i = 0; i < k; ++i) {
      const auto e = static_cast<size_t>(i);
      double s = 0, m = -1e300, sum_small = 0;
      for (int member : g.ranks) {  // group order
        s += big[static_cast<size_t>(member)][static_cast<size_t>(pos * k + i)];
        m = std::max(m, small[static_cast<size_t>(member)][e]);
        sum_small += small[static_cast<size_t>(member)][e];
      }
      CHECK(got_rs[e] == s);
      CHECK(got_bc[e] == small[1][e]);
      CHECK(got_red[e] == (r == 0 ? sum_small : small[static_cast<size_t>(r)][e]));
      CHECK(got_mx[e] == m);
      for (int j = 0; j < world; ++j)
        CHECK(got_ag[static_cast<size_t>(j * k + i)] == small[static_cast<size_t>(g.ranks[static_cast<size_t>(j)])][e]);
    }
  }
}

TEST_CASE("executor: in-process send/recv delivers in either order, sends complete without the receiver",
          "[executor][communicator]") {
  Ranks ranks(2);
  InProcessWorld w(2);
  Rng rng(3);
  const auto a = random_values(rng, 64), b = random_values(rng, 64);
  Tensor sa = ranks[0].put(DType::f32, {64}, a), ra = ranks[1].zeros({64}, DType::f32);
  Tensor sb = ranks[1].put(DType::f32, {64}, b), rb = ranks[0].zeros({64}, DType::f32);
  auto errors = run_ranks(2, [&](int r) {
    Communicator& c = w.communicator(r);
    if (r == 0) {
      c.send(1, 1, sa);  // completes before rank 1 posts its recv
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      c.recv(1, 2, rb);  // posted before rank 1 sends
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      c.recv(0, 1, ra);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      c.send(0, 2, sb);
    }
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  const std::vector<float> fa = floats(a), fb = floats(b);
  CHECK(ranks[1].get(ra) == std::vector<double>(fa.begin(), fa.end()));
  CHECK(ranks[0].get(rb) == std::vector<double>(fb.begin(), fb.end()));
}

TEST_CASE("executor: a collective a rank never joins fails with a timeout naming the group and the missing rank",
          "[executor][communicator]") {
  Ranks ranks(3);
  InProcessWorld w(3, {.timeout_s = 0.3});
  Tensor x0 = ranks[0].zeros({4}), x1 = ranks[1].zeros({4});
  CommGroup g{7, {0, 1, 2}, "dp"};
  auto errors = run_ranks(2, [&](int r) { w.communicator(r).all_reduce(g, 42, r == 0 ? x0 : x1, ReduceOp::sum); });
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("timed out after 0.3 s"));
    CHECK_THAT(e, Catch::Contains("dp group 7 (ranks 0,1,2)"));
    CHECK_THAT(e, Catch::Contains("tag 42"));
    CHECK_THAT(e, Catch::Contains("ranks 2 have not arrived"));
  }
}

TEST_CASE("executor: collective members that disagree on the size or the operation get an error",
          "[executor][communicator]") {
  Ranks ranks(2);
  InProcessWorld w(2, {.timeout_s = 2});
  CommGroup g{0, {0, 1}, "tp"};
  Tensor a = ranks[0].zeros({4}), b = ranks[1].zeros({5});
  auto errors = run_ranks(2, [&](int r) { w.communicator(r).all_reduce(g, 1, r == 0 ? a : b, ReduceOp::sum); });
  CHECK_THAT(errors[0] + errors[1], Catch::Contains("members pass different sizes"));
  Tensor c = ranks[0].zeros({4}), d = ranks[1].zeros({8});
  errors = run_ranks(2, [&](int r) {
    if (r == 0)
      w.communicator(0).all_reduce(g, 2, c, ReduceOp::sum);
    else
      w.communicator(1).all_gather(g, 2, d, ranks[1].zeros({4}));
  });
  CHECK_THAT(errors[0] + errors[1], Catch::Contains("another member started"));
}

TEST_CASE("executor: an aborted world wakes every waiting rank with the failing rank's message",
          "[executor][communicator]") {
  Ranks ranks(3);
  InProcessWorld w(3, {.timeout_s = 30});
  CommGroup g{0, {0, 1, 2}, "world"};
  Tensor x = ranks[0].zeros({2}), y = ranks[1].zeros({2});
  auto errors = run_ranks(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      w.communicator(2).abort("out of memory in op block3.mlp.fc1");
      return;
    }
    w.communicator(r).all_reduce(g, 1, r == 0 ? x : y, ReduceOp::sum);
  });
  // Woken by the abort (its message), not by the 30 s timeout (whose message names a timeout).
  CHECK(w.aborted());
  for (int r = 0; r < 2; ++r) CHECK_THAT(errors[static_cast<size_t>(r)], Catch::Contains("rank 2 failed: out of memory in op block3.mlp.fc1"));
}

TEST_CASE("executor: in-process all-to-all delivers each member's chunk for every other member, in member order",
          "[executor][communicator]") {
  const int world = 3;
  // Member i sends c(i, j) = (i + 2 j) % 3 elements to member j (zero for some pairs); element
  // values encode (sender, receiver, index), so the definition is the values themselves.
  auto count = [](int i, int j) { return static_cast<int64_t>((i + 2 * j) % 3); };
  auto value = [](int i, int j, int64_t x) { return 100.0 * i + 10.0 * j + static_cast<double>(x); };
  Ranks ranks(world);
  InProcessWorld w(world, {.timeout_s = 10});
  CommGroup g{0, {2, 0, 1}, "ep"};  // collective order differs from rank order
  std::vector<std::vector<double>> got(world);
  auto errors = run_ranks(world, [&](int r) {
    const int me = g.index_of(r);
    std::vector<int64_t> send, recv;
    std::vector<double> in;
    for (int j = 0; j < world; ++j) {
      send.push_back(count(me, j));
      recv.push_back(count(j, me));
      for (int64_t x = 0; x < count(me, j); ++x) in.push_back(value(me, j, x));
    }
    int64_t total = 0;
    for (int64_t c : recv) total += c;
    Tensor out = ranks[r].zeros({total});
    w.communicator(r).all_to_all_v(g, 5, out, recv, ranks[r].put({static_cast<int64_t>(in.size())}, in), send);
    got[static_cast<size_t>(r)] = ranks[r].get(out);
  });
  for (const auto& e : errors) REQUIRE(e.empty());
  for (int r = 0; r < world; ++r) {
    const int me = g.index_of(r);
    std::vector<double> want;
    for (int i = 0; i < world; ++i)
      for (int64_t x = 0; x < count(i, me); ++x) want.push_back(value(i, me, x));
    CHECK(got[static_cast<size_t>(r)] == want);
  }
}

TEST_CASE("executor: all-to-all counts that disagree between two members fail naming both sizes",
          "[executor][communicator]") {
  Ranks ranks(2);
  InProcessWorld w(2, {.timeout_s = 5});
  const CommGroup g = all_ranks(2);
  auto errors = run_ranks(2, [&](int r) {
    // Rank 0 sends 2 elements to rank 1, which expects 3.
    std::vector<int64_t> send = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{0, 1};
    std::vector<int64_t> recv = r == 0 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{3, 1};
    int64_t ns = send[0] + send[1], nr = recv[0] + recv[1];
    Tensor in = ranks[r].zeros({ns}), out = ranks[r].zeros({nr});
    w.communicator(r).all_to_all_v(g, 9, out, recv, in, send);
  });
  CHECK(errors[0].empty());
  CHECK_THAT(errors[1], Catch::Contains("the send has 16 bytes of f64, the recv expects"));
}
