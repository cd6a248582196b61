// ZeRO-3 as DeepSpeed v0.3 ran it (software stack deepspeed-2021, hw::SoftwareStack::
// zero3_tensor_sync): one all-gather per parameter tensor, each after a device sync and issued
// by the host in 380 us on 8 ranks (DeepSpeed#1069), one reduce-scatter per gradient tensor,
// and a host issue that grows with the group (a view and a copy per rank), against closed
// forms, DeepSpeed#1174's measured forward and Narayanan et al.'s ZeRO-3 scaling.
#include <algorithm>
#include <vector>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/simulate_plan.hpp"
#include "trainplan/simulator/topology.hpp"

using namespace trainplan;

namespace {

struct DataParallelPlan {
  plan::Plan plan;
  plan::PlanContext ctx;
};

// `spec` on `nodes` p4d.24xlarge (8 A100-40GB on NVSwitch), pure data parallelism.
DataParallelPlan resolve_dp(const models::ModelSpec& spec, int nodes, int zero, const std::string& software, int64_t micro_batch, int64_t seq) {
  plan::Plan p;
  p.model = spec.name;
  p.instance_type = "p4d.24xlarge";
  p.instance_count = nodes;
  p.dp = 8 * nodes;
  p.zero_stage = zero;
  p.software = software;
  p.micro_batch = micro_batch;
  p.global_batch = micro_batch * p.dp;
  p.seq_len = seq;
  p.precision = Precision::fp16;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), spec, "test");
  plan::validate(p, ctx, "test");
  return {p, std::move(ctx)};
}

// The end of the last forward compute on rank 0 (one micro-batch per step).
double forward_end_s(const sim::StepResult& r) {
  double end = 0;
  for (const auto& e : r.timeline.events)
    if (e.rank == 0 && e.kind == plan::TaskKind::compute && e.phase == plan::Phase::forward) end = std::max(end, e.end_s);
  return end;
}

}  // namespace

TEST_CASE("simulator: a collective's issue_s delays its start by exactly that", "[simulator]") {
  const sim::TableTopology topo = sim::make_switch_topology(4, 100e9, 1e-6);
  auto run = [&](double issue_s) {
    testing::ProgramBuilder b(4);
    const int g = b.group({0, 1, 2, 3}, plan::CommPurpose::zero_param);
    b.collective(g, plan::CollectiveKind::all_gather, 64e6);
    for (int r = 0; r < 4; ++r) b.rank(r).tasks.back().issue_s = issue_s;
    return sim::simulate_step(b.program(), topo, testing::test_gpu(), testing::exact_options()).step_time_s;
  };
  const double base = run(0);
  CHECK(base > 0);
  CHECK(run(380e-6) == Approx(base + 380e-6).epsilon(1e-12));
  CHECK(run(2e-3) == Approx(base + 2e-3).epsilon(1e-12));
}

TEST_CASE("simulator: a collective's issue_tail_s runs alongside its transfer and bounds its end", "[simulator]") {
  // Closed form: the collective ends at start + issue_s + max(transfer, issue_tail_s).
  const sim::TableTopology topo = sim::make_switch_topology(4, 100e9, 1e-6);
  auto run = [&](double issue_s, double tail_s) {
    testing::ProgramBuilder b(4);
    const int g = b.group({0, 1, 2, 3}, plan::CommPurpose::zero_param);
    b.collective(g, plan::CollectiveKind::all_gather, 64e6);
    for (int r = 0; r < 4; ++r) {
      b.rank(r).tasks.back().issue_s = issue_s;
      b.rank(r).tasks.back().issue_tail_s = tail_s;
    }
    return sim::simulate_step(b.program(), topo, testing::test_gpu(), testing::exact_options()).step_time_s;
  };
  const double transfer = run(0, 0);
  REQUIRE(transfer > 1e-4);
  CHECK(run(0, 0.5 * transfer) == Approx(transfer).epsilon(1e-12));  // hidden behind the transfer
  CHECK(run(0, 3.0 * transfer) == Approx(3.0 * transfer).epsilon(1e-12));
  CHECK(run(2e-3, 3.0 * transfer) == Approx(2e-3 + 3.0 * transfer).epsilon(1e-12));
  CHECK(run(2e-3, 0.5 * transfer) == Approx(2e-3 + transfer).epsilon(1e-12));
}

TEST_CASE("simulator: DeepSpeed v0.3's ZeRO-3 (deepspeed-2021) overlaps no gather or reduce-scatter with compute", "[simulator]") {
  const models::ModelSpec spec = models::ModelCatalog::builtin().spec("gpt2-124m");
  for (const char* stack : {"deepspeed-2021", "deepspeed"}) {
    const DataParallelPlan r = resolve_dp(spec, 1, 3, stack, 4, 512);
    const auto res = sim::simulate_plan(r.plan, r.ctx);
    std::vector<std::pair<double, double>> compute, comm;
    for (const auto& e : res.step.timeline.events) {
      if (e.rank != 0 || e.end_s <= e.start_s) continue;
      if (e.kind == plan::TaskKind::compute) compute.push_back({e.start_s, e.end_s});
      if (e.purpose == plan::CommPurpose::zero_param || e.purpose == plan::CommPurpose::zero_grad) comm.push_back({e.start_s, e.end_s});
    }
    REQUIRE(!compute.empty());
    REQUIRE(!comm.empty());
    double overlap = 0;
    for (const auto& [a0, a1] : comm)
      for (const auto& [b0, b1] : compute) overlap += std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
    INFO(stack);
    if (std::string(stack) == "deepspeed-2021") CHECK(overlap < 1e-12);
    else CHECK(overlap > 0);  // the current stack prefetches: the gathers hide behind compute
  }
}

TEST_CASE("simulator: DeepSpeed v0.3's per-tensor ZeRO-3 gathers cost a 5.1B BERT's forward what DeepSpeed#1174 measured", "[simulator]") {
  // DeepSpeed#1174 / PR #1188 (June 2021, v0.3.16, one p4d.24xlarge, bing_bert with 64 layers,
  // hidden 2560, 40 heads, FFN 10240, vocabulary 32003, fp16): the forward took ~470-480 ms
  // under ZeRO-3 and ~60 ms under ZeRO-2, so the gathers added 410-420 ms. Our BERT fuses Q,
  // K and V into one linear (12 parameter tensors per layer where bing_bert has 16): with the
  // same 380 us per tensor we expect ~20 % less issue time than the source, hence the band.
  models::ModelSpec spec = models::ModelCatalog::builtin().spec("bert-large");
  spec.name = "bing-bert-5.1b";
  spec.layers = 64;
  spec.hidden = 2560;
  spec.heads = 40;
  spec.kv_heads = 40;
  spec.ffn_hidden = 10240;
  spec.vocab = 32003;
  const DataParallelPlan z3 = resolve_dp(spec, 1, 3, "deepspeed-2021", 8, 128);
  const DataParallelPlan z2 = resolve_dp(spec, 1, 2, "deepspeed-2021", 8, 128);
  const double added = forward_end_s(sim::simulate_plan(z3.plan, z3.ctx).step) - forward_end_s(sim::simulate_plan(z2.plan, z2.ctx).step);
  INFO("ZeRO-3 forward - ZeRO-2 forward: " << added * 1e3 << " ms (DeepSpeed#1174: 410-420 ms)");
  CHECK(added > 0.75 * 0.415);
  CHECK(added < 1.10 * 0.415);
  // Of which the host's issue: 380 us per parameter tensor on these 8 ranks, as the lowering
  // counts them (the copies out overlap the transfers, so at least the views' part).
  double tensors = 0;
  for (const auto& op : z3.ctx.graph.ops())
    if (op.params > 0) tensors += op.has_bias ? 2 : 1;
  const hw::SoftwareStack& sw = z3.ctx.software;
  CHECK(added > tensors * (sw.zero3_tensor_issue_s + 8 * sw.zero3_rank_view_s));
}

TEST_CASE("simulator: DeepSpeed v0.3's ZeRO-3 issue grows with the data-parallel group (a view and a copy per rank)", "[simulator]") {
  // The same per-GPU work on 8 and on 64 ranks: the list collectives' per-rank host work adds
  // at least (64 - 8) views per gather and (64 - 8) views and copies per reduce-scatter chain's
  // first tensor; a stack whose collectives take flat buffers (per-rank costs 0) does not grow
  // by that much. Narayanan et al. 2021 (Table 2) saw ZeRO-3 stop scaling the same way.
  const models::ModelSpec spec = models::ModelCatalog::builtin().spec("gpt2-124m");
  auto step = [&](int nodes, bool rank_views) {
    DataParallelPlan r = resolve_dp(spec, nodes, 3, "deepspeed-2021", 4, 512);
    if (!rank_views) r.ctx.software.zero3_rank_view_s = r.ctx.software.zero3_rank_copy_s = 0;
    return sim::simulate_plan(r.plan, r.ctx).step.step_time_s;
  };
  const DataParallelPlan one = resolve_dp(spec, 1, 3, "deepspeed-2021", 4, 512);
  double tensors = 0;
  for (const auto& op : one.ctx.graph.ops())
    if (op.params > 0) tensors += op.has_bias ? 2 : 1;
  const hw::SoftwareStack& sw = one.ctx.software;
  const double gathers = 2 * tensors;  // forward and backward (no recomputation), one micro-batch
  const double grown = step(8, true) - step(1, true), flat = step(8, false) - step(1, false);
  INFO("8 -> 64 ranks: +" << grown * 1e3 << " ms with per-rank views, +" << flat * 1e3 << " ms without");
  CHECK(grown - flat > gathers * 56 * sw.zero3_rank_view_s);
  CHECK(grown - flat < (gathers + tensors) * 56 * (sw.zero3_rank_view_s + sw.zero3_rank_copy_s));
}
