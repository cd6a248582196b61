// Synchronized batch norm lowered into plans (issue 14, section 4). Oracles: the closed form of
// PyTorch SyncBatchNorm's collectives (per batch-norm layer and micro-batch, a forward
// all-gather of (2C + 1) fp32 per rank and a backward all-reduce of 2C fp32 over the
// data-parallel group, each on the critical path) timed on the catalog fabric
// (sim::sync_batchnorm_cost); the simulated step with sync BN minus without must equal it
// within 1 %, the estimate exactly (one number per plan); nothing at all with dp = 1.
#include <algorithm>

#include "test_support.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/simulator/simulate_plan.hpp"
#include "trainplan/simulator/sync_batchnorm.hpp"

using namespace trainplan;

namespace {

// ResNet-50 data parallel on `count` instances of `type`, one micro-batch of `micro` images per
// GPU per micro-batch, `m` micro-batches. The gradient reduction runs after the backward
// (overlap off), so nothing shares the network with the batch-norm collectives.
struct Case {
  plan::Plan plan;
  plan::PlanContext ctx;
};
Case resnet(const std::string& type, int count, int64_t micro, int64_t m, bool sync, plan::Recompute rec = plan::Recompute::none) {
  plan::Plan p;
  p.model = "resnet-50";
  p.instance_type = type;
  p.instance_count = count;
  plan::Plan probe = p;
  probe.global_batch = 1;
  p.dp = plan::resolve(probe, hw::Catalog::builtin(), "test").cluster.num_gpus();
  p.micro_batch = micro;
  p.num_micro_batches = m;
  p.global_batch = micro * m * p.dp;
  p.overlap_grad_reduce = false;
  p.recompute = rec;
  p.sync_batch_norm = sync;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  plan::validate(p, ctx, "test");
  return Case{p, std::move(ctx)};
}

double simulated_s(const Case& c) { return sim::simulate_plan(c.plan, c.ctx).step.step_time_s; }
double estimated_s(const Case& c) { return planner::estimate_step(c.plan, c.ctx).step_time_s; }

}  // namespace

TEST_CASE("sync-bn: simulated step with synchronized batch norm minus without = the collectives' closed form (1 node)",
          "[planner][syncbn]") {
  const Case off = resnet("p3.16xlarge", 1, 32, 2, false);
  const Case on = resnet("p3.16xlarge", 1, 32, 2, true);
  const sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(on.plan, on.ctx);
  REQUIRE(c.layers == 53);
  CHECK(c.collectives_per_step == 2 * 2 * 53);
  REQUIRE(c.time_per_step_s > 0);
  INFO("closed form " << c.time_per_step_s);
  CHECK(simulated_s(on) - simulated_s(off) == Approx(c.time_per_step_s).epsilon(0.01));
  // The estimate adds exactly the same collectives.
  CHECK(estimated_s(on) - estimated_s(off) == Approx(c.time_per_step_s).epsilon(1e-9));
  CHECK(planner::estimate_step(on.plan, on.ctx).exposed_comm_s(plan::CommPurpose::sync_bn) == Approx(c.time_per_step_s).epsilon(1e-9));
}

TEST_CASE("sync-bn: across instances over the network the difference is the closed form too", "[planner][syncbn]") {
  const Case off = resnet("p3.16xlarge", 2, 32, 1, false);
  const Case on = resnet("p3.16xlarge", 2, 32, 1, true);
  const sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(on.plan, on.ctx);
  REQUIRE(c.time_per_step_s > 0);
  CHECK(simulated_s(on) - simulated_s(off) == Approx(c.time_per_step_s).epsilon(0.01));
  CHECK(estimated_s(on) - estimated_s(off) == Approx(c.time_per_step_s).epsilon(1e-9));
}

TEST_CASE("sync-bn: full recomputation repeats the forward all-gathers", "[planner][syncbn]") {
  const Case off = resnet("p3.16xlarge", 1, 32, 1, false, plan::Recompute::full);
  const Case on = resnet("p3.16xlarge", 1, 32, 1, true, plan::Recompute::full);
  const sim::SyncBatchnormCost c = sim::sync_batchnorm_cost(on.plan, on.ctx);
  CHECK(c.collectives_per_step == 3 * 53);
  CHECK(c.time_per_step_s == Approx(2 * c.forward_s_per_micro_batch + c.backward_s_per_micro_batch));
  CHECK(simulated_s(on) - simulated_s(off) == Approx(c.time_per_step_s).epsilon(0.01));
  CHECK(estimated_s(on) - estimated_s(off) == Approx(c.time_per_step_s).epsilon(1e-9));
}

TEST_CASE("sync-bn: with dp = 1 there is nothing to synchronize", "[planner][syncbn]") {
  const Case off = resnet("p3.2xlarge", 1, 32, 2, false);
  const Case on = resnet("p3.2xlarge", 1, 32, 2, true);
  CHECK(on.plan.dp == 1);
  CHECK(simulated_s(on) == simulated_s(off));
  CHECK(estimated_s(on) == estimated_s(off));
  CHECK(sim::sync_batchnorm_cost(on.plan, on.ctx).time_per_step_s == 0);
  const plan::StepProgram prog = plan::lower(on.plan, on.ctx, {});
  CHECK(prog.streams.size() == 5);  // compute, tp, pp-send, pp-recv, dp: no sync-bn stream
}

TEST_CASE("sync-bn: the lowering puts one all-gather after each batch norm's forward and one all-reduce after its backward",
          "[planner][syncbn]") {
  const Case on = resnet("p3.16xlarge", 1, 32, 2, true);
  const plan::StepProgram prog = plan::lower(on.plan, on.ctx, {});
  REQUIRE(prog.streams.back() == "sync-bn");
  const plan::RankProgram& r = prog.ranks[3];
  int gathers = 0, reduces = 0;
  for (const plan::Task& t : r.tasks) {
    if (t.kind != plan::TaskKind::collective || t.purpose != plan::CommPurpose::sync_bn) continue;
    const models::Op& op = on.ctx.graph.ops()[static_cast<size_t>(t.op)];
    REQUIRE(op.kind == models::OpKind::batchnorm);
    const int64_t channels = op.weight_shape.front();
    CHECK(t.role == plan::TensorRole::norm_stats);
    CHECK(prog.groups[static_cast<size_t>(t.group)].ranks.size() == 8);
    if (t.collective == plan::CollectiveKind::all_gather) {
      ++gathers;
      CHECK(t.phase == plan::Phase::forward);
      CHECK(t.bytes == 8 * (2.0 * channels + 1) * 4);
    } else {
      ++reduces;
      CHECK(t.collective == plan::CollectiveKind::all_reduce);
      CHECK(t.phase == plan::Phase::backward);
      CHECK(t.bytes == 2.0 * channels * 4);
    }
    // The next compute of the rank waits for it.
    const auto next = std::find_if(r.tasks.begin() + t.id + 1, r.tasks.end(),
                                   [](const plan::Task& n) { return n.kind == plan::TaskKind::compute; });
    REQUIRE(next != r.tasks.end());
    CHECK(std::find(next->deps.begin(), next->deps.end(), t.id) != next->deps.end());
  }
  CHECK(gathers == 53 * 2);
  CHECK(reduces == 53 * 2);
  CHECK(plan::check_program(prog).empty());
}

TEST_CASE("sync-bn: the plan field round-trips and is refused for a model without batch norm", "[planner][syncbn]") {
  Case on = resnet("p3.16xlarge", 1, 32, 1, true);
  const json::Json j = plan::to_json(on.plan);
  CHECK(j["parallelism"]["sync_batch_norm"] == true);
  CHECK(plan::parse_plan(j, "p.json").sync_batch_norm);
  CHECK_FALSE(plan::to_json(resnet("p3.16xlarge", 1, 32, 1, false).plan)["parallelism"].contains("sync_batch_norm"));
  json::Json bad = j;
  bad["parallelism"]["sync_batch_norm"] = "yes";
  REQUIRE_ERROR_CONTAINS(plan::parse_plan(bad, "p.json"), "/parallelism/sync_batch_norm");
  plan::Plan gpt;
  gpt.model = "gpt2-124m";
  gpt.instance_type = "p3.16xlarge";
  gpt.dp = 8;
  gpt.global_batch = 64;
  gpt.micro_batch = 8;
  gpt.sync_batch_norm = true;
  const plan::PlanContext ctx = plan::resolve(gpt, hw::Catalog::builtin(), "gpt.json");
  REQUIRE_ERROR_CONTAINS(plan::validate(gpt, ctx, "gpt.json"), "/parallelism/sync_batch_norm");
}

TEST_CASE("sync-bn: --sync-bn plans it in every candidate of a search", "[planner][syncbn]") {
  planner::SearchOptions o;
  o.model = "resnet-50";
  o.samples = "1.28M";
  o.epochs = "1";
  o.instances = "p3.16xlarge";
  o.counts = "1,2";
  o.simulate_top = 0;
  o.threads = 1;
  o.sync_bn = true;
  const planner::SearchRequest req = planner::search_request(o);
  const planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
  REQUIRE_FALSE(res.ranked.empty());
  for (const auto& c : res.ranked) {
    CHECK(c.plan.sync_batch_norm);
    if (c.plan.dp > 1) CHECK(c.step.exposed_comm_s(plan::CommPurpose::sync_bn) > 0);
  }
  o.model = "gpt2-124m";
  o.samples.clear();
  o.epochs.clear();
  o.tokens = "1e9";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--sync-bn");
}

TEST_CASE("sync-bn: exports say the training script converts the model to SyncBatchNorm", "[planner][syncbn]") {
  const Case on = resnet("p3.16xlarge", 1, 32, 1, true);
  const Case off = resnet("p3.16xlarge", 1, 32, 1, false);
  for (auto target : {planner::ExportTarget::torchrun, planner::ExportTarget::deepspeed}) {
    const auto notes = planner::export_notes(on.plan, on.ctx, target);
    CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("convert_sync_batchnorm") != std::string::npos; }));
    const auto none = planner::export_notes(off.plan, off.ctx, target);
    CHECK(std::none_of(none.begin(), none.end(), [](const std::string& n) { return n.find("SyncBatchNorm") != std::string::npos; }));
  }
}
