// Benchmarks of the CPU reference backend, so later changes cannot make the oracle unusably
// slow: one full training step (forward, backward, clipping, AdamW) of a tiny and a small
// GPT, and the linear kernel (the GEMM that dominates the step).
//
//   build/benches/trainplan_bench_executor --benchmark_out_format=json
//       --benchmark_out=benches/results/executor-cpu-<date>.json
#include <benchmark/benchmark.h>

#include <memory>

#include <fmt/format.h>

#include "trainplan/executor/data.hpp"
#include "trainplan/executor/gpt.hpp"
#include "trainplan/executor/registry.hpp"

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

}  // namespace

// tiny: the test model (2 layers, hidden 64); small: 4 layers, hidden 256, seq 128.
BENCHMARK_CAPTURE(BM_Executor_CpuStep, tiny, gpt(2, 64, 4, 256, 32), 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Executor_CpuStep, small, gpt(4, 256, 4, 1024, 128), 4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Executor_CpuLinear)
    ->ArgNames({"tokens", "in", "out"})
    ->Args({512, 256, 1024})
    ->Args({512, 1024, 256})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
