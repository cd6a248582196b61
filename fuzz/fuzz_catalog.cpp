// libFuzzer target: hardware catalog files (hwprofiles) and user price files applied to the
// built-in catalog. The first byte picks which. A fuzzed catalog file is read beside the
// repository's gpus.json and sources.json, so instance files reach their GPU and source
// checks. Only trainplan::Error may escape.
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

const std::pair<std::string, std::string>& repo_file(const std::string& name) {
  static std::vector<std::pair<std::string, std::string>> files;
  for (const auto& f : files)
    if (f.first == "hwprofiles/catalog/" + name) return f;
  files.emplace_back("hwprofiles/catalog/" + name,
                     json::read_text_file(std::string(TRAINPLAN_SOURCE_DIR) + "/hwprofiles/catalog/" + name));
  return files.back();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] % 2 == 0) {
      const hw::Catalog c =
          hw::Catalog::from_texts({repo_file("gpus.json"), repo_file("sources.json"), {"hwprofiles/catalog/fuzz.json", text}});
      for (const auto& name : c.instance_names()) (void)hw::to_json(c.instance(name));
    } else {
      hw::Catalog c = hw::Catalog::builtin();
      c.apply_price_json(json::parse_text(text, "prices.json"), "prices.json");
    }
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
