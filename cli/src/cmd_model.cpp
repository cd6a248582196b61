// `trainplan model [NAME_OR_PATH] [--json] [--ops] [--unit N]`: a model's parameters, FLOPs
// per token (with the 6N + 12Lsh check), shape, and per-unit breakdown; without a name, the
// catalog.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::cli {
namespace {

using models::ModelGraph;
using models::ModelSpec;

struct ModelOptions {
  std::string name;
  bool json = false;
  bool ops = false;
  int unit = 1;
  int64_t seq_len = 0;  // 0 = the model's (an imported config: the default)
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, "x"));
}

// 4 significant digits with K/M/B/T/P/E suffixes: "174.6B", "1.077T", "2.205P".
std::string count4(double v) {
  static const std::pair<double, const char*> kSuffixes[] = {{1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& [factor, suffix] : kSuffixes) {
    if (std::fabs(v) < factor * 0.99995) continue;
    const double x = v / factor;
    const int decimals = std::fabs(x) >= 100 ? 1 : std::fabs(x) >= 10 ? 2 : 3;
    return fmt::format("{:.{}f}{}", x, decimals, suffix);
  }
  return fmt::format("{:.4g}", v);
}

// "174,604,259,328".
std::string with_commas(double v) {
  std::string digits = fmt::format("{:.0f}", std::fabs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string signed_percent(double ratio) { return fmt::format("{:+.2f}%", 100 * (ratio - 1)); }

std::string shape_summary(const ModelSpec& s) {
  using models::Family;
  switch (s.family) {
    case Family::resnet:
      return fmt::format("blocks per stage [{}], width {}, {}x{}x{} images, {} classes",
                         fmt::join(s.resnet_blocks, ", "), s.resnet_width, s.channels, s.image_size, s.image_size,
                         s.num_classes);
    case Family::mlp: return fmt::format("widths [{}], {}", fmt::join(s.mlp_widths, ", "), models::activation_name(s.activation));
    default: break;
  }
  std::string out = fmt::format("{} layers, hidden {}, {} heads (head size {}", s.layers, s.hidden, s.heads, s.head_dim());
  if (s.kv_heads != s.heads) out += fmt::format(", {} kv heads", s.kv_heads);
  out += fmt::format("), ffn {}", s.ffn_hidden);
  if (s.family == Family::vit)
    out += fmt::format(", {}x{} images in {}x{} patches (seq_len {}), {} classes", s.image_size, s.image_size,
                       s.patch_size, s.patch_size, s.seq_len, s.num_classes);
  else
    out += fmt::format(", vocab {}, seq_len {}", s.vocab, models::describe_seq_len(s));
  out += fmt::format("\n            {}, {}, {} positions", models::norm_name(s.norm), models::activation_name(s.activation),
                     models::position_name(s.position));
  if (s.family != Family::vit) out += s.tied_embeddings ? ", tied embeddings" : ", untied embeddings";
  out += s.bias ? ", biases" : ", no biases";
  out += s.dropout ? fmt::format(", dropout {}", s.dropout_p) : ", no dropout";
  // Variants of imported Hugging Face models.
  std::vector<std::string> variants;
  if (s.qkv_bias && !s.bias) variants.emplace_back("QKV biases");
  if (s.qk_norm) variants.emplace_back("Q/K norms");
  if (s.post_norms) variants.emplace_back("post-attention/MLP norms");
  if (s.parallel_residual) variants.emplace_back("parallel attention + MLP residual");
  if (s.position == models::PositionEmbedding::rotary && s.rotary_fraction < 1)
    variants.push_back(fmt::format("rotary on {:g}% of each head", 100 * s.rotary_fraction));
  if (s.num_local_layers() > 0)
    variants.push_back(fmt::format("sliding window {} on {} of {} layers", s.sliding_window, s.num_local_layers(), s.layers));
  if (s.attn_softcap > 0) variants.push_back(fmt::format("attention soft-cap {:g}", s.attn_softcap));
  if (s.logit_softcap > 0) variants.push_back(fmt::format("logit soft-cap {:g}", s.logit_softcap));
  if (s.is_moe()) {
    const auto moe_blocks = s.moe_layers.empty() ? s.layers : std::count(s.moe_layers.begin(), s.moe_layers.end(), true);
    std::string moe = fmt::format("mixture of experts on {} of {} layers: {} experts of ffn {}, top {}", moe_blocks,
                                  s.layers, s.num_experts, s.expert_ffn_hidden > 0 ? s.expert_ffn_hidden : s.ffn_hidden,
                                  s.experts_per_token);
    if (s.shared_expert_ffn_hidden > 0) moe += fmt::format(", shared expert ffn {}", s.shared_expert_ffn_hidden);
    variants.push_back(moe);
  }
  if (!variants.empty()) out += fmt::format("\n            {}", fmt::join(variants, ", "));
  return out;
}

// Runs of consecutive units with equal numbers print as one row ("block1-96 x96").
struct UnitRow {
  int first, last;
};
std::vector<UnitRow> unit_runs(const ModelGraph& g) {
  std::vector<UnitRow> rows;
  const auto& units = g.units();
  for (int i = 0; i < static_cast<int>(units.size()); ++i) {
    const auto& u = units[static_cast<size_t>(i)];
    if (!rows.empty()) {
      const auto& prev = units[static_cast<size_t>(rows.back().last)];
      const bool block = i > 0 && i + 1 < static_cast<int>(units.size()) && rows.back().first > 0;
      if (block && prev.params == u.params && prev.flops_fwd == u.flops_fwd && prev.saved_elems == u.saved_elems &&
          prev.output_elems == u.output_elems && prev.ops.size() == u.ops.size()) {
        rows.back().last = i;
        continue;
      }
    }
    rows.push_back({i, i});
  }
  return rows;
}

void print_ops(const ModelGraph& g, int unit_index) {
  const auto& u = g.unit(unit_index);
  std::printf("\nops of unit %d (%s), per sample, tp = 1; saved in 16 bits (S: divided by tp, R: dropped by selective recompute):\n",
              unit_index, u.name.c_str());
  Table t({">id", "name", "kind", "tp", "inputs", "out shape", "weight", ">params", ">fwd FLOPs", ">bwd FLOPs", ">saved", "flags"});
  for (int id : u.ops) {
    const auto& op = g.op(id);
    std::vector<std::string> in;
    for (int i : op.inputs) in.push_back(std::to_string(i));
    if (op.batch_input != models::BatchInput::none) in.emplace_back(models::batch_input_name(op.batch_input));
    std::string flags = std::string(op.saved_tp_sharded ? "S" : "") + (op.dropped_by_selective_recompute ? "R" : "");
    if (op.tied_weight_op >= 0) flags += fmt::format(" tied to {}", op.tied_weight_op);
    t.add({std::to_string(op.id), op.name, std::string(models::op_kind_name(op.kind)), std::string(models::tp_split_name(op.tp_split)),
           fmt::format("{}", fmt::join(in, ",")), shape_text(op.out_shape), shape_text(op.weight_shape),
           count4(op.params), count4(op.flops_fwd), count4(op.flops_bwd),
           units::format_bytes(op.saved_bytes(Precision::bf16)), flags});
  }
  std::fputs(t.render("  ").c_str(), stdout);
}

void print_model(const ModelGraph& g, const ModelOptions& o) {
  const ModelSpec& s = g.spec();
  const double params = g.total_params();
  std::printf("%s  (%s, family %s)\n", s.display_name.c_str(), s.name.c_str(), std::string(models::family_name(s.family)).c_str());
  if (!s.source.empty()) std::printf("source:     %s\n", s.source.c_str());
  if (!s.notes.empty()) std::printf("notes:      %s\n", s.notes.c_str());
  std::printf("shape:      %s\n", shape_summary(s).c_str());
  std::string published;
  if (s.published_params)
    published = fmt::format("; published {} ({})", count4(*s.published_params),
                            signed_percent(params / *s.published_params));
  std::printf("parameters: %s (%s)%s\n", count4(params).c_str(), with_commas(params).c_str(), published.c_str());
  if (s.is_moe())
    std::printf("            %s active per token (%s; top %lld of %lld routed experts)\n", count4(g.active_params()).c_str(),
                with_commas(g.active_params()).c_str(), static_cast<long long>(s.experts_per_token),
                static_cast<long long>(s.num_experts));
  const double per_sample = g.training_flops_per_sample();
  if (s.is_decoder() || s.family == models::Family::bert) {
    std::printf("FLOPs:      %s per token for training (fwd + bwd, no recomputation), %s per sequence of %lld\n",
                count4(g.training_flops_per_token()).c_str(), count4(per_sample).c_str(),
                static_cast<long long>(s.seq_len));
    if (s.is_decoder()) {
      const double estimate = models::six_n_estimate_per_token(g);
      std::printf("            6N + 12Lsh = %s per token (graph %s)\n", count4(estimate).c_str(),
                  signed_percent(g.training_flops_per_token() / estimate).c_str());
    }
  } else {
    std::printf("FLOPs:      %s per sample for training (fwd + bwd), %s forward\n", count4(per_sample).c_str(),
                count4(g.flops_fwd_per_sample()).c_str());
  }
  std::printf("activations: %s saved per sample in 16 bits (no recomputation, tp = 1)\n",
              units::format_bytes(g.saved_bytes_per_sample(Precision::bf16)).c_str());

  std::printf("\nlayer units (per sample, tp = 1; a pipeline stage owns a contiguous range):\n");
  Table t({"unit", ">ops", ">params", ">fwd FLOPs", ">bwd FLOPs", ">saved (16-bit)", ">sends (elems)"});
  for (const auto& run : unit_runs(g)) {
    const auto& u = g.unit(run.first);
    std::string name = u.name;
    if (run.last > run.first)
      name = fmt::format("{}-{} (x{}, each)", u.name, g.unit(run.last).name, run.last - run.first + 1);
    t.add({name, std::to_string(u.ops.size()), count4(u.params), count4(u.flops_fwd),
           count4(u.flops_bwd), units::format_bytes(u.saved_bytes(Precision::bf16)),
           u.output_elems > 0 ? count4(u.output_elems) : "-"});
  }
  std::fputs(t.render("  ").c_str(), stdout);
  if (o.ops) {
    const int units = static_cast<int>(g.units().size());
    if (o.unit >= units)
      throw Error(fmt::format("{} has units 0..{}, got {}", g.spec().name, units - 1, o.unit))
          .at("--unit")
          .hint("0 is the input, 1 the first block, the last the output head");
    print_ops(g, o.unit);
  }
}

void list_catalog(bool as_json) {
  const auto& cat = models::ModelCatalog::builtin();
  if (as_json) {
    std::fputs(json::dump(models::catalog_json(cat)).c_str(), stdout);
    return;
  }
  Table t({"name", "model", "family", ">params", "source"});
  for (const auto& s : cat.specs()) {
    const double params = models::build_graph(s).total_params();
    std::string source = s.source.size() > 70 ? s.source.substr(0, 67) + "..." : s.source;
    t.add({s.name, s.display_name, std::string(models::family_name(s.family)), count4(params), source});
  }
  std::printf("%zu models (models/catalog/*.json); `trainplan model NAME` shows one, a path to a Hugging Face config.json "
              "or a model JSON file works too:\n",
              cat.specs().size());
  std::fputs(t.render("  ").c_str(), stdout);
}

void run(const ModelOptions& o) {
  if (o.name.empty()) {
    list_catalog(o.json);
    return;
  }
  ModelSpec spec = models::resolve_model(o.name);
  if (o.seq_len > 0) models::set_seq_len(spec, o.seq_len, "--seq-len");
  ModelGraph g = models::build_graph(spec);
  models::check_unit_index(g, o.unit);
  if (o.json) {
    std::fputs(json::dump(models::model_json(g, o.ops ? std::optional<int>(o.unit) : std::nullopt)).c_str(), stdout);
    return;
  }
  print_model(g, o);
}

}  // namespace

void add_model_command(CLI::App& app) {
  auto opts = std::make_shared<ModelOptions>();
  CLI::App* cmd = app.add_subcommand("model", "Show a model's parameters, FLOPs and per-layer breakdown; list the catalog");
  cmd->add_option("model", opts->name, "Catalog name (e.g. gpt3-175b), Hugging Face config.json, or model JSON file");
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  cmd->add_flag("--ops", opts->ops, "List every op of one unit (a block, by default the first)");
  add_int(cmd, "--unit", opts->unit, 0, limits::kMaxLayers + 1, "Unit whose ops --ops lists (0 = input, 1 = first block)");
  add_int(cmd, "--seq-len", opts->seq_len, 1, limits::kMaxSeqLen, seq_len_help());
  cmd->callback([opts] { run(*opts); });
}

}  // namespace trainplan::cli
