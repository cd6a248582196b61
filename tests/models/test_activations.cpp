// Saved activations against Korthikanti et al. 2022 (arXiv 2205.05198): a GPT layer keeps
// s b h (34 + 5 a s / h) bytes in 16 bits, s b h (10 + 24/t + 5 a s / (h t)) under tensor
// parallelism, 34 s b h with selective recomputation.
#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;

namespace {

struct LayerBytes {
  double total = 0, sharded = 0, unsharded = 0, dropped = 0, masks = 0;
};

// Bytes per sample of one block unit (b = 1) in `p`.
LayerBytes layer_bytes(const ModelGraph& g, int unit, Precision p = Precision::bf16) {
  LayerBytes out;
  for (int id : g.unit(unit).ops) {
    const Op& op = g.op(id);
    const double bytes = op.saved_bytes(p);
    out.total += bytes;
    (op.saved_tp_sharded ? out.sharded : out.unsharded) += bytes;
    if (op.dropped_by_selective_recompute) out.dropped += bytes;
    out.masks += op.saved_mask_bytes;
  }
  return out;
}

}  // namespace

TEST_CASE("models: a GPT layer saves exactly 34sbh + 5as^2b bytes in 16 bits", "[models]") {
  for (const char* name : {"gpt3-175b", "megatron-gpt-1.7b", "gpt2-124m"}) {
    ModelGraph g = build_graph(ModelCatalog::builtin().spec(name));
    const ModelSpec& s = g.spec();
    const double sh = static_cast<double>(s.seq_len) * static_cast<double>(s.hidden);
    const double as2 = static_cast<double>(s.heads) * static_cast<double>(s.seq_len) * static_cast<double>(s.seq_len);
    for (int unit : {1, g.num_blocks()}) {
      LayerBytes b = layer_bytes(g, unit);
      INFO(name << " unit " << unit);
      CHECK(b.total == 34 * sh + 5 * as2);
      CHECK(b.masks == 2 * sh + as2);  // two hidden dropouts, one attention dropout
    }
  }
}

TEST_CASE("models: under tensor parallelism a GPT layer saves sh(10 + 24/t + 5as/(ht))", "[models]") {
  Rng rng(2205);
  for (int trial = 0; trial < 8; ++trial) {
    ModelSpec s = ModelCatalog::builtin().spec("gpt-tiny");
    s.heads = 1 + static_cast<int64_t>(rng.below(16));
    s.hidden = s.heads * (8 * (1 + static_cast<int64_t>(rng.below(16))));
    s.seq_len = 16 + static_cast<int64_t>(rng.below(512));
    s.kv_heads = 0;  // derive again from heads and hidden
    s.ffn_hidden = 0;
    ModelGraph g = build_graph(s);
    const double sh = static_cast<double>(s.seq_len) * static_cast<double>(s.hidden);
    const double as2 = static_cast<double>(s.heads) * static_cast<double>(s.seq_len) * static_cast<double>(s.seq_len);
    LayerBytes b = layer_bytes(g, 1);
    INFO("h " << s.hidden << " a " << s.heads << " s " << s.seq_len);
    CHECK(b.unsharded == 10 * sh);
    CHECK(b.sharded == 24 * sh + 5 * as2);
    const double t = static_cast<double>(1 + rng.below(8));
    CHECK(b.unsharded + b.sharded / t == Approx(sh * (10 + 24 / t + 5 * as2 / (sh * t))).epsilon(1e-12));
    // Selective recomputation drops exactly the 5as^2 term.
    CHECK(b.dropped == 5 * as2);
    CHECK(b.total - b.dropped == 34 * sh);
  }
}

TEST_CASE("models: dropped-by-selective activations are only attention internals", "[models]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("gpt2-124m"));
  for (const auto& op : g.ops()) {
    INFO(op.name);
    CHECK(op.dropped_by_selective_recompute == (op.kind == OpKind::attention));
    if (op.kind == OpKind::attention) CHECK(op.saved_tp_sharded);
  }
}

TEST_CASE("models: Llama layers save the same per-op tensors without masks, K and V by kv heads", "[models]") {
  for (const char* name : {"llama2-7b", "llama3-70b", "llama-tiny"}) {
    ModelGraph g = build_graph(ModelCatalog::builtin().spec(name));
    const ModelSpec& s = g.spec();
    const double sl = static_cast<double>(s.seq_len), h = static_cast<double>(s.hidden);
    const double f = static_cast<double>(s.ffn_hidden), a = static_cast<double>(s.heads);
    const double qkv = sl * static_cast<double>((s.heads + 2 * s.kv_heads) * s.head_dim());
    // norm1 in, qkv in, proj in + Q K V, softmax out, norm2 in, fc1 in, swiglu gate+up, fc2 in.
    const double unsharded = 4 * sl * h;
    const double sharded = sl * h + qkv + a * sl * sl + 2 * sl * f + sl * f;
    LayerBytes b = layer_bytes(g, 1);
    INFO(name);
    CHECK(b.masks == 0);
    CHECK(b.unsharded == 2 * unsharded);
    CHECK(b.sharded == 2 * sharded);
    CHECK(b.dropped == 2 * a * sl * sl);
    // fp32 training doubles every element but no mask.
    CHECK(layer_bytes(g, 1, Precision::fp32).total == 2 * b.total);
  }
}

TEST_CASE("models: saved bytes per sample sum the units", "[models]") {
  ModelGraph g = build_graph(ModelCatalog::builtin().spec("bert-large"));
  double sum = 0;
  for (const auto& u : g.units()) sum += u.saved_bytes(Precision::fp16);
  CHECK(sum == Approx(g.saved_bytes_per_sample(Precision::fp16)).epsilon(1e-12));
  CHECK(sum > 0);
  // BERT's post-norm layer saves the same 34sh + 5as^2 bytes as a GPT layer.
  const double sh = 512.0 * 1024, as2 = 16.0 * 512 * 512;
  CHECK(layer_bytes(g, 3).total == 34 * sh + 5 * as2);
}
