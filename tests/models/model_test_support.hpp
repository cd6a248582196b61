// Helpers shared by the models tests.
#pragma once

#include <string>

#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::testing {

/// Runs `fn`, which must throw trainplan::Error formatted as
/// "<file>: <pointer>: <message> — <hint>" with `what` in the message and a non-empty hint.
template <typename Fn>
void require_located_error(Fn&& fn, const std::string& file, const std::string& pointer, const std::string& what) {
  bool thrown = false;
  try {
    fn();
  } catch (const ::trainplan::Error& e) {
    thrown = true;
    INFO("error was: " << e.what());
    CHECK(e.file() == file);
    CHECK(e.pointer() == pointer);
    CHECK(e.message().find(what) != std::string::npos);
    CHECK_FALSE(e.hint_text().empty());
    const std::string prefix = file + ": " + (pointer.empty() ? "" : pointer + ": ");
    CHECK(std::string(e.what()).rfind(prefix, 0) == 0);
    CHECK(std::string(e.what()).find(" \xE2\x80\x94 ") != std::string::npos);
  }
  if (!thrown) FAIL("expected trainplan::Error at " << file << ": " << pointer << ": " << what);
}

/// The config.json of tests/models/data/hf/<dir>.
inline std::string hf(const std::string& dir) { return source_path("tests/models/data/hf/" + dir + "/config.json"); }

/// A Hugging Face config from its text (file name "config.json", model name "test").
inline ::trainplan::models::ModelSpec import_text(const std::string& text) {
  return ::trainplan::models::import_hf_config_json(::trainplan::json::parse_text(text, "config.json"), "test", "config.json");
}

}  // namespace trainplan::testing
