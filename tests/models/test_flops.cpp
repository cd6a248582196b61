// FLOP counts against closed forms: 2mnk per matmul, 6N + 12Lsh per token for decoders,
// Narayanan et al.'s formula, published forward MACs of ViT and ResNet.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;

namespace {

const ModelSpec& spec_of(const std::string& name) { return ModelCatalog::builtin().spec(name); }

// N counting the token embedding once: untied models own a separate head of V h parameters
// that does the matmul, and the input table is only a lookup. A MoE token passes through
// top-k of the experts: N is the active parameters (the total for dense models).
double matmul_params(const ModelGraph& g) {
  const ModelSpec& s = g.spec();
  double n = g.active_params();
  if (!s.tied_embeddings) n -= static_cast<double>(s.vocab) * static_cast<double>(s.hidden);
  return n;
}

double forward_macs(const ModelGraph& g) {
  double flops = 0;
  for (const auto& op : g.ops())
    if (op.is_matmul()) flops += op.flops_fwd;
    else if (op.kind == OpKind::attention)
      flops += 4.0 * static_cast<double>(g.spec().seq_len) * static_cast<double>(g.spec().seq_len) *
               static_cast<double>(op.heads * op.head_dim);
  return flops / 2;
}

}  // namespace

TEST_CASE("models: decoder training FLOPs per token are within 1% of 6N + 12Lsh", "[models]") {
  int checked = 0;
  for (const auto& spec : ModelCatalog::builtin().specs()) {
    if (!spec.is_decoder() || spec.name.find("tiny") != std::string::npos) continue;
    ModelGraph g = build_graph(spec);
    const double L = static_cast<double>(spec.layers), s = static_cast<double>(spec.seq_len);
    // 12 L s h with h the attention width heads x head_dim (wider than hidden in Qwen3).
    const double h = static_cast<double>(spec.heads * spec.head_dim());
    const double expected = 6 * matmul_params(g) + 12 * L * s * h;
    INFO(spec.name << ": ours " << g.training_flops_per_token() << ", 6N + 12Lsh " << expected);
    CHECK(std::fabs(g.training_flops_per_token() / expected - 1) < 0.01);
    ++checked;
  }
  CHECK(checked >= 30);
}

TEST_CASE("models: GPT matmul FLOPs equal Narayanan et al.'s 72BsLh^2(1 + s/6h + V/12Lh)", "[models]") {
  // Narayanan et al. 2021, eq. (3) without recomputation (3/4 of the 96 B s L h^2 form).
  for (const char* name : {"megatron-gpt-1.7b", "megatron-gpt-174.6b", "megatron-gpt-1t", "gpt3-175b"}) {
    ModelGraph g = build_graph(spec_of(name));
    const ModelSpec& sp = g.spec();
    const double L = static_cast<double>(sp.layers), h = static_cast<double>(sp.hidden);
    const double s = static_cast<double>(sp.seq_len), V = static_cast<double>(sp.vocab);
    double matmul = 0, core = 0;
    for (const auto& op : g.ops()) {
      if (op.is_matmul()) matmul += op.flops_fwd + op.flops_bwd;
      if (op.kind == OpKind::attention) core += 12 * s * s * h;  // QK^T + AV, fwd + bwd
    }
    const double formula = 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
    INFO(name);
    CHECK(std::fabs((matmul + core) / formula - 1) < 1e-12);
    // Elementwise FLOPs (norms, gelu, softmax, loss...) stay below 1% of the total.
    CHECK(g.training_flops_per_sample() > matmul + core);
    CHECK(g.training_flops_per_sample() < 1.01 * (matmul + core));
  }
}

TEST_CASE("models: every matmul op costs 2mnk forward and 4mnk backward (2mnk from the batch)", "[models]") {
  for (const char* name : {"gpt2-124m", "llama3-8b", "bert-base", "vit-b-16", "resnet-50", "mlp"}) {
    ModelGraph g = build_graph(spec_of(name));
    for (const auto& op : g.ops()) {
      if (!op.is_matmul()) continue;
      const double mnk = static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k);
      INFO(name << " " << op.name);
      CHECK(op.flops_fwd == 2 * mnk);
      CHECK(op.flops_bwd == (op.inputs.empty() ? 2 : 4) * mnk);
    }
  }
}

TEST_CASE("models: attention scores and context cost 4 s^2 h forward, twice that backward, also with GQA", "[models]") {
  Rng rng(5);
  for (int trial = 0; trial < 6; ++trial) {
    ModelSpec s = spec_of(trial % 2 ? "llama-tiny" : "gpt-tiny");
    s.kv_heads = 1 + static_cast<int64_t>(rng.below(2));  // 1 or 2, dividing 4 heads
    s.heads = 4;
    s.hidden = 4 * (4 + 2 * static_cast<int64_t>(rng.below(8)));
    s.seq_len = 8 + static_cast<int64_t>(rng.below(100));
    if (s.family == Family::gpt) s.ffn_hidden = 0;
    s.dropout = false;
    ModelGraph g = build_graph(s);
    const Op& att = g.op_named("block1.attn.core");
    const double sl = static_cast<double>(s.seq_len), h = static_cast<double>(s.hidden);
    const double scores = static_cast<double>(s.heads) * sl * sl;
    double rotary = 0;
    if (att.rotary) rotary = 3 * sl * static_cast<double>((s.heads + s.kv_heads) * s.head_dim());
    INFO("trial " << trial << " s " << s.seq_len << " h " << s.hidden << " kv " << s.kv_heads);
    CHECK(att.flops_fwd == 4 * sl * sl * h + 5 * scores + rotary);
    CHECK(att.flops_bwd == 8 * sl * sl * h + 4 * scores + rotary);
  }
}

TEST_CASE("models: ViT forward MACs match torchvision's 17.56G (B/16) and 61.55G (L/16)", "[models]") {
  CHECK(std::fabs(forward_macs(build_graph(spec_of("vit-b-16"))) / 17.56e9 - 1) < 0.005);
  CHECK(std::fabs(forward_macs(build_graph(spec_of("vit-l-16"))) / 61.55e9 - 1) < 0.005);
}

TEST_CASE("models: ResNet-50 forward MACs match the published 4.1G", "[models]") {
  // torchvision lists 4.09 GFLOPS (multiply-adds) for resnet50; He et al. 2016 give 3.8e9
  // for the v1 layout, which strides in the 1x1 convolution.
  ModelGraph g = build_graph(spec_of("resnet-50"));
  CHECK(std::fabs(forward_macs(g) / 4.09e9 - 1) < 0.01);
  CHECK(g.tokens_per_sample() == 1);
}

TEST_CASE("models: training FLOPs are forward plus backward and per token divides by seq_len", "[models]") {
  ModelGraph g = build_graph(spec_of("gpt3-175b"));
  double fwd = 0, bwd = 0;
  for (const auto& u : g.units()) {
    fwd += u.flops_fwd;
    bwd += u.flops_bwd;
  }
  CHECK(fwd == Approx(g.flops_fwd_per_sample()).epsilon(1e-12));
  CHECK(fwd + bwd == Approx(g.training_flops_per_sample()).epsilon(1e-12));
  CHECK(g.tokens_per_sample() == 2048);
  CHECK(g.training_flops_per_token() == g.training_flops_per_sample() / 2048);
  // ~6 x 174.6e9 + 12 x 96 x 2048 x 12288 = 1.0766e12 FLOPs per token.
  CHECK(g.training_flops_per_token() == Approx(1.0766e12).epsilon(0.005));
}
