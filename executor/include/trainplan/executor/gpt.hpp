// File: trainplan/executor/gpt.hpp
//
// A GPT-style decoder assembled from the backend's kernels, on one rank: the oracle for
// parallel runs and the CUDA backend, and the model of the CPU step benchmark.
//
// Architecture (the model catalog's conventions): token + learned position embeddings;
// `layers` pre-norm blocks  x += attn(norm1(x)); x += mlp(norm2(x));  a final norm; the LM
// head tied to the token embedding (or separate); mean cross-entropy over all tokens.
// Variants follow the spec: LayerNorm or RMSNorm, GELU (fc 4h) or SwiGLU (fused gate|up),
// grouped-query attention (kv_heads < heads), biases on or off.
//
//   GptConfig cfg = GptConfig::from_spec(spec).shrunk(2, 64, 4, 256, 32);  // tiny
//   GptModel model(backend, cfg, /*batch=*/4, DType::f32, /*seed=*/1);
//   TokenBatch b = make_batch(tokens, 4, cfg.seq_len, 0);
//   for (int i = 0; i < 100; ++i)
//     double loss = model.train_step(stream, b.inputs, b.targets, AdamWConfig{}, 1.0);
//
// Parameter names: "wte" (V,C) (V = vocab_rows(): padded to a multiple of 128 on device
// backends, see GptConfig::vocab_multiple), "wpe" (T,C), "block<i>.norm1.weight" (C) / ".bias",
// "block<i>.attn.qkv.weight" ((H+2KVH)*D, C) rows [Q heads | K heads | V heads] / ".bias",
// "block<i>.attn.proj.weight" (C, H*D), "block<i>.norm2.*", "block<i>.mlp.fc.weight"
// (F or 2F, C), "block<i>.mlp.proj.weight" (C, F), "norm_f.*", "lm_head.weight" (V,C) when
// untied. Init: N(0, 0.02), output projections N(0, 0.02/sqrt(2*layers)) (GPT-2), norm
// weights 1, biases 0; weight decay on matrices and embeddings only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/parameters.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::executor {

struct GptConfig {
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  int64_t ffn_hidden = 256;   // F: the MLP's inner width (per gate/up half for SwiGLU)
  int64_t vocab = 256;
  int64_t seq_len = 32;
  models::Norm norm = models::Norm::layernorm;
  models::Activation activation = models::Activation::gelu;
  bool bias = true;
  bool tied_embeddings = true;
  bool learned_positions = true;  // false: no position embedding (the executor has no RoPE yet)
  double norm_eps = 1e-5;
  double init_stddev = 0.02;
  /// Rows of the token embedding and LM head tables: vocab rounded up to a multiple of this.
  /// 0 (default): kDeviceVocabMultiple on device backends (the LM head GEMMs on whole
  /// tensor-core tiles; GPT-2's 50,257 becomes 50,304), 1 (no padding) on the CPU reference.
  /// Padded rows start and stay zero, are never looked up, and their logits carry
  /// kPaddedLogit, so the loss and every gradient equal the unpadded model's.
  int64_t vocab_multiple = 0;

  /// The decoder shape of a catalog spec (families gpt and llama). Throws Error for what the
  /// executor cannot run yet (rotary positions, relu, encoder families), naming spec.file.
  static GptConfig from_spec(const models::ModelSpec& spec);
  /// A smaller model with the same conventions: the ratios ffn_hidden/hidden and
  /// heads/kv_heads are kept (kv_heads at least 1).
  GptConfig shrunk(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab, int64_t seq_len) const;
  /// Throws Error when the shape is inconsistent (e.g. hidden not divisible by heads).
  void validate() const;
  int64_t head_dim() const { return hidden / heads; }
};

/// The table row multiple of device backends (GptConfig::vocab_multiple = 0).
inline constexpr int64_t kDeviceVocabMultiple = 128;
/// Bias of a padded column of the logits: exp(kPaddedLogit - max) is exactly 0 in fp32 (and
/// after rounding to bf16 / f16) for any realistic row maximum, so padded columns add nothing
/// to the softmax and receive a zero gradient.
inline constexpr double kPaddedLogit = -1e4;
/// `rows` rounded up to a multiple of `multiple` (>= 1).
int64_t padded_rows(int64_t rows, int64_t multiple);
/// The embedding / LM head table rows of `config` on `backend` (see GptConfig::vocab_multiple).
int64_t gpt_vocab_rows(const GptConfig& config, const Backend& backend);
/// The LM head's logit bias of a table with `rows` rows for `vocab` tokens: 0 for columns
/// [0, vocab), kPaddedLogit for [vocab, rows).
std::vector<double> padded_logit_bias(int64_t vocab, int64_t rows);

class GptModel {
 public:
  /// Allocates parameters (initialized from `seed`), gradients, AdamW state and the
  /// activations of one micro-batch of `batch` sequences, all in `dtype` on `backend`.
  GptModel(Backend& backend, const GptConfig& config, int64_t batch, DType dtype, uint64_t seed);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptConfig& config() const;
  int64_t batch() const;
  /// Rows of "wte" / "lm_head.weight" (gpt_vocab_rows: vocab, or vocab padded on a device).
  int64_t vocab_rows() const;
  ParameterStore& parameters();
  const ParameterStore& parameters() const;

  /// Forward pass on tokens and targets, each batch * seq_len ids in [0, vocab) (row-major
  /// (batch, seq)). Returns the mean cross-entropy (synchronizes); keeps the activations.
  double forward(Stream& stream, std::span<const int32_t> tokens, std::span<const int32_t> targets);
  /// Accumulates the gradients of the last forward's mean loss into parameters().grads().
  void backward(Stream& stream);
  /// zero_grads, forward, backward, clip_and_step. Returns the loss before the update.
  double train_step(Stream& stream, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                    const AdamWConfig& adamw, double max_grad_norm);
  /// Model FLOPs of one forward + backward on one batch, for throughput counters:
  /// 6 * tokens * (matmul weights, LM head included) + 12 * layers * tokens * seq * heads *
  /// head_dim for QK^T and PV (the full T x T square, as Megatron-LM counts it; the causal
  /// kernels do about half of that work).
  double training_flops_per_step() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainplan::executor
