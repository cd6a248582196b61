// One process per rank (or several ranks per process): `trainplan execute` under
// `mpirun -np 2/4/8` and `trainplan launch` runs the plans of the in-process equivalence suite
// (dp, tp with sequence parallelism, pp with 1F1B and interleaving, ZeRO 1-3, recomputation)
// and leaves the same bits as the in-process run (every rank file of its checkpoint and the
// manifest byte-identical, the same printed losses), hence within 1e-5 of one rank. A killed
// process is named by every other within 30 s; SIGTERM stops all after one step with a
// committed checkpoint (exit 75) that resumes bit-identically, on another number of processes
// too, while another world size is refused; the measured timeline of every rank is gathered.
#include <cstring>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "mp_support.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/executor/launch.hpp"
#include "trainplan/plan/timeline.hpp"

using namespace trainplan;
using namespace trainplan::executor;
using namespace trainplan::executor::mp;
using trainplan::executor::testing::RunSpec;
namespace tst = trainplan::executor::testing;

namespace {

constexpr int kSteps = 2;
// AdamW's epsilon of the comparison with one rank (see tests/executor/test_equivalence.cpp:
// gradients that are zero in exact arithmetic would otherwise turn float32 noise into updates).
constexpr double kAdamEps = 1e-4;
constexpr double kRelTol = 1e-5;

RuntimeOptions options() {
  RuntimeOptions o;
  o.adamw.eps = kAdamEps;
  o.timeout_s = 60;
  return o;
}

std::string describe(const RunSpec& s) {
  std::string d = fmt::format("{} dp{} tp{} pp{}", s.model, s.dp, s.tp, s.pp);
  if (s.vp > 1) d += fmt::format(" vp{}", s.vp);
  if (s.zero) d += fmt::format(" zero{}", s.zero);
  if (s.sp) d += " sp";
  if (s.recompute != plan::Recompute::none) d += " recompute-" + std::string(plan::recompute_name(s.recompute));
  return d;
}

std::vector<std::string> execute_args(const std::string& plan_file, const std::string& ckpt) {
  return {"execute", plan_file, "--steps", std::to_string(kSteps), "--adam-eps", fmt::format("{}", kAdamEps),
          "--checkpoint-dir", ckpt, "--checkpoint-every", std::to_string(kSteps), "--timeout", "60"};
}

// Runs `spec` as the processes `command` starts and checks it against the in-process run and
// one rank.
void check_against_in_process(const RunSpec& spec, const std::string& name,
                              const std::function<std::vector<std::string>(const std::vector<std::string>&)>& command) {
  const std::string dir = scratch(name);
  const std::string plan_file = write_plan(spec, dir + "/plan.json");
  const Proc p = run(command(execute_args(plan_file, dir + "/mp")), dir + "/mp.out");
  INFO(p.text());
  REQUIRE(p.status == 0);

  // The in-process run of the same plan: the same losses, the same checkpoint bytes.
  auto in_process = tst::make_runtime(spec, options());
  std::vector<std::string> losses;
  std::vector<double> loss_values;
  for (int i = 0; i < kSteps; ++i) {
    const double loss = in_process->step().loss;
    loss_values.push_back(loss);
    losses.push_back(fmt::format("{:.6f}", loss));
  }
  CHECK(printed_losses(p.text()) == losses);
  const std::string ref = checkpoint_folder(dir + "/in-process", kSteps);
  in_process->save_checkpoint(ref);
  check_same_checkpoint_files(checkpoint_folder(dir + "/mp", kSteps), ref);

  // One rank processing the whole batch: within float32 reordering noise.
  RunSpec one;
  one.model = spec.model;
  one.global_batch = spec.global_batch;
  auto single = tst::make_runtime(one, options());
  std::vector<double> single_losses;
  for (int i = 0; i < kSteps; ++i) single_losses.push_back(single->step().loss);
  for (int i = 0; i < kSteps; ++i) CHECK(loss_values[static_cast<size_t>(i)] == Approx(single_losses[static_cast<size_t>(i)]).epsilon(kRelTol));
  auto restored = tst::make_runtime(spec, options());
  restored->load_checkpoint(checkpoint_folder(dir + "/mp", kSteps));
  for (const std::string& n : single->parameter_names()) {
    INFO(n);
    CHECK(tst::relative_error(restored->parameter(n), single->parameter(n)) < kRelTol);
  }
}

RunSpec spec(const std::string& model, int dp, int tp, int pp) {
  RunSpec s;
  s.model = model;
  s.dp = dp, s.tp = tp, s.pp = pp;
  return s;
}

void check_mpirun(int np, const std::vector<RunSpec>& specs) {
  require_mpirun();
  for (const RunSpec& s : specs) {
    DYNAMIC_SECTION(describe(s) << " under mpirun -np " << np) {
      check_against_in_process(s, fmt::format("mpirun-{}-{}", np, &s - specs.data()),
                               [np](const std::vector<std::string>& args) { return mpirun_cmd(np, args); });
    }
  }
}

}  // namespace

TEST_CASE("executor mp: mpirun -np 2 (dp, ZeRO, tp + sp, pp) equals the in-process run and one rank",
          "[executor_mp][mpirun]") {
  std::vector<RunSpec> specs;
  specs.push_back(spec("tiny-gpt", 2, 1, 1));
  RunSpec z = spec("tiny-mlp", 2, 1, 1);
  z.zero = 2;
  specs.push_back(z);
  RunSpec t = spec("tiny-gpt", 1, 2, 1);
  t.sp = true;
  specs.push_back(t);
  RunSpec p = spec("tiny-llama", 1, 1, 2);
  p.micro_batch = 2;
  specs.push_back(p);
  check_mpirun(2, specs);
}

TEST_CASE("executor mp: mpirun -np 4 (dp x tp, ZeRO-3, tp x pp with full recomputation) equals the in-process run and "
          "one rank",
          "[executor_mp][mpirun]") {
  std::vector<RunSpec> specs;
  RunSpec a = spec("tiny-gpt", 2, 2, 1);
  a.zero = 1;
  specs.push_back(a);
  RunSpec z = spec("tiny-gpt", 4, 1, 1);
  z.zero = 3;
  specs.push_back(z);
  RunSpec r = spec("tiny-gpt", 1, 2, 2);
  r.recompute = plan::Recompute::full;
  r.sp = true;
  r.micro_batch = 4;
  specs.push_back(r);
  check_mpirun(4, specs);
}

TEST_CASE("executor mp: mpirun -np 8 (dp2 x tp2 x pp2, interleaved 1F1B) and -np 2 holding 4 ranks each equal the "
          "in-process run and one rank",
          "[executor_mp][mpirun]") {
  std::vector<RunSpec> specs;
  RunSpec all = spec("tiny-gpt", 2, 2, 2);
  all.micro_batch = 2;
  all.sp = true;
  all.zero = 1;
  specs.push_back(all);
  RunSpec inter = spec("tiny-gpt-deep", 2, 2, 2);
  inter.schedule = plan::Schedule::interleaved_1f1b;
  inter.vp = 2;
  inter.micro_batch = 2;
  specs.push_back(inter);
  check_mpirun(8, specs);
  RunSpec sel = spec("tiny-gpt", 2, 2, 2);
  sel.micro_batch = 2;
  sel.recompute = plan::Recompute::selective;
  check_mpirun(2, {sel});
}

namespace {

// `trainplan launch --nproc-per-node n` with execute's arguments (without "execute").
std::function<std::vector<std::string>(const std::vector<std::string>&)> launch_cmd(int n) {
  return [n](const std::vector<std::string>& args) {
    std::vector<std::string> c = {cli(), "launch", "--nproc-per-node", std::to_string(n)};
    c.insert(c.end(), args.begin() + 1, args.end());
    return c;
  };
}

}  // namespace

TEST_CASE("executor mp: trainplan launch --nproc-per-node 4 and 2 equal the in-process run and one rank",
          "[executor_mp][launch]") {
  RunSpec all = spec("tiny-gpt", 2, 2, 2);
  all.micro_batch = 2;
  all.sp = true;
  all.zero = 1;
  check_against_in_process(all, "launch-4", launch_cmd(4));
  RunSpec mlp = spec("tiny-mlp", 2, 1, 2);
  mlp.micro_batch = 2;
  mlp.zero = 1;
  mlp.recompute = plan::Recompute::full;
  check_against_in_process(mlp, "launch-2", launch_cmd(2));
}

TEST_CASE("executor mp: trainplan launch of a MoE plan with ep 2 (the all-to-alls across processes) equals the "
          "in-process run and one rank",
          "[executor_mp][launch][moe]") {
  RunSpec moe = spec("tiny-moe", 2, 1, 1);
  moe.ep = 2;
  moe.micro_batch = 2;
  check_against_in_process(moe, "launch-moe", launch_cmd(2));
}

namespace {

// A long run of `plan_file` as `n` processes started here with torchrun-style variables.
std::vector<Proc> start_env_job(int n, const std::vector<std::string>& args, const std::string& dir, int port) {
  std::vector<Proc> procs;
  for (int r = 0; r < n; ++r)
    procs.push_back(spawn(cli_cmd(args),
                          {{"RANK", std::to_string(r)},
                           {"WORLD_SIZE", std::to_string(n)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {"LOCAL_WORLD_SIZE", std::to_string(n)},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", std::to_string(port)}},
                          fmt::format("{}/proc-{}.out", dir, r)));
  return procs;
}

int free_port() {
  auto probe = TcpRendezvous::serve("127.0.0.1", 0);
  return probe->port();
}

}  // namespace

TEST_CASE("executor mp: a process killed with SIGKILL is named by every other, which exit non-zero within 30 s",
          "[executor_mp][failure]") {
  const std::string dir = scratch("sigkill");
  RunSpec s = spec("tiny-gpt", 2, 2, 1);
  const std::string plan_file = write_plan(s, dir + "/plan.json");
  std::vector<Proc> procs = start_env_job(4, {"execute", plan_file, "--steps", "1000000", "--timeout", "120"}, dir, free_port());
  REQUIRE(wait_for_output(procs[0], "step    3", 120));
  kill(procs[2].pid, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(wait_for(procs[2], 10));
  CHECK(procs[2].status == 128 + SIGKILL);
  for (int r : {0, 1, 3}) {
    Proc& p = procs[static_cast<size_t>(r)];
    const double left =
        30 - std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    INFO("process " << r << ": " << p.text());
    REQUIRE(wait_for(p, std::max(left, 0.1)));
    CHECK(p.status != 0);
    CHECK(p.text().find("rank 2 (process 2") != std::string::npos);
    CHECK(p.text().find("the process died or was killed") != std::string::npos);
  }

  // Under trainplan launch: the launcher names the killed process and exits non-zero.
  Proc launch = spawn(cli_cmd({"launch", "--nproc-per-node", "4", plan_file, "--steps", "1000000", "--timeout", "120"}),
                      {}, dir + "/launch.out");
  REQUIRE(wait_for_output(launch, "step    3", 120));
  // The child whose RANK is 1.
  pid_t victim = -1;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string stat = read_text(e.path().string() + "/stat");
    if (stat.empty()) continue;
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launch.pid) continue;
    const std::string env = read_text(e.path().string() + "/environ");
    if (env.find(std::string("\0RANK=1\0", 8)) != std::string::npos || env.rfind("RANK=1", 0) == 0)
      victim = static_cast<pid_t>(std::stol(e.path().filename().string()));
  }
  REQUIRE(victim > 0);
  kill(victim, SIGKILL);
  INFO(launch.text());
  REQUIRE(wait_for(launch, 30));
  CHECK(launch.status != 0);
  CHECK(launch.text().find(fmt::format("launch: process 1 (pid {}) was killed by signal 9", victim)) != std::string::npos);
  CHECK(launch.text().find("rank 1 (process 1") != std::string::npos);
}

TEST_CASE("executor mp: SIGTERM stops every process after one step with a committed checkpoint (exit 75) that resumes "
          "bit-identically, and another world size is refused",
          "[executor_mp][failure]") {
  const std::string dir = scratch("sigterm");
  RunSpec s = spec("tiny-gpt", 2, 1, 2);
  s.micro_batch = 2;
  s.zero = 1;
  const std::string plan_file = write_plan(s, dir + "/plan.json");
  const std::string ckpt = dir + "/ckpt";
  std::vector<Proc> procs = start_env_job(
      4, {"execute", plan_file, "--steps", "1000000", "--checkpoint-dir", ckpt, "--timeout", "120"}, dir, free_port());
  REQUIRE(wait_for_output(procs[0], "step    3", 120));
  kill(procs[3].pid, SIGTERM);  // the notice reaches one process only
  for (Proc& p : procs) {
    INFO(p.text());
    REQUIRE(wait_for(p, 60));
    CHECK(p.status == 75);
  }
  const std::string latest = latest_checkpoint(ckpt);
  REQUIRE(!latest.empty());
  const int64_t k = std::stoll(fs::path(latest).filename().string().substr(5));
  CHECK(k >= 3);
  CHECK(procs[0].text().find(fmt::format("interrupted (SIGTERM / SIGUSR1) after step {}", k)) != std::string::npos);

  // Resume on 2 processes (2 ranks each) for two more steps; the uninterrupted run of the same
  // steps in one process leaves the same bytes.
  const std::string until = std::to_string(k + 2);
  const Proc resumed = run(cli_cmd({"launch", "--nproc-per-node", "2", plan_file, "--resume", "--steps", until,
                                    "--checkpoint-dir", ckpt, "--checkpoint-every", until}),
                           dir + "/resumed.out");
  INFO(resumed.text());
  REQUIRE(resumed.status == 0);
  const Proc straight = run(cli_cmd({"execute", plan_file, "--steps", until, "--checkpoint-dir", dir + "/straight",
                                     "--checkpoint-every", until}),
                            dir + "/straight.out");
  REQUIRE(straight.status == 0);
  check_same_checkpoint_files(checkpoint_folder(ckpt, k + 2), checkpoint_folder(dir + "/straight", k + 2));
  const auto straight_losses = printed_losses(straight.text());
  const auto resumed_losses = printed_losses(resumed.text());
  REQUIRE(resumed_losses.size() == 2);
  CHECK(resumed_losses[0] == straight_losses[static_cast<size_t>(k)]);
  CHECK(resumed_losses[1] == straight_losses[static_cast<size_t>(k + 1)]);

  // The same model on another world size: refused, naming both.
  RunSpec wider = s;
  wider.dp = 4;
  wider.micro_batch = 1;
  const std::string wider_file = write_plan(wider, dir + "/plan-dp4.json");
  const Proc refused = run(cli_cmd({"execute", wider_file, "--resume", "--steps", until, "--checkpoint-dir", ckpt}),
                           dir + "/refused.out");
  INFO(refused.text());
  CHECK(refused.status == 1);
  CHECK(refused.text().find("the checkpoint was written by a world of 4 ranks (dp 2 x tp 1 x pp 2), this plan has 8 "
                            "ranks (dp 4 x tp 1 x pp 2): resuming on another world size is not supported") !=
        std::string::npos);
}

TEST_CASE("executor mp: the measured timelines of every rank merge into one timeline and trace on rank 0",
          "[executor_mp][timeline]") {
  require_mpirun();
  const std::string dir = scratch("timeline");
  RunSpec s = spec("tiny-gpt", 2, 2, 2);
  s.micro_batch = 2;
  const std::string plan_file = write_plan(s, dir + "/plan.json");
  const Proc p = run(mpirun_cmd(4, {"execute", plan_file, "--steps", "2", "--timeline", dir + "/mp.json", "--trace",
                                    dir + "/mp.trace.json"}),
                     dir + "/mp.out");
  INFO(p.text());
  REQUIRE(p.status == 0);
  const Proc one = run(cli_cmd({"execute", plan_file, "--steps", "2", "--timeline", dir + "/in.json"}), dir + "/in.out");
  REQUIRE(one.status == 0);
  const plan::Timeline merged = plan::read_timeline_file(dir + "/mp.json");
  const plan::Timeline reference = plan::read_timeline_file(dir + "/in.json");
  // The same tasks of the same ranks, each once, with the program's bytes and FLOPs.
  auto key = [](const plan::TimelineEvent& e) {
    return fmt::format("{}/{}/{}/{}/{}/{}", e.rank, e.task, e.stream, e.label, e.bytes, e.flops);
  };
  std::multiset<std::string> got, want;
  for (const auto& e : merged.events) got.insert(key(e));
  for (const auto& e : reference.events) want.insert(key(e));
  CHECK(got == want);
  std::set<int> ranks;
  for (const auto& e : merged.events) {
    ranks.insert(e.rank);
    CHECK(e.end_s >= e.start_s);
    CHECK(e.start_s >= 0);
  }
  CHECK(ranks.size() == 8);
  CHECK(merged.step_time_s > 0);
  CHECK(merged.peak_memory_bytes.size() == 8);
  CHECK(merged.source == "measured cpu");
  // The Chrome trace: one process per rank.
  const json::Json trace = json::parse_file(dir + "/mp.trace.json");
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") pids.insert(e["pid"].get<int>());
  CHECK(pids.size() == 8);
}

namespace {
// "step    N  loss ...  time 13.7 ms" -> (N, the time as printed, in seconds)
std::vector<std::tuple<int, std::string, double>> printed_step_times(const std::string& text) {
  std::vector<std::tuple<int, std::string, double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("step ", 0) != 0 || line.find("time ") == std::string::npos) continue;
    std::istringstream words(line.substr(5));
    int step = 0;
    words >> step;
    std::istringstream t(line.substr(line.find("time ") + 5));
    std::string value, unit;
    t >> value >> unit;
    const double scale = unit == "min" ? 60 : unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : 1e-9;
    out.emplace_back(step, value + " " + unit, std::stod(value) * scale);
  }
  return out;
}
}  // namespace

TEST_CASE("executor mp: --timeline-step fastest keeps the fastest step after the first two, the same on every process",
          "[executor_mp][timeline]") {
  // Oracle: the printed step times. The timeline's step is the one of steps 3..N printed
  // fastest, its step time prints as that step's, and under mpirun the merged timeline holds
  // every rank's tasks of that one step, each task once.
  require_mpirun();
  const std::string dir = scratch("timeline-fastest");
  RunSpec s = spec("tiny-gpt", 2, 1, 1);
  const std::string plan_file = write_plan(s, dir + "/plan.json");
  for (const bool mp : {false, true}) {
    const std::vector<std::string> args = {"execute", plan_file, "--steps", "6", "--timeline", dir + "/t.json",
                                           "--timeline-step", "fastest", "--no-history"};
    const Proc p = mp ? run(mpirun_cmd(2, args), dir + "/mp.out") : run(cli_cmd(args), dir + "/in.out");
    INFO(p.text());
    REQUIRE(p.status == 0);
    const auto steps = printed_step_times(p.text());
    REQUIRE(steps.size() == 6);
    const plan::Timeline tl = plan::read_timeline_file(dir + "/t.json");
    const int chosen = tl.meta["step"].get<int>();
    CHECK(chosen >= 3);
    CHECK(chosen <= 6);
    double fastest = 1e30;
    for (const auto& [n, text, t] : steps)
      if (n >= 3) fastest = std::min(fastest, t);
    const auto& [n, text, t] = steps[static_cast<size_t>(chosen - 1)];
    CHECK(n == chosen);
    CHECK(t == fastest);
    CHECK(text == units::format_duration(tl.step_time_s));
    CHECK(p.text().find(fmt::format("measured timeline of step {}:", chosen)) != std::string::npos);
    std::multiset<std::pair<int, int>> tasks;
    for (const auto& e : tl.events) tasks.insert({e.rank, e.task});
    std::set<int> ranks;
    for (const auto& [r, task] : tasks) {
      ranks.insert(r);
      CHECK(tasks.count({r, task}) == 1);
    }
    CHECK(ranks.size() == 2);
  }
}

TEST_CASE("executor mp: trainplan bench under mpirun -np 2 measures the all-reduce across the processes over TCP",
          "[executor_mp][mpirun]") {
  // Oracle: the bench format (calibration/measurements.hpp): process 0 writes one file whose
  // all-reduce points ran over 2 ranks on the tcp communicator, and busbw = algbw (2 (n - 1) / n
  // = 1 for n = 2); the other process writes nothing.
  require_mpirun();
  const std::string dir = scratch("bench-mp");
  const std::string out = dir + "/bench.json";
  run(mpirun_cmd(2, {"bench", "-o", out, "--min-time", "0.002", "--warmup", "1", "--max-bytes", "64KiB"}),
      dir + "/bench.log");
  const json::Json b = json::parse_file(out);
  CHECK(b["communicator"] == "tcp");
  int all_reduce = 0, compute = 0;
  for (const auto& p : b["points"]) {
    if (p["kind"] == "all_reduce") {
      ++all_reduce;
      CHECK(p["ranks"] == 2);
      CHECK(p["median_s"].get<double>() > 0);
      CHECK(p["busbw_bytes_per_s"].get<double>() == Approx(p["algbw_bytes_per_s"].get<double>()));
    } else {
      ++compute;
    }
  }
  CHECK(all_reduce == 4);  // 1, 4, 16, 64 KiB
  CHECK(compute > 0);
}
