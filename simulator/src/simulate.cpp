// Public entry points of the step simulator.
#include "trainplan/simulator/simulate.hpp"

#include "step_simulator.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/hwprofiles/cluster.hpp"

namespace trainplan::sim {

std::string_view fidelity_name(Fidelity f) { return f == Fidelity::symmetric ? "symmetric" : "full"; }

double Breakdown::exposed_comm_total_s() const {
  double total = 0;
  for (double v : exposed_comm_s) total += v;
  return total;
}

SimOptions options_for(const plan::Plan& plan) {
  SimOptions o;
  o.dp_algorithm = plan.dp_algorithm;
  o.precision = plan.precision;
  return o;
}

HostModel host_model(const hw::SoftwareStack& stack) {
  HostModel h;
  if (stack.name.empty()) return h;
  h.stack = stack.name;
  h.launch_s = stack.launch_s;
  h.layer_hook_s = stack.layer_hook_s;
  h.micro_batch_s = stack.micro_batch_s;
  h.step_s = stack.step_s;
  h.sync_before_optimizer = stack.sync_before_optimizer;
  return h;
}

SimOptions with_software(SimOptions o, const hw::SoftwareStack& stack) {
  o.host = host_model(stack);
  o.compute = with_software(o.compute, stack);
  return o;
}

StepResult simulate_step(const plan::StepProgram& program, const Topology& topology, const hw::GpuSpec& gpu,
                         const SimOptions& options) {
  if (options.overlap_slowdown < 0) throw Error("overlap_slowdown must be >= 0");
  if (options.comm_launch_s < 0) throw Error("comm_launch_s must be >= 0");
  if (options.straggler_stddev < 0) throw Error("straggler_stddev must be >= 0");
  const HostModel& h = options.host;
  if (h.launch_s < 0 || h.layer_hook_s < 0 || h.micro_batch_s < 0 || h.step_s < 0)
    throw Error("host model costs must be >= 0").hint("a software stack's launch, layer_hook, micro_batch and step times");
  detail::StepSimulator sim(program, topology, gpu, options);
  return sim.run();
}

StepResult simulate_step(const plan::StepProgram& program, const hw::Cluster& cluster, const SimOptions& options) {
  ClusterTopology topology(cluster);
  return simulate_step(program, topology, cluster.gpu_spec(), options);
}

}  // namespace trainplan::sim
