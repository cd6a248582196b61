// libFuzzer target: the JSON layer (core/json): parse any bytes, then walk the document with
// the typed Reader the way input files are read (fields, numbers, integers, quantities,
// choices) and print errors. Only trainplan::Error may escape a bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"

using namespace trainplan;

namespace {

void walk(const json::Reader& r, int depth) {
  if (depth > 64) return;
  try {
    if (r.is_object()) {
      for (const auto& [key, child] : r.entries()) walk(child, depth + 1);
      (void)r.number_or("n", 1);
      (void)r.int_or("i", 1);
      (void)r.quantity_or("q", units::Dimension::bytes, 0);
      (void)r.field_or("s", "x");
    } else if (r.is_array()) {
      for (const auto& item : r.items()) walk(item, depth + 1);
    } else if (r.is_number()) {
      (void)r.as_number();
      (void)r.as_positive_int();
    } else if (r.is_string()) {
      (void)r.as_quantity(units::Dimension::duration);
      (void)r.as_choice({"ring", "tree"});
    }
  } catch (const Error& e) {
    (void)e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const json::Json doc = json::parse_text(text, "fuzz.json");
    walk(json::Reader(doc, "fuzz.json"), 0);
    (void)json::dump(doc);
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
