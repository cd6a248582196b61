// Simulator speed: the event queue alone, the engine on compute-only programs, and whole
// dp x tp x pp programs on p4d clusters at full and symmetric fidelity.
//
//   build-*/benches/trainplan_bench_simulator --benchmark_out=benches/results/simulator-<date>.json
//   TRAINPLAN_BENCH_LARGE=1 ...   # adds the GPT-3 175B-shaped 1024-GPU step (needs ~5 GB)
//
// Counters: events_per_s (engine + network events processed per second of wall time),
// tasks_per_s, step_time_s (the simulated step), ranks_simulated.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "../tests/simulator/program_builder.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/hwprofiles/cluster.hpp"
#include "trainplan/plan/plan.hpp"
#include "trainplan/simulator/event_queue.hpp"
#include "trainplan/simulator/simulate.hpp"

using namespace trainplan;

namespace {

// Push/pop pairs on a heap holding `state.range(0)` pending events.
void BM_Simulator_EventQueue(benchmark::State& state) {
  sim::EventQueue q;
  Rng rng(1);
  const int64_t standing = state.range(0);
  double now = 0;
  for (int64_t i = 0; i < standing; ++i) q.push(rng.uniform(), 0, static_cast<int32_t>(i));
  std::vector<double> deltas(4096);
  for (double& d : deltas) d = rng.uniform();
  size_t k = 0;
  for (auto _ : state) {
    sim::Event e = q.pop();
    now = e.time_s;
    q.push(now + deltas[k++ & 4095], 0, e.a);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulator_EventQueue)->ArgName("pending")->Arg(1024)->Arg(65536);

// The engine on `ranks` x `tasks` compute tasks, each depending on the previous one of its
// rank (no communication): one event per task plus the setup of the program.
void BM_Simulator_EngineEvents(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int tasks = static_cast<int>(state.range(1));
  testing::ProgramBuilder b(ranks);
  Rng rng(2);
  for (int r = 0; r < ranks; ++r)
    for (int t = 0; t < tasks; ++t) b.compute(r, 1e-6 * (1 + rng.uniform()), t > 0 ? std::vector<int>{t - 1} : std::vector<int>{});
  auto topo = sim::make_switch_topology(ranks, 1e11, 1e-6);
  auto opt = testing::exact_options();
  opt.record_timeline = false;
  int64_t events = 0;
  for (auto _ : state) {
    auto r = sim::simulate_step(b.program(), topo, testing::test_gpu(), opt);
    events += r.stats.events;
    benchmark::DoNotOptimize(r.step_time_s);
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulator_EngineEvents)->ArgNames({"ranks", "tasks"})->Args({64, 4096})->Args({1024, 1024})->Unit(benchmark::kMillisecond);

struct HybridCase {
  testing::HybridSpec spec;
  std::unique_ptr<hw::Cluster> cluster;
  std::unique_ptr<sim::ClusterTopology> topology;
  plan::StepProgram program;
};

// Programs are built once per shape (building is not what is measured); symmetric runs get a
// representatives-only program, as the planner lowers them.
HybridCase& hybrid_case(int dp, int tp, int pp, int layers, int micro_batches, bool reps_only) {
  static std::map<std::tuple<int, int, int, int, int, bool>, std::unique_ptr<HybridCase>> cache;
  auto& slot = cache[{dp, tp, pp, layers, micro_batches, reps_only}];
  if (!slot) {
    slot = std::make_unique<HybridCase>();
    testing::HybridSpec& h = slot->spec;
    h.dp = dp, h.tp = tp, h.pp = pp, h.layers = layers, h.micro_batches = micro_batches;
    // GPT-3 175B-like per-rank figures (hidden 12288, seq 2048, micro-batch 1, tp 8): a layer's
    // forward ~3.7 ms on A100, tp all-reduce 50 MB, pp activation 50 MB, gradients of the
    // stage's 2.7 GB of bf16 parameters per tp rank.
    h.forward_s = 3.7e-3 * layers;
    h.backward_s = 2 * h.forward_s;
    h.tp_bytes = 50e6;
    h.pp_bytes = 50e6;
    h.grad_bytes = 175e9 * 2 / (tp * pp);
    h.optimizer_s = 5e-3;
    h.saved_bytes = 2e9 / micro_batches;
    h.representatives_only = reps_only;
    const auto& cat = hw::Catalog::builtin();
    slot->cluster = std::make_unique<hw::Cluster>(hw::Cluster::build(cat.instance("p4d.24xlarge"), dp * tp * pp / 8, cat));
    slot->topology = std::make_unique<sim::ClusterTopology>(*slot->cluster);
    slot->program = testing::build_hybrid(h);
  }
  return *slot;
}

void BM_Simulator_Hybrid(benchmark::State& state) {
  const bool symmetric = state.range(5) != 0;
  HybridCase& c = hybrid_case(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                              static_cast<int>(state.range(2)), static_cast<int>(state.range(3)),
                              static_cast<int>(state.range(4)), symmetric);
  // The p4d network with the test GPU, whose compute tasks take the seconds the spec gives
  // (exact_options: efficiency 1, no launch gaps); communication keeps its launch cost.
  sim::SimOptions opt = testing::exact_options();
  opt.comm_launch_s = sim::SimOptions{}.comm_launch_s;
  opt.fidelity = symmetric ? sim::Fidelity::symmetric : sim::Fidelity::full;
  opt.record_timeline = false;
  int64_t events = 0, tasks = 0;
  sim::StepResult last;
  for (auto _ : state) {
    last = sim::simulate_step(c.program, *c.topology, testing::test_gpu(), opt);
    events += last.stats.events;
    tasks += last.stats.tasks_simulated;
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["tasks_per_s"] = benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kIsRate);
  state.counters["step_time_s"] = last.step_time_s;
  state.counters["ranks_simulated"] = last.stats.ranks_simulated;
  state.counters["setup_fraction"] = last.stats.wall_s > 0 ? last.stats.setup_wall_s / last.stats.wall_s : 0;
  state.counters["tasks_simulated"] = static_cast<double>(last.stats.tasks_simulated);
}
BENCHMARK(BM_Simulator_Hybrid)
    ->ArgNames({"dp", "tp", "pp", "layers", "mb", "symmetric"})
    ->Args({2, 8, 2, 4, 8, 0})
    ->Args({2, 8, 2, 4, 8, 1})
    ->Args({4, 8, 4, 6, 16, 0})
    ->Args({4, 8, 4, 6, 16, 1})
    ->Unit(benchmark::kMillisecond);

// GPT-3 175B on 1024 A100 (tp 8, pp 8, dp 16, 1F1B, global batch 1536 -> 96 micro-batches of
// 1 per pipeline, 12 layers per stage) and on 4096 (dp 64 -> 24 micro-batches), symmetric
// (representatives-only program) and full. Opt-in: each full program holds 7.6 M tasks.
[[maybe_unused]] const bool kLarge = [] {
  if (std::getenv("TRAINPLAN_BENCH_LARGE") == nullptr) return false;
  for (const char* name : {"BM_Simulator_Gpt3_1024", "BM_Simulator_Gpt3_4096"}) {
    const int dp = name[sizeof("BM_Simulator_Gpt3_") - 1] == '1' ? 16 : 64;
    benchmark::RegisterBenchmark(name, BM_Simulator_Hybrid)
        ->ArgNames({"dp", "tp", "pp", "layers", "mb", "symmetric"})
        ->Args({dp, 8, 8, 12, 1536 / dp, 1})
        ->Args({dp, 8, 8, 12, 1536 / dp, 0})
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

// GPT-3 175B on dp x 8 p4d.24xlarge GPUs (tp 8, pp 8, micro-batch 1, global batch 1536, 1F1B),
// `p`'s other fields as given; resolved and validated.
plan::PlanContext gpt3_175b(plan::Plan& p, int dp) {
  p.model = "gpt3-175b";
  p.instance_type = "p4d.24xlarge";
  p.instance_count = dp * 64 / 8;
  p.dp = dp, p.tp = 8, p.pp = 8;
  p.global_batch = 1536;
  p.micro_batch = 1;
  p.schedule = plan::Schedule::one_f_one_b;
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin());
  plan::validate(p, ctx);
  return ctx;
}

// GPT-3 175B as plan::lower emits it (layer granularity, representatives only: 64 ranks x
// ~33 k tasks) on 128 / 512 p4d.24xlarge, symmetric fidelity: the planner's configuration.
// Lowering is outside the timed loop. Opt-in with TRAINPLAN_BENCH_LARGE (lowering takes ~1 s).
void BM_Simulator_Gpt3Lowered(benchmark::State& state) {
  plan::Plan p;
  p.recompute = plan::Recompute::full;
  const plan::PlanContext ctx = gpt3_175b(p, static_cast<int>(state.range(0)));
  plan::LowerOptions lo;
  lo.granularity = plan::Granularity::layer;
  lo.representatives_only = true;
  const plan::StepProgram program = plan::lower(p, ctx, lo);
  sim::SimOptions opt = sim::options_for(p);
  opt.fidelity = sim::Fidelity::symmetric;
  opt.record_timeline = false;
  int64_t events = 0, tasks = 0;
  sim::StepResult last;
  for (auto _ : state) {
    last = sim::simulate_step(program, ctx.cluster, opt);
    events += last.stats.events;
    tasks += last.stats.tasks_simulated;
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["tasks_per_s"] = benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kIsRate);
  state.counters["step_time_s"] = last.step_time_s;
  state.counters["tasks_simulated"] = static_cast<double>(last.stats.tasks_simulated);
  state.counters["setup_fraction"] = last.stats.wall_s > 0 ? last.stats.setup_wall_s / last.stats.wall_s : 0;
}

// Lowering GPT-3 175B on 1024 GPUs (tp 8, pp 8, dp 16, layer granularity, one program per
// symmetry class): the planner's per-candidate cost before simulation (was a wall-clock check
// in tests/plan/test_lower.cpp).
void BM_Simulator_Gpt3Lowering(benchmark::State& state) {
  plan::Plan p;
  const plan::PlanContext ctx = gpt3_175b(p, 16);
  int64_t tasks = 0;
  for (auto _ : state) {
    const plan::StepProgram prog = plan::lower(p, ctx, {.granularity = plan::Granularity::layer, .representatives_only = true});
    for (const auto& rp : prog.ranks) tasks += static_cast<int64_t>(rp.tasks.size());
  }
  state.counters["tasks_per_s"] = benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Simulator_Gpt3Lowering)->Unit(benchmark::kMillisecond)->Iterations(1);

[[maybe_unused]] const bool kLowered = [] {
  if (std::getenv("TRAINPLAN_BENCH_LARGE") == nullptr) return false;
  benchmark::RegisterBenchmark("BM_Simulator_Gpt3Lowered", BM_Simulator_Gpt3Lowered)
      ->ArgName("dp")
      ->Arg(16)
      ->Arg(64)
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
