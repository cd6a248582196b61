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
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"

namespace trainplan::models {

enum class Family { gpt, llama, bert, vit, resnet, mlp };
std::string_view family_name(Family f);

enum class Norm { layernorm, rmsnorm };
enum class Activation { gelu, swiglu, relu };
enum class PositionEmbedding { learned, rotary, none };

struct ModelSpec {
  std::string name;          // "gpt3-175b"
  std::string display_name;  // "GPT-3 175B"
  Family family = Family::gpt;
  // Transformers (gpt, llama, bert, vit):
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // = heads unless grouped-query attention
  int64_t ffn_hidden = 0;    // 4*hidden for GPT; 11008 for Llama 2 7B
  int64_t vocab = 0;
  int64_t seq_len = 0;       // tokens per sample (vit: patches + 1)
  Norm norm = Norm::layernorm;
  Activation activation = Activation::gelu;
  PositionEmbedding position = PositionEmbedding::learned;
  bool tied_embeddings = true;
  bool bias = true;          // linear layers have biases
  bool dropout = true;       // dropout layers present (adds masks to saved activations)
  int64_t type_vocab = 0;    // bert token types
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
  std::string source;        // where the hyperparameters come from
  std::string file;          // file it was read from
};

/// What an operator does. Matmul-like kinds are compute-bound, the rest memory-bound.
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

  double total_params() const;
  /// Tokens per sample (seq_len for transformers, 1 for image models and MLPs where a
  /// "token" is a sample).
  double tokens_per_sample() const;
  double flops_fwd_per_sample() const;
  /// Forward + backward FLOPs per sample, no recomputation (the "model FLOPs" of MFU).
  double training_flops_per_sample() const;
  double training_flops_per_token() const { return training_flops_per_sample() / tokens_per_sample(); }
  /// Number of repeated blocks (units minus input and output units).
  int num_blocks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Builds the graph of a spec. Throws Error (naming spec.file and the field) when the spec is
/// inconsistent (e.g. hidden not divisible by heads).
ModelGraph build_graph(const ModelSpec& spec);

/// Parses a model JSON object in the catalog format (see models/catalog/README in the
/// folder's README.md); `file` is used in errors.
ModelSpec parse_model_spec(const json::Reader& reader);

/// Imports a Hugging Face config.json (model_type gpt2, llama, mistral, bert).
ModelSpec import_hf_config(const std::string& path);
ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name);

class ModelCatalog {
 public:
  static const ModelCatalog& builtin();
  static ModelCatalog from_texts(const std::vector<std::pair<std::string, std::string>>& files);
  const ModelSpec& spec(const std::string& name) const;  // Error with suggestion if unknown
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<ModelSpec> specs_;
};

/// Resolves what a user typed: a catalog name, a path to a Hugging Face config.json, or a
/// path to a model JSON in the catalog format.
ModelSpec resolve_model(const std::string& name_or_path);

}  // namespace trainplan::models
