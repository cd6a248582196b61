#include "common.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <memory>

#include "commands.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::cli {

namespace {

// The catalog priced for `region` (empty: the catalog's own prices); an unknown region is an
// error at `file` / `pointer` (the flag, or the plan field that names it).
const hw::Catalog& catalog_for(const std::string& region, const std::string& file, const std::string& pointer) {
  static std::map<std::string, std::unique_ptr<hw::Catalog>> catalogs;
  auto& slot = catalogs[region];
  if (!slot) {
    const auto& g = global_options();
    try {
      slot = std::make_unique<hw::Catalog>(hw::load_catalog(g.catalog_dir, g.price_file, region));
    } catch (Error& e) {
      if (e.file().empty()) e.at(file, pointer);  // select_region's error has no location of its own
      throw;
    }
  }
  return *slot;
}

}  // namespace

const hw::Catalog& user_catalog() { return catalog_for(global_options().region, "--region", ""); }

const hw::Catalog& user_catalog(const plan::Plan& p, const std::string& plan_file) {
  if (!global_options().region.empty() || p.region.empty()) return user_catalog();
  return catalog_for(p.region, plan_file, "/cluster/region");
}

std::string price_region(const std::string& selected) { return selected.empty() ? hw::kCatalogRegion : selected; }

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
