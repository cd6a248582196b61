// FP8 training: the plan's fp8 section (round trip, errors), which ops run in FP8 and the
// quantization traffic they add (closed forms of op_cost.hpp), the memory of FP8 weight copies
// and scaling state, FP8 activations saved for backward, and the FP8 collectives.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/op_cost.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/plan/tp_comm.hpp"

using namespace trainplan;

namespace {
// Llama 2 7B on one p5.48xlarge (8 x H100), tp 2 with sequence parallelism, ZeRO-1.
const char* kFp8 = R"({"schema_version": 1, "model": "llama2-7b",
  "cluster": {"instance_type": "p5.48xlarge", "count": 1},
  "parallelism": {"dp": 4, "tp": 2, "pp": 1, "zero_stage": 1, "sequence_parallel": true},
  "batch": {"global_batch": 32, "micro_batch": 2, "seq_len": 4096},
  "precision": "fp8", "fp8": {"recipe": "delayed", "amax_history": 16}})";

plan::Plan parse_fp8(const std::string& text) { return plan::parse_plan(json::parse_text(text, "plan.json"), "plan.json"); }

plan::Plan fp8_with(const std::string& pointer, const json::Json& value) {
  json::Json doc = json::parse_text(kFp8, "plan.json");
  doc[json::Json::json_pointer(pointer)] = value;
  return plan::parse_plan(doc, "plan.json");
}

void validate_fp8(plan::Plan p) {
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
}

const models::Op& op_named(const models::ModelGraph& g, const std::string& name) {
  for (const auto& op : g.ops())
    if (op.name == name) return op;
  FAIL("no op " << name);
  return g.ops().front();
}
}  // namespace

TEST_CASE("fp8: the recipe section round-trips and defaults to TE's delayed scaling", "[plan][fp8]") {
  plan::Plan p = parse_fp8(kFp8);
  CHECK(p.fp8.recipe == plan::Fp8Recipe::delayed);
  CHECK(p.fp8.amax_history == 16);
  CHECK_FALSE(p.fp8.fp8_params);
  const json::Json j = plan::to_json(p);
  CHECK(j["fp8"] == json::Json({{"recipe", "delayed"}, {"fp8_params", false}, {"amax_history", 16}}));
  plan::Plan q = plan::parse_plan(j, "again.json");
  CHECK(q.fp8 == p.fp8);
  CHECK(json::dump(plan::to_json(q)) == json::dump(j));
  // Defaults: TE's DelayedScaling (amax_history_len = 1024), 16-bit parameters.
  json::Json doc = json::parse_text(kFp8, "plan.json");
  doc.erase("fp8");
  plan::Plan d = plan::parse_plan(doc, "plan.json");
  CHECK(d.fp8.recipe == plan::Fp8Recipe::delayed);
  CHECK(d.fp8.amax_history == 1024);
  // Other recipes write no amax history.
  plan::Plan c = fp8_with("/fp8", json::Json{{"recipe", "current"}, {"fp8_params", true}});
  CHECK(plan::to_json(c)["fp8"] == json::Json({{"recipe", "current"}, {"fp8_params", true}}));
  // A bf16 plan writes no fp8 section.
  plan::Plan b = parse_fp8(kFp8);
  b.precision = Precision::bf16;
  CHECK_FALSE(plan::to_json(b).contains("fp8"));
}

TEST_CASE("fp8: errors name the field and a fix", "[plan][fp8]") {
  REQUIRE_ERROR_CONTAINS(fp8_with("/precision", "bf16"), "plan.json: /fp8: an fp8 section in a plan that does not train in fp8");
  REQUIRE_ERROR_CONTAINS(fp8_with("/fp8/recipe", "mxfp9"), "plan.json: /fp8/recipe");
  REQUIRE_ERROR_CONTAINS(fp8_with("/fp8", json::Json{{"recipe", "mxfp8"}, {"amax_history", 8}}),
                         "/fp8/amax_history: amax_history applies to the delayed recipe, not mxfp8");
  REQUIRE_ERROR_CONTAINS(fp8_with("/fp8/amax_history", 0), "/fp8/amax_history: must be a positive integer");
  REQUIRE_ERROR_CONTAINS(fp8_with("/fp8/scaling", 1), "/fp8/scaling: unknown field");
}

TEST_CASE("fp8: needs FP8 tensor cores, mxfp8 needs Blackwell (compute capability 10.0)", "[plan][fp8]") {
  validate_fp8(parse_fp8(kFp8));  // H100: fine
  {  // A100 (8.0) and V100 (7.0) have no FP8.
    auto p = parse_fp8(kFp8);
    p.instance_type = "p4d.24xlarge";
    REQUIRE_ERROR_CONTAINS(validate_fp8(p), "plan.json: /precision: A100-SXM4-40GB (compute capability 8.0) has no FP8 tensor cores");
    REQUIRE_ERROR_CONTAINS(validate_fp8(p), "compute capability 8.9 or later");
    p.instance_type = "p3dn.24xlarge";
    REQUIRE_ERROR_CONTAINS(validate_fp8(p), "(compute capability 7.0) has no FP8 tensor cores");
  }
  auto mx = fp8_with("/fp8", json::Json{{"recipe", "mxfp8"}});
  REQUIRE_ERROR_CONTAINS(validate_fp8(mx), "plan.json: /fp8/recipe: the mxfp8 recipe needs Blackwell (compute capability 10.0+), H100-SXM5-80GB has 9.0");
  // The rule reads the compute capability, not the name: the same plan on a 10.0 GPU passes.
  auto ctx = plan::resolve(mx, hw::Catalog::builtin(), "plan.json");
  hw::GpuSpec blackwell = *ctx.gpu;
  blackwell.compute_capability = "10.0";
  ctx.gpu = &blackwell;
  CHECK_FALSE(plan::check(mx, ctx).has_value());
  // blockwise (DeepSeek-V3's scheme) runs on Hopper.
  validate_fp8(fp8_with("/fp8", json::Json{{"recipe", "blockwise"}}));
}

TEST_CASE("fp8: only the block linears run in FP8, adding the quantization traffic of the closed form", "[plan][fp8]") {
  plan::Plan p = parse_fp8(kFp8);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  const auto& g = ctx.graph;
  const int64_t b = p.micro_batch, mb = p.num_micro_batches;  // 2, 4
  const auto cost = [&](const models::Op& op, Precision prec, const plan::Fp8Context* f) {
    return plan::op_cost(op, b, p.tp, true, prec, p.attention, 1, 1, 1.0, f);
  };
  // Per recipe: bytes of quantizing e 16-bit elements (read, + amax read for current scaling;
  // write the row-wise and column-wise FP8 copies, + block scales).
  struct Case {
    plan::Fp8Recipe recipe;
    double reads, scales, history;
    int extra_kernels;
  };
  const Case cases[] = {{plan::Fp8Recipe::delayed, 1, 0, 16, 1},
                        {plan::Fp8Recipe::current, 2, 0, 0, 2},
                        {plan::Fp8Recipe::mxfp8, 1, 1.0 / 32, 0, 1},
                        {plan::Fp8Recipe::blockwise, 1, 4.0 / 128, 0, 1}};
  for (const char* name : {"block1.attn.qkv", "block1.attn.proj", "block1.mlp.fc1", "block1.mlp.fc2"}) {
    const models::Op& op = op_named(g, name);
    const plan::OpCost bf = cost(op, Precision::bf16, nullptr);
    const double m = static_cast<double>(bf.gemm_m), n = static_cast<double>(bf.gemm_n), k = static_cast<double>(bf.gemm_k);
    for (const Case& c : cases) {
      for (bool fp8_params : {false, true}) {
        CAPTURE(name, plan::fp8_recipe_name(c.recipe), fp8_params);
        plan::Fp8Context f{{c.recipe, 16, fp8_params}, mb};
        const plan::OpCost q = cost(op, Precision::fp8, &f);
        const auto quantize = [&](double e) { return c.reads * e * 2 + 2 * e * (1 + c.scales); };
        const double hist = c.history > 0 ? 2 * 4 * c.history : 0;
        const double weight = fp8_params ? 2 * k * n : quantize(k * n);
        CHECK(q.fp8_gemm);
        CHECK(q.flops_fwd == bf.flops_fwd);
        CHECK(q.flops_bwd == bf.flops_bwd);
        CHECK(q.fp8_cast_fwd_bytes == Approx(quantize(m * k) + weight / mb + 2 * hist).epsilon(1e-12));
        CHECK(q.fp8_cast_bwd_bytes == Approx(quantize(m * n) + hist).epsilon(1e-12));
        CHECK(q.serial_mem_fwd_bytes - bf.serial_mem_fwd_bytes == Approx(q.fp8_cast_fwd_bytes).epsilon(1e-12));
        CHECK(q.serial_mem_bwd_bytes - bf.serial_mem_bwd_bytes == Approx(q.fp8_cast_bwd_bytes).epsilon(1e-12));
        CHECK(q.kernels_fwd == bf.kernels_fwd + c.extra_kernels);
        CHECK(q.kernels_bwd == bf.kernels_bwd + c.extra_kernels);
        // The GEMMs read FP8 operands and write 16-bit results.
        CHECK(q.mem_fwd_bytes == Approx(m * k + k * n + 2 * m * n));
        CHECK(q.mem_bwd_bytes == Approx(2 * m * n + k * n + m * k + 2 * (m * k + 2 * k * n)));
        // The linear's own input is saved in FP8: (1 + scales) instead of 2 bytes per element.
        const double own = static_cast<double>(op.m) * static_cast<double>(op.k);
        const double full = op.saved_elems * 2;
        CHECK(q.saved_bytes == Approx(bf.saved_bytes * (full - own * (1 - c.scales)) / full).epsilon(1e-12));
      }
    }
  }
  {  // qkv saves exactly its input: FP8 halves it (delayed scaling, no block scales).
    const models::Op& qkv = op_named(g, "block1.attn.qkv");
    REQUIRE(qkv.saved_elems == static_cast<double>(qkv.m * qkv.k));
    CHECK(cost(qkv, Precision::fp8, nullptr).saved_bytes == Approx(cost(qkv, Precision::bf16, nullptr).saved_bytes / 2));
  }
  // Everything else stays 16-bit: attention, the LM head (Megatron keeps the output layer in
  // bf16), norms, the embedding and the loss cost what they cost under bf16.
  for (const auto& op : g.ops()) {
    if (plan::runs_in_fp8(op)) {
      CHECK((op.tp_split == models::TpSplit::column || op.tp_split == models::TpSplit::row));
      continue;
    }
    CAPTURE(op.name);
    const plan::OpCost q = cost(op, Precision::fp8, nullptr), bf = cost(op, Precision::bf16, nullptr);
    CHECK_FALSE(q.fp8_gemm);
    CHECK(q.serial_mem_fwd_bytes == bf.serial_mem_fwd_bytes);
    CHECK(q.mem_fwd_bytes == bf.mem_fwd_bytes);
    CHECK(q.mem_bwd_bytes == bf.mem_bwd_bytes);
    CHECK(q.saved_bytes == bf.saved_bytes);
  }
  CHECK_FALSE(plan::runs_in_fp8(op_named(g, "head.lm")));
}

TEST_CASE("fp8: weight memory adds TE's FP8 weight copies and scaling state, unless the weights are FP8", "[plan][fp8]") {
  plan::Plan p = parse_fp8(kFp8);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  double fp8_params = 0, linears = 0;
  for (const auto& op : ctx.graph.ops())
    if (plan::runs_in_fp8(op)) fp8_params += plan::op_params_on_rank(op, p.tp), linears += 1;
  REQUIRE(linears == 4 * 32);  // qkv, proj, fc1, fc2 per layer
  plan::Plan bf = p;
  bf.precision = Precision::bf16;
  const double base = plan::stage_memory(bf, ctx, 0).weights_bytes;
  const double state = linears * 3 * (8 + 4 * 16);  // input, weight, grad scales + 16-step amax history
  CHECK(plan::stage_memory(p, ctx, 0).weights_bytes - base == Approx(2 * fp8_params + state));
  p.fp8.fp8_params = true;
  CHECK(plan::stage_memory(p, ctx, 0).weights_bytes - base == Approx(state));
  p.fp8 = {plan::Fp8Recipe::mxfp8, 1024, false};
  CHECK(plan::stage_memory(p, ctx, 0).weights_bytes - base == Approx(2 * fp8_params * (1 + 1.0 / 32) + linears * 3 * 8));
  // Master weights, gradients and optimizer state are those of bf16 training.
  CHECK(plan::stage_memory(p, ctx, 0).optimizer_bytes == plan::stage_memory(bf, ctx, 0).optimizer_bytes);
  CHECK(plan::stage_memory(p, ctx, 0).gradients_bytes == plan::stage_memory(bf, ctx, 0).gradients_bytes);
  // Saved activations shrink by the linears' FP8 inputs.
  CHECK(plan::stage_memory(p, ctx, 0).activations_bytes < plan::stage_memory(bf, ctx, 0).activations_bytes);
}

TEST_CASE("fp8: the sequence-parallel input all-gather moves FP8, ZeRO gathers FP8 parameters with fp8_params", "[plan][fp8]") {
  plan::Plan p = parse_fp8(kFp8);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  const auto& g = ctx.graph;
  const auto bytes = [&](const plan::Plan& q, plan::CommPurpose purpose, plan::TensorRole role) {
    plan::StepProgram prog = plan::lower(q, ctx);
    double total = 0;
    for (const auto& t : prog.ranks[0].tasks)
      if (t.kind == plan::TaskKind::collective && t.purpose == purpose && t.role == role) total += t.bytes;
    return total;
  };
  plan::Plan bf = p;
  bf.precision = Precision::bf16;
  // Forward input all-gathers: those before FP8 linears at 1 byte, the LM head's at 2.
  double fp8_elems = 0, half_elems = 0;
  for (const auto& u : g.units())
    for (const auto& c : plan::tp_collectives(g, u.index, true))
      if (c.phase == plan::Phase::forward && c.kind == plan::CollectiveKind::all_gather) {
        const double e = c.elems_per_sample * static_cast<double>(p.micro_batch);
        (plan::runs_in_fp8(g.ops()[static_cast<size_t>(c.op)]) ? fp8_elems : half_elems) += e;
        CHECK(plan::tp_collective_element_bytes(g, c, Precision::fp8) == (plan::runs_in_fp8(g.ops()[static_cast<size_t>(c.op)]) ? 1.0 : 2.0));
      } else {
        CHECK(plan::tp_collective_element_bytes(g, c, Precision::fp8) == 2.0);  // gradients and outputs stay 16-bit
      }
  REQUIRE(fp8_elems > 0);
  REQUIRE(half_elems > 0);
  const double m = static_cast<double>(p.num_micro_batches);
  CHECK(bytes(p, plan::CommPurpose::tp, plan::TensorRole::input) == Approx(m * (fp8_elems + 2 * half_elems)));
  CHECK(bytes(bf, plan::CommPurpose::tp, plan::TensorRole::input) == Approx(m * 2 * (fp8_elems + half_elems)));
  // ZeRO-1 parameter all-gather: 16-bit, or 1 byte for the FP8 linears' weights with fp8_params.
  double params = 0, fp8_params = 0;
  for (const auto& op : g.ops()) {
    params += plan::op_params_on_rank(op, p.tp);
    if (plan::runs_in_fp8(op)) fp8_params += plan::op_params_on_rank(op, p.tp);
  }
  CHECK(bytes(p, plan::CommPurpose::zero_param, plan::TensorRole::params) == Approx(2 * params));
  p.fp8.fp8_params = true;
  CHECK(bytes(p, plan::CommPurpose::zero_param, plan::TensorRole::params) == Approx(2 * params - fp8_params));
  // Gradients stay 16-bit.
  CHECK(bytes(p, plan::CommPurpose::zero_grad, plan::TensorRole::grads) == Approx(2 * params));
}
