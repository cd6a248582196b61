// Benchmarks of the CPU reference backend, so later changes cannot make the oracle unusably
// slow: one full training step (forward, backward, clipping, AdamW) of a tiny and a small
// GPT, hand-assembled (GptModel) and driven by the runtime from a lowered plan (one rank,
// dp 2, tp 2 with sequence parallelism, pp 2 with 1F1B; ranks are threads), and the linear
// kernel (the GEMM that dominates the step). Runtime steps use several threads: their times
// are wall clock, with the CPU time of the whole process alongside.
//
//   build/benches/trainplan_bench_executor --benchmark_out_format=json
//       --benchmark_out=benches/results/executor-cpu-<date>.json
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "trainplan/core/json.hpp"
#include "trainplan/executor/data.hpp"
#include "trainplan/executor/gpt.hpp"
#include "trainplan/executor/registry.hpp"
#include "trainplan/executor/runtime.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/step_program.hpp"

using namespace trainplan;
using namespace trainplan::executor;

namespace {

// GPT-2 conventions (pre-LN, GELU MLP 4h, learned positions, tied head, biases).
GptConfig gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab, int64_t seq_len) {
  GptConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = heads;
  c.ffn_hidden = 4 * hidden;
  c.vocab = vocab;
  c.seq_len = seq_len;
  c.validate();
  return c;
}

void BM_Executor_CpuStep(benchmark::State& state, GptConfig cfg, int64_t batch) {
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  GptModel model(*be, cfg, batch, DType::f32, 1);
  TokenBatch data = make_batch(synthetic_tokens(batch * cfg.seq_len + 1, cfg.vocab, 7), batch, cfg.seq_len, 0);
  const AdamWConfig adamw{};
  for (auto _ : state) {
    double loss = model.train_step(s, data.inputs, data.targets, adamw, 1.0);
    benchmark::DoNotOptimize(loss);
  }
  const double tokens = static_cast<double>(batch * cfg.seq_len);
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["model_flops_per_s"] =
      benchmark::Counter(model.training_flops_per_step(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params"] = static_cast<double>(model.parameters().total_elements());
  state.counters["tokens_per_step"] = tokens;
  state.SetLabel(fmt::format("layers {} hidden {} heads {} vocab {} seq {} batch {}", cfg.layers, cfg.hidden,
                             cfg.heads, cfg.vocab, cfg.seq_len, batch));
}

// out (N, OC) = inp (N, IC) W^T + b, forward only.
void BM_Executor_CpuLinear(benchmark::State& state) {
  const int64_t n = state.range(0), ic = state.range(1), oc = state.range(2);
  std::unique_ptr<Backend> be = make_backend("cpu");
  Stream& s = be->default_stream();
  Tensor x = be->empty(DType::f32, {n, ic}), w = be->empty(DType::f32, {oc, ic}), b = be->empty(DType::f32, {oc});
  Tensor out = be->empty(DType::f32, {n, oc});
  be->fill(s, x, 0.5);
  be->fill(s, w, 0.25);
  be->fill(s, b, 1.0);
  for (auto _ : state) {
    be->linear_forward(s, out, x, w, b);
    be->synchronize(s);
  }
  state.counters["flops_per_s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * ic * oc), benchmark::Counter::kIsIterationInvariantRate);
}

// A GPT-2-style model file (no dropout) in the temp folder, for plans to name.
std::string model_file(const GptConfig& c, const std::string& name) {
  json::Json m;
  m["name"] = name;
  m["family"] = "gpt";
  m["layers"] = c.layers;
  m["hidden"] = c.hidden;
  m["heads"] = c.heads;
  m["vocab"] = c.vocab;
  m["seq_len"] = c.seq_len;
  m["dropout"] = false;
  const std::string path = (std::filesystem::temp_directory_path() / ("trainplan-bench-" + name + ".json")).string();
  json::write_file(path, m);
  return path;
}

struct Split {
  int dp = 1, tp = 1, pp = 1;
  bool sp = false;
};

void BM_Executor_RuntimeStep(benchmark::State& state, GptConfig cfg, std::string name, Split split, int64_t batch) {
  plan::Plan p;
  p.model = model_file(cfg, name);
  p.instance_type = "g5.xlarge";
  p.instance_count = split.dp * split.tp * split.pp;
  p.dp = split.dp, p.tp = split.tp, p.pp = split.pp;
  p.sequence_parallel = split.sp;
  p.global_batch = batch;
  p.micro_batch = split.pp > 1 ? batch / (2 * split.dp) : batch / split.dp;  // pp: 2 micro-batches
  plan::PlanContext ctx = plan::resolve(p, hw::Catalog::builtin(), "bench");
  plan::validate(p, ctx, "bench");
  Runtime rt(p, ctx, plan::lower(p, ctx), RuntimeOptions{});
  double model_flops = 0;
  for (auto _ : state) {
    StepResult r = rt.step();
    benchmark::DoNotOptimize(r.loss);
  }
  model_flops = ctx.graph.training_flops_per_sample() * static_cast<double>(batch);
  const double tokens = static_cast<double>(batch * cfg.seq_len);
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["model_flops_per_s"] = benchmark::Counter(model_flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = p.world_size();
  size_t tasks = 0;
  for (const auto& rp : rt.program().ranks) tasks += rp.tasks.size();
  state.counters["tasks_per_step"] = static_cast<double>(tasks);
  state.SetLabel(fmt::format("{} dp {} tp {}{} pp {} batch {}", name, split.dp, split.tp, split.sp ? " (sp)" : "", split.pp, batch));
}

}  // namespace

// tiny: the test model (2 layers, hidden 64); small: 4 layers, hidden 256, seq 128.
BENCHMARK_CAPTURE(BM_Executor_CpuStep, tiny, gpt(2, 64, 4, 256, 32), 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Executor_CpuStep, small, gpt(4, 256, 4, 1024, 128), 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, tiny_1rank, gpt(2, 64, 4, 256, 32), "tiny", Split{}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, tiny_dp2, gpt(2, 64, 4, 256, 32), "tiny", Split{2, 1, 1, false}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, small_1rank, gpt(4, 256, 4, 1024, 128), "small", Split{}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, small_dp2, gpt(4, 256, 4, 1024, 128), "small", Split{2, 1, 1, false}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, small_tp2_sp, gpt(4, 256, 4, 1024, 128), "small", Split{1, 2, 1, true}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK_CAPTURE(BM_Executor_RuntimeStep, small_pp2, gpt(4, 256, 4, 1024, 128), "small", Split{1, 1, 2, false}, 4)
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(BM_Executor_CpuLinear)
    ->ArgNames({"tokens", "in", "out"})
    ->Args({512, 256, 1024})
    ->Args({512, 1024, 256})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
