#include "common.hpp"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "commands.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::cli {

const hw::Catalog& user_catalog() {
  static std::unique_ptr<hw::Catalog> catalog;
  if (!catalog) {
    const auto& g = global_options();
    catalog = std::make_unique<hw::Catalog>(hw::load_catalog(g.catalog_dir, g.price_file));
  }
  return *catalog;
}

std::string short_usd(double usd) {
  const double a = std::fabs(usd);
  if (a >= 1e6) return fmt::format("${:.2f}M", usd / 1e6);
  if (a >= 1e4) return fmt::format("${:.0f}k", usd / 1e3);
  if (a >= 1e3) return fmt::format("${:.1f}k", usd / 1e3);
  return fmt::format("${:.2f}", usd);
}

std::string percent(double fraction) { return fmt::format("{:.0f}%", fraction * 100.0); }

std::string memory_of(double used_bytes, double capacity_bytes) {
  const double gib = 1073741824.0;
  return fmt::format("{:.1f}/{:.0f} GiB", used_bytes / gib, capacity_bytes / gib);
}

std::string seq_len_help() {
  return fmt::format(
      "Training sequence length in tokens (default: a catalog model's own; a Hugging Face config's {}, or its "
      "max_position_embeddings when smaller; never more than that position limit)",
      models::kDefaultImportSeqLen);
}

}  // namespace trainplan::cli
