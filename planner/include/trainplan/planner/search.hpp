// File: trainplan/planner/search.hpp
//
// Plan search: the best plan for a model, a token budget and a deadline or a budget in
// dollars, over instance types, cluster sizes and every parallel layout, as a pipeline of
// named stages.
//
//   planner::SearchRequest req;
//   req.model = "gpt3-13b";
//   req.tokens = 300e9;
//   req.instance_types = {"p4d.24xlarge", "p5.48xlarge"};
//   req.objective = planner::Objective::cost_under_deadline;
//   req.deadline_s = 30 * 86400.0;
//   req.simulate_top = 10;                       // re-rank the best 10 with the simulator
//   planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
//   res.ranked.front().plan;   // the best plan, ready for plan::write_plan_file
//   res.pareto;                // (time, cost) frontier, indices into res.ranked
//   for (const auto& st : res.stages) st.name, st.seconds, st.kept;
//
// Stages (each named, timed, checked; those marked * can be switched off):
//   enumerate     instance type x count x dp/tp/pp/cp (tp inside the NVLink/NVSwitch domain unless
//                 allowed across nodes; cp > 1 by default only for sequences of at least
//                 kContextParallelMinSeqLen tokens) x schedule and virtual stages x ZeRO 0-3 x
//                 recomputation x sequence parallelism (tp > 1) x global batch x micro-batch;
//                 precision is the GPU's 16-bit type (bf16, else fp16).
//   partition*    layer units to pipeline stages (partition.hpp), shared by every candidate
//                 with the same unit costs; off: plan::even_stages.
//   prune_memory* per family, micro-batches in increasing order until one does not fit (memory
//                 grows with the micro-batch, so the larger ones cannot fit); a split that does
//                 not fit is re-partitioned under the memory limit before giving up.
//   analytical    estimate_step for every survivor, in parallel (microseconds each).
//   expand*       lazy axes: data-parallel algorithm (ZeRO-0 with dp > 1) and gradient bucket
//                 size (dp > 1) are tried only for candidates whose lower bound (the step
//                 without any data-parallel exposure) could still reach the best `exact_top`
//                 or the Pareto frontier; the result equals trying them all (tested).
//   job           whole-job expectations (startup, checkpoints, interruptions) with the job
//                 model's closed form (sim::closed_form), for spot or both purchase options,
//                 computed branch-and-bound for the candidates that can reach the best
//                 `exact_top` or the Pareto frontier; Monte Carlo p50/p90 for the rows shown.
//   simulate      the best `simulate_top` lowered (layer granularity, one rank per symmetry
//                 class) and simulated by the discrete-event simulator; Spearman correlation of
//                 analytical and simulated step times over them.
//   rank          the simulated candidates in simulated order, then the rest by estimate;
//                 ties broken by the other metric and the plan's JSON, so the order is total.
//   pareto        the (time, cost) frontier of the ranked candidates (pareto_candidates).
//   explain       explain(#1, #2) into SearchResult::explanation.
// The stages are the passes of search.cpp (kPasses): one function each, timed, each followed
// by a check of its invariants (skipped with stages.check_invariants off).
// Results do not depend on the thread count. `cancel` (SIGINT) stops the current stage and
// ranks what was evaluated.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/boxed.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/export.hpp"
#include "trainplan/planner/partition.hpp"
#include "trainplan/simulator/job_builder.hpp"
#include "trainplan/simulator/simulate.hpp"
#include "trainplan/simulator/spot.hpp"

namespace trainplan::planner {

enum class Objective {
  time,                 // minimise time to train
  cost,                 // minimise cost
  cost_under_deadline,  // minimise cost among plans that finish by deadline_s
  time_under_budget,    // minimise time among plans that cost at most budget_usd
};
std::string_view objective_name(Objective o);  // "time", "cost", "cost-under-deadline", "time-under-budget"
/// Throws Error listing the names.
Objective parse_objective(const std::string& name);

/// How pipeline stages get their layer units.
enum class PartitionMode {
  even,    // plan::even_stages
  time,    // partition_units(Balance::time): slowest stage as fast as possible, within memory
  memory,  // partition_units(Balance::memory): fullest stage as empty as possible
};
std::string_view partition_mode_name(PartitionMode m);  // "even", "time", "memory"
PartitionMode parse_partition_mode(const std::string& name);

/// Stages that can be switched off for experiments (analytical, job, rank always run;
/// simulate runs when simulate_top > 0).
struct SearchStages {
  bool partition = true;     // off: plan::even_stages
  bool prune_memory = true;  // off: candidates that do not fit are ranked too (Candidate::fits false)
  bool expand = true;        // off: only the first dp algorithm and bucket size
  bool lazy = true;          // off: expand every variant, no bounds (for tests: same result)
  bool memo = true;          // off: every memory-limited split computed afresh (for tests: same result)
  bool check_invariants = true;
};

/// Shortest sequence for which the search tries context parallelism by default: below it the
/// attention is a small part of a layer's work and splitting the sequence only shrinks every
/// GEMM and adds K, V traffic (Megatron-core / NeMo recipes use cp > 1 from 8k tokens on).
inline constexpr int64_t kContextParallelMinSeqLen = 4096;

struct SearchRequest {
  std::string model;              // catalog name or path (see models::resolve_model)
  double tokens = 0;              // training work in tokens (samples for image models)
  /// The work as the user gave it in samples: samples per epoch (the dataset) and epochs;
  /// search_request() sets `tokens` = samples x epochs x tokens per sample (the sequence length
  /// for sequence models, 1 for image models and MLPs). 0: the work was given in tokens.
  double samples_per_epoch = 0;
  double epochs = 0;
  int64_t global_batch = 0;       // sequences per step; 0 = ~1M tokens (LLMs) / 256 samples
  /// Search the global batch too: every power of two in [min, max] (both > 0). The token count
  /// is fixed, so larger batches mean fewer steps; convergence is not modelled.
  int64_t global_batch_min = 0, global_batch_max = 0;
  int64_t seq_len = 0;            // 0 = the model's
  std::vector<std::string> instance_types;  // empty = every AWS instance type in the catalog
  std::vector<int> instance_counts;         // empty = 1, 2, 4, ... within max_gpus / max_instances
  int max_gpus = 1024;
  int max_instances = 0;          // 0 = no limit
  /// AZs each candidate's instances are split over (contiguous blocks; at most one AZ per
  /// instance: min(azs, instances)); the training data's Region and size (plan.hpp).
  int azs = 1;
  std::string data_region;
  /// Software stack of every candidate (plan field `software`, catalog key "software"); empty:
  /// hw::kDefaultSoftware.
  std::string software;
  double dataset_bytes = 0;
  Objective objective = Objective::time;
  double deadline_s = 0;          // cost_under_deadline
  double budget_usd = 0;          // time_under_budget
  plan::Platform platform = plan::Platform::ec2;
  /// Purchase option the objective prices. on_demand: steps x step time x price (no startup,
  /// no checkpoints); spot: the whole job's expectation with interruptions (job stage).
  plan::Purchase purchase = plan::Purchase::on_demand;
  /// Consider on-demand and spot for every candidate (both as whole-job expectations); the
  /// candidate takes the better for the objective. Overrides `purchase`.
  bool both_purchases = false;
  std::vector<int64_t> micro_batches = {1, 2, 4, 8, 16, 32};
  /// Layout filters: only these tensor-, pipeline- and data-parallel degrees (empty: every
  /// degree the enumeration reaches). A filter that leaves no candidate is an Error naming
  /// its flag (--tp, --pp, --dp) and the degrees that were possible.
  std::vector<int> tp_degrees, pp_degrees, dp_degrees;
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<plan::Recompute> recomputes = {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full};
  /// GPipe equals 1F1B in the analytical time and needs more memory, so it is off by default.
  std::vector<plan::Schedule> schedules = {plan::Schedule::one_f_one_b, plan::Schedule::interleaved_1f1b};
  std::vector<int> virtual_stages = {2, 4};  // for interleaved 1F1B
  /// Context-parallel degrees (each must divide the GPU count, and 2 * cp the sequence length).
  /// Empty: 1, 2, 4, 8 for sequences of at least kContextParallelMinSeqLen tokens, else 1.
  std::vector<int> context_parallel;
  /// Expert-parallel degrees for MoE models (`--ep`; each must divide dp * cp and the number of
  /// experts). Empty: every divisor of dp * cp that divides the number of experts. Dense
  /// models: 1 only.
  std::vector<int> expert_parallel;
  /// MoE routing of every candidate (plan::Plan::moe_capacity_factor, moe_load_imbalance;
  /// `--capacity-factor`, `--load-imbalance`).
  double moe_capacity_factor = 0;
  double moe_load_imbalance = 1.0;
  /// The parameter server is modelled for comparison only (no export target runs one: rule
  /// all.no-parameter-server), so it is searched only when asked for.
  std::vector<plan::DpAlgorithm> dp_algorithms = {plan::DpAlgorithm::ring, plan::DpAlgorithm::tree,
                                                  plan::DpAlgorithm::hierarchical};
  std::vector<double> bucket_sizes_bytes = {25e6};
  bool sequence_parallel = true;  // also try sequence parallelism where tp > 1
  /// Every candidate synchronizes its batch norm over the data-parallel group
  /// (plan::Plan::sync_batch_norm; `--sync-bn`); the model must have batch-norm layers.
  bool sync_batch_norm = false;
  /// Training precision of every candidate (`--precision`; empty: each GPU's 16-bit type, bf16
  /// else fp16). A precision the GPU lacks (FP8 before Ada/Hopper; mxfp8 before Blackwell)
  /// leaves its instance types out, or is an Error at --precision / --fp8-recipe when the
  /// request names those types.
  std::optional<Precision> precision;
  /// FP8 recipe and options of every candidate when `precision` is fp8 (`--fp8-recipe`).
  plan::Fp8Options fp8;
  bool allow_tp_across_nodes = false;
  PartitionMode partition = PartitionMode::time;
  /// Where the training data comes from: the data loader (read bandwidth of that storage, JPEG
  /// decoding on the instance's vCPUs for vision models) bounds every candidate's step
  /// (sim::data_input_spec, sim::input_time_per_step_s); other job options at their defaults.
  sim::DataSource data_source = sim::DataSource::s3_fastfile;
  /// Only plans this framework can run (export_refusal, the rules of export_rules.hpp): no
  /// parameter server anywhere, the even layer split for DeepSpeed (PipelineModule splits layers
  /// itself), unfused attention for Megatron-LM on GPUs below sm80, ...
  std::optional<ExportTarget> framework;
  size_t simulate_top = 0;        // 0 = no simulation
  /// The lazy stages (expand, job) are exact for at least this many best candidates and for
  /// the Pareto frontier.
  size_t exact_top = 50;
  size_t spot_runs = 0;           // Monte Carlo runs for p50/p90 of the first `spot_rows` (0: none)
  size_t spot_rows = 10;
  uint64_t seed = 1;
  int threads = 0;                // 0 = hardware concurrency
  AnalyticalOptions analytical;
  /// Per GPU type (hw::GpuSpec::name): the options of a calibration profile fitted on that GPU;
  /// GPUs not here use `analytical`.
  std::map<std::string, AnalyticalOptions> analytical_by_gpu;
  const AnalyticalOptions& analytical_for(const hw::GpuSpec& gpu) const {
    auto it = analytical_by_gpu.find(gpu.name);
    return it == analytical_by_gpu.end() ? analytical : it->second;
  }
  SearchStages stages;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. on SIGINT) to stop early
};

/// A whole job on one purchase option: the job model's closed-form expectation (spot.hpp),
/// checkpointing at Young's interval; Monte Carlo percentiles where computed.
struct JobOutcome {
  plan::Purchase purchase = plan::Purchase::on_demand;
  double expected_time_s = 0;
  double expected_cost_usd = 0;
  double expected_interruptions = 0;
  double checkpoint_interval_s = 0;
  std::optional<sim::MonteCarloStats> time_s;     // Monte Carlo (p50, p90, ...)
  std::optional<sim::MonteCarloStats> cost_usd;
};

/// One simulated step of a candidate (symmetric fidelity, layer granularity).
struct SimulatedStep {
  double step_time_s = 0;
  sim::Breakdown breakdown;
  int64_t tasks_simulated = 0;
  double wall_s = 0;  // not deterministic; never written to files compared in tests
  double inter_az_bytes = 0;  // sent between AZs in one step (sim::StepResult::inter_az_bytes)
};

/// One simulated step of a plan: the plan's prediction wherever one is printed (the search's
/// ranking, `trainplan report --plan`). Layer granularity, one rank per symmetry class, no
/// memory events (they never change the timing); `sim::simulate_plan` with the same choices
/// (what `trainplan simulate` runs above sim::kFullFidelityMaxGpus GPUs) gives the same time.
/// `options` carries a calibration profile's compute settings (efficiencies, kernel overhead).
SimulatedStep simulate_candidate(const plan::Plan& plan, const plan::PlanContext& ctx, const AnalyticalOptions& options = {});

struct Candidate;
/// A candidate's data transfer (Candidate::transfer_usd): its simulated step's inter-AZ bytes x
/// steps x the inter-AZ price both ways (0 when not simulated: the estimate counts no bytes), and
/// the training data from another Region as build_job_spec counts it (one epoch's bytes —
/// data.size, else `samples_per_epoch` samples, else the work's `tokens` — x epochs, the tokens
/// read once when the work is not in epochs).
double transfer_usd(const plan::PlanContext& ctx, const Candidate& c, double tokens, double samples_per_epoch, double epochs);

struct Candidate {
  plan::Plan plan;
  StepEstimate step;              // analytical
  plan::MemoryBreakdown memory;   // the rank with the largest total
  bool fits = true;
  double steps = 0;               // optimizer steps for the requested tokens
  /// steps x step time (the simulated step where simulated, else the estimate).
  double time_to_train_s = 0;
  double gpus = 0;
  std::optional<double> cost_on_demand_usd;  // time_to_train x on-demand price (request's platform)
  std::optional<double> cost_spot_usd;       // time_to_train x spot price, no interruptions
  /// EC2 Capacity Block: instances x time_to_train rounded up to whole days (whole weeks past
  /// 14 days) x the block price, paid up front; nullopt without a published block price.
  std::optional<double> cost_capacity_block_usd;
  /// Data transfer in each of the costs above: the simulated step's inter-AZ bytes x steps x
  /// the inter-AZ price both ways (0 before simulation: the estimate does not count bytes),
  /// and the training data read from another Region (hw/placement.hpp).
  double transfer_usd = 0;
  // Held on the heap (Boxed): few of a search's candidates have them.
  Boxed<JobOutcome> on_demand_job;   // whole job (purchase both)
  Boxed<JobOutcome> spot_job;        // whole job with interruptions (purchase spot or both)
  Boxed<SimulatedStep> simulated;
  /// What the objective ranks by: the chosen purchase option's time and cost.
  plan::Purchase purchase = plan::Purchase::on_demand;
  double objective_time_s = 0;
  std::optional<double> objective_cost_usd;
  bool meets_constraints = true;  // deadline / budget

  /// Seconds per step the data loader needs (sim::input_time_per_step_s); 0 = no bound.
  double data_loader_s = 0;

  /// The compute step (simulated where simulated, else the estimate), or the data loader's
  /// time when that is longer: the loader prefetches, so the slower of the two sets the pace.
  double step_time_s() const { return std::max(simulated ? simulated->step_time_s : step.step_time_s, data_loader_s); }
  /// Whether the data loader, not the GPUs, sets the step time.
  bool loader_bound() const { return data_loader_s > (simulated ? simulated->step_time_s : step.step_time_s); }
};

/// Why `winner` beats `runner_up`: the step-time breakdown side by side (analytical;
/// simulated step times where both were simulated), memory headroom and the objective's
/// numbers, with the largest differences named in `summary`.
struct Explanation {
  struct Row {
    std::string what;    // "compute", "exposed dp communication", "pipeline bubble", ...
    double winner = 0;   // seconds per step (memory rows: bytes; totals: seconds / USD)
    double runner_up = 0;
    std::string unit;    // "s", "B", "USD", "steps"
  };
  std::vector<Row> rows;
  std::string summary;
};
struct StageReport {
  std::string name;
  double seconds = 0;
  size_t kept = 0;                // candidates leaving the stage
  std::string note;
  bool enabled = true;
};

/// How many candidates each part of the search touched.
struct SearchCounts {
  size_t enumerated = 0;          // the whole space, lazily expanded axes included
  size_t families = 0;            // candidates that differ only in the micro-batch (and lazy axes)
  size_t memory_evaluations = 0;  // memory model runs
  size_t inferred_out_of_memory = 0;  // larger micro-batches skipped after one did not fit
  size_t repartitioned = 0;       // pipeline splits redone under the memory limit (and then fit)
  size_t partitions_computed = 0; // distinct time-balanced splits
  size_t analytical = 0;          // step estimates
  double analytical_per_s = 0;    // estimates per second of the analytical stage
  size_t expanded = 0;            // lazy variants evaluated
  size_t expansion_skipped = 0;   // lazy variants proven unable to reach the top or the frontier
  size_t job_evaluations = 0;     // whole-job closed forms
  size_t simulated = 0;
};

/// An instance type without a price for the request's platform and purchase option.
struct UnpricedType {
  std::string instance_type;
  std::string missing;  // the price: "EC2 on-demand", "EC2 spot", "SageMaker on-demand", ...
};

/// An instance type the catalog's selected region does not offer (hw::Catalog::select_region).
struct NotOfferedType {
  std::string instance_type;
  std::vector<std::string> offered_in;  // the regions of the catalog's table that offer it
};

struct SearchResult {
  std::vector<Candidate> ranked;  // best first
  /// Indices into `ranked` of the (objective time, objective cost) Pareto frontier, fastest
  /// first (pareto_candidates); candidates without a price are left out.
  std::vector<size_t> pareto;
  size_t enumerated = 0;          // = counts.enumerated
  SearchCounts counts;
  /// Why candidates were dropped ("does not fit in GPU memory", ...) -> count.
  std::map<std::string, size_t> dropped;
  /// Searched instance types without a price for the purchase option (missing_price). A cost
  /// objective leaves them out of the search; a time objective ranks them with no cost.
  std::vector<UnpricedType> unpriced;
  /// Instance types left out of the search because the selected region does not offer them.
  std::vector<NotOfferedType> not_offered;
  std::string region;  // the catalog's selected region (empty: the catalog's own prices)
  std::vector<StageReport> stages;
  bool cancelled = false;
  /// Spearman rank correlation of analytical and simulated step times over the simulated
  /// candidates (needs at least 3).
  std::optional<double> rank_correlation;
  /// #1 against #2 (the explain pass; empty with fewer than two ranked candidates).
  std::optional<Explanation> explanation;
  /// When nothing fits: per instance type, the smallest peak memory per GPU any candidate
  /// needed, and that candidate (for "needs >= X GB per GPU with ZeRO-3" messages).
  struct Closest {
    std::string instance_type;
    double needed_bytes = 0;
    double capacity_bytes = 0;
    plan::Plan plan;
  };
  std::vector<Closest> closest;
  int64_t global_batch = 0;       // the requested (or default) global batch
  int64_t seq_len = 0;
};

/// Runs the search. Throws Error for bad requests (unknown model or instance type, no tokens,
/// an objective without its deadline or budget).
/// An empty `ranked` means nothing fits; `closest` says how far off the best attempts were.
SearchResult search(const SearchRequest& request, const hw::Catalog& catalog);

/// Default global batch for a model: ~1M tokens per step for sequence models (rounded to a
/// power of two sequences), 256 samples otherwise.
int64_t default_global_batch(const models::ModelSpec& spec);

/// Price per instance-hour for the platform, if known.
std::optional<double> on_demand_price(const hw::InstanceType& inst, plan::Platform platform);
std::optional<double> spot_price(const hw::InstanceType& inst, plan::Platform platform);
/// What `instances` of `inst` reserved as an EC2 Capacity Block for a job of `seconds` cost (the
/// reservation, rounded up to whole days / weeks); nullopt without a block price or on
/// SageMaker (Capacity Blocks are an EC2 purchase).
std::optional<double> capacity_block_cost_usd(const hw::InstanceType& inst, plan::Platform platform, int instances,
                                              double seconds);
/// Whether the objective ranks by cost (cost, cost under a deadline, time under a budget).
bool ranks_by_cost(Objective objective);
/// The price `inst` lacks for the request's platform and purchase option ("EC2 on-demand",
/// "SageMaker managed spot", "EC2 on-demand or spot" with both purchases), or nullopt when it
/// has one. Such a type is never ranked as free: cost objectives leave it out.
std::optional<std::string> missing_price(const SearchRequest& req, const hw::InstanceType& inst);
/// One note line naming the unpriced types and the missing price, saying whether they were
/// left out (cost objectives) or ranked without a cost (time); empty when `unpriced` is.
std::string unpriced_note(const SearchRequest& req, const std::vector<UnpricedType>& unpriced);
/// One note line naming the types left out because `region` does not offer them and the
/// regions that do; empty when `not_offered` is.
std::string not_offered_note(const std::string& region, const std::vector<NotOfferedType>& not_offered);
/// One note line naming those of `instance_types` whose accelerator trainplan cannot execute
/// (AWS Trainium: runtime "neuron"): they are planned and simulated only, and `trainplan
/// execute` refuses their plans. Empty when every type is executable (or unknown).
std::string not_executed_note(const hw::Catalog& catalog, const std::vector<std::string>& instance_types);

/// Indices of the points on the Pareto frontier of (x, y), both minimised: no other point is
/// <= in both and < in one. Sorted by x; of equal points only the first (lowest index) is
/// listed. Non-finite points are never on it.
std::vector<size_t> pareto_frontier(const std::vector<std::pair<double, double>>& points);
/// The frontier of candidates by (objective_time_s, objective_cost_usd), fastest first;
/// candidates without a cost are never on it.
std::vector<size_t> pareto_candidates(const std::vector<Candidate>& candidates);

/// Spearman rank correlation of two equally long samples (average ranks for ties); nullopt
/// for fewer than 2 points or a constant sample.
std::optional<double> spearman(const std::vector<double>& a, const std::vector<double>& b);

Explanation explain(const Candidate& winner, const Candidate& runner_up);

}  // namespace trainplan::planner
