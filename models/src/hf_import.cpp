// Import of Hugging Face config.json files (model_type gpt2, llama, mistral, bert).
//
// Each supported model_type has one table mapping its keys to ModelSpec fields; keys not in
// the table are ignored (HF configs carry many that do not change sizes or FLOPs).
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::models {
namespace {

enum class Key { layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len, type_vocab, norm_eps, dropout_p };

struct KeyDef {
  Key key;
  std::string_view field;    // ModelSpec field, as in validate_spec's errors
  std::string_view hf_name;  // the config.json key
  bool required;
};

struct ModelType {
  std::string_view name;
  Family family;
  std::vector<KeyDef> keys;
  std::string_view required_list;  // for hints
};

const std::vector<ModelType>& model_types() {
  static const std::vector<ModelType> types = [] {
    const std::vector<KeyDef> llama_keys = {
        {Key::layers, "layers", "num_hidden_layers", true},
        {Key::hidden, "hidden", "hidden_size", true},
        {Key::heads, "heads", "num_attention_heads", true},
        {Key::kv_heads, "kv_heads", "num_key_value_heads", false},
        {Key::ffn_hidden, "ffn_hidden", "intermediate_size", true},
        {Key::vocab, "vocab", "vocab_size", true},
        {Key::seq_len, "seq_len", "max_position_embeddings", true},
        {Key::norm_eps, "norm_eps", "rms_norm_eps", false},
    };
    const std::string_view llama_list =
        "num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size, max_position_embeddings";
    return std::vector<ModelType>{
        {"gpt2",
         Family::gpt,
         {
             {Key::layers, "layers", "n_layer", true},
             {Key::hidden, "hidden", "n_embd", true},
             {Key::heads, "heads", "n_head", true},
             {Key::ffn_hidden, "ffn_hidden", "n_inner", false},
             {Key::vocab, "vocab", "vocab_size", true},
             {Key::seq_len, "seq_len", "n_positions", false},  // or n_ctx, checked below
             {Key::norm_eps, "norm_eps", "layer_norm_epsilon", false},
             {Key::dropout_p, "dropout_p", "resid_pdrop", false},
         },
         "n_layer, n_embd, n_head, vocab_size and n_positions (or n_ctx)"},
        {"llama", Family::llama, llama_keys, llama_list},
        {"mistral", Family::llama, llama_keys, llama_list},
        {"bert",
         Family::bert,
         {
             {Key::layers, "layers", "num_hidden_layers", true},
             {Key::hidden, "hidden", "hidden_size", true},
             {Key::heads, "heads", "num_attention_heads", true},
             {Key::ffn_hidden, "ffn_hidden", "intermediate_size", true},
             {Key::vocab, "vocab", "vocab_size", true},
             {Key::seq_len, "seq_len", "max_position_embeddings", true},
             {Key::type_vocab, "type_vocab", "type_vocab_size", false},
             {Key::norm_eps, "norm_eps", "layer_norm_eps", false},
             {Key::dropout_p, "dropout_p", "hidden_dropout_prob", false},
         },
         "num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size, max_position_embeddings"},
    };
  }();
  return types;
}

void set_key(ModelSpec& s, Key key, const json::Reader& v) {
  switch (key) {
    case Key::layers: s.layers = v.as_positive_int(limits::kMaxLayers); break;
    case Key::hidden: s.hidden = v.as_positive_int(limits::kMaxWidth); break;
    case Key::heads: s.heads = v.as_positive_int(limits::kMaxWidth); break;
    case Key::kv_heads: s.kv_heads = v.as_positive_int(limits::kMaxWidth); break;
    case Key::ffn_hidden: s.ffn_hidden = v.as_positive_int(limits::kMaxWidth); break;
    case Key::vocab: s.vocab = v.as_positive_int(limits::kMaxVocab); break;
    case Key::seq_len: s.seq_len = v.as_positive_int(limits::kMaxSeqLen); break;
    case Key::type_vocab: s.type_vocab = v.as_nonnegative_int(limits::kMaxVocab); break;
    case Key::norm_eps: s.norm_eps = v.as_positive(); break;
    case Key::dropout_p: {
      s.dropout_p = v.as_nonnegative();
      if (s.dropout_p >= 1) throw v.error(fmt::format("must be below 1, got {}", s.dropout_p)).hint("a probability such as 0.1");
      s.dropout = s.dropout_p > 0;
      break;
    }
  }
}

// The activation key must name what the family's graph computes.
void check_activation(const json::Reader& root, std::string_view key, const std::vector<std::string>& accepted,
                      std::string_view model_type) {
  auto v = root.optional_field(key);
  if (!v) return;
  std::string act = v->as_string();
  for (const auto& a : accepted)
    if (a == act) return;
  throw v->error(fmt::format("unsupported {} \"{}\" for model_type {}", key, act, model_type))
      .hint("trainplan models " + std::string(model_type) + " with " + join(accepted, " / "));
}

std::string name_from_path(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename() == "config.json") {
    std::string parent = p.parent_path().filename().string();
    if (!parent.empty() && parent != "." && parent != "..") return parent;
  }
  return p.stem().string();
}

}  // namespace

ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name) {
  return import_hf_config_json(doc, name, name);
}

ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name, const std::string& file) {
  json::Reader root(doc, file);
  if (!root.is_object())
    throw root.error("a Hugging Face config must be a JSON object").hint("give the model's config.json");
  if (!root.has("model_type"))
    throw root.error("missing required key \"model_type\"")
        .hint("a Hugging Face config.json names its architecture in model_type (supported: gpt2, llama, mistral, bert)");
  json::Reader type_field = root.field("model_type");
  const std::string type_name = type_field.as_string();
  const ModelType* type = nullptr;
  std::vector<std::string> supported;
  for (const auto& t : model_types()) {
    supported.emplace_back(t.name);
    if (t.name == type_name) type = &t;
  }
  if (!type)
    throw type_field.error(fmt::format("unsupported model_type \"{}\"", type_name))
        .hint(closest(type_name, supported).empty()
                  ? "supported: " + join(supported, ", ") + "; or write the model in the catalog format (models/README.md)"
                  : "did you mean \"" + closest(type_name, supported) + "\"? supported: " + join(supported, ", "));

  ModelSpec s = detail::family_defaults(type->family);
  s.name = name;
  s.display_name = fmt::format("{} (Hugging Face {} config)", name, type_name);
  s.source = "Hugging Face config.json: " + file;
  s.file = file;
  std::map<std::string, std::string, std::less<>> pointers;  // spec field -> HF key pointer
  for (const auto& k : type->keys) {
    std::string pointer = "/";
    pointer.append(k.hf_name);
    pointers[std::string(k.field)] = std::move(pointer);
    auto v = root.optional_field(k.hf_name);
    if (!v) {
      if (k.required)
        throw root.error(fmt::format("missing required key \"{}\"", k.hf_name))
            .hint(fmt::format("a {} config.json gives {}", type_name, type->required_list));
      continue;
    }
    set_key(s, k.key, *v);
  }

  if (type->family == Family::gpt) {
    if (s.seq_len == 0) {
      auto ctx = root.optional_field("n_ctx");
      if (!ctx)
        throw root.error("missing required key \"n_positions\"")
            .hint("a gpt2 config.json gives the context length in n_positions (or n_ctx)");
      s.seq_len = ctx->as_positive_int(limits::kMaxSeqLen);
      pointers["seq_len"] = "/n_ctx";
    }
    s.tied_embeddings = root.bool_or("tie_word_embeddings", true);
    check_activation(root, "activation_function", {"gelu_new", "gelu", "gelu_fast", "gelu_pytorch_tanh"}, type_name);
  } else if (type->family == Family::llama) {
    s.tied_embeddings = root.bool_or("tie_word_embeddings", false);
    s.rope_theta = root.number_or("rope_theta", 10000.0);
    pointers["rope_theta"] = "/rope_theta";
    s.bias = root.bool_or("attention_bias", false);
    if (root.has("mlp_bias") && root.field("mlp_bias").as_bool() != s.bias)
      throw root.field("mlp_bias").error("mlp_bias differs from attention_bias")
          .hint("trainplan gives all linear layers of a model the same bias setting");
    check_activation(root, "hidden_act", {"silu"}, type_name);
    if (auto hd = root.optional_field("head_dim")) {
      const int64_t head_dim = hd->as_positive_int(limits::kMaxWidth);
      if (s.heads > 0 && head_dim * s.heads != s.hidden)
        throw hd->error(fmt::format("head_dim {} differs from hidden_size / num_attention_heads = {}", head_dim,
                                    s.hidden / s.heads))
            .hint("attention with heads x head_dim != hidden_size is not supported");
    }
    // Mistral's sliding_window only limits which scores are computed at inference; FLOPs
    // are counted for full causal attention, the usual training convention.
  } else if (type->family == Family::bert) {
    check_activation(root, "hidden_act", {"gelu", "gelu_new"}, type_name);
  }
  s = detail::finalize_spec(std::move(s));
  detail::validate_spec_at(s, [&pointers](std::string_view field) {
    auto it = pointers.find(field);
    return it == pointers.end() ? std::string("/") : it->second;
  });
  return s;
}

ModelSpec import_hf_config(const std::string& path) {
  return import_hf_config_json(json::parse_file(path), name_from_path(path), path);
}

}  // namespace trainplan::models
