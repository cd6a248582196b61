// `trainplan simulate plan.json`: one training step of a plan through the discrete-event
// simulator: step time, breakdown, utilization, peak memory, a Timeline and a Chrome trace.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "table.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/timeline.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::cli {
namespace {

struct SimulateArgs {
  std::string plan_path;
  std::string trace;
  std::string timeline;
  std::string json_out;
  std::string fidelity = "auto";
  std::string granularity = "auto";
  std::string calibration;
  double straggler_stddev = 0;
  uint64_t seed = 1;
  double overlap_slowdown = 0;
  std::string trace_ranks = "auto";
};

// Above this many GPUs the trace and timeline hold one data-parallel replica by default.
constexpr int kTraceAllRanksUpTo = 64;

// Ranks whose events --trace / --timeline write: "all", "auto" (every rank up to
// kTraceAllRanksUpTo GPUs; above, in data-parallel replica 0 (cp 0): the first stage's tp group
// and tp rank 0 of every later stage, which shows every kind of task and the whole pipeline) or
// a list such as "0,8-15". Returns the ranks (empty: all) and a description for the output.
std::pair<std::vector<int>, std::string> trace_ranks(const std::string& spec, const plan::Plan& p) {
  const int world = p.world_size();
  std::vector<int> ranks;
  if (spec == "all" || (spec == "auto" && world <= kTraceAllRanksUpTo)) return {ranks, fmt::format("all {} ranks", world)};
  if (spec == "auto") {
    for (int stage = 0; stage < p.pp; ++stage)
      for (int t = 0; t < (stage == 0 ? p.tp : 1); ++t)
        ranks.push_back((stage * p.dp * p.cp) * p.tp + t);  // dp 0, cp 0 (StepProgram::rank_of)
    return {ranks, fmt::format("{} of {} ranks: data-parallel replica 0, the first stage's tensor-parallel group and tp "
                               "rank 0 of every later stage (sampled above {} GPUs; --trace-ranks all writes every rank)",
                               ranks.size(), world, kTraceAllRanksUpTo)};
  }
  auto bad = [&](const std::string& what) {
    return Error(fmt::format("--trace-ranks: {}", what))
        .hint(fmt::format("give \"all\", \"auto\" or ranks and ranges such as 0,8-15 (ranks 0..{})", world - 1));
  };
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    const size_t dash = item.find('-', 1);
    auto number = [&](const std::string& text) {
      if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
        throw bad(fmt::format("\"{}\" is not a rank number", text));
      const int r = std::stoi(text);
      if (r >= world) throw bad(fmt::format("rank {} is outside the plan's {} ranks", r, world));
      return r;
    };
    const int first = number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first) throw bad(fmt::format("the range \"{}\" is empty", item));
    for (int r = first; r <= last; ++r) ranks.push_back(r);
    pos = comma + 1;
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return {ranks, fmt::format("{} of {} ranks (--trace-ranks)", ranks.size(), world)};
}

void run(const SimulateArgs& a) {
  plan::Plan p = plan::read_plan_file(a.plan_path);
  plan::PlanContext ctx = plan::resolve(p, user_catalog(), a.plan_path);
  plan::validate(p, ctx, a.plan_path);

  sim::PlanSimOptions o;
  if (a.fidelity != "auto") o.fidelity = a.fidelity == "full" ? sim::Fidelity::full : sim::Fidelity::symmetric;
  if (a.granularity != "auto") o.granularity = a.granularity == "op" ? plan::Granularity::op : plan::Granularity::layer;
  if (!a.calibration.empty()) {
    auto cal = std::make_shared<sim::CalibrationTable>(sim::CalibrationTable::read_file(a.calibration));
    const Precision want = p.precision_or(ctx.precision);
    if (!cal->gpu.empty() && cal->gpu != ctx.gpu->name)
      throw Error(fmt::format("the calibration table is for {}, the plan runs on {}", cal->gpu, ctx.gpu->name))
          .at(a.calibration, "/gpu")
          .hint("use the calibration profile measured on this GPU type (scripts/device-check.sh writes one per GPU)");
    if (cal->precision && *cal->precision != want)
      throw Error(fmt::format("the calibration table is for {}, the plan trains in {}", precision_name(*cal->precision),
                              precision_name(want)))
          .at(a.calibration, "/precision")
          .hint("use the calibration profile measured in the plan's precision");
    o.sim.calibration = cal;
  }
  o.sim.straggler_stddev = a.straggler_stddev;
  o.sim.straggler_seed = a.seed;
  o.sim.overlap_slowdown = a.overlap_slowdown;
  o.sim.record_timeline = !a.trace.empty() || !a.timeline.empty();
  const auto [shown_ranks, shown] = trace_ranks(a.trace_ranks, p);
  o.sim.timeline_ranks = shown_ranks;
  o.sim.timeline_aliases = true;  // symmetric classes: memory by ranks simulated, not shown
  o.threads = 0;
  const sim::PlanSimResult r = sim::simulate_plan(p, ctx, o);
  const sim::StepResult& s = r.step;

  const Precision prec = p.precision_or(ctx.precision);
  const double peak = ctx.gpu->peak_flops_per_s(prec);
  const double model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  const double mfu = model_flops / (s.step_time_s * p.world_size() * peak);
  const double tokens_per_s = static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample() / s.step_time_s;
  const auto est = planner::estimate_step(p, ctx);

  std::printf("%s: %s on %d x %s (%d GPUs), dp/tp/pp %d/%d/%d%s%s, ZeRO-%d, %s\n", a.plan_path.c_str(), ctx.model_spec.name.c_str(),
              p.instance_count, p.instance_type.c_str(), p.world_size(), p.dp, p.tp, p.pp,
              p.cp > 1 ? fmt::format(" x cp {}", p.cp).c_str() : "", p.vp > 1 ? fmt::format(" x vp {}", p.vp).c_str() : "", p.zero_stage, std::string(precision_name(prec)).c_str());
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
  if (o.sim.record_timeline) std::printf("timeline and trace events: %s\n", shown.c_str());
  if (!a.timeline.empty()) {
    plan::write_timeline_file(a.timeline, s.timeline);
    std::printf("timeline written to %s\n", a.timeline.c_str());
  }
  if (!a.trace.empty()) {
    plan::write_chrome_trace_file(a.trace, s.timeline);
    std::printf("Chrome trace written to %s (open in ui.perfetto.dev or chrome://tracing)\n", a.trace.c_str());
  }
  if (!a.json_out.empty()) {
    json::Json j = sim::to_json(s);
    j["plan"] = a.plan_path;
    j["fidelity"] = std::string(sim::fidelity_name(r.fidelity));
    j["granularity"] = r.granularity == plan::Granularity::op ? "op" : "layer";
    j["analytical_step_time_s"] = est.step_time_s;
    j["mfu"] = mfu;
    json::write_file(a.json_out, j);
    std::printf("result written to %s\n", a.json_out.c_str());
  }
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
  cmd->add_option("--calibration", a->calibration, "Calibration table JSON (measured kernel efficiencies) overriding the defaults");
  add_real(cmd, "--straggler-stddev", a->straggler_stddev, 0, 1, "Per-GPU speed jitter (normal, stddev), e.g. 0.02");
  add_int(cmd, "--seed", a->seed, 0, std::numeric_limits<int64_t>::max(), "Seed of the straggler jitter");
  add_real(cmd, "--overlap-slowdown", a->overlap_slowdown, 0, 10, "Compute slowdown while communication overlaps it, e.g. 0.1");
  cmd->add_option("--trace-ranks", a->trace_ranks,
                  fmt::format("Ranks in --trace / --timeline: all, auto (every rank up to {} GPUs, else data-parallel "
                              "replica 0) or a list such as 0,8-15",
                              kTraceAllRanksUpTo))
      ->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
