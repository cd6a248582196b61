// Expert parallelism in the plan: the format (parallelism.ep, moe), its rules, the per-op
// costs of routed experts and the ep / expert-dp groups of the rank layout.
#include "test_support.hpp"
#include "trainplan/plan/expert_parallel.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/plan.hpp"

using namespace trainplan;

namespace {

const char* kMoePlan = R"({"schema_version": 1, "model": "llama-tiny",
  "cluster": {"instance_type": "p4d.24xlarge", "count": 1},
  "parallelism": {"dp": 8, "tp": 1, "pp": 1, "ep": 4},
  "moe": {"capacity_factor": 1.25, "load_imbalance": 1.5},
  "batch": {"global_batch": 16, "micro_batch": 1}})";

plan::Plan parse_doc(const json::Json& doc) { return plan::parse_plan(doc, "plan.json"); }

// kMoePlan with one field replaced (by JSON pointer).
plan::Plan moe_plan_with(const std::string& pointer, const json::Json& value) {
  json::Json doc = json::parse_text(kMoePlan, "plan.json");
  doc[json::Json::json_pointer(pointer)] = value;
  return parse_doc(doc);
}

// llama-tiny as a mixture of experts: `experts` routed experts, top-2.
models::ModelSpec moe_spec(int64_t experts) {
  models::ModelSpec s = models::resolve_model("llama-tiny");
  s.num_experts = experts;
  s.experts_per_token = 2;
  return s;
}

// The first problem validate() finds in `p` against `spec`, as text ("" when none).
std::string problem(plan::Plan p, const models::ModelSpec& spec) {
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), spec, "plan.json");
  try {
    plan::validate(p, ctx, "plan.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A routed-expert linear of E experts (per sample: s tokens, top-k copies), as the model graph
// builds it: m = s k rows, weights {E, in, out}.
models::Op expert_linear(int64_t s, int64_t k, int64_t in, int64_t out, int64_t experts) {
  models::Op op;
  op.kind = models::OpKind::linear;
  op.tp_split = models::TpSplit::column;
  op.expert = true;
  op.num_experts = experts;
  op.top_k = k;
  op.m = s * k;
  op.k = in;
  op.n = out;
  const double rows = static_cast<double>(s * k);
  op.params = static_cast<double>(experts * in * out);
  op.flops_fwd = 2.0 * rows * static_cast<double>(in * out);
  op.flops_bwd = 2.0 * op.flops_fwd;
  op.mem_elems_fwd = rows * static_cast<double>(in + out) + op.params;
  op.mem_elems_bwd = 2.0 * rows * static_cast<double>(in + out) + 2.0 * op.params;
  op.saved_elems = rows * static_cast<double>(in);
  op.out_shape = {s * k, out};
  return op;
}

}  // namespace

TEST_CASE("plan: ep and moe routing round-trip, defaults are not written", "[plan][moe]") {
  plan::Plan p = parse_doc(json::parse_text(kMoePlan, "plan.json"));
  CHECK(p.ep == 4);
  CHECK(p.moe_capacity_factor == 1.25);
  CHECK(p.moe_load_imbalance == 1.5);
  CHECK(p.expert_dp() == 2);
  const json::Json j = plan::to_json(p);
  CHECK(j["parallelism"]["ep"] == 4);
  CHECK(j["moe"]["capacity_factor"] == 1.25);
  plan::Plan q = parse_doc(j);
  CHECK(json::dump(plan::to_json(q)) == json::dump(j));
  // A dense plan's JSON carries neither.
  plan::Plan dense = moe_plan_with("/parallelism/ep", 1);
  dense.moe_capacity_factor = 0;
  dense.moe_load_imbalance = 1;
  const json::Json d = plan::to_json(dense);
  CHECK_FALSE(d["parallelism"].contains("ep"));
  CHECK_FALSE(d.contains("moe"));
}

TEST_CASE("plan: a capacity factor below 1 or an imbalance below 1 is refused with its pointer", "[plan][moe]") {
  CHECK_THROWS_WITH(moe_plan_with("/moe/capacity_factor", 0.5),
                    Catch::Contains("/moe/capacity_factor") && Catch::Contains("must be 0 (dropless) or at least 1"));
  CHECK_THROWS_WITH(moe_plan_with("/moe/load_imbalance", 0.9),
                    Catch::Contains("/moe/load_imbalance") && Catch::Contains("must be at least 1"));
  CHECK_THROWS_WITH(moe_plan_with("/parallelism/ep", 0), Catch::Contains("/parallelism/ep"));
  CHECK_THROWS_WITH(moe_plan_with("/moe/top_k", 2), Catch::Contains("/moe"));  // unknown field
  CHECK_NOTHROW(moe_plan_with("/moe/capacity_factor", 0));
}

TEST_CASE("plan: ep rules (a MoE model, ep divides dp*cp and the experts, no ZeRO-3)", "[plan][moe]") {
  plan::Plan p = parse_doc(json::parse_text(kMoePlan, "plan.json"));
  CHECK(problem(p, moe_spec(8)).empty());
  const std::string dense = problem(p, models::resolve_model("llama-tiny"));
  CHECK_THAT(dense, Catch::Contains("/parallelism/ep") && Catch::Contains("has no experts"));
  plan::Plan routing_only = p;
  routing_only.ep = 1;
  CHECK_THAT(problem(routing_only, models::resolve_model("llama-tiny")), Catch::Contains("/moe") && Catch::Contains("leave \"moe\" out"));
  CHECK_THAT(problem(p, moe_spec(6)), Catch::Contains("/parallelism/ep") && Catch::Contains("does not divide the 6 experts"));
  plan::Plan three = p;
  three.ep = 3;
  CHECK_THAT(problem(three, moe_spec(6)), Catch::Contains("does not divide the 8 data-parallel ranks"));
  plan::Plan zero3 = p;
  zero3.zero_stage = 3;
  CHECK_THAT(problem(zero3, moe_spec(8)), Catch::Contains("/parallelism/zero_stage") && Catch::Contains("ZeRO-3"));
  plan::Plan ps = p;
  ps.dp_algorithm = plan::DpAlgorithm::parameter_server;
  CHECK_THAT(problem(ps, moe_spec(8)), Catch::Contains("/data_parallel/algorithm"));
}

TEST_CASE("plan: a routed expert's cost is the busiest rank's share on one expert's GEMM", "[plan][moe]") {
  const int64_t s = 512, k = 2, h = 256, f = 1024, E = 8, b = 4;
  const models::Op op = expert_linear(s, k, h, f, E);
  const plan::OpCost base = plan::op_cost(op, b, 1, false, Precision::bf16, plan::AttentionImpl::flash);
  // ep = 1, balanced: the whole graph's numbers; one expert's rows are b s k / E.
  CHECK(base.flops_fwd == Approx(b * 2.0 * s * k * h * f));
  CHECK(base.params == Approx(static_cast<double>(E * h * f)));
  CHECK(base.gemm_m == b * s * k / E);
  CHECK(base.gemm_n == f);
  CHECK(base.gemm_k == h);
  // ep = 4, load 1.5: the same balanced FLOPs per rank x load, 1/ep of the experts, and an
  // expert's rows b s k ep / E x load.
  const plan::OpCost c = plan::op_cost(op, b, 1, false, Precision::bf16, plan::AttentionImpl::flash, 1, 4, 1.5);
  CHECK(c.flops_fwd == Approx(1.5 * base.flops_fwd));
  CHECK(c.flops_bwd == Approx(1.5 * base.flops_bwd));
  CHECK(c.saved_bytes == Approx(1.5 * base.saved_bytes));
  CHECK(c.params == Approx(base.params / 4));
  CHECK(c.gemm_m == static_cast<int64_t>(b * s * k * 4 / E * 1.5));
  // Traffic: routed rows x load, plus the rank's E/ep experts' weights once (bf16: 2 bytes).
  CHECK(c.mem_fwd_bytes == Approx((1.5 * b * s * k * (h + f) + static_cast<double>(E * h * f) / 4) * 2.0));
  // tp splits the expert's output columns as it does a dense MLP's.
  const plan::OpCost t = plan::op_cost(op, b, 2, false, Precision::bf16, plan::AttentionImpl::flash, 1, 4, 1.0);
  CHECK(t.gemm_n == f / 2);
  CHECK(t.params == Approx(base.params / 8));
}

TEST_CASE("plan: the dispatch and combine all-to-all move b s/cp k h elements x load", "[plan][moe]") {
  const int64_t s = 512, k = 2, h = 256, b = 4;
  models::Op dispatch;
  dispatch.kind = models::OpKind::moe_dispatch;
  dispatch.top_k = k;
  dispatch.num_experts = 8;
  dispatch.out_shape = {s * k, h};
  models::Op combine = dispatch;
  combine.kind = models::OpKind::moe_combine;
  combine.out_shape = {s, h};
  auto bytes = [&](const models::Op& op, int cp, int ep, double load) {
    return plan::op_cost(op, b, 2, true, Precision::bf16, plan::AttentionImpl::flash, cp, ep, load).ep_a2a_bytes;
  };
  const double want = static_cast<double>(b * s * k * h) * 2.0;  // bf16; not divided by tp
  CHECK(bytes(dispatch, 1, 4, 1.0) == Approx(want));
  CHECK(bytes(combine, 1, 4, 1.0) == Approx(want));
  CHECK(bytes(dispatch, 2, 4, 1.25) == Approx(want / 2 * 1.25));
  CHECK(bytes(dispatch, 1, 1, 1.0) == 0);  // no expert parallelism: nothing to move
}

TEST_CASE("plan: ep groups are consecutive data-parallel positions, expert-dp groups stride by ep", "[plan][moe]") {
  plan::Plan p;
  p.dp = 4, p.cp = 2, p.tp = 2, p.pp = 1, p.ep = 4;
  // rank = (dp_rank * cp + cp_rank) * tp + tp_rank: position flat = dp_rank * cp + cp_rank.
  const auto ep = plan::ep_groups(p);
  REQUIRE(ep.size() == 4);  // (tp 2) x (expert_dp 2)
  CHECK(ep[0] == std::vector<int>{0, 2, 4, 6});     // tp 0, positions 0..3
  CHECK(ep[1] == std::vector<int>{8, 10, 12, 14});  // tp 0, positions 4..7
  CHECK(ep[2] == std::vector<int>{1, 3, 5, 7});     // tp 1
  const auto edp = plan::expert_dp_groups(p);
  REQUIRE(edp.size() == 8);  // (tp 2) x (ep 4)
  CHECK(edp[0] == std::vector<int>{0, 8});
  CHECK(edp[1] == std::vector<int>{2, 10});
  p.ep = 8;
  CHECK(plan::expert_dp_groups(p).empty());
  p.ep = 1;
  CHECK(plan::ep_groups(p).empty());
}
