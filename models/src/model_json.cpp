// Machine-readable models (what `trainplan model --json` writes and the Python module returns).
#include <fmt/format.h>

#include "trainplan/models/model.hpp"

namespace trainplan::models {
namespace {

json::Json op_json(const Op& op) {
  json::Json j;
  j["id"] = op.id;
  j["name"] = op.name;
  j["kind"] = std::string(op_kind_name(op.kind));
  j["tp_split"] = std::string(tp_split_name(op.tp_split));
  j["inputs"] = op.inputs;
  j["batch_input"] = std::string(batch_input_name(op.batch_input));
  j["out_shape"] = op.out_shape;
  j["weight_shape"] = op.weight_shape;
  j["params"] = op.params;
  j["flops_fwd"] = op.flops_fwd;
  j["flops_bwd"] = op.flops_bwd;
  j["saved_elems"] = op.saved_elems;
  j["saved_mask_bytes"] = op.saved_mask_bytes;
  j["saved_tp_sharded"] = op.saved_tp_sharded;
  j["dropped_by_selective_recompute"] = op.dropped_by_selective_recompute;
  j["mem_elems_fwd"] = op.mem_elems_fwd;
  j["mem_elems_bwd"] = op.mem_elems_bwd;
  if (op.is_matmul()) j["mnk"] = {op.m, op.n, op.k};
  if (op.tied_weight_op >= 0) j["tied_weight_op"] = op.tied_weight_op;
  if (op.rotary_dims > 0 && op.rotary_dims != op.head_dim) j["rotary_dims"] = op.rotary_dims;
  if (op.window > 0) j["window"] = op.window;
  if (op.qk_norm) j["qk_norm"] = true;
  if (op.softcap > 0) j["softcap"] = op.softcap;
  if (op.expert) j["expert"] = true;
  if (op.num_experts > 0) {
    j["num_experts"] = op.num_experts;
    j["top_k"] = op.top_k;
  }
  return j;
}

}  // namespace

double six_n_estimate_per_token(const ModelGraph& g) {
  const ModelSpec& s = g.spec();
  double n = g.active_params();
  if (!s.tied_embeddings) n -= static_cast<double>(s.vocab) * static_cast<double>(s.hidden);
  return 6 * n + 12 * static_cast<double>(s.layers) * static_cast<double>(s.seq_len) * static_cast<double>(s.hidden);
}

void check_unit_index(const ModelGraph& g, int unit) {
  if (unit < 0 || unit >= static_cast<int>(g.units().size()))
    throw Error(fmt::format("--unit {} is out of range", unit))
        .hint(fmt::format("{} has units 0..{} (0 = input, {} = output)", g.spec().name, g.units().size() - 1,
                          g.units().size() - 1));
}

json::Json model_json(const ModelGraph& g, std::optional<int> ops_unit) {
  const ModelSpec& s = g.spec();
  json::Json j;
  j["name"] = s.name;
  j["display_name"] = s.display_name;
  j["family"] = std::string(family_name(s.family));
  j["source"] = s.source;
  if (!s.notes.empty()) j["notes"] = s.notes;
  json::Json shape;
  if (s.is_transformer()) {
    shape["layers"] = s.layers;
    shape["hidden"] = s.hidden;
    shape["heads"] = s.heads;
    shape["kv_heads"] = s.kv_heads;
    shape["ffn_hidden"] = s.ffn_hidden;
    shape["seq_len"] = s.seq_len;
    if (s.vocab) shape["vocab"] = s.vocab;
    shape["norm"] = std::string(norm_name(s.norm));
    shape["activation"] = std::string(activation_name(s.activation));
    shape["position"] = std::string(position_name(s.position));
    shape["tied_embeddings"] = s.tied_embeddings;
    // Variants of imported Hugging Face models, written only when present.
    if (s.max_positions > 0) shape["max_positions"] = s.max_positions;
    if (!s.seq_len_origin.empty()) shape["seq_len_origin"] = s.seq_len_origin;
    if (s.head_size > 0) shape["head_dim"] = s.head_size;
    if (s.qkv_bias) shape["qkv_bias"] = true;
    if (s.qk_norm) shape["qk_norm"] = true;
    if (s.post_norms) shape["post_norms"] = true;
    if (s.parallel_residual) shape["parallel_residual"] = true;
    if (s.rotary_fraction < 1) shape["rotary_fraction"] = s.rotary_fraction;
    if (s.sliding_window > 0) {
      shape["sliding_window"] = s.sliding_window;
      shape["local_layers"] = s.local_layers;
    }
    if (s.attn_softcap > 0) shape["attn_softcap"] = s.attn_softcap;
    if (s.logit_softcap > 0) shape["logit_softcap"] = s.logit_softcap;
    if (s.is_moe()) {
      shape["num_experts"] = s.num_experts;
      shape["experts_per_token"] = s.experts_per_token;
      if (s.expert_ffn_hidden > 0) shape["expert_ffn_hidden"] = s.expert_ffn_hidden;
      if (s.shared_expert_ffn_hidden > 0) shape["shared_expert_ffn_hidden"] = s.shared_expert_ffn_hidden;
      if (!s.moe_layers.empty()) shape["moe_layers"] = s.moe_layers;
    }
  }
  if (s.family == Family::resnet) shape["resnet_blocks"] = s.resnet_blocks;
  if (s.family == Family::mlp) shape["mlp_widths"] = s.mlp_widths;
  j["shape"] = shape;
  j["params"] = g.total_params();
  if (s.is_moe()) j["active_params"] = g.active_params();
  if (s.published_params) j["published_params"] = *s.published_params;
  j["tokens_per_sample"] = g.tokens_per_sample();
  j["flops_fwd_per_sample"] = g.flops_fwd_per_sample();
  j["training_flops_per_sample"] = g.training_flops_per_sample();
  j["training_flops_per_token"] = g.training_flops_per_token();
  if (s.is_decoder()) j["six_n_plus_12lsh_flops_per_token"] = six_n_estimate_per_token(g);
  j["saved_bytes_per_sample_16bit"] = g.saved_bytes_per_sample(Precision::bf16);
  json::Json units = json::Json::array();
  for (const auto& u : g.units()) {
    json::Json ju;
    ju["index"] = u.index;
    ju["name"] = u.name;
    ju["ops"] = u.ops.size();
    ju["params"] = u.params;
    ju["flops_fwd"] = u.flops_fwd;
    ju["flops_bwd"] = u.flops_bwd;
    ju["saved_bytes_16bit"] = u.saved_bytes(Precision::bf16);
    ju["output_elems"] = u.output_elems;
    units.push_back(ju);
  }
  j["units"] = units;
  if (ops_unit) {
    check_unit_index(g, *ops_unit);
    json::Json ops = json::Json::array();
    for (int id : g.unit(*ops_unit).ops) ops.push_back(op_json(g.op(id)));
    j["ops"] = ops;
  }
  return j;
}

json::Json catalog_json(const ModelCatalog& cat) {
  json::Json list = json::Json::array();
  for (const auto& s : cat.specs()) {
    json::Json e;
    e["name"] = s.name;
    e["display_name"] = s.display_name;
    e["family"] = std::string(family_name(s.family));
    e["params"] = build_graph(s).total_params();
    e["source"] = s.source;
    e["file"] = s.file;
    list.push_back(e);
  }
  return list;
}

}  // namespace trainplan::models
