// Mixture-of-experts graphs: closed-form parameters, FLOPs and saved activations of a small
// MoE spec, the one-expert reduction to a dense MLP, published total and active parameter
// counts of the catalog's MoE models, multi-head latent attention (closed forms, DeepSeek-V3),
// the Hugging Face MoE types, and errors of bad expert and MLA fields.
#include <algorithm>
#include <cmath>

#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::hf;
using trainplan::testing::import_text;
using trainplan::testing::require_located_error;

namespace {

// A Llama-style decoder (GQA 4 heads of 16, 2 kv heads unless `mha`); `moe` appends fields.
ModelSpec small(const std::string& moe, bool mha = false) {
  const std::string text = R"({"name": "m", "family": "llama", "layers": 2, "hidden": 64, "heads": 4, )" +
                           std::string(mha ? "" : R"("kv_heads": 2, )") +
                           R"("ffn_hidden": 176, "vocab": 256, "seq_len": 32)" + (moe.empty() ? "" : ", " + moe) + "}";
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

namespace {

// The small decoder with multi-head latent attention: q rank 24, kv rank 16, q/k heads 8 + 4
// rope, v heads 8 (`q_rank` 0: queries projected directly).
ModelSpec small_mla(int q_rank) {
  const std::string q = q_rank > 0 ? R"("q_lora_rank": )" + std::to_string(q_rank) + ", " : "";
  return small(q + R"("kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8)", true);
}

}  // namespace

TEST_CASE("models: multi-head latent attention parameters and FLOPs in closed form", "[models][mla]") {
  constexpr double a = 4, rq = 24, rkv = 16, dn = 8, dr = 4, dv = 8;
  ModelGraph g = build_graph(small_mla(24));
  const double attn = h * rq + rq + rq * a * (dn + dr) + h * (rkv + dr) + rkv + rkv * a * (dn + dv) + a * dv * h;
  const double mlp = 3 * h * f, norms = 2 * h;
  CHECK(g.total_params() == L * (attn + mlp + norms) + 2 * V * h + h);
  const Op& core = g.op_named("block1.attn.core");
  CHECK(core.head_dim == 12);
  CHECK(core.v_head_dim == 8);
  CHECK(core.rotary_dims == 4);
  CHECK(core.inputs == std::vector<int>{g.op_named("block1.attn.q_up").id, g.op_named("block1.attn.kv_up").id,
                                        g.op_named("block1.attn.kv_down").id});
  // QK^T over nope + rope, AV over v; softmax 5 per score; rotary 3 per rope element of the
  // a query heads and the one shared key.
  CHECK(core.flops_fwd == 2 * a * s * s * (dn + dr + dv) + 5 * a * s * s + 3 * s * (a + 1) * dr);
  CHECK(core.flops_bwd == 4 * a * s * s * (dn + dr + dv) + 4 * a * s * s + 3 * s * (a + 1) * dr);
  CHECK(g.op_named("block1.attn.q_up").flops_fwd == 2 * s * rq * a * (dn + dr));
  CHECK(g.op_named("block1.attn.kv_up").flops_fwd == 2 * s * rkv * a * (dn + dv));
  CHECK(g.op_named("block1.attn.proj").flops_fwd == 2 * s * a * dv * h);
  CHECK(g.op_named("block1.attn.q_down").tp_split == TpSplit::replicated);
  CHECK(g.op_named("block1.attn.kv_up").tp_split == TpSplit::column);
  // Saved: the block input once, each latent twice (norm and up projection), the softmax,
  // and proj's input with Q, K, V.
  CHECK(sum_over(g, "block1.attn.", &Op::saved_elems) ==
        s * h + 2 * s * rq + 2 * s * rkv + a * s * s + s * a * dv + 2 * s * a * (dn + dr) + s * a * dv);
  // Without a query rank: one h -> a (dn + dr) projection.
  ModelGraph direct = build_graph(small_mla(0));
  CHECK(direct.total_params() == g.total_params() - L * (h * rq + rq + rq * a * (dn + dr)) + L * h * a * (dn + dr));
  CHECK(direct.op_named("block1.attn.core").inputs.front() == direct.op_named("block1.attn.q").id);
}

TEST_CASE("models: DeepSeek-V3 (MLA, 3 dense + 58 MoE layers) has 671B parameters, 37B active", "[models][mla][moe]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("deepseek-v3"));
  INFO("total " << g.total_params() << ", active " << g.active_params());
  CHECK(std::fabs(g.total_params() / 671e9 - 1) <= 0.005);
  CHECK(std::fabs(g.active_params() / 37e9 - 1) <= 0.02);
  CHECK_NOTHROW(g.op_named("block3.mlp.fc1"));
  CHECK_NOTHROW(g.op_named("block4.mlp.router"));
  CHECK(g.op_named("block4.mlp.experts.fc1").weight_shape == std::vector<int64_t>{256, 7168, 4096});
}

TEST_CASE("models: bad MLA fields are errors naming the field's pointer", "[models][mla]") {
  require_located_error([] { (void)small(R"("kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8)"); }, "m.json",
                        "/qk_rope_head_dim", "must be a positive integer, got 0");
  require_located_error([] { (void)small(R"("q_lora_rank": 16, "qk_rope_head_dim": 4, "v_head_dim": 8)"); }, "m.json",
                        "/kv_lora_rank", "needs kv_lora_rank > 0");
  require_located_error(
      [] { (void)small(R"("kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 3, "v_head_dim": 8)"); }, "m.json",
      "/qk_rope_head_dim", "must be even");
  require_located_error([] { (void)small(R"("kv_lora_rank": 16, "qk_rope_head_dim": 4, "v_head_dim": 8)"); }, "m.json",
                        "/kv_heads", "a key and value per head");
}

namespace {

// A qwen2_moe config with `extra` keys (4 layers of hidden 64).
std::string qwen2_moe(const std::string& extra) {
  return R"({"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64, "num_experts": 4,
             "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

}  // namespace

TEST_CASE("models: HF mixtral, qwen2_moe, qwen3_moe and deepseek_v3 configs give the catalog models and published counts", "[models][moe]") {
  struct Case {
    const char* dir;
    const char* catalog_name;
    double published_total, published_active, tolerance;
  };
  const Case cases[] = {{"mixtral-8x7b-v0.1", "mixtral-8x7b", 46.7e9, 12.9e9, 0.005},
                        {"qwen1.5-moe-a2.7b", "qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, 0.005},
                        {"qwen3-30b-a3b", "qwen3-30b-a3b", 30.5e9, 3.3e9, 0.005},
                        {"deepseek-v3", "deepseek-v3", 671e9, 37e9, 0.005}};
  for (const auto& c : cases) {
    INFO(c.dir);
    ModelSpec imported = import_hf_config(hf(c.dir));
    const ModelSpec& cat = ModelCatalog::builtin().spec(c.catalog_name);
    set_seq_len(imported, cat.seq_len, "--seq-len");
    ModelGraph a = build_graph(imported);
    ModelGraph b = build_graph(cat);
    CHECK(a.total_params() == b.total_params());
    CHECK(a.active_params() == b.active_params());
    CHECK(a.training_flops_per_sample() == b.training_flops_per_sample());
    CHECK(a.saved_bytes_per_sample(Precision::bf16) == b.saved_bytes_per_sample(Precision::bf16));
    CHECK(std::fabs(a.total_params() / c.published_total - 1) <= c.tolerance);
    CHECK(std::fabs(a.active_params() / c.published_active - 1) <= 0.02);  // rounded labels
  }
  ModelSpec mixtral = import_hf_config(hf("mixtral-8x7b-v0.1"));
  CHECK(mixtral.num_experts == 8);
  CHECK(mixtral.experts_per_token == 2);
  CHECK(mixtral.expert_ffn_hidden == 0);  // the experts are intermediate_size wide
  CHECK(mixtral.num_local_layers() == 0);  // sliding_window null
  ModelSpec deepseek = import_hf_config(hf("deepseek-v3"));
  CHECK(deepseek.moe_layers.size() == 61);
  CHECK_FALSE(deepseek.moe_layers[2]);
  CHECK(deepseek.moe_layers[3]);
  CHECK(deepseek.shared_expert_ffn_hidden == 2048);
  CHECK(deepseek.is_mla());
  CHECK(deepseek.q_lora_rank == 1536);
  for (const auto& t : {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"}) {
    const auto types = hf_model_types();
    CHECK(std::find(types.begin(), types.end(), t) != types.end());
  }
}

TEST_CASE("models: HF MoE layer rules: decoder_sparse_step, mlp_only_layers, first_k_dense_replace, q_lora_rank null", "[models][moe]") {
  CHECK(import_text(qwen2_moe("")).moe_layers.empty());  // every layer MoE
  CHECK(import_text(qwen2_moe(R"("decoder_sparse_step": 2)")).moe_layers == std::vector<bool>{false, true, false, true});
  CHECK(import_text(qwen2_moe(R"("mlp_only_layers": [0, 3])")).moe_layers == std::vector<bool>{false, true, true, false});
  // No MoE layer left: a dense model.
  ModelSpec dense = import_text(qwen2_moe(R"("decoder_sparse_step": 8)"));
  CHECK_FALSE(dense.is_moe());
  CHECK(import_text(qwen2_moe("")).qkv_bias);
  // DeepSeek-V2-Lite style: no query compression.
  ModelSpec lite = import_text(R"({"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64,
      "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_shared_experts": 2,
      "first_k_dense_replace": 1, "q_lora_rank": null, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
      "qk_rope_head_dim": 4, "v_head_dim": 8})");
  CHECK(lite.q_lora_rank == 0);
  CHECK(lite.shared_expert_ffn_hidden == 32);
  CHECK(lite.moe_layers == std::vector<bool>{false, true, true, true});
  CHECK_NOTHROW(build_graph(lite).op_named("block1.attn.q"));
}

TEST_CASE("models: bad HF MoE keys are errors naming the config key", "[models][moe]") {
  require_located_error([] { (void)import_text(qwen2_moe(R"("num_experts_per_tok": 5)")); }, "config.json",
                        "/num_experts_per_tok", "experts_per_token must be between 1 and num_experts 4, got 5");
  require_located_error([] { (void)import_text(qwen2_moe(R"("mlp_only_layers": [7])")); }, "config.json",
                        "/mlp_only_layers/0", "layer 7 does not exist");
  require_located_error([] { (void)import_text(qwen2_moe(R"("num_experts": -1)")); }, "config.json", "/num_experts",
                        "must be a positive integer");
}
