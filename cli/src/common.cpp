#include "common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "commands.hpp"
#include "options.hpp"
#include "trainplan/core/strings.hpp"
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

void add_placement_options(CLI::App* cmd, int64_t& azs, std::string& data_region, std::string& dataset_size) {
  add_int(cmd, "--azs", azs, 1, hw::kMaxAzs,
          "Availability Zones the instances are split over, in contiguous blocks (default: one AZ, one cluster placement "
          "group, EFA; between AZs NCCL runs over TCP and traffic is billed)");
  cmd->add_option("--data-region", data_region,
                  "Region of the training data's bucket (default: the job's); another Region's data is billed per GB read");
  cmd->add_option("--dataset-size", dataset_size, "Bytes of the training data per epoch, e.g. 2TB (default: the work's tokens or samples)");
}

void check_data_region_flag(const std::string& region) {
  if (region.empty()) return;
  const auto regions = hw::priced_regions(user_catalog().placement());
  if (std::find(regions.begin(), regions.end(), region) == regions.end())
    throw Error(fmt::format("no inter-region transfer price for region \"{}\"", region))
        .at("--data-region")
        .hint(regions.empty() ? std::string("the catalog has no \"placement\" table") : "known regions: " + join(regions, ", "));
}

void apply_placement_options(plan::Plan& plan, int64_t azs, const std::string& data_region, const std::string& dataset_size) {
  check_data_region_flag(data_region);
  if (azs > 0) plan.placement.azs = static_cast<int>(azs);
  if (!data_region.empty()) plan.data_region = data_region;
  if (!dataset_size.empty()) plan.dataset_bytes = flag_positive_quantity("--dataset-size", dataset_size, units::Dimension::bytes);
}

std::string seq_len_help() {
  return fmt::format(
      "Training sequence length in tokens (default: a catalog model's own; a Hugging Face config's {}, or its "
      "max_position_embeddings when smaller; never more than that position limit)",
      models::kDefaultImportSeqLen);
}

}  // namespace trainplan::cli
