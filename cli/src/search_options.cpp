#include "search_options.hpp"

#include <atomic>
#include <csignal>

#include "common.hpp"

namespace trainplan::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_search_sigint(int) { g_interrupted = true; }

}  // namespace

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
  cmd->add_option("--simulate-top", a.simulate_top, "Simulate the best K candidates and re-rank them (0: off)")->capture_default_str();
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
