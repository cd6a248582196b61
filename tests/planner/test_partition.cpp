// Automated partitioning: oracles are brute force over every split, the even split of uniform
// layers, plan::stage_memory (memory terms) and the analytical estimate (unit times).
#include <algorithm>
#include <cmath>

#include "plan_fixture.hpp"
#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/partition.hpp"

using namespace trainplan;

namespace {

planner::PartitionProblem uniform_problem(std::vector<double> times, int pp, int vp = 1) {
  planner::PartitionProblem p;
  p.pp = pp;
  p.vp = vp;
  const size_t n = times.size();
  p.unit_time_s = std::move(times);
  p.static_bytes.assign(n, 1.0);
  p.kept_bytes.assign(n, 1.0);
  p.excursion_bytes.assign(n, 0.0);
  p.fixed_bytes.assign(static_cast<size_t>(pp), 0.0);
  p.in_flight.assign(static_cast<size_t>(pp), 1.0);
  return p;
}

// Half the units rise above their kept bytes during backward (recomputation).
double trial_excursion(Rng& rng) { return rng.uniform() < 0.5 ? 0.0 : 2.0 * rng.uniform(); }

// A random problem with memory terms that make some splits fit and others not.
planner::PartitionProblem random_problem(Rng& rng, int n, int pp, int vp, bool limited) {
  planner::PartitionProblem p;
  p.pp = pp;
  p.vp = vp;
  for (int u = 0; u < n; ++u) {
    p.unit_time_s.push_back(0.1 + rng.uniform());
    p.static_bytes.push_back(1.0 + 3.0 * rng.uniform());
    p.kept_bytes.push_back(0.5 + rng.uniform());
    p.excursion_bytes.push_back(trial_excursion(rng));
  }
  std::vector<double> peak;
  for (int u = 0; u < n; ++u) peak.push_back(2.0 * rng.uniform());
  p.peak_bytes.push_back(peak);
  for (int r = 0; r < pp; ++r) {
    p.fixed_bytes.push_back(1.0);
    p.in_flight.push_back(static_cast<double>(pp - r));  // 1F1B: earlier ranks hold more
  }
  p.last_bytes = 2.0 * rng.uniform();
  p.last_without_first_bytes = rng.uniform();
  if (limited) {
    // Between the best and the worst possible: about the total over the ranks.
    double total = 0;
    for (int u = 0; u < n; ++u) total += p.static_bytes[static_cast<size_t>(u)] + 2.0 * p.kept_bytes[static_cast<size_t>(u)];
    p.capacity_bytes = total / pp * (0.9 + 0.8 * rng.uniform());
  }
  return p;
}

std::vector<int> sizes(const planner::Partition& part) {
  std::vector<int> out;
  for (const auto& a : part.stages) out.push_back(a.last_unit - a.first_unit + 1);
  return out;
}

// The shared fixture, under the name these tests use.
testing::ResolvedPlan resolved(const std::string& model, const std::string& inst, int count, int dp, int tp, int pp, int64_t gb,
                               int64_t mb) {
  return testing::resolved_plan(model, inst, count, dp, tp, pp, gb, mb);
}

}  // namespace

TEST_CASE("partition: uniform layers split evenly", "[planner]") {
  for (auto [n, pp] : std::vector<std::pair<int, int>>{{12, 4}, {24, 8}, {16, 2}, {7, 7}}) {
    auto part = planner::partition_units(uniform_problem(std::vector<double>(static_cast<size_t>(n), 0.25), pp), planner::Balance::time);
    INFO("n = " << n << ", pp = " << pp);
    for (int s : sizes(part)) CHECK(s == n / pp);
    CHECK(part.max_time_s() == Approx(0.25 * n / pp));
    CHECK(part.fits);
  }
  // Virtual stages: 16 uniform units over 4 ranks x 2 chunks, 2 units per chunk.
  auto part = planner::partition_units(uniform_problem(std::vector<double>(16, 1.0), 4, 2), planner::Balance::time);
  for (int s : sizes(part)) CHECK(s == 2);
  for (double t : part.rank_time_s) CHECK(t == Approx(4.0));
}

TEST_CASE("partition: an embedding-heavy model gives its first and last stages fewer layers", "[planner]") {
  // 16 blocks of 1 s; the embedding and the head cost 2.5 blocks each; 4 stages.
  std::vector<double> t(18, 1.0);
  t.front() = 2.5;
  t.back() = 2.5;
  auto part = planner::partition_units(uniform_problem(t, 4), planner::Balance::time);
  const auto s = sizes(part);
  const int first_blocks = s.front() - 1, last_blocks = s.back() - 1;
  CHECK(first_blocks < s[1]);
  CHECK(last_blocks < s[2]);
  CHECK(first_blocks + last_blocks + s[1] + s[2] == 16);
  // The bottleneck is the brute-force optimum, and better than the even split's.
  CHECK(part.max_time_s() == Approx(planner::brute_force_partition(uniform_problem(t, 4), planner::Balance::time).max_time_s()));
  auto even = planner::evaluate_partition(uniform_problem(t, 4), plan::even_stages(18, 4));
  CHECK(part.max_time_s() < even.max_time_s());

  // A real model: GPT-2 124M's LM head and loss (50257 x 768) cost ~2 blocks, so with 4
  // stages the last stage gets fewer of the 12 blocks than the middle ones.
  auto r = resolved("gpt2-124m", "p3.8xlarge", 1, 1, 1, 4, 16, 1);
  const auto times = planner::unit_times_s(r.plan, r.ctx);
  REQUIRE(times.size() == 14);
  CHECK(times.back() > 1.5 * times[1]);
  auto real = planner::partition_units(planner::make_partition_problem(r.plan, r.ctx, times), planner::Balance::time);
  const auto rs = sizes(real);
  CHECK(rs.back() - 1 < rs[1]);
  CHECK(real.max_time_s() <= planner::evaluate_partition(planner::make_partition_problem(r.plan, r.ctx, times), r.plan.stages).max_time_s());
}

TEST_CASE("partition: the min-max split equals brute force on small random cases", "[planner]") {
  Rng rng(20261122);
  int with_memory_limit_fitting = 0, not_fitting = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int pp = 2 + static_cast<int>(rng.below(3));
    const int n = pp + static_cast<int>(rng.below(static_cast<uint64_t>(10 - pp)));
    const bool limited = trial % 3 != 0;
    auto prob = random_problem(rng, n, pp, 1, limited);
    INFO("trial " << trial << ": n = " << n << ", pp = " << pp << ", limited = " << limited);
    const auto got = planner::partition_units(prob, planner::Balance::time);
    const auto want = planner::brute_force_partition(prob, planner::Balance::time);
    REQUIRE(got.fits == want.fits);
    if (want.fits) {
      CHECK(got.max_time_s() == Approx(want.max_time_s()).epsilon(1e-12));
      if (limited) ++with_memory_limit_fitting;
    } else {
      // Nothing fits: both give the smallest largest memory.
      CHECK(got.max_memory_bytes() == Approx(want.max_memory_bytes()).epsilon(1e-9));
      ++not_fitting;
    }
    // What partition_units reports is what the split costs.
    const auto again = planner::evaluate_partition(prob, got.stages);
    CHECK(again.max_time_s() == got.max_time_s());
    CHECK(again.max_memory_bytes() == got.max_memory_bytes());
  }
  // The random cases exercise both regimes.
  CHECK(with_memory_limit_fitting > 30);
  CHECK(not_fitting > 10);
}

TEST_CASE("partition: memory balance equals brute force on small random cases", "[planner]") {
  Rng rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    const int pp = 2 + static_cast<int>(rng.below(3));
    const int n = pp + static_cast<int>(rng.below(static_cast<uint64_t>(10 - pp)));
    auto prob = random_problem(rng, n, pp, 1, false);
    INFO("trial " << trial);
    const auto got = planner::partition_units(prob, planner::Balance::memory);
    const auto want = planner::brute_force_partition(prob, planner::Balance::memory);
    CHECK(got.max_memory_bytes() == Approx(want.max_memory_bytes()).epsilon(1e-9));
  }
}

TEST_CASE("partition: interleaved virtual stages equal brute force on small cases", "[planner]") {
  // Up to 4096 splits partition_units enumerates them (partition.hpp).
  Rng rng(5);
  int trials = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int pp = 2, vp = 2 + static_cast<int>(rng.below(2));
    const int n = pp * vp + static_cast<int>(rng.below(5));
    auto prob = random_problem(rng, n, pp, vp, trial % 2 == 0);
    const auto want = planner::brute_force_partition(prob, planner::Balance::time);
    const auto got = planner::partition_units(prob, planner::Balance::time);
    INFO("trial " << trial << ": n = " << n << ", vp = " << vp);
    REQUIRE(got.fits == want.fits);
    if (want.fits) CHECK(got.max_time_s() == Approx(want.max_time_s()).epsilon(1e-12));
    ++trials;
  }
  CHECK(trials == 100);
}

TEST_CASE("partition: interleaved local search stays within 10% of brute force on medium random cases", "[planner]") {
  // Beyond 4096 splits the interleaved split is a local search (partition.hpp). On random unit
  // costs it is within 1% of the optimum on average; the worst case seen is under 10%.
  Rng rng(5);
  int trials = 0;
  double worst = 1.0, sum = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int pp = 2 + static_cast<int>(rng.below(2));
    const int vp = pp == 2 ? 3 + static_cast<int>(rng.below(2)) : 2;
    const int n = (pp * vp == 6 ? 17 : 16) + static_cast<int>(rng.below(3));
    auto prob = random_problem(rng, n, pp, vp, trial % 2 == 0);
    const auto want = planner::brute_force_partition(prob, planner::Balance::time);
    if (!want.fits) continue;
    const auto got = planner::partition_units(prob, planner::Balance::time);
    INFO("trial " << trial << ": n = " << n << ", pp = " << pp << ", vp = " << vp);
    REQUIRE(got.fits);
    const double ratio = got.max_time_s() / want.max_time_s();
    CHECK(ratio >= 1.0 - 1e-12);
    worst = std::max(worst, ratio);
    sum += ratio;
    ++trials;
  }
  INFO(trials << " cases, mean ratio " << sum / trials << ", worst " << worst);
  CHECK(trials >= 25);
  CHECK(sum / trials < 1.02);
  CHECK(worst < 1.10);
  // GPT-like units (uniform blocks, heavier embedding and head): the local search is optimal.
  std::vector<double> t(26, 1.0);
  t.front() = 1.6;
  t.back() = 2.4;
  auto prob = uniform_problem(t, 4, 2);
  CHECK(planner::partition_units(prob, planner::Balance::time).max_time_s() ==
        Approx(planner::brute_force_partition(prob, planner::Balance::time).max_time_s()));
}

TEST_CASE("partition: the memory terms reproduce plan::stage_memory for any split", "[planner]") {
  Rng rng(11);
  struct Case {
    std::string model, inst;
    int count, dp, tp, pp, vp, zero;
    plan::Recompute rc;
    bool sp;
    plan::Schedule sched;
    plan::AttentionImpl attention = plan::AttentionImpl::flash;
    int cp = 1;
  };
  const std::vector<Case> cases = {
      {"gpt2-124m", "p3.8xlarge", 1, 2, 1, 2, 1, 0, plan::Recompute::none, false, plan::Schedule::one_f_one_b},
      {"gpt2-124m", "p3.16xlarge", 1, 2, 2, 2, 1, 1, plan::Recompute::selective, true, plan::Schedule::one_f_one_b},
      {"gpt2-124m", "p3.16xlarge", 1, 2, 2, 2, 1, 1, plan::Recompute::selective, true, plan::Schedule::one_f_one_b,
       plan::AttentionImpl::unfused},
      {"gpt3-1.3b", "p4d.24xlarge", 1, 2, 2, 2, 2, 1, plan::Recompute::full, false, plan::Schedule::interleaved_1f1b},
      {"gpt3-1.3b", "p4d.24xlarge", 1, 8, 1, 1, 1, 3, plan::Recompute::full, false, plan::Schedule::one_f_one_b},
      {"gpt3-1.3b", "p4d.24xlarge", 1, 1, 2, 4, 1, 0, plan::Recompute::none, true, plan::Schedule::gpipe,
       plan::AttentionImpl::unfused},
      {"llama2-7b", "p4d.24xlarge", 2, 4, 2, 2, 1, 1, plan::Recompute::selective, true, plan::Schedule::one_f_one_b},
      // Context parallelism: 1/cp of the activations plus the gathered K, V of the layer running.
      {"llama2-7b", "p4d.24xlarge", 2, 2, 2, 2, 1, 1, plan::Recompute::selective, true, plan::Schedule::one_f_one_b,
       plan::AttentionImpl::unfused, 2},
      {"llama3-8b", "p5.48xlarge", 2, 2, 1, 4, 1, 0, plan::Recompute::none, false, plan::Schedule::gpipe, plan::AttentionImpl::flash, 2},
      {"gpt3-1.3b", "p4d.24xlarge", 2, 2, 2, 2, 1, 1, plan::Recompute::full, true, plan::Schedule::one_f_one_b,
       plan::AttentionImpl::flash, 2},
      {"gpt3-1.3b", "p4d.24xlarge", 2, 1, 2, 2, 2, 1, plan::Recompute::full, false, plan::Schedule::interleaved_1f1b,
       plan::AttentionImpl::flash, 4},
  };
  for (const auto& k : cases) {
    plan::Plan p;
    p.model = k.model;
    p.instance_type = k.inst;
    p.instance_count = k.count;
    p.dp = k.dp, p.tp = k.tp, p.pp = k.pp, p.vp = k.vp, p.cp = k.cp;
    p.zero_stage = k.zero;
    p.recompute = k.rc;
    p.sequence_parallel = k.sp;
    p.schedule = k.sched;
    p.attention = k.attention;
    p.global_batch = 8 * k.dp;
    p.micro_batch = 2;
    auto ctx = plan::resolve(p, hw::Catalog::builtin(), "test");
    plan::validate(p, ctx, "test");
    const int n = static_cast<int>(ctx.graph.units().size());
    auto prob = planner::make_partition_problem(p, ctx, std::vector<double>(static_cast<size_t>(n), 1.0));
    for (int trial = 0; trial < 20; ++trial) {
      // A random split into pp * vp non-empty ranges.
      const int S = p.pp * p.vp;
      std::vector<int> cuts;
      while (static_cast<int>(cuts.size()) < S - 1) {
        const int c = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(n - 1)));
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.insert(cuts.begin(), 0);
      cuts.push_back(n);
      p.stages.clear();
      for (size_t c = 0; c + 1 < cuts.size(); ++c) p.stages.push_back({cuts[c], cuts[c + 1] - 1});
      const auto part = planner::evaluate_partition(prob, p.stages);
      const auto fast = planner::memory_per_rank(p, ctx, planner::unit_memory_terms(p, ctx));
      // GPipe and 1F1B: exact (the terms are the replay's per-unit profile, recomputation and
      // cp transients included).
      const bool exact = k.vp == 1;
      for (int r = 0; r < p.pp; ++r) {
        INFO(k.model << " zero " << k.zero << " rank " << r << " vp " << k.vp << " cp " << k.cp << " attention "
                     << plan::attention_impl_name(k.attention));
        const double want = plan::stage_memory(p, ctx, r).total_bytes();
        const double got = part.rank_memory_bytes[static_cast<size_t>(r)];
        CHECK(fast[static_cast<size_t>(r)].total_bytes() == Approx(got).epsilon(1e-12));
        if (exact) {
          CHECK(got == Approx(want).epsilon(1e-12));
        } else {
          // Interleaved chunks are treated as one range (partition.hpp).
          CHECK(got == Approx(want).epsilon(0.10));
        }
      }
      if (exact) CHECK(part.fits == plan::peak_memory(p, ctx).fits());
    }
  }
}

TEST_CASE("partition: unit times add up to the analytical compute and tensor-parallel time", "[planner]") {
  for (auto rc : {plan::Recompute::none, plan::Recompute::selective, plan::Recompute::full}) {
    auto r = resolved("gpt3-1.3b", "p4d.24xlarge", 1, 2, 4, 1, 16, 2);
    r.plan.recompute = rc;
    r.plan.sequence_parallel = rc == plan::Recompute::selective;
    const auto t = planner::unit_times_s(r.plan, r.ctx);
    double sum = 0;
    for (double v : t) sum += v;
    const auto e = planner::estimate_step(r.plan, r.ctx);
    const double m = static_cast<double>(r.plan.num_micro_batches);
    CHECK(m * sum == Approx(e.compute_s + e.exposed_comm_s(plan::CommPurpose::tp)).epsilon(1e-12));
  }
}

TEST_CASE("partition: when nothing fits the result is the memory-balanced split, marked as not fitting", "[planner]") {
  auto prob = uniform_problem(std::vector<double>(8, 1.0), 2);
  prob.in_flight = {2.0, 1.0};
  prob.capacity_bytes = 5.0;  // rank 0 needs 3 bytes per unit, rank 1 2: the best split needs 10
  auto part = planner::partition_units(prob, planner::Balance::time);
  CHECK_FALSE(part.fits);
  CHECK(part.max_memory_bytes() == Approx(planner::brute_force_partition(prob, planner::Balance::memory).max_memory_bytes()));
  // Rank 0 holds two micro-batches of activations: it gets fewer units.
  CHECK(sizes(part)[0] < sizes(part)[1]);
  REQUIRE_ERROR_CONTAINS(planner::partition_units(uniform_problem(std::vector<double>(3, 1.0), 2, 2), planner::Balance::time),
                         "cannot fill 4 pipeline stages");
}
