// validate_export(): an exported text read back the way its framework reads it and checked
// against the rules of export_rules.cpp (known keys and flags, units, enum values, launch
// environment, precision flags, versions, instance types).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "trainplan/core/error.hpp"
#include "trainplan/planner/export_rules.hpp"

namespace trainplan::planner {
namespace {

struct Checker {
  std::vector<ExportViolation> out;
  void fail(std::string_view rule, std::string message) {
    (void)export_rule(rule);
    out.push_back({std::string(rule), std::move(message)});
  }
  void expect(bool ok, std::string_view rule, const std::string& message) {
    if (!ok) fail(rule, message);
  }
};

bool contains(std::span<const std::string_view> list, std::string_view s) { return std::find(list.begin(), list.end(), s) != list.end(); }

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// ---- DeepSpeed ------------------------------------------------------------------------------

// Keys each block of the config may hold (the fields DeepSpeed reads; rule deepspeed.known-keys).
const std::map<std::string, std::set<std::string>>& deepspeed_keys() {
  static const std::map<std::string, std::set<std::string>> keys = {
      {"", {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16", "zero_optimization",
            "tensor_parallel", "activation_checkpointing", "communication_data_type"}},
      {"bf16", {"enabled"}},
      {"fp16", {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale"}},
      {"zero_optimization", {"stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size"}},
      {"tensor_parallel", {"autotp_size"}},
      {"activation_checkpointing",
       {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing", "number_checkpoints",
        "synchronize_checkpoint_boundary", "profile"}},
  };
  return keys;
}

void deepspeed_known_keys(const json::Json& j, Checker& c) {
  for (const auto& [key, value] : j.items()) {
    if (key == "pipeline") {
      c.fail("deepspeed.pipeline-module", "a \"pipeline\" block: its stages/partition are PipelineModule arguments the engine "
                                          "never reads from the config");
      continue;
    }
    const auto& top = deepspeed_keys().at("");
    if (!top.count(key)) {
      c.fail("deepspeed.known-keys", fmt::format("unknown top-level key \"{}\" (DeepSpeed ignores it silently)", key));
      continue;
    }
    const auto block = deepspeed_keys().find(key);
    if (block == deepspeed_keys().end()) continue;
    if (!value.is_object()) {
      c.fail("deepspeed.known-keys", fmt::format("\"{}\" is not an object", key));
      continue;
    }
    for (const auto& [sub, v] : value.items())
      c.expect(block->second.count(sub) > 0, "deepspeed.known-keys", fmt::format("unknown key \"{}.{}\"", key, sub));
  }
}

int64_t int_at(const json::Json& j, const std::string& block, const std::string& key, int64_t missing) {
  const json::Json* v = &j;
  if (!block.empty()) {
    if (!j.contains(block) || !j[block].is_object()) return missing;
    v = &j[block];
  }
  if (!v->contains(key) || !(*v)[key].is_number_integer()) return missing;
  return (*v)[key].get<int64_t>();
}

bool enabled(const json::Json& j, const std::string& block) {
  return j.contains(block) && j[block].is_object() && j[block].contains("enabled") && j[block]["enabled"] == true;
}

void validate_deepspeed(const plan::Plan& p, const plan::PlanContext& ctx, const std::string& text, Checker& c) {
  json::Json j;
  try {
    j = json::parse_text(text, "deepspeed export");
  } catch (const Error& e) {
    c.fail("deepspeed.known-keys", "the config is not JSON: " + e.message());
    return;
  }
  if (!j.is_object()) return c.fail("deepspeed.known-keys", "the config is not a JSON object");
  deepspeed_known_keys(j, c);
  const int64_t micro = int_at(j, "", "train_micro_batch_size_per_gpu", -1), gas = int_at(j, "", "gradient_accumulation_steps", -1);
  c.expect(micro == p.micro_batch && gas == p.num_micro_batches && int_at(j, "", "train_batch_size", -1) == micro * gas * p.dp,
           "deepspeed.batch",
           fmt::format("train_batch_size must be micro-batch {} x accumulation {} x data-parallel size {}", p.micro_batch,
                       p.num_micro_batches, p.dp));
  const int64_t stage = int_at(j, "zero_optimization", "stage", -1);
  c.expect(stage == p.zero_stage, "deepspeed.known-keys", fmt::format("zero_optimization.stage {} is not the plan's {}", stage, p.zero_stage));
  for (const char* key : {"reduce_bucket_size", "allgather_bucket_size"}) {
    const int64_t v = int_at(j, "zero_optimization", key, -2);
    if (v == -2 && !(j.contains("zero_optimization") && j["zero_optimization"].contains(key))) continue;
    c.expect(v == bucket_elements(p, ctx), "deepspeed.bucket-elements",
             fmt::format("zero_optimization.{} must be {} elements ({:.0f} bytes of gradients), got {}", key, bucket_elements(p, ctx),
                         p.bucket_size_bytes, j["zero_optimization"][key].dump()));
  }
  const Precision prec = p.precision_or(ctx.precision);
  c.expect(prec != Precision::fp8, "deepspeed.precision", "an FP8 plan: the config has no FP8 setting");
  c.expect(enabled(j, "bf16") == (prec == Precision::bf16) && enabled(j, "fp16") == (prec == Precision::fp16), "deepspeed.precision",
           fmt::format("the plan trains in {}: bf16.enabled / fp16.enabled must say so", precision_name(prec)));
  const Precision reduce = plan::grad_reduce_precision(p, ctx);
  const std::string comm = j.contains("communication_data_type") && j["communication_data_type"].is_string()
                               ? j["communication_data_type"].get<std::string>()
                               : std::string(precision_name(prec));
  c.expect(comm == "fp32" || comm == "fp16" || comm == "bf16", "deepspeed.communication-data-type",
           fmt::format("communication_data_type \"{}\" is not fp32, fp16 or bf16", comm));
  c.expect(bytes_per_element(parse_precision(comm).value_or(prec)) == bytes_per_element(reduce), "deepspeed.communication-data-type",
           fmt::format("the plan reduces its gradients in {}: communication_data_type must say so (the config reduces in {})",
                       precision_name(reduce), comm));
  const int64_t autotp = int_at(j, "tensor_parallel", "autotp_size", 0);
  c.expect(std::max<int64_t>(autotp, 1) == p.tp, "deepspeed.autotp", fmt::format("tensor_parallel.autotp_size must be tp = {}", p.tp));
  if (autotp > 1) {
    c.expect(stage >= 0 && stage <= 2, "deepspeed.autotp", fmt::format("AutoTP with ZeRO-{}", stage));
    c.expect(p.pp == 1, "deepspeed.autotp", "AutoTP with pipeline parallelism");
  }
  if (p.pp > 1) c.expect(stage <= 1, "deepspeed.pipeline-zero", fmt::format("ZeRO-{} with pipeline parallelism", stage));
}

// ---- Megatron-LM ----------------------------------------------------------------------------

// A flag's value: none (store_true), an integer, any string, or one of a set.
struct FlagKind {
  enum { flag, integer, text, choice } kind = flag;
  std::vector<std::string_view> choices;
};

const std::map<std::string, FlagKind>& megatron_flags() {
  using K = FlagKind;
  static const std::map<std::string, FlagKind> flags = {
      {"--num-layers", {K::integer, {}}}, {"--hidden-size", {K::integer, {}}}, {"--ffn-hidden-size", {K::integer, {}}},
      {"--num-attention-heads", {K::integer, {}}}, {"--group-query-attention", {}}, {"--num-query-groups", {K::integer, {}}},
      {"--seq-length", {K::integer, {}}}, {"--max-position-embeddings", {K::integer, {}}},
      {"--position-embedding-type", {K::choice, {"learned_absolute", "rope", "mrope", "relative", "none"}}},
      {"--normalization", {K::choice, {"LayerNorm", "RMSNorm"}}}, {"--swiglu", {}}, {"--untie-embeddings-and-output-weights", {}},
      {"--disable-bias-linear", {}}, {"--attention-backend", {K::choice, {"flash", "fused", "unfused", "local", "auto"}}},
      {"--tensor-model-parallel-size", {K::integer, {}}}, {"--pipeline-model-parallel-size", {K::integer, {}}},
      {"--context-parallel-size", {K::integer, {}}},
      {"--cp-comm-type", {K::choice, std::vector<std::string_view>(te_cp_comm_types().begin(), te_cp_comm_types().end())}},
      {"--sequence-parallel", {}}, {"--num-layers-per-virtual-pipeline-stage", {K::integer, {}}},
      {"--pipeline-model-parallel-layout", {K::text, {}}}, {"--decoder-first-pipeline-num-layers", {K::integer, {}}},
      {"--decoder-last-pipeline-num-layers", {K::integer, {}}}, {"--micro-batch-size", {K::integer, {}}},
      {"--global-batch-size", {K::integer, {}}}, {"--recompute-granularity", {K::choice, {"full", "selective"}}},
      {"--recompute-method", {K::choice, {"uniform", "block"}}}, {"--recompute-num-layers", {K::integer, {}}},
      {"--use-distributed-optimizer", {}}, {"--use-megatron-fsdp", {}},
      {"--data-parallel-sharding-strategy", {K::choice, {"no_shard", "optim", "optim_grads", "optim_grads_params"}}},
      {"--no-gradient-accumulation-fusion", {}}, {"--ckpt-format", {K::choice, {"torch", "torch_dist", "zarr", "torch_dcp", "fsdp_dtensor"}}},
      {"--overlap-grad-reduce", {}}, {"--ddp-bucket-size", {K::integer, {}}}, {"--bf16", {}}, {"--fp16", {}},
      {"--grad-reduce-in-bf16", {}}, {"--accumulate-allreduce-grads-in-fp32", {}}, {"--fp8-format", {K::choice, {"e4m3", "hybrid"}}},
      {"--fp8-recipe", {K::choice, {"tensorwise", "delayed", "mxfp8", "blockwise", "custom"}}},
      {"--fp8-amax-history-len", {K::integer, {}}}, {"--fp8-amax-compute-algo", {K::choice, {"most_recent", "max"}}},
      {"--fp8-param-gather", {}},
      {"--num-experts", {K::integer, {}}}, {"--moe-router-topk", {K::integer, {}}}, {"--moe-ffn-hidden-size", {K::integer, {}}},
      {"--moe-shared-expert-intermediate-size", {K::integer, {}}}, {"--moe-layer-freq", {K::text, {}}},
      {"--moe-token-dispatcher-type", {K::choice, {"allgather", "alltoall", "flex"}}}, {"--moe-grouped-gemm", {}},
      {"--expert-model-parallel-size", {K::integer, {}}}, {"--moe-expert-capacity-factor", {K::text, {}}},
      {"--moe-pad-expert-input-to-capacity", {}},
  };
  return flags;
}

// The Megatron export read back: the launch environment and the arguments.
struct MegatronText {
  std::map<std::string, std::string> env;
  std::set<std::string> unset;
  std::map<std::string, std::string> args;  // flag -> value ("" for store_true flags)
};

MegatronText read_megatron(const std::string& text, Checker& c) {
  MegatronText m;
  bool in_array = false;
  for (const auto& raw : lines_of(text)) {
    std::string line = trim(raw);
    if (!in_array && line.rfind('#', 0) == 0) continue;
    if (const size_t hash = line.find("  #"); hash != std::string::npos) line = trim(line.substr(0, hash));
    if (line == "MEGATRON_ARGS=(") in_array = true;
    else if (line == ")") in_array = false;
    else if (!in_array && line.rfind("export ", 0) == 0 && line.find('=') != std::string::npos) {
      const std::string kv = line.substr(7);
      m.env[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    } else if (!in_array && line.rfind("unset ", 0) == 0) {
      m.unset.insert(trim(line.substr(6)));
    } else if (in_array && !line.empty()) {
      const size_t space = line.find(' ');
      const std::string flag = line.substr(0, space), value = space == std::string::npos ? "" : trim(line.substr(space + 1));
      c.expect(!m.args.count(flag), "megatron.known-flags", fmt::format("{} given twice", flag));
      m.args[flag] = value;
    }
  }
  return m;
}

bool is_integer(const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }); }

void megatron_known_flags(const MegatronText& m, Checker& c) {
  for (const auto& [flag, value] : m.args) {
    const auto it = megatron_flags().find(flag);
    if (it == megatron_flags().end()) {
      c.fail("megatron.known-flags", fmt::format("unknown flag {}", flag));
      continue;
    }
    const FlagKind& k = it->second;
    const std::string_view rule = flag == "--cp-comm-type" ? "megatron.cp-comm-type"
                                  : flag == "--attention-backend" ? "megatron.attention-backend"
                                                                  : "megatron.known-flags";
    if (k.kind == FlagKind::flag) c.expect(value.empty(), rule, fmt::format("{} takes no value, got \"{}\"", flag, value));
    if (k.kind == FlagKind::integer) c.expect(is_integer(value), rule, fmt::format("{} takes an integer, got \"{}\"", flag, value));
    if (k.kind == FlagKind::text) c.expect(!value.empty(), rule, fmt::format("{} takes a value", flag));
    if (k.kind == FlagKind::choice)
      c.expect(std::find(k.choices.begin(), k.choices.end(), value) != k.choices.end(), rule,
               fmt::format("{} {} is not one of the values it accepts", flag, value));
  }
}

std::string arg_or(const MegatronText& m, const std::string& flag, const std::string& fallback) {
  const auto it = m.args.find(flag);
  return it == m.args.end() ? fallback : it->second;
}

void megatron_data_parallel(const plan::Plan& p, const plan::PlanContext& ctx, const MegatronText& m, Checker& c) {
  const bool fsdp = m.args.count("--use-megatron-fsdp") > 0;
  const std::string strategy = arg_or(m, "--data-parallel-sharding-strategy", "no_shard");
  const std::string want = p.zero_stage == 2 ? "optim_grads" : p.zero_stage == 3 ? "optim_grads_params" : "no_shard";
  c.expect(fsdp == (p.zero_stage >= 2) && strategy == want, "megatron.fsdp",
           fmt::format("ZeRO-{} must be --data-parallel-sharding-strategy {}{}", p.zero_stage, want, fsdp ? "" : " without FSDP"));
  c.expect((m.args.count("--use-distributed-optimizer") > 0) == (p.zero_stage >= 1), "megatron.fsdp",
           fmt::format("ZeRO-{}: --use-distributed-optimizer {}", p.zero_stage, p.zero_stage >= 1 ? "missing" : "given"));
  if (fsdp)
    c.expect(arg_or(m, "--ckpt-format", "") == "fsdp_dtensor" && m.args.count("--no-gradient-accumulation-fusion"), "megatron.fsdp",
             "Megatron-FSDP needs --ckpt-format fsdp_dtensor and --no-gradient-accumulation-fusion");
  const auto one = m.env.find("CUDA_DEVICE_MAX_CONNECTIONS");
  const bool is_one = one != m.env.end() && one->second == "1";
  if (needs_one_cuda_connection(p))
    c.expect(is_one, "megatron.cuda-device-max-connections", "tp or cp > 1: the environment must set CUDA_DEVICE_MAX_CONNECTIONS=1");
  if (fsdp)
    c.expect(!is_one && m.unset.count("CUDA_DEVICE_MAX_CONNECTIONS"), "megatron.cuda-device-max-connections",
             "Megatron-FSDP: CUDA_DEVICE_MAX_CONNECTIONS must not be 1 (unset it)");
  if (p.dp_cp() > 1)
    c.expect(arg_or(m, "--ddp-bucket-size", "") == std::to_string(bucket_elements(p, ctx)), "megatron.ddp-bucket-parameters",
             fmt::format("--ddp-bucket-size must be {} parameters ({:.0f} bytes of gradients), got {}", bucket_elements(p, ctx),
                         p.bucket_size_bytes, arg_or(m, "--ddp-bucket-size", "none")));
}

void validate_megatron(const plan::Plan& p, const plan::PlanContext& ctx, const std::string& text, Checker& c) {
  const MegatronText m = read_megatron(text, c);
  megatron_known_flags(m, c);
  for (const auto& [flag, want] : {std::pair<std::string, int>{"--tensor-model-parallel-size", p.tp},
                                   {"--pipeline-model-parallel-size", p.pp}, {"--context-parallel-size", p.cp},
                                   {"--expert-model-parallel-size", p.ep}})
    c.expect(arg_or(m, flag, "1") == std::to_string(want), "megatron.known-flags", fmt::format("{} must be {}", flag, want));
  if (p.cp > 1)
    c.expect(arg_or(m, "--cp-comm-type", "") == "all_gather", "megatron.cp-comm-type",
             "the plan's context parallelism all-gathers K, V: --cp-comm-type all_gather");
  const Precision prec = p.precision_or(ctx.precision);
  const bool bf16 = m.args.count("--bf16") > 0, fp16 = m.args.count("--fp16") > 0, fp8 = m.args.count("--fp8-format") > 0;
  c.expect(bf16 == (prec == Precision::bf16 || prec == Precision::fp8) && fp16 == (prec == Precision::fp16) &&
               fp8 == (prec == Precision::fp8),
           "megatron.precision", fmt::format("the plan trains in {}: --bf16 / --fp16 / --fp8-format must say so", precision_name(prec)));
  if (prec == Precision::fp8) {
    // Megatron-LM's defaults: --fp8-recipe delayed, --fp8-amax-history-len 1.
    const bool delayed = p.fp8.recipe == plan::Fp8Recipe::delayed;
    c.expect(arg_or(m, "--fp8-recipe", "delayed") == megatron_fp8_recipe(p.fp8.recipe) &&
                 (!delayed || arg_or(m, "--fp8-amax-history-len", "1") == std::to_string(p.fp8.amax_history)) &&
                 (m.args.count("--fp8-param-gather") > 0) == p.fp8.fp8_params,
             "megatron.fp8-recipe",
             fmt::format("the plan's FP8 recipe is {}{}{}: --fp8-recipe {}{}{}", plan::fp8_recipe_name(p.fp8.recipe),
                         delayed ? fmt::format(" with a {}-step amax history", p.fp8.amax_history) : "",
                         p.fp8.fp8_params ? " with FP8 parameters" : "", megatron_fp8_recipe(p.fp8.recipe),
                         delayed ? fmt::format(" --fp8-amax-history-len {}", p.fp8.amax_history) : "",
                         p.fp8.fp8_params ? " --fp8-param-gather" : ""));
  }
  if (p.dp_cp() > 1) {
    // The precision Megatron-LM reduces in with these flags (arguments.py) against the plan's.
    const bool fp32_on_wire = bf16 ? m.args.count("--grad-reduce-in-bf16") == 0 : fp16 && m.args.count("--accumulate-allreduce-grads-in-fp32") > 0;
    const bool plan_fp32 = plan::grad_reduce_precision(p, ctx) == Precision::fp32;
    if (bf16 || fp16)
      c.expect(fp32_on_wire == plan_fp32, "megatron.grad-reduce-bf16",
               fmt::format("the flags reduce {} gradients where the plan costs {}: {}", fp32_on_wire ? "fp32" : "16-bit",
                           plan_fp32 ? "fp32" : "16-bit",
                           bf16 ? (plan_fp32 ? "drop --grad-reduce-in-bf16" : "add --grad-reduce-in-bf16")
                                : (plan_fp32 ? "add --accumulate-allreduce-grads-in-fp32" : "drop --accumulate-allreduce-grads-in-fp32")));
  }
  const int cc = compute_capability(ctx);
  const std::string backend = arg_or(m, "--attention-backend", "auto");
  if (cc > 0 && cc < 80)
    c.expect(backend == "unfused" || backend == "local", "megatron.attention-backend",
             fmt::format("--attention-backend {} on sm{}: only the unfused backend runs below sm80", backend, cc));
  megatron_data_parallel(p, ctx, m, c);
}

// ---- SageMaker ------------------------------------------------------------------------------

// A Python string literal as python_string() writes it, decoded; nullopt for anything else.
std::optional<std::string> python_literal(const std::string& s) {
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') return std::nullopt;
  std::string out;
  for (size_t i = 1; i + 1 < s.size(); ++i) {
    if (s[i] == '\\' && i + 2 < s.size()) ++i;
    out += s[i];
  }
  return out;
}

// A Python dict literal of strings, True/False and integers as JSON.
std::optional<json::Json> python_dict(const std::string& s) {
  std::string text;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"' && (i == 0 || s[i - 1] != '\\')) in_string = !in_string;
    if (!in_string && s.compare(i, 4, "True") == 0) text += "true", i += 3;
    else if (!in_string && s.compare(i, 5, "False") == 0) text += "false", i += 4;
    else text += s[i];
  }
  try {
    return json::parse_text(text, "sagemaker export");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The estimator's keyword arguments (one a line, as the exporter writes them).
std::map<std::string, std::string> read_estimator(const std::string& text) {
  std::map<std::string, std::string> kw;
  bool in_call = false;
  for (const auto& raw : lines_of(text)) {
    const std::string line = trim(raw);
    if (line == "estimator = PyTorch(") in_call = true;
    else if (line == ")") in_call = false;
    else if (in_call && line.find('=') != std::string::npos) {
      std::string value = trim(line.substr(line.find('=') + 1));
      if (!value.empty() && value.back() == ',') value.pop_back();
      kw[line.substr(0, line.find('='))] = value;
    }
  }
  return kw;
}

void validate_sagemaker(const plan::Plan& p, const plan::PlanContext& ctx, const std::string& text, Checker& c) {
  auto kw = read_estimator(text);
  const std::string type = python_literal(kw["instance_type"]).value_or("");
  c.expect(contains(sagemaker_training_instance_types(), type) && type == "ml." + p.instance_type, "sagemaker.instance-types",
           fmt::format("instance_type {} is not a SageMaker training type for the plan's {}", kw["instance_type"], p.instance_type));
  c.expect(kw["instance_count"] == std::to_string(p.instance_count), "sagemaker.instance-types",
           fmt::format("instance_count must be {}", p.instance_count));
  const auto dist = python_dict(kw["distribution"]);
  const json::Json torch_distributed = {{"torch_distributed", {{"enabled", true}}}};
  const json::Json smddp = {{"smdistributed", {{"dataparallel", {{"enabled", true}}}}}};
  c.expect(dist && (*dist == torch_distributed || *dist == smddp), "sagemaker.distribution",
           fmt::format("distribution {} is neither torch_distributed nor smdistributed data parallel", kw["distribution"]));
  c.expect(contains(sagemaker_torch_distributed_versions(), python_literal(kw["framework_version"]).value_or("")),
           "sagemaker.framework-version", fmt::format("framework_version {} is not an exact listed version", kw["framework_version"]));
  if (dist && *dist == smddp) {
    c.expect(contains(sagemaker_smddp_instance_types(), type), "sagemaker.smddp-instance-types",
             fmt::format("smdistributed data parallel on {}", type));
    c.expect(p.tp == 1 && p.pp == 1 && p.cp == 1 && p.zero_stage < 3, "sagemaker.smddp-instance-types",
             "smdistributed data parallel with model parallelism or sharding");
  }
  if (p.dp_cp() > 1 && p.dp_algorithm == plan::DpAlgorithm::smddp)
    c.expect(dist && *dist == smddp, "sagemaker.distribution", "the plan reduces gradients with SMDDP: the distribution must be smdistributed data parallel");
  const int64_t run = is_integer(kw["max_run"]) ? std::stoll(kw["max_run"]) : -1;
  c.expect(run > 0 && run <= 28 * 86400, "sagemaker.max-run", fmt::format("max_run {} is not within 1 s .. 28 days", kw["max_run"]));
  if (kw["use_spot_instances"] == "True")
    c.expect(is_integer(kw["max_wait"]) && std::stoll(kw["max_wait"]) >= run, "sagemaker.max-run", "spot: max_wait must be >= max_run");
  if (needs_one_cuda_connection(p)) {
    const auto env = python_dict(kw["environment"]);
    c.expect(env && env->contains("CUDA_DEVICE_MAX_CONNECTIONS") && (*env)["CUDA_DEVICE_MAX_CONNECTIONS"] == "1",
             "sagemaker.environment", "tp or cp > 1: environment must set CUDA_DEVICE_MAX_CONNECTIONS to \"1\"");
  }
  (void)ctx;
}

// ---- torchrun -------------------------------------------------------------------------------

void validate_torchrun(const plan::Plan& p, const plan::PlanContext& ctx, const std::string& text, Checker& c) {
  std::vector<std::string> words;
  for (const auto& line : lines_of(text))
    if (line.rfind('#', 0) != 0 && line.find("torchrun --nnodes") != std::string::npos && line.rfind("srun", 0) != 0) {
      words = words_of(line);
      break;
    }
  if (words.empty()) return c.fail("torchrun.launch", "no torchrun line");
  std::map<std::string, std::string> env, flags;
  size_t i = 0;
  for (; i < words.size() && words[i] != "torchrun"; ++i) env[words[i].substr(0, words[i].find('='))] = words[i].substr(words[i].find('=') + 1);
  for (++i; i + 1 < words.size(); ++i)
    if (words[i].rfind("--", 0) == 0) flags[words[i]] = words[i + 1];
  c.expect(flags["--nnodes"] == std::to_string(p.instance_count) && flags["--nproc-per-node"] == std::to_string(ctx.instance->gpu_count),
           "torchrun.launch", fmt::format("--nnodes {} --nproc-per-node {} expected", p.instance_count, ctx.instance->gpu_count));
  if (needs_one_cuda_connection(p))
    c.expect(env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1", "megatron.cuda-device-max-connections",
             "tp or cp > 1: the launch environment must set CUDA_DEVICE_MAX_CONNECTIONS=1");
}

}  // namespace

std::vector<ExportViolation> validate_export(const plan::Plan& plan, const plan::PlanContext& ctx, ExportTarget target,
                                             const std::string& text) {
  Checker c;
  switch (target) {
    case ExportTarget::deepspeed: validate_deepspeed(plan, ctx, text, c); break;
    case ExportTarget::megatron: validate_megatron(plan, ctx, text, c); break;
    case ExportTarget::sagemaker: validate_sagemaker(plan, ctx, text, c); break;
    case ExportTarget::torchrun: validate_torchrun(plan, ctx, text, c); break;
  }
  if (plan.dp_cp() > 1 && plan.dp_algorithm == plan::DpAlgorithm::parameter_server)
    c.fail("all.no-parameter-server", "the plan's data-parallel algorithm is a parameter server");
  if (plan.dp_cp() > 1 && plan.dp_algorithm == plan::DpAlgorithm::horovod)
    c.fail("all.no-horovod", "the plan's data-parallel algorithm is Horovod");
  if (plan.dp_cp() > 1 && plan.dp_algorithm == plan::DpAlgorithm::smddp && target != ExportTarget::sagemaker)
    c.fail("all.smddp-sagemaker-only", "the plan's data-parallel algorithm is SMDDP, which runs only in SageMaker");
  return c.out;
}

}  // namespace trainplan::planner
