// Hugging Face config.json import: the imported models equal the catalog's, and bad configs
// give located errors with hints.
#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::require_located_error;
using trainplan::testing::source_path;

namespace {

std::string hf(const std::string& dir) { return source_path("tests/models/data/hf/" + dir + "/config.json"); }

double params(const ModelSpec& s) { return build_graph(s).total_params(); }

ModelSpec import_text(const std::string& text) {
  return import_hf_config_json(json::parse_text(text, "config.json"), "test", "config.json");
}

}  // namespace

TEST_CASE("models: imported HF configs give the catalog models' parameters and FLOPs", "[models]") {
  const auto& cat = ModelCatalog::builtin();
  struct Case {
    const char* dir;
    const char* catalog_name;
  };
  for (const Case c : {Case{"gpt2", "gpt2-124m"}, Case{"llama-2-7b", "llama2-7b"}, Case{"meta-llama-3-8b", "llama3-8b"},
                       Case{"bert-base-uncased", "bert-base"}}) {
    ModelSpec imported = import_hf_config(hf(c.dir));
    ModelGraph a = build_graph(imported);
    ModelGraph b = build_graph(cat.spec(c.catalog_name));
    INFO(c.dir);
    CHECK(imported.name == c.dir);
    CHECK(a.total_params() == b.total_params());
    CHECK(a.training_flops_per_sample() == b.training_flops_per_sample());
    CHECK(a.saved_bytes_per_sample(Precision::bf16) == b.saved_bytes_per_sample(Precision::bf16));
  }
}

TEST_CASE("models: HF llama and mistral configs map GQA, rope and untied embeddings", "[models]") {
  ModelSpec llama3 = import_hf_config(hf("meta-llama-3-8b"));
  CHECK(llama3.family == Family::llama);
  CHECK(llama3.kv_heads == 8);
  CHECK(llama3.rope_theta == 500000.0);
  CHECK_FALSE(llama3.tied_embeddings);
  CHECK_FALSE(llama3.bias);
  CHECK(llama3.seq_len == 8192);

  // Mistral 7B: 7.24B parameters (mistralai/Mistral-7B-v0.1 model card); the sliding window
  // does not change the count.
  ModelSpec mistral = import_hf_config(hf("mistral-7b"));
  CHECK(mistral.family == Family::llama);
  CHECK(std::fabs(params(mistral) / 7.24e9 - 1) < 0.005);
  CHECK(mistral.seq_len == 32768);
}

TEST_CASE("models: HF gpt2 n_inner null means 4h, n_ctx stands in for n_positions", "[models]") {
  ModelSpec s = import_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_ctx": 32,
                               "vocab_size": 100, "n_inner": null, "some_new_key": [1, 2]})");
  CHECK(s.ffn_hidden == 256);
  CHECK(s.seq_len == 32);
  CHECK(s.tied_embeddings);
  ModelSpec t = import_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32,
                               "vocab_size": 100, "n_inner": 100})");
  CHECK(t.ffn_hidden == 100);
}

TEST_CASE("models: HF config errors name the file, the key and a hint", "[models]") {
  require_located_error([] { (void)import_hf_config(source_path("tests/models/data/bad/truncated-config.json")); },
                        source_path("tests/models/data/bad/truncated-config.json"), "", "invalid JSON");
  REQUIRE_ERROR_CONTAINS(import_hf_config(source_path("tests/models/data/bad/truncated-config.json")), "truncated");
  require_located_error([] { (void)import_text(R"({"model_type": "t5", "d_model": 512})"); }, "config.json",
                        "/model_type", "unsupported model_type \"t5\"");
  REQUIRE_ERROR_CONTAINS(import_text(R"({"model_type": "lama"})"), "did you mean \"llama\"");
  require_located_error([] { (void)import_text(R"({"n_layer": 2})"); }, "config.json", "/",
                        "missing required key \"model_type\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": "768", "n_head": 4, "n_positions": 8, "vocab_size": 10})"); },
      "config.json", "/n_embd", "must be an integer");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gpt2", "n_layer": -2, "n_embd": 64, "n_head": 4, "n_positions": 8, "vocab_size": 10})"); },
      "config.json", "/n_layer", "must be a positive integer, got -2");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 10})"); },
      "config.json", "/", "missing required key \"n_positions\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4000, "num_attention_heads": 48,
                                 "intermediate_size": 100, "vocab_size": 10, "max_position_embeddings": 8})"); },
      "config.json", "/num_attention_heads", "hidden 4000 is not divisible by heads 48");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
                                 "num_key_value_heads": 3, "intermediate_size": 100, "vocab_size": 10, "max_position_embeddings": 8})"); },
      "config.json", "/num_key_value_heads", "not a multiple of kv_heads 3");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
                                 "intermediate_size": 100, "vocab_size": 0, "max_position_embeddings": 8})"); },
      "config.json", "/vocab_size", "must be a positive integer, got 0");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
                                 "intermediate_size": 100, "vocab_size": 10, "max_position_embeddings": 8, "hidden_act": "relu"})"); },
      "config.json", "/hidden_act", "unsupported hidden_act \"relu\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
                                 "vocab_size": 10, "max_position_embeddings": 8})"); },
      "config.json", "/", "missing required key \"intermediate_size\"");
  require_located_error([] { (void)import_text("[1, 2]"); }, "config.json", "/", "must be a JSON object");
}
