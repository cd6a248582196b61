// Helpers shared by the CLI commands: the catalog the user asked for and number formatting.
#pragma once

#include <string>

#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::cli {

/// The built-in hardware catalog, or the one from --catalog-dir, with --prices applied.
/// Loaded once.
const hw::Catalog& user_catalog();

/// "$1.23M", "$456k", "$12.34": short money for tables.
std::string short_usd(double usd);
/// "81%".
std::string percent(double fraction);
/// "12.3/40.0 GiB".
std::string memory_of(double used_bytes, double capacity_bytes);
/// The help of every --seq-len: the default for catalog models and imported configs.
std::string seq_len_help();

}  // namespace trainplan::cli
