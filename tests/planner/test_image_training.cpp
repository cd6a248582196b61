// Image and other non-LLM training in the search (issue 14, sections 4 and 5): work as samples
// x epochs, layout filters, the data loader as a bound on each step, convergence warnings.
// Oracles: closed forms (tokens = samples x epochs x tokens per sample; epoch time = steps per
// epoch x step time; a loader-bound step = a node's bytes / its read bandwidth) and the
// published thresholds the warnings cite.
#include <algorithm>
#include <cmath>
#include <string>

#include "test_support.hpp"
#include "trainplan/planner/convergence.hpp"
#include "trainplan/planner/search.hpp"
#include "trainplan/planner/search_io.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

using namespace trainplan;

namespace {

planner::SearchOptions resnet_search() {
  planner::SearchOptions o;
  o.model = "resnet-50";
  o.samples = "1.28M";
  o.epochs = "90";
  o.instances = "p4d.24xlarge";
  o.counts = "1,2";
  o.simulate_top = 0;
  o.threads = 1;
  return o;
}

// The same search for a GPT-2 on 1B tokens.
planner::SearchOptions gpt2_search() {
  planner::SearchOptions o = resnet_search();
  o.model = "gpt2-124m";
  o.samples = "";
  o.epochs = "";
  o.tokens = "1e9";
  return o;
}

struct ResolvedImagePlan {
  plan::Plan plan;
  plan::PlanContext ctx;
  explicit ResolvedImagePlan(plan::Plan p) : plan(std::move(p)), ctx(plan::resolve(plan, hw::Catalog::builtin(), "test")) {}
};

plan::Plan data_parallel(const std::string& model, int instances, int64_t global_batch, int64_t micro_batch) {
  plan::Plan p;
  p.model = model;
  p.instance_type = "p4d.24xlarge";
  p.instance_count = instances;
  p.dp = 8 * instances;
  p.global_batch = global_batch;
  p.micro_batch = micro_batch;
  return p;
}

std::vector<std::string> codes(const std::vector<planner::ConvergenceWarning>& ws) {
  std::vector<std::string> out;
  for (const auto& w : ws) out.push_back(w.code);
  return out;
}

}  // namespace

TEST_CASE("search: --samples x --epochs is the work, in tokens per sample of the model", "[planner][image]") {
  planner::SearchRequest req = planner::search_request(resnet_search());
  CHECK(req.samples_per_epoch == 1.28e6);
  CHECK(req.epochs == 90);
  CHECK(req.tokens == Approx(1.28e6 * 90));  // an image is one "token"
  planner::SearchOptions o = resnet_search();
  o.model = "gpt2-124m";
  o.seq_len = 512;
  CHECK(planner::search_request(o).tokens == Approx(1.28e6 * 90 * 512));
  o.epochs = "";
  CHECK(planner::search_request(o).epochs == 1);
  o.tokens = "1e9";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--samples: give the work as tokens or as samples x epochs, not both");
  o = resnet_search();
  o.samples = "";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--epochs: --epochs counts passes over --samples");
  o.epochs = "";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--tokens: the training work is missing");
  o = resnet_search();
  o.epochs = "0";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--epochs: ");
}

TEST_CASE("search: time to train is steps x step time with ceil(samples x epochs / batch) steps", "[planner][image]") {
  const planner::SearchRequest req = planner::search_request(resnet_search());
  const planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(!res.ranked.empty());
  for (const auto& c : res.ranked) {
    CHECK(c.steps == std::ceil(1.28e6 * 90 / static_cast<double>(c.plan.global_batch)));
    CHECK(c.time_to_train_s == Approx(c.steps * c.step_time_s()));
  }
}

TEST_CASE("search: --tp, --pp and --dp keep only those degrees, and one that leaves nothing names its flag", "[planner][image]") {
  planner::SearchOptions o = gpt2_search();
  o.counts = "1";
  o.tp = "2";
  o.pp = "1,2";
  planner::SearchResult res = planner::search(planner::search_request(o), hw::Catalog::builtin());
  REQUIRE(!res.ranked.empty());
  bool saw_pp2 = false;
  for (const auto& c : res.ranked) {
    CHECK(c.plan.tp == 2);
    CHECK((c.plan.pp == 1 || c.plan.pp == 2));
    saw_pp2 = saw_pp2 || c.plan.pp == 2;
  }
  CHECK(saw_pp2);
  o.tp = "";
  o.pp = "";
  o.dp = "4";
  res = planner::search(planner::search_request(o), hw::Catalog::builtin());
  REQUIRE(!res.ranked.empty());
  for (const auto& c : res.ranked) CHECK(c.plan.dp == 4);
  // gpt2-124m has 12 heads: tp 16 divides none of them, and 8 GPUs hold no dp 16.
  o.dp = "";
  o.tp = "16";
  const auto run = [&] { return planner::search(planner::search_request(o), hw::Catalog::builtin()); };
  REQUIRE_ERROR_CONTAINS(run(), "--tp: no candidate has a tensor-parallel degree in {16} — the clusters searched allow --tp 1,2,4");
  o.tp = "";
  o.dp = "16";
  REQUIRE_ERROR_CONTAINS(run(), "--dp: no candidate has a data-parallel degree in {16} — the clusters searched allow --dp 1,2,4,8");
  o.dp = "4";
  o.tp = "4";  // each alone is possible, together 16 GPUs
  REQUIRE_ERROR_CONTAINS(run(), "--tp: no cluster searched splits into --tp 4 with --dp 4 together");
  o.tp = "0";
  REQUIRE_ERROR_CONTAINS(planner::search_request(o), "--tp: ");
}

TEST_CASE("search: the data loader bounds the step: EBS at 125 MiB/s cannot feed ResNet-50 on one p4d", "[planner][image][loader]") {
  planner::SearchOptions o = resnet_search();
  o.counts = "1";
  o.data_input = "ebs";
  const planner::SearchResult res = planner::search(planner::search_request(o), hw::Catalog::builtin());
  REQUIRE(!res.ranked.empty());
  const auto& f = sim::LifecycleFacts::builtin();
  // 256 JPEGs of 110 kB per step through one gp3 volume: 0.215 s, above the compute step of the
  // fastest plans (micro-batches of 1-2 images wait for the host's kernel launches: slower).
  CHECK(res.ranked.front().loader_bound());
  for (const auto& c : res.ranked) {
    const double loader = static_cast<double>(c.plan.global_batch) * f.image_sample_bytes / f.ebs_gp3_baseline_bytes_per_s;
    const double compute = c.simulated ? c.simulated->step_time_s : c.step.step_time_s;
    CHECK(c.data_loader_s == Approx(loader));
    CHECK(c.loader_bound() == (loader > compute));
    CHECK(c.step_time_s() == Approx(std::max(loader, compute)));
    CHECK(c.time_to_train_s == Approx(c.steps * std::max(loader, compute)));
  }
  // From S3 (the default) the same plans are compute-bound: read and decode take about a millisecond.
  const planner::SearchResult s3 = planner::search(planner::search_request(resnet_search()), hw::Catalog::builtin());
  REQUIRE(!s3.ranked.empty());
  CHECK_FALSE(s3.ranked.front().loader_bound());
  CHECK(s3.ranked.front().data_loader_s > 0);
}

TEST_CASE("convergence: batch norm below 16 images per GPU is warned about (Wu & He 2018)", "[planner][convergence]") {
  CHECK(planner::kBatchNormMinPerGpu == 16);
  ResolvedImagePlan small(data_parallel("resnet-50", 1, 256, 8));
  auto ws = planner::convergence_warnings(small.plan, small.ctx);
  REQUIRE(codes(ws) == std::vector<std::string>{"batchnorm-per-gpu"});
  CHECK_THAT(ws[0].message, Catch::Contains("over 8 images"));
  CHECK_THAT(ws[0].source, Catch::Contains("Group Normalization"));
  ResolvedImagePlan ok(data_parallel("resnet-50", 1, 256, 16));  // 16 per GPU: 23.7% vs 23.6% at 32
  CHECK(planner::convergence_warnings(ok.plan, ok.ctx).empty());
  ResolvedImagePlan vit(data_parallel("vit-b-16", 1, 256, 2));  // layernorm: the per-GPU batch does not matter
  CHECK(planner::convergence_warnings(vit.plan, vit.ctx).empty());
}

TEST_CASE("convergence: a global batch beyond the family's published range is warned about with the technique", "[planner][convergence]") {
  // ResNet: 256 plain (He et al.), 8192 with warm-up (Goyal et al.), 32768 with LARS (You et al.).
  ResolvedImagePlan r256(data_parallel("resnet-50", 2, 256, 16));
  CHECK(planner::convergence_warnings(r256.plan, r256.ctx).empty());
  ResolvedImagePlan r8k(data_parallel("resnet-50", 16, 8192, 64));
  auto ws = planner::convergence_warnings(r8k.plan, r8k.ctx);
  REQUIRE(codes(ws) == std::vector<std::string>{"large-global-batch"});
  CHECK_THAT(ws[0].message, Catch::Contains("8192 images") && Catch::Contains("warm"));
  CHECK_THAT(ws[0].source, Catch::Contains("1706.02677"));
  ResolvedImagePlan r16k(data_parallel("resnet-50", 16, 16384, 128));
  ws = planner::convergence_warnings(r16k.plan, r16k.ctx);
  REQUIRE(ws.size() == 1);
  CHECK_THAT(ws[0].message, Catch::Contains("LARS"));
  CHECK_THAT(ws[0].source, Catch::Contains("1708.03888"));
  // BERT: beyond 8192 sequences needs LAMB (You et al. 2019).
  ResolvedImagePlan bert(data_parallel("bert-large", 16, 16384, 128));
  ws = planner::convergence_warnings(bert.plan, bert.ctx);
  REQUIRE(codes(ws) == std::vector<std::string>{"large-global-batch"});
  CHECK_THAT(ws[0].message, Catch::Contains("16384 sequences") && Catch::Contains("LAMB"));
  // GPT: in tokens per step; 1M is inside GPT-3's range, 4M is beyond its 3.2M.
  ResolvedImagePlan gpt1m(data_parallel("gpt3-1.3b", 4, 512, 1));
  CHECK(planner::convergence_warnings(gpt1m.plan, gpt1m.ctx).empty());
  ResolvedImagePlan gpt4m(data_parallel("gpt3-1.3b", 4, 2048, 1));
  ws = planner::convergence_warnings(gpt4m.plan, gpt4m.ctx);
  REQUIRE(codes(ws) == std::vector<std::string>{"large-global-batch"});
  CHECK_THAT(ws[0].message, Catch::Contains("4.19M tokens per step"));
  CHECK_THAT(ws[0].source, Catch::Contains("2005.14165"));
}

TEST_CASE("convergence: a global batch other than the user's is warned about with the learning-rate factor", "[planner][convergence]") {
  ResolvedImagePlan r(data_parallel("resnet-50", 1, 256, 32));
  CHECK(planner::convergence_warnings(r.plan, r.ctx, 256).empty());
  CHECK(planner::convergence_warnings(r.plan, r.ctx, 0).empty());
  const auto ws = planner::convergence_warnings(r.plan, r.ctx, 128);
  REQUIRE(codes(ws) == std::vector<std::string>{"global-batch-changed"});
  CHECK_THAT(ws[0].message, Catch::Contains("256 is not the 128") && Catch::Contains("by 2"));
}

TEST_CASE("search: --zero, --micro-batches, --schedule and --recompute that leave nothing name their flag", "[planner][image]") {
  planner::SearchOptions o = gpt2_search();
  o.instances = "g5.xlarge";  // one GPU: dp 1, so ZeRO > 0 shards nothing
  o.counts = "1";
  o.zero = "1,3";
  const auto run = [&] { return planner::search(planner::search_request(o), hw::Catalog::builtin()); };
  REQUIRE_ERROR_CONTAINS(run(), "--zero: none of the ZeRO stages to try applies");
  o.zero = "";
  o.instances = "p4d.24xlarge";
  o.micro_batches = "3";
  o.global_batch = 4;
  REQUIRE_ERROR_CONTAINS(run(), "--micro-batches: no micro-batch size to try divides the global batch");
  o.micro_batches = "";
  o.global_batch = 0;
  o.pp = "2";
  o.schedules = "interleaved-1f1b";
  o.virtual_stages = "8";  // 2 x 8 chunks for 12 layers
  REQUIRE_ERROR_CONTAINS(run(), "--schedules: no pipeline schedule to try fits");
  o = resnet_search();
  o.recompute = "selective";  // a ResNet has no attention scores to drop
  REQUIRE_ERROR_CONTAINS(run(), "--recompute: no recomputation to try applies");
}
