#include "search_options.hpp"

#include "common.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <csignal>

#include "trainplan/core/strings.hpp"
#include "trainplan/core/units.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/partition.hpp"

namespace trainplan::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_search_sigint(int) { g_interrupted = true; }

template <typename T, typename F>
std::vector<T> list_of(const std::string& text, const std::string& option, F&& parse) {
  std::vector<T> out;
  if (text.empty()) return out;
  for (const auto& item : split(text, ',')) {
    try {
      out.push_back(parse(item));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", option, e.message())).hint(e.hint_text());
    }
  }
  return out;
}

int64_t positive_int(const std::string& s, const std::string& what) {
  const double v = units::parse(s, units::Dimension::count);
  if (!(v >= 1) || v != std::floor(v)) throw Error(fmt::format("{} must be a positive integer, got \"{}\"", what, s)).hint("e.g. 1,2,4,8");
  return static_cast<int64_t>(v);
}

template <typename E>
E choice(const std::string& s, std::initializer_list<E> all, std::string_view (*name)(E), const std::string& what) {
  std::vector<std::string> names;
  for (E e : all) {
    if (name(e) == s) return e;
    names.emplace_back(name(e));
  }
  throw Error(fmt::format("unknown {} \"{}\"", what, s)).hint("use one of " + join(names, ", "));
}

}  // namespace

planner::SearchRequest search_request(const SearchArgs& a) {
  planner::SearchRequest req;
  req.model = a.model;
  req.tokens = units::parse(a.tokens, units::Dimension::count);
  req.global_batch = a.global_batch;
  if (!a.global_batch_range.empty()) {
    const auto parts = split(a.global_batch_range, ':');
    if (parts.size() != 2)
      throw Error(fmt::format("--global-batch-range takes MIN:MAX, got \"{}\"", a.global_batch_range)).hint("e.g. 512:2048");
    req.global_batch_min = positive_int(parts[0], "--global-batch-range");
    req.global_batch_max = positive_int(parts[1], "--global-batch-range");
  }
  req.seq_len = a.seq_len;
  req.instance_types = split(a.instances, ',');
  req.instance_counts = list_of<int>(a.counts, "--counts", [](const std::string& s) { return static_cast<int>(positive_int(s, "an instance count")); });
  req.max_gpus = a.max_gpus;
  req.max_instances = a.max_instances;
  req.objective = planner::parse_objective(a.objective);
  if (!a.deadline.empty()) req.deadline_s = units::parse(a.deadline, units::Dimension::duration);
  if (!a.budget.empty()) {
    std::string b = a.budget;
    if (!b.empty() && b.front() == '$') b.erase(0, 1);
    req.budget_usd = units::parse(b, units::Dimension::count);
  }
  req.platform = a.platform == "sagemaker" ? plan::Platform::sagemaker : plan::Platform::ec2;
  const std::string purchase = a.spot ? "spot" : a.purchase;
  req.both_purchases = purchase == "both";
  req.purchase = purchase == "spot" ? plan::Purchase::spot : plan::Purchase::on_demand;
  if (!a.micro_batches.empty())
    req.micro_batches = list_of<int64_t>(a.micro_batches, "--micro-batches", [](const std::string& s) { return positive_int(s, "a micro-batch"); });
  if (!a.zero.empty())
    req.zero_stages = list_of<int>(a.zero, "--zero", [](const std::string& s) {
      if (s != "0" && s != "1" && s != "2" && s != "3") throw Error(fmt::format("ZeRO stages are 0..3, got \"{}\"", s)).hint("e.g. --zero 0,1,3");
      return std::stoi(s);
    });
  if (!a.recompute.empty())
    req.recomputes = list_of<plan::Recompute>(a.recompute, "--recompute", [](const std::string& s) {
      return choice(s, {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}, plan::recompute_name, "recomputation");
    });
  if (!a.schedules.empty())
    req.schedules = list_of<plan::Schedule>(a.schedules, "--schedules", [](const std::string& s) {
      return choice(s, {plan::Schedule::gpipe, plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b}, plan::schedule_name, "schedule");
    });
  if (!a.virtual_stages.empty())
    req.virtual_stages = list_of<int>(a.virtual_stages, "--vp", [](const std::string& s) { return static_cast<int>(positive_int(s, "a virtual stage count")); });
  if (!a.context_parallel.empty())
    req.context_parallel = list_of<int>(a.context_parallel, "--cp", [](const std::string& s) { return static_cast<int>(positive_int(s, "a context-parallel degree")); });
  if (!a.dp_algorithms.empty())
    req.dp_algorithms = list_of<plan::DpAlgorithm>(a.dp_algorithms, "--dp-algorithms", [](const std::string& s) {
      return choice(s, {plan::DpAlgorithm::ring, plan::DpAlgorithm::tree, plan::DpAlgorithm::hierarchical, plan::DpAlgorithm::parameter_server},
                    plan::dp_algorithm_name, "data-parallel algorithm");
    });
  if (!a.bucket_sizes.empty())
    req.bucket_sizes_bytes = list_of<double>(a.bucket_sizes, "--bucket-sizes", [](const std::string& s) { return units::parse(s, units::Dimension::bytes); });
  req.sequence_parallel = !a.no_sequence_parallel;
  req.allow_tp_across_nodes = a.tp_across_nodes;
  req.partition = planner::parse_partition_mode(a.partition);
  if (!a.framework.empty()) req.framework = planner::parse_export_target(a.framework);
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
      throw Error(fmt::format("--off: unknown stage \"{}\"", stage))
          .hint("stages that can be switched off: partition, prune-memory, expand, lazy, checks");
  }
  return req;
}

void add_search_options(CLI::App* cmd, SearchArgs& a, bool model_required) {
  {
    auto* o = cmd->add_option("--model,-m", a.model, "Catalog model name (see `trainplan model`) or a path to a Hugging Face config.json");
    if (model_required) o->required();
  }
  {
    auto* o = cmd->add_option("--tokens,-t", a.tokens, "Training tokens (e.g. 300e9 or 300B)");
    if (model_required) o->required();
  }
  cmd->add_option("--global-batch", a.global_batch, "Sequences per optimizer step (default: ~1M tokens)");
  cmd->add_option("--global-batch-range", a.global_batch_range, "Search the global batch too: powers of two in MIN:MAX sequences");
  cmd->add_option("--seq-len", a.seq_len, "Sequence length (default: the model's)");
  cmd->add_option("--instances,-i", a.instances, "Comma-separated instance types (default: every AWS type in the catalog)");
  cmd->add_option("--counts", a.counts, "Comma-separated instance counts (default: 1, 2, 4, ... within the limits)");
  cmd->add_option("--max-gpus", a.max_gpus, "Largest cluster to consider, in GPUs")->capture_default_str();
  cmd->add_option("--max-instances", a.max_instances, "Largest cluster to consider, in instances (0: no limit)");
  cmd->add_option("--objective", a.objective, "time, cost, cost-under-deadline (with --deadline) or time-under-budget (with --budget)")
      ->capture_default_str();
  cmd->add_option("--deadline", a.deadline, "Deadline for cost-under-deadline, e.g. 30d or 72h");
  cmd->add_option("--budget", a.budget, "Budget in US dollars for time-under-budget, e.g. 2M or 250k");
  cmd->add_option("--platform", a.platform, "Price on EC2 or SageMaker training")->check(CLI::IsMember({"ec2", "sagemaker"}))->capture_default_str();
  cmd->add_option("--purchase", a.purchase, "on-demand, spot (whole-job expectation with interruptions) or both")
      ->check(CLI::IsMember({"on-demand", "spot", "both"}))
      ->capture_default_str();
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
  cmd->add_option("--partition", a.partition, "Layer split over pipeline stages: time, memory or even")
      ->check(CLI::IsMember({"time", "memory", "even"}))
      ->capture_default_str();
  cmd->add_option("--for", a.framework, "Only plans this framework can run: deepspeed, megatron, sagemaker or torchrun (see `trainplan export`)");
  cmd->add_option("--simulate-top", a.simulate_top, "Simulate the best K candidates by the estimate and rank them by simulated step time (0: rank by the estimate)")->capture_default_str();
  cmd->add_option("--exact-top", a.exact_top, "Lazy stages are exact for at least this many best candidates")->capture_default_str();
  cmd->add_option("--spot-runs", a.spot_runs, "Monte Carlo runs for the p50/p90 of the rows shown (spot/both)")->capture_default_str();
  cmd->add_option("--seed", a.seed, "Monte Carlo seed")->capture_default_str();
  cmd->add_option("--off", a.off, "Switch a stage off (experiments): partition, prune-memory, expand, lazy, checks");
  cmd->add_option("--top", a.top, "Rows to print")->capture_default_str();
  cmd->add_option("--threads", a.threads, "Worker threads (0: all cores); results do not depend on it");
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
