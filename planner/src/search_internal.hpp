// Private pieces of the plan search (search.cpp drives them): the compact candidate
// representation, enumeration, the partition cache, objective keys, the job and simulation
// stages.
#pragma once

#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "trainplan/core/thread_pool.hpp"
#include "trainplan/planner/search.hpp"

namespace trainplan::planner::detail {

using Clock = std::chrono::steady_clock;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// One (instance type, count): the plan fields they fix and the resolved context.
struct Context {
  plan::Plan base;  // instance type, count, model, precision, work, platform filled
  std::unique_ptr<plan::PlanContext> ctx;
  int type_index = 0;
  /// What feeds a step on this cluster (the request's data source); samples_per_step is set
  /// per candidate from its global batch.
  sim::DataInputSpec input;
};

/// A family of candidates: everything but the micro-batch and the lazily expanded axes
/// (data-parallel algorithm, bucket size).
struct Family {
  uint32_t context = 0;
  int16_t tp = 1, pp = 1, vp = 1, cp = 1;
  int16_t ep = 1;  // expert parallelism (MoE models)
  int8_t zero = 0;
  plan::Schedule schedule = plan::Schedule::one_f_one_b;
  plan::Recompute recompute = plan::Recompute::none;
  bool sp = false;
  int64_t global_batch = 0;
  std::vector<int64_t> micro_batches;  // valid ones, increasing
};

/// A candidate before evaluation: a family, one micro-batch and the lazy axes' values.
struct Skeleton {
  uint32_t family = 0;
  int64_t micro_batch = 1;
  plan::DpAlgorithm algorithm = plan::DpAlgorithm::ring;
  double bucket_size_bytes = 25e6;
  std::shared_ptr<const std::vector<plan::StageAssignment>> stages;  // null: even split
};

/// Everything the stages share.
struct Space {
  std::vector<std::string> types;
  std::vector<Context> contexts;
  std::vector<Family> families;
  size_t enumerated = 0;
  size_t not_expressible = 0;  // candidates the request's framework cannot run
  std::vector<UnpricedType> unpriced;  // types without the purchase option's price (left out when ranking by cost)
  std::vector<NotOfferedType> not_offered;  // types the selected region does not offer (left out)
};

/// enumerate: the families of the request (see search.hpp).
Space enumerate(const SearchRequest& req, const hw::Catalog& catalog, int64_t default_batch, ThreadPool* pool = nullptr);

/// The plan of a skeleton.
plan::Plan make_plan(const Space& space, const Skeleton& s);
plan::Plan plan_of(const Context& c, const Family& f, const Skeleton& s);

/// Time-balanced splits shared by every candidate with the same unit costs. Thread-safe;
/// the value of a key does not depend on which thread computes it.
class PartitionCache {
 public:
  PartitionCache(const Space& space, const SearchRequest& req, EstimateCache* cache)
      : space_(space), req_(req), cache_(cache) {}
  /// The time-balanced split for the family at this micro-batch (memory not considered).
  std::shared_ptr<const std::vector<plan::StageAssignment>> time_split(const Family& f, int64_t micro_batch);
  size_t computed() const;

 private:
  // (instance type, tp, micro-batch, sp, recompute, pp, vp, cp, dp and context when tp x cp spans nodes)
  using Key = std::tuple<int, int, int64_t, bool, int, int, int, int, int, int>;
  const Space& space_;
  const SearchRequest& req_;  // its analytical options per GPU type
  EstimateCache* cache_;
  mutable std::shared_mutex mutex_;  // lookups share it: hits are most calls, on every thread
  std::map<Key, std::shared_ptr<const std::vector<plan::StageAssignment>>> splits_;
};

/// Per-unit memory terms shared by every candidate with the same (tp, sp, cp, micro-batch,
/// recomputation, precision, attention): the model graph is the same in every context.
class MemoryTermsCache {
 public:
  const UnitMemoryTerms& terms(const plan::Plan& p, const plan::PlanContext& ctx);

  /// memory_split's answers by their whole input, the partition problem (every field, bit for
  /// bit) and the balance: fitting_partition is a pure function of them, so equal inputs (the
  /// same stage shapes on several cluster sizes) share one answer. Off: nothing is kept.
  using Split = std::optional<std::vector<plan::StageAssignment>>;
  explicit MemoryTermsCache(bool memo_splits = true) : memo_splits_(memo_splits) {}
  template <typename F>
  Split split(const PartitionProblem& prob, Balance balance, F&& compute);
  /// Drops the remembered splits (once no more are asked for: their memory goes to the next
  /// stages instead of fresh pages).
  void forget_splits() {
    std::unique_lock lock(mutex_);
    std::unordered_map<std::vector<uint64_t>, Split, BitsHash>().swap(splits_);
  }

 private:
  using Key = std::tuple<int, bool, int, int64_t, int, int, int>;
  std::shared_mutex mutex_;  // lookups share it: hits are most calls, on every thread
  std::map<Key, std::unique_ptr<UnitMemoryTerms>> terms_;
  bool memo_splits_ = true;
  struct BitsHash {
    size_t operator()(const std::vector<uint64_t>& v) const;
  };
  std::unordered_map<std::vector<uint64_t>, Split, BitsHash> splits_;
};

/// A partition problem and a balance as one flat key (sizes, then every value's bits).
std::vector<uint64_t> problem_bits(const PartitionProblem& prob, Balance balance);

template <typename F>
MemoryTermsCache::Split MemoryTermsCache::split(const PartitionProblem& prob, Balance balance, F&& compute) {
  if (!memo_splits_) return compute();
  std::vector<uint64_t> key = problem_bits(prob, balance);
  {
    std::shared_lock lock(mutex_);
    auto it = splits_.find(key);
    if (it != splits_.end()) return it->second;
  }
  Split v = compute();
  std::unique_lock lock(mutex_);
  return splits_.emplace(std::move(key), std::move(v)).first->second;
}

/// The memory of the fullest rank: memory_per_rank (O(units), equal to plan::peak_memory for
/// GPipe and 1F1B with flash attention); for interleaved schedules plan::peak_memory itself
/// when the mirror is within 10% of the capacity.
plan::MemoryBreakdown peak_memory_of(const plan::Plan& p, const plan::PlanContext& ctx, MemoryTermsCache& terms);

/// A split of `p` under its memory limit (partition_units on make_partition_problem);
/// nullopt when no split fits.
std::optional<std::vector<plan::StageAssignment>> memory_split(const plan::Plan& p, const plan::PlanContext& ctx,
                                                               PartitionMode mode, const AnalyticalOptions& analytical,
                                                               EstimateCache* cache, MemoryTermsCache& terms);

/// Objective ordering. A key compares lexicographically: constraint violated (0/1), then the
/// objective's value (for violators: how close they come: time for a deadline, cost for a
/// budget), then the other metric. Lower is better; a key built from lower bounds of time and
/// cost is a lower bound of the exact key.
struct Key {
  int violated = 0;
  double value = 0;
  double other = 0;
  bool operator<(const Key& o) const {
    if (violated != o.violated) return violated < o.violated;
    if (value != o.value) return value < o.value;
    return other < o.other;
  }
};
Key objective_key(const SearchRequest& req, double time_s, std::optional<double> cost_usd);

/// Fills a candidate's objective fields (purchase, objective time/cost, constraint) from its
/// steps, step time and job outcomes.
void settle(const SearchRequest& req, const plan::PlanContext& ctx, Candidate& c);

/// Lower bounds of the candidate's objective time and cost (compute only, the cheaper
/// purchase option's price when both are allowed).
std::pair<double, std::optional<double>> lower_bound(const SearchRequest& req, const plan::PlanContext& ctx,
                                                     const Candidate& c, double step_time_s);

/// Whole-job outcome of a candidate on one purchase option (closed form); nullopt without a
/// price or when the job model refuses the combination.
std::optional<JobOutcome> job_outcome(const SearchRequest& req, const plan::PlanContext& ctx, const Candidate& c,
                                      plan::Purchase purchase, size_t monte_carlo_runs);

/// Does the request's objective need the job model (spot or both)?
bool needs_job_model(const SearchRequest& req);

/// The first `k` indices of `order`-sorted candidates whose lower-bound key can still beat the
/// k-th best exact key or reach the Pareto frontier of exact points: the branch-and-bound
/// filter of the lazy stages. `exact` gives (key, time, cost) of candidates already exact.
struct Bound {
  Key key;
  double time_s = 0;
  double cost_usd = 0;  // NaN: unknown
};
/// Which of `lower` (lower bounds of candidates not yet exact) can still enter the best
/// `keep` or the Pareto frontier, given the exact points `exact`.
std::vector<bool> may_matter(const std::vector<Bound>& lower, const std::vector<Bound>& exact, size_t keep);

}  // namespace trainplan::planner::detail
