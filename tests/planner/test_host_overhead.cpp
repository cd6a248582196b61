// The software stack's host overhead in the analytical estimate against the step simulator's
// host timeline: a small model on one GPU is host-bound (the step stretches to the host's issue
// time), a large micro-batch is GPU-bound (the stack changes the step by its first launch and
// the sync before the optimizer only); estimate and simulation agree within 1 % on both.
#include <cmath>

#include "plan_fixture.hpp"
#include "test_support.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

using namespace trainplan;

namespace {

struct Steps {
  double simulated = 0, estimated = 0, host_s = 0;
};

Steps steps(const std::string& model, int64_t mb, const std::string& stack) {
  plan::Plan p;
  p.model = model;
  p.instance_type = "g5.xlarge";
  p.global_batch = 4 * mb;
  p.micro_batch = mb;
  p.software = stack;
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
  if (stack.empty()) ctx.software = hw::SoftwareStack{};  // no host model at all
  plan::validate(p, ctx, "test");
  sim::PlanSimOptions so;
  so.sim = sim::options_for(p);
  so.sim.record_timeline = false;
  const planner::StepEstimate e = planner::estimate_step(p, ctx);
  return {sim::simulate_plan(p, ctx, so).step.step_time_s, e.step_time_s, e.host_s};
}

}  // namespace

TEST_CASE("host overhead: a tiny model at micro-batch 1 is host-bound, estimate and simulation agree within 1 %", "[planner]") {
  const Steps none = steps("gpt-tiny", 1, "");
  const Steps eager = steps("gpt-tiny", 1, "pytorch-eager");
  INFO("no host: sim " << none.simulated << " est " << none.estimated << "; eager: sim " << eager.simulated << " est "
                       << eager.estimated);
  CHECK(eager.simulated > 2.0 * none.simulated);  // the GPU idles while the host issues kernels
  CHECK(std::fabs(eager.estimated / eager.simulated - 1) < 0.01);
  // A compiled stack (fewer kernels, cheaper launches, no hooks) is less host-bound.
  const Steps xla = steps("gpt-tiny", 1, "jax-xla");
  CHECK(xla.simulated < eager.simulated);
  CHECK(std::fabs(xla.estimated / xla.simulated - 1) < 0.01);
}

TEST_CASE("host overhead: a large micro-batch is GPU-bound: the stack adds its first launch and optimizer sync only", "[planner]") {
  const Steps none = steps("gpt3-350m", 4, "");
  const Steps eager = steps("gpt3-350m", 4, "pytorch-eager");
  INFO("no host: sim " << none.simulated << " est " << none.estimated << "; eager: sim " << eager.simulated << " est "
                       << eager.estimated);
  const hw::SoftwareStack& s = hw::Catalog::builtin().software("pytorch-eager");
  // The GPU-bound closed form: + micro-batch, hook and launch before the first kernel, + step
  // cost and launch after the sync before the optimizer.
  CHECK(eager.host_s == Approx(s.micro_batch_s + s.layer_hook_s + s.launch_s + s.step_s + s.launch_s));
  CHECK(eager.simulated - none.simulated == Approx(eager.host_s).epsilon(0.05));
  CHECK(std::fabs(eager.estimated / eager.simulated - 1) < 0.01);
}

TEST_CASE("host overhead: an unknown stack name is an error naming the plan's software field and the stacks", "[planner]") {
  plan::Plan p;
  p.model = "gpt-tiny";
  p.instance_type = "g5.xlarge";
  p.global_batch = 1;
  p.micro_batch = 1;
  p.software = "pytorch-eagr";
  REQUIRE_ERROR_CONTAINS(plan::resolve(p, hw::Catalog::builtin(), "plan.json"), "/software");
  REQUIRE_ERROR_CONTAINS(plan::resolve(p, hw::Catalog::builtin(), "plan.json"), "pytorch-eager");
}
