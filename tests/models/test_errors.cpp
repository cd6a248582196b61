// Catalog-format model files: every bad input is an Error "<file>: <pointer>: <what> — <hint>".
#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::require_located_error;

namespace {

std::vector<ModelSpec> parse(const std::string& text) { return parse_model_file(text, "m.json"); }

// One gpt model object with `extra` fields appended (overriding earlier ones is not JSON, so
// tests build the object from pieces).
std::string gpt(const std::string& fields) {
  return R"({"models": [{"name": "x", "family": "gpt", )" + fields + "}]}";
}
const std::string kShape = R"("layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16)";

}  // namespace

TEST_CASE("models: a valid model file parses, with defaults and per-model overrides", "[models]") {
  auto specs = parse(R"({"description": "d", "defaults": {"family": "gpt", "vocab": 100, "seq_len": 16},
                         "models": [{"name": "a", "layers": 2, "hidden": 64, "heads": 4},
                                    {"name": "b", "layers": 3, "hidden": 64, "heads": 8, "seq_len": 32,
                                     "published_params": "1.2M", "kv_heads": 2}]})");
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].seq_len == 16);
  CHECK(specs[0].display_name == "a");
  CHECK(specs[0].ffn_hidden == 256);
  CHECK(specs[0].kv_heads == 4);
  CHECK(specs[1].seq_len == 32);
  CHECK(specs[1].kv_heads == 2);
  CHECK(*specs[1].published_params == 1.2e6);
  CHECK(specs[1].pointer == "/models/1");
  CHECK(specs[1].file == "m.json");
}

TEST_CASE("models: model file errors carry the file, the JSON pointer and a hint", "[models]") {
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "gpt", "layers": 2)"); }, "m.json", "",
                        "invalid JSON");
  REQUIRE_ERROR_CONTAINS(parse(R"({"models": [{"name": "x")"), "truncated");
  require_located_error([] { (void)parse(gpt(R"("layers": "two", "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16)")); },
                        "m.json", "/models/0/layers", "must be an integer, got a string");
  require_located_error([] { (void)parse(gpt(R"("layers": -4, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16)")); },
                        "m.json", "/models/0/layers", "must be a positive integer, got -4");
  require_located_error([] { (void)parse(gpt(R"("layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 0)")); },
                        "m.json", "/models/0/seq_len", "must be a positive integer, got 0");
  require_located_error([] { (void)parse(gpt(R"("layers": 2, "hidden": 1000, "heads": 12, "vocab": 100, "seq_len": 16)")); },
                        "m.json", "/models/0/heads", "hidden 1000 is not divisible by heads 12");
  REQUIRE_ERROR_CONTAINS(parse(gpt(R"("layers": 2, "hidden": 1000, "heads": 12, "vocab": 100, "seq_len": 16)")),
                         "use e.g. 10 or 20 heads");
  require_located_error([] { (void)parse(gpt(kShape + R"(, "kv_heads": 3)")); }, "m.json", "/models/0/kv_heads",
                        "heads 4 is not a multiple of kv_heads 3");
  require_located_error([] { (void)parse(gpt(kShape + R"(, "layer": 3)")); }, "m.json", "/models/0/layer",
                        "unknown field \"layer\"");
  REQUIRE_ERROR_CONTAINS(parse(gpt(kShape + R"(, "layer": 3)")), "did you mean \"layers\"?");
  require_located_error([] { (void)parse(gpt(kShape + R"(, "norm": "batchnorm")")); }, "m.json", "/models/0/norm",
                        "unknown value \"batchnorm\"");
  require_located_error([] { (void)parse(gpt(kShape + R"(, "published_params": -5)")); }, "m.json",
                        "/models/0/published_params", "must not be negative");
  require_located_error([] { (void)parse(gpt(kShape + R"(, "resnet_blocks": [3, 4])")); }, "m.json",
                        "/models/0/resnet_blocks", "does not apply to gpt models");
  require_located_error([] { (void)parse(gpt(R"("layers": 2, "hidden": 64, "heads": 4, "vocab": 100)")); }, "m.json",
                        "/models/0", "missing required field \"seq_len\"");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "layers": 2}]})"); }, "m.json", "/models/0",
                        "missing required field \"family\"");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "transformer"}]})"); }, "m.json",
                        "/models/0/family", "unknown value \"transformer\"");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "llama", "layers": 2, "hidden": 64,
                                           "heads": 4, "vocab": 100, "seq_len": 16}]})"); },
                        "m.json", "/models/0", "missing required field \"ffn_hidden\"");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "vit", "layers": 2, "hidden": 64,
                                           "heads": 4, "image_size": 30, "patch_size": 16, "num_classes": 10}]})"); },
                        "m.json", "/models/0/patch_size", "image_size 30 is not divisible by patch_size 16");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "vit", "layers": 2, "hidden": 64,
                                           "heads": 4, "image_size": 32, "patch_size": 16, "num_classes": 10, "seq_len": 5}]})"); },
                        "m.json", "/models/0/seq_len", "does not apply to vit models");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "mlp", "mlp_widths": [4, 2]}]})"); },
                        "m.json", "/models/0/mlp_widths", "at least 3 widths");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "mlp", "mlp_widths": [4, 0, 2]}]})"); },
                        "m.json", "/models/0/mlp_widths/1", "must be a positive integer, got 0");
  require_located_error([] { (void)parse(R"({"models": [{"name": "x", "family": "resnet", "resnet_blocks": []}]})"); },
                        "m.json", "/models/0/resnet_blocks", "must not be empty");
  require_located_error([] { (void)parse(R"({"defaults": {"family": "gpt", "vocab": -1}, "models": [{"name": "x"}]})"); },
                        "m.json", "/defaults/vocab", "must be a positive integer, got -1");
  require_located_error([] { (void)parse(R"({"defaults": {"family": "gpt", "name": "y"}, "models": [{"name": "x"}]})"); },
                        "m.json", "/defaults/name", "cannot be a default");
  require_located_error([] { (void)parse(R"("gpt")"); }, "m.json", "/", "must be a model object");
}

TEST_CASE("models: a model name defined twice in a catalog is an error naming both files", "[models]") {
  const std::string a = R"({"models": [{"name": "dup", "family": "mlp", "mlp_widths": [4, 8, 2]}]})";
  require_located_error([&] { (void)ModelCatalog::from_texts({{"a.json", a}, {"b.json", a}}); }, "b.json",
                        "/models/0/name", "model \"dup\" is defined twice");
  REQUIRE_ERROR_CONTAINS(ModelCatalog::from_texts({{"a.json", a}, {"b.json", a}}), "already defined in a.json");
}

TEST_CASE("models: build_graph rejects an inconsistent spec built in code", "[models]") {
  ModelSpec s = ModelCatalog::builtin().spec("gpt-tiny");
  s.heads = 5;  // hidden 64
  REQUIRE_ERROR_CONTAINS(build_graph(s), "models/catalog/tiny.json: /models/0/heads: hidden 64 is not divisible by heads 5");
  s = ModelCatalog::builtin().spec("llama-tiny");
  s.heads = 4;
  s.hidden = 12;  // head size 3: rotary needs even
  REQUIRE_ERROR_CONTAINS(build_graph(s), "rotary embeddings need an even head size");
  s = ModelCatalog::builtin().spec("gpt-tiny");
  s.dropout_p = 1.5;
  REQUIRE_ERROR_CONTAINS(build_graph(s), "/dropout_p: dropout_p must be in [0, 1)");
}
