// Context parallelism in the planner: the analytical estimate against closed forms (the K, V
// gathers, the dp * cp gradient group) and the simulator, and the search's cp axis.
#include <algorithm>

#include "plan_fixture.hpp"
#include "test_support.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;

namespace {

using Resolved = trainplan::testing::ResolvedPlan;

Resolved resolved(const std::string& model, int count, int dp, int cp, int64_t seq, int64_t gb) {
  plan::Plan p;
  p.model = model;
  p.instance_type = "p5.48xlarge";
  p.instance_count = count;
  p.dp = dp;
  p.cp = cp;
  p.seq_len = seq;
  p.global_batch = gb;
  p.micro_batch = 1;
  p.zero_stage = 1;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return {p, std::move(ctx)};
}

// Ring all-gather of `bytes` over the two GPUs a and b of one NVSwitch node: (n-1)/n S / B + (n-1) latencies.
double pair_gather_s(const hw::Cluster& cl, int a, int b, double bytes) {
  const auto& ab = cl.route(a, b);
  const auto& ba = cl.route(b, a);
  const double bw = std::min(ab.bottleneck_bandwidth_bytes_per_s, ba.bottleneck_bandwidth_bytes_per_s);
  return 0.5 * bytes / bw + std::max(ab.latency_s, ba.latency_s);
}

sim::StepResult simulate(const Resolved& r) {
  sim::PlanSimOptions o;
  o.sim.record_timeline = false;
  o.memory_events = false;
  return sim::simulate_plan(r.plan, r.ctx, o).step;
}

}  // namespace

TEST_CASE("analytical: cp halves a long-sequence step on twice the GPUs, exposing its K, V gathers and dK, dV reduce-scatters", "[planner]") {
  // Llama 3 8B at 16k tokens, dp 8, the same global batch: cp 2 puts each sample on two GPUs.
  const auto one = resolved("llama3-8b", 1, 8, 1, 16384, 16);
  const auto two = resolved("llama3-8b", 2, 8, 2, 16384, 16);
  const auto e1 = planner::estimate_step(one.plan, one.ctx);
  const auto e2 = planner::estimate_step(two.plan, two.ctx);
  CHECK(e2.model_flops_per_step == Approx(e1.model_flops_per_step));
  CHECK(e2.hardware_flops_per_step == Approx(e1.hardware_flops_per_step));
  CHECK(e2.compute_s == Approx(e1.compute_s / 2).epsilon(0.03));  // the same work on twice the GPUs (GEMMs of half the rows)
  // The rest of the step: the ZeRO-1 gathers now span two nodes (dp * cp = 16 ranks).
  CHECK(e2.step_time_s / e1.step_time_s > 0.5);
  CHECK(e2.step_time_s / e1.step_time_s < 0.65);
  CHECK(e1.exposed_comm_s(plan::CommPurpose::cp) == 0);
  // Per layer and micro-batch: the forward gather and the dK, dV reduce-scatter are exposed, the
  // backward gather at most (it overlaps the backward of the MLP): between 2 and 3 ring
  // gathers of S = 2 s kv d b elem over the pair of GPUs of a cp group.
  const auto& m = two.ctx.model_spec;
  const double S = 2.0 * 16384 * static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim()) * 2.0;
  const double g = pair_gather_s(two.ctx.cluster, 0, 1, S);
  const double n = static_cast<double>(m.layers) * static_cast<double>(two.plan.num_micro_batches);
  CHECK(e2.exposed_comm_s(plan::CommPurpose::cp) >= 2 * n * g * (1 - 1e-9));
  CHECK(e2.exposed_comm_s(plan::CommPurpose::cp) <= 3 * n * g * (1 + 1e-9));
  // The simulator agrees: a shorter step, exposed cp communication in its breakdown.
  const auto s1 = simulate(one), s2 = simulate(two);
  CHECK(s2.step_time_s / s1.step_time_s > 0.5);
  CHECK(s2.step_time_s / s1.step_time_s < 0.65);
  CHECK(s1.breakdown.exposed_comm(plan::CommPurpose::cp) == 0);
  CHECK(s2.breakdown.exposed_comm(plan::CommPurpose::cp) == Approx(e2.exposed_comm_s(plan::CommPurpose::cp)).epsilon(0.25));
  CHECK(s2.breakdown.compute_s == Approx(e2.compute_s).epsilon(0.01));
}

TEST_CASE("analytical: with cp the gradients are reduced over the dp * cp ranks holding the same parameters", "[planner]") {
  // dp 4 x cp 2 on one node: one group of all 8 GPUs; ring all-reduce 2(n-1)/n S / B + NCCL's
  // ring latency (8.4 us + 14 NVLink steps x 3.4 us) with n = 8, as plain dp 8; B is the whole
  // NVSwitch link on p5 (H100: NCCL reduces in the switch, NVLS).
  auto r = resolved("llama3-8b", 1, 4, 2, 8192, 8);
  r.plan.zero_stage = 0;
  r.plan.overlap_grad_reduce = false;
  auto plain = resolved("llama3-8b", 1, 8, 1, 8192, 8);
  plain.plan.zero_stage = 0;
  plain.plan.overlap_grad_reduce = false;
  const double with_cp = planner::estimate_step(r.plan, r.ctx).exposed_comm_s(plan::CommPurpose::dp);
  const double without = planner::estimate_step(plain.plan, plain.ctx).exposed_comm_s(plan::CommPurpose::dp);
  const double S = plan::stage_memory(r.plan, r.ctx, 0).params_on_rank * 2.0;
  const auto& cl = r.ctx.cluster;
  double bw = 1e300;
  for (int gpu = 0; gpu < 8; ++gpu) bw = std::min(bw, cl.route(gpu, (gpu + 1) % 8).bottleneck_bandwidth_bytes_per_s);
  const double lat = (8.4 + 14 * 3.4) * 1e-6;
  CHECK(with_cp == Approx(2 * 7.0 / 8 * S / bw + lat).epsilon(1e-6));
  CHECK(with_cp == Approx(without).epsilon(1e-12));
}

TEST_CASE("search: long sequences get context-parallel plans, short ones only when asked", "[planner]") {
  planner::SearchRequest req;
  req.model = "llama3-8b";
  req.tokens = 1e9;
  req.instance_types = {"p5.48xlarge"};
  req.instance_counts = {1, 2};
  req.threads = 2;
  auto count_cp = [](const planner::SearchResult& res) {
    return std::count_if(res.ranked.begin(), res.ranked.end(), [](const planner::Candidate& c) { return c.plan.cp > 1; });
  };
  req.seq_len = 32768;
  const auto longer = planner::search(req, hw::Catalog::builtin());
  REQUIRE_FALSE(longer.ranked.empty());
  CHECK(count_cp(longer) > 0);
  for (const auto& c : longer.ranked) {
    CHECK((c.plan.cp == 1 || c.plan.cp == 2 || c.plan.cp == 4 || c.plan.cp == 8));
    CHECK(c.plan.world_size() == c.plan.instance_count * 8);
  }
  // The best long-sequence plan is a valid plan that fits.
  plan::Plan best = longer.ranked.front().plan;
  auto ctx = plan::resolve(best, hw::Catalog::builtin(), "best");
  plan::validate(best, ctx, "best");
  CHECK(plan::peak_memory(best, ctx).fits());
  // Short sequences: no cp unless the request lists it.
  req.seq_len = 2048;
  CHECK(count_cp(planner::search(req, hw::Catalog::builtin())) == 0);
  req.context_parallel = {1, 2};
  const auto asked = planner::search(req, hw::Catalog::builtin());
  CHECK(count_cp(asked) > 0);
  for (const auto& c : asked.ranked) CHECK(c.plan.cp <= 2);
  // A framework without cp ranks none.
  req.seq_len = 32768;
  req.context_parallel = {};
  req.framework = planner::ExportTarget::deepspeed;
  CHECK(count_cp(planner::search(req, hw::Catalog::builtin())) == 0);
  req.framework = planner::ExportTarget::megatron;
  CHECK(count_cp(planner::search(req, hw::Catalog::builtin())) > 0);
}
