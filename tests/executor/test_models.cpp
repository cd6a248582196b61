// The reference models assembled from the kernels: a tiny GPT and an MLP overfit one batch,
// their full gradients match finite differences, runs are deterministic, and f32 agrees with
// f64. Plus the parameter store, configs from catalog specs, and token data.
#include <cmath>
#include <fstream>

#include "executor_test_util.hpp"
#include "trainplan/executor/data.hpp"
#include "trainplan/executor/gpt.hpp"
#include "trainplan/executor/mlp.hpp"
#include "trainplan/executor/parameters.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using trainplan::executor::testing::check_gradient;
using trainplan::executor::testing::random_ids;
using trainplan::executor::testing::random_values;

namespace {

constexpr double kModelFdEps = 1e-6;  // central-difference step on one parameter (f64 model)
constexpr double kModelFdTol = 1e-6;  // relative tolerance (floor 1)

// A GPT-2-style spec as the catalog writes it (family gpt: pre-LN, GELU 4h, learned
// positions, tied head, biases).
models::ModelSpec gpt2_like_spec() {
  models::ModelSpec s;
  s.name = "gpt2-like";
  s.family = models::Family::gpt;
  s.layers = 12;
  s.hidden = 768;
  s.heads = 12;
  s.kv_heads = 12;
  s.ffn_hidden = 3072;
  s.vocab = 50257;
  s.seq_len = 1024;
  return s;
}

// Checks d(mean loss)/d(param) of `params` (the model's ParameterStore) against central
// differences at two random elements of every parameter tensor. `loss` runs a forward pass.
void check_model_gradient(Backend& be, ParameterStore& params, const std::function<double()>& loss,
                          const std::function<void()>& backward, Rng& rng) {
  Stream& s = be.default_stream();
  params.zero_grads(s);
  loss();
  backward();
  const std::vector<double> grads = be.download_values(s, params.grads());
  std::vector<double> values = be.download_values(s, params.params());
  std::vector<size_t> picks;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = shape_numel(params.spec(i).shape);
    for (int k = 0; k < 2; ++k)
      picks.push_back(static_cast<size_t>(params.offset(i) + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)))));
  }
  auto perturbed_loss = [&] {
    be.upload_values(s, params.params(), values);
    return loss();
  };
  check_gradient("model parameters", values, grads, perturbed_loss, kModelFdEps, kModelFdTol, picks);
  be.upload_values(s, params.params(), values);
}

}  // namespace

TEST_CASE("gpt: GPT config comes from a catalog spec and shrinks keeping its ratios", "[executor]") {
  GptConfig big = GptConfig::from_spec(gpt2_like_spec());
  CHECK(big.ffn_hidden == 3072);
  CHECK(big.tied_embeddings);
  CHECK(big.learned_positions);
  GptConfig tiny = big.shrunk(2, 64, 4, 256, 32);
  CHECK(tiny.layers == 2);
  CHECK(tiny.hidden == 64);
  CHECK(tiny.ffn_hidden == 256);  // 4h kept
  CHECK(tiny.kv_heads == 4);
  CHECK(tiny.head_dim() == 16);

  models::ModelSpec llama = gpt2_like_spec();
  llama.family = models::Family::llama;
  llama.hidden = 4096;
  llama.heads = 32;
  llama.kv_heads = 8;
  llama.ffn_hidden = 11008;
  llama.norm = models::Norm::rmsnorm;
  llama.activation = models::Activation::swiglu;
  llama.position = models::PositionEmbedding::rotary;
  llama.file = "llama.json";
  REQUIRE_ERROR_CONTAINS(GptConfig::from_spec(llama), "rotary position embeddings are not implemented by the hand-written reference GptModel");
  REQUIRE_ERROR_CONTAINS(GptConfig::from_spec(llama), "llama.json: /position");
  llama.position = models::PositionEmbedding::none;
  GptConfig gqa = GptConfig::from_spec(llama).shrunk(2, 64, 8, 256, 32);
  CHECK(gqa.kv_heads == 2);                        // heads / kv_heads = 4 kept
  CHECK(gqa.ffn_hidden == std::llround(11008.0 / 4096.0 * 64));
  CHECK_FALSE(gqa.learned_positions);
  REQUIRE_ERROR_CONTAINS(big.shrunk(2, 60, 8, 256, 32), "hidden (60) must be divisible by heads (8)");
  models::ModelSpec bert = gpt2_like_spec();
  bert.family = models::Family::bert;
  REQUIRE_ERROR_CONTAINS(GptConfig::from_spec(bert), "families gpt and llama");
}

TEST_CASE("gpt: a tiny GPT from the catalog overfits one batch of file tokens", "[executor]") {
  // gpt2-124m from the model catalog, shrunk to 2 layers, hidden 64, 4 heads, vocab 256, seq 32.
  const models::ModelSpec& spec = models::ModelCatalog::builtin().spec("gpt2-124m");
  GptConfig cfg = GptConfig::from_spec(spec).shrunk(2, 64, 4, 256, 32);
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  GptModel model(*be, cfg, 4, DType::f32, 1);
  // Byte-level tokens of a file in the repository (vocabulary 256).
  std::vector<int32_t> tokens = read_byte_tokens(trainplan::testing::source_path("executor/README.md"));
  TokenBatch batch = make_batch(tokens, 4, cfg.seq_len, 0);
  AdamWConfig adamw{3e-3, 0.9, 0.95, 1e-8, 0.0};
  const double first = model.train_step(s, batch.inputs, batch.targets, adamw, 1.0);
  // At initialization (weights ~ N(0, 0.02)) the logits are nearly equal: loss ~ ln(vocab).
  CHECK(first == Approx(std::log(256.0)).epsilon(0.02));
  double loss = first;
  int steps = 1;
  for (; steps < 300 && loss > 0.2 * first; ++steps) loss = model.train_step(s, batch.inputs, batch.targets, adamw, 1.0);
  INFO("loss " << first << " -> " << loss << " after " << steps << " steps");
  CHECK(loss < 0.2 * first);
  CHECK(model.parameters().step() == steps);
}

TEST_CASE("gpt: GPT gradients match finite differences (layernorm, gelu, tied head)", "[executor]") {
  GptConfig cfg = GptConfig::from_spec(gpt2_like_spec()).shrunk(2, 8, 2, 11, 5);
  cfg.init_stddev = 0.3;  // larger weights make every nonlinearity matter
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  GptModel model(*be, cfg, 2, DType::f64, 7);
  Rng rng(301);
  std::vector<int32_t> tokens = random_ids(rng, 10, 0, 11), targets = random_ids(rng, 10, 0, 11);
  // A few steps move norm weights and biases off their constant initial values.
  for (int i = 0; i < 3; ++i) model.train_step(s, tokens, targets, AdamWConfig{0.05, 0.9, 0.95, 1e-8, 0.1}, 1.0);
  check_model_gradient(*be, model.parameters(), [&] { return model.forward(s, tokens, targets); },
                       [&] { model.backward(s); }, rng);
}

TEST_CASE("gpt: GPT gradients match finite differences (rmsnorm, swiglu, GQA, untied, no bias)", "[executor]") {
  GptConfig cfg;
  cfg.layers = 2;
  cfg.hidden = 8;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.ffn_hidden = 6;
  cfg.vocab = 9;
  cfg.seq_len = 4;
  cfg.norm = models::Norm::rmsnorm;
  cfg.activation = models::Activation::swiglu;
  cfg.bias = false;
  cfg.tied_embeddings = false;
  cfg.learned_positions = false;
  cfg.init_stddev = 0.3;
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  GptModel model(*be, cfg, 3, DType::f64, 8);
  CHECK_NOTHROW(model.parameters().index("lm_head.weight"));
  REQUIRE_ERROR_CONTAINS(model.parameters().index("wpe"), "unknown parameter");
  Rng rng(302);
  std::vector<int32_t> tokens = random_ids(rng, 12, 0, 9), targets = random_ids(rng, 12, 0, 9);
  for (int i = 0; i < 3; ++i) model.train_step(s, tokens, targets, AdamWConfig{0.05, 0.9, 0.95, 1e-8, 0.1}, 1.0);
  check_model_gradient(*be, model.parameters(), [&] { return model.forward(s, tokens, targets); },
                       [&] { model.backward(s); }, rng);
}

TEST_CASE("gpt: GPT training is deterministic and f32 agrees with f64", "[executor]") {
  GptConfig cfg = GptConfig::from_spec(gpt2_like_spec()).shrunk(2, 16, 2, 32, 8);
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  Rng rng(303);
  std::vector<int32_t> tokens = random_ids(rng, 16, 0, 32), targets = random_ids(rng, 16, 0, 32);
  auto run = [&](DType dtype, std::vector<double>* params) {
    GptModel model(*be, cfg, 2, dtype, 42);
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(model.train_step(s, tokens, targets, AdamWConfig{}, 1.0));
    if (params) *params = be->download_values(s, model.parameters().params());
    return losses;
  };
  std::vector<double> p1, p2, p64;
  std::vector<double> a = run(DType::f32, &p1), b = run(DType::f32, &p2), c = run(DType::f64, &p64);
  CHECK(a == b);    // bit for bit
  CHECK(p1 == p2);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(c[i]).epsilon(1e-5));
  double worst = 0;
  for (size_t i = 0; i < p1.size(); ++i) worst = std::max(worst, std::abs(p1[i] - p64[i]));
  CHECK(worst < 1e-4);
}

TEST_CASE("gpt: vocabulary padding helpers round rows up and mask only the padded logits", "[executor]") {
  CHECK(padded_rows(50257, 128) == 50304);  // GPT-2's vocabulary, as Megatron-LM pads it
  CHECK(padded_rows(256, 128) == 256);
  CHECK(padded_rows(1, 128) == 128);
  CHECK(padded_rows(11, 1) == 11);
  const std::vector<double> bias = padded_logit_bias(3, 5);
  CHECK(bias == std::vector<double>{0, 0, 0, kPaddedLogit, kPaddedLogit});
  CHECK(std::exp(static_cast<float>(kPaddedLogit) - 0.0f) == 0.0f);  // a padded column adds exactly 0
  GptConfig cfg;
  cfg.vocab = 200;
  CHECK(gpt_vocab_rows(cfg, *make_backend("cpu")) == 200);  // the CPU reference is never padded
  cfg.vocab_multiple = 128;
  CHECK(gpt_vocab_rows(cfg, *make_backend("cpu")) == 256);
  cfg.vocab_multiple = -1;
  REQUIRE_ERROR_CONTAINS(cfg.validate(), "vocab_multiple must be >= 0");
}

TEST_CASE("gpt: a vocabulary padded to a multiple of 128 trains exactly like the unpadded one", "[executor]") {
  // Tied (GPT-2) and untied (Llama) heads; vocab 200 -> 256 table rows.
  for (bool tied : {true, false}) {
    INFO((tied ? "tied" : "untied") << " head");
    GptConfig cfg = GptConfig::from_spec(gpt2_like_spec()).shrunk(2, 16, 2, 200, 8);
    cfg.tied_embeddings = tied;
    cfg.init_stddev = 0.3;
    std::unique_ptr<Backend> be = make_backend("cpu");
    Stream& s = be->default_stream();
    Rng rng(304);
    const std::vector<int32_t> tokens = random_ids(rng, 16, 0, 200), targets = random_ids(rng, 16, 0, 200);
    GptConfig padded_cfg = cfg;
    padded_cfg.vocab_multiple = 128;
    GptModel plain(*be, cfg, 2, DType::f64, 5), padded(*be, padded_cfg, 2, DType::f64, 5);
    REQUIRE(plain.vocab_rows() == 200);
    REQUIRE(padded.vocab_rows() == 256);
    const AdamWConfig adamw{0.05, 0.9, 0.95, 1e-8, 0.1};
    for (int step = 0; step < 3; ++step) {
      const double a = plain.train_step(s, tokens, targets, adamw, 1.0);
      const double b = padded.train_step(s, tokens, targets, adamw, 1.0);
      CHECK(b == Approx(a).epsilon(1e-12));
    }
    // Every parameter (gradients of the last step, values after its update) equals the unpadded
    // model's on the real rows; the padded rows of the tables are still exactly zero.
    const ParameterStore &p = plain.parameters(), &q = padded.parameters();
    REQUIRE(p.size() == q.size());
    for (size_t i = 0; i < p.size(); ++i) {
      INFO(p.spec(i).name);
      for (bool grads : {false, true}) {
        const std::vector<double> want = be->download_values(s, grads ? p.grad(i) : p.param(i));
        const std::vector<double> got = be->download_values(s, grads ? q.grad(i) : q.param(i));
        REQUIRE(got.size() >= want.size());
        double worst = 0;
        for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(got[k] - want[k]));
        CHECK(worst <= 1e-12);
        for (size_t k = want.size(); k < got.size(); ++k) REQUIRE(got[k] == 0.0);
      }
    }
  }
}

TEST_CASE("gpt: GPT training FLOPs count every matmul weight and the attention products", "[executor]") {
  GptConfig cfg = GptConfig::from_spec(gpt2_like_spec()).shrunk(3, 32, 4, 64, 16);
  std::unique_ptr<Backend> be = make_backend("cpu");
  GptModel model(*be, cfg, 2, DType::f32, 1);
  // Matmul weights = every 2-D parameter except the position table (a lookup, not a matmul).
  const ParameterStore& p = model.parameters();
  double matmul = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p.spec(i).shape.size() == 2 && p.spec(i).name != "wpe") matmul += static_cast<double>(shape_numel(p.spec(i).shape));
  const double tokens = 2.0 * 16;
  // Forward: 2 FLOPs per weight per token; QK^T and PV: 2 * 2 * seq * hidden per token per layer.
  const double forward = 2 * matmul * tokens + 3 * 4.0 * 16 * 32 * tokens;
  CHECK(model.training_flops_per_step() == Approx(3 * forward));
}

TEST_CASE("mlp: an MLP overfits one batch and its gradients match finite differences", "[executor]") {
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  Rng rng(304);
  MlpConfig cfg{{12, 24, 24, 5}, models::Activation::relu};
  const int64_t batch = 16;
  std::vector<double> x = random_values(rng, 12 * batch);
  std::vector<int32_t> labels = random_ids(rng, batch, 0, 5);
  {
    MlpModel mlp(*be, cfg, batch, DType::f32, 3);
    const double first = mlp.train_step(s, x, labels, AdamWConfig{1e-2, 0.9, 0.95, 1e-8, 0.0}, 1.0);
    double loss = first;
    for (int i = 0; i < 150 && loss > 0.2 * first; ++i) loss = mlp.train_step(s, x, labels, AdamWConfig{1e-2, 0.9, 0.95, 1e-8, 0.0}, 1.0);
    INFO("mlp loss " << first << " -> " << loss);
    CHECK(loss < 0.2 * first);
  }
  for (models::Activation act : {models::Activation::relu, models::Activation::gelu}) {
    MlpModel mlp(*be, MlpConfig{{5, 7, 6, 3}, act}, 4, DType::f64, 9);
    std::vector<double> xs = random_values(rng, 20);
    std::vector<int32_t> ys = random_ids(rng, 4, 0, 3);
    check_model_gradient(*be, mlp.parameters(), [&] { return mlp.forward(s, xs, ys); }, [&] { mlp.backward(s); }, rng);
  }
  REQUIRE_ERROR_CONTAINS(MlpModel(*be, MlpConfig{{5}, models::Activation::relu}, 4, DType::f32, 1), "at least input and output");
  MlpModel mlp(*be, cfg, batch, DType::f32, 3);
  REQUIRE_ERROR_CONTAINS(mlp.forward(s, x, random_ids(rng, batch, 5, 6)), "outside [0, 5)");
}

TEST_CASE("parameters: the parameter store decays only the parameters marked for weight decay", "[executor]") {
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  ParameterStore store(*be, DType::f64,
                       {{"w", {3, 4}, ParamInit::normal, 0.5, true}, {"b", {3}, ParamInit::constant, 0.25, false}});
  store.initialize(s, 5);
  CHECK(store.total_elements() == 15);
  CHECK(store.offset(1) == 12);
  CHECK(store.param(0).shape() == Shape{3, 4});
  std::vector<double> before = be->download_values(s, store.params());
  for (size_t i = 12; i < 15; ++i) CHECK(before[i] == 0.25);
  // Zero gradients: AdamW's moment update is zero, so only the decay moves the weights.
  store.zero_grads(s);
  const AdamWConfig cfg{0.1, 0.9, 0.95, 1e-8, 0.5};
  CHECK(store.clip_and_step(s, cfg, 1.0) == 0.0);
  std::vector<double> after = be->download_values(s, store.params());
  for (size_t i = 0; i < 12; ++i) CHECK(after[i] == Approx(before[i] * (1 - 0.1 * 0.5)).epsilon(1e-14));
  for (size_t i = 12; i < 15; ++i) CHECK(after[i] == before[i]);
  // Initialization is a function of the seed only.
  store.initialize(s, 5);
  CHECK(be->download_values(s, store.params()) == before);
  REQUIRE_ERROR_CONTAINS(ParameterStore(*be, DType::f64, {{"a", {2}}, {"a", {3}}}), "duplicate name \"a\"");
  REQUIRE_ERROR_CONTAINS(ParameterStore(*be, DType::bf16, {{"a", {2}}}), "cannot hold bf16 master weights");
}

TEST_CASE("data: token batches are windows with next-token targets", "[executor]") {
  std::vector<int32_t> toks = synthetic_tokens(50, 7, 3);
  CHECK(toks == synthetic_tokens(50, 7, 3));
  for (int32_t t : toks) CHECK((t >= 0 && t < 7));
  TokenBatch b = make_batch(toks, 3, 5, 4);
  REQUIRE(b.inputs.size() == 15);
  for (size_t i = 0; i < 15; ++i) {
    CHECK(b.inputs[i] == toks[4 + i]);
    CHECK(b.targets[i] == toks[5 + i]);
  }
  REQUIRE_ERROR_CONTAINS(make_batch(toks, 5, 10, 0), "needs 51");
  REQUIRE_ERROR_CONTAINS(read_byte_tokens("/nonexistent/tokens.bin"), "/nonexistent/tokens.bin: cannot open the file");
  REQUIRE_ERROR_CONTAINS(read_byte_tokens("/tmp"), "/tmp: is a directory, not a file");
  std::vector<int32_t> bytes = read_byte_tokens(trainplan::testing::source_path("executor/CMakeLists.txt"));
  CHECK(bytes.front() == 'f');  // "file(GLOB ..."
}
