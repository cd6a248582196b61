// `trainplan execute plan.json --backend cpu`: lower the plan and run it for real, every rank a
// thread, printing the loss per step, the step time and the peak memory per rank; optionally
// writing the measured Timeline and Chrome trace (the simulator's formats) and checkpoints.
// Under a launcher (mpirun, srun, torchrun-style variables, `trainplan launch`) this is one
// process of a job: it holds world size / processes consecutive ranks and talks to the other
// processes over TCP; process 0 prints and writes the timeline. SIGTERM or SIGUSR1 (a spot
// notice) stops every process after the same step with a committed checkpoint and exit
// status 75 ("interrupted").
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/data.hpp"
#include "trainplan/executor/launch.hpp"
#include "trainplan/executor/registry.hpp"
#include "trainplan/executor/runtime.hpp"
#include "trainplan/executor/tcp_world.hpp"
#include "trainplan/plan/timeline.hpp"

namespace trainplan::cli {
namespace {

struct ExecuteArgs {
  std::string plan_file;
  std::string backend = "cpu";
  int64_t steps = 1;
  std::string timeline;
  std::string trace;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string memory_limit;
  std::string data_file;
  std::string dtype = "f32";
  uint64_t seed = 1;
  double learning_rate = 1e-3;
  double adam_eps = 1e-8;
  double timeout_s = 60;
};

// Set by SIGTERM / SIGUSR1: finish the step, checkpoint, exit kExitInterrupted.
std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

void install_stop_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

// The job this process belongs to, once joined (join_job).
std::shared_ptr<executor::TcpWorld> g_world;

// This process's part of a multi-process job (empty world: every rank is a thread here).
struct Job {
  executor::LaunchInfo launch;
  std::shared_ptr<executor::Rendezvous> store;
  std::shared_ptr<executor::TcpWorld> world;
  std::vector<int> ranks;
  bool primary() const { return launch.rank == 0; }
};

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
  g_world = job.world;
  return job;
}

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

void run_job(const ExecuteArgs& a);

// In a multi-process job, an error of this process is told to every other process before it
// ends (else they would only see it vanish).
void run(const ExecuteArgs& a) {
  try {
    run_job(a);
  } catch (const std::exception& e) {
    if (g_world) g_world->abort(e.what());
    throw;
  }
}

void run_job(const ExecuteArgs& a) {
  plan::Plan p = plan::read_plan_file(a.plan_file);
  plan::PlanContext ctx = plan::resolve(p, user_catalog(), a.plan_file);
  plan::validate(p, ctx, a.plan_file);
  executor::check_executable(p, a.plan_file);
  const models::ModelSpec& spec = ctx.model_spec;
  if (a.steps < 1) throw Error(fmt::format("--steps must be at least 1, got {}", a.steps));
  if (a.checkpoint_every < 0) throw Error(fmt::format("--checkpoint-every must be >= 0, got {}", a.checkpoint_every));
  if ((a.checkpoint_every > 0 || a.resume) && a.checkpoint_dir.empty())
    throw Error("--checkpoint-every and --resume need --checkpoint-dir");
  const auto dtype = executor::parse_dtype(a.dtype);
  if (!dtype) throw Error(fmt::format("--dtype: unknown element type \"{}\"", a.dtype)).hint("use f32 or f64");

  plan::StepProgram program = plan::lower(p, ctx);
  // Does it fit? The program's declared peak per rank against the limit (default: the GPU's).
  const double limit = a.memory_limit.empty() ? ctx.gpu->memory_bytes : units::parse(a.memory_limit, units::Dimension::bytes);
  try {
    executor::check_memory_limit(program, limit);
  } catch (Error& e) {
    throw e.at(a.plan_file).hint(a.memory_limit.empty()
                                     ? fmt::format("the limit is the {}'s memory; pass --memory-limit to use another",
                                                   ctx.gpu->name)
                                     : e.hint_text());
  }
  install_stop_handlers();
  Job job = join_job(p.world_size(), a.timeout_s);
  const bool multi = job.world != nullptr;
  const bool primary = !multi || job.primary();
  // This process's ranks: their weights, gradients and optimizer state must fit in host memory
  // (the declared static bytes are of that order in f32).
  double host_needed = 0;
  const std::vector<double> declared = executor::declared_peak_memory(program);
  for (size_t r = 0; r < declared.size(); ++r)
    if (!multi || std::find(job.ranks.begin(), job.ranks.end(), static_cast<int>(r)) != job.ranks.end())
      host_needed += declared[r];
  if (*dtype == executor::DType::f64) host_needed *= 2;
  const double host = host_memory_bytes();
  if (host > 0 && host_needed > 0.8 * host)
    throw Error(fmt::format("{} has {} parameters: its {} ranks would need about {} of host memory, this machine has {}",
                            spec.name, units::format_count(ctx.graph.total_params()),
                            multi ? static_cast<int>(job.ranks.size()) : p.world_size(),
                            units::format_bytes(host_needed), units::format_bytes(host)))
        .at(a.plan_file, "/model")
        .hint("the cpu backend is the reference for small models; try one of the tiny catalog models (gpt-tiny, "
              "llama-tiny, mlp-tiny)");

  executor::RuntimeOptions opt;
  opt.backend = a.backend;
  opt.dtype = *dtype;
  opt.seed = a.seed;
  opt.adamw.learning_rate = a.learning_rate;
  opt.adamw.eps = a.adam_eps;
  opt.timeout_s = a.timeout_s;
  opt.world = job.world;
  opt.stop_requested = [] { return g_stop.load(); };
  if (!a.data_file.empty())
    opt.data = std::make_shared<executor::TrainingData>(
        executor::TrainingData::from_tokens(spec, ctx.seq_len, p.global_batch, executor::read_byte_tokens(a.data_file)));
  executor::Runtime rt(p, ctx, std::move(program), opt);
  // Only process 0 of a job prints the run; every process prints its errors.
  auto say = [primary](const std::string& text) {
    if (!primary) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  };
  if (multi)
    say(fmt::format("{} processes under {}, {} rank{} each (threads), talking over TCP\n", job.launch.world_size,
                    job.launch.launcher, job.ranks.size(), job.ranks.size() > 1 ? "s" : ""));
  say(fmt::format("{}: {} on {} ranks (threads), dp/tp/pp {}/{}/{}{}, ZeRO-{}{}, {} schedule, recomputation {}\n",
                  a.plan_file, spec.name, p.world_size(), p.dp, p.tp, p.pp, p.vp > 1 ? fmt::format(" x vp {}", p.vp) : "",
                  p.zero_stage, p.sequence_parallel ? ", sequence parallel" : "", plan::schedule_name(p.schedule),
                  plan::recompute_name(p.recompute)));
  say(fmt::format("backend {} ({}), {}; batch {} samples = {} micro-batch(es) of {} x dp {}; data: {}\n", a.backend,
                  executor::make_backend(a.backend)->description(), a.dtype, p.global_batch, p.num_micro_batches, p.micro_batch, p.dp,
                  a.data_file.empty() ? "synthetic" : a.data_file));
  if (spec.dropout && spec.dropout_p > 0)
    say("note: the executor runs the model's dropout layers as identity (no masks), so runs are deterministic\n");

  if (a.resume) {
    const std::string latest = executor::latest_checkpoint(a.checkpoint_dir);
    if (latest.empty())
      throw Error("no checkpoint to resume from").at(a.checkpoint_dir).hint("run without --resume first, with --checkpoint-every");
    rt.load_checkpoint(latest);
    say(fmt::format("resumed from {} (step {})\n", latest, rt.steps_done()));
  }
  if (rt.steps_done() >= a.steps)
    say(fmt::format("the run already has {} steps (--steps {}): nothing to do\n", rt.steps_done(), a.steps));

  executor::StepResult last;
  bool ran = false;
  bool interrupted = false;
  while (rt.steps_done() < a.steps && !interrupted) {
    last = rt.step();
    ran = true;
    say(fmt::format("step {:4}  loss {:.6f}  grad-norm {:.4f}  time {}\n", last.step, last.loss, last.grad_norm,
                    units::format_duration(last.step_time_s)));
    interrupted = last.stop_requested;
    const bool periodic = a.checkpoint_every > 0 && rt.steps_done() % a.checkpoint_every == 0;
    if ((periodic || interrupted) && !a.checkpoint_dir.empty()) {
      const std::string folder = executor::checkpoint_folder(a.checkpoint_dir, rt.steps_done());
      rt.save_checkpoint(folder);
      say(fmt::format("           checkpoint {}\n", folder));
    }
  }
  auto finish = [&] {
    if (job.world) job.world->close();
    executor::mpi_finalize();
  };
  if (interrupted) {
    say(fmt::format("interrupted (SIGTERM / SIGUSR1) after step {}: {}; exit status {}\n", rt.steps_done(),
                    a.checkpoint_dir.empty() ? "no --checkpoint-dir, nothing saved"
                                             : "checkpoint committed, continue with --resume",
                    kExitInterrupted));
    finish();
    throw ExitStatus{kExitInterrupted};
  }
  if (!ran) {
    finish();
    return;
  }
  if (multi) rt.collect_timeline(last);
  finish();
  if (!primary) return;

  Table mem({">rank", ">dp", ">tp", ">pp", ">tasks", ">peak (measured)", ">peak (program)"});
  for (const auto& rp : rt.program().ranks)
    mem.add({std::to_string(rp.rank), std::to_string(rp.dp_rank), std::to_string(rp.tp_rank), std::to_string(rp.pp_rank),
             std::to_string(rp.tasks.size()), units::format_bytes(last.peak_memory_bytes[static_cast<size_t>(rp.rank)]),
             units::format_bytes(last.declared_peak_memory_bytes[static_cast<size_t>(rp.rank)])});
  std::printf("\npeak memory per rank in the last step (measured: %s allocations in %s; program: what the plan declares "
              "in %s):\n",
              a.backend.c_str(), a.dtype.c_str(), std::string(precision_name(*p.precision)).c_str());
  std::fputs(mem.render("  ").c_str(), stdout);
  for (const auto& note : last.timeline.meta["implicit_communication"])
    std::printf("note: the runtime added communication the program does not have: %s\n", note.get<std::string>().c_str());
  if (!a.timeline.empty()) {
    plan::write_timeline_file(a.timeline, last.timeline);
    std::printf("measured timeline of step %lld: %s\n", static_cast<long long>(last.step), a.timeline.c_str());
  }
  if (!a.trace.empty()) {
    plan::write_chrome_trace_file(a.trace, last.timeline);
    std::printf("Chrome trace of step %lld: %s (open in ui.perfetto.dev)\n", static_cast<long long>(last.step), a.trace.c_str());
  }
}

}  // namespace

void add_execute_command(CLI::App& app) {
  auto args = std::make_shared<ExecuteArgs>();
  CLI::App* cmd = app.add_subcommand(
      "execute",
      "Run a plan for real: ranks as threads of this process, or of the processes of a job (mpirun, srun, "
      "torchrun-style RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, trainplan launch); loss per step, measured "
      "timeline. SIGTERM / SIGUSR1: checkpoint after the step and exit 75");
  cmd->add_option("plan", args->plan_file, "Plan JSON (its model must be small enough for the backend)")->required();
  cmd->add_option("--backend", args->backend, "Backend: " + [] {
    std::string s;
    for (const auto& n : executor::backend_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }())->capture_default_str();
  cmd->add_option("--steps", args->steps, "Train until this many optimizer steps are done (a resumed run continues)")
      ->capture_default_str();
  cmd->add_option("--timeline", args->timeline, "Write the last step's measured Timeline JSON here");
  cmd->add_option("--trace", args->trace, "Write the last step's Chrome trace here (ui.perfetto.dev)");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir, "Folder of checkpoints (step-<N>/ with one file per rank)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "Save a checkpoint every K steps (0: never)")
      ->capture_default_str();
  cmd->add_flag("--resume", args->resume, "Continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_option("--memory-limit", args->memory_limit,
                  "Refuse plans whose declared peak memory per rank exceeds this (e.g. 16GiB; default: the plan's GPU)");
  cmd->add_option("--data", args->data_file, "Train on this file's bytes as tokens (decoders; default: synthetic data)");
  cmd->add_option("--dtype", args->dtype, "Compute precision of the cpu backend: f32 or f64")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Parameter initialization seed")->capture_default_str();
  cmd->add_option("--lr", args->learning_rate, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--adam-eps", args->adam_eps, "AdamW epsilon")->capture_default_str();
  cmd->add_option("--timeout", args->timeout_s, "Seconds a rank may wait for the others before the step fails")
      ->capture_default_str();
  cmd->callback([args] { run(*args); });
}

}  // namespace trainplan::cli
