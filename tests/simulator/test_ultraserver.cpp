// The simulator on EC2 UltraServers (p6e-gb200: 18 instances x 4 B200 in one NVLink domain) and
// on Trainium: ranks of one UltraServer talk over NVLink whichever instance they are on, ranks of
// two UltraServers over EFA (the ring all-reduce case is in test_cluster.cpp); a Trainium plan
// is planned and simulated like a GPU plan.
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
