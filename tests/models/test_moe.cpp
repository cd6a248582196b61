// Mixture-of-experts graphs: closed-form parameters, FLOPs and saved activations of a small
// MoE spec, the one-expert reduction to a dense MLP, published total and active parameter
// counts of the catalog's MoE models, and errors of bad expert fields.
#include <cmath>

#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::require_located_error;

namespace {

// A Llama-style decoder (GQA 4 heads of 16, 2 kv heads); `moe` appends expert fields.
ModelSpec small(const std::string& moe) {
  const std::string text = R"({"name": "m", "family": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                               "ffn_hidden": 176, "vocab": 256, "seq_len": 32)" +
                           (moe.empty() ? "" : ", " + moe) + "}";
  return parse_model_file(text, "m.json").at(0);
}

constexpr double s = 32, h = 64, E = 4, k = 2, fe = 48, fs = 96, L = 2, V = 256, f = 176;
const std::string kMoe = R"("num_experts": 4, "experts_per_token": 2, "expert_ffn_hidden": 48, "shared_expert_ffn_hidden": 96)";

double sum_over(const ModelGraph& g, const std::string& prefix, double Op::*field) {
  double sum = 0;
  for (const auto& op : g.ops())
    if (op.name.rfind(prefix, 0) == 0) sum += op.*field;
  return sum;
}

}  // namespace

TEST_CASE("models: a MoE block's MLP is router, dispatch, routed experts, combine and the shared expert", "[models][moe]") {
  ModelGraph g = build_graph(small(kMoe));
  const Op& router = g.op_named("block1.mlp.router");
  CHECK(router.kind == OpKind::router);
  CHECK(router.tp_split == TpSplit::replicated);
  CHECK(router.weight_shape == std::vector<int64_t>{64, 4});
  CHECK_FALSE(router.has_bias);
  CHECK(router.out_shape == std::vector<int64_t>{32, 2});
  CHECK(router.inputs == std::vector<int>{g.op_named("block1.norm2").id});
  const Op& dispatch = g.op_named("block1.mlp.dispatch");
  CHECK(dispatch.kind == OpKind::moe_dispatch);
  CHECK(dispatch.inputs == std::vector<int>{g.op_named("block1.norm2").id, router.id});
  CHECK(dispatch.out_shape == std::vector<int64_t>{64, 64});
  CHECK(dispatch.flops_fwd == 0);
  const Op& fc1 = g.op_named("block1.mlp.experts.fc1");
  CHECK(fc1.expert);
  CHECK(fc1.kind == OpKind::linear);
  CHECK(fc1.tp_split == TpSplit::column);
  CHECK(fc1.weight_shape == std::vector<int64_t>{4, 64, 96});  // {E, h, 2 fe}: SwiGLU [gate | up]
  CHECK(fc1.m == 64);                                          // s k routed rows
  CHECK(fc1.inputs == std::vector<int>{dispatch.id});
  const Op& act = g.op_named("block1.mlp.experts.act");
  CHECK(act.expert);
  CHECK(act.out_shape == std::vector<int64_t>{64, 48});
  const Op& fc2 = g.op_named("block1.mlp.experts.fc2");
  CHECK(fc2.expert);
  CHECK(fc2.tp_split == TpSplit::row);
  CHECK(fc2.weight_shape == std::vector<int64_t>{4, 48, 64});
  for (const Op* op : {&router, &dispatch, &fc1, &act, &fc2}) {
    CHECK(op->num_experts == 4);
    CHECK(op->top_k == 2);
  }
  const Op& combine = g.op_named("block1.mlp.combine");
  CHECK(combine.kind == OpKind::moe_combine);
  CHECK(combine.inputs == std::vector<int>{fc2.id, router.id});
  CHECK(combine.out_shape == std::vector<int64_t>{32, 64});
  const Op& shared_fc1 = g.op_named("block1.mlp.shared.fc1");
  CHECK_FALSE(shared_fc1.expert);
  CHECK(shared_fc1.inputs == std::vector<int>{g.op_named("block1.norm2").id});
  CHECK(shared_fc1.weight_shape == std::vector<int64_t>{64, 192});
  const Op& add = g.op_named("block1.mlp.shared_add");
  CHECK(add.kind == OpKind::residual);
  CHECK(add.inputs == std::vector<int>{combine.id, g.op_named("block1.mlp.shared.fc2").id});
  CHECK(g.op_named("block1.mlp.residual").inputs.back() == add.id);
  // The router, dispatch and combine are not expert ops; nothing outside the experts is.
  int experts = 0;
  for (const auto& op : g.ops()) experts += op.expert ? 1 : 0;
  CHECK(experts == 6);
}

TEST_CASE("models: MoE parameters (all experts) and active parameters (top-k of them) in closed form", "[models][moe]") {
  ModelGraph g = build_graph(small(kMoe));
  const double d = 16, kv = 2, a = 4;
  const double attn = h * (a + 2 * kv) * d + a * d * h + 2 * h;  // qkv, proj, two norms
  const double routed = E * 3 * h * fe, shared = 3 * h * fs, router = h * E;
  const double outside = 2 * V * h + h;  // untied embedding and head, final norm
  CHECK(g.total_params() == L * (attn + router + routed + shared) + outside);
  CHECK(g.active_params() == L * (attn + router + routed * k / E + shared) + outside);
  // Dense models: active == total.
  ModelGraph dense = build_graph(small(""));
  CHECK(dense.active_params() == dense.total_params());
}

TEST_CASE("models: MoE FLOPs per sample count the balanced routed work (k experts per token), router and shared expert", "[models][moe]") {
  ModelGraph g = build_graph(small(kMoe));
  // Forward: router 2 s h E; routed experts s k rows through fc1 (2 fe wide), SwiGLU, fc2;
  // combine a multiply-add per routed element; shared expert s rows of width fs; its add.
  const double fwd = 2 * s * h * E + 2 * s * k * h * 2 * fe + 5 * s * k * fe + 2 * s * k * fe * h + 2 * s * k * h +
                     2 * s * h * 2 * fs + 5 * s * fs + 2 * s * fs * h + s * h;
  const double residual = s * h;  // block1.mlp.residual, 1 FLOP per element each way
  CHECK(sum_over(g, "block1.mlp.", &Op::flops_fwd) == fwd + residual);
  // Backward: twice the matmuls (input and weight gradients), SwiGLU 10, combine 4, add 1.
  const double bwd = 4 * s * h * E + 4 * s * k * h * 2 * fe + 10 * s * k * fe + 4 * s * k * fe * h + 4 * s * k * h +
                     4 * s * h * 2 * fs + 10 * s * fs + 4 * s * fs * h + s * h;
  CHECK(sum_over(g, "block1.mlp.", &Op::flops_bwd) == bwd + residual);
  // The attention part and everything outside the MLPs equal the dense model's.
  ModelGraph dense = build_graph(small(""));
  CHECK(g.training_flops_per_sample() - sum_over(g, "block1.mlp.", &Op::flops_fwd) -
            sum_over(g, "block1.mlp.", &Op::flops_bwd) - sum_over(g, "block2.mlp.", &Op::flops_fwd) -
            sum_over(g, "block2.mlp.", &Op::flops_bwd) ==
        dense.training_flops_per_sample() - sum_over(dense, "block1.mlp.", &Op::flops_fwd) -
            sum_over(dense, "block1.mlp.", &Op::flops_bwd) - sum_over(dense, "block2.mlp.", &Op::flops_fwd) -
            sum_over(dense, "block2.mlp.", &Op::flops_bwd));
}

TEST_CASE("models: one expert with top-1 and the dense width is the dense MLP plus a {h, 1} router and the combine", "[models][moe]") {
  ModelGraph dense = build_graph(small(""));
  ModelGraph one = build_graph(small(R"("num_experts": 1, "experts_per_token": 1)"));
  CHECK(one.total_params() == dense.total_params() + L * h);
  CHECK(one.active_params() == one.total_params());
  // Matmul FLOPs: the dense ones plus the router's 2 s h (forward) per block.
  double dense_mm = 0, one_mm = 0;
  for (const auto& op : dense.ops()) dense_mm += op.is_matmul() ? op.flops_fwd : 0;
  for (const auto& op : one.ops()) one_mm += op.is_matmul() ? op.flops_fwd : 0;
  double router = 0;
  for (const auto& op : one.ops()) router += op.kind == OpKind::router ? op.flops_fwd : 0;
  CHECK(one_mm == dense_mm);
  CHECK(router == L * 2 * s * h);
  CHECK(one.op_named("block1.mlp.experts.fc1").flops_fwd == dense.op_named("block1.mlp.fc1").flops_fwd);
  CHECK(one.op_named("block1.mlp.experts.fc2").params == dense.op_named("block1.mlp.fc2").params);
}

TEST_CASE("models: MoE saved activations: router input and probabilities, expert inputs on s k rows, combine", "[models][moe]") {
  ModelGraph g = build_graph(small(kMoe));
  CHECK(g.op_named("block1.mlp.router").saved_elems == s * h + s * E);
  CHECK(g.op_named("block1.mlp.dispatch").saved_elems == 0);
  CHECK(g.op_named("block1.mlp.experts.fc1").saved_elems == s * k * h);
  CHECK(g.op_named("block1.mlp.experts.act").saved_elems == s * k * 2 * fe);
  CHECK(g.op_named("block1.mlp.experts.fc2").saved_elems == s * k * fe);
  CHECK(g.op_named("block1.mlp.combine").saved_elems == s * k * h + s * k);
  CHECK(g.op_named("block1.mlp.shared.fc1").saved_elems == 0);  // the router saves the same tensor
  CHECK(g.op_named("block1.mlp.shared.act").saved_elems == s * 2 * fs);
  CHECK(g.op_named("block1.mlp.shared.fc2").saved_elems == s * fs);
  // Sharded by tp like the dense MLP: the activation and fc2 inputs.
  CHECK(g.op_named("block1.mlp.experts.act").saved_tp_sharded);
  CHECK(g.op_named("block1.mlp.experts.fc2").saved_tp_sharded);
  CHECK_FALSE(g.op_named("block1.mlp.experts.fc1").saved_tp_sharded);
  // A dense model's MLP is unchanged: fc1 saves s h, act 2 s f, fc2 s f.
  ModelGraph dense = build_graph(small(""));
  CHECK(dense.op_named("block1.mlp.fc1").saved_elems == s * h);
  CHECK(dense.op_named("block1.mlp.act").saved_elems == 2 * s * f);
  CHECK(dense.op_named("block1.mlp.fc2").saved_elems == s * f);
}

TEST_CASE("models: moe_layers and first_dense_layers choose the MoE blocks", "[models][moe]") {
  ModelGraph first = build_graph(small(kMoe + R"(, "first_dense_layers": 1)"));
  CHECK(first.spec().moe_layers == std::vector<bool>{false, true});
  CHECK_NOTHROW(first.op_named("block1.mlp.fc1"));
  CHECK_NOTHROW(first.op_named("block2.mlp.router"));
  ModelGraph listed = build_graph(small(kMoe + R"(, "moe_layers": [true, false])"));
  CHECK_NOTHROW(listed.op_named("block1.mlp.router"));
  CHECK_NOTHROW(listed.op_named("block2.mlp.fc1"));
  CHECK(first.total_params() == listed.total_params());
}

TEST_CASE("models: MoE catalog models match their published total and active parameter counts", "[models][moe]") {
  struct Case {
    const char* name;
    double total, active;
  };
  // Model cards / announcements (sources in models/catalog/moe.json); the active figures are
  // rounded labels (12.9B, 39B, 2.7B, 3.3B, 22B): 2% for them.
  const Case cases[] = {
      {"mixtral-8x7b", 46.7e9, 12.9e9},   {"mixtral-8x22b", 141e9, 39e9},     {"qwen1.5-moe-a2.7b", 14.3e9, 2.7e9},
      {"qwen3-30b-a3b", 30.5e9, 3.3e9}, {"qwen3-235b-a22b", 235e9, 22e9},
  };
  for (const auto& c : cases) {
    ModelGraph g = build_graph(ModelCatalog::builtin().spec(c.name));
    INFO(c.name << ": total " << g.total_params() << ", active " << g.active_params());
    CHECK(std::fabs(g.total_params() / c.total - 1) <= 0.01);
    CHECK(std::fabs(g.active_params() / c.active - 1) <= 0.02);
  }
}

TEST_CASE("models: bad expert fields are errors naming the field's pointer", "[models][moe]") {
  const auto parse = [](const std::string& moe) { (void)small(moe); };
  require_located_error([&] { parse(R"("num_experts": 4, "experts_per_token": 5)"); }, "m.json", "/experts_per_token",
                        "experts_per_token must be between 1 and num_experts 4, got 5");
  require_located_error([&] { parse(R"("num_experts": 4)"); }, "m.json", "/experts_per_token",
                        "experts_per_token must be between 1 and num_experts 4, got 0");
  require_located_error([&] { parse(R"("experts_per_token": 2)"); }, "m.json", "/num_experts",
                        "need num_experts");
  require_located_error([&] { parse(R"("num_experts": 0, "experts_per_token": 2)"); }, "m.json", "/num_experts",
                        "must be a positive integer");
  require_located_error([&] { parse(kMoe + R"(, "moe_layers": [true])"); }, "m.json", "/moe_layers",
                        "moe_layers has 1 entries for 2 layers");
  require_located_error([&] { parse(kMoe + R"(, "moe_layers": [false, false])"); }, "m.json", "/moe_layers",
                        "marks no layer");
  require_located_error([&] { parse(kMoe + R"(, "first_dense_layers": 2)"); }, "m.json", "/first_dense_layers",
                        "leaves no MoE layer of 2");
  require_located_error([&] { parse(kMoe + R"(, "first_dense_layers": 1, "moe_layers": [false, true])"); }, "m.json",
                        "/first_dense_layers", "both given");
  require_located_error([] {
    (void)parse_model_file(R"({"name": "b", "family": "bert", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                              "seq_len": 16, "num_experts": 4})", "m.json");
  }, "m.json", "/num_experts", "does not apply to bert models");
  // A spec built in code (not parsed) is checked by build_graph too.
  ModelSpec bert = parse_model_file(R"({"name": "b", "family": "bert", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                                        "seq_len": 16})", "m.json").at(0);
  bert.num_experts = 4;
  bert.experts_per_token = 1;
  require_located_error([&] { (void)build_graph(bert); }, "m.json", "/num_experts", "needs a decoder");
}
