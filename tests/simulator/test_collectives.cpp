#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/sync_batchnorm.hpp"

using namespace trainplan;
using plan::CollectiveKind;
using plan::CommPurpose;
using trainplan::testing::exact_options;
using trainplan::testing::ProgramBuilder;
using trainplan::testing::test_gpu;

namespace {

std::vector<int> iota_ranks(int n, int first = 0) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// One collective of `kind` on ranks 0..n-1.
sim::StepResult run_one(int n, CollectiveKind kind, double bytes, const sim::Topology& topo, sim::SimOptions opt,
                        CommPurpose purpose = CommPurpose::dp) {
  ProgramBuilder b(n);
  const int g = b.group(iota_ranks(n), purpose);
  b.collective(g, kind, bytes);
  return sim::simulate_step(b.program(), topo, test_gpu(), opt);
}

sim::SimOptions with_dp(plan::DpAlgorithm a) {
  auto o = exact_options();
  o.dp_algorithm = a;
  return o;
}

double total(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

}  // namespace

TEST_CASE("simulator: ring all-reduce matches 2(n-1)/n * S/B + 2(n-1) latencies", "[simulator]") {
  Rng rng(31);
  for (int trial = 0; trial < 12; ++trial) {
    const int n = 2 + static_cast<int>(rng.below(15));
    const double bytes = 1e6 * (1 + rng.below(1000));
    const double bw = 1e10 * (1 + 30 * rng.uniform());
    const double hop_lat = 1e-6 * rng.uniform();  // per link; a route is 2 links
    auto topo = sim::make_switch_topology(n, bw, hop_lat);
    auto r = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::ring));
    const double want = 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * (2 * hop_lat);
    INFO("n=" << n << " S=" << bytes << " B=" << bw);
    CHECK(r.step_time_s == Approx(want).epsilon(1e-12));
    for (int rank = 0; rank < n; ++rank) CHECK(r.bytes_sent[static_cast<size_t>(rank)] == Approx(2.0 * (n - 1) / n * bytes));
    // nccl-tests bus bandwidth equals the link bandwidth when latency is negligible.
    auto r0 = run_one(n, CollectiveKind::all_reduce, bytes, sim::make_switch_topology(n, bw, 0), with_dp(plan::DpAlgorithm::ring));
    CHECK(bytes / r0.step_time_s * sim::bus_bandwidth_factor(CollectiveKind::all_reduce, n) == Approx(bw).epsilon(1e-12));
  }
}

TEST_CASE("simulator: ring reduce-scatter and all-gather take (n-1)/n * S/B + (n-1) latencies", "[simulator]") {
  Rng rng(32);
  for (CollectiveKind kind : {CollectiveKind::reduce_scatter, CollectiveKind::all_gather}) {
    const int n = 3 + static_cast<int>(rng.below(10));
    const double bytes = 3e8 * (1 + rng.uniform());
    const double bw = 1e11 * (1 + rng.uniform());
    const double hop_lat = 2e-6 * rng.uniform();
    auto topo = sim::make_switch_topology(n, bw, hop_lat);
    auto r = run_one(n, kind, bytes, topo, with_dp(plan::DpAlgorithm::ring));
    CHECK(r.step_time_s == Approx((n - 1.0) / n * bytes / bw + (n - 1) * 2 * hop_lat).epsilon(1e-12));
    auto r0 = run_one(n, kind, bytes, sim::make_switch_topology(n, bw, 0), with_dp(plan::DpAlgorithm::ring));
    CHECK(bytes / r0.step_time_s * sim::bus_bandwidth_factor(kind, n) == Approx(bw).epsilon(1e-12));
  }
}

TEST_CASE("simulator: double binary trees are valid, balanced and complementary", "[simulator]") {
  // NCCL's double binary tree (graph/trees.cc): one root, at most two children, height
  // ceil(log2 n) (the root has one child), and every position inner in at most one tree (position
  // 0 of an odd n in both, with one child each), so no position has more than 4 tree edges.
  for (int n : {2, 3, 4, 7, 8, 15, 16, 31, 32, 100}) {
    auto trees = sim::double_binary_tree(n);
    REQUIRE(trees.size() == 2);
    std::vector<int> inner_count(static_cast<size_t>(n), 0), edges(static_cast<size_t>(n), 0);
    for (const auto& parent : trees) {
      int roots = 0, height = 0;
      std::vector<int> children(static_cast<size_t>(n), 0);
      for (int i = 0; i < n; ++i) {
        if (parent[static_cast<size_t>(i)] < 0) ++roots;
        else {
          ++children[static_cast<size_t>(parent[static_cast<size_t>(i)])];
          ++edges[static_cast<size_t>(i)];
          ++edges[static_cast<size_t>(parent[static_cast<size_t>(i)])];
        }
        int depth = 0;
        for (int p = parent[static_cast<size_t>(i)]; p >= 0; p = parent[static_cast<size_t>(p)]) REQUIRE(++depth <= n);
        height = std::max(height, depth);
      }
      CHECK(roots == 1);
      CHECK(height == static_cast<int>(std::ceil(std::log2(n))));
      for (int i = 0; i < n; ++i) {
        CHECK(children[static_cast<size_t>(i)] <= 2);
        if (children[static_cast<size_t>(i)] > 0) ++inner_count[static_cast<size_t>(i)];
      }
    }
    for (int i = 0; i < n; ++i) {
      CHECK(edges[static_cast<size_t>(i)] <= 4);
      CHECK(inner_count[static_cast<size_t>(i)] <= (n % 2 == 1 && i == 0 ? 2 : 1));
    }
  }
}

TEST_CASE("simulator: tree all-reduce time follows its busiest link", "[simulator]") {
  // Both trees carry S/2 up (reduce) and down (broadcast), pipelined: a GPU's up link carries
  // one flow per tree edge at that GPU, so the time is (S/2) * max degree sum / B + latency
  // of 2 * height route hops.
  Rng rng(33);
  for (int n : {4, 7, 12}) {
    const double bytes = 1e8 * (1 + rng.uniform());
    const double bw = 1e11;
    const double hop_lat = 1e-6;
    auto trees = sim::double_binary_tree(n);
    int max_degree = 0, height = 0;
    for (int i = 0; i < n; ++i) {
      int degree = 0;
      for (const auto& parent : trees) {
        if (parent[static_cast<size_t>(i)] >= 0) ++degree;
        for (int j = 0; j < n; ++j) degree += parent[static_cast<size_t>(j)] == i ? 1 : 0;
        int depth = 0;
        for (int p = parent[static_cast<size_t>(i)]; p >= 0; p = parent[static_cast<size_t>(p)]) ++depth;
        height = std::max(height, depth);
      }
      max_degree = std::max(max_degree, degree);
    }
    auto r = run_one(n, CollectiveKind::all_reduce, bytes, sim::make_switch_topology(n, bw, hop_lat),
                     with_dp(plan::DpAlgorithm::tree));
    CHECK(r.step_time_s == Approx(bytes / 2 * max_degree / bw + 2 * height * 2 * hop_lat).epsilon(1e-12));
  }
}

TEST_CASE("simulator: automatic algorithm picks tree for small messages and ring for large", "[simulator]") {
  const int n = 32;
  const double bw = 5e10, hop_lat = 5e-6;
  auto topo = sim::make_switch_topology(n, bw, hop_lat);
  auto opt = exact_options();  // other_algorithm = automatic
  auto ring_time = [&](double s) { return 2.0 * (n - 1) / n * s / bw + 2.0 * (n - 1) * 2 * hop_lat; };
  auto small = run_one(n, CollectiveKind::all_reduce, 64e3, topo, opt, CommPurpose::tp);
  CHECK(small.step_time_s < 0.5 * ring_time(64e3));  // 2*height*L instead of 2(n-1)*L
  auto large = run_one(n, CollectiveKind::all_reduce, 1e9, topo, opt, CommPurpose::tp);
  CHECK(large.step_time_s == Approx(ring_time(1e9)).epsilon(1e-12));
}

TEST_CASE("simulator: hierarchical all-reduce matches its three phases", "[simulator]") {
  Rng rng(34);
  sim::TwoLevelSpec spec;
  spec.nodes = 2 + static_cast<int>(rng.below(4));
  spec.gpus_per_node = 2 + static_cast<int>(rng.below(7));
  spec.intra_bandwidth_bytes_per_s = 3e11;
  spec.intra_latency_s = 1e-6;
  spec.nic_bandwidth_bytes_per_s = 5e10;
  spec.nic_latency_s = 4e-6;
  auto topo = sim::make_two_level_topology(spec);
  const int N = spec.nodes, k = spec.gpus_per_node, n = N * k;
  const double bytes = 1e9 * (1 + rng.uniform());
  auto r = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::hierarchical));
  const double intra_lat = 2 * spec.intra_latency_s, inter_lat = 2 * spec.intra_latency_s + 2 * spec.nic_latency_s;
  const double intra = (k - 1.0) / k * bytes / spec.intra_bandwidth_bytes_per_s + (k - 1) * intra_lat;
  // k inter-node rings (one per local index) share each node's NIC.
  const double inter_rate = std::min(spec.intra_bandwidth_bytes_per_s, spec.nic_bandwidth_bytes_per_s / k);
  const double inter = 2.0 * (N - 1) / N * (bytes / k) / inter_rate + 2 * (N - 1) * inter_lat;
  INFO("N=" << N << " k=" << k);
  CHECK(r.step_time_s == Approx(2 * intra + inter).epsilon(1e-12));
  // The flat ring over the same GPUs: one flow per NIC, 2(n-1) steps.
  auto ring = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::ring));
  const double ring_rate = std::min(spec.intra_bandwidth_bytes_per_s, spec.nic_bandwidth_bytes_per_s);
  CHECK(ring.step_time_s == Approx(2.0 * (n - 1) / n * bytes / ring_rate + 2 * (n - 1) * inter_lat).epsilon(1e-12));
}

TEST_CASE("simulator: all-to-all and broadcast closed forms", "[simulator]") {
  const int n = 6;
  const double bytes = 6e8, bw = 1e11, hop_lat = 1e-6;
  auto topo = sim::make_switch_topology(n, bw, hop_lat);
  const double route_lat = 2 * hop_lat;
  auto a2a = run_one(n, CollectiveKind::all_to_all, bytes, topo, exact_options(), CommPurpose::none);
  CHECK(a2a.step_time_s == Approx((n - 1.0) / n * bytes / bw + route_lat).epsilon(1e-12));
  auto bc = run_one(n, CollectiveKind::broadcast, bytes, topo, exact_options(), CommPurpose::none);
  CHECK(bc.step_time_s == Approx(bytes / bw + (n - 1) * route_lat).epsilon(1e-12));
  CHECK(bc.bytes_sent[static_cast<size_t>(n - 1)] == 0);  // the chain ends there
  CHECK(bc.bytes_received[0] == 0);                       // the root
}

TEST_CASE("simulator: concurrent collectives contend for a shared NIC", "[simulator]") {
  // 2 nodes x 2 GPUs; groups {0,2} and {1,3} both cross the NICs.
  sim::TwoLevelSpec spec;
  spec.nodes = 2;
  spec.gpus_per_node = 2;
  spec.intra_bandwidth_bytes_per_s = 3e11;
  spec.nic_bandwidth_bytes_per_s = 2.5e10;
  auto topo = sim::make_two_level_topology(spec);
  const double bytes = 5e8;
  auto build = [&](bool both) {
    ProgramBuilder b(4);
    const int ga = b.group({0, 2}, CommPurpose::dp);
    const int gb = b.group({1, 3}, CommPurpose::dp);
    b.collective(ga, CollectiveKind::all_reduce, bytes);
    if (both) b.collective(gb, CollectiveKind::all_reduce, bytes);
    return b.program();
  };
  auto alone = sim::simulate_step(build(false), topo, test_gpu(), exact_options());
  auto together = sim::simulate_step(build(true), topo, test_gpu(), exact_options());
  CHECK(alone.step_time_s == Approx(bytes / spec.nic_bandwidth_bytes_per_s).epsilon(1e-12));
  CHECK(together.step_time_s == Approx(2 * bytes / spec.nic_bandwidth_bytes_per_s).epsilon(1e-12));
}

TEST_CASE("simulator: ZeRO-3 moves 1.5x the bytes of plain data parallelism", "[simulator]") {
  Rng rng(35);
  sim::TwoLevelSpec spec;
  spec.nodes = 3;
  spec.gpus_per_node = 4;
  spec.intra_bandwidth_bytes_per_s = 3e11;
  spec.nic_bandwidth_bytes_per_s = 5e10;
  auto topo = sim::make_two_level_topology(spec);
  const int n = 12;
  const double params_bytes = 1e8 * (1 + rng.uniform());
  for (auto algo : {plan::DpAlgorithm::ring, plan::DpAlgorithm::hierarchical}) {
    ProgramBuilder dp(n), z3(n);
    dp.collective(dp.group(iota_ranks(n), CommPurpose::dp), CollectiveKind::all_reduce, params_bytes);
    const int g = z3.group(iota_ranks(n), CommPurpose::zero_param);
    auto fwd = z3.collective(g, CollectiveKind::all_gather, params_bytes, {}, trainplan::testing::kComm, CommPurpose::zero_param);
    auto bwd = z3.collective(g, CollectiveKind::all_gather, params_bytes, {}, trainplan::testing::kComm, CommPurpose::zero_param);
    z3.collective(g, CollectiveKind::reduce_scatter, params_bytes, {}, trainplan::testing::kComm, CommPurpose::zero_grad);
    auto a = sim::simulate_step(dp.program(), topo, test_gpu(), with_dp(algo));
    auto b = sim::simulate_step(z3.program(), topo, test_gpu(), with_dp(algo));
    INFO(plan::dp_algorithm_name(algo));
    CHECK(total(b.bytes_sent) / total(a.bytes_sent) == Approx(1.5).epsilon(1e-12));
    CHECK(b.bytes_sent_by_purpose[static_cast<size_t>(CommPurpose::zero_param)] ==
          Approx(2 * b.bytes_sent_by_purpose[static_cast<size_t>(CommPurpose::zero_grad)]));
  }
}

TEST_CASE("simulator: every byte sent is received", "[simulator]") {
  Rng rng(36);
  auto topo = sim::make_two_level_topology({2, 4, 3e11, 1e-6, 5e10, 5e-6});
  ProgramBuilder b(8);
  const int dp = b.group({0, 1, 2, 3, 4, 5, 6, 7}, CommPurpose::dp);
  const int tp = b.group({0, 1, 2, 3}, CommPurpose::tp);
  std::vector<double> sent_p2p(8, 0), recv_p2p(8, 0);
  for (int i = 0; i < 20; ++i) {
    const int src = static_cast<int>(rng.below(8));
    const int dst = (src + 1 + static_cast<int>(rng.below(7))) % 8;
    const double bytes = 1e6 * (1 + rng.below(100));
    const int64_t id = b.fresh_comm_id();
    b.send(src, dst, bytes, id);
    b.recv(dst, src, bytes, id);
  }
  b.collective(tp, CollectiveKind::all_reduce, 3e7);
  b.collective(dp, CollectiveKind::all_to_all, 8e7);
  b.collective(dp, CollectiveKind::reduce_scatter, 5e7);
  for (auto algo : {plan::DpAlgorithm::ring, plan::DpAlgorithm::tree, plan::DpAlgorithm::hierarchical, plan::DpAlgorithm::smddp,
                    plan::DpAlgorithm::horovod}) {
    auto r = sim::simulate_step(b.program(), topo, test_gpu(), with_dp(algo));
    CHECK(total(r.bytes_sent) > 0);
    CHECK(total(r.bytes_sent) == Approx(total(r.bytes_received)).epsilon(1e-12));
    double by_purpose = 0;
    for (double v : r.bytes_sent_by_purpose) by_purpose += v;
    CHECK(by_purpose == Approx(total(r.bytes_sent)).epsilon(1e-12));
  }
}

TEST_CASE("simulator: a one-member collective costs only its launch", "[simulator]") {
  auto topo = sim::make_switch_topology(2, 1e11, 1e-6);
  ProgramBuilder b(2);
  b.collective(b.group({1}, CommPurpose::tp), CollectiveKind::all_reduce, 1e9);
  auto opt = exact_options();
  opt.comm_launch_s = 7e-6;
  auto r = sim::simulate_step(b.program(), topo, test_gpu(), opt);
  CHECK(r.step_time_s == Approx(7e-6).epsilon(1e-12));
  CHECK(total(r.bytes_sent) == 0);
}

// ---- Data-parallel libraries: parameter server, SMDDP, Horovod ------------------------------

namespace {

sim::TwoLevelSpec random_two_level(Rng& rng) {
  sim::TwoLevelSpec spec;
  spec.nodes = 1 + static_cast<int>(rng.below(5));
  spec.gpus_per_node = 1 + static_cast<int>(rng.below(8));
  spec.intra_bandwidth_bytes_per_s = 1e10 * (1 + 30 * rng.uniform());
  spec.intra_latency_s = 1e-6 * rng.uniform();
  spec.nic_bandwidth_bytes_per_s = 1e10 * (1 + 10 * rng.uniform());
  spec.nic_latency_s = 1e-5 * rng.uniform();
  return spec;
}

// One push or pull of servers on the N hosts: every flow carries `per_flow` bytes at one rate;
// a GPU's up (down) link carries its N flows, a node's NIC the k(N-1) flows of its GPUs to (from)
// the other nodes' servers. Latency: one step over the longest host route.
double server_phase(const sim::TwoLevelSpec& s, double per_flow) {
  const int N = s.nodes, k = s.gpus_per_node;
  double t = per_flow * N / s.intra_bandwidth_bytes_per_s;
  if (N > 1) t = std::max(t, per_flow * k * (N - 1) / s.nic_bandwidth_bytes_per_s);
  return t + s.intra_latency_s + (N > 1 ? 2 * s.nic_latency_s : 0.0);
}

}  // namespace

TEST_CASE("simulator: parameter server = bytes through the busiest server's NIC / its bandwidth", "[simulator]") {
  Rng rng(41);
  for (int trial = 0; trial < 16; ++trial) {
    const sim::TwoLevelSpec spec = random_two_level(rng);
    const int N = spec.nodes, n = N * spec.gpus_per_node;
    if (n < 2) continue;
    auto topo = sim::make_two_level_topology(spec);
    const double bytes = 1e8 * (1 + rng.uniform());
    INFO("N=" << N << " k=" << spec.gpus_per_node);
    // One server per node holds 1/N of the variables: push S/N from every GPU to every host,
    // pull it back.
    auto ps = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::parameter_server));
    CHECK(ps.step_time_s == Approx(2 * server_phase(spec, bytes / N)).epsilon(1e-12));
    // GPUs send their whole gradient (push) and receive the whole update (pull).
    for (int g = 0; g < n; ++g) {
      CHECK(ps.bytes_sent[static_cast<size_t>(g)] == Approx(bytes));
      CHECK(ps.bytes_received[static_cast<size_t>(g)] == Approx(bytes));
    }
    // The reduce-scatter of a ZeRO-like split is the push alone, the all-gather the pull.
    auto push = run_one(n, CollectiveKind::reduce_scatter, bytes, topo, with_dp(plan::DpAlgorithm::parameter_server));
    CHECK(push.step_time_s == Approx(server_phase(spec, bytes / N)).epsilon(1e-12));
  }
}

TEST_CASE("simulator: SMDDP = intra-node reduce-scatter, push to and pull from every node's servers, all-gather", "[simulator]") {
  Rng rng(42);
  for (int trial = 0; trial < 16; ++trial) {
    const sim::TwoLevelSpec spec = random_two_level(rng);
    const int N = spec.nodes, k = spec.gpus_per_node, n = N * k;
    if (n < 2) continue;
    auto topo = sim::make_two_level_topology(spec);
    const double bytes = 1e8 * (1 + rng.uniform());
    auto r = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::smddp));
    const double intra = k > 1 ? (k - 1.0) / k * bytes / spec.intra_bandwidth_bytes_per_s + (k - 1) * 2 * spec.intra_latency_s : 0.0;
    // Balanced fusion buffers: each GPU's S/k shard is split evenly over the N servers.
    const double want = 2 * intra + 2 * server_phase(spec, bytes / (k * N));
    INFO("N=" << N << " k=" << k);
    CHECK(r.step_time_s == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("simulator: SMDDP moves (N-1)/N of the gradient per direction through each NIC, a flat ring 2(n-1)/n", "[simulator]") {
  // 2 nodes x 8 GPUs behind one NIC each, NVLink-class intra-node links: the NIC bounds both.
  sim::TwoLevelSpec spec{2, 8, 3e11, 0, 1.25e10, 0};
  auto topo = sim::make_two_level_topology(spec);
  const double bytes = 1e9;
  auto smddp = run_one(16, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::smddp));
  auto ring = run_one(16, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::ring));
  const double nic = spec.nic_bandwidth_bytes_per_s;
  CHECK(smddp.step_time_s == Approx(2 * 7.0 / 8 * bytes / 3e11 + 2 * 0.5 * bytes / nic).epsilon(1e-12));
  CHECK(ring.step_time_s == Approx(2.0 * 15 / 16 * bytes / nic).epsilon(1e-12));
}

TEST_CASE("simulator: Horovod is NCCL's ring all-reduce started half a cycle late", "[simulator]") {
  Rng rng(43);
  for (int trial = 0; trial < 8; ++trial) {
    const int n = 2 + static_cast<int>(rng.below(15));
    const double bytes = 1e6 * (1 + rng.below(1000));
    const double bw = 1e10 * (1 + 30 * rng.uniform());
    auto topo = sim::make_switch_topology(n, bw, 0);
    auto hvd = run_one(n, CollectiveKind::all_reduce, bytes, topo, with_dp(plan::DpAlgorithm::horovod));
    CHECK(hvd.step_time_s == Approx(2.0 * (n - 1) / n * bytes / bw + 0.5 * sim::kHorovodCycleTimeS).epsilon(1e-12));
  }
}

TEST_CASE("simulator: host routes of a catalog cluster end at a CPU socket", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  for (const char* type : {"p3dn.24xlarge", "p4d.24xlarge", "p3.16xlarge"}) {
    const hw::Cluster cluster = hw::Cluster::build(cat.instance(type), 2, cat);
    const sim::ClusterTopology topo(cluster);
    const int g = cluster.gpus_per_node();
    INFO(type);
    for (int gpu : {0, g - 1, g, 2 * g - 1})
      for (int node : {0, 1}) {
        const auto& up = topo.host_route(gpu, node, true);
        const auto& down = topo.host_route(gpu, node, false);
        REQUIRE(!up.empty());
        REQUIRE(up.size() == down.size());
        const hw::Link& first = cluster.links()[static_cast<size_t>(up.front())];
        const hw::Link& last = cluster.links()[static_cast<size_t>(up.back())];
        CHECK(first.src == cluster.gpu_vertex(gpu));
        CHECK(cluster.vertices()[static_cast<size_t>(last.dst)].kind == hw::VertexKind::cpu);
        CHECK(cluster.vertices()[static_cast<size_t>(last.dst)].node == node);
        // Consecutive links join up; the way back is the same links in the other direction.
        for (size_t i = 1; i < up.size(); ++i)
          CHECK(cluster.links()[static_cast<size_t>(up[i])].src == cluster.links()[static_cast<size_t>(up[i - 1])].dst);
        CHECK(cluster.links()[static_cast<size_t>(down.back())].dst == cluster.gpu_vertex(gpu));
        // Another node's host is reached over the network, the own node's without it.
        const bool crosses = std::any_of(up.begin(), up.end(), [&](int l) {
          return cluster.links()[static_cast<size_t>(l)].kind == hw::LinkKind::network;
        });
        CHECK(crosses == (cluster.node_of(gpu) != node));
      }
  }
  // A hand-built topology without hosts says so.
  auto sw = sim::make_switch_topology(2, 1e11, 0);
  CHECK_THROWS_WITH(sw.host_route(0, 0, true), Catch::Contains("no host memory"));
}

TEST_CASE("simulator: synchronized batch norm is a forward all-gather of 2C+1 and a backward all-reduce of 2C fp32 per layer per micro-batch (ResNet-50: 53 layers, 26,560 channels)", "[simulator][syncbn]") {
  // torchvision resnet50: stem 64; per bottleneck width, width, 4 x width; one downsample BN of
  // 4 x width per stage (widths 64..512, blocks 3, 4, 6, 3): 53 layers, 26,560 channels
  // (2 x 26,560 = 53,120 batch-norm parameters). PyTorch SyncBatchNorm: the forward all-gathers
  // (mean, invstd, count) of every rank, the backward all-reduces (sum_dy, sum_dy_xmu).
  const models::ModelGraph graph = models::build_graph(models::resolve_model("resnet-50"));
  const int n = 8;
  const double bw = 100e9, hop_lat = 1e-6, launch = sim::SimOptions{}.comm_launch_s;
  const auto topo = sim::make_switch_topology(n, bw, hop_lat);
  std::vector<int> group(n);
  for (int g = 0; g < n; ++g) group[static_cast<size_t>(g)] = g;
  const sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(graph, 3, group, topo);
  CHECK(c.layers == 53);
  CHECK(c.channels == 26560);
  CHECK(c.collectives_per_step == 2 * 3 * 53);
  CHECK(c.bytes_per_step == Approx(3.0 * ((2 * 26560 + 53) * 4.0 + 2 * 26560 * 4.0)));
  // Ring all-gather of the whole output S = n (2C + 1) 4: (n-1) route latencies (2 links each)
  // + (n-1)/n S / B, plus the launch (per-hop model); summed over the layers.
  double gather = 0, ring_reduce = 0, reduce = 0;
  for (const auto& op : graph.ops()) {
    if (op.kind != models::OpKind::batchnorm) continue;
    const double ch = static_cast<double>(op.weight_shape.front());
    const double s_gather = n * (2 * ch + 1) * 4.0, s_reduce = 2 * ch * 4.0;
    gather += launch + (n - 1) * 2 * hop_lat + (n - 1.0) / n * s_gather / bw;
    const double ring = launch + 2.0 * (n - 1) * 2 * hop_lat + 2.0 * (n - 1) / n * s_reduce / bw;
    const double tree = sim::build_pattern(plan::CollectiveKind::all_reduce, sim::CollectiveAlgorithm::tree, {group}, topo)
                            .uncontended_time_s(s_reduce) + launch;
    ring_reduce += ring;
    reduce += std::min(ring, tree);  // NCCL's tuner: the faster of ring and tree
  }
  CHECK(c.forward_s_per_micro_batch == Approx(gather).epsilon(1e-9));
  CHECK(c.backward_s_per_micro_batch == Approx(reduce).epsilon(1e-9));
  CHECK(c.backward_s_per_micro_batch <= ring_reduce * (1 + 1e-12));
  CHECK(c.time_per_step_s == Approx(3 * (gather + reduce)).epsilon(1e-9));
  // One GPU: nothing to synchronize.
  CHECK(sim::sync_batchnorm_cost(graph, 3, {0}, topo).time_per_step_s == 0);
  // A transformer has no batch norm.
  CHECK(sim::sync_batchnorm_cost(models::build_graph(models::resolve_model("gpt2-124m")), 3, group, topo).layers == 0);
}

TEST_CASE("collectives: a ring over nodes runs as one channel per member of a node, each rotated", "[sim]") {
  using Rings = std::vector<std::vector<int>>;
  // Two nodes of 4: NCCL's layout enters and leaves each node through a different member.
  CHECK(sim::channel_rings({0, 1, 2, 3, 4, 5, 6, 7}, {0, 0, 0, 0, 1, 1, 1, 1}) ==
        Rings{{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 0, 5, 6, 7, 4}, {2, 3, 0, 1, 6, 7, 4, 5}, {3, 0, 1, 2, 7, 4, 5, 6}});
  // Three nodes of 2, in ring order (members need not be numbered in order).
  CHECK(sim::channel_rings({8, 9, 2, 3, 12, 13}, {4, 4, 1, 1, 6, 6}) == Rings{{8, 9, 2, 3, 12, 13}, {9, 8, 3, 2, 13, 12}});
  // One ring otherwise: one node, one member per node, unequal nodes, a node visited twice.
  CHECK(sim::channel_rings({0, 1, 2, 3}, {0, 0, 0, 0}) == Rings{{0, 1, 2, 3}});
  CHECK(sim::channel_rings({0, 8, 16}, {0, 1, 2}) == Rings{{0, 8, 16}});
  CHECK(sim::channel_rings({0, 1, 2, 8, 9}, {0, 0, 0, 1, 1}) == Rings{{0, 1, 2, 8, 9}});
  CHECK(sim::channel_rings({0, 1, 8, 9, 2, 3}, {0, 0, 1, 1, 0, 0}) == Rings{{0, 1, 8, 9, 2, 3}});
}
