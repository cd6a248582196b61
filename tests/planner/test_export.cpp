// Exports the real tools accept (issue 14, section 6): each rule of export_rules.cpp asserted
// with its framework source named in the test, the validator catching each class of mistake,
// a dozen ordinary plans through every target (each export passes the validator or is refused
// naming a rule), and `plan --for TARGET` returning only plans whose export passes.
#include <fmt/format.h>

#include <set>
#include <string>

#include "plan_fixture.hpp"
#include "test_support.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/export_rules.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;
using planner::ExportTarget;

namespace {

constexpr ExportTarget kTargets[] = {ExportTarget::deepspeed, ExportTarget::megatron, ExportTarget::sagemaker, ExportTarget::torchrun};

using Resolved = trainplan::testing::ResolvedPlan;

// A plan from its JSON text, resolved against the built-in catalog, with a predicted time
// (SageMaker's max_run comes from it).
Resolved resolved(const std::string& text) {
  plan::Plan p = plan::parse_plan(json::parse_text(text, "test plan"), "test plan");
  p.predicted = {{"time_to_train_s", 86400.0}};
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "test plan");
  return {std::move(p), std::move(ctx)};
}

std::string exported(const Resolved& r, ExportTarget t, const planner::ExportOptions& o = {}) {
  return planner::export_plan(r.plan, r.ctx, t, o);
}

std::set<std::string> broken_rules(const Resolved& r, ExportTarget t, const std::string& text) {
  std::set<std::string> rules;
  for (const auto& v : planner::validate_export(r.plan, r.ctx, t, text)) rules.insert(v.rule);
  return rules;
}

// The rule a refusal names ("... [rule deepspeed.autotp]"), or "" when it names none.
std::string refusal_rule(const Resolved& r, ExportTarget t, const planner::ExportOptions& o = {}) {
  try {
    (void)exported(r, t, o);
  } catch (const Error& e) {
    const std::string m = e.message();
    const size_t at = m.rfind("[rule ");
    return at == std::string::npos ? "" : m.substr(at + 6, m.find(']', at) - at - 6);
  }
  return "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

const char* kLlama7bTp = R"({"schema_version": 1, "model": "llama2-7b", "cluster": {"instance_type": "p4d.24xlarge", "count": 2},
  "parallelism": {"dp": 4, "tp": 4, "pp": 1, "zero_stage": 1, "sequence_parallel": true},
  "batch": {"global_batch": 256, "micro_batch": 2}, "training": {"tokens": "1T"}})";
const char* kGptDp = R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "p4d.24xlarge", "count": 2},
  "parallelism": {"dp": 16, "tp": 1, "pp": 1, "zero_stage": 0}, "batch": {"global_batch": 512, "micro_batch": 4},
  "data_parallel": {"algorithm": "hierarchical", "bucket_size_bytes": 25000000}, "training": {"tokens": "26B"}})";
const char* kGptPipeline = R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "p4d.24xlarge", "count": 2},
  "parallelism": {"dp": 4, "tp": 1, "pp": 4, "zero_stage": 1}, "batch": {"global_batch": 64, "micro_batch": 2},
  "recompute": "full", "schedule": "1f1b", "training": {"tokens": "26B"}})";
const char* kLlama70bCp = R"({"schema_version": 1, "model": "llama3-70b", "cluster": {"instance_type": "p5.48xlarge", "count": 8},
  "parallelism": {"dp": 2, "tp": 4, "pp": 4, "cp": 2, "vp": 5, "zero_stage": 1, "sequence_parallel": true},
  "batch": {"global_batch": 128, "micro_batch": 1, "seq_len": 8192}, "schedule": "interleaved-1f1b", "training": {"tokens": "1T"}})";
const char* kGpt13bV100 = R"({"schema_version": 1, "model": "gpt3-13b", "cluster": {"instance_type": "p3.16xlarge", "count": 2},
  "parallelism": {"dp": 4, "tp": 4, "pp": 1, "zero_stage": 0}, "batch": {"global_batch": 64, "micro_batch": 1},
  "recompute": "full", "training": {"tokens": "10B"}})";
const char* kLlama7bFp8 = R"({"schema_version": 1, "model": "llama2-7b", "cluster": {"instance_type": "p5.48xlarge", "count": 1},
  "parallelism": {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 1}, "batch": {"global_batch": 256, "micro_batch": 2},
  "precision": "fp8", "training": {"tokens": "1T"}})";
const char* kLlama7bZero3 = R"({"schema_version": 1, "model": "llama2-7b", "cluster": {"instance_type": "p4d.24xlarge", "count": 2},
  "parallelism": {"dp": 16, "tp": 1, "pp": 1, "zero_stage": 3}, "batch": {"global_batch": 256, "micro_batch": 2},
  "recompute": "full", "training": {"tokens": "1T"}})";

}  // namespace

// ---- The rules table -------------------------------------------------------------------------

TEST_CASE("export rules: every rule has a unique id, a statement and a framework source with its version", "[planner][export]") {
  std::set<std::string_view> ids;
  for (const auto& r : planner::export_rules()) {
    INFO(r.id);
    CHECK(ids.insert(r.id).second);
    CHECK(r.rule.size() > 20);
    CHECK(r.source.find('/') != std::string_view::npos);  // a file of the framework's tree
  }
  CHECK(ids.size() >= 20);
}

TEST_CASE("export rules: planner/README.md lists every rule with its source", "[planner][export]") {
  const std::string readme = json::read_text_file(testing::source_path("planner/README.md"));
  for (const auto& r : planner::export_rules()) {
    INFO(r.id);
    CHECK(readme.find(fmt::format("| `{}` |", r.id)) != std::string::npos);
    std::string source(r.source);
    for (size_t at = source.find('|'); at != std::string::npos; at = source.find('|', at + 2)) source.insert(at, "\\");
    CHECK(readme.find(source) != std::string::npos);
  }
}

// ---- DeepSpeed -------------------------------------------------------------------------------

TEST_CASE("export: DeepSpeed bucket sizes count elements (deepspeed/runtime/zero/config.py reduce_bucket_size)", "[planner][export]") {
  const Resolved r = resolved(kGptDp);  // bf16: 25 MB of gradients = 12.5 M elements
  const std::string text = exported(r, ExportTarget::deepspeed);
  const json::Json j = json::parse_text(text, "deepspeed");
  CHECK(j["zero_optimization"]["reduce_bucket_size"] == 12500000);
  CHECK(broken_rules(r, ExportTarget::deepspeed, text).empty());
  // The bytes written as elements are caught.
  const std::string bytes = replaced(text, "\"reduce_bucket_size\": 12500000", "\"reduce_bucket_size\": 25000000");
  CHECK(broken_rules(r, ExportTarget::deepspeed, bytes).count("deepspeed.bucket-elements") == 1);
}

TEST_CASE("export: DeepSpeed pipeline stages are PipelineModule arguments, not config keys (deepspeed/runtime/config.py "
          "get_pipeline_config)",
          "[planner][export]") {
  const Resolved r = resolved(kGptPipeline);
  const std::string text = exported(r, ExportTarget::deepspeed);
  const json::Json j = json::parse_text(text, "deepspeed");
  CHECK(!j.contains("pipeline"));
  const auto notes = planner::export_notes(r.plan, r.ctx, ExportTarget::deepspeed);
  REQUIRE(!notes.empty());
  CHECK(notes.front().find("PipelineModule(layers, num_stages=4") != std::string::npos);
  CHECK(notes.front().find("activation_checkpoint_interval=1") != std::string::npos);
  const std::string with_block = replaced(text, "\"train_batch_size\"", "\"pipeline\": {\"stages\": 4}, \"train_batch_size\"");
  CHECK(broken_rules(r, ExportTarget::deepspeed, with_block).count("deepspeed.pipeline-module") == 1);
  const std::string unknown = replaced(text, "\"stage\": 1", "\"stage\": 1, \"stages\": 4");
  CHECK(broken_rules(r, ExportTarget::deepspeed, unknown).count("deepspeed.known-keys") == 1);
}

TEST_CASE("export: DeepSpeed tensor parallelism is AutoTP with ZeRO 0-2 (deepspeed/runtime/tensor_parallel/config.py, "
          "config-json.md)",
          "[planner][export]") {
  Resolved r = resolved(kLlama7bTp);
  r.plan.sequence_parallel = false;
  const std::string text = exported(r, ExportTarget::deepspeed);
  CHECK(json::parse_text(text, "deepspeed")["tensor_parallel"]["autotp_size"] == 4);
  CHECK(broken_rules(r, ExportTarget::deepspeed, text).empty());
  r.plan.zero_stage = 3;
  CHECK(refusal_rule(r, ExportTarget::deepspeed) == "deepspeed.autotp");
  // Megatron-style sequence parallelism has no DeepSpeed counterpart.
  r.plan.zero_stage = 1;
  r.plan.sequence_parallel = true;
  CHECK(refusal_rule(r, ExportTarget::deepspeed) == "deepspeed.sequence-parallel");
}

TEST_CASE("export: DeepSpeed exports a hierarchical all-reduce and selective recomputation (NCCL and the model choose them)",
          "[planner][export]") {
  Resolved r = resolved(kGptDp);
  r.plan.recompute = plan::Recompute::selective;
  const std::string text = exported(r, ExportTarget::deepspeed);
  CHECK(broken_rules(r, ExportTarget::deepspeed, text).empty());
  const auto notes = planner::export_notes(r.plan, r.ctx, ExportTarget::deepspeed);
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("attention core") != std::string::npos; }));
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("hierarchical") != std::string::npos; }));
}

TEST_CASE("export: DeepSpeed refuses FP8, which its config cannot switch on (config-json.md has only bf16 and fp16)",
          "[planner][export]") {
  const Resolved r = resolved(kLlama7bFp8);
  CHECK(refusal_rule(r, ExportTarget::deepspeed) == "deepspeed.precision");
}

// ---- Megatron-LM -----------------------------------------------------------------------------

TEST_CASE("export: Megatron context parallelism is --cp-comm-type all_gather, as Transformer Engine spells it "
          "(context_parallel.py attn_forward_func_with_cp)",
          "[planner][export]") {
  const Resolved r = resolved(kLlama70bCp);
  const std::string text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--cp-comm-type all_gather\n") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  const std::string megatron_help_spelling = replaced(text, "--cp-comm-type all_gather", "--cp-comm-type allgather");
  CHECK(broken_rules(r, ExportTarget::megatron, megatron_help_spelling).count("megatron.cp-comm-type") == 1);
}

TEST_CASE("export: tensor or context parallelism sets CUDA_DEVICE_MAX_CONNECTIONS=1 for Megatron, torchrun and SageMaker "
          "(megatron/training/arguments.py validate_args)",
          "[planner][export]") {
  const Resolved r = resolved(kLlama7bTp);
  const std::string meg = exported(r, ExportTarget::megatron);
  CHECK(meg.find("export CUDA_DEVICE_MAX_CONNECTIONS=1") != std::string::npos);
  const std::string tr = exported(r, ExportTarget::torchrun);
  CHECK(tr.find("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 2") != std::string::npos);
  const std::string sm = exported(r, ExportTarget::sagemaker);
  CHECK(sm.find("environment={\"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\"}") != std::string::npos);
  for (auto [t, text] : {std::pair{ExportTarget::megatron, meg}, {ExportTarget::torchrun, tr}, {ExportTarget::sagemaker, sm}}) {
    INFO(planner::export_target_name(t));
    CHECK(broken_rules(r, t, text).empty());
  }
  const std::string unset = replaced(meg, "export CUDA_DEVICE_MAX_CONNECTIONS=1", "");
  CHECK(broken_rules(r, ExportTarget::megatron, unset).count("megatron.cuda-device-max-connections") == 1);
  const std::string bare = replaced(tr, "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun", "torchrun");
  CHECK(broken_rules(r, ExportTarget::torchrun, bare).count("megatron.cuda-device-max-connections") == 1);
}

TEST_CASE("export: Megatron --ddp-bucket-size counts parameters and bf16 reduces 16-bit gradients "
          "(distributed_data_parallel_config.py bucket_size, arguments.py)",
          "[planner][export]") {
  const Resolved r = resolved(kGptDp);
  const std::string text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--ddp-bucket-size 12500000\n") != std::string::npos);
  CHECK(text.find("--grad-reduce-in-bf16\n") != std::string::npos);
  const std::string bytes = replaced(text, "--ddp-bucket-size 12500000", "--ddp-bucket-size 25000000");
  CHECK(broken_rules(r, ExportTarget::megatron, bytes).count("megatron.ddp-bucket-parameters") == 1);
  const std::string fp32_grads = replaced(text, "  --grad-reduce-in-bf16\n", "");
  CHECK(broken_rules(r, ExportTarget::megatron, fp32_grads).count("megatron.grad-reduce-bf16") == 1);
}

TEST_CASE("export: the gradients' precision on the wire follows the plan: megatron-lm's fp32 default, --grad-reduce-in-bf16, "
          "--accumulate-allreduce-grads-in-fp32, DeepSpeed communication_data_type",
          "[planner][export]") {
  auto with = [](const std::string& software, const char* precision, const char* grad_reduce) {
    json::Json doc = json::parse_text(kGptDp, "plan.json");
    doc["software"] = software;
    doc["precision"] = precision;
    if (grad_reduce) doc["data_parallel"]["grad_reduce"] = grad_reduce;
    return resolved(doc.dump());
  };
  // megatron-lm under bf16 costs fp32 gradients: Megatron-LM's own default, no flag; its
  // buckets hold half as many parameters as bytes / 2.
  const Resolved mlm = with("megatron-lm", "bf16", nullptr);
  const std::string mtext = exported(mlm, ExportTarget::megatron);
  CHECK(mtext.find("--grad-reduce-in-bf16") == std::string::npos);
  CHECK(mtext.find("--ddp-bucket-size 6250000\n") != std::string::npos);  // 25 MB of fp32 gradients
  CHECK(broken_rules(mlm, ExportTarget::megatron, mtext).empty());
  const std::string forced = replaced(mtext, "  --bf16\n", "  --bf16\n  --grad-reduce-in-bf16\n");
  CHECK(broken_rules(mlm, ExportTarget::megatron, forced).count("megatron.grad-reduce-bf16") == 1);
  // fp16 with fp32 reductions asks Megatron-LM for them.
  const Resolved f16 = with("megatron-core", "fp16", "fp32");
  const std::string ftext = exported(f16, ExportTarget::megatron);
  CHECK(ftext.find("--accumulate-allreduce-grads-in-fp32\n") != std::string::npos);
  CHECK(broken_rules(f16, ExportTarget::megatron, ftext).empty());
  CHECK(broken_rules(f16, ExportTarget::megatron, replaced(ftext, "  --accumulate-allreduce-grads-in-fp32\n", ""))
            .count("megatron.grad-reduce-bf16") == 1);
  // DeepSpeed: the training precision unless the plan says otherwise.
  const Resolved ds = with("deepspeed", "bf16", nullptr);
  const std::string dtext = exported(ds, ExportTarget::deepspeed);
  CHECK(dtext.find("communication_data_type") == std::string::npos);
  CHECK(broken_rules(ds, ExportTarget::deepspeed, dtext).empty());
  const Resolved ds32 = with("deepspeed", "bf16", "fp32");
  const json::Json j = json::parse_text(exported(ds32, ExportTarget::deepspeed), "deepspeed");
  CHECK(j["communication_data_type"] == "fp32");
  CHECK(j["zero_optimization"]["reduce_bucket_size"] == 6250000);
  CHECK(broken_rules(ds32, ExportTarget::deepspeed, dtext).count("deepspeed.communication-data-type") == 1);
}

TEST_CASE("export: an FP8 plan exports --bf16 with --fp8-format, not fp32 (arguments.py _add_transformer_engine_args)",
          "[planner][export]") {
  const Resolved r = resolved(kLlama7bFp8);
  const std::string text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--bf16\n") != std::string::npos);
  CHECK(text.find("--fp8-format hybrid\n") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  const std::string no_fp8 = replaced(text, "  --fp8-format hybrid\n", "");
  CHECK(broken_rules(r, ExportTarget::megatron, no_fp8).count("megatron.precision") == 1);
}

TEST_CASE("export: Megatron carries the plan's FP8 recipe (arguments.py _add_transformer_engine_args, TE recipe defaults)",
          "[planner][export][fp8]") {
  Resolved r = resolved(kLlama7bFp8);
  struct Case {
    plan::Fp8Options fp8;
    std::vector<std::string> present, absent;
  };
  const Case cases[] = {
      {{plan::Fp8Recipe::delayed, 1024, false},
       {"--fp8-format hybrid\n", "--fp8-recipe delayed\n", "--fp8-amax-history-len 1024\n", "--fp8-amax-compute-algo max\n"},
       {"--fp8-param-gather"}},
      {{plan::Fp8Recipe::current, 1024, true},
       {"--fp8-format hybrid\n", "--fp8-recipe tensorwise\n", "--fp8-param-gather\n"},
       {"--fp8-amax-history-len"}},
      {{plan::Fp8Recipe::blockwise, 1024, false}, {"--fp8-format e4m3\n", "--fp8-recipe blockwise\n"}, {"--fp8-amax", "--fp8-param-gather"}},
  };
  for (const Case& c : cases) {
    CAPTURE(plan::fp8_recipe_name(c.fp8.recipe));
    r.plan.fp8 = c.fp8;
    const std::string text = exported(r, ExportTarget::megatron);
    for (const auto& s : c.present) CHECK(text.find(s) != std::string::npos);
    for (const auto& s : c.absent) CHECK(text.find(s) == std::string::npos);
    CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  }
  // The validator catches an export that loses the recipe, the history or the FP8 parameters.
  r.plan.fp8 = {plan::Fp8Recipe::current, 1024, true};
  const std::string text = exported(r, ExportTarget::megatron);
  CHECK(broken_rules(r, ExportTarget::megatron, replaced(text, "--fp8-recipe tensorwise", "--fp8-recipe delayed"))
            .count("megatron.fp8-recipe") == 1);
  CHECK(broken_rules(r, ExportTarget::megatron, replaced(text, "  --fp8-param-gather\n", "")).count("megatron.fp8-recipe") == 1);
  r.plan.fp8 = {plan::Fp8Recipe::delayed, 16, false};
  const std::string delayed = exported(r, ExportTarget::megatron);
  CHECK(broken_rules(r, ExportTarget::megatron, replaced(delayed, "  --fp8-amax-history-len 16\n", "")).count("megatron.fp8-recipe") == 1);
}

TEST_CASE("export: Megatron on a V100 refuses flash attention and exports the unfused backend (TransformerEngine "
          "dot_product_attention/utils.py, sm80)",
          "[planner][export]") {
  Resolved r = resolved(kGpt13bV100);
  CHECK(refusal_rule(r, ExportTarget::megatron) == "megatron.attention-backend");
  r.plan.attention = plan::AttentionImpl::unfused;
  const std::string text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--attention-backend unfused\n") != std::string::npos);
  CHECK(text.find("--fp16\n") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  const std::string flash = replaced(text, "--attention-backend unfused", "--attention-backend flash");
  CHECK(broken_rules(r, ExportTarget::megatron, flash).count("megatron.attention-backend") == 1);
}

TEST_CASE("export: Megatron ZeRO-2 and ZeRO-3 are Megatron-FSDP (megatron-fsdp-user-guide.md, arguments.py)", "[planner][export]") {
  Resolved r = resolved(kLlama7bZero3);
  std::string text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--use-megatron-fsdp\n") != std::string::npos);
  CHECK(text.find("--data-parallel-sharding-strategy optim_grads_params\n") != std::string::npos);
  CHECK(text.find("--ckpt-format fsdp_dtensor\n") != std::string::npos);
  CHECK(text.find("unset CUDA_DEVICE_MAX_CONNECTIONS") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  r.plan.zero_stage = 2;
  text = exported(r, ExportTarget::megatron);
  CHECK(text.find("--data-parallel-sharding-strategy optim_grads\n") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::megatron, text).empty());
  const std::string wrong = replaced(text, "optim_grads\n", "optim_grads_params\n");
  CHECK(broken_rules(r, ExportTarget::megatron, wrong).count("megatron.fsdp") == 1);
}

TEST_CASE("export: the Megatron validator refuses flags argparse does not define (megatron/training/arguments.py)",
          "[planner][export]") {
  const Resolved r = resolved(kGptDp);
  const std::string text = replaced(exported(r, ExportTarget::megatron), "  --bf16\n", "  --bf16\n  --bucket-size-bytes 25000000\n");
  CHECK(broken_rules(r, ExportTarget::megatron, text).count("megatron.known-flags") == 1);
}

// ---- SageMaker -------------------------------------------------------------------------------

TEST_CASE("export: SageMaker framework_version must be an exact listed version (sagemaker-python-sdk fw_utils.py "
          "TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS)",
          "[planner][export]") {
  const Resolved r = resolved(kGptDp);
  const std::string text = exported(r, ExportTarget::sagemaker);
  CHECK(text.find("framework_version=\"2.2.0\"") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::sagemaker, text).empty());
  planner::ExportOptions o;
  o.framework_version = "2.2";
  try {
    (void)exported(r, ExportTarget::sagemaker, o);
    FAIL("framework_version 2.2 was accepted");
  } catch (const Error& e) {
    CHECK(e.file() == "--framework-version");
    CHECK(e.hint_text().find("2.2.0") != std::string::npos);
  }
  const std::string alias = replaced(text, "framework_version=\"2.2.0\"", "framework_version=\"2.2\"");
  CHECK(broken_rules(r, ExportTarget::sagemaker, alias).count("sagemaker.framework-version") == 1);
}

TEST_CASE("export: SageMaker trains on ml.p5e.48xlarge, which has no on-demand price (SageMaker API TrainingInstanceType)",
          "[planner][export]") {
  Resolved r = resolved(R"({"schema_version": 1, "model": "llama2-7b", "cluster": {"instance_type": "p5e.48xlarge", "count": 1},
    "parallelism": {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 1}, "batch": {"global_batch": 256, "micro_batch": 2},
    "training": {"tokens": "1T"}})");
  const std::string text = exported(r, ExportTarget::sagemaker);
  CHECK(text.find("instance_type=\"ml.p5e.48xlarge\"") != std::string::npos);
  CHECK(broken_rules(r, ExportTarget::sagemaker, text).empty());
  // A DGX reference cluster is no SageMaker type.
  Resolved dgx = resolved(R"({"schema_version": 1, "model": "llama2-7b", "cluster": {"instance_type": "dgx-a100-80gb", "count": 1},
    "parallelism": {"dp": 8, "tp": 1, "pp": 1}, "batch": {"global_batch": 256, "micro_batch": 2}, "training": {"tokens": "1T"}})");
  CHECK(refusal_rule(dgx, ExportTarget::sagemaker) == "sagemaker.instance-types");
}

TEST_CASE("export: SageMaker runs sequence, context and interleaved pipeline parallelism through torch_distributed, not SMP v1 "
          "(fw_utils.py validate_mp_config)",
          "[planner][export]") {
  const Resolved r = resolved(kLlama70bCp);
  const std::string text = exported(r, ExportTarget::sagemaker);
  CHECK(text.find("distribution={\"torch_distributed\": {\"enabled\": True}}") != std::string::npos);
  CHECK(text.find("modelparallel") == std::string::npos);
  CHECK(text.find("PDT") == std::string::npos);
  CHECK(broken_rules(r, ExportTarget::sagemaker, text).empty());
  const std::string smp_v1 = replaced(text, "{\"torch_distributed\": {\"enabled\": True}}",
                                      "{\"smdistributed\": {\"modelparallel\": {\"enabled\": True}}, \"mpi\": {\"enabled\": True}}");
  CHECK(broken_rules(r, ExportTarget::sagemaker, smp_v1).count("sagemaker.distribution") == 1);
}

TEST_CASE("export: SageMaker smdistributed data parallel only on its instance types and without model parallelism (fw_utils.py "
          "SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES)",
          "[planner][export]") {
  planner::ExportOptions o;
  o.smddp = true;
  const Resolved dp = resolved(kGptDp);
  const std::string text = exported(dp, ExportTarget::sagemaker, o);
  CHECK(broken_rules(dp, ExportTarget::sagemaker, text).empty());
  CHECK(refusal_rule(resolved(kLlama7bTp), ExportTarget::sagemaker, o) == "sagemaker.smddp-instance-types");
  const Resolved g5 = resolved(R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "g5.12xlarge", "count": 2},
    "parallelism": {"dp": 8, "tp": 1, "pp": 1}, "batch": {"global_batch": 64, "micro_batch": 2}, "training": {"tokens": "26B"}})");
  CHECK(refusal_rule(g5, ExportTarget::sagemaker, o) == "sagemaker.smddp-instance-types");
}

// ---- Every target, a dozen ordinary plans ------------------------------------------------------

TEST_CASE("export: a dozen ordinary plans through every target pass the rules or are refused naming a rule", "[planner][export]") {
  const std::vector<std::string> plans = {
      kLlama7bTp, kGptDp, kGptPipeline, kLlama70bCp, kGpt13bV100, kLlama7bFp8, kLlama7bZero3,
      // gpt3-1.3b, ZeRO-2, selective recomputation, tree, on A10G.
      R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "g5.12xlarge", "count": 2},
        "parallelism": {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 2}, "batch": {"global_batch": 64, "micro_batch": 2}, "recompute": "selective",
        "data_parallel": {"algorithm": "tree"}, "training": {"tokens": "26B"}})",
      // ResNet-50 in fp16 on V100s.
      R"({"schema_version": 1, "model": "resnet-50", "cluster": {"instance_type": "p3.16xlarge", "count": 1},
        "parallelism": {"dp": 8, "tp": 1, "pp": 1}, "batch": {"global_batch": 256, "micro_batch": 32}, "training": {"tokens": "1B"}})",
      // llama3-8b with context parallelism on p5e, ZeRO-1.
      R"({"schema_version": 1, "model": "llama3-8b", "cluster": {"instance_type": "p5e.48xlarge", "count": 1},
        "parallelism": {"dp": 2, "tp": 1, "pp": 1, "cp": 4, "zero_stage": 1}, "batch": {"global_batch": 32, "micro_batch": 1,
        "seq_len": 8192}, "training": {"tokens": "100B"}})",
      // llama2-13b: tp 8 x pp 2, interleaved, on two p5.
      R"({"schema_version": 1, "model": "llama2-13b", "cluster": {"instance_type": "p5.48xlarge", "count": 2},
        "parallelism": {"dp": 1, "tp": 8, "pp": 2, "vp": 2, "sequence_parallel": true}, "batch": {"global_batch": 64,
        "micro_batch": 1}, "schedule": "interleaved-1f1b", "training": {"tokens": "1T"}})",
      // A parameter server: no target runs one.
      R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "p4d.24xlarge", "count": 2},
        "parallelism": {"dp": 16, "tp": 1, "pp": 1}, "batch": {"global_batch": 512, "micro_batch": 4},
        "data_parallel": {"algorithm": "parameter-server"}, "training": {"tokens": "26B"}})",
      // ViT on a DGX: no SageMaker type, no Megatron GPT script.
      R"({"schema_version": 1, "model": "vit-b-16", "cluster": {"instance_type": "dgx-a100-80gb", "count": 1},
        "parallelism": {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 1}, "batch": {"global_batch": 256, "micro_batch": 32}, "training": {"tokens": "1B"}})",
  };
  std::set<std::string> rules_named;
  int passed = 0;
  for (const auto& text : plans) {
    const Resolved r = resolved(text);
    for (ExportTarget t : kTargets) {
      INFO(planner::export_target_name(t) << " of " << text);
      try {
        const std::string out = exported(r, t);
        const auto violations = planner::validate_export(r.plan, r.ctx, t, out);
        for (const auto& v : violations) FAIL_CHECK(v.rule << ": " << v.message);
        ++passed;
      } catch (const Error& e) {
        const std::string rule = refusal_rule(r, t);
        INFO(e.message());
        CHECK(!rule.empty());
        CHECK_NOTHROW(planner::export_rule(rule));
        CHECK(!e.pointer().empty());  // the plan field
        CHECK(!e.hint_text().empty());  // the way out
        rules_named.insert(rule);
      }
    }
  }
  CHECK(passed >= 30);             // most ordinary plans export everywhere
  CHECK(rules_named.size() >= 5);  // and the refusals are of different kinds
}

// ---- plan --for TARGET -----------------------------------------------------------------------

TEST_CASE("search: plan --for TARGET returns only plans whose export passes the rules (llama2-7b)", "[planner][export]") {
  for (ExportTarget t : kTargets) {
    planner::SearchRequest req;
    req.model = "llama2-7b";
    req.tokens = 1e12;
    req.instance_types = {"p4d.24xlarge", "p3.16xlarge"};
    req.max_gpus = 32;
    req.threads = 2;
    req.framework = t;
    const auto res = planner::search(req, hw::Catalog::builtin());
    INFO(planner::export_target_name(t));
    REQUIRE(!res.ranked.empty());
    for (size_t i = 0; i < std::min<size_t>(res.ranked.size(), 25); ++i) {
      plan::Plan p = res.ranked[i].plan;
      p.predicted = {{"time_to_train_s", std::min(res.ranked[i].objective_time_s, 10 * 86400.0)}};
      const auto ctx = plan::resolve(p, hw::Catalog::builtin(), "ranked");
      INFO(json::dump(plan::to_json(p)));
      std::string text;
      REQUIRE_NOTHROW(text = planner::export_plan(p, ctx, t));
      for (const auto& v : planner::validate_export(p, ctx, t, text)) FAIL_CHECK(v.rule << ": " << v.message);
      CHECK(p.dp_algorithm != plan::DpAlgorithm::parameter_server);
    }
  }
}

TEST_CASE("search: the default search plans no parameter server, which no target runs (rule all.no-parameter-server)",
          "[planner][export]") {
  planner::SearchRequest req;
  CHECK(std::find(req.dp_algorithms.begin(), req.dp_algorithms.end(), plan::DpAlgorithm::parameter_server) == req.dp_algorithms.end());
  // Asked for explicitly, it is still searched (a what-if), and `--for` removes it.
  req.model = "gpt3-1.3b";
  req.tokens = 5e9;
  req.instance_types = {"p4d.24xlarge"};
  req.max_gpus = 16;
  req.threads = 2;
  req.dp_algorithms = {plan::DpAlgorithm::parameter_server};
  req.framework = ExportTarget::torchrun;
  CHECK_THROWS_WITH(planner::search(req, hw::Catalog::builtin()), Catch::Contains("parameter server"));
}

// ---- Data-parallel libraries ------------------------------------------------------------------

TEST_CASE("export: Horovod is refused by every target, SMDDP by every target but SageMaker, which writes its distribution "
          "(rules all.no-horovod, all.smddp-sagemaker-only)",
          "[planner][export]") {
  const std::string base = kGptDp;
  const Resolved hvd = resolved(replaced(base, "\"hierarchical\"", "\"horovod\""));
  const Resolved smddp = resolved(replaced(base, "\"hierarchical\"", "\"smddp\""));
  for (ExportTarget t : kTargets) {
    INFO(planner::export_target_name(t));
    CHECK(refusal_rule(hvd, t) == "all.no-horovod");
    if (t != ExportTarget::sagemaker) CHECK(refusal_rule(smddp, t) == "all.smddp-sagemaker-only");
  }
  const std::string text = exported(smddp, ExportTarget::sagemaker);
  CHECK(text.find("\"smdistributed\": {\"dataparallel\": {\"enabled\": True}}") != std::string::npos);
  CHECK(broken_rules(smddp, ExportTarget::sagemaker, text).empty());
  // A torch_distributed estimator for an SMDDP plan breaks the distribution rule.
  const std::string torch = replaced(text, "{\"smdistributed\": {\"dataparallel\": {\"enabled\": True}}}",
                                     "{\"torch_distributed\": {\"enabled\": True}}");
  CHECK(broken_rules(smddp, ExportTarget::sagemaker, torch).count("sagemaker.distribution") == 1);
  // SMDDP on g5 (not among its instance types) is refused with that rule.
  const Resolved g5 = resolved(R"({"schema_version": 1, "model": "gpt3-1.3b", "cluster": {"instance_type": "g5.12xlarge", "count": 2},
    "parallelism": {"dp": 8, "tp": 1, "pp": 1}, "batch": {"global_batch": 64, "micro_batch": 2},
    "data_parallel": {"algorithm": "smddp"}, "training": {"tokens": "26B"}})");
  CHECK(refusal_rule(g5, ExportTarget::sagemaker) == "sagemaker.smddp-instance-types");
}

TEST_CASE("search: --for drops Horovod everywhere and SMDDP outside SageMaker", "[planner][export]") {
  planner::SearchRequest req;
  req.model = "gpt3-1.3b";
  req.tokens = 5e9;
  req.instance_types = {"p4d.24xlarge"};
  req.max_gpus = 16;
  req.threads = 2;
  req.dp_algorithms = {plan::DpAlgorithm::horovod, plan::DpAlgorithm::smddp};
  req.framework = ExportTarget::torchrun;
  CHECK_THROWS_WITH(planner::search(req, hw::Catalog::builtin()), Catch::Contains("Horovod"));
  req.framework = ExportTarget::sagemaker;
  const auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(!res.ranked.empty());
  for (const auto& c : res.ranked) CHECK(c.plan.dp_algorithm != plan::DpAlgorithm::horovod);
}
