// `trainplan simulate plan.json`: one training step of a plan through the discrete-event
// simulator: step time, breakdown, utilization, peak memory, a Timeline and a Chrome trace.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/calibration/profile.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::cli {
namespace {

// `trainplan simulate`'s options: the simulation request plus what only the command does.
struct SimulateArgs : sim::SimulateRequest {
  std::string plan_path;
  std::string trace;
  std::string timeline;
  std::string json_out;
  bool on_calibrated_hardware = false;
  bool any_hardware = false;
  int64_t azs = 0;  // 0: the plan's
  std::string data_region, dataset_size;
};

// Where the instances and the data sit, and what crossing AZs and Regions costs.
void print_placement(const plan::Plan& p, const plan::PlanContext& ctx, const sim::StepResult& s) {
  std::printf("placement: %s\n", sim::placement_assumption(p, ctx).c_str());
  const hw::PlacementFacts& f = ctx.cluster.placement_facts();
  const double steps = p.training_tokens > 0
                           ? std::ceil(p.training_tokens / (static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample()))
                           : 0.0;
  if (s.inter_az_bytes > 0) {
    const double usd = hw::inter_az_transfer_usd(s.inter_az_bytes, f);
    std::printf("inter-AZ traffic: %s per step, $%.4f per step at $%g/GB in each direction%s\n", units::format_bytes(s.inter_az_bytes).c_str(),
                usd, f.inter_az_usd_per_gb, steps > 0 ? fmt::format(" (${:.2f} over {:.0f} steps)", usd * steps, steps).c_str() : "");
  }
  // The plan's tokens, read once (a job given in samples x epochs: `trainplan job`).
  const double token_bytes = p.training_tokens * sim::default_sample_bytes(ctx) / std::max<int64_t>(1, ctx.seq_len);
  if (auto d = sim::data_transfer(p, ctx, token_bytes, 1.0))
    std::printf("training data in %s, job in %s: $%g/GB out of %s%s\n", p.data_region.c_str(), ctx.instance->prices.region.c_str(),
                d->usd_per_gb, p.data_region.c_str(),
                d->bytes > 0 ? fmt::format(", {} read once: ${:.2f}", units::format_bytes(d->bytes), d->usd()).c_str()
                             : " (give data.bytes or training tokens for the total)");
}

void write_outputs(const SimulateArgs& a, const sim::StepResult& s, const std::string& calibration_used,
                   const json::Json* extra) {
  if (!a.timeline.empty()) {
    plan::write_timeline_file(a.timeline, s.timeline);
    std::printf("timeline written to %s\n", a.timeline.c_str());
  }
  if (!a.trace.empty()) {
    plan::write_chrome_trace_file(a.trace, s.timeline);
    std::printf("Chrome trace written to %s (open in ui.perfetto.dev or chrome://tracing)\n", a.trace.c_str());
  }
  if (!a.json_out.empty()) {
    json::Json j = extra ? *extra : sim::to_json(s);
    j["plan"] = a.plan_path;
    j["calibration"] = calibration_used;
    json::write_file(a.json_out, j);
    std::printf("result written to %s\n", a.json_out.c_str());
  }
}

void run(const SimulateArgs& a) {
  plan::Plan p = plan::read_plan_file(a.plan_path);
  apply_placement_options(p, a.azs, a.data_region, a.dataset_size);
  plan::PlanContext ctx = plan::resolve(p, user_catalog(p, a.plan_path), a.plan_path);
  plan::validate(p, ctx, a.plan_path);

  std::string calibration_used = sim::calibration_description(a.calibration);
  std::optional<calibration::Profile> profile;
  // No --calibration: the default profile of the plan's GPU type, as `plan` and `report` use it.
  const std::string default_profile =
      a.calibration.empty() && !a.on_calibrated_hardware ? calibration::find_default_profile(ctx.gpu->name) : std::string();
  const std::string profile_path = a.calibration.empty() ? default_profile : a.calibration;
  if (!profile_path.empty() && calibration::is_profile_file(profile_path)) {
    profile = calibration::read_profile_file(profile_path);
    calibration_used = fmt::format("calibration profile {} ({}, fitted {})", profile_path, profile->hardware, profile->date);
    if (a.on_calibrated_hardware) {
      // The plan's program on the machine the profile was measured on (e.g. the CPU backend).
      const plan::StepProgram program = plan::lower(p, ctx);
      const sim::StepResult s = calibration::predict_on_profile_hardware(program, p, *profile);
      std::printf("%s: %s, %d ranks, dp/tp/pp %d/%d/%d, predicted on %s (%s backend)\n", a.plan_path.c_str(),
                  ctx.model_spec.name.c_str(), p.world_size(), p.dp, p.tp, p.pp, profile->hardware.c_str(),
                  profile->backend.c_str());
      std::printf("calibration: %s\n", calibration_used.c_str());
      std::printf("step time: %s predicted\n", units::format_duration(s.step_time_s).c_str());
      write_outputs(a, s, calibration_used, nullptr);
      return;
    }
    calibration::check_profile_applies(*profile, ctx.gpu->name, a.any_hardware, profile_path);
  } else if (a.on_calibrated_hardware || a.any_hardware) {
    throw Error("--on-calibrated-hardware and --calibration-any-hardware need --calibration PROFILE")
        .hint("fit one with trainplan calibrate");
  }
  sim::SimulateRequest request = a;
  if (profile) request.calibration.clear();  // a profile is applied below; the request reads only tables
  std::string shown;
  sim::PlanSimOptions o = sim::plan_sim_options(request, p, ctx, !a.trace.empty() || !a.timeline.empty(), &shown);
  if (profile) o.sim = calibration::apply_profile(*profile, o.sim);
  const sim::PlanSimResult r = sim::simulate_plan(p, ctx, o);
  const sim::StepResult& s = r.step;
  std::printf("calibration: %s\n", calibration_used.c_str());

  const Precision prec = p.precision_or(ctx.precision);
  const double peak = ctx.gpu->peak_flops_per_s(prec);
  const double mfu = sim::simulated_mfu(p, ctx, s.step_time_s);
  const double tokens_per_s = static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample() / s.step_time_s;
  const auto est = planner::estimate_step(p, ctx);

  std::printf("%s: %s on %d x %s (%d GPUs), dp/tp/pp %d/%d/%d%s%s, ZeRO-%d, %s\n", a.plan_path.c_str(), ctx.model_spec.name.c_str(),
              p.instance_count, p.instance_type.c_str(), p.world_size(), p.dp, p.tp, p.pp,
              (p.cp > 1 ? fmt::format(" x cp {}", p.cp) : std::string()).append(p.ep > 1 ? fmt::format(", ep {}", p.ep) : "").c_str(), p.vp > 1 ? fmt::format(" x vp {}", p.vp).c_str() : "", p.zero_stage, std::string(precision_name(prec)).c_str());
  std::printf("software stack: %s\n", hw::describe(ctx.software).c_str());
  std::printf("simulated %s fidelity, %s granularity: %s tasks, %s events\n\n", std::string(sim::fidelity_name(r.fidelity)).c_str(),
              r.granularity == plan::Granularity::op ? "op" : "layer", units::format_count(static_cast<double>(r.tasks)).c_str(),
              units::format_count(static_cast<double>(s.stats.events)).c_str());
  std::printf("step time: %s simulated; analytical estimate %s (%+.1f%%)\n", units::format_duration(s.step_time_s).c_str(),
              units::format_duration(est.step_time_s).c_str(), 100.0 * (est.step_time_s / s.step_time_s - 1.0));
  std::printf("throughput: %s tokens/s; MFU %s (model FLOPs = 6N + attention per token, %s dense peak %s per GPU)\n\n",
              units::format_count(tokens_per_s).c_str(), percent(mfu).c_str(), std::string(precision_name(prec)).c_str(),
              units::format_flops_rate(peak).c_str());

  const auto& b = s.breakdown;
  Table bt({"critical rank " + std::to_string(b.critical_rank), ">time", ">share"});
  auto row = [&](const std::string& name, double t) {
    if (t > 0) bt.add({name, units::format_duration(t), fmt::format("{:.1f}%", 100.0 * t / s.step_time_s)});
  };
  row("compute", b.compute_s);
  row("optimizer", b.optimizer_s);
  for (auto purpose : plan::kCommPurposes)
    row(fmt::format("exposed {} communication", plan::comm_purpose_name(purpose)), b.exposed_comm(purpose));
  row("pipeline bubble", b.bubble_s);
  row("other (launch gaps, waiting for peers)", b.other_s);
  std::fputs(bt.render().c_str(), stdout);

  // Per pipeline stage: utilization and peak memory (simulated vs the memory model).
  std::printf("\nper pipeline stage (simulated ranks):\n");
  Table st({">stage", ">GPU busy", ">HFU", ">peak memory", ">memory model", ">capacity"});
  const auto model_mem = plan::memory_per_stage(p, ctx);
  for (int stage = 0; stage < p.pp; ++stage) {
    double busy = 0, hfu = 0, mem = 0;
    int n = 0;
    for (int d = 0; d < p.dp; ++d)
      for (int c = 0; c < p.cp; ++c)
        for (int t = 0; t < p.tp; ++t) {
          const size_t rank = static_cast<size_t>(((stage * p.dp + d) * p.cp + c) * p.tp + t);  // plan::StepProgram::rank_of
          busy += s.gpu_utilization[rank];
          hfu += s.flops_utilization[rank];
          mem = std::max(mem, s.peak_memory_bytes[rank]);
          ++n;
        }
    const auto& mm = model_mem[static_cast<size_t>(stage)];
    st.add({std::to_string(stage), percent(busy / n), percent(hfu / n), units::format_bytes(mem), units::format_bytes(mm.total_bytes()),
            units::format_bytes(mm.capacity_bytes)});
  }
  std::fputs(st.render("  ").c_str(), stdout);
  std::string traffic;
  for (int i = 0; i < sim::kNumPurposes; ++i)
    if (s.bytes_sent_by_purpose[static_cast<size_t>(i)] > 0)
      traffic += fmt::format("{}{} {}", traffic.empty() ? "" : ", ", plan::comm_purpose_name(static_cast<plan::CommPurpose>(i)),
                             units::format_bytes(s.bytes_sent_by_purpose[static_cast<size_t>(i)]));
  std::printf("\ntraffic per step (whole cluster): %s\n", traffic.empty() ? "none" : traffic.c_str());
  if (p.training_tokens > 0) {
    const double steps = std::ceil(p.training_tokens / (static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample()));
    std::printf("%s tokens = %.0f steps: %s of training at the simulated step time\n", units::format_count(p.training_tokens).c_str(),
                steps, units::format_duration(steps * s.step_time_s).c_str());
  }
  print_placement(p, ctx, s);
  if (o.sim.record_timeline) std::printf("timeline and trace events: %s\n", shown.c_str());
  json::Json extra = sim::to_json(r, p, ctx);
  extra["analytical_step_time_s"] = est.step_time_s;
  write_outputs(a, s, calibration_used, &extra);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate one training step of a plan (discrete-event): time, breakdown, memory, trace");
  cmd->add_option("plan", a->plan_path, "Plan JSON file")->required();
  cmd->add_option("--trace", a->trace, "Write a Chrome trace (Perfetto / chrome://tracing) of the step");
  cmd->add_option("--timeline", a->timeline, "Write the predicted Timeline JSON (same format as `trainplan execute`)");
  cmd->add_option("--json", a->json_out, "Write the result summary as JSON");
  add_choice(cmd, "--fidelity", a->fidelity, {"auto", "full", "symmetric"},
             "full: every rank; symmetric: one rank per class; auto: symmetric above 64 GPUs");
  add_choice(cmd, "--granularity", a->granularity, {"auto", "op", "layer"}, "op: a task per operator; layer: merged; auto: layer above 64 GPUs");
  cmd->add_option("--calibration", a->calibration, "Calibration profile (trainplan calibrate) or table JSON (measured kernel efficiencies)");
  cmd->add_flag("--on-calibrated-hardware", a->on_calibrated_hardware,
                "Predict the plan on the profile's own hardware (e.g. this machine's CPU backend) instead of its cluster");
  cmd->add_flag("--calibration-any-hardware", a->any_hardware,
                "Apply a profile fitted on another GPU type to the plan's GPUs (explicit override)");
  add_real(cmd, "--straggler-stddev", a->straggler_stddev, 0, sim::kMaxStragglerStddev, "Per-GPU speed jitter (normal, stddev), e.g. 0.02");
  add_int(cmd, "--seed", a->seed, 0, std::numeric_limits<int64_t>::max(), "Seed of the straggler jitter");
  add_real(cmd, "--overlap-slowdown", a->overlap_slowdown, 0, sim::kMaxOverlapSlowdown, "Uniform compute slowdown while any communication overlaps it, e.g. 0.1, instead of the per-op model of the SMs NCCL takes (simulator/README.md)");
  add_placement_options(cmd, a->azs, a->data_region, a->dataset_size);
  cmd->add_option("--trace-ranks", a->trace_ranks,
                  fmt::format("Ranks in --trace / --timeline: all, auto (every rank up to {} GPUs, else data-parallel "
                              "replica 0) or a list such as 0,8-15",
                              sim::kTraceAllRanksUpTo))
      ->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
