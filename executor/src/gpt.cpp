// GPT-style decoder on the backend interface (see gpt.hpp).
#include "trainplan/executor/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "model_common.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::executor {

// ---- config ------------------------------------------------------------------------------------

GptConfig GptConfig::from_spec(const models::ModelSpec& spec) {
  auto fail = [&](const std::string& pointer, const std::string& message) {
    return Error(fmt::format("{}: {}", spec.name, message)).at(spec.file, pointer);
  };
  if (spec.family != models::Family::gpt && spec.family != models::Family::llama)
    throw fail("/family", fmt::format("the executor's decoder runs families gpt and llama, not {}",
                                      models::family_name(spec.family)));
  if (spec.position == models::PositionEmbedding::rotary)
    throw fail("/position", "rotary position embeddings are not implemented by the hand-written reference GptModel")
        .hint("executor::Runtime (trainplan execute) runs rotary models from the model graph; GptModel needs learned or no "
              "position embeddings");
  if (spec.activation == models::Activation::relu || spec.activation == models::Activation::geglu)
    throw fail("/activation", fmt::format("the decoder supports gelu and swiglu, not {}", models::activation_name(spec.activation)));
  GptConfig c;
  c.layers = spec.layers;
  c.hidden = spec.hidden;
  c.heads = spec.heads;
  c.kv_heads = spec.kv_heads > 0 ? spec.kv_heads : spec.heads;
  c.ffn_hidden = spec.ffn_hidden > 0 ? spec.ffn_hidden : 4 * spec.hidden;
  c.vocab = spec.vocab;
  c.seq_len = spec.seq_len;
  c.norm = spec.norm;
  c.activation = spec.activation;
  c.bias = spec.bias;
  c.tied_embeddings = spec.tied_embeddings;
  c.learned_positions = spec.position == models::PositionEmbedding::learned;
  try {
    c.validate();
  } catch (Error& e) {
    e.at(spec.file, e.pointer());
    throw;
  }
  return c;
}

GptConfig GptConfig::shrunk(int64_t new_layers, int64_t new_hidden, int64_t new_heads, int64_t new_vocab,
                            int64_t new_seq_len) const {
  GptConfig c = *this;
  c.layers = new_layers;
  c.hidden = new_hidden;
  c.heads = new_heads;
  const double ffn_ratio = static_cast<double>(ffn_hidden) / static_cast<double>(hidden);
  c.ffn_hidden = std::max<int64_t>(1, std::llround(ffn_ratio * static_cast<double>(new_hidden)));
  const int64_t group = std::max<int64_t>(1, heads / std::max<int64_t>(1, kv_heads));
  c.kv_heads = std::max<int64_t>(1, new_heads / group);
  while (new_heads % c.kv_heads != 0) --c.kv_heads;
  c.vocab = new_vocab;
  c.seq_len = new_seq_len;
  c.validate();
  return c;
}

void GptConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v < 1) throw Error(fmt::format("gpt config: {} must be >= 1, got {}", name, v)).at("", std::string("/") + name);
  };
  positive(layers, "layers");
  positive(hidden, "hidden");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  positive(ffn_hidden, "ffn_hidden");
  positive(vocab, "vocab");
  positive(seq_len, "seq_len");
  if (hidden % heads != 0)
    throw Error(fmt::format("gpt config: hidden ({}) must be divisible by heads ({})", hidden, heads)).at("", "/heads");
  if (heads % kv_heads != 0)
    throw Error(fmt::format("gpt config: heads ({}) must be a multiple of kv_heads ({})", heads, kv_heads))
        .at("", "/kv_heads");
  if (!(norm_eps >= 0) || !(init_stddev > 0))
    throw Error(fmt::format("gpt config: norm_eps ({}) must be >= 0 and init_stddev ({}) > 0", norm_eps, init_stddev));
  if (activation == models::Activation::relu || activation == models::Activation::geglu)
    throw Error(fmt::format("gpt config: the decoder supports gelu and swiglu, not {}", models::activation_name(activation)));
  if (vocab_multiple < 0)
    throw Error(fmt::format("gpt config: vocab_multiple must be >= 0 (0: automatic), got {}", vocab_multiple))
        .at("", "/vocab_multiple");
}

int64_t padded_rows(int64_t rows, int64_t multiple) {
  TP_ASSERT(rows >= 0 && multiple >= 1);
  return (rows + multiple - 1) / multiple * multiple;
}

int64_t gpt_vocab_rows(const GptConfig& config, const Backend& backend) {
  const int64_t multiple =
      config.vocab_multiple > 0 ? config.vocab_multiple : (backend.runs_when_queued() ? 1 : kDeviceVocabMultiple);
  return padded_rows(config.vocab, multiple);
}

std::vector<double> padded_logit_bias(int64_t vocab, int64_t rows) {
  TP_ASSERT(0 <= vocab && vocab <= rows);
  std::vector<double> bias(static_cast<size_t>(rows), 0.0);
  std::fill(bias.begin() + vocab, bias.end(), kPaddedLogit);
  return bias;
}

// ---- model -------------------------------------------------------------------------------------

namespace {

// Parameter indices of one block in the ParameterStore (-1: absent).
struct BlockParams {
  int norm1_w = -1, norm1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
  int norm2_w = -1, norm2_b = -1, fc_w = -1, fc_b = -1, fc2_w = -1, fc2_b = -1;
};

// Activations of one block kept for backward. N = batch * seq token rows.
struct BlockActs {
  Tensor norm1, mean1, rstd1;  // (N,C), N, N
  Tensor qkv;                  // (N, (H + 2 KVH) D)
  Tensor att, lse;             // (N, H D), (B, H, T)
  Tensor mid;                  // (N,C): residual after attention
  Tensor norm2, mean2, rstd2;  // (N,C), N, N
  Tensor fc;                   // (N, F) gelu or (N, 2F) swiglu
  Tensor act;                  // (N, F)
};

}  // namespace

struct GptModel::Impl {
  Backend& be;
  GptConfig cfg;
  int64_t batch;
  DType dtype;
  ParameterStore store;
  // Parameter indices.
  int wte = -1, wpe = -1, normf_w = -1, normf_b = -1, lm_head = -1;
  std::vector<BlockParams> blocks;
  // Activations: residual[l] is the input of block l, residual[layers] the final one.
  std::vector<Tensor> residual;
  std::vector<BlockActs> acts;
  Tensor normf, meanf, rstdf, logits, losses, ce_max, ce_sum_exp;
  Tensor tokens, targets, positions;  // N i32 each
  // Gradient scratch shared by all blocks.
  Tensor dres, dtmp, dnorm, dqkv, datt, dfc, dact, dlogits;
  int64_t vocab_rows;  // rows of wte / lm_head and columns of the logits
  Tensor logit_bias;   // (vocab_rows): 0, then kPaddedLogit on padded columns; undefined without padding
  bool have_forward = false;

  Impl(Backend& backend, const GptConfig& config, int64_t b, DType dt, int64_t rows, std::vector<ParamSpec> specs)
      : be(backend), cfg(config), batch(b), dtype(dt), store(backend, dt, std::move(specs)), vocab_rows(rows) {}

  int64_t tokens_n() const { return batch * cfg.seq_len; }
  AttentionShape attention_shape() const {
    return AttentionShape{batch, cfg.seq_len, cfg.heads, cfg.kv_heads, cfg.head_dim(), true};
  }
  Tensor p(int i) const { return i < 0 ? Tensor() : store.param(static_cast<size_t>(i)); }
  Tensor g(int i) const { return i < 0 ? Tensor() : store.grad(static_cast<size_t>(i)); }

  void norm_forward(Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, int w,
                    int b) {
    if (cfg.norm == models::Norm::layernorm)
      be.layernorm_forward(s, out, mean, rstd, inp, p(w), p(b), cfg.norm_eps);
    else
      be.rmsnorm_forward(s, out, rstd, inp, p(w), cfg.norm_eps);
  }
  void norm_backward(Stream& s, const Tensor& dinp, const Tensor& dout, const Tensor& inp, const Tensor& mean,
                     const Tensor& rstd, int w, int b) {
    if (cfg.norm == models::Norm::layernorm)
      be.layernorm_backward(s, dinp, g(w), g(b), dout, inp, p(w), mean, rstd);
    else
      be.rmsnorm_backward(s, dinp, g(w), dout, inp, p(w), rstd);
  }
  int64_t fc_cols() const {
    return cfg.activation == models::Activation::swiglu ? 2 * cfg.ffn_hidden : cfg.ffn_hidden;
  }
};

namespace {

std::vector<ParamSpec> gpt_param_specs(const GptConfig& c, int64_t vocab_rows) {
  const int64_t C = c.hidden, D = c.head_dim();
  const int64_t qkv = (c.heads + 2 * c.kv_heads) * D;
  const int64_t fc = c.activation == models::Activation::swiglu ? 2 * c.ffn_hidden : c.ffn_hidden;
  const double proj_std = c.init_stddev / std::sqrt(2.0 * static_cast<double>(c.layers));
  const bool norm_bias = c.norm == models::Norm::layernorm && c.bias;
  std::vector<ParamSpec> s;
  auto weight = [&](std::string name, Shape shape, double stddev) {
    s.push_back({std::move(name), std::move(shape), ParamInit::normal, stddev, true});
  };
  auto constant = [&](std::string name, int64_t n, double value) {
    s.push_back({std::move(name), {n}, ParamInit::constant, value, false});
  };
  weight("wte", {vocab_rows, C}, c.init_stddev);
  if (c.learned_positions) weight("wpe", {c.seq_len, C}, c.init_stddev);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = fmt::format("block{}.", l);
    constant(b + "norm1.weight", C, 1.0);
    if (norm_bias) constant(b + "norm1.bias", C, 0.0);
    weight(b + "attn.qkv.weight", {qkv, C}, c.init_stddev);
    if (c.bias) constant(b + "attn.qkv.bias", qkv, 0.0);
    weight(b + "attn.proj.weight", {C, c.heads * D}, proj_std);
    if (c.bias) constant(b + "attn.proj.bias", C, 0.0);
    constant(b + "norm2.weight", C, 1.0);
    if (norm_bias) constant(b + "norm2.bias", C, 0.0);
    weight(b + "mlp.fc.weight", {fc, C}, c.init_stddev);
    if (c.bias) constant(b + "mlp.fc.bias", fc, 0.0);
    weight(b + "mlp.proj.weight", {C, c.ffn_hidden}, proj_std);
    if (c.bias) constant(b + "mlp.proj.bias", C, 0.0);
  }
  constant("norm_f.weight", C, 1.0);
  if (norm_bias) constant("norm_f.bias", C, 0.0);
  if (!c.tied_embeddings) weight("lm_head.weight", {vocab_rows, C}, c.init_stddev);
  return s;
}

}  // namespace

GptModel::GptModel(Backend& backend, const GptConfig& config, int64_t batch, DType dtype, uint64_t seed) {
  config.validate();
  if (batch < 1) throw Error(fmt::format("gpt model: batch must be >= 1, got {}", batch));
  const int64_t rows = gpt_vocab_rows(config, backend);
  impl_ = std::make_unique<Impl>(backend, config, batch, dtype, rows, gpt_param_specs(config, rows));
  Impl& m = *impl_;
  Stream& s = backend.default_stream();
  // The real rows draw the values of the unpadded table (the same stream of normals, row-major).
  m.store.initialize(s, seed);

  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < m.store.size(); ++i)
      if (m.store.spec(i).name == name) return static_cast<int>(i);
    return -1;
  };
  m.wte = find("wte");
  m.wpe = find("wpe");
  m.normf_w = find("norm_f.weight");
  m.normf_b = find("norm_f.bias");
  m.lm_head = config.tied_embeddings ? m.wte : find("lm_head.weight");
  if (rows > config.vocab) {
    for (int table : {m.wte, m.lm_head}) backend.fill(s, m.p(table).slice_rows(config.vocab, rows), 0.0);
    m.logit_bias = backend.empty(dtype, {rows});
    backend.upload_values(s, m.logit_bias, padded_logit_bias(config.vocab, rows));
  }
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string b = fmt::format("block{}.", l);
    BlockParams bp;
    bp.norm1_w = find(b + "norm1.weight");
    bp.norm1_b = find(b + "norm1.bias");
    bp.qkv_w = find(b + "attn.qkv.weight");
    bp.qkv_b = find(b + "attn.qkv.bias");
    bp.proj_w = find(b + "attn.proj.weight");
    bp.proj_b = find(b + "attn.proj.bias");
    bp.norm2_w = find(b + "norm2.weight");
    bp.norm2_b = find(b + "norm2.bias");
    bp.fc_w = find(b + "mlp.fc.weight");
    bp.fc_b = find(b + "mlp.fc.bias");
    bp.fc2_w = find(b + "mlp.proj.weight");
    bp.fc2_b = find(b + "mlp.proj.bias");
    m.blocks.push_back(bp);
  }

  const int64_t N = m.tokens_n(), C = config.hidden;
  const AttentionShape sh = m.attention_shape();
  auto act = [&](Shape shape) { return backend.empty(dtype, shape); };
  for (int64_t l = 0; l <= config.layers; ++l) m.residual.push_back(act({N, C}));
  for (int64_t l = 0; l < config.layers; ++l) {
    BlockActs a;
    a.norm1 = act({N, C});
    a.mean1 = act({N});
    a.rstd1 = act({N});
    a.qkv = act({N, sh.qkv_cols()});
    a.att = act({N, sh.out_cols()});
    a.lse = act({batch, config.heads, config.seq_len});
    a.mid = act({N, C});
    a.norm2 = act({N, C});
    a.mean2 = act({N});
    a.rstd2 = act({N});
    a.fc = act({N, m.fc_cols()});
    a.act = act({N, config.ffn_hidden});
    m.acts.push_back(a);
  }
  m.normf = act({N, C});
  m.meanf = act({N});
  m.rstdf = act({N});
  m.logits = act({N, rows});
  m.losses = act({N});
  m.ce_max = act({N});
  m.ce_sum_exp = act({N});
  m.tokens = backend.empty(DType::i32, {N});
  m.targets = backend.empty(DType::i32, {N});
  m.positions = backend.empty(DType::i32, {N});
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % config.seq_len);
  backend.upload_ids(s, m.positions, pos);
  m.dres = act({N, C});
  m.dtmp = act({N, C});
  m.dnorm = act({N, C});
  m.dqkv = act({N, sh.qkv_cols()});
  m.datt = act({N, sh.out_cols()});
  m.dfc = act({N, m.fc_cols()});
  m.dact = act({N, config.ffn_hidden});
  m.dlogits = act({N, rows});
}

GptModel::~GptModel() = default;

const GptConfig& GptModel::config() const { return impl_->cfg; }
int64_t GptModel::batch() const { return impl_->batch; }
int64_t GptModel::vocab_rows() const { return impl_->vocab_rows; }
ParameterStore& GptModel::parameters() { return impl_->store; }
const ParameterStore& GptModel::parameters() const { return impl_->store; }

double GptModel::forward(Stream& s, std::span<const int32_t> tokens, std::span<const int32_t> targets) {
  Impl& m = *impl_;
  Backend& be = m.be;
  const GptConfig& c = m.cfg;
  detail::check_ids(tokens, m.tokens_n(), c.vocab, "gpt forward: tokens");
  detail::check_ids(targets, m.tokens_n(), c.vocab, "gpt forward: targets");
  be.upload_ids(s, m.tokens, tokens);
  be.upload_ids(s, m.targets, targets);

  be.embedding_forward(s, m.residual[0], m.tokens, m.p(m.wte), 0, false);
  if (c.learned_positions) be.embedding_forward(s, m.residual[0], m.positions, m.p(m.wpe), 0, true);
  for (int64_t l = 0; l < c.layers; ++l) {
    const BlockParams& bp = m.blocks[static_cast<size_t>(l)];
    BlockActs& a = m.acts[static_cast<size_t>(l)];
    const Tensor& x = m.residual[static_cast<size_t>(l)];
    const Tensor& y = m.residual[static_cast<size_t>(l) + 1];
    m.norm_forward(s, a.norm1, a.mean1, a.rstd1, x, bp.norm1_w, bp.norm1_b);
    be.linear_forward(s, a.qkv, a.norm1, m.p(bp.qkv_w), m.p(bp.qkv_b));
    be.attention_forward(s, a.att, a.lse, a.qkv, m.attention_shape());
    be.linear_residual_forward(s, a.mid, a.att, m.p(bp.proj_w), m.p(bp.proj_b), x);
    m.norm_forward(s, a.norm2, a.mean2, a.rstd2, a.mid, bp.norm2_w, bp.norm2_b);
    if (c.activation == models::Activation::swiglu) {
      be.linear_forward(s, a.fc, a.norm2, m.p(bp.fc_w), m.p(bp.fc_b));
      be.swiglu_forward(s, a.act, a.fc);
    } else {
      be.linear_gelu_forward(s, a.act, a.fc, a.norm2, m.p(bp.fc_w), m.p(bp.fc_b));
    }
    be.linear_residual_forward(s, y, a.act, m.p(bp.fc2_w), m.p(bp.fc2_b), a.mid);
  }
  m.norm_forward(s, m.normf, m.meanf, m.rstdf, m.residual.back(), m.normf_w, m.normf_b);
  be.linear_forward(s, m.logits, m.normf, m.p(m.lm_head), m.logit_bias);
  be.cross_entropy_forward(s, m.losses, m.ce_max, m.ce_sum_exp, m.logits, m.targets);
  m.have_forward = true;
  return detail::mean_loss(be, s, m.losses);
}

void GptModel::backward(Stream& s) {
  Impl& m = *impl_;
  Backend& be = m.be;
  const GptConfig& c = m.cfg;
  if (!m.have_forward) throw Error("gpt backward: call forward first");
  be.ce_backward(s, m.dlogits, m.logits, m.targets, 0, m.ce_max, m.ce_sum_exp,
                 1.0 / static_cast<double>(m.tokens_n()));
  be.linear_backward(s, m.dnorm, m.g(m.lm_head), Tensor(), m.dlogits, m.normf, m.p(m.lm_head));
  m.norm_backward(s, m.dres, m.dnorm, m.residual.back(), m.meanf, m.rstdf, m.normf_w, m.normf_b);
  // dres holds d(loss)/d(residual[l + 1]) on entry to block l and d/d(residual[l]) on exit.
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    const BlockParams& bp = m.blocks[static_cast<size_t>(l)];
    const BlockActs& a = m.acts[static_cast<size_t>(l)];
    const Tensor& x = m.residual[static_cast<size_t>(l)];
    if (c.activation == models::Activation::swiglu) {
      be.linear_backward(s, m.dact, m.g(bp.fc2_w), m.g(bp.fc2_b), m.dres, a.act, m.p(bp.fc2_w));
      be.swiglu_backward(s, m.dfc, a.fc, m.dact);
    } else {
      be.linear_backward_gelu(s, m.dfc, m.g(bp.fc2_w), m.g(bp.fc2_b), m.dres, a.act, m.p(bp.fc2_w), a.fc);
    }
    be.linear_backward(s, m.dnorm, m.g(bp.fc_w), m.g(bp.fc_b), m.dfc, a.norm2, m.p(bp.fc_w));
    m.norm_backward(s, m.dtmp, m.dnorm, a.mid, a.mean2, a.rstd2, bp.norm2_w, bp.norm2_b);
    be.accumulate(s, m.dres, m.dtmp);
    be.linear_backward(s, m.datt, m.g(bp.proj_w), m.g(bp.proj_b), m.dres, a.att, m.p(bp.proj_w));
    be.attention_backward(s, m.dqkv, m.datt, a.qkv, a.att, a.lse, m.attention_shape());
    be.linear_backward(s, m.dnorm, m.g(bp.qkv_w), m.g(bp.qkv_b), m.dqkv, a.norm1, m.p(bp.qkv_w));
    m.norm_backward(s, m.dtmp, m.dnorm, x, a.mean1, a.rstd1, bp.norm1_w, bp.norm1_b);
    be.accumulate(s, m.dres, m.dtmp);
  }
  be.embedding_backward(s, m.g(m.wte), m.dres, m.tokens, 0);
  if (c.learned_positions) be.embedding_backward(s, m.g(m.wpe), m.dres, m.positions, 0);
}

double GptModel::train_step(Stream& s, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                            const AdamWConfig& adamw, double max_grad_norm) {
  impl_->store.zero_grads(s);
  double loss = forward(s, tokens, targets);
  backward(s);
  impl_->store.clip_and_step(s, adamw, max_grad_norm);
  return loss;
}

double GptModel::training_flops_per_step() const {
  const GptConfig& c = impl_->cfg;
  const double n = static_cast<double>(impl_->tokens_n());
  const double C = static_cast<double>(c.hidden), D = static_cast<double>(c.head_dim());
  const double qkv = static_cast<double>(c.heads + 2 * c.kv_heads) * D;
  const double fc = static_cast<double>(impl_->fc_cols());
  const double block_matmul = C * qkv + static_cast<double>(c.heads) * D * C + C * fc +
                              static_cast<double>(c.ffn_hidden) * C;
  const double matmul_weights = static_cast<double>(c.layers) * block_matmul + static_cast<double>(c.vocab) * C;
  const double attention = 12.0 * static_cast<double>(c.layers) * n * static_cast<double>(c.seq_len) *
                           static_cast<double>(c.heads) * D;
  return 6.0 * n * matmul_weights + attention;
}

}  // namespace trainplan::executor
