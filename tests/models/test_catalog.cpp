// The built-in catalog: complete, sourced, and covering the published measurements.
#include <set>

#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::shared_path;
using trainplan::testing::source_path;

TEST_CASE("models: the catalog has the required families and sizes, each with a source", "[models]") {
  const auto& cat = ModelCatalog::builtin();
  for (const char* name :
       {"gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b", "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b",
        "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
        "llama3-70b", "llama3-405b", "bert-base", "bert-large", "vit-b-16", "vit-l-16", "resnet-50", "mlp"}) {
    INFO(name);
    CHECK(cat.has(name));
  }
  std::set<std::string> names;
  for (const auto& s : cat.specs()) {
    INFO(s.name);
    CHECK_FALSE(s.display_name.empty());
    CHECK_FALSE(s.source.empty());
    CHECK(s.file.rfind("models/catalog/", 0) == 0);
    CHECK(names.insert(s.name).second);
  }
  CHECK(cat.names().size() == cat.specs().size());
}

TEST_CASE("models: Llama entries use GQA, SwiGLU, RMSNorm and untied embeddings", "[models]") {
  const ModelSpec& s = ModelCatalog::builtin().spec("llama3-70b");
  CHECK(s.kv_heads == 8);
  CHECK(s.activation == Activation::swiglu);
  CHECK(s.norm == Norm::rmsnorm);
  CHECK(s.position == PositionEmbedding::rotary);
  CHECK_FALSE(s.tied_embeddings);
  ModelGraph g = build_graph(s);
  CHECK(g.op_named("block1.norm1").kind == OpKind::rmsnorm);
  CHECK(g.op_named("block1.mlp.fc1").n == 2 * 28672);
  CHECK(g.op_named("block1.attn.qkv").n == (64 + 2 * 8) * 128);
}

TEST_CASE("models: every published configuration in ../shared/validation has a catalog entry", "[models]") {
  // Matches a data point's model (layers, hidden, heads, kv_heads, ffn, vocab) onto the
  // catalog, so `trainplan validate` can map each point onto a model.
  json::Json doc = json::parse_file(shared_path("validation/published-results.json"));
  const auto& cat = ModelCatalog::builtin();
  auto get = [](const json::Json& m, const char* key) -> int64_t {
    return m.contains(key) && m[key].is_number() ? m[key].get<int64_t>() : 0;
  };
  int matched = 0;
  for (const auto& point : doc["data_points"]) {
    const json::Json& m = point["model"];
    if (!m.is_object() || get(m, "layers") == 0 || get(m, "hidden") == 0 || get(m, "heads") == 0) continue;
    const int64_t heads = get(m, "heads");
    const int64_t kv = get(m, "kv_heads") ? get(m, "kv_heads") : heads;
    bool found = false;
    for (const auto& s : cat.specs()) {
      if (s.layers != get(m, "layers") || s.hidden != get(m, "hidden") || s.heads != heads || s.kv_heads != kv) continue;
      if (get(m, "vocab") && s.vocab != get(m, "vocab")) continue;
      if (get(m, "ffn_hidden") && s.ffn_hidden != get(m, "ffn_hidden")) continue;
      found = true;
    }
    INFO(point["id"].get<std::string>() << ": " << m.dump());
    CHECK(found);
    matched += found;
  }
  CHECK(matched > 100);
}

TEST_CASE("models: resolve_model takes a catalog name, an HF config.json or a model JSON file", "[models]") {
  CHECK(resolve_model("gpt3-175b").layers == 96);
  ModelSpec hf = resolve_model(source_path("tests/models/data/hf/llama-2-7b/config.json"));
  CHECK(hf.name == "llama-2-7b");
  CHECK(hf.family == Family::llama);
  ModelSpec own = resolve_model(source_path("tests/models/data/my-gpt.json"));
  CHECK(own.name == "my-gpt-350m");
  CHECK(own.ffn_hidden == 4096);
  CHECK(build_graph(own).total_params() == 12.0 * 24 * 1024 * 1024 + 13.0 * 24 * 1024 + (50304.0 + 2048) * 1024 + 2048);
}

TEST_CASE("models: resolve_model errors suggest the closest catalog name or name the file", "[models]") {
  REQUIRE_ERROR_CONTAINS(resolve_model("gpt3-175"), "unknown model \"gpt3-175\" \xE2\x80\x94 did you mean \"gpt3-175b\"?");
  REQUIRE_ERROR_CONTAINS(resolve_model("llama-3-8b"), "did you mean \"llama3-8b\"?");
  REQUIRE_ERROR_CONTAINS(resolve_model("no/such/dir/config.json"), "no/such/dir/config.json: cannot open the file");
  REQUIRE_ERROR_CONTAINS(resolve_model(source_path("tests/models/data/bad/two-models.json")), "holds 2 models");
}
