// ModelSpec: family defaults, the catalog JSON format (one table of fields), validation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::models {
namespace detail {

ModelSpec family_defaults(Family family) {
  ModelSpec s;
  s.family = family;
  switch (family) {
    case Family::gpt:
      break;  // the struct's defaults: layernorm, gelu, learned, tied, bias, dropout
    case Family::llama:
      s.norm = Norm::rmsnorm;
      s.activation = Activation::swiglu;
      s.position = PositionEmbedding::rotary;
      s.tied_embeddings = false;
      s.bias = false;
      s.dropout = false;
      break;
    case Family::bert:
      s.type_vocab = 2;
      s.norm_eps = 1e-12;
      break;
    case Family::vit:
      s.tied_embeddings = false;
      s.dropout = false;
      s.norm_eps = 1e-6;
      break;
    case Family::resnet:
      s.activation = Activation::relu;
      s.position = PositionEmbedding::none;
      s.tied_embeddings = false;
      s.bias = false;
      s.dropout = false;
      s.image_size = 224;
      s.num_classes = 1000;
      break;
    case Family::mlp:
      s.activation = Activation::relu;
      s.position = PositionEmbedding::none;
      s.tied_embeddings = false;
      s.dropout = false;
      break;
  }
  return s;
}

FieldPointer catalog_field_pointer(const ModelSpec& spec) {
  std::string base = spec.pointer;
  return [base](std::string_view field) { return base + "/" + std::string(field); };
}

ModelSpec finalize_spec(ModelSpec s) {
  if (s.display_name.empty()) s.display_name = s.name;
  if (s.is_transformer()) {
    if (s.kv_heads == 0) s.kv_heads = s.heads;
    if (s.ffn_hidden == 0 && !is_gated(s.activation)) s.ffn_hidden = 4 * s.hidden;
  }
  if (s.family == Family::vit && s.seq_len == 0 && s.patch_size > 0) {
    int64_t side = s.image_size / s.patch_size;
    s.seq_len = side * side + 1;
  }
  return s;
}

namespace {

std::string family_list(Family f) {
  switch (f) {
    case Family::gpt:
    case Family::bert: return "layers, hidden, heads, vocab and seq_len";
    case Family::llama: return "layers, hidden, heads, ffn_hidden, vocab and seq_len";
    case Family::vit: return "layers, hidden, heads, image_size, patch_size and num_classes";
    case Family::resnet: return "resnet_blocks";
    case Family::mlp: return "mlp_widths";
  }
  return "";
}

// Errors of validate_spec_at: the file, the field's pointer, the message and a hint.
struct Checker {
  const ModelSpec& spec;
  const FieldPointer& pointer_of;

  [[noreturn]] void fail(std::string_view field, const std::string& message, const std::string& hint) const {
    throw Error(message).at(spec.file, pointer_of(field)).hint(hint);
  }
  void positive(std::string_view field, int64_t value) const {
    if (value < 1)
      fail(field, fmt::format("{} must be a positive integer, got {}", field, value),
           fmt::format("a {} model needs {}", family_name(spec.family), family_list(spec.family)));
  }
};

// Mixture-of-experts fields: experts only in decoders, 1 <= top-k <= experts, one moe_layers
// entry per layer, expert widths only with experts.
void validate_moe(const Checker& c) {
  const ModelSpec& s = c.spec;
  if (s.num_experts < 0) c.positive("num_experts", s.num_experts);
  if (s.expert_ffn_hidden < 0) c.positive("expert_ffn_hidden", s.expert_ffn_hidden);
  if (s.shared_expert_ffn_hidden < 0) c.positive("shared_expert_ffn_hidden", s.shared_expert_ffn_hidden);
  if (s.num_experts == 0) {
    if (s.experts_per_token != 0 || s.expert_ffn_hidden != 0 || s.shared_expert_ffn_hidden != 0 || !s.moe_layers.empty())
      c.fail("num_experts", "experts_per_token, expert_ffn_hidden, shared_expert_ffn_hidden and moe_layers need num_experts",
             "give \"num_experts\" (e.g. 8 for Mixtral), or remove the expert fields for a dense model");
    return;
  }
  if (!s.is_decoder())
    c.fail("num_experts", fmt::format("mixture of experts needs a decoder (gpt or llama), not {}", family_name(s.family)),
           "remove the expert fields, or use family \"llama\" or \"gpt\"");
  if (s.experts_per_token < 1 || s.experts_per_token > s.num_experts)
    c.fail("experts_per_token",
           fmt::format("experts_per_token must be between 1 and num_experts {}, got {}", s.num_experts, s.experts_per_token),
           "the top-k experts each token is routed to, e.g. 2 for Mixtral, 8 for DeepSeek-V3");
  if (!s.moe_layers.empty() && static_cast<int64_t>(s.moe_layers.size()) != s.layers)
    c.fail("moe_layers", fmt::format("moe_layers has {} entries for {} layers", s.moe_layers.size(), s.layers),
           "one true/false per layer: whether its MLP is a mixture of experts (or use first_dense_layers)");
  if (!s.moe_layers.empty() && std::find(s.moe_layers.begin(), s.moe_layers.end(), true) == s.moe_layers.end())
    c.fail("moe_layers", "moe_layers marks no layer as a mixture of experts",
           "mark at least one layer true, or remove num_experts for a dense model");
}

// The divisors of n closest to `near` (for hints such as "use 16 or 24 heads").
std::string nearby_divisors(int64_t n, int64_t near) {
  int64_t below = 0, above = 0;
  for (int64_t d = near; d >= 1; --d)
    if (n % d == 0) { below = d; break; }
  for (int64_t d = near; d <= n; ++d)
    if (n % d == 0) { above = d; break; }
  if (below == above || above == 0) return std::to_string(below);
  return fmt::format("{} or {}", below, above);
}

}  // namespace

void validate_spec_at(const ModelSpec& s, const FieldPointer& pointer_of) {
  Checker c{s, pointer_of};
  if (s.name.empty()) c.fail("name", "the model has no name", "give it a \"name\", e.g. \"my-gpt-1b\"");
  if (s.published_params && !(*s.published_params > 0))
    c.fail("published_params", fmt::format("published_params must be positive, got {}", *s.published_params),
           "give the published parameter count, e.g. 6.74e9 or \"6.74B\", or leave it out");
  if (!(s.published_params_tolerance > 0 && s.published_params_tolerance < 1))
    c.fail("published_params_tolerance", fmt::format("must be in (0, 1), got {}", s.published_params_tolerance),
           "a relative tolerance such as 0.005 (0.5%)");
  if (s.is_transformer()) {
    c.positive("layers", s.layers);
    c.positive("hidden", s.hidden);
    c.positive("heads", s.heads);
    if (s.head_size < 0) c.positive("head_dim", s.head_size);
    if (s.head_size == 0 && s.hidden % s.heads != 0)
      c.fail("heads", fmt::format("hidden {} is not divisible by heads {}", s.hidden, s.heads),
             fmt::format("hidden = heads x head size; with hidden {} use e.g. {} heads", s.hidden,
                         nearby_divisors(s.hidden, s.heads)));
    c.positive("kv_heads", s.kv_heads);
    if (s.kv_heads > s.heads || s.heads % s.kv_heads != 0)
      c.fail("kv_heads", fmt::format("heads {} is not a multiple of kv_heads {}", s.heads, s.kv_heads),
             fmt::format("grouped-query attention shares each kv head among heads / kv_heads query heads; "
                         "use e.g. {} kv heads (or leave kv_heads out for full multi-head attention)",
                         nearby_divisors(s.heads, std::min(s.kv_heads, s.heads))));
    c.positive("ffn_hidden", s.ffn_hidden);
    if (s.position == PositionEmbedding::rotary && s.head_dim() % 2 != 0)
      c.fail(s.head_size > 0 ? "head_dim" : "heads", fmt::format("rotary embeddings need an even head size, got {}", s.head_dim()),
             "choose heads so that the head size (hidden / heads, or head_dim) is even");
    if (!(s.rotary_fraction > 0 && s.rotary_fraction <= 1))
      c.fail("rotary_fraction", fmt::format("rotary_fraction must be in (0, 1], got {}", s.rotary_fraction),
             "the fraction of each head that rotary rotates: 1, or 0.25 for GPT-NeoX");
    if (s.sliding_window < 0 || (s.sliding_window > 0) != !s.local_layers.empty())
      c.fail("sliding_window",
             fmt::format("sliding_window {} needs local_layers ({} given), and local_layers a positive window",
                         s.sliding_window, s.local_layers.size()),
             "give the window in tokens and which layers use it, or neither");
    if (!s.local_layers.empty() && static_cast<int64_t>(s.local_layers.size()) != s.layers)
      c.fail("local_layers", fmt::format("local_layers has {} entries for {} layers", s.local_layers.size(), s.layers),
             "one true/false per layer: whether it uses the sliding window");
    if (!(s.attn_softcap >= 0) || !(s.logit_softcap >= 0))
      c.fail(s.attn_softcap >= 0 ? "logit_softcap" : "attn_softcap", "soft-caps must not be negative",
             "0 for none, e.g. 50 (attention) and 30 (logits) for Gemma 2");
    validate_moe(c);
    if (!(s.norm_eps > 0)) c.fail("norm_eps", fmt::format("norm_eps must be positive, got {}", s.norm_eps), "typically 1e-5");
    if (!(s.dropout_p >= 0 && s.dropout_p < 1))
      c.fail("dropout_p", fmt::format("dropout_p must be in [0, 1), got {}", s.dropout_p), "typically 0.1");
    if (s.position == PositionEmbedding::rotary && !(s.rope_theta > 0))
      c.fail("rope_theta", fmt::format("rope_theta must be positive, got {}", s.rope_theta), "10000 for Llama 2, 500000 for Llama 3");
  }
  switch (s.family) {
    case Family::gpt:
    case Family::llama:
    case Family::bert:
      c.positive("vocab", s.vocab);
      if (s.vocab < 2) c.fail("vocab", fmt::format("vocab must be at least 2, got {}", s.vocab), "the tokenizer's vocabulary size, e.g. 50257");
      c.positive("seq_len", s.seq_len);
      if (s.max_positions < 0) c.positive("max_positions", s.max_positions);
      if (s.max_positions > 0 && s.seq_len > s.max_positions)
        c.fail("seq_len", fmt::format("seq_len {} exceeds the position limit {}", s.seq_len, s.max_positions),
               fmt::format("train on at most {} tokens per sequence", s.max_positions));
      if (s.type_vocab < 0) c.fail("type_vocab", fmt::format("type_vocab must not be negative, got {}", s.type_vocab), "2 for BERT, 0 for none");
      break;
    case Family::vit: {
      c.positive("image_size", s.image_size);
      c.positive("patch_size", s.patch_size);
      c.positive("channels", s.channels);
      c.positive("num_classes", s.num_classes);
      if (s.image_size % s.patch_size != 0)
        c.fail("patch_size", fmt::format("image_size {} is not divisible by patch_size {}", s.image_size, s.patch_size),
               "patches tile the image without overlap; e.g. 224 with 16 or 14");
      int64_t side = s.image_size / s.patch_size;
      if (s.seq_len != side * side + 1)
        c.fail("seq_len", fmt::format("seq_len {} does not match (image_size/patch_size)^2 + 1 = {}", s.seq_len, side * side + 1),
               "leave seq_len out for vit models: it is derived");
      break;
    }
    case Family::resnet:
      if (s.resnet_blocks.empty())
        c.fail("resnet_blocks", "resnet_blocks is empty", "bottleneck blocks per stage, e.g. [3, 4, 6, 3] for ResNet-50");
      for (int64_t b : s.resnet_blocks)
        if (b < 1) c.fail("resnet_blocks", fmt::format("every stage needs at least one block, got {}", b), "e.g. [3, 4, 6, 3]");
      c.positive("resnet_width", s.resnet_width);
      c.positive("channels", s.channels);
      c.positive("num_classes", s.num_classes);
      if (s.image_size < 32)
        c.fail("image_size", fmt::format("image_size must be at least 32, got {}", s.image_size),
               "the stem and stages halve the image five times; 224 is standard");
      if (!(s.norm_eps > 0)) c.fail("norm_eps", fmt::format("norm_eps must be positive, got {}", s.norm_eps), "typically 1e-5");
      break;
    case Family::mlp:
      if (is_gated(s.activation))
        c.fail("activation", fmt::format("an mlp's activation must be relu or gelu, got {}", activation_name(s.activation)),
               "use \"relu\" or \"gelu\"");
      if (s.mlp_widths.size() < 3)
        c.fail("mlp_widths", fmt::format("mlp_widths needs at least 3 widths (input, hidden..., output), got {}", s.mlp_widths.size()),
               "e.g. [784, 1024, 1024, 10]");
      for (int64_t w : s.mlp_widths)
        if (w < 1) c.fail("mlp_widths", fmt::format("every width must be a positive integer, got {}", w), "e.g. [784, 1024, 1024, 10]");
      break;
  }
}

namespace {

// ---- The catalog format: one table of fields ------------------------------------------

constexpr unsigned bit(Family f) { return 1u << static_cast<unsigned>(f); }
constexpr unsigned kAll = bit(Family::gpt) | bit(Family::llama) | bit(Family::bert) | bit(Family::vit) |
                          bit(Family::resnet) | bit(Family::mlp);
constexpr unsigned kTransformers = bit(Family::gpt) | bit(Family::llama) | bit(Family::bert) | bit(Family::vit);
constexpr unsigned kText = bit(Family::gpt) | bit(Family::llama) | bit(Family::bert);
constexpr unsigned kDecoders = bit(Family::gpt) | bit(Family::llama);
constexpr unsigned kImage = bit(Family::vit) | bit(Family::resnet);

using FieldReader = void (*)(const json::Reader& r, ModelSpec& s);

struct FieldDef {
  std::string_view name;
  unsigned families;
  FieldReader read;
};

std::vector<int64_t> positive_ints(const json::Reader& r) {
  std::vector<int64_t> out;
  if (r.size() > static_cast<size_t>(limits::kMaxLayers))
    throw r.error(fmt::format("has {} entries, more than {}", r.size(), limits::kMaxLayers))
        .hint("trainplan's limits lie far beyond any real model (core/README.md lists them)");
  for (const auto& item : r.items()) out.push_back(item.as_positive_int(limits::kMaxWidth));
  return out;
}

const FieldDef kFields[] = {
    {"display_name", kAll, [](const json::Reader& r, ModelSpec& s) { s.display_name = r.as_string(); }},
    {"source", kAll, [](const json::Reader& r, ModelSpec& s) { s.source = r.as_string(); }},
    {"notes", kAll, [](const json::Reader& r, ModelSpec& s) { s.notes = r.as_string(); }},
    {"published_params", kAll,
     [](const json::Reader& r, ModelSpec& s) {
       double v = r.as_quantity(units::Dimension::count);
       if (!(v > 0)) throw r.error(fmt::format("must be positive, got {}", v)).hint("e.g. 6.74e9 or \"6.74B\"");
       s.published_params = v;
     }},
    {"published_params_tolerance", kAll,
     [](const json::Reader& r, ModelSpec& s) { s.published_params_tolerance = r.as_quantity(units::Dimension::ratio); }},
    {"layers", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.layers = r.as_positive_int(limits::kMaxLayers); }},
    {"hidden", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.hidden = r.as_positive_int(limits::kMaxWidth); }},
    {"heads", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.heads = r.as_positive_int(limits::kMaxWidth); }},
    {"kv_heads", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.kv_heads = r.as_positive_int(limits::kMaxWidth); }},
    {"ffn_hidden", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.ffn_hidden = r.as_positive_int(limits::kMaxWidth); }},
    {"head_dim", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.head_size = r.as_positive_int(limits::kMaxWidth); }},
    {"qkv_bias", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.qkv_bias = r.as_bool(); }},
    {"qk_norm", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.qk_norm = r.as_bool(); }},
    {"post_norms", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.post_norms = r.as_bool(); }},
    {"parallel_residual", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.parallel_residual = r.as_bool(); }},
    {"rotary_fraction", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.rotary_fraction = r.as_positive(); }},
    {"sliding_window", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.sliding_window = r.as_positive_int(limits::kMaxSeqLen); }},
    {"local_layers", kDecoders,
     [](const json::Reader& r, ModelSpec& s) {
       s.local_layers.clear();
       for (const auto& item : r.items()) s.local_layers.push_back(item.as_bool());
     }},
    {"attn_softcap", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.attn_softcap = r.as_positive(); }},
    {"logit_softcap", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.logit_softcap = r.as_positive(); }},
    {"num_experts", kDecoders, [](const json::Reader& r, ModelSpec& s) { s.num_experts = r.as_positive_int(limits::kMaxWidth); }},
    {"experts_per_token", kDecoders,
     [](const json::Reader& r, ModelSpec& s) { s.experts_per_token = r.as_positive_int(limits::kMaxWidth); }},
    {"expert_ffn_hidden", kDecoders,
     [](const json::Reader& r, ModelSpec& s) { s.expert_ffn_hidden = r.as_positive_int(limits::kMaxWidth); }},
    {"shared_expert_ffn_hidden", kDecoders,
     [](const json::Reader& r, ModelSpec& s) { s.shared_expert_ffn_hidden = r.as_positive_int(limits::kMaxWidth); }},
    {"moe_layers", kDecoders,
     [](const json::Reader& r, ModelSpec& s) {
       s.moe_layers.clear();
       for (const auto& item : r.items()) s.moe_layers.push_back(item.as_bool());
     }},
    // Shorthand: the first n layers dense, the rest MoE (DeepSeek's first_k_dense_replace).
    // Held as n false entries until parse_with_defaults knows the layer count.
    {"first_dense_layers", kDecoders,
     [](const json::Reader& r, ModelSpec& s) {
       s.moe_layers.assign(static_cast<size_t>(r.as_nonnegative_int(limits::kMaxLayers)), false);
     }},
    {"max_positions", kText, [](const json::Reader& r, ModelSpec& s) { s.max_positions = r.as_positive_int(limits::kMaxSeqLen); }},
    {"vocab", kText, [](const json::Reader& r, ModelSpec& s) { s.vocab = r.as_positive_int(limits::kMaxVocab); }},
    {"seq_len", kText, [](const json::Reader& r, ModelSpec& s) { s.seq_len = r.as_positive_int(limits::kMaxSeqLen); }},
    {"norm", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.norm = parse_norm(r.as_choice(norm_names())); }},
    {"activation", kTransformers | bit(Family::mlp),
     [](const json::Reader& r, ModelSpec& s) { s.activation = parse_activation(r.as_choice(activation_names())); }},
    {"position", kText, [](const json::Reader& r, ModelSpec& s) { s.position = parse_position(r.as_choice(position_names())); }},
    {"tied_embeddings", kText, [](const json::Reader& r, ModelSpec& s) { s.tied_embeddings = r.as_bool(); }},
    {"bias", kTransformers | bit(Family::mlp), [](const json::Reader& r, ModelSpec& s) { s.bias = r.as_bool(); }},
    {"dropout", kTransformers, [](const json::Reader& r, ModelSpec& s) { s.dropout = r.as_bool(); }},
    {"dropout_p", kTransformers,
     [](const json::Reader& r, ModelSpec& s) {
       s.dropout_p = r.as_nonnegative();
       if (s.dropout_p >= 1) throw r.error(fmt::format("must be below 1, got {}", s.dropout_p)).hint("typically 0.1");
     }},
    {"norm_eps", kTransformers | bit(Family::resnet), [](const json::Reader& r, ModelSpec& s) { s.norm_eps = r.as_positive(); }},
    {"rope_theta", bit(Family::gpt) | bit(Family::llama), [](const json::Reader& r, ModelSpec& s) { s.rope_theta = r.as_positive(); }},
    {"type_vocab", bit(Family::bert), [](const json::Reader& r, ModelSpec& s) { s.type_vocab = r.as_nonnegative_int(limits::kMaxVocab); }},
    {"image_size", kImage, [](const json::Reader& r, ModelSpec& s) { s.image_size = r.as_positive_int(limits::kMaxWidth); }},
    {"patch_size", bit(Family::vit), [](const json::Reader& r, ModelSpec& s) { s.patch_size = r.as_positive_int(limits::kMaxWidth); }},
    {"channels", kImage, [](const json::Reader& r, ModelSpec& s) { s.channels = r.as_positive_int(limits::kMaxWidth); }},
    {"num_classes", kImage, [](const json::Reader& r, ModelSpec& s) { s.num_classes = r.as_positive_int(limits::kMaxVocab); }},
    {"resnet_blocks", bit(Family::resnet),
     [](const json::Reader& r, ModelSpec& s) {
       s.resnet_blocks = positive_ints(r);
       if (s.resnet_blocks.empty()) throw r.error("must not be empty").hint("blocks per stage, e.g. [3, 4, 6, 3] for ResNet-50");
     }},
    {"resnet_width", bit(Family::resnet), [](const json::Reader& r, ModelSpec& s) { s.resnet_width = r.as_positive_int(limits::kMaxWidth); }},
    {"mlp_widths", bit(Family::mlp),
     [](const json::Reader& r, ModelSpec& s) {
       s.mlp_widths = positive_ints(r);
       if (s.mlp_widths.size() < 3)
         throw r.error(fmt::format("needs at least 3 widths (input, hidden..., output), got {}", s.mlp_widths.size()))
             .hint("e.g. [784, 1024, 1024, 10]");
     }},
};

// Applies every field present in object `r` to `s`; records the names set in `given`.
void apply_fields(const json::Reader& r, ModelSpec& s, std::set<std::string, std::less<>>& given) {
  for (const auto& f : kFields) {
    auto value = r.optional_field(f.name);
    if (!value) continue;
    if (!(f.families & bit(s.family)))
      throw value->error(fmt::format("field \"{}\" does not apply to {} models", f.name, family_name(s.family)))
          .hint(f.name == "seq_len" && s.family == Family::vit
                    ? "a vit's sequence length is derived: (image_size / patch_size)^2 + 1"
                    : "remove it, or check \"family\"");
    f.read(*value, s);
    given.emplace(f.name);
  }
}

// first_dense_layers n (held as n false moe_layers entries): layers 1..n dense, the rest MoE.
void expand_first_dense_layers(ModelSpec& s, bool moe_layers_given) {
  const std::string pointer = s.pointer + "/first_dense_layers";
  if (moe_layers_given)
    throw Error("first_dense_layers and moe_layers both given").at(s.file, pointer).hint("give one of them");
  if (static_cast<int64_t>(s.moe_layers.size()) >= s.layers)
    throw Error(fmt::format("first_dense_layers {} leaves no MoE layer of {}", s.moe_layers.size(), s.layers))
        .at(s.file, pointer)
        .hint(fmt::format("use fewer than {} (3 for DeepSeek-V3), or remove num_experts for a dense model", s.layers));
  s.moe_layers.resize(static_cast<size_t>(s.layers), true);
}

void require(const json::Reader& r, const ModelSpec& s, const std::set<std::string, std::less<>>& given,
             std::initializer_list<std::string_view> fields) {
  for (auto f : fields)
    if (!given.count(f))
      throw r.error(fmt::format("missing required field \"{}\"", f))
          .hint(fmt::format("a {} model needs {}", family_name(s.family), family_list(s.family)));
}

}  // namespace

ModelSpec parse_with_defaults(const json::Reader& r, const json::Reader* defaults) {
  if (!r.is_object())
    throw r.error("a model must be an object").hint("write {\"name\": ..., \"family\": ..., \"layers\": ...}");
  std::optional<Family> family;
  if (defaults)
    if (auto f = defaults->optional_field("family")) family = parse_family(f->as_choice(family_names()));
  if (auto f = r.optional_field("family")) family = parse_family(f->as_choice(family_names()));
  if (!family)
    throw r.error("missing required field \"family\"").hint("one of: " + join(family_names(), ", "));
  ModelSpec s = family_defaults(*family);
  std::set<std::string, std::less<>> given;
  if (defaults) {
    if (defaults->has("name"))
      throw defaults->field("name").error("\"name\" cannot be a default").hint("give each model its own name");
    apply_fields(*defaults, s, given);
    defaults->finish();
  }
  s.name = r.field("name").as_string();
  if (s.name.empty()) throw r.field("name").error("must not be empty").hint("e.g. \"gpt3-175b\"");
  apply_fields(r, s, given);
  r.finish();
  switch (s.family) {
    case Family::gpt:
    case Family::bert: require(r, s, given, {"layers", "hidden", "heads", "vocab", "seq_len"}); break;
    case Family::llama: require(r, s, given, {"layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"}); break;
    case Family::vit: require(r, s, given, {"layers", "hidden", "heads", "image_size", "patch_size", "num_classes"}); break;
    case Family::resnet: require(r, s, given, {"resnet_blocks"}); break;
    case Family::mlp: require(r, s, given, {"mlp_widths"}); break;
  }
  if (s.is_transformer() && is_gated(s.activation) && !given.count("ffn_hidden"))
    throw r.error("missing required field \"ffn_hidden\"")
        .hint("gated-MLP (SwiGLU, GeGLU) models have no standard ffn size; give it (e.g. 11008 for Llama 2 7B)");
  s.file = r.file();
  s.pointer = r.pointer();
  if (given.count("first_dense_layers")) expand_first_dense_layers(s, given.count("moe_layers") > 0);
  s = finalize_spec(std::move(s));
  validate_spec_at(s, catalog_field_pointer(s));
  return s;
}

}  // namespace detail

int64_t ModelSpec::num_local_layers() const {
  return static_cast<int64_t>(std::count(local_layers.begin(), local_layers.end(), true));
}

void set_seq_len(ModelSpec& spec, int64_t seq_len, const std::string& origin) {
  if (spec.max_positions > 0 && seq_len > spec.max_positions)
    throw Error(fmt::format("{} {} exceeds the position limit {} of {}", origin, seq_len, spec.max_positions, spec.name))
        .at(spec.file, spec.max_positions_pointer.empty() ? spec.pointer + "/max_positions" : spec.max_positions_pointer)
        .hint(fmt::format("the model cannot attend over more than {} positions: use {} {} or less", spec.max_positions,
                          origin, spec.max_positions));
  spec.seq_len = seq_len;
  spec.seq_len_origin = origin;
}

std::string seq_len_note(const ModelSpec& spec) {
  std::vector<std::string> notes;
  if (spec.seq_len_origin == "default")
    notes.push_back(fmt::format("default --seq-len {}{}", kDefaultImportSeqLen,
                                spec.seq_len < kDefaultImportSeqLen ? " capped at the position limit" : ""));
  else if (!spec.seq_len_origin.empty())
    notes.push_back("from " + spec.seq_len_origin);
  if (spec.max_positions > 0) notes.push_back(fmt::format("position limit {}", spec.max_positions));
  return join(notes, "; ");
}

std::string describe_seq_len(const ModelSpec& spec) {
  const std::string note = seq_len_note(spec);
  return std::to_string(spec.seq_len) + (note.empty() ? "" : " (" + note + ")");
}

void validate_spec(const ModelSpec& spec) { detail::validate_spec_at(spec, detail::catalog_field_pointer(spec)); }

ModelSpec parse_model_spec(const json::Reader& reader) { return detail::parse_with_defaults(reader, nullptr); }

ModelSpec parse_model_spec(const json::Reader& reader, const json::Json& defaults) {
  json::Reader d(defaults, reader.file(), "/defaults");
  return detail::parse_with_defaults(reader, &d);
}

std::vector<ModelSpec> parse_model_file(std::string_view text, const std::string& file) {
  json::Json doc = json::parse_text(text, file);
  json::Reader root(doc, file);
  std::vector<ModelSpec> out;
  if (root.is_array()) {
    for (const auto& item : root.items()) out.push_back(parse_model_spec(item));
  } else if (root.is_object() && root.has("models")) {
    (void)root.optional_field("description");
    auto defaults = root.optional_field("defaults");
    if (defaults && !defaults->is_object())
      throw defaults->error("\"defaults\" must be an object").hint("fields shared by the file's models, e.g. {\"family\": \"gpt\"}");
    std::optional<json::Reader> d;
    if (defaults) d.emplace(defaults->value(), file, "/defaults");
    for (const auto& item : root.field("models").items())
      out.push_back(detail::parse_with_defaults(item, d ? &*d : nullptr));
    root.finish();
  } else if (root.is_object()) {
    out.push_back(parse_model_spec(root));
  } else {
    throw root.error("must be a model object, an array of models, or {\"models\": [...]}")
        .hint("see models/README.md for the catalog format");
  }
  return out;
}

}  // namespace trainplan::models
