// Helpers of the multi-process tests: start `trainplan` processes (under mpirun, `trainplan
// launch` or a torchrun-style environment set here), wait for them with a deadline (a hang
// fails the test instead of blocking it), read their output, and compare checkpoints.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "executor/runtime_fixture.hpp"
#include "trainplan/plan/plan.hpp"

extern char** environ;

namespace trainplan::executor::mp {

namespace fs = std::filesystem;

/// The trainplan binary and mpirun ("" when CMake found none: those tests exit 77, skipped).
inline std::string cli() { return TRAINPLAN_CLI; }
inline std::string mpirun() { return TRAINPLAN_MPIRUN; }

/// Marks the test skipped (CTest SKIP_RETURN_CODE 77) when mpirun is missing.
inline void require_mpirun() {
  if (mpirun().empty()) {
    std::fprintf(stderr, "skipped: no mpirun (install openmpi-bin)\n");
    std::exit(77);
  }
}

/// A fresh folder under the build tree for one test.
inline std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(TRAINPLAN_BINARY_DIR) / "tests" / "mp-scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A started process whose stdout and stderr go to `output`.
struct Proc {
  pid_t pid = -1;
  std::string output;
  int status = -1;  // exit status, 128 + signal, or -1 while running
  std::string text() const { return read_text(output); }
};

/// Starts argv with the environment of this process minus any launcher's variables, plus `env`.
inline Proc spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                  const std::string& output) {
  const char* dropped[] = {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "TRAINPLAN_RANK", "TRAINPLAN_RENDEZVOUS", "RANK",
                           "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    bool drop = env.count(name) > 0;
    for (const char* d : dropped) drop = drop || name == d;
    if (!drop) env_text.push_back(kv);
  }
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv, cenv;
  for (std::string& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  for (std::string& s : env_text) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Proc p;
  p.output = output;
  const int rc = posix_spawn(&p.pid, args[0].c_str(), &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return p;
}

/// Waits until `p` exits or `timeout_s` passes (then kills it and returns false).
inline bool wait_for(Proc& p, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    int status = 0;
    const pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) {
      p.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      p.status = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// Waits until the output of `p` contains `needle` (false after timeout_s or if p ended).
inline bool wait_for_output(const Proc& p, const std::string& needle, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (p.text().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

/// Runs a command to its end (at most timeout_s); its exit status and output.
inline Proc run(const std::vector<std::string>& argv, const std::string& output, double timeout_s = 240,
                const std::map<std::string, std::string>& env = {}) {
  Proc p = spawn(argv, env, output);
  INFO(p.text());
  REQUIRE(wait_for(p, timeout_s));
  return p;
}

/// `mpirun -np n trainplan args...` (root-safe, oversubscribed: CI has 2 cores).
inline std::vector<std::string> mpirun_cmd(int n, const std::vector<std::string>& args) {
  std::vector<std::string> c = {mpirun(), "--allow-run-as-root", "--oversubscribe", "-np", std::to_string(n), cli()};
  c.insert(c.end(), args.begin(), args.end());
  return c;
}
inline std::vector<std::string> cli_cmd(const std::vector<std::string>& args) {
  std::vector<std::string> c = {cli()};
  c.insert(c.end(), args.begin(), args.end());
  return c;
}

/// The "step N  loss X" values a run printed, as printed.
inline std::vector<std::string> printed_losses(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("step ", 0) == 0 && line.find("loss ") != std::string::npos) {
      const size_t at = line.find("loss ") + 5;
      out.push_back(line.substr(at, line.find(' ', at) - at));
    }
  return out;
}

/// Writes the plan of `spec` as JSON (what `trainplan execute` reads).
inline std::string write_plan(const executor::testing::RunSpec& spec, const std::string& path) {
  auto r = executor::testing::resolve_run(spec);
  plan::write_plan_file(path, r->plan);
  return path;
}

/// Every file of checkpoint folder a (rank files, manifest) is byte-identical to b's.
inline void check_same_checkpoint_files(const std::string& a, const std::string& b) {
  std::vector<std::string> names_a, names_b;
  for (const auto& e : fs::directory_iterator(a)) names_a.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) names_b.push_back(e.path().filename().string());
  std::sort(names_a.begin(), names_a.end());
  std::sort(names_b.begin(), names_b.end());
  REQUIRE(names_a == names_b);
  for (const std::string& n : names_a) {
    INFO(n);
    CHECK(read_text(a + "/" + n) == read_text(b + "/" + n));
  }
}

}  // namespace trainplan::executor::mp
