// Joining a multi-process job (job.hpp).
#include "job.hpp"

namespace trainplan::cli {

Job join_job(int plan_world_size, double timeout_s) {
  Job job;
  job.launch = executor::detect_launch();
  if (job.launch.world_size <= 1) return job;
  const executor::LaunchInfo& me = job.launch;
  job.ranks = executor::process_ranks(plan_world_size, me.rank, me.world_size);
  std::vector<int> process_of_rank;
  for (int r = 0; r < plan_world_size; ++r) process_of_rank.push_back(r / (plan_world_size / me.world_size));
  job.store = executor::connect_rendezvous(me, 300);
  // How the other processes reach this one: loopback on one node; else the address this
  // process reaches the store from (process 0: the address it serves the store on).
  std::string host = "127.0.0.1";
  if (!me.single_node()) {
    host = job.store->local_address();
    if (host.empty()) host = me.rendezvous_host.empty() ? executor::default_rendezvous_host(me) : me.rendezvous_host;
  }
  executor::TcpWorldOptions o;
  o.timeout_s = timeout_s;
  job.world = executor::TcpWorld::join(*job.store, me.rank, process_of_rank, host, o);
  return job;
}

}  // namespace trainplan::cli
