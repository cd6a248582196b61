// libFuzzer target: hardware catalog files (hwprofiles) and user price files applied to a
// catalog of the repository's files. The first byte picks which. A fuzzed catalog file is read
// beside the repository's gpus.json and sources.json, so instance files reach their GPU and
// source checks. Only trainplan::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

using namespace trainplan;

namespace {

// The repository's GPU and source files, parsed once: each input then costs only its own parse
// and the catalog's checks.
const json::Json& repo_document(const std::string& name) {
  static std::vector<std::pair<std::string, json::Json>> docs;
  for (const auto& d : docs)
    if (d.first == name) return d.second;
  const std::string path = std::string(TRAINPLAN_SOURCE_DIR) + "/hwprofiles/catalog/" + name;
  docs.emplace_back(name, json::parse_text(json::read_text_file(path), path));
  return docs.back().second;
}

// What price files are applied to: the repository's GPUs, sources and two instance families
// (P3 and P4: on-demand and spot prices, SageMaker names, several sizes), built once. Copying
// this small catalog per input instead of the whole built-in one keeps the price path's cost
// in its own parse and checks; an instance type the base does not hold takes the same
// "unknown instance" path as any other.
const hw::Catalog& price_base() {
  static const hw::Catalog base = [] {
    std::vector<std::pair<std::string, json::Json>> docs;
    for (const char* name : {"gpus.json", "sources.json", "p3.json", "p4.json"})
      docs.emplace_back(std::string("hwprofiles/catalog/") + name, repo_document(name));
    return hw::Catalog::from_documents(std::move(docs));
  }();
  return base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] % 2 == 0) {
      std::vector<std::pair<std::string, json::Json>> docs;
      docs.emplace_back("hwprofiles/catalog/gpus.json", repo_document("gpus.json"));
      docs.emplace_back("hwprofiles/catalog/sources.json", repo_document("sources.json"));
      docs.emplace_back("hwprofiles/catalog/fuzz.json", json::parse_text(text, "hwprofiles/catalog/fuzz.json"));
      const hw::Catalog c = hw::Catalog::from_documents(std::move(docs));
      for (const auto& name : c.instance_names()) (void)hw::to_json(c.instance(name));
    } else {
      hw::Catalog c = price_base();
      c.apply_price_json(json::parse_text(text, "prices.json"), "prices.json");
    }
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
