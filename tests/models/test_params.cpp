// Parameter counts against published figures and closed forms.
#include <cmath>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;

namespace {

double params_of(const std::string& name) { return build_graph(ModelCatalog::builtin().spec(name)).total_params(); }

// GPT with biases, learned positions, tied embeddings: 12 L h^2 + 13 L h + (V + s) h + 2 h.
double gpt_params(double L, double h, double V, double s) { return 12 * L * h * h + 13 * L * h + (V + s) * h + 2 * h; }

}  // namespace

TEST_CASE("models: every catalog model is within its tolerance of the published parameter count", "[models]") {
  int checked = 0;
  for (const auto& spec : ModelCatalog::builtin().specs()) {
    if (!spec.published_params) continue;
    const double ours = build_graph(spec).total_params();
    INFO(spec.name << ": ours " << ours << ", published " << *spec.published_params);
    CHECK(std::fabs(ours / *spec.published_params - 1) <= spec.published_params_tolerance);
    // A widened tolerance must be explained.
    if (spec.published_params_tolerance > 0.005) CHECK_FALSE(spec.notes.empty());
    ++checked;
  }
  CHECK(checked >= 40);
}

TEST_CASE("models: parameter counts of the named published models are within 0.5%", "[models]") {
  struct Case {
    const char* name;
    double published;
  };
  const Case cases[] = {
      {"gpt2-124m", 124.4e6},  {"gpt2-355m", 355e6},       {"gpt2-774m", 774e6},     {"gpt2-1.5b", 1558e6},
      {"gpt3-125m", 125e6},    {"gpt3-760m", 760e6},       {"gpt3-175b", 174.6e9},   {"llama2-7b", 6.74e9},
      {"llama2-13b", 13.0e9},  {"llama2-70b", 69.0e9},     {"llama3-8b", 8.03e9},    {"llama3-70b", 70.6e9},
      {"llama3-405b", 405.9e9}, {"bert-base", 110e6},      {"bert-large", 335e6},    {"vit-b-16", 86.6e6},
      {"vit-l-16", 304e6},     {"resnet-50", 25.6e6},      {"megatron-gpt-7.5b", 7.5e9}, {"megatron-gpt-1t", 1008e9},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(std::fabs(params_of(c.name) / c.published - 1) <= 0.005);
  }
}

TEST_CASE("models: torchvision's exact parameter counts of ResNet-50/101/152 and ViT-B/16, ViT-L/16", "[models]") {
  CHECK(params_of("resnet-50") == 25557032);
  CHECK(params_of("resnet-101") == 44549160);
  CHECK(params_of("resnet-152") == 60192808);
  CHECK(params_of("vit-b-16") == 86567656);
  CHECK(params_of("vit-l-16") == 304326632);
}

TEST_CASE("models: GPT parameter counts match 12Lh^2 + 13Lh + (V+s)h + 2h exactly", "[models]") {
  CHECK(params_of("gpt2-124m") == gpt_params(12, 768, 50257, 1024));  // 124,439,808
  CHECK(params_of("gpt2-124m") == 124439808);
  CHECK(params_of("gpt3-175b") == gpt_params(96, 12288, 50257, 2048));
  for (const auto& spec : ModelCatalog::builtin().specs()) {
    if (spec.family != Family::gpt || !spec.bias) continue;
    INFO(spec.name);
    CHECK(build_graph(spec).total_params() ==
          gpt_params(static_cast<double>(spec.layers), static_cast<double>(spec.hidden),
                     static_cast<double>(spec.vocab), static_cast<double>(spec.seq_len)));
  }
}

TEST_CASE("models: Llama parameter counts match the GQA + SwiGLU closed form", "[models]") {
  // Per layer: q and o (h^2 each), k and v (h * kv * d each), 3 h f for SwiGLU, 2 h norms;
  // untied embedding and head 2 V h, final norm h.
  for (const char* name : {"llama2-7b", "llama2-70b", "llama3-8b", "llama3-405b"}) {
    const ModelSpec& s = ModelCatalog::builtin().spec(name);
    const double h = static_cast<double>(s.hidden), L = static_cast<double>(s.layers);
    const double kvd = static_cast<double>(s.kv_heads * s.head_dim()), f = static_cast<double>(s.ffn_hidden);
    const double V = static_cast<double>(s.vocab);
    const double expected = L * (2 * h * h + 2 * h * kvd + 3 * h * f + 2 * h) + 2 * V * h + h;
    INFO(name);
    CHECK(build_graph(s).total_params() == expected);
  }
  CHECK(params_of("llama2-7b") == 6738415616);
  CHECK(params_of("llama3-8b") == 8030261248);
}

TEST_CASE("models: unit parameters sum to the total and the head of a tied model owns none", "[models]") {
  for (const char* name : {"gpt3-175b", "llama3-8b", "bert-base", "vit-b-16", "resnet-50", "mlp"}) {
    ModelGraph g = build_graph(ModelCatalog::builtin().spec(name));
    double sum = 0;
    for (const auto& u : g.units()) sum += u.params;
    INFO(name);
    CHECK(sum == g.total_params());
  }
  ModelGraph gpt = build_graph(ModelCatalog::builtin().spec("gpt2-124m"));
  const Op& head = gpt.op_named("head.lm");
  const Op& embed = gpt.op_named("embed.token");
  CHECK(head.params == 0);
  CHECK(head.tied_weight_op == embed.id);
  CHECK(embed.params == 50257.0 * 768);
  CHECK(head.weight_shape == std::vector<int64_t>{768, 50257});
  CHECK(embed.weight_shape == std::vector<int64_t>{50257, 768});

  ModelGraph llama = build_graph(ModelCatalog::builtin().spec("llama2-7b"));
  CHECK(llama.op_named("head.lm").params == 32000.0 * 4096);
  CHECK(llama.op_named("head.lm").tied_weight_op == -1);
}

TEST_CASE("models: the parameter count of a GPT grows by 12h^2 + 13h per added layer", "[models]") {
  Rng rng(11);
  for (int trial = 0; trial < 5; ++trial) {
    ModelSpec s = ModelCatalog::builtin().spec("gpt-tiny");
    s.heads = 1 + static_cast<int64_t>(rng.below(8));
    s.hidden = s.heads * (8 + 2 * static_cast<int64_t>(rng.below(16)));
    s.layers = 1 + static_cast<int64_t>(rng.below(6));
    s.kv_heads = 0;  // derive again from heads and hidden
    s.ffn_hidden = 0;
    const double h = static_cast<double>(s.hidden);
    const double before = build_graph(s).total_params();
    s.layers += 1;
    INFO("hidden " << s.hidden << " heads " << s.heads);
    CHECK(build_graph(s).total_params() - before == 12 * h * h + 13 * h);
  }
}
