// Benchmarks of the planner: the analytical evaluator (plans per second) and a whole search.
#include <benchmark/benchmark.h>

#include "trainplan/planner/analytical.hpp"
#include "trainplan/planner/search.hpp"

using namespace trainplan;

namespace {

plan::Plan gpt3_plan(int count, int dp, int tp, int pp) {
  plan::Plan p;
  p.model = "gpt3-175b";
  p.instance_type = "p4d.24xlarge";
  p.instance_count = count;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.global_batch = 1536;
  p.micro_batch = 1;
  p.recompute = plan::Recompute::selective;
  return p;
}

// One analytical estimate of GPT-3 175B on 128 x p4d (tp 8, pp 8, dp 16), warm cache: the
// per-candidate cost inside a search.
void BM_Planner_AnalyticalEstimate(benchmark::State& state) {
  plan::Plan p = gpt3_plan(128, 16, 8, 8);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "bench");
  plan::validate(p, ctx, "bench");
  auto cache = planner::make_estimate_cache();
  double sink = 0;
  for (auto _ : state) {
    sink += planner::estimate_step(p, ctx, {}, cache.get()).step_time_s;
    benchmark::DoNotOptimize(sink);
  }
  state.counters["plans_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Planner_AnalyticalEstimate)->Unit(benchmark::kMicrosecond);

// The memory model of the same plan (all pipeline stages).
void BM_Planner_MemoryModel(benchmark::State& state) {
  plan::Plan p = gpt3_plan(128, 16, 8, 8);
  auto ctx = plan::resolve(p, hw::Catalog::builtin(), "bench");
  double sink = 0;
  for (auto _ : state) {
    sink += plan::peak_memory(p, ctx).total_bytes();
    benchmark::DoNotOptimize(sink);
  }
  state.counters["plans_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Planner_MemoryModel)->Unit(benchmark::kMicrosecond);

// The README's main job: GPT-3 13B, 300B tokens, every AWS instance type, up to 1024 GPUs.
void BM_Planner_SearchGpt3_13B(benchmark::State& state) {
  planner::SearchRequest req;
  req.model = "gpt3-13b";
  req.tokens = 300e9;
  req.threads = static_cast<int>(state.range(0));
  size_t candidates = 0;
  for (auto _ : state) {
    auto res = planner::search(req, hw::Catalog::builtin());
    candidates = res.enumerated;
    benchmark::DoNotOptimize(res.ranked.data());
  }
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["candidates_per_s"] =
      benchmark::Counter(static_cast<double>(candidates) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Planner_SearchGpt3_13B)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
