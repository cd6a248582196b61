// Import of Hugging Face config.json files: the dense decoders llama, mistral, qwen2, qwen3,
// gemma, gemma2, gemma3 (text), phi3, gpt_neox and gpt2, the bert encoder, and the
// mixture-of-experts decoders mixtral, qwen2_moe, qwen3_moe and deepseek_v3 (with multi-head
// latent attention).
//
// Each supported model_type has one table mapping its keys (as the transformers library's
// configuration_<type>.py names them) to ModelSpec fields, with the library's default where a
// key may be left out; then one function applies what is particular to the type (biases,
// normalization, attention pattern). Keys not read are ignored: HF configs carry many that do
// not change sizes, FLOPs or memory (token ids, initializer range, rope scaling...).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::models {
namespace {

enum class Key {
  layers, hidden, heads, kv_heads, ffn_hidden, vocab, max_positions, type_vocab, norm_eps, dropout_p, head_dim, rope_theta,
  experts, experts_per_token, expert_ffn_hidden, shared_expert_ffn_hidden,
  q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
};

struct KeyDef {
  Key key;
  std::string_view field;    // ModelSpec field, as in validate_spec's errors
  std::string_view hf_name;  // the config.json key
  bool required;
  std::optional<double> fallback = std::nullopt;  // the transformers default when the key is absent
};

struct ModelType {
  std::string_view name;
  Family family;
  std::vector<KeyDef> keys;
  bool tied_default;                          // tie_word_embeddings when absent
  std::vector<std::string_view> act_keys;     // activation keys, first present wins
  std::vector<std::string> act_names;         // accepted values
};

const std::vector<std::string> kGelus = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"};

// The shape keys every type but gpt2 names alike, then `extra`. `vocab`, `positions`:
// defaults where a config may omit them (Gemma 3).
std::vector<KeyDef> shape_keys(std::vector<KeyDef> extra, std::optional<double> vocab = std::nullopt,
                               std::optional<double> positions = std::nullopt) {
  std::vector<KeyDef> keys = {
      {Key::layers, "layers", "num_hidden_layers", true},
      {Key::hidden, "hidden", "hidden_size", true},
      {Key::heads, "heads", "num_attention_heads", true},
      {Key::ffn_hidden, "ffn_hidden", "intermediate_size", true},
      {Key::vocab, "vocab", "vocab_size", !vocab, vocab},
      {Key::max_positions, "max_positions", "max_position_embeddings", !positions, positions},
  };
  keys.insert(keys.end(), extra.begin(), extra.end());
  return keys;
}

// The keys of a Llama-style decoder config. `head_dim`: transformers' default for the type
// (0: hidden / heads).
std::vector<KeyDef> decoder_keys(double head_dim, std::optional<double> vocab = std::nullopt,
                                 std::optional<double> positions = std::nullopt) {
  return shape_keys({{Key::kv_heads, "kv_heads", "num_key_value_heads", false},
                     {Key::norm_eps, "norm_eps", "rms_norm_eps", false},
                     {Key::rope_theta, "rope_theta", "rope_theta", false},
                     {Key::head_dim, "head_dim", "head_dim", false,
                      head_dim > 0 ? std::optional<double>(head_dim) : std::nullopt}},
                    vocab, positions);
}

// The routed-expert keys: the number of experts (named `experts_key`), top-k and the expert
// width (`expert_ffn_key`, empty: intermediate_size), with the type's defaults.
std::vector<KeyDef> expert_keys(std::string_view experts_key, double experts, double top_k,
                                std::string_view expert_ffn_key = {}, double expert_ffn = 0) {
  std::vector<KeyDef> keys = {{Key::experts, "num_experts", experts_key, false, experts},
                              {Key::experts_per_token, "experts_per_token", "num_experts_per_tok", false, top_k}};
  if (!expert_ffn_key.empty()) keys.push_back({Key::expert_ffn_hidden, "expert_ffn_hidden", expert_ffn_key, false, expert_ffn});
  return keys;
}

template <typename... Lists>
std::vector<KeyDef> concat(std::vector<KeyDef> first, const Lists&... rest) {
  (first.insert(first.end(), rest.begin(), rest.end()), ...);
  return first;
}

const std::vector<ModelType>& model_types() {
  static const std::vector<ModelType> types = [] {
    const std::vector<std::string> silu = {"silu"};
    const std::vector<std::string_view> hidden_act = {"hidden_act"};
    // Gemma names the MLP activation hidden_activation (older configs: hidden_act).
    const std::vector<std::string_view> gemma_act = {"hidden_activation", "hidden_act"};
    return std::vector<ModelType>{
        {"llama", Family::llama, decoder_keys(0), false, hidden_act, silu},
        {"mistral", Family::llama, decoder_keys(0), false, hidden_act, silu},
        {"qwen2", Family::llama, decoder_keys(0), false, hidden_act, silu},
        {"qwen3", Family::llama, decoder_keys(128), false, hidden_act, silu},
        {"gemma", Family::llama, decoder_keys(256), true, gemma_act, kGelus},
        {"gemma2", Family::llama, decoder_keys(256), true, gemma_act, kGelus},
        // Gemma 3 configs leave out what equals the defaults of Gemma3TextConfig.
        {"gemma3_text", Family::llama, decoder_keys(256, 262208, 131072), true, gemma_act, kGelus},
        {"phi3", Family::llama, decoder_keys(0), false, hidden_act, silu},
        {"gpt_neox",
         Family::gpt,
         shape_keys({{Key::norm_eps, "norm_eps", "layer_norm_eps", false},
                     {Key::dropout_p, "dropout_p", "hidden_dropout", false, 0.0},
                     {Key::rope_theta, "rope_theta", "rotary_emb_base", false}}),
         false,
         hidden_act,
         kGelus},
        {"gpt2",
         Family::gpt,
         {
             {Key::layers, "layers", "n_layer", true},
             {Key::hidden, "hidden", "n_embd", true},
             {Key::heads, "heads", "n_head", true},
             {Key::ffn_hidden, "ffn_hidden", "n_inner", false},
             {Key::vocab, "vocab", "vocab_size", true},
             {Key::max_positions, "max_positions", "n_positions", false},  // or n_ctx, checked below
             {Key::norm_eps, "norm_eps", "layer_norm_epsilon", false},
             {Key::dropout_p, "dropout_p", "resid_pdrop", false},
         },
         true,
         {"activation_function"},
         kGelus},
        {"bert",
         Family::bert,
         shape_keys({{Key::type_vocab, "type_vocab", "type_vocab_size", false},
                     {Key::norm_eps, "norm_eps", "layer_norm_eps", false},
                     {Key::dropout_p, "dropout_p", "hidden_dropout_prob", false}}),
         true,
         hidden_act,
         {"gelu", "gelu_new"}},
        // Mixture of experts (defaults of MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig,
        // DeepseekV3Config).
        {"mixtral", Family::llama, concat(decoder_keys(0), expert_keys("num_local_experts", 8, 2)), false, hidden_act, silu},
        {"qwen2_moe", Family::llama,
         concat(decoder_keys(0), expert_keys("num_experts", 60, 4, "moe_intermediate_size", 1408),
                std::vector<KeyDef>{{Key::shared_expert_ffn_hidden, "shared_expert_ffn_hidden",
                                     "shared_expert_intermediate_size", false, 5632.0}}),
         false, hidden_act, silu},
        {"qwen3_moe", Family::llama, concat(decoder_keys(128), expert_keys("num_experts", 128, 8, "moe_intermediate_size", 768)),
         false, hidden_act, silu},
        {"deepseek_v3", Family::llama,
         concat(shape_keys({{Key::kv_heads, "kv_heads", "num_key_value_heads", false},
                            {Key::norm_eps, "norm_eps", "rms_norm_eps", false},
                            {Key::rope_theta, "rope_theta", "rope_theta", false}}),
                expert_keys("n_routed_experts", 256, 8, "moe_intermediate_size", 2048),
                std::vector<KeyDef>{{Key::q_lora_rank, "q_lora_rank", "q_lora_rank", false, 1536.0},
                                    {Key::kv_lora_rank, "kv_lora_rank", "kv_lora_rank", false, 512.0},
                                    {Key::qk_nope_head_dim, "qk_nope_head_dim", "qk_nope_head_dim", false, 128.0},
                                    {Key::qk_rope_head_dim, "qk_rope_head_dim", "qk_rope_head_dim", false, 64.0},
                                    {Key::v_head_dim, "v_head_dim", "v_head_dim", false, 128.0}}),
         false, hidden_act, silu},
    };
  }();
  return types;
}

std::string required_list(const ModelType& t) {
  std::vector<std::string> names;
  for (const auto& k : t.keys)
    if (k.required) names.emplace_back(k.hf_name);
  if (t.name == "gpt2") names.emplace_back("n_positions (or n_ctx)");
  return join(names, ", ");
}

// A dropout probability from the config (`v`) or a default (v == nullptr, always valid).
void set_dropout(ModelSpec& s, double p, const json::Reader* v) {
  if (v && p >= 1) throw v->error(fmt::format("must be below 1, got {}", p)).hint("a probability such as 0.1");
  s.dropout_p = p;
  s.dropout = p > 0;
}

// The expert and MLA keys: plain integer fields (zero_ok: 0 is a valid value).
struct IntField {
  Key key;
  int64_t ModelSpec::*field;
  bool zero_ok;
};
constexpr IntField kIntFields[] = {
    {Key::experts, &ModelSpec::num_experts, false},
    {Key::experts_per_token, &ModelSpec::experts_per_token, false},
    {Key::expert_ffn_hidden, &ModelSpec::expert_ffn_hidden, false},
    {Key::shared_expert_ffn_hidden, &ModelSpec::shared_expert_ffn_hidden, true},
    {Key::q_lora_rank, &ModelSpec::q_lora_rank, false},
    {Key::kv_lora_rank, &ModelSpec::kv_lora_rank, false},
    {Key::qk_nope_head_dim, &ModelSpec::qk_nope_head_dim, true},
    {Key::qk_rope_head_dim, &ModelSpec::qk_rope_head_dim, false},
    {Key::v_head_dim, &ModelSpec::v_head_dim, false},
};

const IntField* int_field(Key key) {
  for (const auto& f : kIntFields)
    if (f.key == key) return &f;
  return nullptr;
}

void set_key(ModelSpec& s, Key key, const json::Reader& v) {
  switch (key) {
    case Key::layers: s.layers = v.as_positive_int(limits::kMaxLayers); break;
    case Key::hidden: s.hidden = v.as_positive_int(limits::kMaxWidth); break;
    case Key::heads: s.heads = v.as_positive_int(limits::kMaxWidth); break;
    case Key::kv_heads: s.kv_heads = v.as_positive_int(limits::kMaxWidth); break;
    case Key::ffn_hidden: s.ffn_hidden = v.as_positive_int(limits::kMaxWidth); break;
    case Key::vocab: s.vocab = v.as_positive_int(limits::kMaxVocab); break;
    case Key::max_positions: s.max_positions = v.as_positive_int(limits::kMaxSeqLen); break;
    case Key::type_vocab: s.type_vocab = v.as_nonnegative_int(limits::kMaxVocab); break;
    case Key::norm_eps: s.norm_eps = v.as_positive(); break;
    case Key::dropout_p: set_dropout(s, v.as_nonnegative(), &v); break;
    case Key::head_dim: s.head_size = v.as_positive_int(limits::kMaxWidth); break;
    case Key::rope_theta: s.rope_theta = v.as_positive(); break;
    default: {
      const IntField* f = int_field(key);
      TP_ASSERT(f);
      s.*(f->field) = f->zero_ok ? v.as_nonnegative_int(limits::kMaxWidth) : v.as_positive_int(limits::kMaxWidth);
    }
  }
}

void set_default(ModelSpec& s, Key key, double value) {
  const auto n = static_cast<int64_t>(value);
  switch (key) {
    case Key::vocab: s.vocab = n; break;
    case Key::max_positions: s.max_positions = n; break;
    case Key::head_dim: s.head_size = n; break;
    case Key::dropout_p: set_dropout(s, value, nullptr); break;
    default: {
      const IntField* f = int_field(key);
      TP_ASSERT_MSG(f, "no default for this key");
      s.*(f->field) = n;
    }
  }
}

// The activation keys must name what the family's graph computes.
void check_activation(const json::Reader& root, const ModelType& type) {
  for (std::string_view key : type.act_keys) {
    auto v = root.optional_field(key);
    if (!v || v->is_null()) continue;
    std::string act = v->as_string();
    for (const auto& a : type.act_names)
      if (a == act) return;
    throw v->error(fmt::format("unsupported {} \"{}\" for model_type {}", key, act, type.name))
        .hint("trainplan models " + std::string(type.name) + " with " + join(type.act_names, " / "));
  }
}

// A bool key that trainplan supports only with one value.
void require_bool(const json::Reader& root, std::string_view key, bool supported, std::string_view why) {
  if (auto v = root.optional_field(key); v && !v->is_null() && v->as_bool() != supported)
    throw v->error(fmt::format("{} = {} is not supported", key, !supported)).hint(std::string(why));
}

// An optional positive number, null meaning none; `fallback` when absent.
double number_or_none(const json::Reader& root, std::string_view key, double fallback) {
  auto v = root.optional_field(key);
  if (!v) return fallback;
  if (v->is_null()) return 0;
  return v->as_positive();
}

// Which layers use the sliding window, by transformers' rule for the model type, or from
// the config's explicit layer_types list.
void apply_sliding_window(const json::Reader& root, const std::string& prefix, std::string_view type, ModelSpec& s,
                          std::map<std::string, std::string, std::less<>>& pointers) {
  const bool gemma2 = type == "gemma2", gemma3 = type == "gemma3_text";
  std::optional<json::Reader> window_key = root.optional_field("sliding_window");
  int64_t window = 0;
  if (window_key && !window_key->is_null()) window = window_key->as_positive_int(limits::kMaxSeqLen);
  else if (!window_key && (gemma2 || gemma3)) window = 4096;  // Gemma2Config / Gemma3TextConfig default
  pointers["sliding_window"] = prefix + "/sliding_window";
  pointers["local_layers"] = prefix + "/layer_types";
  const auto L = static_cast<size_t>(s.layers);
  std::vector<bool> local(L, false);
  if (auto types = root.optional_field("layer_types"); types && !types->is_null()) {
    if (types->size() != L)
      throw types->error(fmt::format("has {} entries for {} layers", types->size(), s.layers))
          .hint("one \"sliding_attention\" or \"full_attention\" per layer");
    size_t i = 0;
    for (const auto& t : types->items()) local[i++] = t.as_choice({"sliding_attention", "full_attention"}) == "sliding_attention";
  } else if (type == "mistral" || type == "phi3" || type == "mixtral") {
    std::fill(local.begin(), local.end(), window > 0);
  } else if (type == "qwen2" || type == "qwen3" || type == "qwen2_moe" || type == "qwen3_moe") {
    // Layers from max_window_layers on use the window, when use_sliding_window is set.
    if (root.bool_or("use_sliding_window", false) && window > 0) {
      const int64_t first = root.has("max_window_layers")
                                ? root.field("max_window_layers").as_nonnegative_int(limits::kMaxLayers)
                                : 28;  // Qwen2Config and Qwen3Config default
      for (size_t l = 0; l < L; ++l) local[l] = static_cast<int64_t>(l) >= first;
    }
  } else if (gemma2) {
    for (size_t l = 0; l < L; ++l) local[l] = l % 2 == 0;  // local, global, local, ...
  } else if (gemma3) {
    const int64_t pattern = root.has("sliding_window_pattern")
                                ? root.field("sliding_window_pattern").as_positive_int(limits::kMaxLayers)
                                : 6;  // five local layers, then one global
    for (size_t l = 0; l < L; ++l) local[l] = (static_cast<int64_t>(l) + 1) % pattern != 0;
  }
  if (std::count(local.begin(), local.end(), true) == 0) return;
  if (window <= 0)
    throw root.error("layers use sliding-window attention but \"sliding_window\" is missing or null")
        .hint("give the window in tokens, e.g. \"sliding_window\": 4096");
  s.sliding_window = window;
  s.local_layers = std::move(local);
}

// Which blocks of a MoE type are MoE: Qwen2/3-MoE every decoder_sparse_step-th layer not in
// mlp_only_layers; DeepSeek-V3 from first_k_dense_replace on, every moe_layer_freq-th. No MoE
// layer at all: a dense model.
void apply_moe_layers(const json::Reader& root, const std::string& prefix, std::string_view t, ModelSpec& s,
                      std::map<std::string, std::string, std::less<>>& pointers) {
  const auto L = static_cast<size_t>(s.layers);
  std::vector<bool> moe(L, true);
  if (t == "qwen2_moe" || t == "qwen3_moe") {
    const int64_t step = root.has("decoder_sparse_step") ? root.field("decoder_sparse_step").as_positive_int(limits::kMaxLayers) : 1;
    for (size_t l = 0; l < L; ++l) moe[l] = (static_cast<int64_t>(l) + 1) % step == 0;
    if (auto only = root.optional_field("mlp_only_layers"); only && !only->is_null())
      for (const auto& item : only->items()) {
        const int64_t l = item.as_nonnegative_int(limits::kMaxLayers);
        if (l >= s.layers)
          throw item.error(fmt::format("layer {} does not exist in a {}-layer model", l, s.layers))
              .hint("mlp_only_layers lists 0-based layer indices of dense MLP layers");
        moe[static_cast<size_t>(l)] = false;
      }
    pointers["moe_layers"] = prefix + "/mlp_only_layers";
  } else if (t == "deepseek_v3") {
    const int64_t first = root.has("first_k_dense_replace") ? root.field("first_k_dense_replace").as_nonnegative_int(limits::kMaxLayers) : 3;
    const int64_t freq = root.has("moe_layer_freq") ? root.field("moe_layer_freq").as_positive_int(limits::kMaxLayers) : 1;
    for (size_t l = 0; l < L; ++l) moe[l] = static_cast<int64_t>(l) >= first && static_cast<int64_t>(l) % freq == 0;
    pointers["moe_layers"] = prefix + "/first_k_dense_replace";
  }
  if (std::count(moe.begin(), moe.end(), true) == 0) {
    s.num_experts = s.experts_per_token = s.expert_ffn_hidden = s.shared_expert_ffn_hidden = 0;
    return;
  }
  if (std::count(moe.begin(), moe.end(), false) > 0) s.moe_layers = std::move(moe);
}

// DeepSeek-V3: n_shared_experts shared experts of moe_intermediate_size (one MLP of their sum);
// q_lora_rank null = queries projected directly (DeepSeek-V2-Lite); no head_dim key.
void apply_deepseek(const json::Reader& root, const std::string& prefix, ModelSpec& s,
                    std::map<std::string, std::string, std::less<>>& pointers) {
  const auto is_null = [&root](const char* key) { return root.value().contains(key) && root.value().at(key).is_null(); };
  int64_t shared = is_null("n_shared_experts") ? 0 : 1;  // DeepseekV3Config's default 1; null = none
  if (auto n = root.optional_field("n_shared_experts")) shared = n->as_nonnegative_int(limits::kMaxWidth);
  s.shared_expert_ffn_hidden = shared * s.expert_ffn_hidden;
  pointers["shared_expert_ffn_hidden"] = prefix + "/n_shared_experts";
  if (is_null("q_lora_rank")) s.q_lora_rank = 0;
  require_bool(root, "attention_bias", false, "trainplan models DeepSeek-V3's attention without biases");
}

// What is particular to each model type beyond its key table.
void apply_type(const json::Reader& root, const std::string& prefix, const ModelType& type, ModelSpec& s,
                std::map<std::string, std::string, std::less<>>& pointers) {
  const std::string_view t = type.name;
  s.tied_embeddings = root.bool_or("tie_word_embeddings", type.tied_default);
  check_activation(root, type);
  if (type.family == Family::llama) {
    if (t == "gemma" || t == "gemma2" || t == "gemma3_text") s.activation = Activation::geglu;
    // Projection biases: Qwen2 always has them on Q, K and V (not on the output); Llama,
    // Qwen3 and Gemma take attention_bias for all four; Mistral and Phi-3 have none.
    if (t == "qwen2") {
      s.qkv_bias = true;
    } else if (t == "qwen2_moe") {
      s.qkv_bias = true;
    } else if (t != "mistral" && t != "phi3" && t != "mixtral" && t != "deepseek_v3") {
      s.bias = root.bool_or("attention_bias", false);
      if (root.has("mlp_bias") && root.field("mlp_bias").as_bool() != s.bias)
        throw root.field("mlp_bias").error("mlp_bias differs from attention_bias")
            .hint("trainplan gives all linear layers of a model the same bias setting");
    }
    s.qk_norm = t == "qwen3" || t == "qwen3_moe" || t == "gemma3_text";
    s.post_norms = t == "gemma2" || t == "gemma3_text";
    if (t == "gemma2") {
      s.attn_softcap = number_or_none(root, "attn_logit_softcapping", 50.0);
      s.logit_softcap = number_or_none(root, "final_logit_softcapping", 30.0);
    } else if (t == "gemma3_text") {
      s.attn_softcap = number_or_none(root, "attn_logit_softcapping", 0);
      s.logit_softcap = number_or_none(root, "final_logit_softcapping", 0);
    }
    if (t == "phi3") s.rotary_fraction = root.number_or("partial_rotary_factor", 1.0);
    pointers["rotary_fraction"] = prefix + "/partial_rotary_factor";
    if (t == "deepseek_v3") apply_deepseek(root, prefix, s, pointers);
    else apply_sliding_window(root, prefix, t, s, pointers);
    if (s.num_experts > 0) apply_moe_layers(root, prefix, t, s, pointers);
  } else if (t == "gpt_neox") {
    s.position = PositionEmbedding::rotary;
    s.parallel_residual = root.bool_or("use_parallel_residual", true);
    s.rotary_fraction = root.has("rotary_pct") ? root.field("rotary_pct").as_positive()
                                               : root.number_or("partial_rotary_factor", 0.25);
    pointers["rotary_fraction"] = prefix + "/rotary_pct";
    require_bool(root, "attention_bias", true, "trainplan gives all linear layers of a model the same bias setting");
  } else if (t == "gpt2") {
    if (s.max_positions == 0) {
      auto ctx = root.optional_field("n_ctx");
      if (!ctx)
        throw root.error("missing required key \"n_positions\"")
            .hint("a gpt2 config.json gives the context length in n_positions (or n_ctx)");
      s.max_positions = ctx->as_positive_int(limits::kMaxSeqLen);
      pointers["max_positions"] = prefix + "/n_ctx";
    }
  }
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

std::vector<std::string> hf_model_types() {
  std::vector<std::string> out;
  for (const auto& t : model_types()) {
    out.emplace_back(t.name);
    if (t.name == "gemma3_text") out.emplace_back("gemma3");
  }
  return out;
}

ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name) {
  return import_hf_config_json(doc, name, name);
}

ModelSpec import_hf_config_json(const json::Json& doc, const std::string& name, const std::string& file) {
  const json::Reader top(doc, file);
  if (!top.is_object())
    throw top.error("a Hugging Face config must be a JSON object").hint("give the model's config.json");
  const std::vector<std::string> supported = hf_model_types();
  if (!top.has("model_type"))
    throw top.error("missing required key \"model_type\"")
        .hint("a Hugging Face config.json names its architecture in model_type (supported: " + join(supported, ", ") + ")");
  json::Reader type_field = top.field("model_type");
  std::string type_name = type_field.as_string();
  // Gemma 3 (image-text) keeps the language model's config under text_config.
  const bool nested = type_name == "gemma3";
  if (nested && !top.has("text_config"))
    throw top.error("missing required key \"text_config\"").hint("a gemma3 config.json nests the language model in text_config");
  const json::Reader root = nested ? top.field("text_config") : top;
  if (!root.is_object()) throw root.error("must be an object").hint("the gemma3 language model's config");
  const std::string prefix = nested ? "/text_config" : "";
  if (nested) type_name = "gemma3_text";
  const ModelType* type = nullptr;
  for (const auto& t : model_types())
    if (t.name == type_name) type = &t;
  if (!type) {
    const std::string near = closest(type_name, supported);
    throw type_field.error(fmt::format("unsupported model_type \"{}\"", type_name))
        .hint(near.empty() ? "supported: " + join(supported, ", ") + "; or write the model in the catalog format (models/README.md)"
                           : "did you mean \"" + near + "\"? supported: " + join(supported, ", "));
  }

  ModelSpec s = detail::family_defaults(type->family);
  s.name = name;
  s.display_name = fmt::format("{} (Hugging Face {} config)", name, top.field("model_type").as_string());
  s.source = "Hugging Face config.json: " + file;
  s.file = file;
  std::map<std::string, std::string, std::less<>> pointers;  // spec field -> HF key pointer
  for (const auto& k : type->keys) {
    pointers[std::string(k.field)] = prefix + "/" + std::string(k.hf_name);
    auto v = root.optional_field(k.hf_name);
    if (!v || (v->is_null() && !k.required)) {
      if (k.required)
        throw root.error(fmt::format("missing required key \"{}\"", k.hf_name))
            .hint(fmt::format("a {} config.json gives {}", type_name, required_list(*type)));
      if (k.fallback) set_default(s, k.key, *k.fallback);
      continue;
    }
    set_key(s, k.key, *v);
  }
  apply_type(root, prefix, *type, s, pointers);
  pointers["seq_len"] = pointers["max_positions"];
  pointers["head_dim"] = prefix + "/head_dim";
  s.max_positions_pointer = pointers["max_positions"];
  // The training sequence length is trainplan's default, never the position limit itself.
  s.seq_len = std::min(kDefaultImportSeqLen, s.max_positions);
  s.seq_len_origin = "default";
  // head_dim equal to hidden / heads is the usual case: keep it implicit.
  if (s.head_size > 0 && s.heads > 0 && s.head_size * s.heads == s.hidden) s.head_size = 0;
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
