// `trainplan check plan.json`: validate a plan, show its memory per stage and the analytical
// step-time estimate.
#include <fmt/format.h>

#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::cli {
namespace {

// "bf16", or "fp8 (delayed scaling, 1024-step amax history, FP8 parameters)".
std::string precision_label(const plan::Plan& p) {
  std::string s(precision_name(*p.precision));
  if (p.precision != Precision::fp8) return s;
  s += fmt::format(" ({} scaling", plan::fp8_recipe_name(p.fp8.recipe));
  if (p.fp8.recipe == plan::Fp8Recipe::delayed) s += fmt::format(", {}-step amax history", p.fp8.amax_history);
  return s + (p.fp8.fp8_params ? ", FP8 parameters)" : ")");
}

void run(const std::string& path) {
  plan::Plan p = plan::read_plan_file(path);
  const hw::Catalog& catalog = user_catalog(p, path);
  plan::PlanContext ctx = plan::resolve(p, catalog, path);
  plan::validate(p, ctx, path);
  const auto& spec = ctx.model_spec;
  std::printf("%s: %s on %d x %s (%d GPUs), dp/tp/pp %d/%d/%d%s%s, ZeRO-%d, %s, %s schedule, recomputation: %s%s\n", path.c_str(),
              spec.name.c_str(), p.instance_count, p.instance_type.c_str(), ctx.cluster.num_gpus(), p.dp, p.tp, p.pp,
              (p.cp > 1 ? fmt::format(" x cp {}", p.cp) : std::string()).append(p.ep > 1 ? fmt::format(", ep {}", p.ep) : "").c_str(), p.vp > 1 ? fmt::format(" x vp {}", p.vp).c_str() : "", p.zero_stage, precision_label(p).c_str(),
              std::string(plan::schedule_name(p.schedule)).c_str(), std::string(plan::recompute_name(p.recompute)).c_str(),
              p.sequence_parallel ? ", sequence parallel" : "");
  std::printf("software stack: %s\n", hw::describe(ctx.software).c_str());
  std::printf("batch: %lld samples = %lld micro-batch(es) of %lld on each of %d data-parallel ranks\n\n",
              static_cast<long long>(p.global_batch), static_cast<long long>(p.num_micro_batches),
              static_cast<long long>(p.micro_batch), p.dp);

  const double gib = 1073741824.0;
  Table mem({">stage", "units", ">params", ">weights", ">grads", ">optimizer", ">activations", ">in flight", ">buffers", ">total",
             ">capacity", "fits"});
  bool all_fit = true;
  for (const auto& m : plan::memory_per_stage(p, ctx)) {
    std::string units;
    for (int v = 0; v < p.vp; ++v) {
      const auto& a = p.stages[static_cast<size_t>(v * p.pp + m.stage)];
      units += fmt::format("{}{}-{}", v ? "," : "", a.first_unit, a.last_unit);
    }
    all_fit = all_fit && m.fits();
    mem.add({std::to_string(m.stage), units, units::format_count(m.params_on_rank), fmt::format("{:.2f}", m.weights_bytes / gib),
             fmt::format("{:.2f}", m.gradients_bytes / gib), fmt::format("{:.2f}", m.optimizer_bytes / gib),
             fmt::format("{:.2f}", m.activations_bytes / gib), fmt::format("{:.1f}", m.micro_batches_in_flight),
             fmt::format("{:.2f}", (m.workspace_bytes + m.comm_buffer_bytes + m.framework_bytes) / gib),
             fmt::format("{:.2f}", m.total_bytes() / gib), fmt::format("{:.2f}", m.capacity_bytes / gib), m.fits() ? "yes" : "NO"});
  }
  std::printf("memory per GPU (GiB):\n");
  std::fputs(mem.render("  ").c_str(), stdout);
  const auto e = planner::estimate_step(p, ctx);
  std::printf("\nanalytical step time: %s (%s tokens/s, MFU %s, HFU %s)\n", units::format_duration(e.step_time_s).c_str(),
              units::format_count(e.tokens_per_s).c_str(), percent(e.mfu).c_str(), percent(e.hfu).c_str());
  std::printf("  compute %s (recompute %s), pipeline bubble %s, optimizer %s, host %s\n", units::format_duration(e.compute_s).c_str(),
              units::format_duration(e.recompute_s).c_str(), units::format_duration(e.bubble_s).c_str(),
              units::format_duration(e.optimizer_s).c_str(), units::format_duration(e.host_s).c_str());
  std::string comm;
  for (auto purpose : plan::kCommPurposes) {
    if (e.exposed_comm_s(purpose) > 0)
      comm += fmt::format("{}{} {}", comm.empty() ? "" : ", ", plan::comm_purpose_name(purpose), units::format_duration(e.exposed_comm_s(purpose)));
  }
  std::printf("  exposed communication: %s\n", comm.empty() ? "none" : comm.c_str());
  if (p.training_tokens > 0) {
    const double steps = std::ceil(p.training_tokens / (static_cast<double>(p.global_batch) * ctx.graph.tokens_per_sample()));
    const double t = steps * e.step_time_s;
    std::printf("\n%s tokens = %.0f steps: %s of training", units::format_count(p.training_tokens).c_str(), steps,
                units::format_duration(t).c_str());
    if (auto price = planner::on_demand_price(*ctx.instance, p.platform))
      std::printf(", %s on-demand (%s)", units::format_usd(t / 3600.0 * *price * p.instance_count).c_str(),
                  std::string(plan::platform_name(p.platform)).c_str());
    std::printf("\n");
  }
  if (!all_fit)
    throw Error(fmt::format("the plan does not fit in GPU memory: it needs {} on its fullest GPU, {} is usable",
                            units::format_bytes(plan::peak_memory(p, ctx).total_bytes()),
                            units::format_bytes(plan::peak_memory(p, ctx).capacity_bytes)))
        .at(path)
        .hint("raise zero_stage, use recomputation, a smaller micro_batch, more tp/pp, or a GPU with more memory");
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("check", "Validate a plan file; show its memory per stage and estimated step time");
  cmd->add_option("plan", *path, "Plan JSON file")->required();
  cmd->callback([path] { run(*path); });
}

}  // namespace trainplan::cli
