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

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.hpp"
#include "common.hpp"
#include "job.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/calibration/compare.hpp"
#include "trainplan/calibration/history.hpp"
#include "trainplan/calibration/profile.hpp"
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
  std::string collectives = "auto";
  uint64_t seed = 1;
  double learning_rate = 1e-3;
  double adam_eps = 1e-8;
  double timeout_s = 60;
  bool skip_nonfinite = false;
  std::string calibration;
  std::string compare_trace;
  std::string history_db;
  bool no_history = false;
  std::string timeline_step = "last";
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

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

// This process's ranks (empty: every rank): their weights, gradients and optimizer state must
// fit in host memory (the declared static bytes are of that order in f32).
void check_host_memory(const plan::Plan& p, const plan::PlanContext& ctx, const plan::StepProgram& program,
                       executor::DType dtype, const std::vector<int>& ranks, const std::string& plan_file) {
  double host_needed = 0;
  const std::vector<double> declared = executor::declared_peak_memory(program);
  for (size_t r = 0; r < declared.size(); ++r)
    if (ranks.empty() || std::find(ranks.begin(), ranks.end(), static_cast<int>(r)) != ranks.end())
      host_needed += declared[r];
  if (dtype == executor::DType::f64) host_needed *= 2;
  const double host = host_memory_bytes();
  if (host > 0 && host_needed > 0.8 * host)
    throw Error(fmt::format("{} has {} parameters: its {} ranks would need about {} of host memory, this machine has {}",
                            ctx.model_spec.name, units::format_count(ctx.graph.total_params()),
                            ranks.empty() ? p.world_size() : static_cast<int>(ranks.size()), units::format_bytes(host_needed),
                            units::format_bytes(host)))
        .at(plan_file, "/model")
        .hint("the cpu backend is the reference for small models; try one of the tiny catalog models (gpt-tiny, "
              "llama-tiny, mlp-tiny)");
}

// The measured step against the prediction (the given profile, or this hardware's default
// one), into the error history and optionally as one comparison trace. Also stamps the
// timeline's meta with what calibrate needs to lower the plan again and to keep machines apart.
void compare_and_record(const ExecuteArgs& a, const plan::Plan& p, const executor::Runtime& rt, executor::StepResult& last) {
  // The profile key: the CPU model, or the device as the backend describes it (what bench writes).
  const std::string hardware =
      a.backend == "cpu" ? calibration::host_cpu_hardware() : executor::make_backend(a.backend)->description();
  last.timeline.meta["plan_file"] = std::filesystem::absolute(a.plan_file).string();
  last.timeline.meta["hardware"] = hardware;
  // Predicted next to measured: with the profile given, or this hardware's default one.
  const std::string profile_file = a.calibration.empty() ? calibration::find_default_profile(hardware) : a.calibration;
  calibration::HistoryRun hr;
  hr.date = calibration::utc_now();
  hr.command = "execute";
  hr.hardware = hardware;
  hr.backend = a.backend;
  hr.plan = a.plan_file;
  hr.profile = profile_file.empty() ? "uncalibrated" : profile_file;
  hr.measured_step_s = last.step_time_s;
  for (double b : last.peak_memory_bytes) hr.measured_peak_bytes = std::max(hr.measured_peak_bytes, b);
  std::optional<sim::StepResult> predicted;
  if (!profile_file.empty()) {
    const calibration::Profile prof = calibration::read_profile_file(profile_file);
    calibration::check_profile_applies(prof, hardware, false, profile_file);
    predicted = calibration::predict_on_profile_hardware(rt.program(), p, prof);
    hr.predicted_step_s = predicted->step_time_s;
    double peak = 0;
    for (double b : predicted->peak_memory_bytes) peak = std::max(peak, b);
    hr.predicted_peak_bytes = peak;
    if (!a.compare_trace.empty()) {
      json::write_file(a.compare_trace, calibration::comparison_trace(predicted->timeline, last.timeline, profile_file));
      std::printf("predicted and measured timelines as one Chrome trace: %s (open in ui.perfetto.dev)\n",
                  a.compare_trace.c_str());
    }
    std::printf("predicted step time %s with %s: measured %s (%+.1f%%)\n", units::format_duration(predicted->step_time_s).c_str(),
                profile_file.c_str(), units::format_duration(last.step_time_s).c_str(), 100 * *hr.step_error());
  } else {
    if (!a.compare_trace.empty())
      throw Error("--compare-trace needs a prediction: no calibration profile for " + hardware)
          .hint("pass --calibration PROFILE (trainplan bench, then trainplan calibrate, make one)");
    std::printf("calibration: uncalibrated (no profile for %s; trainplan bench + trainplan calibrate make one), no "
                "prediction to compare\n",
                hardware.c_str());
  }
  hr.task_classes = calibration::task_class_totals(predicted ? &predicted->timeline : nullptr, last.timeline);
  if (!a.no_history) {
    calibration::History history(a.history_db.empty() ? calibration::default_history_path() : a.history_db);
    history.record(hr);
    std::printf("recorded in the error history (trainplan history)\n");
  }
}

// The peak memory per rank of the measured step, as measured and as the program declares it,
// and the communication the runtime added.
void print_peak_memory(const ExecuteArgs& a, const plan::Plan& p, const executor::Runtime& rt,
                       const executor::StepResult& last) {
  Table mem({">rank", ">dp", ">tp", ">pp", ">tasks", ">peak (measured)", ">peak (program)"});
  for (const auto& rp : rt.program().ranks)
    mem.add({std::to_string(rp.rank), std::to_string(rp.dp_rank), std::to_string(rp.tp_rank), std::to_string(rp.pp_rank),
             std::to_string(rp.tasks.size()), units::format_bytes(last.peak_memory_bytes[static_cast<size_t>(rp.rank)]),
             units::format_bytes(last.declared_peak_memory_bytes[static_cast<size_t>(rp.rank)])});
  std::printf("\npeak memory per rank in step %lld (measured: %s allocations in %s; program: what the plan declares "
              "in %s):\n",
              static_cast<long long>(last.step), a.backend.c_str(), a.dtype.c_str(), std::string(precision_name(*p.precision)).c_str());
  std::fputs(mem.render("  ").c_str(), stdout);
  for (const auto& note : last.timeline.meta["implicit_communication"])
    std::printf("note: the runtime added communication the program does not have: %s\n", note.get<std::string>().c_str());
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
  executor::check_accelerator_executable(ctx, a.plan_file);
  const models::ModelSpec& spec = ctx.model_spec;
  if ((a.checkpoint_every > 0 || a.resume) && a.checkpoint_dir.empty())
    throw Error("--checkpoint-every and --resume need --checkpoint-dir");
  const auto dtype = executor::parse_dtype(a.dtype);
  if (!dtype) throw Error(fmt::format("--dtype: unknown element type \"{}\"", a.dtype)).hint("use f32 or f64");
  // A backend that cannot run here (module missing, no driver, no GPU) says so before any work.
  (void)executor::make_backend(a.backend);

  plan::StepProgram program = plan::lower(p, ctx);
  // Does it fit? The program's declared peak per rank against the limit (default: the GPU's).
  const double limit = a.memory_limit.empty() ? ctx.gpu->memory_bytes : flag_positive_quantity("--memory-limit", a.memory_limit, units::Dimension::bytes);
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
  g_world = job.world;
  const bool multi = job.world != nullptr;
  const bool primary = !multi || job.primary();
  check_host_memory(p, ctx, program, *dtype, multi ? job.ranks : std::vector<int>{}, a.plan_file);

  executor::RuntimeOptions opt;
  opt.backend = a.backend;
  opt.dtype = *dtype;
  opt.seed = a.seed;
  opt.adamw.learning_rate = a.learning_rate;
  opt.adamw.eps = a.adam_eps;
  opt.timeout_s = a.timeout_s;
  opt.skip_nonfinite_steps = a.skip_nonfinite;
  opt.world = job.world;
  opt.store = job.store;
  opt.collectives = a.collectives == "device"    ? executor::DeviceCollectives::device
                    : a.collectives == "staging" ? executor::DeviceCollectives::staging
                                                 : executor::DeviceCollectives::automatic;
  // Under a launcher each process of a node holds ranks-per-process consecutive devices.
  opt.first_device = multi ? job.launch.local_rank * static_cast<int>(job.ranks.size()) : 0;
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
  if (a.backend != "cpu") say(fmt::format("collectives: {}\n", rt.collectives().reason));
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
  // --timeline-step fastest: the measured step (timeline, trace, comparison, history) is the
  // fastest of the steps after the first two (the first pays allocations and page faults, the
  // second still warms caches); on a shared machine timing noise only adds time. Every process
  // of a job sees the same step times (each the slowest rank's), so all keep the same step.
  executor::StepResult fastest;
  bool ran = false;
  int64_t ran_steps = 0, skipped = 0;
  bool interrupted = false;
  while (rt.steps_done() < a.steps && !interrupted) {
    last = rt.step();
    ran = true;
    ++ran_steps;
    skipped += last.skipped;
    if (a.timeline_step == "fastest" && (ran_steps <= 3 || last.step_time_s < fastest.step_time_s)) fastest = last;
    say(fmt::format("step {:4}  loss {:.6f}  grad-norm {:.4f}  time {}{}\n", last.step, last.loss, last.grad_norm,
                    units::format_duration(last.step_time_s),
                    last.skipped ? fmt::format("  skipped: non-finite gradient norm, update not applied ({})",
                                               last.nonfinite_where)
                                 : ""));
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
  if (a.timeline_step == "fastest") last = std::move(fastest);
  if (multi) rt.collect_timeline(last);
  finish();
  if (!primary) return;
  if (skipped > 0)
    std::printf("note: %lld of %lld steps were skipped (non-finite gradient norm; --skip-nonfinite-steps)\n",
                static_cast<long long>(skipped), static_cast<long long>(ran_steps));

  print_peak_memory(a, p, rt, last);
  compare_and_record(a, p, rt, last);
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
  add_choice(cmd, "--backend", args->backend, executor::backend_names(), "Backend that runs the plan");
  add_int(cmd, "--steps", args->steps, 1, limits::kMaxSteps, "Train until this many optimizer steps are done (a resumed run continues)");
  cmd->add_option("--timeline", args->timeline, "Write the measured step's Timeline JSON here (--timeline-step)");
  add_choice(cmd, "--timeline-step", args->timeline_step, {"last", "fastest"},
             "The measured step (timeline, trace, comparison with the prediction, error history): the last step, or "
             "the fastest after the first two (timing noise on a shared machine only adds time)");
  cmd->add_option("--trace", args->trace, "Write the measured step's Chrome trace here (--timeline-step; ui.perfetto.dev)");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir, "Folder of checkpoints (step-<N>/ with one file per rank)");
  add_int(cmd, "--checkpoint-every", args->checkpoint_every, 0, limits::kMaxSteps, "Save a checkpoint every K steps (0: never)");
  cmd->add_flag("--resume", args->resume, "Continue from the newest checkpoint in --checkpoint-dir");
  cmd->add_option("--memory-limit", args->memory_limit,
                  "Refuse plans whose declared peak memory per rank exceeds this (e.g. 16GiB; default: the plan's GPU)");
  cmd->add_option("--data", args->data_file, "Train on this file's bytes as tokens (decoders; default: synthetic data)");
  add_choice(cmd, "--dtype", args->dtype, {"f32", "f64"}, "Compute precision of the cpu backend: f32 or f64");
  add_choice(cmd, "--collectives", args->collectives, {"auto", "staging", "device"},
             "Device backends: the step's collectives on the device tensors through the backend's library (device: "
             "NCCL, one GPU per rank), through host copies over the in-process / TCP communicator (staging: ranks may "
             "share a GPU), or device when every rank of the process has its own GPU (auto)");
  add_int(cmd, "--seed", args->seed, 0, std::numeric_limits<int64_t>::max(), "Parameter initialization seed");
  add_real(cmd, "--lr", args->learning_rate, 0, 1e3, "AdamW learning rate");
  add_real(cmd, "--adam-eps", args->adam_eps, 0, 1, "AdamW epsilon");
  add_real(cmd, "--timeout", args->timeout_s, 1e-3, 1e6, "Seconds a rank may wait for the others before the step fails");
  cmd->add_flag("--skip-nonfinite-steps", args->skip_nonfinite,
                "Skip a step whose gradient norm is NaN or infinite (no update, as dynamic loss scaling does) instead of "
                "stopping with an error");
  cmd->add_option("--calibration", args->calibration,
                  "Calibration profile to predict the run with (default: this hardware's profile in the profile directory)");
  cmd->add_option("--compare-trace", args->compare_trace,
                  "Write the predicted and the measured timeline of the last step as one Chrome trace (two processes)");
  cmd->add_option("--history-db", args->history_db, "Error history database (default: $TRAINPLAN_HISTORY_DB, else "
                                                    "$XDG_DATA_HOME/trainplan/history.sqlite)");
  cmd->add_flag("--no-history", args->no_history, "Do not record this run in the error history");
  cmd->callback([args] { run(*args); });
}

}  // namespace trainplan::cli
