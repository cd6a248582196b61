// Operator graphs of transformers: gpt and llama decoders, bert and vit encoders.
//
// Saved activations follow Korthikanti et al. 2022 (arXiv 2205.05198), per sample, in
// elements of the training precision (s = seq_len, h = hidden, a = heads, f = ffn_hidden):
//   norm            its input                                 s h      kept whole under tp
//   qkv linear      its input                                 s h      kept whole under tp
//   attention       softmax output, dropout output           2 a s^2   / t, dropped by selective
//                   + dropout mask (bytes)                     a s^2   / t, dropped by selective
//   attn.proj       its input + Q, K, V                       s h + s (a + 2 kv) d     / t
//   dropout         mask (bytes)                               s h      kept whole under tp
//   fc1 (up/gate)   its input                                 s h      kept whole under tp
//   activation      its input                                 s f (swiglu: 2 s f)      / t
//   fc2 (down)      its input                                 s f      / t
// For a GPT layer in 16 bits that is 34 s h + 5 a s^2 bytes, 10 s h + 24 s h / t + 5 a s^2 / t
// under tensor parallelism t.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "builder.hpp"
#include "internal.hpp"

namespace trainplan::models::detail {
namespace {

struct Dims {
  int64_t s, h, a, kv, d, f, V;
};

class TransformerBuilder {
 public:
  explicit TransformerBuilder(const ModelSpec& spec)
      : spec_(spec),
        b_(spec),
        dims_{spec.seq_len, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim(), spec.ffn_hidden, spec.vocab} {}

  ModelGraph build() {
    int x = input_unit();
    for (int64_t l = 1; l <= spec_.layers; ++l) {
      b_.begin_unit(fmt::format("block{}", l));
      x = spec_.family == Family::bert ? post_norm_block(fmt::format("block{}", l), x, l - 1)
                                       : pre_norm_block(fmt::format("block{}", l), x, l - 1);
    }
    output_unit(x);
    return b_.finish();
  }

 private:
  std::vector<int64_t> rows_h() const { return {dims_.s, dims_.h}; }
  double sh() const { return static_cast<double>(dims_.s) * static_cast<double>(dims_.h); }
  bool dropout() const { return spec_.dropout && spec_.dropout_p > 0; }

  // A norm over {s, h} that saves its input (unless another op saves the same tensor).
  int norm(const std::string& name, int x, bool save_input = true) {
    Op op = make_norm(name, spec_.norm == Norm::rmsnorm ? OpKind::rmsnorm : OpKind::layernorm, x, rows_h(),
                      dims_.h, spec_.norm == Norm::layernorm && spec_.bias, spec_.norm_eps);
    set_saved(op, save_input ? sh() : 0, 0, false);
    return b_.add(std::move(op));
  }

  // Dropout on {s, h}, replicated under tp: its mask is one byte per element.
  int maybe_dropout(const std::string& name, int x) {
    if (!dropout()) return x;
    Op op = make_dropout(name, TpSplit::replicated, x, rows_h(), spec_.dropout_p);
    set_saved(op, 0, sh(), false);
    return b_.add(std::move(op));
  }

  int input_unit() {
    b_.begin_unit("embedding");
    int x = -1;
    if (spec_.family == Family::vit) {
      const int64_t patches = (spec_.image_size / spec_.patch_size) * (spec_.image_size / spec_.patch_size);
      const int64_t patch_elems = spec_.channels * spec_.patch_size * spec_.patch_size;
      Op pe = make_linear("embed.patch", TpSplit::replicated, -1, patches, patch_elems, dims_.h, true);
      pe.kind = OpKind::patch_embed;
      pe.batch_input = BatchInput::pixels;
      pe.kernel = spec_.patch_size;
      pe.stride = spec_.patch_size;
      pe.params += static_cast<double>(dims_.h);  // class token
      pe.out_shape = {patches + 1, dims_.h};
      pe.mem_elems_fwd += static_cast<double>(dims_.h);
      set_saved(pe, static_cast<double>(patches * patch_elems), 0, false);  // the pixels, for the weight gradient
      x = b_.add(std::move(pe));
    } else {
      x = b_.add(make_embedding("embed.token", TpSplit::vocab, BatchInput::tokens, dims_.s, dims_.V, dims_.h));
      token_embedding_ = x;
    }
    if (spec_.family == Family::vit || spec_.position == PositionEmbedding::learned) {
      // The table has a row per position the model supports (max_positions), of which a
      // sample reads the first s.
      const int64_t rows = spec_.max_positions > 0 ? spec_.max_positions : dims_.s;
      int pos = b_.add(make_embedding("embed.position", TpSplit::replicated, BatchInput::positions, dims_.s, rows, dims_.h));
      x = b_.add(make_residual("embed.add_position", TpSplit::replicated, x, pos, rows_h()));
    }
    if (spec_.family == Family::bert && spec_.type_vocab > 0) {
      int type = b_.add(make_embedding("embed.token_type", TpSplit::replicated, BatchInput::token_types, dims_.s,
                                       spec_.type_vocab, dims_.h));
      x = b_.add(make_residual("embed.add_token_type", TpSplit::replicated, x, type, rows_h()));
    }
    if (spec_.family == Family::bert) x = norm("embed.norm", x);
    return maybe_dropout("embed.dropout", x);
  }

  // qkv -> attention -> proj -> dropout; returns the dropout (or proj) op. `layer` is the
  // block's 0-based index (for its sliding window).
  int attention_part(const std::string& p, int x, int64_t layer) {
    const auto [s, h, a, kv, d, f, V] = dims_;
    (void)f;
    (void)V;
    const int64_t qkv_cols = (a + 2 * kv) * d;
    const double qkv_elems = static_cast<double>(s) * static_cast<double>(qkv_cols);
    Op qkv = make_linear(p + ".attn.qkv", TpSplit::column, x, s, h, qkv_cols, spec_.bias || spec_.qkv_bias);
    set_saved(qkv, sh(), 0, false);
    const int qkv_id = b_.add(std::move(qkv));

    Op att;
    att.name = p + ".attn.core";
    att.kind = OpKind::attention;
    att.tp_split = TpSplit::heads;
    att.inputs = {qkv_id};
    att.heads = a;
    att.kv_heads = kv;
    att.head_dim = d;
    att.causal = spec_.is_decoder();
    att.rotary = spec_.position == PositionEmbedding::rotary;
    att.rope_theta = att.rotary ? spec_.rope_theta : 0;
    att.dropout_p = dropout() ? spec_.dropout_p : 0;
    // Keys per query: s, or the window of a local layer (a sliding window computes the
    // scores of s x window, the same dense convention as the full s x s of causal layers).
    const bool local = !spec_.local_layers.empty() && spec_.local_layers[static_cast<size_t>(layer)];
    att.window = local ? spec_.sliding_window : 0;
    const int64_t keys = local ? std::min(s, spec_.sliding_window) : s;
    const double scores = static_cast<double>(a) * static_cast<double>(s) * static_cast<double>(keys);
    const double ss_h = static_cast<double>(s) * static_cast<double>(keys) * static_cast<double>(a * d);
    // QK^T and AV: 2 s keys (a d) each forward, twice that backward (full s^2 also when causal).
    att.flops_fwd = 4 * ss_h + kSoftmaxCost.fwd * scores;
    att.flops_bwd = 8 * ss_h + kSoftmaxCost.bwd * scores;
    if (spec_.attn_softcap > 0) {
      att.softcap = spec_.attn_softcap;
      att.flops_fwd += kSoftcapCost.fwd * scores;
      att.flops_bwd += kSoftcapCost.bwd * scores;
    }
    if (spec_.qk_norm) {  // RMSNorm of every Q and K head: weights {d} for Q and for K
      const double qk = static_cast<double>(s) * static_cast<double>((a + kv) * d);
      att.qk_norm = true;
      att.params += 2 * static_cast<double>(d);
      att.flops_fwd += kRmsNormCost.fwd * qk;
      att.flops_bwd += kRmsNormCost.bwd * qk;
    }
    if (dropout()) {
      att.flops_fwd += kDropoutCost.fwd * scores;
      att.flops_bwd += kDropoutCost.bwd * scores;
    }
    if (att.rotary) {
      // The rotated dimensions of a head: a fraction of d, even (pairs rotate together).
      att.rotary_dims = std::max<int64_t>(2, 2 * std::llround(spec_.rotary_fraction * static_cast<double>(d) / 2));
      const double qk = static_cast<double>(s) * static_cast<double>((a + kv) * att.rotary_dims);
      att.flops_fwd += kRotaryCost.fwd * qk;
      att.flops_bwd += kRotaryCost.bwd * qk;
    }
    // Unfused attention traffic: write scores, softmax read + write, (dropout read + write),
    // read probabilities for AV; plus Q, K, V in and the context out.
    att.mem_elems_fwd = qkv_elems + sh() + scores * (dropout() ? 6 : 4);
    att.mem_elems_bwd = 2 * att.mem_elems_fwd;
    att.out_shape = {s, a * d};
    // Softmax output (+ dropout output and mask): the 5 a s^2 term.
    set_saved(att, dropout() ? 2 * scores : scores, dropout() ? scores : 0, true, true);
    const int att_id = b_.add(std::move(att));

    Op proj = make_linear(p + ".attn.proj", TpSplit::row, att_id, s, a * d, h, spec_.bias);
    set_saved(proj, static_cast<double>(s) * static_cast<double>(a * d) + qkv_elems, 0, true);
    const int proj_id = b_.add(std::move(proj));
    return maybe_dropout(p + ".attn.dropout", proj_id);
  }

  // fc1 -> activation -> fc2 -> dropout; returns the last op. A MoE block's MLP is moe_part.
  int mlp_part(const std::string& p, int x, int64_t layer) {
    if (spec_.is_moe_block(layer + 1)) return maybe_dropout(p + ".mlp.dropout", moe_part(p, x));
    return maybe_dropout(p + ".mlp.dropout", ffn(p + ".mlp", x, dims_.s, dims_.f, true, 0));
  }

  // fc1 -> activation -> fc2 of width f on `rows` rows of x; returns fc2. `save_input`: fc1
  // saves its input (false when another op already saves the same tensor). With experts > 0
  // the three ops are the routed experts (Op::expert): weights {E, in, out}, all E counted
  // in params, each row through one expert (rows = s top_k routed copies).
  int ffn(const std::string& p, int x, int64_t rows, int64_t f, bool save_input, int64_t experts) {
    const int64_t h = dims_.h;
    const bool glu = is_gated(spec_.activation);
    const double r = static_cast<double>(rows);
    const int64_t up = glu ? 2 * f : f;
    Op fc1 = make_linear(p + ".fc1", TpSplit::column, x, rows, h, up, spec_.bias);
    set_saved(fc1, save_input ? r * static_cast<double>(h) : 0, 0, false);
    const int fc1_id = b_.add(as_expert(std::move(fc1), experts));
    Op act = make_activation(p + ".act", spec_.activation, TpSplit::column, fc1_id, {rows, f});
    set_saved(act, r * static_cast<double>(up), 0, true);
    const int act_id = b_.add(as_expert(std::move(act), experts));
    Op fc2 = make_linear(p + ".fc2", TpSplit::row, act_id, rows, f, h, spec_.bias);
    set_saved(fc2, r * static_cast<double>(f), 0, true);
    return b_.add(as_expert(std::move(fc2), experts));
  }

  // Marks `op` as a routed-expert op of E = experts (unchanged when experts == 0): a linear's
  // weight becomes {E, in, out} with E times the parameters and weight traffic.
  Op as_expert(Op op, int64_t experts) const {
    if (experts == 0) return op;
    op.expert = true;
    op.num_experts = experts;
    op.top_k = spec_.experts_per_token;
    if (op.kind == OpKind::linear) {
      const double e = static_cast<double>(experts), w = static_cast<double>(op.k) * static_cast<double>(op.n);
      op.params *= e;
      op.mem_elems_fwd += (e - 1) * w;
      op.mem_elems_bwd += 2 * (e - 1) * w;
      op.weight_shape = {experts, op.k, op.n};
    }
    return op;
  }

  // The MoE MLP of a block: router -> moe_dispatch -> routed experts -> moe_combine, plus the
  // shared expert (when shared_expert_ffn_hidden > 0) on the same input, added to the
  // combined output. Returns the last op. Saved: the router its input (s h, the tensor the
  // shared expert's fc1 also reads) and its probabilities (s E); the experts their inputs
  // on the s k routed rows; the combine the expert outputs (s k h) and the weights (s k).
  int moe_part(const std::string& p, int x) {
    const int64_t s = dims_.s, h = dims_.h, E = spec_.num_experts, k = spec_.experts_per_token;
    const double sk = static_cast<double>(s) * static_cast<double>(k);
    const int64_t fe = spec_.expert_ffn_hidden > 0 ? spec_.expert_ffn_hidden : dims_.f;
    Op router = make_linear(p + ".mlp.router", TpSplit::replicated, x, s, h, E, false);
    router.kind = OpKind::router;
    router.num_experts = E;
    router.top_k = k;
    router.out_shape = {s, k};
    set_saved(router, sh() + static_cast<double>(s) * static_cast<double>(E), 0, false);
    const int router_id = b_.add(std::move(router));

    Op dispatch = make_elementwise(p + ".mlp.dispatch", OpKind::moe_dispatch, TpSplit::replicated, {x, router_id},
                                   {s * k, h}, {0, 0});
    dispatch.num_experts = E;
    dispatch.top_k = k;
    dispatch.mem_elems_fwd = sh() + sk * static_cast<double>(h);  // read x, write the k copies
    dispatch.mem_elems_bwd = dispatch.mem_elems_fwd;
    const int dispatch_id = b_.add(std::move(dispatch));

    const int experts_out = ffn(p + ".mlp.experts", dispatch_id, s * k, fe, true, E);

    // Forward a multiply and an add per routed element; backward the scaled gradient and the
    // gradient of each weight (a dot product over h).
    Op combine = make_elementwise(p + ".mlp.combine", OpKind::moe_combine, TpSplit::replicated,
                                  {experts_out, router_id}, {s, h}, {0, 0});
    combine.num_experts = E;
    combine.top_k = k;
    combine.flops_fwd = kMoeCombineCost.fwd * sk * static_cast<double>(h);
    combine.flops_bwd = kMoeCombineCost.bwd * sk * static_cast<double>(h);
    combine.mem_elems_fwd = sk * static_cast<double>(h) + sh();
    combine.mem_elems_bwd = 2 * sk * static_cast<double>(h) + sh();
    set_saved(combine, sk * static_cast<double>(h) + sk, 0, false);
    const int combine_id = b_.add(std::move(combine));
    if (spec_.shared_expert_ffn_hidden == 0) return combine_id;

    const int shared = ffn(p + ".mlp.shared", x, s, spec_.shared_expert_ffn_hidden, false, 0);
    return b_.add(make_residual(p + ".mlp.shared_add", TpSplit::replicated, combine_id, shared, rows_h()));
  }

  // Pre-norm block; with post_norms (Gemma 2/3) the attention and MLP outputs are normed
  // again before their residual adds; with parallel_residual (GPT-NeoX) both branches read
  // the block input: x + attn(norm1(x)) + mlp(norm2(x)).
  int pre_norm_block(const std::string& p, int x, int64_t layer) {
    int n1 = norm(p + ".norm1", x);
    int attn = attention_part(p, n1, layer);
    if (spec_.post_norms) attn = norm(p + ".attn.post_norm", attn);
    int r1 = b_.add(make_residual(p + ".attn.residual", TpSplit::replicated, x, attn, rows_h()));
    int n2 = -1;
    if (spec_.parallel_residual) {
      n2 = norm(p + ".norm2", x, false);  // its input x is saved once, by norm1
    } else {
      n2 = norm(p + ".norm2", r1);
    }
    int mlp = mlp_part(p, n2, layer);
    if (spec_.post_norms) mlp = norm(p + ".mlp.post_norm", mlp);
    return b_.add(make_residual(p + ".mlp.residual", TpSplit::replicated, r1, mlp, rows_h()));
  }

  int post_norm_block(const std::string& p, int x, int64_t layer) {
    int attn = attention_part(p, x, layer);
    int r1 = b_.add(make_residual(p + ".attn.residual", TpSplit::replicated, x, attn, rows_h()));
    int n1 = norm(p + ".norm1", r1);
    int mlp = mlp_part(p, n1, layer);
    int r2 = b_.add(make_residual(p + ".mlp.residual", TpSplit::replicated, n1, mlp, rows_h()));
    return norm(p + ".norm2", r2);
  }

  // The vocabulary projection: tied to the token embedding (no parameters but its bias) or
  // owning {h, V}. Saves its input.
  int lm_head(const std::string& name, int x, bool bias) {
    Op head = make_linear(name, TpSplit::vocab, x, dims_.s, dims_.h, dims_.V, bias);
    if (spec_.tied_embeddings) {
      head.tied_weight_op = token_embedding_;
      head.params = bias ? static_cast<double>(dims_.V) : 0;
    }
    set_saved(head, sh(), 0, false);
    return b_.add(std::move(head));
  }

  void output_unit(int x) {
    b_.begin_unit("head");
    const int64_t s = dims_.s, h = dims_.h;
    if (spec_.family == Family::vit) {
      int n = norm("head.norm", x);
      Op cls = make_elementwise("head.class_token", OpKind::pool, TpSplit::replicated, {n}, {1, h}, {0, 0});
      cls.pool_mode = PoolMode::first_token;
      const int cls_id = b_.add(std::move(cls));
      Op fc = make_linear("head.classifier", TpSplit::replicated, cls_id, 1, h, spec_.num_classes, true);
      set_saved(fc, static_cast<double>(h), 0, false);
      const int fc_id = b_.add(std::move(fc));
      Op loss = make_loss("head.loss", TpSplit::replicated, fc_id, 1, spec_.num_classes);
      set_saved(loss, static_cast<double>(spec_.num_classes), 0, false);
      b_.add(std::move(loss));
      return;
    }
    int logits_in = x;
    bool head_bias = false;
    if (spec_.family == Family::bert) {
      // Masked-LM transform: dense, gelu, layernorm, then the tied decoder with its own bias.
      Op dense = make_linear("head.mlm.dense", TpSplit::replicated, x, s, h, h, true);
      set_saved(dense, sh(), 0, false);
      const int dense_id = b_.add(std::move(dense));
      Op act = make_activation("head.mlm.act", Activation::gelu, TpSplit::replicated, dense_id, rows_h());
      set_saved(act, sh(), 0, false);
      const int act_id = b_.add(std::move(act));
      logits_in = norm("head.mlm.norm", act_id);
      head_bias = true;
    } else {
      logits_in = norm("head.norm", x);
    }
    int logits = lm_head("head.lm", logits_in, head_bias);
    Op loss = make_loss("head.loss", TpSplit::vocab, logits, s, dims_.V);
    if (spec_.logit_softcap > 0) {  // cap * tanh(logits / cap) before the softmax
      const double n = static_cast<double>(s) * static_cast<double>(dims_.V);
      loss.softcap = spec_.logit_softcap;
      loss.flops_fwd += kSoftcapCost.fwd * n;
      loss.flops_bwd += kSoftcapCost.bwd * n;
    }
    // The softmax of the logits, kept for backward; split by vocabulary under tp.
    set_saved(loss, static_cast<double>(s) * static_cast<double>(dims_.V), 0, true);
    b_.add(std::move(loss));
  }

  const ModelSpec& spec_;
  GraphBuilder b_;
  Dims dims_;
  int token_embedding_ = -1;
};

}  // namespace

ModelGraph build_transformer_graph(const ModelSpec& spec) { return TransformerBuilder(spec).build(); }

}  // namespace trainplan::models::detail
