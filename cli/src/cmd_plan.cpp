// `trainplan plan`: search plans for a model and a token budget, print the ranked table and
// write the best plan.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>

#include "commands.hpp"
#include "common.hpp"
#include "table.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

struct PlanArgs {
  std::string model;
  std::string tokens;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  std::string instances;
  int max_gpus = 1024;
  int max_instances = 0;
  std::string objective = "time";
  std::string platform = "ec2";
  bool spot = false;
  size_t top = 10;
  int threads = 0;
  std::string output = "plan.json";
  std::string json_out;
};

std::string split_text(const plan::Plan& p) {
  std::string s = fmt::format("{}/{}/{}", p.dp, p.tp, p.pp);
  if (p.vp > 1) s += fmt::format("x{}", p.vp);
  return s;
}

void print_result(const planner::SearchResult& res, const planner::SearchRequest& req, size_t top) {
  Table t({">#", ">time to train", ">on-demand", ">spot*", "instances", ">dp/tp/pp", ">ZeRO", ">mb", "recompute", "sp",
           ">memory/GPU", ">MFU"});
  for (size_t i = 0; i < std::min(top, res.ranked.size()); ++i) {
    const auto& c = res.ranked[i];
    const auto& p = c.plan;
    t.add({std::to_string(i + 1), units::format_duration(c.time_to_train_s),
           c.cost_on_demand_usd ? short_usd(*c.cost_on_demand_usd) : "n/a", c.cost_spot_usd ? short_usd(*c.cost_spot_usd) : "n/a",
           fmt::format("{} x {}", p.instance_count, p.instance_type), split_text(p), std::to_string(p.zero_stage),
           std::to_string(p.micro_batch), std::string(plan::recompute_name(p.recompute)), p.sequence_parallel ? "yes" : "no",
           memory_of(c.memory.total_bytes(), c.memory.capacity_bytes), percent(c.step.mfu)});
  }
  std::fputs(t.render().c_str(), stdout);
  std::printf("* spot: at the catalog's spot price, before interruptions and restarts. Prices: %s %s, us-east-1.\n",
              std::string(plan::platform_name(req.platform)).c_str(), "on-demand");
}

void run(const PlanArgs& a) {
  planner::SearchRequest req;
  req.model = a.model;
  req.tokens = units::parse(a.tokens, units::Dimension::count);
  req.global_batch = a.global_batch;
  req.seq_len = a.seq_len;
  req.instance_types = split(a.instances, ',');
  req.max_gpus = a.max_gpus;
  req.max_instances = a.max_instances;
  req.objective = a.objective == "cost" ? planner::Objective::cost : planner::Objective::time;
  req.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  req.purchase = a.spot ? plan::Purchase::spot : plan::Purchase::on_demand;
  req.threads = a.threads;
  req.cancel = &g_interrupted;
  const hw::Catalog& catalog = user_catalog();

  std::signal(SIGINT, on_sigint);
  planner::SearchResult res = planner::search(req, catalog);
  std::signal(SIGINT, SIG_DFL);

  const models::ModelSpec spec = models::resolve_model(a.model);
  const auto graph_params = models::build_graph(spec).total_params();
  std::printf("trainplan plan: %s (%s parameters), %s tokens, global batch %lld x %lld tokens, objective: %s\n",
              spec.name.c_str(), units::format_count(graph_params).c_str(), units::format_count(req.tokens).c_str(),
              static_cast<long long>(res.global_batch), static_cast<long long>(res.seq_len),
              std::string(planner::objective_name(req.objective)).c_str());
  size_t oom = res.dropped.count("does not fit in GPU memory") ? res.dropped.at("does not fit in GPU memory") : 0;
  std::printf("searched %zu candidates: %zu do not fit in GPU memory, %zu evaluated%s\n\n", res.enumerated, oom,
              res.ranked.size(), res.cancelled ? " (interrupted: showing the best found so far)" : "");
  if (global_options().verbose) {
    Table st({"stage", ">seconds", ">kept", "note"});
    for (const auto& s : res.stages) st.add({s.name, fmt::format("{:.3f}", s.seconds), std::to_string(s.kept), s.note});
    std::fputs(st.render().c_str(), stdout);
    std::printf("\n");
  }
  if (res.ranked.empty()) {
    // Nothing fits: say how far the closest attempt was, and what would work.
    std::string detail;
    double best_ratio = 1e300;
    const planner::SearchResult::Closest* best = nullptr;
    for (const auto& c : res.closest) {
      double r = c.needed_bytes / c.capacity_bytes;
      if (r < best_ratio) {
        best_ratio = r;
        best = &c;
      }
    }
    std::string hint = "allow more GPUs (--max-gpus) or instance types with more GPU memory";
    if (best) {
      const auto& p = best->plan;
      detail = fmt::format(": the closest, {} x {} with dp/tp/pp {}/{}/{}, ZeRO-{}, {} recomputation, micro-batch {}, needs {} per GPU; "
                           "the GPU has {}",
                           p.instance_count, p.instance_type, p.dp, p.tp, p.pp, p.zero_stage, plan::recompute_name(p.recompute),
                           p.micro_batch, units::format_bytes(best->needed_bytes), units::format_bytes(best->capacity_bytes));
    }
    throw Error(fmt::format("no plan for {} fits in GPU memory within {} GPUs{}", spec.name, req.max_gpus, detail)).hint(hint);
  }
  print_result(res, req, a.top);
  const auto& best = res.ranked.front();
  plan::Plan out = best.plan;
  out.predicted = {{"source", "analytical"},
                   {"step_time_s", best.step.step_time_s},
                   {"steps", best.steps},
                   {"time_to_train_s", best.time_to_train_s},
                   {"mfu", best.step.mfu},
                   {"tokens_per_s", best.step.tokens_per_s},
                   {"peak_memory_bytes", best.memory.total_bytes()},
                   {"gpu_memory_capacity_bytes", best.memory.capacity_bytes}};
  if (best.cost_on_demand_usd) out.predicted["cost_on_demand_usd"] = *best.cost_on_demand_usd;
  if (best.cost_spot_usd) out.predicted["cost_spot_no_interruptions_usd"] = *best.cost_spot_usd;
  if (!a.output.empty()) {
    plan::write_plan_file(a.output, out);
    std::printf("\nbest plan written to %s\n", a.output.c_str());
  }
  if (!a.json_out.empty()) {
    json::Json all = json::Json::array();
    for (const auto& c : res.ranked) {
      json::Json j = plan::to_json(c.plan);
      j["predicted"] = {{"step_time_s", c.step.step_time_s}, {"time_to_train_s", c.time_to_train_s},
                        {"mfu", c.step.mfu}, {"peak_memory_bytes", c.memory.total_bytes()}};
      if (c.cost_on_demand_usd) j["predicted"]["cost_on_demand_usd"] = *c.cost_on_demand_usd;
      all.push_back(j);
    }
    json::write_file(a.json_out, all);
    std::printf("all %zu evaluated candidates written to %s\n", res.ranked.size(), a.json_out.c_str());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Search parallel plans, instance types and counts for a model and a token budget");
  cmd->add_option("--model,-m", args->model, "Catalog model name (see `trainplan model`) or a path to a Hugging Face config.json")->required();
  cmd->add_option("--tokens,-t", args->tokens, "Training tokens (e.g. 300e9 or 300B)")->required();
  cmd->add_option("--global-batch", args->global_batch, "Sequences per optimizer step (default: ~1M tokens)");
  cmd->add_option("--seq-len", args->seq_len, "Sequence length (default: the model's)");
  cmd->add_option("--instances,-i", args->instances, "Comma-separated instance types (default: every AWS type in the catalog)");
  cmd->add_option("--max-gpus", args->max_gpus, "Largest cluster to consider, in GPUs")->capture_default_str();
  cmd->add_option("--max-instances", args->max_instances, "Largest cluster to consider, in instances (0: no limit)");
  cmd->add_option("--objective", args->objective, "Rank by time to train or by cost")->check(CLI::IsMember({"time", "cost"}))->capture_default_str();
  cmd->add_option("--platform", args->platform, "Price on EC2 or SageMaker training")->check(CLI::IsMember({"ec2", "sagemaker"}))->capture_default_str();
  cmd->add_flag("--spot", args->spot, "Rank costs at spot prices (with --objective cost)");
  cmd->add_option("--top", args->top, "Rows to print")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Worker threads (0: all cores)");
  cmd->add_option("--output,-o", args->output, "Where to write the best plan (empty: do not write)")->capture_default_str();
  cmd->add_option("--json", args->json_out, "Write every evaluated candidate to this JSON file");
  cmd->callback([args] { run(*args); });
}

}  // namespace trainplan::cli
