// `trainplan export plan.json --to deepspeed|megatron|sagemaker|torchrun`: the plan in the form
// the framework that runs it reads (planner/export.hpp).
#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/export_rules.hpp"

namespace trainplan::cli {
namespace {

struct ExportArgs {
  std::string plan_file;
  std::string to;
  std::string output;
  std::string max_run;
  std::string max_wait;
  planner::ExportOptions options;
};

void run(const ExportArgs& a) {
  const planner::ExportTarget target = at_flag("--to", [&] { return planner::parse_export_target(a.to); });
  planner::ExportOptions o = a.options;
  if (!a.max_run.empty()) o.max_run_s = flag_positive_quantity("--max-run", a.max_run, units::Dimension::duration);
  if (!a.max_wait.empty()) o.max_wait_s = flag_positive_quantity("--max-wait", a.max_wait, units::Dimension::duration);
  plan::Plan p = plan::read_plan_file(a.plan_file);
  const plan::PlanContext ctx = plan::resolve(p, user_catalog(p, a.plan_file), a.plan_file);
  const std::string text = planner::export_plan(p, ctx, target, o, a.plan_file);
  // The text is checked against the frameworks' rules before it is written: a violation is a
  // bug of the exporter (exit 2), never the user's.
  const auto violations = planner::validate_export(p, ctx, target, text);
  if (!violations.empty())
    throw std::logic_error(fmt::format("the {} export breaks rule {}: {}", planner::export_target_name(target), violations.front().rule,
                                       violations.front().message));
  for (const auto& note : planner::export_notes(p, ctx, target)) std::fprintf(stderr, "note: %s\n", note.c_str());
  if (a.output.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    json::write_text_file(a.output, text);
    std::printf("%s export of %s written to %s\n", std::string(planner::export_target_name(target)).c_str(), a.plan_file.c_str(),
                a.output.c_str());
  }
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a plan as a DeepSpeed config, Megatron-LM arguments, a SageMaker estimator or torchrun lines");
  cmd->add_option("plan", a->plan_file, "Plan JSON file (e.g. from `trainplan plan`)")->required();
  add_choice(cmd, "--to", a->to, {"deepspeed", "megatron", "sagemaker", "torchrun"}, "deepspeed, megatron, sagemaker or torchrun")
      ->required();
  cmd->add_option("--output,-o", a->output, "Write to this file (default and -: stdout)");
  cmd->add_option("--entry-point", a->options.entry_point, "Training script")->capture_default_str();
  cmd->add_option("--role", a->options.role, "SageMaker execution role ARN")->capture_default_str();
  cmd->add_option("--framework-version", a->options.framework_version, "SageMaker PyTorch container version, exact (e.g. 2.2.0)")->capture_default_str();
  cmd->add_option("--py-version", a->options.py_version, "SageMaker Python version")->capture_default_str();
  cmd->add_option("--checkpoint-s3-uri", a->options.checkpoint_s3_uri, "SageMaker spot: where checkpoints go")->capture_default_str();
  cmd->add_flag("--smddp", a->options.smddp, "SageMaker data parallelism with the smdistributed data parallel library");
  cmd->add_option("--max-run", a->max_run, "SageMaker max_run, e.g. 3d (default: 1.5 x the predicted time)");
  cmd->add_option("--max-wait", a->max_wait, "SageMaker spot max_wait, e.g. 6d (default: 2 x max_run)");
  add_int(cmd, "--master-port", a->options.master_port, 1, 65535, "torchrun rendezvous port");
  cmd->callback([a] { run(*a); });
}

}  // namespace trainplan::cli
