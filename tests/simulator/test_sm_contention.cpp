// NCCL's thread blocks take SMs from the compute they overlap (simulator/README.md, "Overlap:
// NCCL's SMs"): closed forms of GEMM waves on fewer SMs, and the step simulator slowing only
// the overlapped part of a compute task.
#include <cmath>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;
using trainplan::testing::ProgramBuilder;

namespace {

hw::GpuSpec gpu_with_sms(int sms) {
  hw::GpuSpec g = trainplan::testing::test_gpu();
  g.sm_count = sms;
  return g;
}

// A GEMM task of m x n output (128 x 128 tiles) and K = k, run by the model's defaults.
plan::Task gemm_task(int64_t m, int64_t n, int64_t k) {
  plan::Task t;
  t.kind = plan::TaskKind::compute;
  t.op_kind = static_cast<int>(models::OpKind::linear);
  t.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  t.gemm_m = m;
  t.gemm_n = n;
  t.gemm_k = k;
  return t;
}

}  // namespace

TEST_CASE("simulator: a GEMM of exactly SMs tiles beside a 24-channel collective runs two waves", "[simulator]") {
  // The NVIDIA forum's H100 case (t/337991): 132 tiles on 132 SMs, ncclAllGather holding 24.
  sim::ComputeModelOptions o;
  o.kernel_overhead_s = 0;
  const sim::ComputeModel h100(gpu_with_sms(132), Precision::bf16, o);
  const int64_t m = 128 * 12, n = 128 * 11, k = 8192;  // 12 x 11 = 132 tiles
  CHECK(h100.sm_share_slowdown(m, n, k, 24) == 2.0);
  const plan::Task t = gemm_task(m, n, k);
  CHECK(h100.duration_s(t, nullptr, 24) / h100.duration_s(t) == Approx(2.0).epsilon(1e-12));
  // No SMs taken: unchanged.
  CHECK(h100.sm_share_slowdown(m, n, k, 0) == 1.0);
  CHECK(h100.duration_s(t, nullptr, 0) == h100.duration_s(t));
}

TEST_CASE("simulator: a many-wave GEMM slows by about SMs / (SMs - channels)", "[simulator]") {
  sim::ComputeModelOptions o;
  o.kernel_overhead_s = 0;
  const sim::ComputeModel a100(gpu_with_sms(108), Precision::bf16, o);
  // 8192 x 12288 output: 64 x 96 = 6144 tiles, 57 waves on 108 SMs, 74 on 84.
  const double tiles = 64.0 * 96.0;
  const double exact = std::ceil(tiles / 84.0) / std::ceil(tiles / 108.0);
  CHECK(a100.sm_share_slowdown(8192, 12288, 12288, 24) == Approx(exact).epsilon(1e-12));
  CHECK(exact == Approx(108.0 / 84.0).epsilon(0.01));
  // Without a shape (or with shape effects off): the many-wave limit itself.
  CHECK(a100.sm_share_slowdown(0, 0, 0, 24) == Approx(108.0 / 84.0).epsilon(1e-12));
  sim::ComputeModelOptions flat = o;
  flat.gemm_shape_effects = false;
  const sim::ComputeModel no_shape(gpu_with_sms(108), Precision::bf16, flat);
  CHECK(no_shape.sm_share_slowdown(8192, 12288, 12288, 24) == Approx(108.0 / 84.0).epsilon(1e-12));
  // At most SMs - 1 are taken.
  CHECK(a100.sm_share_slowdown(0, 0, 0, 500) == Approx(108.0).epsilon(1e-12));
}

TEST_CASE("simulator: memory-bound work keeps its time beside a collective", "[simulator]") {
  sim::ComputeModelOptions o;
  o.kernel_overhead_s = 0;
  const sim::ComputeModel model(gpu_with_sms(108), Precision::bf16, o);
  plan::Task t;
  t.kind = plan::TaskKind::compute;
  t.op_kind = static_cast<int>(models::OpKind::layernorm);
  t.flops = 1e6;
  t.mem_bytes = 4e9;  // HBM-bound by orders of magnitude
  CHECK(model.duration_s(t, nullptr, 24) == model.duration_s(t));
}

TEST_CASE("simulator: NCCL channels by fabric and across nodes follow the logged counts", "[simulator]") {
  using K = hw::IntraNodeKind;
  CHECK(sim::nccl_channels(K::nvswitch, 8, 8, false) == 24);  // HGX A100 / H100 node
  CHECK(sim::nccl_channels(K::nvswitch, 8, 8, true) == 16);   // DGX H100, 8 IB NICs
  CHECK(sim::nccl_channels(K::nvswitch, 8, 4, true) == 8);    // p4d, 4 EFA NICs
  CHECK(sim::nccl_channels(K::nvswitch, 8, 32, true) == 16);  // p5's 32 EFA NICs: at most one per GPU counts
  CHECK(sim::nccl_channels(K::pcie, 8, 4, true) == 2);        // never more than in the node
  CHECK(sim::nccl_channels(K::pcie, 4, 1, false) == 2);
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster two = hw::Cluster::build(cat.instance("dgx-a100-80gb"), 2, cat);
  const sim::ClusterTopology topo(two);
  std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7}, both;
  for (int g = 0; g < 16; ++g) both.push_back(g);
  const auto in = sim::build_pattern(plan::CollectiveKind::all_gather, sim::CollectiveAlgorithm::ring, {topo.ring_order(node0)}, topo);
  const auto across = sim::build_pattern(plan::CollectiveKind::all_gather, sim::CollectiveAlgorithm::ring, {topo.ring_order(both)}, topo);
  CHECK(in.timing.sm_channels == sim::nccl_channels(two, false));
  CHECK(across.timing.sm_channels == sim::nccl_channels(two, true));
  CHECK(sim::nccl_channels(two, false) == 24);
}

TEST_CASE("simulator: a rank whose collective ends mid-op slows only for the overlapped part", "[simulator]") {
  // Two GPUs of one DGX A100 node: rank 0 runs one large GEMM while an all-gather of both ranks
  // runs beside it (no dependency); the all-gather ends first.
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster one = hw::Cluster::build(cat.instance("dgx-a100-80gb"), 1, cat);
  const sim::ClusterTopology topo(one);
  const hw::GpuSpec& gpu = one.gpu_spec();
  sim::SimOptions opt;
  opt.compute.kernel_overhead_s = 0;
  const sim::ComputeModel model(gpu, Precision::bf16, opt.compute);
  const int c = sim::nccl_channels(one, false);
  REQUIRE(c == 24);
  const plan::Task gemm = gemm_task(8192, 12288, 12288);
  const double full = model.duration_s(gemm), shared = model.duration_s(gemm, nullptr, c);
  const double r = full / shared;
  REQUIRE(r < 0.8);

  auto build = [&](bool with_collective) {
    ProgramBuilder b(2);
    plan::Task t = gemm;
    t.stream = trainplan::testing::kCompute;
    t.label = "gemm";
    b.add(0, t);
    if (with_collective) {
      const int g = b.group({0, 1}, plan::CommPurpose::zero_param);
      b.collective(g, plan::CollectiveKind::all_gather, 2e9);
    }
    return b.program();
  };
  // No collective: the GEMM's full-SM time.
  auto alone = sim::simulate_step(build(false), topo, gpu, opt);
  CHECK(alone.timeline.events[0].end_s == Approx(full).epsilon(1e-12));

  auto both = sim::simulate_step(build(true), topo, gpu, opt);
  double gemm_end = -1, coll_start = -1, coll_end = -1;
  for (const auto& e : both.timeline.events) {
    if (e.rank != 0) continue;
    if (e.kind == plan::TaskKind::compute) gemm_end = e.end_s;
    else if (e.kind == plan::TaskKind::collective) coll_start = e.start_s, coll_end = e.end_s;
  }
  REQUIRE(coll_start == 0);
  REQUIRE(coll_end > 0);
  REQUIRE(coll_end < full);  // the collective ends mid-op
  // coll_end seconds at rate r, the rest of the work at full speed.
  CHECK(gemm_end == Approx(coll_end + (full - r * coll_end)).epsilon(1e-9));

  // Off, or the explicit uniform override instead of it.
  opt.sm_contention = false;
  CHECK(sim::simulate_step(build(true), topo, gpu, opt).timeline.events[0].end_s == Approx(full).epsilon(1e-12));
  opt.sm_contention = true;
  opt.overlap_slowdown = 0.25;
  CHECK(sim::simulate_step(build(true), topo, gpu, opt).timeline.events[0].end_s ==
        Approx(coll_end + (full - coll_end / 1.25)).epsilon(1e-9));
}

TEST_CASE("simulator: collectives on one stream hold one collective's SMs at a time", "[simulator]") {
  // Two all-gathers issued back to back on the same stream run at once in the simulator (they
  // share the links) but as one kernel after the other on the GPU: the GEMM beside them slows
  // as with one collective's channels, not twice as many.
  const auto& cat = hw::Catalog::builtin();
  const hw::Cluster one = hw::Cluster::build(cat.instance("dgx-a100-80gb"), 1, cat);
  const sim::ClusterTopology topo(one);
  const hw::GpuSpec& gpu = one.gpu_spec();
  sim::SimOptions opt;
  opt.compute.kernel_overhead_s = 0;
  const sim::ComputeModel model(gpu, Precision::bf16, opt.compute);
  const plan::Task gemm = gemm_task(8192, 12288, 12288);
  const double full = model.duration_s(gemm);
  const double r = full / model.duration_s(gemm, nullptr, sim::nccl_channels(one, false));
  ProgramBuilder b(2);
  plan::Task t = gemm;
  t.stream = trainplan::testing::kCompute;
  b.add(0, t);
  const int g = b.group({0, 1}, plan::CommPurpose::zero_param);
  b.collective(g, plan::CollectiveKind::all_gather, 1e9);
  b.collective(g, plan::CollectiveKind::all_gather, 1e9);
  auto res = sim::simulate_step(b.program(), topo, gpu, opt);
  double gemm_end = -1, coll_end = 0;
  for (const auto& e : res.timeline.events) {
    if (e.rank != 0) continue;
    if (e.kind == plan::TaskKind::compute) gemm_end = e.end_s;
    else coll_end = std::max(coll_end, e.end_s);
  }
  REQUIRE(coll_end < full);
  CHECK(gemm_end == Approx(coll_end + (full - r * coll_end)).epsilon(1e-9));
}
