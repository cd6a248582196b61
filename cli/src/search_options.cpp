#include "search_options.hpp"

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <limits>

#include "trainplan/core/units.hpp"

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
  // --tokens (or --samples) is required for GPU models; `plan` checks it (an XGBoost plan takes
  // --rows instead).
  cmd->add_option("--tokens,-t", a.tokens,
                  fmt::format("Training tokens (e.g. 300e9 or 300B; at most {:g}); or give --samples and --epochs", limits::kMaxTokens));
  cmd->add_option("--samples", a.samples, "Samples per epoch, the dataset's size (e.g. 1.28M images), instead of --tokens");
  cmd->add_option("--epochs", a.epochs, "Passes over --samples (default 1); the output shows the time per epoch");
  add_int(cmd, "--global-batch", a.global_batch, 1, limits::kMaxBatch, "Sequences per optimizer step (default: ~1M tokens)");
  cmd->add_option("--global-batch-range", a.global_batch_range, "Search the global batch too: powers of two in MIN:MAX sequences");
  add_int(cmd, "--seq-len", a.seq_len, 1, limits::kMaxSeqLen, seq_len_help());
  cmd->add_option("--instances,-i", a.instances, "Comma-separated instance types (default: every AWS GPU type in the catalog; Trainium types (trn1, trn1n, trn2: planned and simulated, not executed) only when named)");
  cmd->add_option("--counts", a.counts, fmt::format("Comma-separated instance counts, each 1..{} (default: 1, 2, 4, ... within the limits)",
                                                    limits::kMaxInstances));
  add_int(cmd, "--max-gpus", a.max_gpus, 1, planner::kMaxSearchGpus, "Largest cluster to consider, in GPUs");
  add_int(cmd, "--max-instances", a.max_instances, 0, limits::kMaxInstances, "Largest cluster to consider, in instances (0: no limit)");
  add_placement_options(cmd, a.azs, a.data_region, a.dataset_size);
  cmd->add_option("--stack", a.software,
                  fmt::format("Software stack the plans run on: its kernel launch cost, fusions and framework overhead "
                              "(default {}; `trainplan catalog` lists the stacks)", hw::kDefaultSoftware));
  add_choice(cmd, "--objective", a.objective, {"time", "cost", "cost-under-deadline", "time-under-budget"},
             "time, cost, cost-under-deadline (with --deadline) or time-under-budget (with --budget); default time, or "
             "the one the --deadline or --budget given needs; a deadline or budget that no plan meets exits with code 3");
  cmd->add_option("--deadline", a.deadline, "Deadline for cost-under-deadline (implied when --objective is not given), e.g. 30d or 72h");
  cmd->add_option("--budget", a.budget, "Budget in US dollars for time-under-budget (implied when --objective is not given), e.g. 2M or 250k");
  add_choice(cmd, "--platform", a.platform, {"ec2", "sagemaker"}, "Price on EC2 or SageMaker training");
  add_choice(cmd, "--purchase", a.purchase, {"on-demand", "spot", "both", "capacity-block"},
             "on-demand, spot (whole-job expectation with interruptions), both, or capacity-block (EC2 Capacity Block "
             "for ML: reserved up front in whole days up to 14, whole weeks beyond)");
  cmd->add_flag("--spot", a.spot, "Same as --purchase spot");
  cmd->add_option("--micro-batches", a.micro_batches, "Micro-batch sizes to try (default 1,2,4,8,16,32)");
  cmd->add_option("--zero", a.zero, "ZeRO stages to try (default 0,1,2,3)");
  cmd->add_option("--tp", a.tp, "Only these tensor-parallel degrees, e.g. 1 or 2,4 (default: all)");
  cmd->add_option("--pp", a.pp, "Only these pipeline-parallel degrees (default: all)");
  cmd->add_option("--dp", a.dp, "Only these data-parallel degrees (default: all)");
  cmd->add_option("--recompute", a.recompute, "Recomputation to try: none,selective,full (default all)");
  cmd->add_option("--schedules,--schedule", a.schedules, "Pipeline schedules to try: gpipe,1f1b,interleaved-1f1b (default 1f1b,interleaved-1f1b)");
  cmd->add_option("--vp", a.virtual_stages, "Virtual stages per rank for interleaved 1F1B (default 2,4)");
  cmd->add_option("--cp", a.context_parallel,
                  "Context-parallel degrees to try (default 1,2,4,8 for sequences of 4096 tokens or more, else 1)");
  cmd->add_option("--ep", a.expert_parallel,
                  "Expert-parallel degrees to try for MoE models (default: every divisor of dp x cp that divides the number "
                  "of experts; dense models: 1)");
  cmd->add_option("--capacity-factor", a.capacity_factor,
                  "MoE expert capacity factor (default 0: dropless; c >= 1 pads every expert to c x its balanced share)");
  cmd->add_option("--load-imbalance", a.load_imbalance,
                  "MoE load imbalance: the busiest expert-parallel rank's tokens over the mean (default 1: balanced)");
  cmd->add_option("--dp-algorithms", a.dp_algorithms, "Data-parallel algorithms: ring,tree,hierarchical,parameter-server,smddp,horovod (default ring,tree,hierarchical: no export target runs a parameter server or Horovod, and only SageMaker runs SMDDP)");
  cmd->add_option("--bucket-sizes", a.bucket_sizes, "Gradient bucket sizes (default 25MB)");
  cmd->add_flag("--no-sequence-parallel", a.no_sequence_parallel, "Do not try sequence parallelism");
  cmd->add_flag("--sync-bn", a.sync_bn,
                "Synchronized batch norm (PyTorch SyncBatchNorm) over the data-parallel GPUs: its collectives are planned, "
                "estimated and simulated (models with batch norm)");
  add_choice(cmd, "--precision", a.precision, precision_names(),
             "Training precision of every plan (default: the GPU's 16-bit type, bf16 else fp16); fp8 keeps only instance "
             "types with FP8 tensor cores (Ada, Hopper, Blackwell)");
  add_choice(cmd, "--fp8-recipe", a.fp8_recipe, {"delayed", "current", "mxfp8", "blockwise"},
             "FP8 scaling recipe with --precision fp8 (default delayed; mxfp8 on Blackwell only); see plan/README.md, \"FP8\"");
  cmd->add_flag("--tp-across-nodes", a.tp_across_nodes, "Allow tensor parallelism beyond one NVLink/NVSwitch domain");
  add_choice(cmd, "--data-input", a.data_input, sim::data_source_names(),
             "Where the training data comes from; the data loader (read bandwidth, JPEG decoding on the vCPUs for image "
             "models) bounds each step");
  add_choice(cmd, "--partition", a.partition, {"time", "memory", "even"}, "Layer split over pipeline stages: time, memory or even");
  add_choice(cmd, "--for", a.framework, {"deepspeed", "megatron", "sagemaker", "torchrun"},
             "Only plans this framework can run: deepspeed, megatron, sagemaker or torchrun (see `trainplan export`)");
  add_int(cmd, "--simulate-top", a.simulate_top, 0, limits::kMaxRows, "Simulate the best K candidates by the estimate and rank them by simulated step time (0: rank by the estimate)");
  add_int(cmd, "--exact-top", a.exact_top, 0, limits::kMaxRows, "Lazy stages are exact for at least this many best candidates");
  add_int(cmd, "--spot-runs", a.spot_runs, 1, limits::kMaxRuns, "Monte Carlo runs for the p50/p90 of the rows shown (spot/both)");
  add_int(cmd, "--seed", a.seed, 0, std::numeric_limits<int64_t>::max(), "Monte Carlo seed");
  cmd->add_option("--off", a.off, "Switch a stage off (experiments): partition, prune-memory, expand, lazy, checks, memo");
  add_int(cmd, "--top", a.top, 1, limits::kMaxRows, "Rows to print");
  add_int(cmd, "--threads", a.threads, 0, limits::kMaxThreads, "Worker threads (0: all cores); results do not depend on it");
  cmd->add_option("--calibration", a.calibration,
                  "Calibration profile (trainplan calibrate) for its GPU type; other GPU types use their default profile "
                  "in the profile directory ($TRAINPLAN_CALIBRATION_DIR, else $XDG_CONFIG_HOME/trainplan/calibration), else "
                  "run uncalibrated");
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
