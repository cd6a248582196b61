// libFuzzer target: plan files (plan): parse, resolve against the built-in catalogs, validate.
// Plans naming a model file (a path) are left out: the fuzzer must not read the file system.
// Only trainplan::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/plan.hpp"

using namespace trainplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const json::Json doc = json::parse_text(text, "plan.json");
    plan::Plan p = plan::parse_plan(doc, "plan.json");
    if (p.model.find('/') != std::string::npos || p.model.find(".json") != std::string::npos) return 0;
    plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
    plan::validate(p, ctx, "plan.json");
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
