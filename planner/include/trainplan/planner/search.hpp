// File: trainplan/planner/search.hpp
//
// Plan search: a pipeline of named stages over the candidates of a request.
//
//   planner::SearchRequest req;
//   req.model = "gpt3-13b";
//   req.tokens = 300e9;
//   req.instance_types = {"p4d.24xlarge", "p5.48xlarge"};
//   planner::SearchResult res = planner::search(req, hw::Catalog::builtin());
//   res.ranked.front().plan;   // the best plan, ready for plan::write_plan_file
//   for (const auto& st : res.stages) st.name, st.seconds, st.kept;
//
// Stages: enumerate (instance type x count x dp/tp/pp x ZeRO x micro-batch x recomputation
// x sequence parallel x schedule) -> prune_memory (drop what does not fit, counting why) ->
// analytical (estimate_step for each survivor, in parallel) -> rank (by the objective). Each
// stage is timed, can be switched off where that makes sense, and checks its invariants.
// Results do not depend on the thread count.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/memory.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/planner/analytical.hpp"

namespace trainplan::planner {

enum class Objective { time, cost };
std::string_view objective_name(Objective o);

struct SearchRequest {
  std::string model;              // catalog name or path (see models::resolve_model)
  double tokens = 0;              // training work in tokens (samples for image models)
  int64_t global_batch = 0;       // sequences per step; 0 = ~1M tokens (LLMs) / 256 samples
  int64_t seq_len = 0;            // 0 = the model's
  std::vector<std::string> instance_types;  // empty = every AWS instance type in the catalog
  int max_gpus = 1024;
  int max_instances = 0;          // 0 = no limit
  Objective objective = Objective::time;
  plan::Platform platform = plan::Platform::ec2;
  plan::Purchase purchase = plan::Purchase::on_demand;  // prices used for the cost objective
  std::vector<int64_t> micro_batches = {1, 2, 4, 8, 16, 32};
  bool allow_tp_across_nodes = false;
  int threads = 0;                // 0 = hardware concurrency
  AnalyticalOptions analytical;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. on SIGINT) to stop early
};

struct Candidate {
  plan::Plan plan;
  StepEstimate step;
  plan::MemoryBreakdown memory;   // the rank with the largest total
  double steps = 0;               // optimizer steps for the requested tokens
  double time_to_train_s = 0;
  double gpus = 0;
  std::optional<double> cost_on_demand_usd;  // for the request's platform
  std::optional<double> cost_spot_usd;       // spot price, no interruptions
};

struct StageReport {
  std::string name;
  double seconds = 0;
  size_t kept = 0;                // candidates leaving the stage
  std::string note;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // best first
  size_t enumerated = 0;
  /// Why candidates were dropped ("out of memory", "tp does not divide heads", ...) -> count.
  std::map<std::string, size_t> dropped;
  std::vector<StageReport> stages;
  bool cancelled = false;
  /// When nothing fits: per instance type, the smallest peak memory per GPU any candidate
  /// needed, and that candidate (for "needs >= X GB per GPU with ZeRO-3" messages).
  struct Closest {
    std::string instance_type;
    double needed_bytes = 0;
    double capacity_bytes = 0;
    plan::Plan plan;
  };
  std::vector<Closest> closest;
  int64_t global_batch = 0;
  int64_t seq_len = 0;
};

/// Runs the search. Throws Error for bad requests (unknown model or instance type, no tokens).
/// An empty `ranked` means nothing fits; `closest` says how far off the best attempts were.
SearchResult search(const SearchRequest& request, const hw::Catalog& catalog);

/// Default global batch for a model: ~1M tokens per step for sequence models (rounded to a
/// power of two sequences), 256 samples otherwise.
int64_t default_global_batch(const models::ModelSpec& spec);

/// Price per instance-hour for the platform, if known.
std::optional<double> on_demand_price(const hw::InstanceType& inst, plan::Platform platform);
std::optional<double> spot_price(const hw::InstanceType& inst, plan::Platform platform);

}  // namespace trainplan::planner
