// File: trainplan/simulator/compute_model.hpp
//
// How long a compute task takes on one GPU: a roofline with efficiencies,
//
//   duration = max(flops / (peak_flops * eff_compute), mem_bytes / (hbm_bw * eff_memory))
//              + kernel_overhead * kernels
//
// where peak_flops is the tensor-core peak of the training precision for matmul-like ops and
// the fp32 CUDA-core peak for the rest, eff_compute comes from the op kind and the GEMM shape
// (large GEMMs reach the measured maximum achievable matmul FLOP/s; small ones lose to wave
// quantization and short K loops), and a calibration table of measured efficiencies by op kind
// and shape bucket overrides the defaults. Every default and its source is listed in
// simulator/README.md ("Compute model").
//
//   sim::ComputeModel m(gpu_spec, Precision::bf16);
//   double t = m.duration_s(task);                 // seconds at full speed
//
//   sim::CalibrationTable cal = sim::CalibrationTable::read_file("a100-bf16.json");
//   sim::ComputeModel calibrated(gpu_spec, Precision::bf16, {}, &cal);
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "trainplan/core/json.hpp"
#include "trainplan/core/precision.hpp"
#include "trainplan/hwprofiles/catalog.hpp"
#include "trainplan/plan/step_program.hpp"

namespace trainplan::sim {

/// Op kind key of the calibration table: models::OpKind as int, or one of these.
inline constexpr int kOpKindAny = -1;        // matches every op kind (a GPU-wide default)
inline constexpr int kOpKindOptimizer = -2;  // the optimizer step (Phase::optimizer)

/// One measured point. Exactly one of the three numbers is set.
inline constexpr int kPhaseAny = -1, kPhaseForward = 0, kPhaseBackward = 1;

struct CalibrationEntry {
  int op_kind = kOpKindAny;
  /// GEMM shape the measurement was taken at; 0 = applies to every shape of the op kind.
  int64_t m = 0, n = 0, k = 0;
  /// The pass it was measured in: kPhaseAny, or kPhaseForward / kPhaseBackward (a backward
  /// pass runs other loops than the forward: dX and dW products, recomputed activations).
  int phase = -1;
  std::optional<double> compute_efficiency;  // achieved / peak FLOP/s, (0, 1]
  std::optional<double> memory_efficiency;   // achieved / peak HBM bytes/s, (0, 1]
  std::optional<double> duration_s;          // one forward GEMM (2mnk FLOPs) of this shape
};

/// What the table says for one (op kind, shape, phase): each number from the most specific
/// entry that has it: (kind, shape bucket, phase), (kind, shape bucket, any phase), (kind, any
/// shape, phase), (kind, any shape, any phase), then ("any", any shape, any phase).
struct CalibrationLookup {
  std::optional<double> compute_efficiency;
  std::optional<double> memory_efficiency;
  std::optional<double> achieved_flops_per_s;  // from duration_s entries: 2mnk / duration
};

/// Measured efficiencies by (op kind, GEMM shape bucket). A shape falls in the bucket
/// (floor(log2 m), floor(log2 n), floor(log2 k)); numbers of one kind in one bucket are
/// averaged. Format:
///
///   {"schema_version": 1, "gpu": "A100-SXM4-40GB", "precision": "bf16",
///    "source": "executor microbenchmarks, 2026-10-02",
///    "entries": [
///      {"op_kind": "linear", "m": 8192, "n": 12288, "k": 12288, "compute_efficiency": 0.84},
///      {"op_kind": "linear", "m": 4096, "n": 1536, "k": 12288, "duration_s": 1.9e-4},
///      {"op_kind": "attention", "compute_efficiency": 0.55},
///      {"op_kind": "layernorm", "memory_efficiency": 0.72},
///      {"op_kind": "optimizer", "memory_efficiency": 0.65},
///      {"op_kind": "activation", "phase": "backward", "memory_efficiency": 0.31}]}
///
/// op_kind is a models::OpKind name ("linear", "attention", ...), "optimizer" or "any".
/// m, n, k are all given or all left out; duration_s needs them (one 2mnk-FLOP GEMM).
class CalibrationTable {
 public:
  CalibrationTable() = default;
  static CalibrationTable from_json(const json::Json& doc, const std::string& name);
  static CalibrationTable read_file(const std::string& path);
  json::Json to_json() const;

  /// Adds a point; throws Error if not exactly one number is set, it is out of range, or a
  /// duration has no shape.
  void add(const CalibrationEntry& entry);
  const std::vector<CalibrationEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

  std::string gpu;        // GPU the measurements are for ("" = any)
  std::optional<Precision> precision;
  std::string source;

  CalibrationLookup find(int op_kind, int64_t m, int64_t n, int64_t k, int phase = kPhaseAny) const;

 private:
  struct Mean {
    double sum = 0;
    int count = 0;
    void add(double v) { sum += v, ++count; }
    std::optional<double> value() const { return count ? std::optional<double>(sum / count) : std::nullopt; }
  };
  struct Cell {
    Mean compute, memory, achieved;
  };
  using Key = std::tuple<int, int, int, int, int>;  // op kind, log2 buckets of m, n, k (-1: any), phase
  std::vector<CalibrationEntry> entries_;      // as added
  std::map<Key, Cell> cells_;
};

/// Op kind names of the calibration table: models::op_kind_name, "optimizer", "any".
std::string calibration_op_kind_name(int op_kind);
/// Inverse of calibration_op_kind_name; nullopt for unknown names.
std::optional<int> parse_calibration_op_kind(std::string_view name);
std::vector<std::string> calibration_op_kind_names();

/// Shape bucket of one GEMM dimension: floor(log2(x)) for x >= 1, -1 for x <= 0.
int shape_bucket(int64_t x);

/// Op kinds ComputeModelOptions::kernel_scale covers (every models::OpKind value is below it).
inline constexpr int kMaxOpKinds = 32;
constexpr std::array<double, kMaxOpKinds> unit_kernel_scale() {
  std::array<double, kMaxOpKinds> a{};
  for (double& v : a) v = 1.0;
  return a;
}

/// Defaults of the compute model; 0 means "the physically derived default" documented in
/// simulator/README.md.
struct ComputeModelOptions {
  /// Fraction of the dense tensor-core peak a large GEMM reaches (MAMF / peak). 0: the GPU's
  /// measured MAMF from the hardware catalog (A100 0.869, H100 0.803 in bf16), else 0.80.
  double gemm_efficiency = 0;
  /// Multiplies the large-GEMM efficiency (after the default above is resolved; the product is
  /// capped at 1): what a software stack reaches relative to the MAMF microbenchmark, as
  /// `trainplan calibrate` fits it from measured step times (calibration/published.hpp). Shape
  /// effects and the attention efficiency derived from the GEMM efficiency follow it. In (0, 5].
  double gemm_efficiency_scale = 1;
  /// Attention fraction of peak. 0: from the per-head GEMM shape (MAMF x K-loop ramp of the
  /// head dimension), or 0.60 for attention tasks without a shape.
  double attention_efficiency = 0;
  /// Fraction of HBM bandwidth memory-bound kernels reach. 0: 0.80.
  double memory_efficiency = 0;
  /// Fraction of the fp32 CUDA-core peak elementwise arithmetic reaches. 0: 0.50.
  double vector_efficiency = 0;
  /// Apply wave quantization and the K-loop ramp to GEMMs with a known shape.
  bool gemm_shape_effects = true;
  /// GPU time per kernel beyond its roofline time (launch gap); -1: 2 us (a plan's software
  /// stack sets its kernel_gap here when unset: with_software()).
  double kernel_overhead_s = -1;
  /// Kernels per op of each models::OpKind as a multiple of the op's own count (plan::OpCost
  /// kernels_fwd / kernels_bwd): a software stack's fusions (0 = fused into a neighbour). Both
  /// the launch gaps above and the host's issue cost (SimOptions::host) count these kernels.
  std::array<double, kMaxOpKinds> kernel_scale = unit_kernel_scale();
  /// Fused attention runs the flash-attn 2 package's kernels (a software stack's
  /// "fused_attention": "flash-attn-2"): FlashAttention-2's rates on Hopper too.
  bool flash_attn2 = false;
};

/// `options` with a software stack's fusions (kernel_scale of its op classes) and, where
/// kernel_overhead_s is unset (-1), its GPU-side kernel gap. A stack without a name (a catalog
/// without stacks) leaves the options as they are.
ComputeModelOptions with_software(ComputeModelOptions options, const hw::SoftwareStack& stack);

class ComputeModel {
 public:
  /// Throws Error when the GPU has no peak for `precision`, or when `calibration` names
  /// another GPU or precision.
  ComputeModel(const hw::GpuSpec& gpu, Precision precision, const ComputeModelOptions& options = {},
               const CalibrationTable* calibration = nullptr);

  /// Seconds a compute task takes at full speed (no jitter, no overlap slowdown). With the
  /// program's op costs (plan::StepProgram::op_costs, indexed by op id), a task is timed op
  /// by op (its `op`, or each of its merged `ops`) and the kernels' times are summed: a merged
  /// task is as long as its kernels run one after another, whatever their bounds. Without
  /// them (hand-built programs), the task's own flops / mem_bytes / GEMM shape are used.
  /// `sms_taken`: SMs other kernels hold meanwhile (NCCL's channels during an overlapped
  /// collective, see sm_share_slowdown()); 0 = the whole GPU.
  double duration_s(const plan::Task& task, const std::vector<plan::OpCost>* op_costs = nullptr, int sms_taken = 0) const;

  /// Seconds one op's kernels take in a phase (forward, recompute = forward, backward):
  /// max(FLOPs / (peak x efficiency), main-kernel bytes / (HBM x efficiency)) + separate
  /// memory-bound passes / (HBM x efficiency) + launch gaps. Fused (flash) attention runs at the
  /// published kernel level of its GPU generation and pass, on the key-loop ramp of the keys a
  /// query visits (a set attention_efficiency or a calibration entry wins); unfused attention's batched GEMMs (K = head_dim) at the GEMM shape
  /// efficiency. Under fp8 training only ops with OpCost::fp8_gemm (the block linears) run at
  /// the FP8 peak and FP8 GEMM share; attention (Transformer Engine keeps dot-product attention
  /// in bf16 by default) and the other matmuls (LM head) at the bf16 peak and bf16 share.
  /// `sms_taken` > 0: the op's compute-bound part runs on the SMs left (sm_share_slowdown());
  /// its memory-bound part is unchanged (no model of NCCL's share of HBM bandwidth).
  double op_duration_s(const plan::OpCost& cost, plan::Phase phase, int sms_taken = 0) const;

  /// How much longer the compute-bound part of a kernel runs when `sms_taken` of the GPU's SMs
  /// are held by other kernels (an overlapped NCCL collective: one thread block per channel,
  /// resident for the whole collective). A GEMM of T = ceil(m/128) x ceil(n/128) output tiles
  /// runs ceil(T / (SMs - c)) waves instead of ceil(T / SMs): ratio of the two (132 tiles on
  /// 132 SMs beside 24 channels: 2). Without a shape (m, n or k <= 0, shape effects off) the
  /// many-wave limit SMs / (SMs - c). 1 when `sms_taken` <= 0; at most SMs - 1 are taken.
  double sm_share_slowdown(int64_t m, int64_t n, int64_t k, int sms_taken) const;
  int sm_count() const { return sm_count_; }

  /// Compute efficiency (fraction of the relevant peak) for an op kind and GEMM shape.
  double compute_efficiency(int op_kind, int64_t m, int64_t n, int64_t k, int phase = kPhaseAny) const;
  /// Memory efficiency (fraction of HBM bandwidth) for an op kind.
  double memory_efficiency(int op_kind, int phase = kPhaseAny) const;
  /// Peak FLOP/s used for an op kind: tensor peak of the precision for matmul-like kinds,
  /// fp32 peak otherwise.
  double peak_flops_per_s(int op_kind) const;
  double tensor_peak_flops_per_s() const { return tensor_peak_; }
  double kernel_overhead_s() const { return kernel_overhead_s_; }
  /// Kernels one op launches in a phase (recompute = forward), after the stack's fusions
  /// (ComputeModelOptions::kernel_scale).
  double op_kernels(const plan::OpCost& c, plan::Phase phase) const;
  /// Kernels a compute task launches: the sum over its op or merged ops with the program's op
  /// costs; otherwise one kernel per merged op (at least one), as duration_s() counts them.
  double task_kernels(const plan::Task& task, const std::vector<plan::OpCost>* op_costs = nullptr) const;

  /// Whether an op kind runs on tensor cores (linear, patch_embed, conv2d, attention).
  static bool is_matmul_like(int op_kind);

 private:
  /// Wave quantization x K ramp of an M x N x K GEMM (simulator/README.md, "Compute model"),
  /// relative to the 8192^3 GEMM the GPU's measured rate refers to; `half_precision`: a 16-bit
  /// GEMM under fp8 (its ramp is the 16-bit peak's).
  double gemm_shape_factor(int64_t m, int64_t n, int64_t k, bool half_precision = false) const;
  double raw_shape_factor(int64_t m, int64_t n, int64_t k, double k_ramp) const;
  double half_precision_share(const plan::OpCost& c) const;
  double attention_gemm_factor(int64_t m, int64_t n, int64_t k) const;
  std::optional<double> calibrated_efficiency(int op_kind, int64_t m, int64_t n, int64_t k, int phase) const;
  /// Fused attention's share of the tensor peak from published kernel benchmarks, the key-loop
  /// ramp and the implementation (simulator/README.md, "Compute model").
  double fused_attention_efficiency(const plan::OpCost& cost, bool backward) const;

  hw::GpuSpec gpu_;
  Precision precision_;
  const CalibrationTable* calibration_;
  double efficiency_scale_ = 1;   // ComputeModelOptions::gemm_efficiency_scale
  bool hopper_or_later_ = false;  // compute capability 9.0 or later (FlashAttention-3 class kernels)
  bool flash_attn2_ = false;      // ComputeModelOptions::flash_attn2
  double tensor_peak_ = 0;
  /// The 16-bit tensor peak and GEMM share for matmuls that stay in 16 bits under fp8 (equal to
  /// tensor_peak_ / gemm_efficiency_ otherwise).
  double half_peak_ = 0;
  double half_gemm_efficiency_ = 0;
  double vector_peak_ = 0;
  double gemm_efficiency_ = 0;
  /// K ramp (in elements of K) at the precision's tensor peak and at the 16-bit one, and the
  /// shape factors of the 8192^3 reference GEMM they are taken relative to.
  double k_ramp_ = 0, half_k_ramp_ = 0, shape_reference_ = 1, half_shape_reference_ = 1;
  double attention_efficiency_ = 0;
  double memory_efficiency_ = 0;
  double vector_efficiency_ = 0;
  bool shape_effects_ = true;
  double kernel_overhead_s_ = 0;
  std::array<double, kMaxOpKinds> kernel_scale_ = unit_kernel_scale();
  int sm_count_ = 0;
};

}  // namespace trainplan::sim
