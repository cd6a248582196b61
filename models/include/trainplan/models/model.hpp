// File: trainplan/models/model.hpp
//
// Model descriptions and their operator graphs.
//
// A ModelSpec holds a model's hyperparameters (from the catalog JSON or a Hugging Face
// config.json). build_graph() turns it into a ModelGraph: a Boost.Graph (inside src/) of
// operators with, per op, FLOPs forward and backward, parameters, the activations kept for
// backward, bytes moved, the tensor shapes the executor needs and how tensor parallelism
// splits it. Ops are grouped into "layer units", the smallest pieces a pipeline stage can own:
// unit 0 is the input (embeddings / stem), units 1..L are the repeated blocks, the last unit is
// the output (final norm, head, loss).
//
//   const models::ModelCatalog& cat = models::ModelCatalog::builtin();
//   models::ModelGraph g = models::build_graph(cat.spec("gpt3-175b"));
//   g.total_params();                 // ~174.6e9
//   g.training_flops_per_sample();    // fwd + bwd, no recomputation
//   for (const auto& unit : g.units()) ...
//
//   models::ModelSpec s = models::import_hf_config("llama-2-7b/config.json");
//
// All per-op numbers are per sample (one sequence of seq_len tokens, or one image) at
// tensor-parallel degree 1; the plan library divides them by tp as tp_split says.
//
// Conventions (models/README.md has the full list):
//  - FLOPs: a matmul (m x k)(k x n) is 2mnk forward and 4mnk backward (input + weight
//    gradients; 2mnk when the input is the batch, which needs no gradient). Attention scores
//    QK^T and AV are 2 s^2 h each forward (full s^2 also for causal models), backward twice
//    that. Embedding lookups are 0 FLOPs. Elementwise ops count a few FLOPs per element (table
//    in the README); biases are not counted in a linear's FLOPs.
//  - Saved activations follow Korthikanti et al. 2022 (arXiv 2205.05198): a GPT layer with
//    dropout keeps sh(34 + 5as/h) bytes per sample in 16 bits, sh(10 + 24/t + 5as/(ht)) under
//    tensor parallelism t. Every saved tensor is counted once, on one op, so that each op's
//    saved set is homogeneous in (saved_tp_sharded, dropped_by_selective_recompute); see
//    Op::saved_elems for the attribution.
//  - Units: 0 = input (embeddings / patch embedding / ResNet stem / first MLP layer),
//    1..L = blocks, last = output (final norm, head, loss). An op reads only ops of its own
//    unit and the output op of the previous unit (Unit::output_op), so any contiguous range
//    of units can run as a pipeline stage that receives Unit::output_elems per sample.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"

namespace trainplan::models {

/// gpt: decoder, pre-LayerNorm, learned positions (GPT-2/3, Megatron GPT, MPT).
/// llama: decoder, pre-RMSNorm, rotary positions, SwiGLU, grouped-query attention (Llama,
/// Mistral). bert: encoder, post-LayerNorm, masked-LM head. vit: encoder, pre-LayerNorm,
/// class-token classifier. resnet: bottleneck ResNet. mlp: ReLU multilayer perceptron.
enum class Family { gpt, llama, bert, vit, resnet, mlp };
std::string_view family_name(Family f);
std::vector<std::string> family_names();

enum class Norm { layernorm, rmsnorm };
/// gelu: the exact erf form for every family (GPT-2's tanh approximation differs by < 1e-3
/// and counts the same FLOPs).
/// swiglu: silu(gate) * up, with gate and up from one fused linear (see OpKind::activation).
/// geglu: gelu(gate) * up, the same layout (Gemma's gated GELU, tanh form).
enum class Activation { gelu, swiglu, relu, geglu };
/// Whether the MLP's first linear produces [gate | up] (2 x ffn_hidden columns).
inline bool is_gated(Activation a) { return a == Activation::swiglu || a == Activation::geglu; }
/// none also covers ALiBi (a bias on the attention scores: no parameters, FLOPs not counted).
enum class PositionEmbedding { learned, rotary, none };
std::string_view norm_name(Norm n);
std::string_view activation_name(Activation a);
std::string_view position_name(PositionEmbedding p);

struct ModelSpec {
  std::string name;          // "gpt3-175b"
  std::string display_name;  // "GPT-3 175B"
  Family family = Family::gpt;
  // Transformers (gpt, llama, bert, vit):
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  // kv_heads and ffn_hidden may be left 0 in a spec built in code: build_graph derives them
  // (heads; 4*hidden unless swiglu). Parsed specs hold the derived values, so code that
  // changes heads or hidden of a parsed spec sets them back to 0 to derive them again.
  int64_t kv_heads = 0;      // = heads unless grouped-query attention
  int64_t ffn_hidden = 0;    // 4*hidden for GPT; 11008 for Llama 2 7B
  int64_t vocab = 0;
  int64_t seq_len = 0;       // tokens per sample (vit: patches + 1)
  /// The position limit (Hugging Face max_position_embeddings / n_positions), 0 = none
  /// stated. A learned position table has this many rows (seq_len when 0); seq_len may not
  /// exceed it (set_seq_len, validate_spec).
  int64_t max_positions = 0;
  /// Where max_positions was read ("/max_position_embeddings" in a config.json), for errors.
  std::string max_positions_pointer;
  /// Where seq_len came from, printed next to it: "" = the model file or catalog;
  /// "default" = trainplan's default for an imported config (kDefaultImportSeqLen, capped at
  /// max_positions); "--seq-len" / "/batch/seq_len" = set by the user (set_seq_len).
  std::string seq_len_origin;
  Norm norm = Norm::layernorm;
  Activation activation = Activation::gelu;
  PositionEmbedding position = PositionEmbedding::learned;
  bool tied_embeddings = true;
  bool bias = true;          // linear layers have biases
  bool dropout = true;       // dropout layers present (adds masks to saved activations)
  // Attention and block variants of the Hugging Face families (decoders; defaults = none):
  /// Width of one attention head when it is not hidden / heads (Gemma 256, Qwen3 128); 0 =
  /// hidden / heads. Q and the attention output are heads x head_dim wide.
  int64_t head_size = 0;
  /// Biases on the Q, K and V projections even when `bias` is false (Qwen2).
  bool qkv_bias = false;
  /// RMSNorm over each head's Q and K before rotary (Qwen3, Gemma 3): 2 x head_dim weights.
  bool qk_norm = false;
  /// Extra norms on the attention and MLP outputs before each residual add (Gemma 2 and 3).
  bool post_norms = false;
  /// x + attn(norm1(x)) + mlp(norm2(x)) instead of two sequential residuals (GPT-NeoX).
  bool parallel_residual = false;
  /// Fraction of each head's dimensions that rotary rotates (GPT-NeoX rotary_pct 0.25).
  double rotary_fraction = 1.0;
  /// Sliding-window attention: a local layer attends to the last `sliding_window` tokens, so
  /// its scores are s x min(window, s) instead of s x s. `local_layers[l]` says whether block
  /// l + 1 is local; empty = none (then sliding_window is 0).
  int64_t sliding_window = 0;
  std::vector<bool> local_layers;
  /// Soft-capping cap * tanh(x / cap) of the attention scores / final logits (Gemma 2); 0 = none.
  double attn_softcap = 0;
  double logit_softcap = 0;
  int64_t type_vocab = 0;    // bert token types
  // Mixture of experts (decoders; num_experts == 0: every block is dense). A MoE block's MLP
  // is a router (a linear h -> num_experts, softmax, top experts_per_token, weights
  // renormalised over the chosen k), num_experts routed expert MLPs of width
  // expert_ffn_hidden (the block's activation; gated when is_gated), and optionally an
  // always-on shared expert MLP of width shared_expert_ffn_hidden (DeepSeek: n_shared_experts
  // x moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size), added to the
  // routed output. Dense blocks of a MoE model (DeepSeek-V3's first three) use ffn_hidden.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;       // top-k
  int64_t expert_ffn_hidden = 0;       // one routed expert's MLP width (0: ffn_hidden)
  int64_t shared_expert_ffn_hidden = 0;  // 0 = no shared expert
  /// moe_layers[l]: block l + 1 is a MoE block; empty = every block (when num_experts > 0).
  std::vector<bool> moe_layers;
  // Multi-head latent attention (DeepSeek-V2/V3; decoders, kv_lora_rank > 0): the query is
  // projected h -> q_lora_rank -> RMSNorm -> heads x (qk_nope_head_dim + qk_rope_head_dim)
  // (q_lora_rank 0: directly h -> heads x ...); keys and values come from one latent,
  // h -> kv_lora_rank + qk_rope_head_dim, the kv_lora_rank part RMS-normed and projected to
  // heads x (qk_nope_head_dim + v_head_dim), the qk_rope_head_dim part being a rotary key
  // shared by all heads. Each head's scores use qk_nope + qk_rope dimensions, its values
  // v_head_dim; the output projection is heads x v_head_dim -> h. kv_heads = heads.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // vit:
  int64_t image_size = 0;
  int64_t patch_size = 0;
  int64_t channels = 3;
  int64_t num_classes = 0;
  // resnet: blocks per stage (ResNet-50: 3,4,6,3), width of the first stage, bottleneck.
  std::vector<int64_t> resnet_blocks;
  int64_t resnet_width = 64;
  // mlp: layer widths input -> ... -> output.
  std::vector<int64_t> mlp_widths;
  /// Published parameter count, when known (for checks).
  std::optional<double> published_params;
  /// Relative tolerance of the check against published_params: 0.005 unless the published
  /// figure is a rounded label (e.g. GPT-3 "2.7B"), explained in `notes`.
  double published_params_tolerance = 0.005;
  std::string source;        // where the hyperparameters come from
  std::string notes;         // deviations from the source, simplifications
  std::string file;          // file it was read from
  std::string pointer;       // JSON pointer of the model's object in `file` ("" = root)
  // Numerics the executor needs (no effect on FLOPs or sizes):
  double norm_eps = 1e-5;    // layernorm / rmsnorm epsilon
  double rope_theta = 10000; // rotary base (Llama 2: 1e4, Llama 3: 5e5)
  double dropout_p = 0.1;    // probability of every dropout layer when `dropout`

  /// head_size when given, else hidden / heads for transformers, 0 otherwise.
  int64_t head_dim() const { return head_size > 0 ? head_size : heads > 0 ? hidden / heads : 0; }
  /// Number of blocks with sliding-window attention.
  int64_t num_local_layers() const;
  bool is_transformer() const {
    return family == Family::gpt || family == Family::llama || family == Family::bert ||
           family == Family::vit;
  }
  /// Decoders (gpt, llama) use causal attention and next-token loss.
  bool is_decoder() const { return family == Family::gpt || family == Family::llama; }
  bool is_moe() const { return num_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  /// Whether block `block` (1-based) is a MoE block.
  bool is_moe_block(int64_t block) const {
    return num_experts > 0 && (moe_layers.empty() || moe_layers.at(static_cast<size_t>(block - 1)));
  }
};

/// What an operator does. Matmul-like kinds are compute-bound, the rest memory-bound.
/// What exactly each kind computes, with the Op fields it uses ("x" = inputs[0]):
///  embedding   out[i] = W[ids[i]], W = weight_shape {rows, h}; ids from batch_input
///              (tokens, positions 0..s-1, or token_types). No FLOPs.
///  patch_embed pixels {C, H, W} cut into non-overlapping patch_size^2 patches, each
///              flattened (c, py, px) and projected: {N, C P P} x {C P P, h} + bias, then a
///              learned class token (h parameters) is prepended as row 0: out {N + 1, h}.
///  layernorm   (x - mean) / sqrt(var + norm_eps) * gamma + beta over the last dim
///              (has_bias: beta present); rmsnorm: x / sqrt(mean(x^2) + norm_eps) * gamma.
///              A norm whose input is wider than its output (MLA's kv_norm on the {s,
///              kv_lora_rank + rope} latent) normalises the first out_shape[1] columns.
///  linear      y = x W (+ b): x {m, k}, W {k, n}, b {n}. With tied_weight_op >= 0 the
///              weight is the transpose of that op's {n, k} weight (tied LM head).
///  attention   x = fused QKV {s, (heads + 2 kv_heads) head_dim}, columns [Q | K | V], head
///              i's Q at columns [i d, (i+1) d), kv head j's K at heads*d + j*d; query head i
///              uses kv head i / (heads / kv_heads). Rotary (when `rotary`) on Q and K in
///              the half-split form (dims j and j + d/2 of a head rotate together by
///              position * rope_theta^(-2j/d), as in GPT-NeoX and Hugging Face Llama);
///              softmax(Q K^T / sqrt(d)) with a causal mask when `causal`, dropout_p on the
///              probabilities, times V: out {s, heads d}, heads concatenated. Variants
///              (counted in FLOPs, not run by the executor yet): rotary_dims < head_dim,
///              window > 0 (query i sees keys i - window + 1 .. i), qk_norm, softcap, and
///              multi-head latent attention (v_head_dim > 0, ModelSpec::is_mla): inputs
///              [q {s, heads head_dim}, kv {s, heads (head_dim - rotary_dims + v_head_dim)},
///              latent {s, kv_lora_rank + rotary_dims}]; head i's query is q's columns
///              [i head_dim, (i+1) head_dim) = [nope | rope], its key [kv's nope columns of
///              head i | the latent's last rotary_dims columns (shared by all heads)], both
///              rotated on the rope part; its value kv's v_head_dim columns after them;
///              out {s, heads v_head_dim}.
///  activation  gelu / relu elementwise; swiglu: x {s, 2f} = [gate | up], out silu(gate)*up;
///              geglu: the same with gelu (not run by the executor yet).
///  residual    inputs[0] + inputs[1].
///  dropout     zero with probability dropout_p, scale the rest by 1 / (1 - p).
///  conv2d      x {Cin, H, W}, W {Cout, Cin, kernel, kernel}, stride, padding (+ bias).
///  batchnorm   per channel over the batch and H, W; gamma and beta (running statistics are
///              buffers, not parameters).
///  pool        pool_mode: max / avg over kernel x kernel windows with stride and padding;
///              global_avg over H, W ({C, H, W} -> {1, C}); first_token ({s, h} -> {1, h}):
///              the {1, n} outputs feed a linear with m = 1.
///  loss        cross-entropy of logits x {rows, classes} against batch labels (decoders:
///              the next token; bert: the token itself, masked-LM over every position),
///              mean over rows: out {1}.
///  router      x {s, h}, W {h, E} (weight_shape, no bias): p = softmax(x W) over the E =
///              num_experts experts; each row keeps its top_k experts (ties: lower index) and
///              their weights p / sum of the kept p. out {s, top_k} (the weights; the chosen
///              indices travel with them). FLOPs 2 s h E forward.
///  moe_dispatch inputs [x {s, h}, router]: out {s top_k, h}, row j k + i = x[j] for the
///              token's i-th chosen expert, rows grouped by expert in expert order (stable).
///              Under expert parallelism (ep) the rows of experts held by other ranks are
///              sent to them by an all-to-all; no FLOPs.
///  expert linear / activation  (Op::expert) as linear / activation, row-wise per expert:
///              rows of expert e use weight e of W {E, in, out} (+ b {E, out}); m = s top_k
///              (every routed copy, balanced routing).
///  moe_combine inputs [expert output {s top_k, h}, router]: out[j] = sum_i w[j, i] *
///              y[row of (j, i)] (the all-to-all back under ep), out {s, h}.
enum class OpKind {
  embedding,       // token (+ position, + type) lookup
  patch_embed,     // vit patch projection (a matmul)
  layernorm,
  rmsnorm,
  linear,          // y = x W (+ b)
  attention,       // softmax(Q K^T / sqrt(d)) V, all heads, causal for decoders
  activation,      // gelu / swiglu / relu
  residual,        // residual add
  dropout,
  conv2d,
  batchnorm,
  pool,
  loss,            // cross-entropy (over vocab / classes)
  router,          // MoE gate: logits x W {h, E}, softmax, top-k, renormalised weights
  moe_dispatch,    // MoE: token copies grouped by expert (the all-to-all under ep)
  moe_combine,     // MoE: weighted sum of each token's k expert outputs (all-to-all back)
};
std::string_view op_kind_name(OpKind k);

/// How tensor parallelism (degree t) splits an op (Megatron-LM style).
enum class TpSplit {
  replicated,  // every tp rank computes it whole (norms, residuals, dropout on h)
  column,      // linear: weight split by output columns (QKV, MLP up/gate)
  row,         // linear: weight split by input rows; output needs an all-reduce
  heads,       // attention: heads split across ranks
  vocab,       // embedding / LM head / loss: vocabulary split
  none,        // not tp-parallelizable (conv nets, mlp): replicated compute
};
std::string_view tp_split_name(TpSplit s);

/// A tensor an op reads from the training batch rather than from another op.
enum class BatchInput {
  none,
  tokens,       // int token ids {s}
  positions,    // 0, 1, ..., rows-1 (learned position embeddings; no data needed)
  token_types,  // int segment ids {s} (bert)
  pixels,       // image {channels, image_size, image_size}
  features,     // mlp input vector {mlp_widths[0]}
  labels,       // loss targets: next tokens {s} (decoders), tokens {s} (bert), class {1}
};
std::string_view batch_input_name(BatchInput b);

enum class PoolMode { max, avg, global_avg, first_token };
std::string_view pool_mode_name(PoolMode p);

struct Op {
  int id = 0;
  std::string name;        // "block3.attn.qkv"
  OpKind kind = OpKind::linear;
  TpSplit tp_split = TpSplit::replicated;
  int unit = 0;            // layer unit index
  // Per sample, tp = 1:
  double flops_fwd = 0;
  double flops_bwd = 0;    // input + weight gradients
  double params = 0;       // parameter count owned by this op (0 if tied to another op)
  /// Elements saved for backward, in the training precision (16-bit under mixed precision).
  /// Each saved tensor is counted once, on one op, chosen so that an op's saved set is
  /// homogeneous in the two flags below. Usually an op counts the inputs its backward needs;
  /// the exceptions (Korthikanti et al. 2022 accounting):
  ///  - the attention op counts only its internals (softmax output, dropout output); its
  ///    inputs Q, K, V are counted on the attention output projection (attn.proj), next to
  ///    the projection's own input: both are divided by t under tensor parallelism and kept
  ///    by selective recomputation;
  ///  - the loss counts the softmax of the logits (rows x classes);
  ///  - conv nets: a ReLU counts 0 because the next conv (or pool) counts the same tensor,
  ///    and a downsample conv counts 0 because conv1 of its block counts the same input.
  /// Token ids, labels and positions are not counted.
  double saved_elems = 0;
  /// Bytes of 1-byte masks saved for backward (dropout masks).
  double saved_mask_bytes = 0;
  /// Whether the saved activations are divided by t under tensor parallelism alone
  /// (true for attention internals and the inputs of row-parallel linears). Under sequence
  /// parallelism every saved activation is divided by t.
  bool saved_tp_sharded = false;
  /// Whether selective recomputation drops these saved activations (attention scores,
  /// softmax, attention dropout: the 5as/h term of Korthikanti et al. 2022).
  bool dropped_by_selective_recompute = false;
  /// Elements read + written in forward (for the memory-bound roofline), and in backward.
  double mem_elems_fwd = 0;
  double mem_elems_bwd = 0;
  /// Matmul dimensions per sample (linear: m = tokens, k = in, n = out); 0 otherwise.
  int64_t m = 0, n = 0, k = 0;
  /// Output activation shape per sample (e.g. {seq, hidden}).
  std::vector<int64_t> out_shape;
  /// Weight shape (e.g. {in, out}); empty when the op has no weights.
  std::vector<int64_t> weight_shape;

  // ---- What the executor needs to run the op (OpKind documents each kind) ----------------
  /// Producer op ids, in argument order. Empty when the op reads only the batch.
  std::vector<int> inputs;
  /// A batch tensor read in addition to `inputs` (ids for embeddings, labels for the loss).
  BatchInput batch_input = BatchInput::none;
  /// linear / conv2d / patch_embed: a bias {n} / {Cout} / {h}; layernorm / batchnorm: beta.
  bool has_bias = false;
  /// Op whose weight this op uses, or -1. The LM head of a tied model points at the token
  /// embedding (unit 0) and owns no weight (params == 0, or V for BERT's decoder bias); its
  /// weight is the transpose of the embedding's {V, h} table. The executor keeps one tensor when both ops are on one
  /// rank, adding both gradients; when unit 0 and the last unit are on different pipeline
  /// stages, both stages hold a copy initialised alike and all-reduce (sum) the two
  /// gradients between the first and last stage before the optimizer step (Megatron's
  /// embedding group), so the copies stay equal.
  int tied_weight_op = -1;
  /// attention: heads, kv heads (grouped-query when < heads), head size; causal mask;
  /// rotary embedding of Q and K with base rope_theta.
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  bool rotary = false;
  double rope_theta = 0;
  /// attention: dimensions of each head that rotary rotates (the first rotary_dims of the
  /// half-split form; head_dim unless partial rotary). 0 when not rotary.
  int64_t rotary_dims = 0;
  /// attention: multi-head latent attention when > 0 (the value head size; head_dim is then
  /// the query/key head size, nope + rope, and rotary_dims the rope part; see OpKind).
  int64_t v_head_dim = 0;
  /// attention: each query sees only the last `window` keys (sliding window); 0 = all.
  int64_t window = 0;
  /// attention: RMSNorm over each head's Q and K (weights {head_dim} each, counted in params).
  bool qk_norm = false;
  /// attention: scores soft-capped as cap * tanh(x / cap); loss: the logits. 0 = none.
  double softcap = 0;
  /// dropout, and attention-probability dropout inside attention (0 = none).
  double dropout_p = 0;
  /// layernorm / rmsnorm / batchnorm epsilon.
  double norm_eps = 0;
  /// activation op: which function.
  Activation activation = Activation::gelu;
  /// conv2d / pool window (square), stride, zero padding; patch_embed: kernel = stride =
  /// patch size.
  int64_t kernel = 0, stride = 1, padding = 0;
  PoolMode pool_mode = PoolMode::max;
  /// MoE: the op is part of the routed experts (linear / activation between moe_dispatch and
  /// moe_combine): its weights {num_experts, in, out} are sharded over the expert-parallel
  /// group (each of ep ranks holds num_experts / ep experts) and their gradients are reduced
  /// over the dp * cp / ep ranks holding the same experts; its rows are the s * top_k routed
  /// token copies. Shared experts and the router are ordinary (non-expert) ops.
  bool expert = false;
  /// router, moe_dispatch, moe_combine and expert ops: routed experts E and top-k.
  int64_t num_experts = 0, top_k = 0;

  /// saved_elems in `p`'s element size plus the mask bytes: bytes kept for backward per sample.
  double saved_bytes(Precision p) const { return saved_elems * bytes_per_element(p) + saved_mask_bytes; }
  bool is_matmul() const {
    return kind == OpKind::linear || kind == OpKind::patch_embed || kind == OpKind::conv2d;
  }
};

/// A layer unit: the ops of one pipeline-assignable piece of the model.
struct Unit {
  int index = 0;
  std::string name;        // "embedding", "block7", "head"
  std::vector<int> ops;    // op ids in execution order
  double params = 0;
  double flops_fwd = 0;    // per sample
  double flops_bwd = 0;
  /// Elements of the activation this unit sends to the next (per sample): the pipeline
  /// send size.
  double output_elems = 0;
  /// The op whose output is sent to the next unit (the last op of the unit).
  int output_op = -1;
  /// Sums over the unit's ops (per sample, tp = 1).
  double saved_elems = 0;
  double saved_mask_bytes = 0;
  double saved_bytes(Precision p) const { return saved_elems * bytes_per_element(p) + saved_mask_bytes; }
};

class ModelGraph {
 public:
  ModelGraph(ModelSpec spec, std::vector<Op> ops, std::vector<Unit> units,
             std::vector<std::pair<int, int>> edges);
  ModelGraph(ModelGraph&&) noexcept;
  ModelGraph& operator=(ModelGraph&&) noexcept;
  ModelGraph(const ModelGraph&);
  ~ModelGraph();

  const ModelSpec& spec() const;
  const std::vector<Op>& ops() const;
  const std::vector<Unit>& units() const;
  /// Data-dependency edges (producer op id, consumer op id).
  const std::vector<std::pair<int, int>>& edges() const;
  /// Ops in a topological order of the graph (Boost.Graph topological_sort).
  std::vector<int> topological_order() const;
  const Op& op(int id) const;
  const Unit& unit(int index) const;
  /// Ops reading `id`'s output (graph out-edges), ascending; the executor frees an
  /// activation after its last consumer.
  std::vector<int> consumers(int id) const;
  /// The first op with this name; Error if none.
  const Op& op_named(const std::string& name) const;

  double total_params() const;
  /// Parameters one token uses: total_params with each routed-expert op (Op::expert) counted
  /// at top_k / num_experts of its weights (a MoE's "active parameters"; Mixtral 8x7B: 12.9B
  /// of 46.7B). Equals total_params for dense models.
  double active_params() const;
  /// Tokens per sample (seq_len for transformers, 1 for image models and MLPs where a
  /// "token" is a sample).
  double tokens_per_sample() const;
  double flops_fwd_per_sample() const;
  /// Forward + backward FLOPs per sample, no recomputation (the "model FLOPs" of MFU).
  double training_flops_per_sample() const;
  double training_flops_per_token() const { return training_flops_per_sample() / tokens_per_sample(); }
  /// Number of repeated blocks (units minus input and output units).
  int num_blocks() const;
  /// Activation bytes kept for backward per sample (no recomputation, tp = 1).
  double saved_bytes_per_sample(Precision p) const;

 private:
  struct Impl;
  // Immutable once built: copies share it (and may be read from any thread).
  std::shared_ptr<const Impl> impl_;
};

/// Builds the graph of a spec. Throws Error (naming spec.file and the field) when the spec is
/// inconsistent (e.g. hidden not divisible by heads).
ModelGraph build_graph(const ModelSpec& spec);

/// Checks a spec's quantities and consistency (what build_graph checks first): positive
/// sizes, hidden divisible by heads, heads by kv_heads, image by patch size... Errors name
/// spec.file and spec.pointer + "/<field>".
void validate_spec(const ModelSpec& spec);

/// Parses a model JSON object in the catalog format (models/README.md); the reader's file
/// and pointer are used in errors and kept in spec.file / spec.pointer. Unknown fields are
/// errors.
ModelSpec parse_model_spec(const json::Reader& reader);
/// Same, starting from `defaults` (the file's "defaults" object, at "/defaults" of the same
/// file: errors in it point there) for the fields the object does not give.
ModelSpec parse_model_spec(const json::Reader& reader, const json::Json& defaults);

/// Parses one catalog file's text (an object {"description", "defaults", "models": [...]}, an
/// array of model objects, or one model object); `file` names it in errors.
std::vector<ModelSpec> parse_model_file(std::string_view text, const std::string& file);

/// The training sequence length of an imported Hugging Face config when the user gives no
/// --seq-len: 4096 tokens, or the config's position limit when that is smaller. A config's
/// max_position_embeddings is the longest context the model supports, not what it is trained
/// on; it is never taken as the sequence length.
inline constexpr int64_t kDefaultImportSeqLen = 4096;

/// Imports a Hugging Face config.json: model_type llama, mistral, qwen2, qwen3, gemma,
/// gemma2, gemma3 / gemma3_text (the text model, from text_config), phi3, gpt_neox, gpt2,
/// bert, and the mixture-of-experts types mixtral, qwen2_moe, qwen3_moe, deepseek_v3
/// (hf_model_types()). The model is named after the config's folder
/// ("llama-2-7b/config.json" -> "llama-2-7b"), or the file name without ".json". seq_len is
/// kDefaultImportSeqLen capped at the position limit (seq_len_origin "default"); use
/// set_seq_len for another. Unknown keys are ignored (HF configs carry many); missing
/// required keys, unsupported model_type or activation, and inconsistent shapes are Errors
/// naming the file and JSON pointer. models/README.md lists the keys read per model type.
ModelSpec import_hf_config(const std::string& path);
/// `name` is the model name; `file` (default: name) is used in errors.
ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name);
ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name, const std::string& file);
/// The model_type values import_hf_config accepts.
std::vector<std::string> hf_model_types();

/// Sets the training sequence length to `seq_len`, given by the user as `origin` ("--seq-len"
/// or a plan file's "/batch/seq_len"). Error when it exceeds spec.max_positions, naming the
/// model's file and the position limit's pointer, and the largest allowed value.
void set_seq_len(ModelSpec& spec, int64_t seq_len, const std::string& origin);
/// Where seq_len came from and the position limit: "default --seq-len 4096; position limit
/// 131072", "from --seq-len", or "" for a catalog model's own length.
std::string seq_len_note(const ModelSpec& spec);
/// seq_len with its note in parentheses ("4096 (default --seq-len 4096; position limit
/// 131072)"), as `trainplan model` prints it.
std::string describe_seq_len(const ModelSpec& spec);

class ModelCatalog {
 public:
  /// The catalog compiled into the binary (models/catalog/*.json).
  static const ModelCatalog& builtin();
  /// A catalog from (file name, text) pairs. Errors: bad JSON or fields (with file and
  /// pointer), a name defined twice.
  static ModelCatalog from_texts(const std::vector<std::pair<std::string, std::string>>& files);
  const ModelSpec& spec(const std::string& name) const;  // Error with suggestion if unknown
  bool has(const std::string& name) const;
  /// Names in catalog order (files alphabetically, entries in file order).
  std::vector<std::string> names() const;
  const std::vector<ModelSpec>& specs() const { return specs_; }

 private:
  std::vector<ModelSpec> specs_;
};

/// Resolves what a user typed: a catalog name, a path to a Hugging Face config.json, or a
/// path to a model JSON in the catalog format.
ModelSpec resolve_model(const std::string& name_or_path);

/// Training FLOPs per token by the usual decoder estimate 6N + 12 L s h, with the token
/// embedding counted once (untied models: the head does the matmul, the input table is a
/// lookup) and N the active parameters (a MoE token passes through top_k of the experts).
double six_n_estimate_per_token(const ModelGraph& graph);

/// Throws Error (naming `--unit`, with the valid range) unless 0 <= unit < units().size().
void check_unit_index(const ModelGraph& graph, int unit);

/// A model as `trainplan model NAME --json` writes it: name, family, source, shape, params
/// (and published_params), FLOPs per sample and per token, saved activation bytes, one entry
/// per layer unit; with `ops_unit`, every op of that unit ("ops"). Throws Error (naming
/// `--unit`) for a unit out of range.
json::Json model_json(const ModelGraph& graph, std::optional<int> ops_unit = std::nullopt);

/// The catalog as `trainplan model --json` lists it: one {name, display_name, family, params,
/// source, file} per model.
json::Json catalog_json(const ModelCatalog& catalog);

}  // namespace trainplan::models
