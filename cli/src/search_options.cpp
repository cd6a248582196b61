#include "search_options.hpp"

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <csignal>

#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/models/model.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/partition.hpp"

namespace trainplan::cli {
namespace {

// The largest cluster a search considers: a search's memory grows with it (GPT-3 175B over
// every instance type held 1.3 GB at 4,096 GPUs, 3.1 GB at 16,384 and 15 GB at 131,072 after
// 5 minutes on a loaded 2-core machine, 2026-11-25), so it stops at twice the largest
// published training runs (16,384 GPUs). A plan file may still describe up to limits::kMaxGpus.
constexpr int64_t kMaxSearchGpus = 32768;
// The deepest model a search takes: its time grows with the layer count (1,000 layers: 52 s,
// 10,000: over 10 minutes for 64 GPUs of one instance type on the same loaded machine), so it
// stops at twice the deepest published models (about 1,000 layers). `check` and `simulate`
// take plans of up to limits::kMaxLayers.
constexpr int64_t kMaxSearchLayers = 2048;

std::atomic<bool> g_interrupted{false};
extern "C" void on_search_sigint(int) { g_interrupted = true; }

// A comma-separated list flag; an item's error names the flag.
template <typename T, typename F>
std::vector<T> list_of(const std::string& text, const std::string& option, F&& parse) {
  std::vector<T> out;
  if (text.empty()) return out;
  const auto items = split(text, ',');
  if (items.size() > 1000)
    throw Error(fmt::format("lists {} values, more than 1000", items.size())).at(option).hint("give a few values to try");
  for (const auto& item : items) out.push_back(at_flag(option, [&] { return parse(item); }));
  return out;
}

template <typename E>
E choice(const std::string& s, std::initializer_list<E> all, std::string_view (*name)(E), const std::string& flag) {
  std::vector<std::string> names;
  for (E e : all) names.emplace_back(name(e));
  const std::string chosen = flag_choice(flag, s, names);
  for (E e : all)
    if (name(e) == chosen) return e;
  TP_ASSERT(false);
  return *all.begin();
}

}  // namespace

planner::SearchRequest search_request(const SearchArgs& a) {
  planner::SearchRequest req;
  req.model = a.model;
  if (!a.model.empty()) {
    const models::ModelSpec spec = at_flag("--model", [&] { return models::resolve_model(a.model); });
    if (spec.layers > kMaxSearchLayers)
      throw Error(fmt::format("{} has {} layers; a search takes models of up to {}", spec.name, spec.layers, kMaxSearchLayers))
          .at("--model")
          .hint("a search's time grows with the layer count; write a plan file and run `trainplan check` or `simulate` on it");
  }
  req.tokens = flag_positive_quantity("--tokens", a.tokens, units::Dimension::count);
  req.global_batch = a.global_batch;
  if (!a.global_batch_range.empty()) {
    const auto parts = split(a.global_batch_range, ':');
    if (parts.size() != 2)
      throw Error(fmt::format("takes MIN:MAX, got \"{}\"", a.global_batch_range)).at("--global-batch-range").hint("e.g. 512:2048");
    req.global_batch_min = at_flag("--global-batch-range", [&] { return checked::parse_int(parts[0], 1, limits::kMaxBatch); });
    req.global_batch_max = at_flag("--global-batch-range", [&] { return checked::parse_int(parts[1], 1, limits::kMaxBatch); });
  }
  req.seq_len = a.seq_len;
  req.instance_types = split(a.instances, ',');
  req.instance_counts = list_of<int>(a.counts, "--counts", [](const std::string& s) {
    return static_cast<int>(checked::parse_int(s, 1, limits::kMaxInstances));
  });
  req.max_gpus = a.max_gpus;
  req.max_instances = a.max_instances;
  req.objective = at_flag("--objective", [&] { return planner::parse_objective(a.objective); });
  if (!a.deadline.empty()) req.deadline_s = flag_positive_quantity("--deadline", a.deadline, units::Dimension::duration);
  if (!a.budget.empty()) {
    std::string b = a.budget;
    if (!b.empty() && b.front() == '$') b.erase(0, 1);
    req.budget_usd = flag_positive_quantity("--budget", b, units::Dimension::count);
  }
  req.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  const std::string purchase = a.spot ? "spot" : a.purchase;
  req.both_purchases = purchase == "both";
  req.purchase = purchase == "spot" ? plan::Purchase::spot : plan::Purchase::on_demand;
  if (!a.micro_batches.empty())
    req.micro_batches = list_of<int64_t>(a.micro_batches, "--micro-batches", [](const std::string& s) { return checked::parse_int(s, 1, limits::kMaxBatch); });
  if (!a.zero.empty())
    req.zero_stages = list_of<int>(a.zero, "--zero", [](const std::string& s) {
      return static_cast<int>(checked::parse_int(s, 0, 3));
    });
  if (!a.recompute.empty())
    req.recomputes = list_of<plan::Recompute>(a.recompute, "--recompute", [](const std::string& s) {
      return choice(s, {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}, plan::recompute_name, "--recompute");
    });
  if (!a.schedules.empty())
    req.schedules = list_of<plan::Schedule>(a.schedules, "--schedules", [](const std::string& s) {
      return choice(s, {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b}, plan::schedule_name, "--schedules");
    });
  if (!a.virtual_stages.empty())
    req.virtual_stages = list_of<int>(a.virtual_stages, "--vp", [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, limits::kMaxLayers)); });
  if (!a.context_parallel.empty())
    req.context_parallel = list_of<int>(a.context_parallel, "--cp", [](const std::string& s) { return static_cast<int>(checked::parse_int(s, 1, limits::kMaxGpus)); });
  if (!a.dp_algorithms.empty())
    req.dp_algorithms = list_of<plan::DpAlgorithm>(a.dp_algorithms, "--dp-algorithms", [](const std::string& s) {
      return choice(s, {plan::DpAlgorithm::ring, plan::DpAlgorithm::tree, plan::DpAlgorithm::hierarchical, plan::DpAlgorithm::parameter_server},
                    plan::dp_algorithm_name, "--dp-algorithms");
    });
  if (!a.bucket_sizes.empty())
    req.bucket_sizes_bytes = list_of<double>(a.bucket_sizes, "--bucket-sizes", [](const std::string& s) { return flag_positive_quantity("--bucket-sizes", s, units::Dimension::bytes); });
  req.sequence_parallel = !a.no_sequence_parallel;
  req.allow_tp_across_nodes = a.tp_across_nodes;
  req.partition = at_flag("--partition", [&] { return planner::parse_partition_mode(a.partition); });
  if (!a.framework.empty()) req.framework = at_flag("--for", [&] { return planner::parse_export_target(a.framework); });
  req.simulate_top = a.simulate_top;
  req.exact_top = std::max<size_t>(1, std::max(a.exact_top, a.top));
  req.spot_runs = a.spot_runs;
  req.spot_rows = a.top;
  req.seed = a.seed;
  req.threads = a.threads;
  for (const auto& stage : a.off) {
    if (stage == "partition") req.stages.partition = false;
    else if (stage == "prune-memory") req.stages.prune_memory = false;
    else if (stage == "expand") req.stages.expand = false;
    else if (stage == "lazy") req.stages.lazy = false;
    else if (stage == "checks") req.stages.check_invariants = false;
    else
      flag_choice("--off", stage, {"partition", "prune-memory", "expand", "lazy", "checks"});
  }
  return req;
}

void add_search_options(CLI::App* cmd, SearchArgs& a, bool model_required) {
  {
    auto* o = cmd->add_option("--model,-m", a.model, "Catalog model name (see `trainplan model`) or a path to a Hugging Face config.json");
    if (model_required) o->required();
  }
  {
    auto* o = cmd->add_option("--tokens,-t", a.tokens, fmt::format("Training tokens (e.g. 300e9 or 300B; at most {:g})", limits::kMaxTokens));
    if (model_required) o->required();
  }
  add_int(cmd, "--global-batch", a.global_batch, 1, limits::kMaxBatch, "Sequences per optimizer step (default: ~1M tokens)");
  cmd->add_option("--global-batch-range", a.global_batch_range, "Search the global batch too: powers of two in MIN:MAX sequences");
  add_int(cmd, "--seq-len", a.seq_len, 1, limits::kMaxSeqLen, "Sequence length (default: the model's)");
  cmd->add_option("--instances,-i", a.instances, "Comma-separated instance types (default: every AWS type in the catalog)");
  cmd->add_option("--counts", a.counts, fmt::format("Comma-separated instance counts, each 1..{} (default: 1, 2, 4, ... within the limits)",
                                                    limits::kMaxInstances));
  add_int(cmd, "--max-gpus", a.max_gpus, 1, kMaxSearchGpus, "Largest cluster to consider, in GPUs");
  add_int(cmd, "--max-instances", a.max_instances, 0, limits::kMaxInstances, "Largest cluster to consider, in instances (0: no limit)");
  add_choice(cmd, "--objective", a.objective, {"time", "cost", "cost-under-deadline", "time-under-budget"},
             "time, cost, cost-under-deadline (with --deadline) or time-under-budget (with --budget); a deadline or budget "
             "that no plan meets exits with code 3");
  cmd->add_option("--deadline", a.deadline, "Deadline for cost-under-deadline, e.g. 30d or 72h");
  cmd->add_option("--budget", a.budget, "Budget in US dollars for time-under-budget, e.g. 2M or 250k");
  add_choice(cmd, "--platform", a.platform, {"ec2", "sagemaker"}, "Price on EC2 or SageMaker training");
  add_choice(cmd, "--purchase", a.purchase, {"on-demand", "spot", "both"},
             "on-demand, spot (whole-job expectation with interruptions) or both");
  cmd->add_flag("--spot", a.spot, "Same as --purchase spot");
  cmd->add_option("--micro-batches", a.micro_batches, "Micro-batch sizes to try (default 1,2,4,8,16,32)");
  cmd->add_option("--zero", a.zero, "ZeRO stages to try (default 0,1,2,3)");
  cmd->add_option("--recompute", a.recompute, "Recomputation to try: none,selective,full (default all)");
  cmd->add_option("--schedules", a.schedules, "Pipeline schedules to try: gpipe,1f1b,interleaved-1f1b (default 1f1b,interleaved-1f1b)");
  cmd->add_option("--vp", a.virtual_stages, "Virtual stages per rank for interleaved 1F1B (default 2,4)");
  cmd->add_option("--cp", a.context_parallel,
                  "Context-parallel degrees to try (default 1,2,4,8 for sequences of 4096 tokens or more, else 1)");
  cmd->add_option("--dp-algorithms", a.dp_algorithms, "Data-parallel algorithms: ring,tree,hierarchical,parameter-server (default all)");
  cmd->add_option("--bucket-sizes", a.bucket_sizes, "Gradient bucket sizes (default 25MB)");
  cmd->add_flag("--no-sequence-parallel", a.no_sequence_parallel, "Do not try sequence parallelism");
  cmd->add_flag("--tp-across-nodes", a.tp_across_nodes, "Allow tensor parallelism beyond one NVLink/NVSwitch domain");
  add_choice(cmd, "--partition", a.partition, {"time", "memory", "even"}, "Layer split over pipeline stages: time, memory or even");
  add_choice(cmd, "--for", a.framework, {"deepspeed", "megatron", "sagemaker", "torchrun"},
             "Only plans this framework can run: deepspeed, megatron, sagemaker or torchrun (see `trainplan export`)");
  add_int(cmd, "--simulate-top", a.simulate_top, 0, limits::kMaxRows, "Simulate the best K candidates by the estimate and rank them by simulated step time (0: rank by the estimate)");
  add_int(cmd, "--exact-top", a.exact_top, 0, limits::kMaxRows, "Lazy stages are exact for at least this many best candidates");
  add_int(cmd, "--spot-runs", a.spot_runs, 1, limits::kMaxRuns, "Monte Carlo runs for the p50/p90 of the rows shown (spot/both)");
  add_int(cmd, "--seed", a.seed, 0, std::numeric_limits<int64_t>::max(), "Monte Carlo seed");
  cmd->add_option("--off", a.off, "Switch a stage off (experiments): partition, prune-memory, expand, lazy, checks");
  add_int(cmd, "--top", a.top, 1, limits::kMaxRows, "Rows to print");
  add_int(cmd, "--threads", a.threads, 0, limits::kMaxThreads, "Worker threads (0: all cores); results do not depend on it");
}

void report_missed_objective(const planner::SearchRequest& req, const planner::Candidate& best, const std::string& output) {
  if (best.meets_constraints) return;
  const std::string written = output.empty() ? "" : fmt::format("; the closest plan was written to {}", output);
  if (req.objective == planner::Objective::cost_under_deadline) {
    const double over = best.objective_time_s - req.deadline_s;
    std::fprintf(stderr, "trainplan: no plan meets the deadline of %s: the fastest takes %s, %s (%.0f%%) too long%s (exit code %d)\n",
                 units::format_duration(req.deadline_s).c_str(), units::format_duration(best.objective_time_s).c_str(),
                 units::format_duration(over).c_str(), 100.0 * over / req.deadline_s, written.c_str(), kExitObjectiveMissed);
  } else {
    const double cost = best.objective_cost_usd.value_or(0);
    const double over = cost - req.budget_usd;
    std::fprintf(stderr, "trainplan: no plan meets the budget of %s: the cheapest costs %s, %s (%.0f%%) over%s (exit code %d)\n",
                 units::format_usd(req.budget_usd).c_str(), units::format_usd(cost).c_str(), units::format_usd(over).c_str(),
                 100.0 * over / req.budget_usd, written.c_str(), kExitObjectiveMissed);
  }
  global_options().exit_status = kExitObjectiveMissed;
}

planner::SearchResult run_search(const planner::SearchRequest& request) {
  planner::SearchRequest req = request;
  g_interrupted = false;
  req.cancel = &g_interrupted;
  std::signal(SIGINT, on_search_sigint);
  planner::SearchResult res = planner::search(req, user_catalog());
  std::signal(SIGINT, SIG_DFL);
  return res;
}

}  // namespace trainplan::cli
