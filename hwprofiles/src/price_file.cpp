// User price files: prices for other regions or negotiated prices override the catalog's.
#include <fmt/format.h>

#include <optional>

#include "catalog_parse.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::hw {
namespace {

// One instance's overrides, validated before any is applied.
struct PriceUpdate {
  std::string instance;
  std::optional<double> ec2_on_demand;
  std::optional<double> sagemaker_on_demand;
  std::optional<double> spot;
  std::optional<double> capacity_block;
  std::string interruption_bucket;
  std::string region;
};

}  // namespace

void Catalog::apply_price_file(const std::string& path) { apply_price_json(json::parse_file(path), path); }

void Catalog::apply_price_json(const json::Json& doc, const std::string& name) {
  json::Reader r(doc, name);
  if (!r.is_object()) (void)r.entries();  // "must be an object"
  const std::string region = r.field_or("region", "");
  Source src;
  src.id = "user:" + name;
  src.description = r.field_or("source", "user price file " + name);
  src.date = "undated";
  if (auto d = r.optional_field("date")) {
    src.date = d->as_string();
    if (!detail::is_iso_date(src.date))
      throw d->error(fmt::format("\"{}\" is not a date", src.date))
          .hint("write an ISO date: \"2026-10-01\", \"2026-10\" or \"2026\"");
  }
  src.verified = true;
  r.ignore("comment");

  std::vector<PriceUpdate> updates;
  json::Reader prices = r.field("prices");
  for (auto& [instance_name, entry] : prices.entries()) {
    if (!has_instance(instance_name))
      throw Error(fmt::format("unknown instance type \"{}\"", instance_name))
          .at(entry.file(), entry.pointer())
          .hint(suggestion(instance_name, instance_names()));
    if (!entry.is_object()) (void)entry.entries();
    PriceUpdate u;
    u.instance = instance_name;
    if (auto v = entry.optional_field("ec2_on_demand")) u.ec2_on_demand = v->as_positive(limits::kMaxUsdPerHour);
    if (auto v = entry.optional_field("sagemaker_on_demand")) u.sagemaker_on_demand = v->as_positive(limits::kMaxUsdPerHour);
    if (auto v = entry.optional_field("spot")) u.spot = v->as_positive(limits::kMaxUsdPerHour);
    if (auto v = entry.optional_field("capacity_block")) u.capacity_block = v->as_positive(limits::kMaxUsdPerHour);
    if (auto v = entry.optional_field("interruption_bucket")) u.interruption_bucket = v->as_choice(interruption_buckets());
    u.region = entry.field_or("region", region);
    entry.finish();
    updates.push_back(std::move(u));
  }
  r.finish();

  sources_[src.id] = src;
  for (const auto& u : updates) {
    InstanceType& inst = instances_.at(u.instance);
    Prices& p = inst.prices;
    user_priced_.insert(u.instance);
    if (!u.region.empty() && u.region != p.region) {
      // The catalog's prices are for another region: keep only the family factors (uplift,
      // spot discount) so that prices the file does not give are estimated from its EC2 price.
      move_to_region(inst, u.region);
      price_capacity_block(inst);  // the catalog's block price of the new region, if published
    }
    if (u.capacity_block) {
      p.capacity_block = u.capacity_block;
      inst.sources["capacity_block"] = src.id;
    }
    if (u.ec2_on_demand) {
      p.ec2_on_demand = u.ec2_on_demand;
      inst.sources["ec2_on_demand"] = src.id;
    }
    if (u.sagemaker_on_demand) {
      p.sagemaker_on_demand = u.sagemaker_on_demand;
      p.sagemaker_estimated = false;
      inst.sources["sagemaker"] = src.id;
    }
    if (u.spot) {
      p.spot = u.spot;
      p.spot_min.reset();
      p.spot_max.reset();
      p.spot_estimated = false;
      inst.sources["spot"] = src.id;
    }
    if (!u.interruption_bucket.empty()) {
      p.interruption_bucket = u.interruption_bucket;
      inst.sources["interruption"] = src.id;
    }
    detail::derive_prices(inst);
  }
}

}  // namespace trainplan::hw
