#include "test_support.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/core/strings.hpp"

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

TEST_CASE("json: numbers beyond the range of a double are a located syntax error", "[core]") {
  REQUIRE_ERROR_CONTAINS(json::parse_text("{\n  \"a\": 1e309\n}", "x.json"),
                         "x.json: /a: invalid JSON at line 2, column 8: the number 1e309 is beyond the range of a double");
  REQUIRE_ERROR_CONTAINS(json::parse_text("[-1e400]", "x.json"), "x.json: /0: invalid JSON at line 1, column 2: the number -1e400");
  REQUIRE_ERROR_CONTAINS(json::parse_text(R"({"p": {"q~/": [1, 2, {"r": 1e999}]}})", "x.json"), "x.json: /p/q~0~1/2/r: invalid JSON");
  CHECK(json::parse_text("[1e-400]", "x.json")[0].get<double>() == 0.0);  // underflow is zero
  CHECK(json::parse_text("{\"s\": \"1e999\"}", "x.json")["s"] == "1e999");  // strings are not numbers
}

TEST_CASE("json: nesting deeper than the limit is refused before parsing, with the position", "[core]") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  REQUIRE_ERROR_CONTAINS(json::parse_text(deep, "deep.json"),
                         "deep.json: /0/0/0/0/0/0/0/0/...: invalid JSON at line 1, column 129: nested deeper than 128 levels");
  REQUIRE_ERROR_CONTAINS(json::parse_text(R"({"a": 1, "tp": )" + deep + "}", "p.json"), "p.json: /tp/0/0/0/0/0/0/0/...: invalid JSON");
  const std::string objects = [] {
    std::string s;
    for (int i = 0; i < 200; ++i) s += "{\"a\":";
    s += "1";
    for (int i = 0; i < 200; ++i) s += "}";
    return s;
  }();
  REQUIRE_ERROR_CONTAINS(json::parse_text(objects, "o.json"), "nested deeper than 128 levels");
  // Brackets inside strings do not count.
  CHECK(json::parse_text("{\"s\": \"" + std::string(1000, '[') + "\"}", "s.json")["s"].get<std::string>().size() == 1000);
  const std::string ok = std::string(128, '[') + std::string(128, ']');
  CHECK_NOTHROW(json::parse_text(ok, "ok.json"));
}

TEST_CASE("json: error messages show large or deep values by their size only", "[core]") {
  auto doc = json::parse_text(R"({"a": [[[[1]]], 2, 3], "s": ")" + std::string(500, 'x') + R"("})", "v.json");
  json::Reader r(doc, "v.json");
  REQUIRE_ERROR_CONTAINS(r.field("a").as_string(), "must be a string, got an array (an array of 3 items)");
  std::string message;
  try {
    r.field("s").as_number();
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("...") != std::string::npos);
  CHECK(message.size() < 200);
}

TEST_CASE("json: read_text_file refuses directories and names the path", "[core]") {
  REQUIRE_ERROR_CONTAINS(json::read_text_file("/tmp"), "/tmp: is a directory, not a file");
  REQUIRE_ERROR_CONTAINS(json::parse_file("/tmp"), "/tmp: is a directory");
}

TEST_CASE("strings: shell_quote makes one word whatever the text holds", "[core]") {
  CHECK(shell_quote("train.py") == "train.py");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("$(rm -rf /)") == "'$(rm -rf /)'");
}

TEST_CASE("strings: python_string escapes quotes, backslashes and control characters and refuses bad UTF-8", "[core]") {
  CHECK(python_string("train.py") == "\"train.py\"");
  CHECK(python_string("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(python_string("l1\nl2\t\x01") == "\"l1\\nl2\\t\\x01\"");
  CHECK(python_string("caf\xC3\xA9") == "\"caf\xC3\xA9\"");
  REQUIRE_ERROR_CONTAINS(python_string("bad \xFF byte"), "is not valid UTF-8");
  CHECK(!valid_utf8("\xC0\xAF"));      // overlong
  CHECK(!valid_utf8("\xED\xA0\x80"));  // surrogate
  CHECK(!valid_utf8("\xE2\x82"));      // cut short
  CHECK(valid_utf8("\xF0\x9F\x98\x80"));
  CHECK(comment_text("model\nimport os") == "model\\nimport os");
}
