// Plan search: objectives and constraints against brute force over the evaluated candidates,
// the Pareto frontier against brute-force dominance, the lazy stages against evaluating
// everything, the partitioner inside the search, cancellation, simulation and the
// explanation of the winner.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "test_support.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

namespace {

planner::SearchRequest small_request() {
  planner::SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 2e9;
  req.instance_types = {"p3.8xlarge", "g4dn.12xlarge", "p3.16xlarge"};
  req.max_gpus = 16;
  req.threads = 2;
  return req;
}

std::string candidate_json(const planner::Candidate& c) { return json::dump(plan::to_json(c.plan)); }

// Brute-force Pareto set over (objective time, objective cost) of every ranked candidate;
// of several candidates at the same point, the best ranked stands for it.
std::set<size_t> brute_pareto(const planner::SearchResult& res) {
  std::set<size_t> out;
  for (size_t i = 0; i < res.ranked.size(); ++i) {
    const auto& a = res.ranked[i];
    if (!a.objective_cost_usd) continue;
    bool dominated = false;
    for (size_t j = 0; j < res.ranked.size() && !dominated; ++j) {
      const auto& b = res.ranked[j];
      if (j == i || !b.objective_cost_usd) continue;
      const bool same = b.objective_time_s == a.objective_time_s && *b.objective_cost_usd == *a.objective_cost_usd;
      dominated = (b.objective_time_s <= a.objective_time_s && *b.objective_cost_usd <= *a.objective_cost_usd && !same) ||
                  (same && j < i);
    }
    if (!dominated) out.insert(i);
  }
  return out;
}

}  // namespace

TEST_CASE("search: each objective picks what brute force over the candidates picks", "[planner]") {
  auto req = small_request();
  req.stages.lazy = false;  // every variant evaluated: brute force sees the whole space
  const auto all = planner::search(req, hw::Catalog::builtin());
  REQUIRE(all.ranked.size() > 50);
  // Brute force over the evaluated candidates.
  std::vector<double> times;
  for (const auto& c : all.ranked) times.push_back(c.time_to_train_s);
  std::sort(times.begin(), times.end());
  const double deadline = times[times.size() / 4];
  const auto fastest = std::min_element(all.ranked.begin(), all.ranked.end(), [](const auto& a, const auto& b) {
    return a.time_to_train_s < b.time_to_train_s;
  });
  const auto cheapest = std::min_element(all.ranked.begin(), all.ranked.end(), [](const auto& a, const auto& b) {
    return *a.cost_on_demand_usd < *b.cost_on_demand_usd;
  });
  double cheapest_in_time = 1e300;
  for (const auto& c : all.ranked)
    if (c.time_to_train_s <= deadline) cheapest_in_time = std::min(cheapest_in_time, *c.cost_on_demand_usd);
  const double budget = (*cheapest->cost_on_demand_usd + *fastest->cost_on_demand_usd) / 2;
  double fastest_in_budget = 1e300;
  for (const auto& c : all.ranked)
    if (*c.cost_on_demand_usd <= budget) fastest_in_budget = std::min(fastest_in_budget, c.time_to_train_s);

  CHECK(all.ranked.front().time_to_train_s == fastest->time_to_train_s);
  req.objective = planner::Objective::cost;
  CHECK(*planner::search(req, hw::Catalog::builtin()).ranked.front().cost_on_demand_usd == *cheapest->cost_on_demand_usd);
  req.objective = planner::Objective::cost_under_deadline;
  req.deadline_s = deadline;
  auto by_deadline = planner::search(req, hw::Catalog::builtin());
  CHECK(*by_deadline.ranked.front().cost_on_demand_usd == cheapest_in_time);
  CHECK(by_deadline.ranked.front().time_to_train_s <= deadline);
  CHECK(by_deadline.ranked.front().meets_constraints);
  req.objective = planner::Objective::time_under_budget;
  req.budget_usd = budget;
  auto by_budget = planner::search(req, hw::Catalog::builtin());
  CHECK(by_budget.ranked.front().time_to_train_s == fastest_in_budget);
  CHECK(*by_budget.ranked.front().cost_on_demand_usd <= budget);
  // An impossible deadline: nothing meets it, the fastest comes first and says so.
  req.objective = planner::Objective::cost_under_deadline;
  req.deadline_s = fastest->time_to_train_s / 2;
  auto impossible = planner::search(req, hw::Catalog::builtin());
  CHECK_FALSE(impossible.ranked.front().meets_constraints);
  CHECK(impossible.ranked.front().time_to_train_s == fastest->time_to_train_s);
  // Objectives that need a limit say so.
  req.deadline_s = 0;
  REQUIRE_ERROR_CONTAINS(planner::search(req, hw::Catalog::builtin()), "--deadline");
}

TEST_CASE("search: the Pareto frontier equals brute-force dominance over every candidate", "[planner]") {
  auto req = small_request();
  req.objective = planner::Objective::cost;
  const auto res = planner::search(req, hw::Catalog::builtin());
  const std::set<size_t> got(res.pareto.begin(), res.pareto.end());
  CHECK(got == brute_pareto(res));
  REQUIRE(res.pareto.size() >= 2);
  // Fastest first, and costs fall along the frontier.
  for (size_t k = 1; k < res.pareto.size(); ++k) {
    const auto& a = res.ranked[res.pareto[k - 1]];
    const auto& b = res.ranked[res.pareto[k]];
    CHECK(a.objective_time_s <= b.objective_time_s);
    CHECK(*a.objective_cost_usd >= *b.objective_cost_usd);
  }
  // The frontier spans instance types: the cheapest end and the fastest end differ here.
  std::set<std::string> types;
  for (size_t i : res.pareto) types.insert(res.ranked[i].plan.instance_type);
  CHECK(types.size() >= 2);
}

TEST_CASE("search: the lazy stages give the same best plans and frontier as evaluating every variant", "[planner]") {
  for (auto objective : {planner::Objective::time, planner::Objective::cost}) {
    auto req = small_request();
    req.objective = objective;
    req.bucket_sizes_bytes = {25e6, 100e6};
    req.exact_top = 20;
    const auto lazy = planner::search(req, hw::Catalog::builtin());
    req.stages.lazy = false;
    const auto full = planner::search(req, hw::Catalog::builtin());
    INFO("objective " << planner::objective_name(objective));
    CHECK(lazy.counts.expanded < full.counts.expanded);
    CHECK(lazy.counts.expansion_skipped > 0);
    REQUIRE(lazy.ranked.size() >= 20);
    for (size_t i = 0; i < 20; ++i) CHECK(candidate_json(lazy.ranked[i]) == candidate_json(full.ranked[i]));
    std::set<std::string> a, b;
    for (size_t i : lazy.pareto) a.insert(candidate_json(lazy.ranked[i]));
    for (size_t i : full.pareto) b.insert(candidate_json(full.ranked[i]));
    CHECK(a == b);
  }
}

TEST_CASE("search: results do not depend on the thread count, simulation and spot included", "[planner]") {
  auto req = small_request();
  req.instance_types = {"g4dn.12xlarge", "p3.8xlarge"};
  req.purchase = plan::Purchase::spot;
  req.objective = planner::Objective::cost;
  req.simulate_top = 3;
  req.spot_runs = 50;
  req.spot_rows = 3;
  req.threads = 1;
  const auto a = planner::search(req, hw::Catalog::builtin());
  req.threads = 3;
  const auto b = planner::search(req, hw::Catalog::builtin());
  REQUIRE(a.ranked.size() == b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    CHECK(candidate_json(a.ranked[i]) == candidate_json(b.ranked[i]));
    CHECK(a.ranked[i].objective_time_s == b.ranked[i].objective_time_s);
    CHECK(a.ranked[i].objective_cost_usd == b.ranked[i].objective_cost_usd);
  }
  CHECK(a.pareto == b.pareto);
  CHECK(a.rank_correlation == b.rank_correlation);
  REQUIRE(a.ranked.front().spot_job);
  REQUIRE(a.ranked.front().spot_job->cost_usd);
  CHECK(a.ranked.front().spot_job->cost_usd->p90 == b.ranked.front().spot_job->cost_usd->p90);
}

TEST_CASE("search: spot ranks by the job model's expected cost, which includes interruptions", "[planner]") {
  auto req = small_request();
  req.objective = planner::Objective::cost;
  req.purchase = plan::Purchase::spot;
  req.exact_top = 10;
  const auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(res.ranked.size() > 10);
  CHECK(res.counts.job_evaluations > 0);
  CHECK(res.counts.job_evaluations < res.ranked.size());  // branch and bound, not every candidate
  for (size_t i = 0; i < 10; ++i) {
    const auto& c = res.ranked[i];
    REQUIRE(c.spot_job);
    CHECK(c.purchase == plan::Purchase::spot);
    CHECK(*c.objective_cost_usd == c.spot_job->expected_cost_usd);
    // The whole job costs at least its compute at the spot price, and takes at least as long.
    CHECK(c.spot_job->expected_cost_usd >= *c.cost_spot_usd);
    CHECK(c.spot_job->expected_time_s >= c.time_to_train_s);
    if (i > 0) CHECK(*res.ranked[i - 1].objective_cost_usd <= *c.objective_cost_usd);
  }
  // Both purchase options: each candidate takes the cheaper whole job.
  req.both_purchases = true;
  const auto both = planner::search(req, hw::Catalog::builtin());
  for (size_t i = 0; i < 5; ++i) {
    const auto& c = both.ranked[i];
    REQUIRE(c.spot_job);
    REQUIRE(c.on_demand_job);
    CHECK(*c.objective_cost_usd == std::min(c.spot_job->expected_cost_usd, c.on_demand_job->expected_cost_usd));
  }
  CHECK(*both.ranked.front().objective_cost_usd <= *res.ranked.front().objective_cost_usd);
}

TEST_CASE("search: the partitioner beats or matches the even split on pipelined plans", "[planner]") {
  // GPT-2 124M's head costs ~2 blocks: with pipelines the even split leaves the last stage slow.
  planner::SearchRequest req;
  req.model = "gpt2-124m";
  req.tokens = 1e9;
  req.instance_types = {"p3.16xlarge"};
  req.instance_counts = {1};
  req.zero_stages = {0};
  req.micro_batches = {4};
  req.threads = 2;
  const auto part = planner::search(req, hw::Catalog::builtin());
  req.stages.partition = false;
  const auto even = planner::search(req, hw::Catalog::builtin());
  // Same families on both sides; compare every pipelined family's best time.
  auto best_by_layout = [](const planner::SearchResult& r) {
    std::map<std::string, double> out;
    for (const auto& c : r.ranked) {
      if (c.plan.pp == 1) continue;
      const std::string k = fmt::format("{}/{}/{}x{} {} {}", c.plan.dp, c.plan.tp, c.plan.pp, c.plan.vp,
                                        plan::recompute_name(c.plan.recompute), c.plan.sequence_parallel);
      auto it = out.find(k);
      if (it == out.end() || c.step.step_time_s < it->second) out[k] = c.step.step_time_s;
    }
    return out;
  };
  const auto a = best_by_layout(part), b = best_by_layout(even);
  REQUIRE(!a.empty());
  size_t faster = 0;
  for (const auto& [k, t] : a) {
    if (!b.count(k)) continue;
    INFO(k);
    CHECK(t <= b.at(k) * 1.01);  // the split minimises the slowest stage; dp overlap may move a little
    if (t < b.at(k) * 0.99) ++faster;
  }
  CHECK(faster > 0);
  bool uneven = false;
  for (const auto& c : part.ranked) {
    if (c.plan.pp == 1) continue;
    const auto even_split = plan::even_stages(14, c.plan.pp * c.plan.vp);
    for (size_t s = 0; s < even_split.size(); ++s)
      if (c.plan.stages[s].last_unit != even_split[s].last_unit) uneven = true;
  }
  CHECK(uneven);
}

TEST_CASE("search: a cancelled search stops and ranks only what it evaluated", "[planner]") {
  std::atomic<bool> cancel{true};
  auto req = small_request();
  req.cancel = &cancel;
  const auto none = planner::search(req, hw::Catalog::builtin());
  CHECK(none.cancelled);
  CHECK(none.ranked.empty());
  // Cancel a large search shortly after it starts: it returns early with valid candidates.
  cancel = false;
  planner::SearchRequest big;
  big.model = "gpt3-13b";
  big.tokens = 300e9;
  big.threads = 2;
  big.cancel = &cancel;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto part = planner::search(big, hw::Catalog::builtin());
  stopper.join();
  CHECK(part.cancelled);  // stopped by the flag (how fast is not a unit test's business)
  for (const auto& c : part.ranked) {
    CHECK(c.fits);
    CHECK(std::isfinite(c.step.step_time_s));
  }
}

TEST_CASE("search: simulating the best K re-ranks them by the simulator and reports Spearman", "[planner]") {
  auto req = small_request();
  req.instance_types = {"p3.8xlarge"};
  req.max_gpus = 8;
  req.simulate_top = 4;
  const auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(res.counts.simulated == 4);
  std::vector<double> est, sim;
  for (size_t i = 0; i < 4; ++i) {
    const auto& c = res.ranked[i];
    REQUIRE(c.simulated);
    CHECK(c.simulated->step_time_s > 0);
    CHECK(c.time_to_train_s == Approx(c.steps * c.simulated->step_time_s).epsilon(1e-12));
    if (i > 0) CHECK(res.ranked[i - 1].objective_time_s <= c.objective_time_s);
    est.push_back(c.step.step_time_s);
    sim.push_back(c.simulated->step_time_s);
  }
  CHECK_FALSE(res.ranked[4].simulated);
  REQUIRE(res.rank_correlation);
  CHECK(*res.rank_correlation == planner::spearman(est, sim).value());
  // Analytical and simulated step times agree within 25% on these plans.
  for (size_t i = 0; i < 4; ++i) CHECK(sim[i] == Approx(est[i]).epsilon(0.25));
}

TEST_CASE("search: Spearman correlation matches the closed form, ties included", "[planner]") {
  CHECK(planner::spearman({1, 2, 3, 4}, {10, 20, 30, 40}).value() == Approx(1.0));
  CHECK(planner::spearman({1, 2, 3, 4}, {4, 3, 2, 1}).value() == Approx(-1.0));
  // No ties: 1 - 6 sum d^2 / (n (n^2 - 1)); ranks (1,2,3,4,5) vs (2,1,4,3,5): sum d^2 = 4.
  CHECK(planner::spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}).value() == Approx(1.0 - 6.0 * 4 / (5 * 24)));
  // Ties get average ranks: (1, 2.5, 2.5, 4) against (1, 2, 3, 4): Pearson of the ranks.
  const double r = planner::spearman({1, 2, 2, 3}, {1, 2, 3, 4}).value();
  CHECK(r == Approx(4.5 / std::sqrt(4.5 * 5.0)));
  CHECK_FALSE(planner::spearman({1, 1, 1}, {1, 2, 3}));
  CHECK_FALSE(planner::spearman({1}, {2}));
}

TEST_CASE("search: --explain names the terms that separate the winner from the runner-up", "[planner]") {
  auto req = small_request();
  const auto res = planner::search(req, hw::Catalog::builtin());
  REQUIRE(res.ranked.size() >= 2);
  // Compare the winner with the best plan of another instance type: a real difference.
  size_t other = 1;
  while (other < res.ranked.size() && res.ranked[other].plan.instance_type == res.ranked[0].plan.instance_type) ++other;
  REQUIRE(other < res.ranked.size());
  const auto e = planner::explain(res.ranked[0], res.ranked[other]);
  auto row = [&](const std::string& what) {
    for (const auto& r : e.rows)
      if (r.what == what) return r;
    FAIL("no row " << what);
    return planner::Explanation::Row{};
  };
  CHECK(row("step time (estimate)").winner == res.ranked[0].step.step_time_s);
  CHECK(row("time to train").winner < row("time to train").runner_up);
  CHECK(row("memory headroom per GPU").winner ==
        Approx(res.ranked[0].memory.capacity_bytes - res.ranked[0].memory.total_bytes()));
  // The per-step parts of the estimate add up to the step time.
  const auto& s = res.ranked[0].step;
  double parts = row("compute (without recomputation)").winner + row("recomputation").winner + row("pipeline bubble").winner +
                 row("optimizer").winner + row("host (first issue, optimizer sync)").winner;
  for (const auto& r : e.rows)
    if (r.what.rfind("exposed ", 0) == 0) parts += r.winner;
  CHECK(parts == Approx(s.step_time_s).epsilon(1e-9));
  CHECK(e.summary.find("sooner") != std::string::npos);
  CHECK(e.summary.find(res.ranked[other].plan.instance_type) != std::string::npos);
}

TEST_CASE("search: a search for one framework ranks only plans its exporter accepts", "[planner]") {
  for (auto target : {planner::ExportTarget::deepspeed, planner::ExportTarget::megatron, planner::ExportTarget::sagemaker}) {
    planner::SearchRequest req;
    req.model = "gpt3-1.3b";
    req.tokens = 5e9;
    req.instance_types = {"p4d.24xlarge", "g5.12xlarge"};
    req.max_gpus = 16;
    req.threads = 2;
    req.framework = target;
    const auto res = planner::search(req, hw::Catalog::builtin());
    INFO("framework " << planner::export_target_name(target));
    REQUIRE(!res.ranked.empty());
    // DeepSpeed cannot run Megatron-style sequence parallelism; the others run every plan of this space.
    if (target == planner::ExportTarget::deepspeed)
      CHECK(res.dropped.count(std::string(planner::export_target_name(target)) + " cannot run it") == 1);
    for (size_t i = 0; i < std::min<size_t>(res.ranked.size(), 40); ++i) {
      plan::Plan p = res.ranked[i].plan;
      p.predicted = {{"time_to_train_s", res.ranked[i].objective_time_s}};
      auto ctx = plan::resolve(p, hw::Catalog::builtin(), "ranked");
      INFO("plan " << json::dump(plan::to_json(p)));
      CHECK_NOTHROW(planner::export_plan(p, ctx, target));
    }
    if (target == planner::ExportTarget::sagemaker) CHECK(res.ranked.front().plan.platform == plan::Platform::sagemaker);
  }
  // Without the restriction the same search ranks plans DeepSpeed refuses (sequence parallelism).
  planner::SearchRequest req;
  req.model = "gpt3-1.3b";
  req.tokens = 5e9;
  req.instance_types = {"p4d.24xlarge"};
  req.max_gpus = 16;
  const auto all = planner::search(req, hw::Catalog::builtin());
  size_t refused = 0;
  for (size_t i = 0; i < std::min<size_t>(all.ranked.size(), 40); ++i) {
    plan::Plan p = all.ranked[i].plan;
    auto ctx = plan::resolve(p, hw::Catalog::builtin(), "ranked");
    refused += planner::export_refusal(p, ctx, planner::ExportTarget::deepspeed) ? 1 : 0;
  }
  CHECK(refused > 0);
}
