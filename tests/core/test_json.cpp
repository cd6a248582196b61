#include "test_support.hpp"
#include "trainplan/core/json.hpp"

using namespace trainplan;

TEST_CASE("json: syntax errors name the file, line and column", "[core]") {
  REQUIRE_ERROR_CONTAINS(json::parse_text("{\n  \"a\": 1,\n  \"b\": \n", "x.json"), "x.json: invalid JSON at line 4");
  REQUIRE_ERROR_CONTAINS(json::parse_text("{\"a\": 1", "x.json"), "truncated");
  REQUIRE_ERROR_CONTAINS(json::parse_file("/nonexistent/file.json"), "/nonexistent/file.json: cannot open");
}

TEST_CASE("json: reader errors carry the JSON pointer and a hint", "[core]") {
  auto doc = json::parse_text(R"({"layers": -4, "name": 3, "nested": {"bw": "12 furlongs"}, "list": [1, "x"]})", "m.json");
  json::Reader r(doc, "m.json");
  REQUIRE_ERROR_CONTAINS(r.field("layers").as_positive_int(), "m.json: /layers: must be a positive integer, got -4");
  REQUIRE_ERROR_CONTAINS(r.field("name").as_string(), "m.json: /name: must be a string, got a number");
  REQUIRE_ERROR_CONTAINS(r.field("nested").field("bw").as_quantity(units::Dimension::bandwidth),
                         "m.json: /nested/bw: unknown unit");
  REQUIRE_ERROR_CONTAINS(r.field("list").items()[1].as_number(), "m.json: /list/1: must be a number");
  REQUIRE_ERROR_CONTAINS(r.field("missing"), "missing required field \"missing\"");
}

TEST_CASE("json: unknown fields are rejected with the closest known name", "[core]") {
  auto doc = json::parse_text(R"({"tp": 2, "ppp": 4})", "plan.json");
  json::Reader r(doc, "plan.json");
  CHECK(r.field("tp").as_int() == 2);
  (void)r.int_or("pp", 1);
  REQUIRE_ERROR_CONTAINS(r.finish(), "plan.json: /ppp: unknown field \"ppp\" \xE2\x80\x94 did you mean \"pp\"?");
}

TEST_CASE("json: choices suggest the closest value", "[core]") {
  auto doc = json::parse_text(R"({"schedule": "1fb1"})", "p.json");
  json::Reader r(doc, "p.json");
  REQUIRE_ERROR_CONTAINS(r.field("schedule").as_choice({"gpipe", "1f1b", "interleaved-1f1b"}), "did you mean \"1f1b\"");
}

TEST_CASE("json: dump is deterministic and keeps insertion order", "[core]") {
  json::Json a;
  a["z"] = 1;
  a["a"] = {1.5, 2};
  CHECK(json::dump(a) == "{\n \"z\": 1,\n \"a\": [\n  1.5,\n  2\n ]\n}\n");
}

TEST_CASE("json: a number beyond double range is an error naming the file, not an internal error", "[core]") {
  // Found by fuzz/fuzz_json: nlohmann throws out_of_range (406), not parse_error.
  REQUIRE_ERROR_CONTAINS(json::parse_text(R"({"tokens": 1e309})", "plan.json"), "plan.json: number overflow parsing '1e309'");
  REQUIRE_ERROR_CONTAINS(json::parse_text("[-1e400]", "x.json"), "beyond the range of a double");
}
