// Hugging Face config.json import: the imported models equal the catalog's, and bad configs
// give located errors with hints.
#include "model_test_support.hpp"
#include "trainplan/models/model.hpp"

using namespace trainplan;
using namespace trainplan::models;
using trainplan::testing::require_located_error;
using trainplan::testing::hf;
using trainplan::testing::import_text;
using trainplan::testing::source_path;

namespace {

double params(const ModelSpec& s) { return build_graph(s).total_params(); }

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
    set_seq_len(imported, cat.spec(c.catalog_name).seq_len, "--seq-len");
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
  CHECK(llama3.seq_len == kDefaultImportSeqLen);  // not the position limit 8192
  CHECK(llama3.max_positions == 8192);

  // Mistral 7B: 7.24B parameters (mistralai/Mistral-7B-v0.1 model card); the sliding window
  // does not change the count.
  ModelSpec mistral = import_hf_config(hf("mistral-7b"));
  CHECK(mistral.family == Family::llama);
  CHECK(std::fabs(params(mistral) / 7.24e9 - 1) < 0.005);
  CHECK(mistral.seq_len == 4096);
  CHECK(mistral.max_positions == 32768);
  CHECK(mistral.num_local_layers() == 32);
  CHECK(mistral.sliding_window == 4096);
}

TEST_CASE("models: HF gpt2 n_inner null means 4h, n_ctx stands in for n_positions", "[models]") {
  ModelSpec s = import_text(R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_ctx": 32,
                               "vocab_size": 100, "n_inner": null, "some_new_key": [1, 2]})");
  CHECK(s.ffn_hidden == 256);
  CHECK(s.seq_len == 32);  // the default 4096, capped at the position limit
  CHECK(s.max_positions == 32);
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

// Published parameter counts of real configs (the config.json files in tests/models/data/hf
// are copied from each model's Hugging Face repository). Where the source gives an exact count
// the tolerance is 0.5%; rounded labels get a wider one, said on the line.
TEST_CASE("models: imported HF configs match the published parameter counts", "[models]") {
  struct Case {
    const char* dir;
    double published;
    double tolerance;
    const char* source;
  };
  const Case cases[] = {
      {"meta-llama-3.1-8b", 8.03e9, 0.005, "huggingface.co/meta-llama/Llama-3.1-8B safetensors: 8.03B params (card: 8B)"},
      {"mistral-7b", 7.24e9, 0.005, "huggingface.co/mistralai/Mistral-7B-v0.1: 7.24B params"},
      {"qwen2-7b", 7.62e9, 0.005, "Hugging Face hub, Qwen2-7B checkpoints: 7.62B params (the Qwen2 card's 7.07B leaves out the untied 545M output embedding)"},
      {"qwen3-8b", 8.19e9, 0.005, "huggingface.co/Qwen/Qwen3-8B: 8.19B params (model card: 8.2B, 6.95B non-embedding)"},
      {"gemma-7b", 8.54e9, 0.005, "Gemma paper (Gemma Team 2024) Table 1, 7B: 786M embedding + 7,751M non-embedding; hub: 8.54B"},
      {"gemma-2-9b", 9.24e9, 0.005, "huggingface.co/google/gemma-2-9b safetensors: 9.24B params"},
      // The language model of Gemma 3 12B, without the 417M SigLIP vision encoder (Gemma 3
      // technical report, Table 1); keras-hub's gemma3_12b_text preset: 11,765,788,416.
      {"gemma-3-12b-pt", 11765788416.0, 0.005, "keras-team/keras-hub gemma3_presets.py, gemma3_12b_text"},
      {"phi-3-mini-4k", 3.82e9, 0.005, "huggingface.co/microsoft/Phi-3-mini-4k-instruct: 3.82B params (card: 3.8B)"},
      {"gpt-neox-20b", 20554567680.0, 0.005, "huggingface.co/EleutherAI/gpt-neox-20b model card: Parameters 20554567680"},
      {"gpt2", 124e6, 0.005, "huggingface.co/openai-community/gpt2: 124M params"},
      {"gpt2-xl", 1.5e9, 0.04, "huggingface.co/openai-community/gpt2-xl: the 1.5B parameter version (a rounded label)"},
      {"bert-base-uncased", 110e6, 0.01, "Devlin et al. 2019: BERT-base 110M (a rounded label)"},
      {"bert-large-uncased", 340e6, 0.02, "Devlin et al. 2019: BERT-large 340M (a rounded label)"},
  };
  for (const Case& c : cases) {
    INFO(c.dir << " vs " << c.source);
    const double p = params(import_hf_config(hf(c.dir)));
    CHECK(std::fabs(p / c.published - 1) < c.tolerance);
  }
  // Exact closed forms: GPT-2 XL 12Lh^2 + 13Lh + (V + P)h + 2h; GPT-NeoX-20B as its card.
  CHECK(params(import_hf_config(hf("gpt2-xl"))) == 12.0 * 48 * 1600 * 1600 + 13.0 * 48 * 1600 + (50257.0 + 1024) * 1600 + 2 * 1600);
  CHECK(params(import_hf_config(hf("gpt-neox-20b"))) == 20554567680.0);
}

TEST_CASE("models: HF Gemma head_dim, GeGLU, tied embeddings and Gemma 2 norms and soft-caps", "[models]") {
  // Gemma 7B: 16 heads of 256 on hidden 3072, so Q and the attention output are 4096 wide.
  ModelSpec gemma = import_hf_config(hf("gemma-7b"));
  CHECK(gemma.head_dim() == 256);
  CHECK(gemma.activation == Activation::geglu);
  CHECK(gemma.tied_embeddings);  // GemmaConfig's default; the config does not say
  ModelGraph g = build_graph(gemma);
  CHECK(g.op_named("block1.attn.qkv").n == (16 + 2 * 16) * 256);
  CHECK(g.op_named("block1.attn.proj").k == 16 * 256);
  CHECK(g.op_named("block1.attn.proj").n == 3072);
  CHECK(g.op_named("block1.mlp.fc1").n == 2 * 24576);
  CHECK(g.op_named("head.lm").params == 0);

  ModelSpec gemma2 = import_hf_config(hf("gemma-2-9b"));
  CHECK(gemma2.post_norms);
  CHECK(gemma2.attn_softcap == 50.0);
  CHECK(gemma2.logit_softcap == 30.0);
  ModelGraph g2 = build_graph(gemma2);
  CHECK(g2.op_named("block1.attn.post_norm").params == 3584);
  CHECK(g2.op_named("block1.mlp.post_norm").params == 3584);
  // Layers alternate local, global, ... (Gemma2 layer_idx % 2 == 0 is local).
  CHECK(gemma2.num_local_layers() == 21);
  CHECK(g2.op_named("block1.attn.core").window == 4096);
  CHECK(g2.op_named("block2.attn.core").window == 0);
}

TEST_CASE("models: a sliding-window layer costs attention over the window, not the sequence", "[models]") {
  // Gemma 2 9B at 8192 tokens: 21 local layers with a 4096-token window. Against the same
  // model with every layer global, each local layer saves 12 s (s - w) a d FLOPs of QK^T and
  // AV (fwd + bwd) plus softmax 5 + 4 and soft-cap 3 + 3 per score: 15 a s (s - w); and keeps
  // a s (s - w) fewer softmax elements.
  ModelSpec local = import_hf_config(hf("gemma-2-9b"));
  set_seq_len(local, 8192, "--seq-len");
  ModelSpec global = local;
  global.local_layers.clear();
  global.sliding_window = 0;
  const double s = 8192, w = 4096, a = 16, d = 256;
  const double per_layer = 12 * s * (s - w) * a * d + 15 * a * s * (s - w);
  const ModelGraph gl = build_graph(local), gg = build_graph(global);
  CHECK(gg.training_flops_per_sample() - gl.training_flops_per_sample() == Approx(21 * per_layer).epsilon(1e-12));
  CHECK(gg.saved_bytes_per_sample(Precision::bf16) - gl.saved_bytes_per_sample(Precision::bf16) ==
        Approx(21 * a * s * (s - w) * 2).epsilon(1e-12));
  CHECK(gl.total_params() == gg.total_params());
  // At or below the window a local layer costs the same as a global one.
  set_seq_len(local, 4096, "--seq-len");
  set_seq_len(global, 4096, "--seq-len");
  CHECK(build_graph(local).training_flops_per_sample() == build_graph(global).training_flops_per_sample());
}

TEST_CASE("models: HF Gemma 3 reads text_config with Gemma3TextConfig's defaults, 5 local : 1 global", "[models]") {
  ModelSpec s = import_hf_config(hf("gemma-3-12b-pt"));
  CHECK(s.vocab == 262208);          // not in the config: the default
  CHECK(s.max_positions == 131072);  // likewise
  CHECK(s.max_positions_pointer == "/text_config/max_position_embeddings");
  CHECK(s.seq_len == 4096);
  CHECK(s.head_dim() == 256);
  CHECK(s.qk_norm);
  CHECK(s.post_norms);
  CHECK(s.sliding_window == 1024);
  CHECK(s.num_local_layers() == 40);  // layers 6, 12, ..., 48 are global
  CHECK_FALSE(s.local_layers[5]);
  CHECK(s.local_layers[4]);
  CHECK(s.attn_softcap == 0);
  // Q/K norms: 2 x head_dim weights per layer, on the attention op.
  CHECK(build_graph(s).op_named("block1.attn.core").params == 2 * 256);
}

TEST_CASE("models: HF Qwen biases, Q/K norms and the sliding-window layer rule", "[models]") {
  ModelSpec qwen2 = import_hf_config(hf("qwen2-7b"));
  CHECK(qwen2.qkv_bias);
  CHECK_FALSE(qwen2.bias);
  CHECK(qwen2.num_local_layers() == 0);  // use_sliding_window false
  ModelGraph g = build_graph(qwen2);
  CHECK(g.op_named("block1.attn.qkv").params == 3584.0 * (3584 + 2 * 512) + (3584 + 2 * 512));
  CHECK(g.op_named("block1.attn.proj").params == 3584.0 * 3584);
  ModelSpec qwen3 = import_hf_config(hf("qwen3-8b"));
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.qkv_bias);
  // use_sliding_window: layers from max_window_layers on use the window.
  ModelSpec w = import_text(R"({"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                               "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
                               "use_sliding_window": true, "sliding_window": 32, "max_window_layers": 2})");
  CHECK(w.local_layers == std::vector<bool>{false, false, true, true});
  // An explicit layer_types list wins.
  ModelSpec t = import_text(R"({"model_type": "qwen3", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
                               "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, "sliding_window": 16,
                               "layer_types": ["full_attention", "sliding_attention", "full_attention"]})");
  CHECK(t.local_layers == std::vector<bool>{false, true, false});
  CHECK(t.head_dim() == 128);  // Qwen3Config's default head_dim, though hidden / heads = 16
}

TEST_CASE("models: HF GPT-NeoX parallel residual and partial rotary, Phi-3 window", "[models]") {
  ModelSpec neox = import_hf_config(hf("gpt-neox-20b"));
  CHECK(neox.family == Family::gpt);
  CHECK(neox.position == PositionEmbedding::rotary);
  CHECK(neox.parallel_residual);
  CHECK_FALSE(neox.tied_embeddings);
  CHECK_FALSE(neox.dropout);
  CHECK(neox.seq_len == 2048);  // the default 4096 capped at max_position_embeddings
  ModelGraph g = build_graph(neox);
  const Op& att = g.op_named("block1.attn.core");
  CHECK(att.rotary_dims == 24);  // 25% of 96
  // Both branches read the block input; the residual sum is x + attn + mlp.
  const Op& norm2 = g.op_named("block2.norm2");
  CHECK(norm2.inputs == g.op_named("block2.norm1").inputs);
  CHECK(norm2.saved_elems == 0);
  ModelSpec seq = neox;
  seq.parallel_residual = false;
  CHECK(build_graph(seq).total_params() == g.total_params());
  CHECK(build_graph(seq).training_flops_per_sample() == g.training_flops_per_sample());

  ModelSpec phi = import_hf_config(hf("phi-3-mini-4k"));
  CHECK(phi.num_local_layers() == 32);
  CHECK(phi.sliding_window == 2047);
  CHECK_FALSE(phi.tied_embeddings);
}

TEST_CASE("models: the sequence length is a default or --seq-len, never above the position limit", "[models]") {
  ModelSpec llama = import_hf_config(hf("meta-llama-3.1-8b"));
  CHECK(llama.seq_len == 4096);
  CHECK(llama.seq_len_origin == "default");
  CHECK(describe_seq_len(llama) == "4096 (default --seq-len 4096; position limit 131072)");
  set_seq_len(llama, 131072, "--seq-len");
  CHECK(llama.seq_len == 131072);
  CHECK(describe_seq_len(llama) == "131072 (from --seq-len; position limit 131072)");
  require_located_error([&] { set_seq_len(llama, 131073, "--seq-len"); }, hf("meta-llama-3.1-8b"),
                        "/max_position_embeddings", "--seq-len 131073 exceeds the position limit 131072");
  ModelSpec gemma3 = import_hf_config(hf("gemma-3-12b-pt"));
  require_located_error([&] { set_seq_len(gemma3, 200000, "--seq-len"); }, hf("gemma-3-12b-pt"),
                        "/text_config/max_position_embeddings", "exceeds the position limit 131072");
  // BERT: 512 positions; the default is capped there.
  CHECK(import_hf_config(hf("bert-base-uncased")).seq_len == 512);
  // A learned position table keeps its rows when training on shorter sequences.
  ModelSpec gpt2 = import_hf_config(hf("gpt2"));
  const double full = params(gpt2);
  set_seq_len(gpt2, 256, "--seq-len");
  CHECK(params(gpt2) == full);
  CHECK(build_graph(gpt2).op_named("embed.position").weight_shape == std::vector<int64_t>{1024, 768});
  // Catalog models without a position limit take any length.
  ModelSpec cat = ModelCatalog::builtin().spec("llama2-7b");
  set_seq_len(cat, 16384, "--seq-len");
  CHECK(describe_seq_len(cat) == "16384 (from --seq-len)");
}

TEST_CASE("models: HF errors for the new families name the key and list the supported types", "[models]") {
  REQUIRE_ERROR_CONTAINS(import_text(R"({"model_type": "dbrx"})"),
                         "llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, gemma3, phi3, gpt_neox, gpt2, bert, "
                         "mixtral, qwen2_moe, qwen3_moe, deepseek_v3");
  require_located_error([] { (void)import_text(R"({"model_type": "gemma3", "vision_config": {}})"); }, "config.json", "/",
                        "missing required key \"text_config\"");
  require_located_error([] { (void)import_text(R"({"model_type": "gemma3", "text_config": {"hidden_size": 64}})"); },
                        "config.json", "/text_config", "missing required key \"num_hidden_layers\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
                                 "hidden_activation": "silu"})"); },
      "config.json", "/hidden_activation", "unsupported hidden_activation \"silu\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
                                 "layer_types": ["sliding_attention"]})"); },
      "config.json", "/layer_types", "has 1 entries for 2 layers");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
                                 "layer_types": ["sliding_attention", "full_attention"], "sliding_window": null})"); },
      "config.json", "/", "\"sliding_window\" is missing or null");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100})"); },
      "config.json", "/", "missing required key \"max_position_embeddings\"");
  require_located_error(
      [] { (void)import_text(R"({"model_type": "gemma", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, "head_dim": 0})"); },
      "config.json", "/head_dim", "must be a positive integer, got 0");
}

TEST_CASE("models: the catalog format takes the HF variants and gives the imported graph", "[models]") {
  // A small Gemma 2 as a config.json and as a catalog-format model: the same parameters,
  // FLOPs and saved activations.
  ModelSpec hf_spec = import_text(R"({"model_type": "gemma2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                                     "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128, "vocab_size": 100,
                                     "max_position_embeddings": 256, "sliding_window": 16})");
  const std::vector<ModelSpec> own = parse_model_file(
      R"({"name": "g", "family": "llama", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 32,
          "ffn_hidden": 128, "vocab": 100, "seq_len": 256, "max_positions": 256, "activation": "geglu",
          "tied_embeddings": true, "post_norms": true, "sliding_window": 16, "local_layers": [true, false, true, false],
          "attn_softcap": 50, "logit_softcap": 30})",
      "g.json");
  REQUIRE(own.size() == 1);
  set_seq_len(hf_spec, 256, "--seq-len");
  const ModelGraph a = build_graph(hf_spec), b = build_graph(own.front());
  CHECK(a.total_params() == b.total_params());
  CHECK(a.training_flops_per_sample() == b.training_flops_per_sample());
  CHECK(a.saved_bytes_per_sample(Precision::bf16) == b.saved_bytes_per_sample(Precision::bf16));
  require_located_error(
      [] { (void)parse_model_file(R"({"name": "g", "family": "llama", "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128,
                                      "vocab": 100, "seq_len": 64, "sliding_window": 16, "local_layers": [true]})",
                                  "g.json"); },
      "g.json", "/local_layers", "local_layers has 1 entries for 2 layers");
  require_located_error(
      [] { (void)parse_model_file(R"({"name": "g", "family": "gpt", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100,
                                      "seq_len": 512, "max_positions": 256})",
                                  "g.json"); },
      "g.json", "/seq_len", "seq_len 512 exceeds the position limit 256");
}
