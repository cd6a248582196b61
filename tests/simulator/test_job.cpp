// The whole-job model without interruptions (simulator/job.hpp) against hand arithmetic, and
// the lifecycle facts file.
#include <cmath>
#include <set>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/simulator/job.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

using namespace trainplan;
using sim::JobSpec;

namespace {

// A job with random but plausible numbers.
JobSpec random_job(Rng& rng) {
  JobSpec j;
  j.steps = 1000 + static_cast<int64_t>(rng.below(20000));
  j.step_time_s = 0.2 + 3.0 * rng.uniform();
  j.nodes = 1 + static_cast<int>(rng.below(16));
  j.gpus_per_node = 8;
  j.startup = {.provisioning_s = 60 + 300 * rng.uniform(), .container_pull_s = 30 + 100 * rng.uniform(),
               .data_staging_s = 500 * rng.uniform(), .framework_init_s = 10 + 60 * rng.uniform()};
  j.restart = j.startup;
  j.checkpoint.total_bytes = 1e9 + 1e11 * rng.uniform();
  j.checkpoint.write_bytes_per_node = j.checkpoint.total_bytes / j.nodes;
  j.checkpoint.read_bytes_per_node = j.checkpoint.write_bytes_per_node;
  j.checkpoint.write_bytes_per_s_per_node = 1e9 + 5e9 * rng.uniform();
  j.checkpoint.read_bytes_per_s_per_node = j.checkpoint.write_bytes_per_s_per_node;
  j.checkpoint_interval_s = 600 + 3000 * rng.uniform();
  j.eval_every_steps = 100 + static_cast<int64_t>(rng.below(900));
  j.eval_duration_s = 5 + 60 * rng.uniform();
  j.prices = {.on_demand_usd_per_hour = 5 + 30 * rng.uniform(), .spot_usd_per_hour = 1 + 5 * rng.uniform(),
              .minimum_billed_s = 60};
  return j;
}

}  // namespace

TEST_CASE("simulator: job time is startup + steps x step time + evaluations + checkpoint writes", "[simulator][job]") {
  Rng rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    JobSpec j = random_job(rng);
    const sim::JobEstimate e = sim::estimate_job(j);
    // Independent arithmetic: segments of interval seconds of work, each ending with a write.
    const double evals = std::floor(static_cast<double>(j.steps - 1) / static_cast<double>(j.eval_every_steps));
    const double work = static_cast<double>(j.steps) * j.step_time_s + evals * j.eval_duration_s;
    const double checkpoints = std::ceil(work / j.checkpoint_interval_s);
    const double write_s = j.checkpoint.write_bytes_per_node / j.checkpoint.write_bytes_per_s_per_node;
    const double expected = j.startup.provisioning_s + j.startup.container_pull_s + j.startup.data_staging_s +
                            j.startup.framework_init_s + work + checkpoints * write_s;
    CHECK(e.checkpoints == static_cast<int64_t>(checkpoints));
    CHECK(e.total_s == Approx(expected).epsilon(1e-12));
    CHECK(e.compute_s == Approx(static_cast<double>(j.steps) * j.step_time_s));
    CHECK_FALSE(e.io_bound);
    CHECK(e.io_stall_s == 0);
    // The segments cover the work exactly; all but the last are one interval long.
    const auto seg = j.segments_s();
    double sum = 0;
    for (double s : seg) sum += s;
    CHECK(sum == Approx(work).epsilon(1e-12));
    for (size_t i = 0; i + 1 < seg.size(); ++i) CHECK(seg[i] == j.checkpoint_interval_s);
    CHECK(seg.back() <= j.checkpoint_interval_s);
  }
}

TEST_CASE("simulator: a plan the storage cannot feed is flagged I/O-bound and stalls by the input time", "[simulator][job]") {
  Rng rng(12);
  JobSpec j = random_job(rng);
  j.data_input.bytes_per_sample = 2048 * 4;  // 2k int32 tokens
  j.data_input.samples_per_step = 1024;
  const double step_bytes = j.data_input.bytes_per_sample * j.data_input.samples_per_step;
  // Enough: per-node delivery well above the need.
  j.data_input.bytes_per_s_per_node = 10.0 * step_bytes / j.nodes / j.step_time_s;
  CHECK_FALSE(sim::estimate_job(j).io_bound);
  // Too slow: each step waits for its input.
  j.data_input.bytes_per_s_per_node = 0.25 * step_bytes / j.nodes / j.step_time_s;
  auto e = sim::estimate_job(j);
  CHECK(e.io_bound);
  const double input_s = step_bytes / j.nodes / j.data_input.bytes_per_s_per_node;
  CHECK(input_s == Approx(4.0 * j.step_time_s));
  CHECK(e.effective_step_time_s == Approx(input_s));
  CHECK(e.io_stall_s == Approx(static_cast<double>(j.steps) * (input_s - j.step_time_s)));
  CHECK(e.required_input_bytes_per_s_per_node == Approx(step_bytes / j.nodes / j.step_time_s));
  // An aggregate limit (a shared file system) binds when it is lower than nodes x per-node.
  j.data_input.bytes_per_s_per_node = 100.0 * step_bytes;
  j.data_input.aggregate_bytes_per_s = 0.5 * step_bytes / j.step_time_s;
  e = sim::estimate_job(j);
  CHECK(e.io_bound);
  CHECK(e.effective_step_time_s == Approx(2.0 * j.step_time_s));
}

TEST_CASE("simulator: a checkpoint write takes the slower of the busiest node and the aggregate limit", "[simulator][job]") {
  sim::CheckpointSpec c;
  c.total_bytes = 8 * 40e9;
  c.write_bytes_per_node = 40e9;
  c.read_bytes_per_node = 80e9;
  c.write_bytes_per_s_per_node = 4e9;
  c.read_bytes_per_s_per_node = 8e9;
  CHECK(c.write_s() == Approx(10.0));
  CHECK(c.read_s(8) == Approx(10.0));
  c.aggregate_bytes_per_s = 16e9;  // 320 GB at 16 GB/s: 20 s
  CHECK(c.write_s() == Approx(20.0));
  CHECK(c.read_s(8) == Approx(8 * 80e9 / 16e9));
}

TEST_CASE("simulator: per-second billing, the EC2 one-minute minimum, and blends", "[simulator][job]") {
  CHECK(sim::billed_cost_usd(30, 36.0, 60) == Approx(60 * 0.01));
  CHECK(sim::billed_cost_usd(30, 36.0, 0) == Approx(30 * 0.01));
  CHECK(sim::billed_cost_usd(3601, 36.0, 60) == Approx(3601 * 0.01));

  Rng rng(13);
  JobSpec j = random_job(rng);
  j.nodes = 4;
  j.checkpoint_interval_s = 0;
  auto e = sim::estimate_job(j);
  const double billed = e.total_s - j.startup.provisioning_s;  // provisioning is not billed
  CHECK(e.billed_s_per_node == Approx(billed));
  CHECK(e.cost_usd == Approx(4 * billed * j.prices.on_demand_usd_per_hour / 3600.0));
  CHECK(e.cost_on_demand_usd == Approx(e.cost_usd));

  j.purchase = sim::PurchaseOption::spot;
  e = sim::estimate_job(j);
  CHECK(e.cost_usd == Approx(4 * billed * j.prices.spot_usd_per_hour / 3600.0));

  j.purchase = sim::PurchaseOption::blend;
  j.on_demand_nodes = 1;
  e = sim::estimate_job(j);
  CHECK(e.cost_usd == Approx((j.prices.on_demand_usd_per_hour + 3 * j.prices.spot_usd_per_hour) * billed / 3600.0));

  // A job shorter than the minimum pays the minimum on EC2 and its seconds on SageMaker.
  JobSpec tiny;
  tiny.steps = 10;
  tiny.step_time_s = 1.0;
  tiny.nodes = 2;
  tiny.prices = {.on_demand_usd_per_hour = 7.2, .spot_usd_per_hour = 0, .minimum_billed_s = 60};
  CHECK(sim::estimate_job(tiny).cost_usd == Approx(2 * 60 * 7.2 / 3600));
  tiny.platform = plan::Platform::sagemaker;
  tiny.prices.minimum_billed_s = 0;
  CHECK(sim::estimate_job(tiny).cost_usd == Approx(2 * 10 * 7.2 / 3600));
}

TEST_CASE("simulator: inconsistent jobs are refused with a hint", "[simulator][job]") {
  Rng rng(14);
  JobSpec j = random_job(rng);
  j.nodes = 4;
  j.purchase = sim::PurchaseOption::blend;
  j.on_demand_nodes = 4;
  REQUIRE_ERROR_CONTAINS(j.check(), "a blend needs 1..3 on-demand nodes of 4");
  j.on_demand_nodes = 2;
  j.platform = plan::Platform::sagemaker;
  REQUIRE_ERROR_CONTAINS(j.check(), "either on-demand or on managed spot");
  j.platform = plan::Platform::ec2;
  j.prices.spot_usd_per_hour = 0;
  REQUIRE_ERROR_CONTAINS(j.check(), "no spot price");
  j = random_job(rng);
  j.step_time_s = -1;
  REQUIRE_ERROR_CONTAINS(j.check(), "step time must be positive");
}

TEST_CASE("simulator: every lifecycle fact has a known source and kind, and buckets convert by -ln(1-f)/30d", "[simulator][job]") {
  const auto& f = sim::LifecycleFacts::builtin();
  const std::set<std::string> kinds = {"documented", "measured", "fitted", "convention", "estimate"};
  REQUIRE(f.facts.size() >= 15);
  for (const auto& [name, fact] : f.facts) {
    INFO(name);
    CHECK(kinds.count(fact.kind) == 1);
    CHECK(f.sources.count(fact.source) == 1);
  }
  // Estimates must not cite a verified measurement as their source... and measured facts must.
  for (const auto& [name, fact] : f.facts)
    if (fact.kind == "estimate") CHECK(fact.source != "s3_benchmark_2019");
  CHECK(f.fact("s3_network_efficiency").kind == "measured");
  CHECK(f.s3_network_efficiency == Approx(6269.0 / 12500.0).epsilon(0.01));
  CHECK(f.ec2_minimum_billed_s == 60);
  CHECK(f.ebs_gp3_baseline_bytes_per_s == Approx(125.0 * 1048576));
  CHECK(f.fsx("persistent-2-250").read_bytes_per_s_per_tib == Approx(250e6));
  CHECK(f.hardware_failure_rate_per_gpu_per_s * 3600 == Approx(419.0 / (54 * 24 * 16384.0)).epsilon(1e-3));
  const double month = 30 * 86400.0;
  CHECK(f.bucket_rate_per_s("5-10%") == Approx(-std::log(1 - 0.075) / month));
  CHECK(f.bucket_rate_per_s("<5%") < f.bucket_rate_per_s(">20%"));
  REQUIRE_ERROR_CONTAINS(f.bucket_rate_per_s("7%"), "unknown spot interruption bucket");
  REQUIRE_ERROR_CONTAINS(f.fsx("persistent-3"), "unknown FSx for Lustre deployment");
}

TEST_CASE("simulator: a lifecycle file with a misspelled or missing fact is rejected with its pointer", "[simulator][job]") {
  json::Json doc = json::parse_text(R"({"schema_version": 1, "sources": {"s": {"description": "x", "date": "2026", "verified": true}},
    "facts": {"ec2_provisioning": {"value": "3min", "kind": "estimate", "source": "s"}}})", "bad.json");
  REQUIRE_ERROR_CONTAINS(sim::LifecycleFacts::parse(doc, "bad.json"), "bad.json: /facts: missing required field");
  doc["facts"]["ec2_provisioning"]["kind"] = "guess";
  REQUIRE_ERROR_CONTAINS(sim::LifecycleFacts::parse(doc, "bad.json"), "/facts/ec2_provisioning/kind");
}
