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

StepResult simulate_step(const plan::StepProgram& program, const Topology& topology, const hw::GpuSpec& gpu,
                         const SimOptions& options) {
  if (options.overlap_slowdown < 0) throw Error("overlap_slowdown must be >= 0");
  if (options.comm_launch_s < 0) throw Error("comm_launch_s must be >= 0");
  if (options.straggler_stddev < 0) throw Error("straggler_stddev must be >= 0");
  detail::StepSimulator sim(program, topology, gpu, options);
  return sim.run();
}

StepResult simulate_step(const plan::StepProgram& program, const hw::Cluster& cluster, const SimOptions& options) {
  ClusterTopology topology(cluster);
  return simulate_step(program, topology, cluster.gpu_spec(), options);
}

}  // namespace trainplan::sim
