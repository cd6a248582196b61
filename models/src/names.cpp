// Name tables of the models library's enums (JSON and CLI spellings).
#include <fmt/format.h>

#include "internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::models {
namespace detail {
namespace {

constexpr NamedValue<Family> kFamilies[] = {
    {Family::gpt, "gpt"},       {Family::llama, "llama"},   {Family::bert, "bert"},
    {Family::vit, "vit"},       {Family::resnet, "resnet"}, {Family::mlp, "mlp"},
};
constexpr NamedValue<Norm> kNorms[] = {{Norm::layernorm, "layernorm"}, {Norm::rmsnorm, "rmsnorm"}};
constexpr NamedValue<Activation> kActivations[] = {
    {Activation::gelu, "gelu"}, {Activation::swiglu, "swiglu"}, {Activation::relu, "relu"}, {Activation::geglu, "geglu"}};
constexpr NamedValue<PositionEmbedding> kPositions[] = {{PositionEmbedding::learned, "learned"},
                                                        {PositionEmbedding::rotary, "rotary"},
                                                        {PositionEmbedding::none, "none"}};
constexpr NamedValue<OpKind> kOpKinds[] = {
    {OpKind::embedding, "embedding"}, {OpKind::patch_embed, "patch_embed"},
    {OpKind::layernorm, "layernorm"}, {OpKind::rmsnorm, "rmsnorm"},
    {OpKind::linear, "linear"},       {OpKind::attention, "attention"},
    {OpKind::activation, "activation"}, {OpKind::residual, "residual"},
    {OpKind::dropout, "dropout"},     {OpKind::conv2d, "conv2d"},
    {OpKind::batchnorm, "batchnorm"}, {OpKind::pool, "pool"},
    {OpKind::loss, "loss"},           {OpKind::router, "router"},
    {OpKind::moe_dispatch, "moe_dispatch"}, {OpKind::moe_combine, "moe_combine"},
};
constexpr NamedValue<TpSplit> kTpSplits[] = {
    {TpSplit::replicated, "replicated"}, {TpSplit::column, "column"}, {TpSplit::row, "row"},
    {TpSplit::heads, "heads"},           {TpSplit::vocab, "vocab"},   {TpSplit::none, "none"},
};
constexpr NamedValue<BatchInput> kBatchInputs[] = {
    {BatchInput::none, "none"},         {BatchInput::tokens, "tokens"},
    {BatchInput::positions, "positions"}, {BatchInput::token_types, "token_types"},
    {BatchInput::pixels, "pixels"},     {BatchInput::features, "features"},
    {BatchInput::labels, "labels"},
};
constexpr NamedValue<PoolMode> kPoolModes[] = {{PoolMode::max, "max"},
                                               {PoolMode::avg, "avg"},
                                               {PoolMode::global_avg, "global_avg"},
                                               {PoolMode::first_token, "first_token"}};

// Callers read these names through json::Reader::as_choice, which already rejects unknown
// names with a hint; reaching the end is a bug.
template <typename E, size_t N>
E parse_known(std::string_view name, const NamedValue<E> (&table)[N]) {
  for (const auto& entry : table)
    if (entry.name == name) return entry.value;
  TP_ASSERT_MSG(false, "name not in table (caller must validate with as_choice)");
  return table[0].value;
}

}  // namespace

Family parse_family(std::string_view name) { return parse_known(name, kFamilies); }
Norm parse_norm(std::string_view name) { return parse_known(name, kNorms); }
Activation parse_activation(std::string_view name) { return parse_known(name, kActivations); }
PositionEmbedding parse_position(std::string_view name) { return parse_known(name, kPositions); }
std::vector<std::string> norm_names() { return names_of(kNorms); }
std::vector<std::string> activation_names() { return names_of(kActivations); }
std::vector<std::string> position_names() { return names_of(kPositions); }

}  // namespace detail

std::string_view family_name(Family f) { return detail::name_of(f, detail::kFamilies); }
std::vector<std::string> family_names() { return detail::names_of(detail::kFamilies); }
std::string_view norm_name(Norm n) { return detail::name_of(n, detail::kNorms); }
std::string_view activation_name(Activation a) { return detail::name_of(a, detail::kActivations); }
std::string_view position_name(PositionEmbedding p) { return detail::name_of(p, detail::kPositions); }
std::string_view op_kind_name(OpKind k) { return detail::name_of(k, detail::kOpKinds); }
std::string_view tp_split_name(TpSplit s) { return detail::name_of(s, detail::kTpSplits); }
std::string_view batch_input_name(BatchInput b) { return detail::name_of(b, detail::kBatchInputs); }
std::string_view pool_mode_name(PoolMode p) { return detail::name_of(p, detail::kPoolModes); }

}  // namespace trainplan::models
