// `trainplan launch --nproc-per-node K plan.json [execute options]`: starts K processes of
// `trainplan execute plan.json [execute options]` on this node with a torchrun-style
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the
// way torchrun starts a PyTorch job; --nnodes / --node-rank / --master-addr / --master-port run
// one launch per node of a multi-node job. SIGTERM, SIGINT and SIGUSR1 are forwarded to every
// process. When a process fails, the others notice on their own (they exit naming it); any
// still running after --grace seconds are killed. Exit status: 0 when all succeeded, 75 when all
// stopped interrupted (checkpoint committed), else the status of the first process that failed
// (128 + signal for a killed one).
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "commands.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/executor/launch.hpp"

extern char** environ;

namespace trainplan::cli {
namespace {

struct LaunchArgs {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  double grace_s = 30;
  std::vector<std::string> execute_args;  // the plan and execute's options
};

// A port that was free a moment ago (the first process serves the store on it).
int free_port() {
  int port = 0;
  auto probe = executor::TcpRendezvous::serve("127.0.0.1", 0);
  port = probe->port();
  return port;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void run(const LaunchArgs& a) {
  if (a.nproc_per_node < 1) throw Error(fmt::format("--nproc-per-node must be at least 1, got {}", a.nproc_per_node));
  if (a.nnodes < 1) throw Error(fmt::format("--nnodes must be at least 1, got {}", a.nnodes));
  if (a.node_rank < 0 || a.node_rank >= a.nnodes)
    throw Error(fmt::format("--node-rank {} is not a node of --nnodes {}", a.node_rank, a.nnodes));
  if (a.execute_args.empty())
    throw Error("launch: no plan given").hint("trainplan launch --nproc-per-node K plan.json [execute options]");
  if (a.nnodes > 1 && a.master_port == 0)
    throw Error("launch: a multi-node job needs --master-port (and --master-addr: node 0's address)");
  const int port = a.master_port > 0 ? a.master_port : free_port();
  const int world = a.nnodes * a.nproc_per_node;

  // The child's environment: ours without any other launcher's variables, plus the job's.
  const char* kDropped[] = {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "TRAINPLAN_RANK", "TRAINPLAN_RENDEZVOUS", "RANK",
                            "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const char* d : kDropped) drop = drop || name == d;
    if (!drop) base.push_back(kv);
  }

  std::vector<std::string> argv_text = {"trainplan"};
  const GlobalOptions& g = global_options();
  if (!g.catalog_dir.empty()) argv_text.insert(argv_text.end(), {"--catalog-dir", g.catalog_dir});
  if (!g.price_file.empty()) argv_text.insert(argv_text.end(), {"--prices", g.price_file});
  if (!g.region.empty()) argv_text.insert(argv_text.end(), {"--region", g.region});
  argv_text.push_back("execute");
  argv_text.insert(argv_text.end(), a.execute_args.begin(), a.execute_args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_text) argv.push_back(s.data());
  argv.push_back(nullptr);

  // Signals arrive through sigtimedwait below; the children start with none blocked.
  sigset_t handled, old_mask, none;
  sigemptyset(&handled);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGCHLD}) sigaddset(&handled, sig);
  sigemptyset(&none);
  sigprocmask(SIG_BLOCK, &handled, &old_mask);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);

  std::map<pid_t, int> running;  // pid -> rank
  for (int local = 0; local < a.nproc_per_node; ++local) {
    const int rank = a.node_rank * a.nproc_per_node + local;
    std::vector<std::string> env_text = base;
    env_text.push_back(fmt::format("RANK={}", rank));
    env_text.push_back(fmt::format("WORLD_SIZE={}", world));
    env_text.push_back(fmt::format("LOCAL_RANK={}", local));
    env_text.push_back(fmt::format("LOCAL_WORLD_SIZE={}", a.nproc_per_node));
    env_text.push_back(fmt::format("MASTER_ADDR={}", a.master_addr));
    env_text.push_back(fmt::format("MASTER_PORT={}", port));
    std::vector<char*> envp;
    for (std::string& s : env_text) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, &attr, argv.data(), envp.data());
    if (rc != 0) {
      for (const auto& [p, r] : running) kill(p, SIGKILL);
      for (const auto& [p, r] : running) waitpid(p, nullptr, 0);
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      throw Error(fmt::format("launch: cannot start process {}: {}", rank, std::strerror(rc)));
    }
    running[pid] = rank;
  }
  posix_spawnattr_destroy(&attr);

  using Clock = std::chrono::steady_clock;
  int first_failure = 0;     // exit code of the first process that failed (not interrupted)
  bool all_interrupted = true;
  bool any_failed = false;
  Clock::time_point kill_at = Clock::time_point::max();
  while (!running.empty()) {
    // Reap whoever ended.
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = running.find(pid);
      if (it == running.end()) continue;
      const int rank = it->second;
      running.erase(it);
      const int code = exit_code_of(status);
      if (code != kExitInterrupted) all_interrupted = false;
      if (code != 0 && code != kExitInterrupted) {
        std::fprintf(stderr, "launch: process %d (pid %d) %s\n", rank, static_cast<int>(pid), describe_status(status).c_str());
        if (!any_failed) {
          any_failed = true;
          first_failure = code;
          if (!running.empty()) {
            kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.grace_s));
            std::fprintf(stderr, "launch: waiting up to %g s for the other processes to notice and exit\n", a.grace_s);
          }
        }
      }
    }
    if (running.empty()) break;
    if (Clock::now() >= kill_at) {
      for (const auto& [p, r] : running) {
        std::fprintf(stderr, "launch: process %d (pid %d) still runs after the grace period: killing it\n", r,
                     static_cast<int>(p));
        kill(p, SIGKILL);
      }
      kill_at = Clock::time_point::max();
    }
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&handled, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGUSR1)
      for (const auto& [p, r] : running) kill(p, sig);
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (any_failed) throw ExitStatus{first_failure};
  if (all_interrupted) throw ExitStatus{kExitInterrupted};
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start the processes of `trainplan execute` on this node with a torchrun-style environment (RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR, MASTER_PORT): trainplan launch --nproc-per-node K plan.json [execute options]");
  cmd->add_option("--nproc-per-node", args->nproc_per_node, "Processes on this node (each holds ranks / processes ranks)")
      ->capture_default_str();
  cmd->add_option("--nnodes", args->nnodes, "Nodes of the job (one launch per node)")->capture_default_str();
  cmd->add_option("--node-rank", args->node_rank, "This node's index")->capture_default_str();
  cmd->add_option("--master-addr", args->master_addr, "Address of node 0 (it serves the rendezvous store)")
      ->capture_default_str();
  cmd->add_option("--master-port", args->master_port, "Port of the rendezvous store (0: a free one; one node only)")
      ->capture_default_str();
  cmd->add_option("--grace", args->grace_s,
                  "Seconds the other processes get to exit on their own after one failed, before they are killed")
      ->capture_default_str();
  // Everything from the plan on is execute's.
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->fallthrough(false);
  cmd->callback([args, cmd] {
    args->execute_args = cmd->remaining();
    run(*args);
  });
}

}  // namespace trainplan::cli
