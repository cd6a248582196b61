// Benchmarks of the CUDA backend (Google Benchmark), and the calibration writer.
//
//   trainplan_bench_executor_cuda --benchmark_filter=Gpt2Step     GPT-2 124M / 355M training steps
//   trainplan_bench_executor_cuda --calibrate=DIR [--quick]       calibration files for the simulator:
//       DIR/calibration-<gpu>-<precision>.json   (sim::CalibrationTable)
//       DIR/microbench-<gpu>.json                (every measured point, the NCCL busbw table)
//
// Exits 77 (skipped) on a machine without a GPU. Counters: tokens_per_s, mfu (model FLOPs of
// GptModel::training_flops_per_step over the catalog's dense bf16/fp16 peak), TFLOPs, GBps.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "trainplan/core/error.hpp"
#include "trainplan/core/json.hpp"
#include "trainplan/executor/cuda_backend.hpp"
#include "trainplan/executor/cuda_benchmarks.hpp"
#include "trainplan/executor/cuda_mixed_precision.hpp"
#include "trainplan/executor/data.hpp"
#include "trainplan/executor/gpt.hpp"
#include "trainplan/executor/nccl_communicator.hpp"
#include "trainplan/executor/registry.hpp"
#include "trainplan/models/model.hpp"

namespace {

using namespace trainplan;
using namespace trainplan::executor;

DType half_of(Backend& be) { return be.supports(DType::bf16) ? DType::bf16 : DType::f16; }
Precision precision_of(DType t) { return t == DType::bf16 ? Precision::bf16 : Precision::fp16; }

double dense_peak(Backend& be) {
  const hw::GpuSpec* g = catalog_gpu_of(cuda_device_info(cuda_backend_device(be)));
  const Precision p = precision_of(half_of(be));
  return g && g->supports(p) ? g->peak_flops_per_s(p) : 0.0;
}

// One mixed-precision training step of GPT-2 (bf16 weights and activations, f32 masters and
// AdamW, global-norm clipping 1.0), batch x 1024 tokens of synthetic data.
void BM_ExecutorCuda_Gpt2Step(benchmark::State& state) {
  const std::string model = state.range(0) == 124 ? "gpt2-124m" : "gpt2-355m";
  const int64_t batch = state.range(1);
  auto be = make_backend("cuda");
  Stream& s = be->default_stream();
  const GptConfig cfg = GptConfig::from_spec(models::ModelCatalog::builtin().spec(model));
  GptModel gpt(*be, cfg, batch, half_of(*be), 1);
  MixedPrecisionOptimizer opt(*be, gpt.parameters());
  const std::vector<int32_t> tokens = synthetic_tokens(batch * cfg.seq_len + 1, cfg.vocab, 3);
  const TokenBatch b = make_batch(tokens, batch, cfg.seq_len, 0);
  const AdamWConfig adamw{6e-4, 0.9, 0.95, 1e-8, 0.1};
  auto step = [&] {
    gpt.parameters().zero_grads(s);
    const double loss = gpt.forward(s, b.inputs, b.targets);
    gpt.backward(s);
    opt.step(s, adamw, 1.0);
    return loss;
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: cuBLASLt heuristics, workspaces, pool
  be->reset_peak();
  double loss = 0;
  for (auto _ : state) loss = step();
  const double tokens_per_step = static_cast<double>(batch * cfg.seq_len);
  const double peak = dense_peak(*be);
  state.counters["tokens_per_s"] = benchmark::Counter(tokens_per_step, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0)
    state.counters["mfu"] =
        benchmark::Counter(gpt.training_flops_per_step() / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["model_TFLOP_per_step"] = gpt.training_flops_per_step() / 1e12;
  state.counters["peak_memory_GB"] =
      static_cast<double>(be->peak_allocated_bytes() + cuda_workspace_bytes(*be)) / 1e9;
  state.counters["loss"] = loss;
  state.SetLabel(fmt::format("{} batch {} seq {} {}", model, batch, cfg.seq_len, dtype_name(half_of(*be))));
}
BENCHMARK(BM_ExecutorCuda_Gpt2Step)
    ->ArgNames({"params_M", "batch"})
    ->Args({124, 8})
    ->Args({355, 8})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

// out (m, n) = inp (m, k) W^T in the GPU's 16-bit type.
void BM_ExecutorCuda_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto be = make_backend("cuda");
  Stream& s = be->default_stream();
  const DType t = half_of(*be);
  Tensor inp = be->zeros(s, t, {m, k}), w = be->zeros(s, t, {n, k}), out = be->empty(t, {m, n});
  auto start = be->create_event(), stop = be->create_event();
  for (auto _ : state) {
    be->record(*start, s);
    be->linear_forward(s, out, inp, w, Tensor());
    be->record(*stop, s);
    state.SetIterationTime(be->elapsed_s(*start, *stop));
  }
  state.counters["TFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(m * n) * static_cast<double>(k) / 1e12,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ExecutorCuda_Linear)
    ->ArgNames({"m", "n", "k"})
    ->Args({8192, 2304, 768})   // GPT-2 124M qkv, batch 8 x 1024
    ->Args({8192, 3072, 768})   // GPT-2 124M fc
    ->Args({8192, 768, 3072})   // GPT-2 124M proj
    ->Args({8192, 50257, 768})  // GPT-2 LM head
    ->Args({8192, 50304, 768})  // GPT-2 LM head, vocabulary padded to a multiple of 128 (GptModel on a GPU)
    ->Args({8192, 4096, 1024})  // GPT-2 355M fc
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Forward + backward of causal attention, batch 8 x 1024 tokens, 12 heads of 64 (GPT-2 124M).
void BM_ExecutorCuda_Attention(benchmark::State& state) {
  CudaBackendOptions o;
  // 0: fused (CUDA cores), 1: unfused (cuBLAS, T x T), 2: tensor_core (wmma flash kernel).
  constexpr CudaAttention kModes[] = {CudaAttention::fused, CudaAttention::unfused, CudaAttention::tensor_core};
  o.attention = kModes[state.range(0)];
  auto be = make_cuda_backend(o);
  Stream& s = be->default_stream();
  const DType t = half_of(*be);
  const AttentionShape sh{8, 1024, 12, 12, 64, true};
  Tensor qkv = be->zeros(s, t, {sh.tokens(), sh.qkv_cols()}), out = be->empty(t, {sh.tokens(), sh.out_cols()});
  Tensor lse = be->empty(DType::f32, {sh.batch, sh.heads, sh.seq}), dqkv = be->empty(t, {sh.tokens(), sh.qkv_cols()});
  be->fill(s, qkv, 0.01);
  auto start = be->create_event(), stop = be->create_event();
  for (auto _ : state) {
    be->record(*start, s);
    be->attention_forward(s, out, lse, qkv, sh);
    be->attention_backward(s, dqkv, out, qkv, out, lse, sh);
    be->record(*stop, s);
    state.SetIterationTime(be->elapsed_s(*start, *stop));
  }
  // Model FLOPs of the full square (forward 4 T^2 H D per sample, backward twice that).
  const double flops = 12.0 * static_cast<double>(sh.batch * sh.seq * sh.seq * sh.heads * sh.head_dim);
  state.counters["TFLOPs"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cuda_attention_name(o.attention)));
}
BENCHMARK(BM_ExecutorCuda_Attention)
    ->ArgNames({"kernel"})
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// LayerNorm forward over 8192 x C rows in the 16-bit type: bytes read + written per second.
void BM_ExecutorCuda_LayerNorm(benchmark::State& state) {
  const int64_t n = 8192, c = state.range(0);
  auto be = make_backend("cuda");
  Stream& s = be->default_stream();
  const DType t = half_of(*be);
  Tensor inp = be->zeros(s, t, {n, c}), out = be->empty(t, {n, c}), w = be->zeros(s, t, {c});
  Tensor mean = be->empty(DType::f32, {n}), rstd = be->empty(DType::f32, {n});
  auto start = be->create_event(), stop = be->create_event();
  for (auto _ : state) {
    be->record(*start, s);
    be->layernorm_forward(s, out, mean, rstd, inp, w, w, 1e-5);
    be->record(*stop, s);
    state.SetIterationTime(be->elapsed_s(*start, *stop));
  }
  const double bytes = 2.0 * static_cast<double>(n * c) * static_cast<double>(dtype_size_bytes(t));
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ExecutorCuda_LayerNorm)->ArgNames({"C"})->Arg(768)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);

std::string file_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

// --calibrate=DIR: compute calibration on GPU 0, NCCL table over every GPU (one thread each).
int calibrate(const std::string& dir, bool quick) {
  std::filesystem::create_directories(dir);
  auto be = make_backend("cuda");
  const CudaDeviceInfo info = cuda_device_info(cuda_backend_device(*be));
  CalibrationOptions o;
  if (quick) {
    o.models = {"gpt2-124m"};
    o.max_seq_len = 256;
    o.repeats = 3;
  }
  const CalibrationResult r = run_compute_calibration(*be, o);
  const std::string gpu = r.gpu.empty() ? file_safe(info.name) : r.gpu;
  const std::string table_path = fmt::format("{}/calibration-{}-{}.json", dir, gpu, r.precision);
  json::write_file(table_path, r.table);
  const int n = std::min(cuda_device_count(), 8);
  json::Json nccl;
  run_rank_threads(n, [&](int rank, Rendezvous& store) {
    auto rb = make_backend("cuda");
    auto comm = make_nccl_communicator(store, rank, n, *rb, rb->default_stream());
    NcclBenchOptions no;
    if (quick) no.max_bytes = int64_t{1} << 24;
    json::Json t = run_nccl_benchmark(*comm, *rb, no, gpu);
    if (rank == 0) nccl = std::move(t);
  });
  json::Json all = r.measurements;
  all["nccl"] = std::move(nccl);
  const std::string points_path = fmt::format("{}/microbench-{}.json", dir, gpu);
  json::write_file(points_path, all);
  std::printf("wrote %s (%zu entries) and %s\n", table_path.c_str(), r.table["entries"].size(), points_path.c_str());
  for (const std::string& note : r.notes) std::printf("note: %s\n", note.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (trainplan::executor::cuda_device_count() == 0) {
    std::printf("no CUDA device: skipped (%s)\n", trainplan::executor::cuda_unavailable_reason().c_str());
    return 77;
  }
  std::string calibrate_dir;
  bool quick = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--calibrate=", 0) == 0)
      calibrate_dir = a.substr(std::strlen("--calibrate="));
    else if (a == "--quick")
      quick = true;
    else
      rest.push_back(argv[i]);
  }
  try {
    if (!calibrate_dir.empty()) return calibrate(calibrate_dir, quick);
  } catch (const trainplan::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
