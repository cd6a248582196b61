// The search's memos give what computing afresh gives: the memory-limited splits kept by their
// whole partition problem (--off memo computes each one again) and the analytical estimate's
// group bandwidths and dp patterns, shared among layouts whose groups are the same (a fresh
// cache per plan shares nothing).
#include <memory>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

namespace {

std::string plan_json(const planner::Candidate& c) { return json::dump(plan::to_json(c.plan)); }

// Every ranked candidate the same, in the same order, with the same numbers.
void check_same_ranking(const planner::SearchResult& a, const planner::SearchResult& b) {
  REQUIRE(a.ranked.size() == b.ranked.size());
  REQUIRE(!a.ranked.empty());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    INFO("rank " << i + 1);
    REQUIRE(plan_json(a.ranked[i]) == plan_json(b.ranked[i]));
    CHECK(a.ranked[i].step.step_time_s == b.ranked[i].step.step_time_s);
    CHECK(a.ranked[i].memory.total_bytes() == b.ranked[i].memory.total_bytes());
    CHECK(a.ranked[i].objective_time_s == b.ranked[i].objective_time_s);
  }
  CHECK(a.pareto == b.pareto);
}

// The plan's estimate through `shared` is the estimate with no cache at all.
void check_same_estimate(const plan::Plan& p, const plan::PlanContext& ctx, planner::EstimateCache& shared) {
  const auto warm = planner::estimate_step(p, ctx, {}, &shared);
  const auto fresh = planner::estimate_step(p, ctx, {}, nullptr);
  CHECK(warm.step_time_s == fresh.step_time_s);
  CHECK(warm.compute_s == fresh.compute_s);
  for (size_t k = 0; k < warm.exposed_comm_by_purpose_s.size(); ++k)
    CHECK(warm.exposed_comm_by_purpose_s[k] == fresh.exposed_comm_by_purpose_s[k]);
}

}  // namespace

TEST_CASE("search: the memo of memory-limited splits ranks exactly as computing every split afresh", "[planner]") {
  struct Case {
    std::string model;
    std::vector<std::string> types;
    int max_gpus;
  };
  // Models too large for one GPU on small-memory GPUs, so pipelined splits are redone for memory
  // (PartitionMode::time) many times; and a memory-balanced search (PartitionMode::memory), where
  // every pipelined candidate's split goes through the memo.
  for (const Case& k : {Case{"gpt3-2.7b", {"g5.12xlarge", "p3.16xlarge"}, 64}, Case{"llama2-7b", {"g5.48xlarge", "p3dn.24xlarge"}, 32}}) {
    for (auto mode : {planner::PartitionMode::time, planner::PartitionMode::memory}) {
      INFO(k.model << (mode == planner::PartitionMode::time ? " time-balanced" : " memory-balanced"));
      planner::SearchRequest req;
      req.model = k.model;
      req.tokens = 10e9;
      req.instance_types = k.types;
      req.max_gpus = k.max_gpus;
      req.partition = mode;
      req.threads = 2;
      const auto memo = planner::search(req, hw::Catalog::builtin());
      req.stages.memo = false;
      const auto afresh = planner::search(req, hw::Catalog::builtin());
      if (mode == planner::PartitionMode::time) CHECK(memo.counts.repartitioned > 0);  // the memo was used
      CHECK(memo.counts.repartitioned == afresh.counts.repartitioned);
      check_same_ranking(memo, afresh);
    }
  }
}

TEST_CASE("analytical: one cache shared by every layout of a cluster estimates as a fresh cache per plan", "[planner]") {
  // 4 x p4d.24xlarge (32 GPUs): every dp x tp x pp x cp with tp inside a node, ZeRO 0, 1 and 3,
  // ring and hierarchical; layouts that share tp groups (or dp groups, or pp pairs) share
  // their ring bandwidths and patterns in the shared cache, never in a fresh one.
  plan::Plan base;
  base.model = "gpt3-2.7b";
  base.instance_type = "p4d.24xlarge";
  base.instance_count = 4;
  base.dp = 32;
  base.global_batch = 256;
  base.micro_batch = 1;
  base.seq_len = 4096;
  const auto ctx = plan::resolve(base, hw::Catalog::builtin(), "test");
  const int units = static_cast<int>(ctx.graph.units().size());
  auto shared = planner::make_estimate_cache();
  size_t compared = 0;
  for (int cp : {1, 2})
    for (int tp : {1, 2, 4, 8})
      for (int pp : {1, 2, 4})
        for (int zero : {0, 1, 3})
          for (auto alg : {plan::DpAlgorithm::ring, plan::DpAlgorithm::hierarchical}) {
            if (tp * pp * cp > 32) continue;
            plan::Plan p = base;
            p.tp = tp;
            p.pp = pp;
            p.cp = cp;
            p.dp = 32 / (tp * pp * cp);
            if (zero > 0 && (p.dp * cp == 1 || (zero == 3 && pp > 1))) continue;
            p.zero_stage = zero;
            p.dp_algorithm = alg;
            p.num_micro_batches = p.global_batch / (p.micro_batch * p.dp);
            p.stages = plan::even_stages(units, pp);
            INFO("dp " << p.dp << " tp " << tp << " pp " << pp << " cp " << cp << " zero " << zero);
            check_same_estimate(p, ctx, *shared);
            ++compared;
          }
  CHECK(compared > 80);
}

TEST_CASE("analytical: unit costs shared by every cluster size of an instance type estimate as a fresh cache per cluster", "[planner]") {
  // The unit-cost memo names the instance type, not the cluster, where tp x cp stays inside a
  // node: 1 to 16 p4d.24xlarge (and g5.48xlarge, PCIe) estimated through one cache, largest
  // first, give what each cluster's own fresh cache gives; tp across nodes (tp 16) keeps the
  // cluster in the key. The contexts outlive the cache's use (as a search's do): it keys some
  // terms by the cluster's address.
  auto shared = planner::make_estimate_cache();
  std::vector<std::unique_ptr<plan::PlanContext>> contexts;
  models::ModelSpec spec = models::resolve_model("gpt3-2.7b");
  models::set_seq_len(spec, 2048, "test");
  const models::ModelGraph graph = models::build_graph(spec);  // one graph for every cluster, as the search has
  size_t compared = 0;
  for (const std::string type : {"p4d.24xlarge", "g5.48xlarge"})
    for (int count : {16, 4, 2, 1}) {
      plan::Plan base;
      base.model = "gpt3-2.7b";
      base.instance_type = type;
      base.instance_count = count;
      base.dp = count * 8;
      base.global_batch = 512;
      base.micro_batch = 1;
      base.seq_len = 2048;
      const auto& ctx = *contexts.emplace_back(std::make_unique<plan::PlanContext>(plan::resolve(base, hw::Catalog::builtin(), spec, graph, "test")));
      const int units = static_cast<int>(ctx.graph.units().size());
      for (int tp : {1, 2, 8, 16})
        for (int mb : {1, 2})
          for (bool sp : {false, true}) {
            const int gpus = count * 8;
            if (tp > gpus || (sp && tp == 1)) continue;
            plan::Plan p = base;
            p.tp = tp;
            p.dp = gpus / tp;
            p.micro_batch = mb;
            p.sequence_parallel = sp;
            if (p.global_batch % (mb * p.dp)) continue;
            p.num_micro_batches = p.global_batch / (mb * p.dp);
            p.stages = plan::even_stages(units, 1);
            INFO(type << " x " << count << " tp " << tp << " mb " << mb << " sp " << sp);
            check_same_estimate(p, ctx, *shared);
            ++compared;
          }
    }
  CHECK(compared > 40);
}
