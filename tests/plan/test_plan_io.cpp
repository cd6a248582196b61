// Plan JSON: round trip, defaults, and the validation rules with their error text.
#include "test_support.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"

using namespace trainplan;

namespace {
const char* kMinimal = R"({"schema_version": 1, "model": "gpt3-13b",
  "cluster": {"instance_type": "p4d.24xlarge", "count": 16},
  "parallelism": {"dp": 16, "tp": 8, "pp": 1},
  "batch": {"global_batch": 1024, "micro_batch": 4}})";

plan::Plan parse(const std::string& text) { return plan::parse_plan(json::parse_text(text, "plan.json"), "plan.json"); }

// The minimal plan with one JSON field replaced (by pointer).
plan::Plan with(const std::string& pointer, const json::Json& value) {
  json::Json doc = json::parse_text(kMinimal, "plan.json");
  doc[json::Json::json_pointer(pointer)] = value;
  return plan::parse_plan(doc, "plan.json");
}

void validate(plan::Plan p) {
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
}
}  // namespace

TEST_CASE("plan: a minimal plan gets defaults and round-trips through JSON", "[plan]") {
  plan::Plan p = parse(kMinimal);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  CHECK(p.num_micro_batches == 1024 / (4 * 16));
  CHECK(p.precision == Precision::bf16);  // A100 supports bf16
  CHECK(p.stages.size() == 1);
  plan::Plan q = plan::parse_plan(plan::to_json(p), "again.json");
  CHECK(json::dump(plan::to_json(q)) == json::dump(plan::to_json(p)));
}

TEST_CASE("plan: units are accepted for bucket size and checkpoint interval", "[plan]") {
  auto doc = json::parse_text(kMinimal, "plan.json");
  doc["data_parallel"] = {{"bucket_size", "50MB"}, {"algorithm", "hierarchical"}};
  doc["checkpoint"] = {{"interval", "2h"}};
  doc["training"] = {{"tokens", "300B"}, {"purchase", "spot"}};
  plan::Plan p = plan::parse_plan(doc, "plan.json");
  CHECK(p.bucket_size_bytes == 50e6);
  CHECK(p.checkpoint_interval_s == 7200);
  CHECK(p.training_tokens == 300e9);
  CHECK(p.purchase == plan::Purchase::spot);
  CHECK(p.dp_algorithm == plan::DpAlgorithm::hierarchical);
}

TEST_CASE("plan: field errors name the file, pointer and a fix", "[plan]") {
  REQUIRE_ERROR_CONTAINS(with("/parallelism/tp", -2), "plan.json: /parallelism/tp: must be a positive integer, got -2");
  REQUIRE_ERROR_CONTAINS(with("/parallelism/tp", "8"), "plan.json: /parallelism/tp: must be an integer");
  REQUIRE_ERROR_CONTAINS(with("/schedule", "1fb1"), "did you mean \"1f1b\"");
  REQUIRE_ERROR_CONTAINS(with("/parallelism/zero_stage", 4), "must be 0, 1, 2 or 3");
  REQUIRE_ERROR_CONTAINS(with("/parallelism/tpp", 2), "plan.json: /parallelism/tpp: unknown field \"tpp\"");
  REQUIRE_ERROR_CONTAINS(with("/schema_version", 7), "unsupported schema_version 7");
  REQUIRE_ERROR_CONTAINS(parse("{\"schema_version\": 1, \"model\": \"x\""), "truncated");
}

TEST_CASE("plan: cross-field rules", "[plan]") {
  REQUIRE_ERROR_CONTAINS(validate(with("/parallelism/dp", 8)), "/parallelism: dp*tp*pp = 8*8*1 = 64 but the cluster has 128 GPUs");
  {  // gpt3-13b has 40 heads: tp 16 does not divide them.
    auto p = with("/parallelism/tp", 16);
    p.dp = 8;
    REQUIRE_ERROR_CONTAINS(validate(p), "tp = 16 does not divide the 40 attention heads");
  }
  REQUIRE_ERROR_CONTAINS(validate(with("/batch/global_batch", 1000)), "global_batch 1000 is not a multiple of micro_batch*dp = 4*16 = 64");
  REQUIRE_ERROR_CONTAINS(validate(with("/batch/global_batch", 1000)), "use a global batch of 960 or 1024");
  // Below one micro-batch per rank: no "global batch of 0"; the smallest batch or a micro-batch.
  REQUIRE_ERROR_CONTAINS(validate(with("/batch/global_batch", 32)),
                         "use a global batch of 64, or a micro_batch that divides global_batch / dp = 2");
  try {
    validate(with("/batch/global_batch", 30));  // 30 is not a whole batch per rank either
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("use a global batch of 64") != std::string::npos);
    CHECK(m.find("micro_batch that divides") == std::string::npos);
    CHECK(m.find("batch of 0") == std::string::npos);
  }
  REQUIRE_ERROR_CONTAINS(validate(with("/batch/num_micro_batches", 3)), "set num_micro_batches to 16");
  REQUIRE_ERROR_CONTAINS(validate(with("/cluster/instance_type", "p4d.24xl")), "plan.json: /cluster/instance_type");
  REQUIRE_ERROR_CONTAINS(validate(with("/model", "gpt3-13x")), "plan.json: /model");
  {
    auto p = parse(kMinimal);
    p.instance_type = "p3.16xlarge";
    p.instance_count = 16;
    p.precision = Precision::bf16;
    REQUIRE_ERROR_CONTAINS(validate(p), "does not support bf16 \xE2\x80\x94 use fp16");
  }
  {  // The Triton FlashAttention kernel asserts d <= 128: DeepSeek-V3's MLA heads are 128 + 64.
    auto p = with("/model", "deepseek-v3");
    p.attention = plan::AttentionImpl::flash1;
    REQUIRE_ERROR_CONTAINS(validate(p), "plan.json: /attention: the FlashAttention-1-class (Triton) kernel takes head "
                                        "dimensions up to 128; deepseek-v3 has 192");
    auto q = with("/attention", "flash1");  // gpt3-13b: 128, accepted
    validate(q);
  }
  {
    auto p = parse(kMinimal);
    p.tp = 1;
    p.dp = 128;
    p.sequence_parallel = true;
    p.global_batch = 1024;
    p.micro_batch = 8;
    REQUIRE_ERROR_CONTAINS(validate(p), "sequence parallelism needs tp > 1");
  }
  {
    auto p = parse(kMinimal);
    p.dp = 4;
    p.pp = 4;
    p.zero_stage = 2;
    p.global_batch = 64;
    p.micro_batch = 1;
    REQUIRE_ERROR_CONTAINS(validate(p), "ZeRO-2 with pipeline parallelism is not supported");
  }
  {
    auto p = parse(kMinimal);
    p.dp = 4;
    p.pp = 4;
    p.global_batch = 64;
    p.micro_batch = 1;
    p.stages = {{0, 5}, {7, 20}, {21, 30}, {31, 41}};
    REQUIRE_ERROR_CONTAINS(validate(p), "/stages/1: unit 6 is not assigned to any stage");
  }
}

TEST_CASE("plan: even stage split puts the embedding first and the head last", "[plan]") {
  auto s = plan::even_stages(42, 4);  // 40 blocks + input + output
  REQUIRE(s.size() == 4);
  CHECK(s[0].first_unit == 0);
  CHECK(s[0].last_unit == 10);
  CHECK(s[1].first_unit == 11);
  CHECK(s[3].last_unit == 41);
  for (size_t i = 1; i < s.size(); ++i) CHECK(s[i].first_unit == s[i - 1].last_unit + 1);
  // 10 blocks per stage.
  CHECK(s[1].last_unit - s[1].first_unit + 1 == 10);
}

TEST_CASE("plan: Megatron-core's split counting the embedding and the loss as layers", "[plan]") {
  // 128 units (126 layers + embedding + output) on pp 8 x vp 8 = 64 chunks: 2 units each, so
  // the first chunk is the embedding and one layer, the last one layer and the output.
  auto s = plan::even_stages_counting_ends(128, 64);
  REQUIRE(s.size() == 64);
  CHECK(s[0].first_unit == 0);
  CHECK(s[0].last_unit == 1);
  CHECK(s[63].first_unit == 126);
  CHECK(s[63].last_unit == 127);
  for (size_t i = 1; i < s.size(); ++i) {
    CHECK(s[i].first_unit == s[i - 1].last_unit + 1);
    CHECK(s[i].last_unit - s[i].first_unit + 1 == 2);
  }
  // The 30-layer proxy on 32 chunks: every unit a chunk of its own.
  auto one = plan::even_stages_counting_ends(32, 32);
  for (int i = 0; i < 32; ++i) {
    CHECK(one[static_cast<size_t>(i)].first_unit == i);
    CHECK(one[static_cast<size_t>(i)].last_unit == i);
  }
  // Not a multiple: earlier chunks take the remainder.
  auto r = plan::even_stages_counting_ends(10, 4);
  CHECK(r[0].last_unit == 2);
  CHECK(r[1].last_unit == 5);
  CHECK(r[2].last_unit == 7);
  CHECK(r[3].last_unit == 9);
}

TEST_CASE("plan: more chunks than layers only with stages that give the embedding and output chunks of their own", "[plan]") {
  // gpt3-1.3b: 24 layers, 26 units; pp 2 x vp 13 = 26 chunks.
  plan::Plan p;
  p.model = "gpt3-1.3b";
  p.instance_type = "p4d.24xlarge";
  p.dp = 4;
  p.pp = 2;
  p.vp = 13;
  p.schedule = plan::Schedule::interleaved_1f1b;
  p.global_batch = 8;
  p.micro_batch = 1;
  {
    plan::Plan q = p;
    REQUIRE_ERROR_CONTAINS(validate(q), "pp*vp = 26 model chunks but only 24 layers");
  }
  p.stages = plan::even_stages_counting_ends(26, 26);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  // Stage 0's first chunk holds the embedding alone; the program lowers with every chunk.
  const plan::StepProgram prog = plan::lower(p, ctx);
  CHECK(prog.ranks.size() == 8);
  // One unit too many: a chunk would be empty.
  p.stages = plan::even_stages_counting_ends(26, 26);
  p.stages.back() = {25, 24};
  REQUIRE_ERROR_CONTAINS(validate(p), "empty stage");
}

TEST_CASE("plan: one AZ and one cluster placement group by default, not written", "[plan]") {
  plan::Plan p = parse(kMinimal);
  CHECK(p.placement.azs == 1);
  CHECK(p.placement.group == hw::PlacementGroup::cluster);
  CHECK(p.data_region.empty());
  const json::Json j = plan::to_json(p);
  CHECK_FALSE(j.contains("placement"));
  CHECK_FALSE(j.contains("data"));
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  CHECK(ctx.cluster.placement().azs == 1);
}

TEST_CASE("plan: placement across AZs and the data's region round-trip and reach the cluster", "[plan]") {
  json::Json d = json::parse_text(kMinimal, "plan.json");
  d["placement"] = {{"azs", 3}, {"placement_group", "cluster"}};
  d["data"] = {{"region", "eu-west-1"}, {"size", "2TB"}};
  plan::Plan p = plan::parse_plan(d, "plan.json");
  CHECK(p.placement.azs == 3);
  CHECK(p.data_region == "eu-west-1");
  CHECK(p.dataset_bytes == Approx(2e12));
  const json::Json j = plan::to_json(p);
  CHECK(j["placement"]["azs"] == 3);
  CHECK(j["data"]["bytes"] == 2e12);
  plan::Plan q = plan::parse_plan(j, "again.json");
  CHECK(json::dump(plan::to_json(q)) == json::dump(j));
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  plan::validate(p, ctx, "plan.json");
  // 16 instances over 3 AZs: blocks of 6, 5 and 5.
  CHECK(ctx.cluster.az_of_node(5) == 0);
  CHECK(ctx.cluster.az_of_node(6) == 1);
  CHECK(ctx.cluster.az_of_node(11) == 2);
}

TEST_CASE("plan: placement and data errors name the pointer and a fix", "[plan]") {
  REQUIRE_ERROR_CONTAINS(with("/placement", json::Json{{"azs", 0}}), "plan.json: /placement/azs: must be a positive integer");
  REQUIRE_ERROR_CONTAINS(with("/placement", json::Json{{"azs", 7}}), "plan.json: /placement/azs");
  REQUIRE_ERROR_CONTAINS(with("/placement", json::Json{{"placement_group", "spread"}}),
                         "plan.json: /placement/placement_group: unknown placement group \"spread\"");
  REQUIRE_ERROR_CONTAINS(with("/placement", json::Json{{"az", 2}}), "unknown field \"az\"");
  REQUIRE_ERROR_CONTAINS(with("/data", json::Json{{"size", "2 parsecs"}}), "/data/size");
  // A data region without a price.
  plan::Plan q = with("/data", json::Json{{"region", "mars-north-1"}});
  auto ctx = plan::resolve(q, hw::Catalog::builtin(), "plan.json");
  REQUIRE_ERROR_CONTAINS(plan::validate(q, ctx, "plan.json"),
                         "plan.json: /data/region: no inter-region transfer price for region \"mars-north-1\"");
}

TEST_CASE("plan: the price region round-trips in cluster.region and older plans read without it", "[plan]") {
  plan::Plan old = parse(kMinimal);
  CHECK(old.region.empty());
  CHECK_FALSE(plan::to_json(old)["cluster"].contains("region"));  // not written when unset: old plans stay byte-identical
  plan::Plan p = with("/cluster/region", "eu-west-1");
  CHECK(p.region == "eu-west-1");
  const json::Json j = plan::to_json(p);
  CHECK(j["cluster"]["region"] == "eu-west-1");
  plan::Plan q = plan::parse_plan(j, "again.json");
  CHECK(q.region == "eu-west-1");
  CHECK(json::dump(plan::to_json(q)) == json::dump(j));
  REQUIRE_ERROR_CONTAINS(with("/cluster/region", "EU West"), "plan.json: /cluster/region: \"EU West\" is not an AWS region name");
  REQUIRE_ERROR_CONTAINS(with("/cluster/region", ""), "is not an AWS region name");
  REQUIRE_ERROR_CONTAINS(with("/cluster/region", 3), "plan.json: /cluster/region");
}

TEST_CASE("plan: the software stack field: default, round trip, unknown names", "[plan]") {
  // A plan written before the field: resolve() fills in the default stack and to_json writes it.
  plan::Plan p = parse(kMinimal);
  CHECK(p.software.empty());
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  CHECK(p.software == hw::kDefaultSoftware);
  CHECK(ctx.software.name == hw::kDefaultSoftware);
  CHECK(plan::parse_plan(plan::to_json(p), "plan.json").software == hw::kDefaultSoftware);
  plan::Plan eager = with("/software", "pytorch-eager");
  CHECK(plan::resolve(eager, hw::Catalog::builtin(), "plan.json").software.launch_s ==
        Approx(hw::Catalog::builtin().software("pytorch-eager").launch_s));
  plan::Plan bad = with("/software", "pytorch");
  REQUIRE_ERROR_CONTAINS(plan::resolve(bad, hw::Catalog::builtin(), "plan.json"), "plan.json: /software");
  REQUIRE_ERROR_CONTAINS(with("/software", ""), "/software");
  REQUIRE_ERROR_CONTAINS(with("/software", 3), "/software");
}

TEST_CASE("plan: data_parallel.grad_reduce: absent = the stack's default, round trip, bad values", "[plan]") {
  plan::Plan p = parse(kMinimal);  // megatron-core, bf16 on the A100: reduced in bf16
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "plan.json");
  CHECK_FALSE(p.grad_reduce);
  CHECK(plan::grad_reduce_precision(p, ctx) == Precision::bf16);
  CHECK_FALSE(plan::to_json(p)["data_parallel"].contains("grad_reduce"));  // not written when unset
  plan::Plan mlm = with("/software", "megatron-lm");  // Megatron-LM: fp32 under bf16
  auto mctx = plan::resolve(mlm, hw::Catalog::builtin(), "plan.json");
  CHECK(plan::grad_reduce_precision(mlm, mctx) == Precision::fp32);
  CHECK(plan::gradient_bytes_per_param(mlm, mctx) == 4.0);
  plan::Plan set = with("/data_parallel", json::Json{{"grad_reduce", "fp32"}});
  CHECK(set.grad_reduce == Precision::fp32);
  auto sctx = plan::resolve(set, hw::Catalog::builtin(), "plan.json");
  CHECK(plan::grad_reduce_precision(set, sctx) == Precision::fp32);
  CHECK(plan::gradient_bytes_per_param(set, sctx) == 2.0);  // megatron-core keeps no fp32 main grads
  const plan::Plan again = plan::parse_plan(plan::to_json(set), "again.json");
  CHECK(again.grad_reduce == Precision::fp32);
  REQUIRE_ERROR_CONTAINS(with("/data_parallel", json::Json{{"grad_reduce", "fp8"}}), "plan.json: /data_parallel/grad_reduce");
  REQUIRE_ERROR_CONTAINS(with("/data_parallel", json::Json{{"grad_reduce", 32}}), "/data_parallel/grad_reduce");
}

TEST_CASE("plan: resolving with a built graph gives the context resolving from the name gives", "[plan]") {
  plan::Plan a = parse(kMinimal);
  a.seq_len = 1024;
  plan::Plan b = a;
  const auto& catalog = hw::Catalog::builtin();
  const plan::PlanContext from_name = plan::resolve(a, catalog, "plan.json");
  models::ModelSpec spec = models::resolve_model("gpt3-13b");
  models::set_seq_len(spec, 1024, "batch.seq_len");
  const models::ModelGraph graph = models::build_graph(spec);
  const plan::PlanContext shared = plan::resolve(b, catalog, spec, graph, "plan.json");
  CHECK(&shared.graph.ops() == &graph.ops());  // not rebuilt
  CHECK(shared.seq_len == from_name.seq_len);
  CHECK(shared.seq_len == 1024);
  CHECK(shared.graph.ops().size() == from_name.graph.ops().size());
  CHECK(shared.graph.total_params() == from_name.graph.total_params());
  CHECK(shared.model_spec.name == from_name.model_spec.name);
  CHECK(shared.cluster.num_gpus() == from_name.cluster.num_gpus());
  CHECK(json::dump(plan::to_json(a)) == json::dump(plan::to_json(b)));  // the same defaults filled in
}
