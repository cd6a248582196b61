// Roofline compute model with efficiencies by op kind and GEMM shape. The constants and their
// sources are listed in simulator/README.md ("Compute model"); keep the two in step.
#include "trainplan/simulator/compute_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "trainplan/core/error.hpp"
#include "trainplan/models/model.hpp"

namespace trainplan::sim {
namespace {

// The share of dense peak that GEMMs reach: the matmul rate the GPU holds at its power limit
// where the catalog has it (bf16: H100/H200 687.7 of 989 TFLOP/s, measured on an H100 SXM;
// A100 257 of 312, published on random inputs), else the measured maximum achievable matmul
// (MAMF, a burst at boost clock: H100 and H200 fp8); otherwise between the two measured
// generations' bf16 MAMF (A100 0.869, H100 0.803).
constexpr double kMamfUnknown = 0.80;

double gemm_ceiling(const hw::GpuSpec& gpu, Precision p) {
  if (auto sustained = gpu.sustained_matmul_fraction(p)) return *sustained;
  return gpu.mamf_fraction(p).value_or(kMamfUnknown);
}
// FlashAttention-2 (Dao, 2023) reaches 50-73 % of A100 peak forward and somewhat less backward;
// 0.60 is the middle of that range, used for attention tasks that carry no shape.
constexpr double kAttentionEfficiency = 0.60;
// Fused (flash) attention at long sequences, as a fraction of the 16-bit dense tensor peak:
// - before Hopper (FlashAttention-2): "up to 73 % of the theoretical max throughput in the
//   forward pass, and up to 63 % ... in the backward pass" on A100, over sequences 512..16k,
//   head dimension 64 and 128 (Dao 2023, arXiv 2307.08691, section 1 and 4.1); the maximum is
//   taken at 16k keys, so the asymptote is that over the key ramp below at 16k.
// - Hopper and later (FlashAttention-3 / cuDNN fused attention, what current frameworks run):
//   FlashAttention-3 forward at head dimension 128 on H100 SXM measured 430, 517, 566, 590, 614
//   and 621 TFLOP/s at sequence 512..16k (pytorch/benchmark commit ff65cb6, the FA3 paper's
//   sizing, B x s = 16k): 621 of the 989 TFLOP/s dense bf16 peak at 16k keys. No backward
//   table at hand: the forward share times FlashAttention-2's backward:forward ratio (63/73).
constexpr double kFlashFwdAmpere = 0.73, kFlashBwdAmpere = 0.63;
constexpr double kFlashFwdHopper = 620.7 / 989.4, kFlashBwdHopper = kFlashFwdHopper * (63.0 / 73.0);
constexpr double kFlashReferenceKeys = 16384;
// The key-loop ramp: a query block's pass over the keys costs as if it visited this many more
// keys (prologue: loading Q and starting the pipeline; epilogue: rescaling and writing O), so
// efficiency ~ keys / (keys + 240). Both columns of the table above fit it (FlashAttention-3:
// 237 keys; Triton FlashAttention-2: 329..477 TFLOP/s, 241 keys), and it reproduces FA2's
// published 50-73 % between 512 and 16k keys (0.74 x 512 / 752 = 0.50).
constexpr double kFlashKeyRamp = 240;
// The backward kernel's ramp is steeper: with the causal band below, the H200's causal points
// (benches/results/device-h200-2026-11-28/attention-backends.json, head dimension 128, sequence
// 1k and 16k) fit a forward ramp of 238 keys for cuDNN and 262 for FlashAttention-2 (the 240
// above) but a backward ramp of 339 and 388: the mean, 363, serves the backward. (No published
// backward table; the level at 16k keys stays the published one.)
constexpr double kFlashKeyRampBwd = (339.0 + 388.0) / 2;
// Causal masks: the kernel walks each block of query rows over the key blocks up to the diagonal
// and computes the diagonal band whole, its masked half included: per query that costs half a
// query block of keys beyond the mean keys the FLOPs count. Query blocks of 128 rows, the
// FlashAttention-2 / -3 forward tile at head dimension 128 (Dao 2023, section 3.3: blocks of
// {64, 128} x {64, 128} by head dimension and shared memory; FlashAttention-3 keeps 128-row
// query tiles). The published rates above are non-causal. At sequence s the factor is
// s / (s + 128): 0.89 at 1024, 0.99 at 16k. Against cuDNN on an H200 (causal, hidden 4096,
// benches/results/device-h200-2026-11-28/attention-backends.json) this accounts for most of the
// gap the key ramp left at short sequences.
constexpr double kCausalQueryBlock = 128;
// FlashAttention-1-class kernels (the Triton port, FlashAttention-1): FlashAttention-2 is
// "around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x
// faster in the backward pass" (Dao 2023, section 4.1; 1.7-3.0x faster than FlashAttention-1
// overall).
constexpr double kFlash1FwdSpeed = 1 / 1.4, kFlash1BwdSpeed = 0.5;
// Head dimension on Hopper: the published rates above are at 128. cuDNN's fused attention on an
// H200 (benches/results/device-h200-2026-11-28/attention-backends.json, causal, hidden 4096,
// sequence 1k-16k) runs head dimension 64 at a median 0.74 of 128's rate forward and 0.83
// backward (FlashAttention-3's paper shows the same step at 64). Each tile's inner products
// are d long, so the rate follows d / (d + D) relative to 128: D = 128 (1 - q) / (2q - 1) for a
// ratio q at 64, 69 forward and 33 backward.
constexpr double kHopperHeadDimFwd = 128.0 * (1 - 0.74) / (2 * 0.74 - 1);
constexpr double kHopperHeadDimBwd = 128.0 * (1 - 0.83) / (2 * 0.83 - 1);
constexpr double kFlashReferenceHeadDim = 128;
// FlashAttention-2 (the flash-attn 2 package) on Hopper: its kernels use the Ampere-style MMA,
// not Hopper's warpgroup MMA. Measured on an H200 (attention-backends.json, backend "flash",
// causal, hidden 4096, head dimension 128): 337 forward / 309 backward TFLOP/s at sequence 16k,
// i.e. 344.5 / 315.9 at the non-causal 16k-key reference of the levels above (divided by the
// key ramp at 8k keys, 0.9858, and the causal band, 0.9922): 0.348 / 0.319 of the dense peak.
// Head dimension 64 runs at a median 0.95 forward and 0.89 backward of 128 there: D = 7 / 18.
// The same kernels run before Hopper (FlashAttention-2 on Ampere, and the Triton port rated
// against it): the step from 128 to 64 is taken there too.
constexpr double kFlash2HopperFwd = 344.5 / 989.4, kFlash2HopperBwd = 315.9 / 989.4;
constexpr double kFlash2HopperHeadDimFwd = 128.0 * (1 - 0.95) / (2 * 0.95 - 1);
constexpr double kFlash2HopperHeadDimBwd = 128.0 * (1 - 0.89) / (2 * 0.89 - 1);
// Head dimensions the kernels are compiled for: a head dimension between them runs the next one
// up, its padding computed and thrown away (a rate d / padded of the padded kernel's).
// - FlashAttention-2 (flash-attn 2.x, csrc/flash_attn/flash_api.cpp): head_size_rounded =
//   round_multiple(head_size, head_size <= 128 ? 32 : 64), dispatched to the hdim 32, 64, 96,
//   128, 160, 192, 224, 256 kernels (80 runs as 96, 112 as 128).
// - The Triton port of FlashAttention (flash_attn_triton.py, vendored by llm-foundry as
//   llmfoundry/models/layers/flash_attn_triton.py): BLOCK_HEADDIM = max(next_power_of_2(d), 16)
//   for forward and backward (80 and 96 run as 128).
// cuDNN's fused attention and FlashAttention-3 are not padded here (the Hopper head-dimension
// rates above are measured per dimension).
double padded_head_dim(double d, bool triton_v1) {
  if (d <= 0) return d;
  if (triton_v1) return std::max(16.0, std::exp2(std::ceil(std::log2(d))));
  const double m = d <= 128 ? 32.0 : 64.0;
  return std::ceil(d / m) * m;
}
// Memory-bound kernels (layernorm, elementwise, Adam) sustain ~80 % of HBM bandwidth (STREAM-
// like copy kernels reach 80-90 % on A100/H100; fused-but-not-ideal kernels sit at the bottom).
constexpr double kMemoryEfficiency = 0.80;
// Elementwise arithmetic runs on CUDA cores; rarely the bound, half of fp32 peak.
constexpr double kVectorEfficiency = 0.50;
// Back-to-back kernel gap on the GPU when the CPU runs ahead (CUDA launch ~2-5 us of CPU time,
// mostly hidden; the GPU-side gap is ~1-3 us).
constexpr double kKernelOverheadS = 2e-6;
// GEMM shape effects, measured on an H100 SXM (benches/results/device-h100-2026-11-27/
// gemm-attention-cold.json: 240 bf16 transformer GEMMs, hidden 2048-12288, tp 1-8, forward,
// data- and weight-gradient layouts, from an idle GPU): rate = C x wave(M, N) x K / (K + r).
// - Wave quantization: 128x128 output tiles per SM, ceil(M/128) x ceil(N/128) tiles in waves of
//   the SM count (the sweep fits 128x128 better than 128x256 or 256x128: rms log error 0.094
//   against 0.122).
// - K ramp: a tile's fixed cost (filling its pipeline from memory, the epilogue writing its
//   output tile, the kernel's start and drain shared over its tiles) costs as much as r more
//   steps of K. The sweep fits r = 462 (halves of it: 408-508; rms log error 0.094, against 0.132
//   at the 64 this model used before), a fixed time per tile: 462 K-steps of a 128x128 tile at
//   the H100's per-SM tensor rate (989 TFLOP/s / 132 SMs) = 2.02 us. r = that time x the GPU's
//   per-SM dense tensor rate / (2 x 128 x 128). An H200 (same SMs and clocks, 4.8 TB/s of
//   HBM3e against 3.35) measured the same r (benches/results/device-h200-2026-11-28/
//   gemm-attention.json: best fit 520 under sustained load, where the H100 sweep gives 500):
//   the fixed cost does not shrink with memory bandwidth, which the former rule r ~ peak / HBM
//   bandwidth assumed (it put the H200 at 322 and its short-K GEMMs 20 % too fast). A100
//   (312 TFLOP/s, 108 SMs): r = 178; FP8 on Hopper (twice the per-SM rate): r = 925.
// - The GPU's measured GEMM rate (sustained, MAMF) is the rate at 8192^3, where these factors
//   are themselves 0.97 x 0.95 on an H100: shapes are taken relative to it.
constexpr double kTileM = 128, kTileN = 128;
constexpr double kTileFixedS = 462.0 * 2 * kTileM * kTileN / (989e12 / 132);
constexpr int64_t kReferenceGemm = 8192;
// Unfused attention's batched GEMMs: the head-dimension K loop, K / (K + 64).
constexpr double kHeadDimRamp = 64;

bool is_kind(int op_kind, models::OpKind k) { return op_kind == static_cast<int>(k); }

// The calibration table's phase of a task's phase (the optimizer has its own op kind).
int calibration_phase(plan::Phase p) {
  return p == plan::Phase::forward ? kPhaseForward : p == plan::Phase::backward ? kPhaseBackward : kPhaseAny;
}

}  // namespace

ComputeModelOptions with_software(ComputeModelOptions o, const hw::SoftwareStack& stack) {
  if (stack.name.empty()) return o;
  for (int k = 0; k <= static_cast<int>(models::OpKind::moe_combine); ++k)
    o.kernel_scale[static_cast<size_t>(k)] = stack.kernel_scale(models::op_kind_name(static_cast<models::OpKind>(k)));
  if (o.kernel_overhead_s < 0) o.kernel_overhead_s = stack.kernel_gap_s;
  o.flash_attn2 = stack.fused_attention == "flash-attn-2";
  return o;
}

bool ComputeModel::is_matmul_like(int op_kind) {
  return is_kind(op_kind, models::OpKind::linear) || is_kind(op_kind, models::OpKind::patch_embed) ||
         is_kind(op_kind, models::OpKind::conv2d) || is_kind(op_kind, models::OpKind::attention);
}

ComputeModel::ComputeModel(const hw::GpuSpec& gpu, Precision precision, const ComputeModelOptions& options,
                           const CalibrationTable* calibration)
    : gpu_(gpu), precision_(precision), calibration_(calibration) {
  auto it = gpu.peak_flops.find(precision);
  if (it == gpu.peak_flops.end() || !(it->second > 0))
    throw Error("GPU " + gpu.name + " has no peak FLOP/s for " + std::string(precision_name(precision)))
        .hint("pick a precision the GPU supports (T4 and V100 have no bf16)");
  tensor_peak_ = it->second;
  auto fp32 = gpu.peak_flops.find(Precision::fp32);
  vector_peak_ = fp32 != gpu.peak_flops.end() && fp32->second > 0 ? fp32->second : tensor_peak_;
  if (!(gpu.memory_bandwidth_bytes_per_s > 0))
    throw Error("GPU " + gpu.name + " has no memory bandwidth").hint("set memory_bandwidth in the catalog");
  auto check_fraction = [](double v, const char* what) {
    if (v < 0 || v > 1) throw Error(std::string(what) + " must be in (0, 1], got " + std::to_string(v));
    return v;
  };
  gemm_efficiency_ = check_fraction(options.gemm_efficiency, "gemm_efficiency");
  if (gemm_efficiency_ == 0) gemm_efficiency_ = gemm_ceiling(gpu, precision);
  if (!(options.gemm_efficiency_scale > 0 && options.gemm_efficiency_scale <= 5))
    throw Error("gemm_efficiency_scale must be in (0, 5], got " + std::to_string(options.gemm_efficiency_scale))
        .hint("a calibration profile's compute/gemm_efficiency_scale is a ratio to the catalog GEMM rate (sustained, else MAMF)");
  gemm_efficiency_ = std::min(1.0, gemm_efficiency_ * options.gemm_efficiency_scale);
  // FP8 training runs only the block linears in FP8 (plan::OpCost::fp8_gemm); the other tensor-
  // core work (attention, LM head) runs at the 16-bit peak and that precision's measured GEMM share.
  if (precision == Precision::fp8) {
    auto bf16 = gpu.peak_flops.find(Precision::bf16);
    half_peak_ = bf16 != gpu.peak_flops.end() && bf16->second > 0 ? bf16->second : tensor_peak_;
    half_gemm_efficiency_ = options.gemm_efficiency > 0 ? options.gemm_efficiency
                                                        : gemm_ceiling(gpu, Precision::bf16);
    half_gemm_efficiency_ = std::min(1.0, half_gemm_efficiency_ * options.gemm_efficiency_scale);
  } else {
    half_peak_ = tensor_peak_;
    half_gemm_efficiency_ = gemm_efficiency_;
  }
  efficiency_scale_ = options.gemm_efficiency_scale;
  hopper_or_later_ = std::atoi(gpu.compute_capability.c_str()) >= 9;
  flash_attn2_ = options.flash_attn2;
  attention_efficiency_ = check_fraction(options.attention_efficiency, "attention_efficiency");
  memory_efficiency_ = check_fraction(options.memory_efficiency, "memory_efficiency");
  if (memory_efficiency_ == 0) memory_efficiency_ = kMemoryEfficiency;
  vector_efficiency_ = check_fraction(options.vector_efficiency, "vector_efficiency");
  if (vector_efficiency_ == 0) vector_efficiency_ = kVectorEfficiency;
  shape_effects_ = options.gemm_shape_effects;
  sm_count_ = gpu.sm_count;
  if (sm_count_ < 1)
    throw Error("GPU " + gpu.name + " has no SM count").hint("set sm_count in the catalog (the GPU's whitepaper gives it)");
  const double tile_step_flops = 2 * kTileM * kTileN;  // one K step of a 128x128 tile
  k_ramp_ = kTileFixedS * tensor_peak_ / sm_count_ / tile_step_flops;
  half_k_ramp_ = kTileFixedS * half_peak_ / sm_count_ / tile_step_flops;
  shape_reference_ = raw_shape_factor(kReferenceGemm, kReferenceGemm, kReferenceGemm, k_ramp_);
  half_shape_reference_ = raw_shape_factor(kReferenceGemm, kReferenceGemm, kReferenceGemm, half_k_ramp_);
  kernel_overhead_s_ = options.kernel_overhead_s < 0 ? kKernelOverheadS : options.kernel_overhead_s;
  for (double v : options.kernel_scale)
    if (!(v >= 0 && v <= 8)) throw Error("kernel_scale must be in [0, 8], got " + std::to_string(v)).hint("a software stack's kernels per op");
  kernel_scale_ = options.kernel_scale;
  if (calibration_) {
    if (!calibration_->gpu.empty() && calibration_->gpu != gpu.name)
      throw Error("calibration table is for GPU " + calibration_->gpu + ", simulating " + gpu.name)
          .hint("use the calibration profile measured on this GPU type");
    if (calibration_->precision && *calibration_->precision != precision)
      throw Error("calibration table is for " + std::string(precision_name(*calibration_->precision)) +
                  ", simulating " + std::string(precision_name(precision)))
          .hint("use the calibration profile measured in the training precision");
  }
}

double ComputeModel::peak_flops_per_s(int op_kind) const {
  return is_matmul_like(op_kind) ? tensor_peak_ : vector_peak_;
}

// Wave quantization: ceil(M/128)*ceil(N/128) tiles run in waves of sm_count; the last partial
// wave leaves SMs idle. K ramp: K / (K + r).
double ComputeModel::raw_shape_factor(int64_t m, int64_t n, int64_t k, double k_ramp) const {
  const double tiles = std::ceil(static_cast<double>(m) / kTileM) * std::ceil(static_cast<double>(n) / kTileN);
  const double waves = std::ceil(tiles / sm_count_);
  const double wave_eff = tiles / (waves * sm_count_);
  const double k_eff = static_cast<double>(k) / (static_cast<double>(k) + k_ramp);
  return wave_eff * k_eff;
}

// The shape's rate relative to the 8192^3 GEMM the GPU's measured rate was taken at.
double ComputeModel::gemm_shape_factor(int64_t m, int64_t n, int64_t k, bool half_precision) const {
  if (!shape_effects_ || m <= 0 || n <= 0 || k <= 0) return 1.0;
  return half_precision ? raw_shape_factor(m, n, k, half_k_ramp_) / half_shape_reference_
                        : raw_shape_factor(m, n, k, k_ramp_) / shape_reference_;
}

double ComputeModel::sm_share_slowdown(int64_t m, int64_t n, int64_t k, int sms_taken) const {
  if (sms_taken <= 0) return 1.0;
  const double all = sm_count_;
  const double left = std::max(1, sm_count_ - sms_taken);
  if (!shape_effects_ || m <= 0 || n <= 0 || k <= 0) return all / left;
  const double tiles = std::ceil(static_cast<double>(m) / kTileM) * std::ceil(static_cast<double>(n) / kTileN);
  return std::ceil(tiles / left) / std::ceil(tiles / all);
}

// Attention's batched GEMMs (K = head dimension, 64-256: below the linear-layer sweep the K ramp
// was measured on): their output tile (the scores) is the memory term plan::op_cost carries, so
// the compute side takes only the head-dimension K loop, K / (K + 64), relative to 8192^3.
double ComputeModel::attention_gemm_factor(int64_t m, int64_t n, int64_t k) const {
  if (!shape_effects_ || m <= 0 || n <= 0 || k <= 0) return 1.0;
  return raw_shape_factor(m, n, k, kHeadDimRamp) / raw_shape_factor(kReferenceGemm, kReferenceGemm, kReferenceGemm, kHeadDimRamp);
}

std::optional<double> ComputeModel::calibrated_efficiency(int op_kind, int64_t m, int64_t n, int64_t k, int phase) const {
  if (!calibration_) return std::nullopt;
  CalibrationLookup c = calibration_->find(op_kind, m, n, k, phase);
  if (c.compute_efficiency) return *c.compute_efficiency;
  if (c.achieved_flops_per_s) return std::min(1.0, *c.achieved_flops_per_s / peak_flops_per_s(op_kind));
  return std::nullopt;
}

double ComputeModel::compute_efficiency(int op_kind, int64_t m, int64_t n, int64_t k, int phase) const {
  if (auto c = calibrated_efficiency(op_kind, m, n, k, phase)) return *c;
  if (is_kind(op_kind, models::OpKind::attention)) {
    // A set attention_efficiency wins; otherwise attention runs its QK^T / PV tiles like GEMMs
    // with K = head_dim: the measured GEMM share times the head-dimension K loop (0.5 at d = 64,
    // 0.67 at d = 128), which brackets FlashAttention-2's published 50-73 % of A100 peak.
    if (attention_efficiency_ > 0) return attention_efficiency_;
    if (k > 0) return std::min(1.0, gemm_efficiency_ * attention_gemm_factor(m, n, k));
    return kAttentionEfficiency;
  }
  if (is_matmul_like(op_kind)) return std::min(1.0, gemm_efficiency_ * gemm_shape_factor(m, n, k));
  if (op_kind == kOpKindAny) return gemm_efficiency_;  // merged task without a dominant kind
  return vector_efficiency_;
}

double ComputeModel::memory_efficiency(int op_kind, int phase) const {
  if (calibration_) {
    if (auto e = calibration_->find(op_kind, 0, 0, 0, phase).memory_efficiency) return *e;
  }
  return memory_efficiency_;
}

double ComputeModel::duration_s(const plan::Task& task, const std::vector<plan::OpCost>* op_costs, int sms_taken) const {
  TP_ASSERT(task.kind == plan::TaskKind::compute);
  if (op_costs && !op_costs->empty() && (task.op >= 0 || !task.ops.empty())) {
    double t = 0;
    if (!task.ops.empty()) {
      for (int id : task.ops) t += op_duration_s((*op_costs)[static_cast<size_t>(id)], task.phase, sms_taken);
    } else {
      t = op_duration_s((*op_costs)[static_cast<size_t>(task.op)], task.phase, sms_taken);
    }
    return t;
  }
  const int kind = task.phase == plan::Phase::optimizer && task.op_kind < 0 ? kOpKindOptimizer : task.op_kind;
  const int ph = calibration_phase(task.phase);
  double t = 0;
  if (task.flops > 0) {
    const double peak = kind == kOpKindAny ? tensor_peak_ : peak_flops_per_s(kind);
    t = task.flops / (peak * compute_efficiency(kind, task.gemm_m, task.gemm_n, task.gemm_k, ph)) *
        sm_share_slowdown(task.gemm_m, task.gemm_n, task.gemm_k, sms_taken);
  }
  if (task.mem_bytes > 0)
    t = std::max(t, task.mem_bytes / (gpu_.memory_bandwidth_bytes_per_s * memory_efficiency(kind, ph)));
  return t + kernel_overhead_s_ * task_kernels(task);
}

double ComputeModel::op_kernels(const plan::OpCost& c, plan::Phase phase) const {
  const int kernels = phase == plan::Phase::backward ? c.kernels_bwd : c.kernels_fwd;
  const double scale = c.op_kind >= 0 && c.op_kind < kMaxOpKinds ? kernel_scale_[static_cast<size_t>(c.op_kind)] : 1.0;
  return kernels * scale;
}

double ComputeModel::task_kernels(const plan::Task& task, const std::vector<plan::OpCost>* op_costs) const {
  if (op_costs && !op_costs->empty() && (task.op >= 0 || !task.ops.empty())) {
    if (task.ops.empty()) return op_kernels((*op_costs)[static_cast<size_t>(task.op)], task.phase);
    double k = 0;
    for (int id : task.ops) k += op_kernels((*op_costs)[static_cast<size_t>(id)], task.phase);
    return k;
  }
  return task.ops.empty() ? 1.0 : static_cast<double>(task.ops.size());
}

double ComputeModel::fused_attention_efficiency(const plan::OpCost& c, bool backward) const {
  const double key_ramp = backward ? kFlashKeyRampBwd : kFlashKeyRamp;
  const auto ramp = [key_ramp](double keys) { return keys / (keys + key_ramp); };
  // FlashAttention-1-class kernels are rated against FlashAttention-2 (below): on Hopper too.
  const bool fa2_on_hopper = hopper_or_later_ && (flash_attn2_ || c.fused_attention_v1);
  const double published = fa2_on_hopper       ? (backward ? kFlash2HopperBwd : kFlash2HopperFwd)
                           : hopper_or_later_ ? (backward ? kFlashBwdHopper : kFlashFwdHopper)
                                              : (backward ? kFlashBwdAmpere : kFlashFwdAmpere);
  double e = published / ramp(kFlashReferenceKeys) * ramp(c.attention_keys) * efficiency_scale_;
  if (c.attention_causal && c.attention_keys > 0) e *= c.attention_keys / (c.attention_keys + kCausalQueryBlock / 2);
  // FlashAttention-2 kernels (pre-Hopper "flash", flash-attn 2 on Hopper) and the Triton port run
  // the padded head dimension dp: the tile's K-loop is dp long and d / dp of its work is kept.
  const double d = static_cast<double>(c.gemm_k);
  const bool padded = d > 0 && (c.fused_attention_v1 || !hopper_or_later_ || flash_attn2_);
  const double dp = padded ? padded_head_dim(d, c.fused_attention_v1) : d;
  if (dp > 0) {
    // Relative to the published level's 128: cuDNN / FlashAttention-3 measured on Hopper; the
    // flash-attn 2 kernels (sm80 code, the same on Ampere and Hopper) by their H200 step. Before
    // Hopper the published "up to" 73 / 63 % is the best of the benchmarked head dimensions, 128
    // (each tile's K-loop is d long against a fixed softmax and bookkeeping cost per tile).
    const double r = hopper_or_later_ && !fa2_on_hopper ? (backward ? kHopperHeadDimBwd : kHopperHeadDimFwd)
                                                         : (backward ? kFlash2HopperHeadDimBwd : kFlash2HopperHeadDimFwd);
    e *= (dp / (dp + r)) / (kFlashReferenceHeadDim / (kFlashReferenceHeadDim + r));
  }
  if (c.fused_attention_v1) e *= backward ? kFlash1BwdSpeed : kFlash1FwdSpeed;
  if (padded) e *= d / dp;
  return std::min(1.0, e);
}

// A 16-bit GEMM under fp8 (the LM head, unfused attention): the 16-bit measured share and K ramp
// over the FP8 ones compute_efficiency applied.
double ComputeModel::half_precision_share(const plan::OpCost& c) const {
  const double fp8 = gemm_shape_factor(c.gemm_m, c.gemm_n, c.gemm_k);
  const double half = gemm_shape_factor(c.gemm_m, c.gemm_n, c.gemm_k, true);
  return half_gemm_efficiency_ / gemm_efficiency_ * (fp8 > 0 ? half / fp8 : 1.0);
}

double ComputeModel::op_duration_s(const plan::OpCost& c, plan::Phase phase, int sms_taken) const {
  const bool backward = phase == plan::Phase::backward;
  const double flops = backward ? c.flops_bwd : c.flops_fwd;
  const double mem = backward ? c.mem_bwd_bytes : c.mem_fwd_bytes;
  const double serial = backward ? c.serial_mem_bwd_bytes : c.serial_mem_fwd_bytes;
  const double kernels = op_kernels(c, phase);
  const int kind = c.op_kind;
  const int ph = calibration_phase(phase);
  const bool attention = is_kind(kind, models::OpKind::attention);
  double t = 0;
  if (flops > 0) {
    double peak = peak_flops_per_s(kind);
    // Under fp8 only the ops plan::op_cost marks fp8_gemm run at the FP8 peak.
    const bool half_precision_gemm = precision_ == Precision::fp8 && is_matmul_like(kind) && !c.fp8_gemm;
    if (half_precision_gemm) peak = half_peak_;
    double eff;
    if (attention && !c.fused_attention) {
      // Unfused attention: batched GEMMs with K = head_dim (a calibration entry for "linear" at
      // that shape, then one for "attention", wins).
      const auto linear = calibrated_efficiency(static_cast<int>(models::OpKind::linear), c.gemm_m, c.gemm_n, c.gemm_k, ph);
      eff = linear ? *linear : std::min(1.0, gemm_efficiency_ * attention_gemm_factor(c.gemm_m, c.gemm_n, c.gemm_k));
      if (half_precision_gemm && !calibration_) eff *= half_gemm_efficiency_ / gemm_efficiency_;
      if (calibration_) {
        CalibrationLookup cal = calibration_->find(kind, c.gemm_m, c.gemm_n, c.gemm_k, ph);
        if (cal.compute_efficiency) eff = *cal.compute_efficiency;
      }
    } else {
      // A calibration entry for attention is the kernel the user measured and a set
      // attention_efficiency is the user's figure: both are kept as they are.
      const bool calibrated = calibration_ && calibration_->find(kind, c.gemm_m, c.gemm_n, c.gemm_k, ph).compute_efficiency;
      if (calibrated || attention_efficiency_ > 0 || !(c.attention_keys > 0)) {
        eff = compute_efficiency(kind, c.gemm_m, c.gemm_n, c.gemm_k, ph);
        // A 16-bit GEMM under fp8 (the LM head): the 16-bit measured share, not FP8's.
        if (half_precision_gemm && !calibrated && attention_efficiency_ == 0) eff *= half_precision_share(c);
      } else
        eff = fused_attention_efficiency(c, backward);
    }
    t = flops / (peak * eff);
    // Attention's grid (batch x heads x query blocks) is not in its shape here (fused: the
    // published kernel level; unfused: the per-head GEMM): the many-wave limit. GEMMs by their
    // tile waves.
    if (sms_taken > 0) t *= attention ? sm_share_slowdown(0, 0, 0, sms_taken) : sm_share_slowdown(c.gemm_m, c.gemm_n, c.gemm_k, sms_taken);
  }
  const double bw = gpu_.memory_bandwidth_bytes_per_s * memory_efficiency(kind, ph);
  if (mem > 0) t = std::max(t, mem / bw);
  if (serial > 0) t += serial / bw;
  return t + kernel_overhead_s_ * kernels;
}

}  // namespace trainplan::sim
