// File: trainplan/executor/cuda_benchmarks.hpp
//
// Measurements on a GPU for the simulator's calibration, and the throughput conventions of
// the training benchmarks.
//
// - run_compute_calibration times the executor's own kernels (CUDA events, after warm-up) on
//   the ops of catalog models: every distinct linear GEMM shape, attention, norms,
//   activations, residual adds, embeddings, the loss and AdamW. It returns the simulator's
//   CalibrationTable JSON (sim::CalibrationTable::from_json reads it: linear entries as
//   duration_s per (m, n, k); attention as compute_efficiency against the GPU's dense peak;
//   memory-bound ops and the optimizer as memory_efficiency against its HBM bandwidth, with
//   the FLOPs and bytes of plan::op_cost, so the efficiencies use the simulator's own counts)
//   and every raw measurement.
// - run_nccl_benchmark times collectives from 1 KiB to 1 GiB on a communicator and reports
//   algbw = S / t and busbw by the nccl-tests formulas (all_reduce 2(n-1)/n, all_gather and
//   reduce_scatter (n-1)/n, broadcast 1; S the total buffer size as nccl-tests counts it).
//
//   auto gpu = make_backend("cuda");
//   CalibrationResult r = run_compute_calibration(*gpu, CalibrationOptions{});
//   json::write_file("calibration-H100-SXM5-80GB-bf16.json", r.table);
//
// MFU convention (model_flops_utilization): the model's training FLOPs per step as
// GptModel::training_flops_per_step counts them (6 x tokens x matmul weights incl. the LM head
// + 12 x layers x tokens x seq x heads x head_dim for the full T x T attention square, no
// recomputation), divided by step time and the catalog's dense tensor-core peak of the
// precision (bf16 989 TFLOP/s on H100 SXM).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/communicator.hpp"
#include "trainplan/executor/cuda_backend.hpp"
#include "trainplan/hwprofiles/catalog.hpp"

namespace trainplan::executor {

/// The catalog GPU of a device: the one with the same compute capability whose memory size is
/// closest to `memory_bytes` (H100 80 GB vs H200 141 GB), name words breaking ties; nullptr
/// when no catalog GPU has that compute capability.
const hw::GpuSpec* match_catalog_gpu(const hw::Catalog& catalog, const std::string& device_name,
                                     const std::string& compute_capability, double memory_bytes);
/// match_catalog_gpu for a CUDA device.
const hw::GpuSpec* catalog_gpu_of(const CudaDeviceInfo& device);

/// nccl-tests bus-bandwidth factor: busbw = algbw * factor for `collective` ("all_reduce",
/// "all_gather", "reduce_scatter", "broadcast", "reduce") on `ranks` ranks.
double nccl_bus_factor(std::string_view collective, int ranks);

/// Model FLOPs utilization: flops / (seconds * peak_flops_per_s).
double model_flops_utilization(double flops, double seconds, double peak_flops_per_s);

struct CalibrationOptions {
  /// Catalog decoder models whose ops are measured.
  std::vector<std::string> models = {"gpt2-124m", "gpt2-355m", "gpt3-1.3b", "llama2-7b"};
  int64_t micro_batch = 4;     // samples per measured op (tokens = micro_batch x seq_len)
  int64_t max_seq_len = 2048;  // longer contexts are measured at this length
  int warmup = 3;
  int repeats = 10;
  /// Element type of activations and weights; default: bf16, or f16 where the GPU has none.
  std::optional<DType> dtype;
};

struct CalibrationResult {
  json::Json table;         // sim::CalibrationTable format (schema_version 1)
  json::Json measurements;  // every point: op, shape, FLOPs, bytes, seconds, rates
  std::string gpu;          // catalog GPU name ("" when the device is not in the catalog)
  std::string precision;    // "bf16" / "fp16"
  std::vector<std::string> notes;  // what was left out and why
};

/// Measures on `gpu` (a CUDA backend). Models missing from the catalog are an Error.
CalibrationResult run_compute_calibration(Backend& gpu, const CalibrationOptions& options);

struct NcclBenchOptions {
  int64_t min_bytes = int64_t{1} << 10;
  int64_t max_bytes = int64_t{1} << 30;
  int warmup = 3;
  int iterations = 10;  // timed operations per size (fewer for sizes above 64 MiB)
  std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"};
};

/// Runs on every rank of `comm`'s world at once (each with its backend); every rank gets the
/// table: {"schema_version": 1, "ranks": n, "gpu": ..., "entries": [{"collective", "size_bytes",
/// "duration_s", "algbw_bytes_per_s", "busbw_bytes_per_s"}]} (times are rank 0's).
json::Json run_nccl_benchmark(Communicator& comm, Backend& backend, const NcclBenchOptions& options,
                              const std::string& gpu_name);

}  // namespace trainplan::executor
