// The simulator on EC2 UltraServers (p6e-gb200: 18 instances x 4 B200 in one NVLink domain) and
// on Trainium: ranks of one UltraServer talk over NVLink whichever instance they are on, ranks of
// two UltraServers over EFA; a Trainium plan is planned and simulated like a GPU plan.
#include <numeric>

#include "program_builder.hpp"
#include "test_support.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/plan/step_program.hpp"
#include "trainplan/simulator/collectives.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;
using trainplan::testing::ProgramBuilder;

namespace {

// Step time of one send of `bytes` from GPU a to GPU b on `cluster` (every other rank idle).
double send_time(const hw::Cluster& cluster, int a, int b, double bytes) {
  ProgramBuilder pb(cluster.num_gpus());
  pb.send(a, b, bytes, 1);
  pb.recv(b, a, bytes, 1);
  return sim::simulate_step(pb.program(), cluster, sim::SimOptions{}).step_time_s;
}

double ring_busbw(const hw::Cluster& cluster, std::vector<int> ranks, double bytes) {
  ProgramBuilder b(cluster.num_gpus());
  const int n = static_cast<int>(ranks.size());
  b.collective(b.group(std::move(ranks), plan::CommPurpose::dp), plan::CollectiveKind::all_reduce, bytes);
  sim::SimOptions opt;
  opt.dp_algorithm = plan::DpAlgorithm::ring;
  auto r = sim::simulate_step(b.program(), cluster, opt);
  return bytes / r.step_time_s * sim::bus_bandwidth_factor(plan::CollectiveKind::all_reduce, n);
}

}  // namespace

TEST_CASE("simulator: a pipeline send between instances of one UltraServer takes S/B over NVLink", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::InstanceType& p6e = cat.instance("p6e-gb200.36xlarge");
  hw::Cluster c = hw::Cluster::build(p6e, 19, cat);  // UltraServer #0 (GPUs 0-71) and one instance of #1
  const double bytes = 1024.0 * 1024 * 1024;
  const double nvlink = p6e.topology.nvswitch_bandwidth_bytes_per_s;  // 900 GB/s per direction
  // One GPU's 400 Gbps EFAv4 NIC behind its PCIe link: the route's bottleneck.
  const double nic = c.route(68, 72).bottleneck_bandwidth_bytes_per_s;
  // Closed form S/B + latency, B the route's bottleneck: the NVLink rate across instances 0 and
  // 17 (like inside one), one NIC's path to the next UltraServer.
  REQUIRE(c.route(0, 68).bottleneck_bandwidth_bytes_per_s == Approx(nvlink));
  REQUIRE(nic < nvlink / 10);
  const double in_domain = send_time(c, 0, 68, bytes);
  CHECK(in_domain == Approx(bytes / nvlink + c.route(0, 68).latency_s).epsilon(0.02));
  CHECK(send_time(c, 0, 1, bytes) == Approx(in_domain).epsilon(1e-9));
  const double across = send_time(c, 68, 72, bytes);
  CHECK(across == Approx(bytes / nic + c.route(68, 72).latency_s).epsilon(0.02));
  CHECK(across / in_domain == Approx(nvlink / nic).epsilon(0.03));
}

TEST_CASE("simulator: ring all-reduce over 4 UltraServer instances reaches NVLink, across UltraServers EFA", "[simulator]") {
  const auto& cat = hw::Catalog::builtin();
  const hw::InstanceType& p6e = cat.instance("p6e-gb200.36xlarge");
  const double gib = 1024.0 * 1024 * 1024;
  hw::Cluster c = hw::Cluster::build(p6e, 19, cat);
  // tp x pp inside the 72-GPU domain: 16 GPUs on instances 14-17, one ring over NVLink; NVLS on
  // Blackwell behind NVSwitch moves the full link rate (nccl_nvlink_share = 1).
  std::vector<int> in_domain(16);
  std::iota(in_domain.begin(), in_domain.end(), 56);
  const double nvl = p6e.topology.nvswitch_bandwidth_bytes_per_s * sim::nccl_nvlink_share("10.0", true);
  const double busbw1 = ring_busbw(c, in_domain, gib);
  CHECK(busbw1 <= nvl * 1.0000001);
  CHECK(busbw1 > 0.95 * nvl);
  // Instances 17 and 18 belong to two UltraServers: the ring crosses EFA (4 x 400 Gbps).
  std::vector<int> across(8);
  std::iota(across.begin(), across.end(), 68);
  const double net = p6e.network.bandwidth_bytes_per_s;
  const double busbw2 = ring_busbw(c, across, gib);
  CHECK(busbw2 <= net * 1.0000001);
  CHECK(busbw2 > 0.9 * net);
}

TEST_CASE("simulator: a Trainium plan is lowered and simulated, its NeuronLink at the full modelled rate", "[simulator]") {
  plan::Plan p;
  p.model = "gpt3-350m";
  p.instance_type = "trn1.32xlarge";
  p.instance_count = 2;
  p.dp = 8, p.tp = 2, p.pp = 2;
  p.global_batch = 64;
  p.micro_batch = 1;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "trn.json");
  plan::validate(p, ctx, "trn.json");
  CHECK_FALSE(ctx.gpu->executable());
  plan::StepProgram prog = plan::lower(p, ctx);
  REQUIRE(plan::check_program(prog).empty());
  auto r = sim::simulate_step(prog, ctx.cluster, sim::options_for(p));
  CHECK(r.step_time_s > 0);
  CHECK(r.timeline.meta["gpu"] == "Trainium");
  CHECK(sim::nccl_nvlink_share("", true) == 1.0);
  CHECK(sim::nccl_nvlink_share("", false) == 1.0);
}
