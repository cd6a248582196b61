// What front ends need around simulate_plan: their options checked and applied, the result as
// JSON with the MFU, and a calibration table checked against the plan's GPU and precision.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "trainplan/core/flags.hpp"

#include "trainplan/simulator/compute_model.hpp"
#include "trainplan/simulator/simulate_plan.hpp"

namespace trainplan::sim {

double simulated_mfu(const plan::Plan& p, const plan::PlanContext& ctx, double step_time_s) {
  const double peak = ctx.gpu->peak_flops_per_s(p.precision_or(ctx.precision));
  const double model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(p.global_batch);
  return model_flops / (step_time_s * p.world_size() * peak);
}

json::Json to_json(const PlanSimResult& r, const plan::Plan& p, const plan::PlanContext& ctx) {
  json::Json j = to_json(r.step);
  j["fidelity"] = std::string(fidelity_name(r.fidelity));
  j["granularity"] = r.granularity == plan::Granularity::op ? "op" : "layer";
  j["mfu"] = simulated_mfu(p, ctx, r.step.step_time_s);
  return j;
}

std::shared_ptr<const CalibrationTable> read_calibration_for(const std::string& path, const plan::Plan& p,
                                                             const plan::PlanContext& ctx) {
  auto cal = std::make_shared<CalibrationTable>(CalibrationTable::read_file(path));
  const Precision want = p.precision_or(ctx.precision);
  if (!cal->gpu.empty() && cal->gpu != ctx.gpu->name)
    throw Error(fmt::format("the calibration table is for {}, the plan runs on {}", cal->gpu, ctx.gpu->name))
        .at(path, "/gpu")
        .hint("use the calibration profile measured on this GPU type (scripts/device-check.sh writes one per GPU)");
  if (cal->precision && *cal->precision != want)
    throw Error(fmt::format("the calibration table is for {}, the plan trains in {}", precision_name(*cal->precision),
                            precision_name(want)))
        .at(path, "/precision")
        .hint("use the calibration profile measured in the plan's precision");
  return cal;
}

std::pair<std::vector<int>, std::string> timeline_ranks(const std::string& spec, const plan::Plan& p) {
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

std::string calibration_description(const std::string& calibration_table) {
  return calibration_table.empty() ? "uncalibrated (catalog peaks and documented efficiency defaults)"
                                   : "calibration table " + calibration_table;
}

PlanSimOptions plan_sim_options(const SimulateRequest& a, const plan::Plan& p, const plan::PlanContext& ctx, bool record_timeline,
                                std::string* shown_ranks) {
  // The bounds and choices of the CLI's flags (cli/src/cmd_simulate.cpp), for requests made
  // without the CLI.
  flag_choice("--fidelity", a.fidelity, {"auto", "full", "symmetric"});
  flag_choice("--granularity", a.granularity, {"auto", "op", "layer"});
  flag_in_range("--straggler-stddev", a.straggler_stddev, 0.0, kMaxStragglerStddev);
  flag_in_range("--seed", static_cast<int64_t>(a.seed), 0, std::numeric_limits<int64_t>::max());
  flag_in_range("--overlap-slowdown", a.overlap_slowdown, 0.0, kMaxOverlapSlowdown);
  PlanSimOptions o;
  if (a.fidelity != "auto") o.fidelity = a.fidelity == "full" ? Fidelity::full : Fidelity::symmetric;
  if (a.granularity != "auto") o.granularity = a.granularity == "op" ? plan::Granularity::op : plan::Granularity::layer;
  if (!a.calibration.empty()) o.sim.calibration = read_calibration_for(a.calibration, p, ctx);
  o.sim.straggler_stddev = a.straggler_stddev;
  o.sim.straggler_seed = a.seed;
  o.sim.overlap_slowdown = a.overlap_slowdown;
  o.sim.record_timeline = record_timeline;
  auto [ranks, shown] = timeline_ranks(a.trace_ranks, p);
  o.sim.timeline_ranks = std::move(ranks);
  o.sim.timeline_aliases = true;  // symmetric classes: memory by ranks simulated, not shown
  if (shown_ranks) *shown_ranks = std::move(shown);
  o.threads = 0;
  return o;
}

}  // namespace trainplan::sim
