// Helpers shared by the CLI commands: the catalog the user asked for and number formatting.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"

namespace trainplan::cli {

/// The built-in hardware catalog, or the one from --catalog-dir, priced for --region (when
/// given), with --prices applied on top. Loaded once per region.
const hw::Catalog& user_catalog();
/// The catalog for plan `p` read from `plan_file`: priced for --region when given, else for the
/// region the plan records (cluster.region), else as user_catalog().
const hw::Catalog& user_catalog(const plan::Plan& p, const std::string& plan_file);
/// The region prices are in, for output: `selected` (a catalog's selected region), else us-east-1.
std::string price_region(const std::string& selected);

/// "$1.23M", "$456k", "$12.34": short money for tables.
std::string short_usd(double usd);
/// "81%".
std::string percent(double fraction);
/// "12.3/40.0 GiB".
std::string memory_of(double used_bytes, double capacity_bytes);
/// --azs N (1..6; `azs` keeps its value when not given), --data-region R, --dataset-size SIZE:
/// where a job's instances and training data sit (plan.hpp "placement" and "data").
void add_placement_options(CLI::App* cmd, int64_t& azs, std::string& data_region, std::string& dataset_size);
/// Throws Error at --data-region when `region` (not empty) has no inter-region price in the
/// catalog, listing the ones that have.
void check_data_region_flag(const std::string& region);
/// Applies those flags to a plan: azs when > 0, the data region when not empty, the dataset
/// size when not empty (errors name the flag).
void apply_placement_options(plan::Plan& plan, int64_t azs, const std::string& data_region, const std::string& dataset_size);

/// The help of every --seq-len: the default for catalog models and imported configs.
std::string seq_len_help();

}  // namespace trainplan::cli
