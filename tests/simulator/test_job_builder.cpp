// JobSpec from a plan: checkpoint sizes against the 14 bytes/parameter of mixed-precision Adam,
// steps from the work, storage bandwidths, prices from the catalog and a user price file.
#include <algorithm>
#include <cmath>

#include "test_support.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/job_lifecycle.hpp"

using namespace trainplan;

namespace {

// A plan resolved against a catalog (PlanContext has no default constructor).
struct Resolved {
  plan::Plan plan;
  plan::PlanContext ctx;
  Resolved(plan::Plan p, const hw::Catalog& cat) : plan(std::move(p)), ctx(plan::resolve(plan, cat, "test")) {
    plan::validate(plan, ctx, "test");
  }
};

Resolved resolve(const std::string& model, const std::string& instance, int count, int dp, int tp, int pp,
                 int64_t global_batch, const hw::Catalog& cat = hw::Catalog::builtin()) {
  plan::Plan p;
  p.model = model;
  p.instance_type = instance;
  p.instance_count = count;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.micro_batch = 1;
  p.global_batch = global_batch;
  return Resolved(std::move(p), cat);
}

}  // namespace

TEST_CASE("simulator: a checkpoint holds 14 bytes per parameter (bf16 weights + fp32 Adam) under every ZeRO stage", "[simulator][job]") {
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 256);
  const double psi = r.ctx.graph.total_params();
  REQUIRE(psi == Approx(1.3e9).epsilon(0.05));
  for (int zero : {0, 1, 2, 3}) {
    r.plan.zero_stage = zero;
    const auto c = sim::checkpoint_sizes(r.plan, r.ctx);
    INFO("zero " << zero);
    CHECK(c.total_bytes == Approx(14.0 * psi).epsilon(1e-9));
    CHECK(c.write_bytes_per_node == Approx(7.0 * psi).epsilon(1e-9));  // two nodes share the write
    // A restarted node reads what its 8 ranks hold: full states without ZeRO, shards with it.
    const double per_rank = zero == 0 ? 14.0 * psi : zero == 3 ? 14.0 * psi / 16 : 2.0 * psi + 12.0 * psi / 16;
    CHECK(c.read_bytes_per_node == Approx(8 * per_rank).epsilon(1e-9));
  }
  // Tensor and pipeline parallelism split the same states, except that the tied word embedding
  // lives on both the first and the last pipeline stage (as in Megatron-LM) and tp replicates
  // norms and some biases (a fraction of a per cent).
  Resolved mp = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 4, 2, 2, 256);
  const double embedding = static_cast<double>(mp.ctx.model_spec.vocab) * mp.ctx.model_spec.hidden;
  CHECK(sim::checkpoint_sizes(mp.plan, mp.ctx).total_bytes == Approx(14.0 * (psi + embedding)).epsilon(0.01));
}

TEST_CASE("simulator: steps are tokens / (global batch x sequence) or samples x epochs / global batch", "[simulator][job]") {
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 512);
  const int64_t seq = r.ctx.seq_len;
  REQUIRE(seq == 2048);
  sim::JobOptions o;
  o.tokens = 300e9;
  CHECK(sim::job_steps(r.plan, r.ctx, o) == static_cast<int64_t>(std::ceil(300e9 / (512.0 * 2048))));
  o.tokens = 512.0 * 2048 * 1000;  // exactly 1000 steps
  CHECK(sim::job_steps(r.plan, r.ctx, o) == 1000);
  o = {};
  o.samples = 1'281'167;
  o.epochs = 90;
  CHECK(sim::job_steps(r.plan, r.ctx, o) == static_cast<int64_t>(std::ceil(1'281'167.0 * 90 / 512)));
  o = {};
  REQUIRE_ERROR_CONTAINS(sim::job_steps(r.plan, r.ctx, o), "the job's work is unknown");
  r.plan.training_tokens = 1e9;
  CHECK(sim::job_steps(r.plan, r.ctx, o) == static_cast<int64_t>(std::ceil(1e9 / (512.0 * 2048))));
  o.tokens = 1e9;
  o.samples = 10;
  REQUIRE_ERROR_CONTAINS(sim::job_steps(r.plan, r.ctx, o), "not both");
}

TEST_CASE("simulator: storage bandwidths come from the instance, S3 efficiency and FSx size", "[simulator][job]") {
  const auto& f = sim::LifecycleFacts::builtin();
  Resolved r = resolve("vit-l-16", "p4d.24xlarge", 2, 16, 1, 1, 4096);
  const hw::InstanceType& inst = *r.ctx.instance;
  sim::JobOptions o;
  o.step_time_s = 0.5;
  o.samples = 1'281'167;
  o.epochs = 1;
  // File mode: the dataset is copied at S3 speed (network x efficiency) to local NVMe first.
  o.data_source = sim::DataSource::s3_file;
  sim::JobSpec j = sim::build_job_spec(r.plan, r.ctx, o);
  const double s3 = std::min(inst.network.bandwidth_bytes_per_s * f.s3_network_efficiency, f.s3_max_instance_bytes_per_s);
  CHECK(s3 == Approx(8.003e9));  // p4d's 400 Gbps x 0.5 is above the largest measured S3 throughput
  const double dataset = 1'281'167 * f.image_sample_bytes;
  const double write = inst.storage.nvme_write_bandwidth_bytes_per_s > 0 ? inst.storage.nvme_write_bandwidth_bytes_per_s
                                                                         : inst.storage.nvme_read_bandwidth_bytes_per_s;
  CHECK(j.startup.data_staging_s == Approx(dataset / std::min(s3, write)));
  CHECK(j.data_input.bytes_per_s_per_node == Approx(inst.storage.nvme_read_bandwidth_bytes_per_s));
  CHECK(j.checkpoint.write_bytes_per_s_per_node == Approx(s3));
  // FSx for Lustre: aggregate = TiB x MB/s per TiB. The minimum 1200 GiB at 125 MB/s/TiB cannot
  // feed 4096 images every half second (about 900 MB/s); 12 TiB at 1000 MB/s/TiB can.
  o.data_source = sim::DataSource::fsx_lustre;
  o.fsx_deployment = "persistent-2-125";
  j = sim::build_job_spec(r.plan, r.ctx, o);
  CHECK(j.data_input.aggregate_bytes_per_s == Approx(1200.0 / 1024 * 125e6));
  CHECK(j.startup.data_staging_s == 0);
  CHECK(sim::estimate_job(j).io_bound);
  o.fsx_deployment = "persistent-2-1000";
  o.fsx_bytes = 12.0 * 1099511627776.0;
  j = sim::build_job_spec(r.plan, r.ctx, o);
  CHECK(j.data_input.aggregate_bytes_per_s == Approx(12 * 1000e6));
  CHECK_FALSE(sim::estimate_job(j).io_bound);
  o.fsx_bytes = 1e9;
  REQUIRE_ERROR_CONTAINS(sim::build_job_spec(r.plan, r.ctx, o), "below the minimum");
}

TEST_CASE("simulator: prices come from the catalog and a user price file, and SageMaker spot scales by the EC2 discount", "[simulator][job]") {
  hw::Catalog cat = hw::Catalog::builtin();
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 256, cat);
  const auto& p = r.ctx.instance->prices;
  REQUIRE(p.ec2_on_demand);
  REQUIRE(p.sagemaker_on_demand);
  REQUIRE(p.spot);
  sim::JobOptions o;
  o.step_time_s = 1.0;
  o.tokens = 1e9;
  sim::JobSpec j = sim::build_job_spec(r.plan, r.ctx, o);
  CHECK(j.prices.on_demand_usd_per_hour == *p.ec2_on_demand);
  CHECK(j.prices.minimum_billed_s == 60);
  o.platform = plan::Platform::sagemaker;
  o.purchase = sim::PurchaseOption::spot;
  j = sim::build_job_spec(r.plan, r.ctx, o);
  CHECK(j.prices.on_demand_usd_per_hour == *p.sagemaker_on_demand);
  CHECK(j.prices.spot_usd_per_hour == Approx(*p.sagemaker_on_demand * *p.spot / *p.ec2_on_demand));
  // The same run on SageMaker costs the SageMaker/EC2 price ratio more: provisioning differs
  // but is not billed, the billed startup and the work are the same.
  o.purchase = sim::PurchaseOption::on_demand;
  const auto sm = sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o));
  o.platform = plan::Platform::ec2;
  const auto ec2 = sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o));
  CHECK(sm.billed_s_per_node == Approx(ec2.billed_s_per_node));
  CHECK(sm.cost_usd / ec2.cost_usd == Approx(*p.sagemaker_on_demand / *p.ec2_on_demand));

  // A user price file (applied by the catalog) replaces them.
  cat.apply_price_json(json::parse_text(R"({"region": "eu-west-1", "source": "test quote",
      "prices": {"p4d.24xlarge": {"ec2_on_demand": 19.5, "spot": 7.1, "interruption_bucket": "5-10%"}}})", "mine.json"),
                       "mine.json");
  Resolved mine = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 256, cat);
  o.purchase = sim::PurchaseOption::blend;
  o.on_demand_nodes = 1;
  j = sim::build_job_spec(mine.plan, mine.ctx, o);
  CHECK(j.prices.on_demand_usd_per_hour == 19.5);
  CHECK(j.prices.spot_usd_per_hour == 7.1);
  const auto e = sim::estimate_job(j);
  CHECK(e.cost_usd == Approx((19.5 + 7.1) * e.billed_s_per_node / 3600));
  // Its Spot Advisor bucket drives the interruption model.
  const auto m = sim::default_interruption_model(*mine.ctx.instance);
  CHECK(m.rate_per_instance_per_s() == Approx(sim::LifecycleFacts::builtin().bucket_rate_per_s("5-10%")));
}

TEST_CASE("simulator: without a bucket the spot model is the p3 trace default, said as an assumption", "[simulator][job]") {
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 256);
  REQUIRE(r.ctx.instance->prices.interruption_bucket.empty());
  const auto m = sim::default_interruption_model(*r.ctx.instance);
  CHECK(m.rate_per_instance_per_s() == sim::LifecycleFacts::builtin().spot_default.rate_per_instance_per_s);
  bool said = false;
  for (const auto& a : m.assumptions()) said = said || a.find("no Spot Advisor interruption bucket") != std::string::npos;
  CHECK(said);
}

TEST_CASE("simulator: impossible job options are refused with a hint", "[simulator][job]") {
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 256);
  sim::JobOptions o;
  o.step_time_s = 1.0;
  o.tokens = 1e9;
  o.purchase = sim::PurchaseOption::spot;
  o.checkpoint_storage = sim::CheckpointStorage::local_nvme;
  REQUIRE_ERROR_CONTAINS(sim::build_job_spec(r.plan, r.ctx, o), "lost when a spot instance is reclaimed");
  o.checkpoint_storage = sim::CheckpointStorage::s3;
  o.warm_pool = true;
  REQUIRE_ERROR_CONTAINS(sim::build_job_spec(r.plan, r.ctx, o), "warm pools are a SageMaker feature");
  o.warm_pool = false;
  o.purchase = sim::PurchaseOption::blend;
  o.on_demand_nodes = 1;
  o.platform = plan::Platform::sagemaker;
  REQUIRE_ERROR_CONTAINS(sim::build_job_spec(r.plan, r.ctx, o), "either on-demand or on managed spot");
  REQUIRE_ERROR_CONTAINS(sim::parse_data_source("s3-fast"), "unknown data source");
  // An instance type without an on-demand price (p5e is sold as Capacity Blocks only).
  Resolved p5e = resolve("gpt3-1.3b", "p5e.48xlarge", 1, 8, 1, 1, 64);
  o = {};
  o.step_time_s = 1.0;
  o.tokens = 1e9;
  REQUIRE_ERROR_CONTAINS(sim::build_job_spec(p5e.plan, p5e.ctx, o), "p5e.48xlarge has no ec2_on_demand price");
}

TEST_CASE("simulator: the data loader's step is the slowest of per-node read, aggregate read and decode", "[simulator][job][loader]") {
  // Closed form: 1024 samples of 110 kB on 2 nodes; per node 512 samples, 56.32 MB.
  sim::DataInputSpec in;
  in.bytes_per_sample = 110e3;
  in.samples_per_step = 1024;
  CHECK(sim::input_time_per_step_s(in, 2) == 0);  // nothing limits it
  in.bytes_per_s_per_node = 1e9;
  CHECK(sim::input_time_per_step_s(in, 2) == Approx(512 * 110e3 / 1e9));
  in.decode_samples_per_s_per_node = 50 * 577.0;
  CHECK(sim::input_time_per_step_s(in, 2) == Approx(512 * 110e3 / 1e9));  // read 56.3 ms > decode 17.7 ms
  in.decode_samples_per_s_per_node = 10 * 577.0;
  CHECK(sim::input_time_per_step_s(in, 2) == Approx(512 / (10 * 577.0)));  // decode 88.7 ms > read
  in.aggregate_bytes_per_s = 0.5e9;
  CHECK(sim::input_time_per_step_s(in, 2) == Approx(1024 * 110e3 / 0.5e9));  // 225 ms shared by both nodes
}

TEST_CASE("simulator: image models decode on the vCPUs not driving GPUs, token models decode nothing", "[simulator][job][loader]") {
  const auto& f = sim::LifecycleFacts::builtin();
  CHECK(f.image_decode_per_vcpu_per_s == 577);  // Pillow, one thread, Xeon Platinum 8581C (lifecycle.json)
  CHECK(f.loader_reserved_vcpus_per_gpu == 1);
  Resolved img = resolve("resnet-50", "p4d.24xlarge", 2, 16, 1, 1, 1024);
  sim::JobOptions o;
  sim::DataInputSpec in = sim::data_input_spec(img.plan, img.ctx, o);
  CHECK(in.decode_samples_per_s_per_node == Approx((96 - 8) * 577.0));
  CHECK(in.samples_per_step == 1024);
  CHECK(in.bytes_per_sample == Approx(f.image_sample_bytes));
  CHECK(in.bytes_per_s_per_node == Approx(8.003e9));  // S3 FastFile, capped at the largest measured S3 throughput
  // EBS gp3 at its 125 MiB/s baseline: 512 JPEGs per node take 512 x 110 kB / 131 MB/s = 0.43 s.
  o.data_source = sim::DataSource::ebs;
  in = sim::data_input_spec(img.plan, img.ctx, o);
  CHECK(sim::input_time_per_step_s(in, 2) == Approx(512 * f.image_sample_bytes / f.ebs_gp3_baseline_bytes_per_s));
  // build_job_spec carries the same spec, and the job's step waits for it.
  o.step_time_s = 0.1;
  o.samples = 1'281'167;
  const sim::JobSpec job = sim::build_job_spec(img.plan, img.ctx, o);
  CHECK(job.input_time_per_step_s() == Approx(sim::input_time_per_step_s(in, 2)));
  CHECK(job.effective_step_time_s() == Approx(sim::input_time_per_step_s(in, 2)));
  Resolved txt = resolve("gpt3-1.3b", "p4d.24xlarge", 2, 16, 1, 1, 512);
  CHECK(sim::data_input_spec(txt.plan, txt.ctx, {}).decode_samples_per_s_per_node == 0);
}

TEST_CASE("simulator: an image model's work in tokens counts one token per sample", "[simulator][job]") {
  Resolved r = resolve("resnet-50", "p4d.24xlarge", 1, 8, 1, 1, 256);
  sim::JobOptions o;
  o.tokens = 1'281'167.0 * 90;  // what the search writes: samples x epochs
  CHECK(sim::job_steps(r.plan, r.ctx, o) == static_cast<int64_t>(std::ceil(1'281'167.0 * 90 / 256)));
  o = {};
  o.samples = 1'281'167;
  o.epochs = 90;
  CHECK(sim::job_steps(r.plan, r.ctx, o) == static_cast<int64_t>(std::ceil(1'281'167.0 * 90 / 256)));
}

TEST_CASE("simulator: the job's cost has inter-AZ traffic and the data's inter-region transfer as their own lines", "[simulator][job]") {
  Resolved r = resolve("gpt3-1.3b", "p4d.24xlarge", 4, 32, 1, 1, 256);
  sim::JobOptions o;
  o.step_time_s = 1.0;
  o.tokens = 256.0 * 2048 * 1000;  // 1000 steps
  const sim::JobEstimate base = sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o));
  CHECK(base.inter_az_transfer_usd == 0.0);
  CHECK(base.data_transfer_usd == 0.0);
  sim::JobSpec one = sim::build_job_spec(r.plan, r.ctx, o);
  CHECK(std::count(one.assumptions.begin(), one.assumptions.end(),
                   "all 4 instances in one AZ, cluster placement group, EFA") == 1);

  // 2 GB per step between AZs: 2 x $0.01 per GB (out of one AZ, into the other) x 1000 steps = $40.
  o.inter_az_bytes_per_step = 2e9;
  const sim::JobEstimate az = sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o));
  CHECK(az.inter_az_transfer_usd == Approx(40.0));
  CHECK(az.cost_usd == Approx(base.cost_usd + 40.0));
  CHECK(az.cost_on_demand_usd == Approx(base.cost_on_demand_usd + 40.0));

  // Data in eu-west-1, job in us-east-1: the tokens' bytes (2 bytes per GPT-3 token id) once at $0.02/GB.
  o.inter_az_bytes_per_step = 0;
  r.plan.data_region = "eu-west-1";
  const double bytes = o.tokens * sim::default_sample_bytes(r.ctx) / r.ctx.seq_len;
  const sim::JobEstimate data = sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o));
  CHECK(data.data_transfer_usd == Approx(bytes / 1e9 * 0.02));
  CHECK(data.cost_usd == Approx(base.cost_usd + data.data_transfer_usd));
  // A given dataset size, read 3 epochs: 3 x 500 GB x $0.02.
  r.plan.dataset_bytes = 500e9;
  o.tokens = 0;
  o.samples = 256.0 * 100;
  o.epochs = 3;
  CHECK(sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o)).data_transfer_usd == Approx(30.0));
  // The data in the job's own region costs nothing.
  r.plan.data_region = "us-east-1";
  CHECK(sim::estimate_job(sim::build_job_spec(r.plan, r.ctx, o)).data_transfer_usd == 0.0);
}

TEST_CASE("simulator: the placement assumption names the AZ blocks and the groups that cross AZs", "[simulator][job]") {
  Resolved one = resolve("gpt3-1.3b", "p4d.24xlarge", 4, 32, 1, 1, 256);
  CHECK(sim::placement_assumption(one.plan, one.ctx) == "all 4 instances in one AZ, cluster placement group, EFA");
  // dp over all 32 GPUs, 4 instances on 2 AZs: the dp ring crosses.
  plan::Plan p = one.plan;
  p.placement.azs = 2;
  Resolved dp(p, hw::Catalog::builtin());
  const std::string a = sim::placement_assumption(dp.plan, dp.ctx);
  CHECK_THAT(a, Catch::StartsWith("4 instances over 2 AZs in contiguous blocks (2 + 2), a cluster placement group each; EFA inside "
                                  "an AZ, TCP between AZs (NCCL sockets, 16 flows of 5 Gbit/s, at most the instance's 400 Gbit/s"));
  CHECK_THAT(a, Catch::EndsWith("groups across AZs: dp"));
  // pp = 2 on 2 AZs: each stage is one AZ's block, dp and tp stay inside; the pipeline (and the
  // tied embedding's all-reduce between the first and last stage) crosses.
  p.dp = 4;
  p.tp = 4;
  p.pp = 2;
  p.stages.clear();
  p.num_micro_batches = 0;
  Resolved pp(p, hw::Catalog::builtin());
  CHECK_THAT(sim::placement_assumption(pp.plan, pp.ctx),
             Catch::EndsWith("groups across AZs: pp (pipeline sends and the tied embedding's gradient all-reduce)"));
  // 3 instances on 3 AZs with tp = 8 inside a node and dp across: dp crosses, tp never.
  p = one.plan;
  p.instance_count = 3;
  p.dp = 3;
  p.tp = 8;
  p.global_batch = 240;
  p.num_micro_batches = 0;
  p.placement.azs = 3;
  Resolved tp(p, hw::Catalog::builtin());
  CHECK_THAT(sim::placement_assumption(tp.plan, tp.ctx), Catch::EndsWith("(1 + 1 + 1), a cluster placement group each; EFA inside an AZ, "
                                                                          "TCP between AZs (NCCL sockets, 16 flows of 5 Gbit/s, at most "
                                                                          "the instance's 400 Gbit/s; 500 us one-way); groups across AZs: dp"));
}
