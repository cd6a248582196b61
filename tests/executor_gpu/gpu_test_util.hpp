// Helpers of the GPU tests: a CUDA backend next to the CPU reference, random inputs rounded to
// the tested dtype and uploaded to both (the CPU copy in f32), and comparisons under named
// tolerances:  |got - want| <= rel * |want| + abs * max |want|  (abs relative to the tensor's
// largest value, so elements near zero are judged on the tensor's scale).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/executor/backend.hpp"
#include "trainplan/executor/cuda_backend.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::executor::gpu_testing {

struct Tolerance {
  const char* name;
  double rel;
  double abs;  // fraction of max |want|
};
// One rounding of the output (bf16: 2^-9 relative, f16: 2^-12) plus fp32 sums in another order.
inline constexpr Tolerance kF32{"f32", 1e-5, 1e-5};
inline constexpr Tolerance kBf16{"bf16", 1e-2, 1e-2};
inline constexpr Tolerance kF16{"f16", 2e-3, 2e-3};
// Long reductions in fp32 (attention, norms' weight gradients over many rows).
inline constexpr Tolerance kF32Long{"f32 long reductions", 1e-4, 1e-4};
// cuBLASLt's DGELU epilogue in f32 evaluates the GELU derivative with the GPU's fast tanh
// (tanh.approx.f32: maximum relative error 2^-11, PTX ISA), not the exact tanh of the CPU
// reference; gelu'(x) = 0.5(1 + t) + 0.5 x (1 - t^2) u'(x) with t = tanh(u(x)) then errs by up to
// a few times 2^-11 of the incoming gradient. First run on a GPU (H100, cuBLASLt 13.0,
// 2026-11-27): off by 1.2e-5 of the tensor's scale where kF32 allows 1e-5.
inline constexpr Tolerance kF32FastTanh{"f32 with the hardware tanh (2^-11)", 1e-5, 0x1p-11};
// Unfused attention keeps probabilities and their gradients in the 16-bit type.
inline constexpr Tolerance kBf16Attention{"bf16 attention", 2e-2, 2e-2};
inline constexpr Tolerance kF16Attention{"f16 attention", 5e-3, 5e-3};

inline Tolerance tolerance(DType t, bool long_reduction = false) {
  if (t == DType::bf16) return kBf16;
  if (t == DType::f16) return kF16;
  return long_reduction ? kF32Long : kF32;
}
inline Tolerance attention_tolerance(DType t) {
  if (t == DType::bf16) return kBf16Attention;
  if (t == DType::f16) return kF16Attention;
  return kF32Long;
}

/// The dtypes the GPU computes in: f32, f16, and bf16 where supported.
inline std::vector<DType> gpu_dtypes() {
  std::vector<DType> out = {DType::f32, DType::f16};
  if (make_backend("cuda")->supports(DType::bf16)) out.push_back(DType::bf16);
  return out;
}

inline void expect_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                         const Tolerance& tol) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  size_t worst = 0;
  double worst_excess = -1;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    finite = finite && std::isfinite(got[i]);
    const double excess = std::abs(got[i] - want[i]) - (tol.rel * std::abs(want[i]) + tol.abs * scale);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO(what << " (tolerance " << tol.name << ", max |want| " << scale << "): worst element " << worst << " got "
            << (got.empty() ? 0.0 : got[worst]) << ", want " << (want.empty() ? 0.0 : want[worst]));
  CHECK(finite);
  CHECK(worst_excess <= 0);
}

/// A CUDA backend and the CPU reference, for inputs in `dtype` on the GPU.
struct Both {
  explicit Both(DType gpu_dtype, std::unique_ptr<Backend> gpu_backend = nullptr)
      : dtype(gpu_dtype), gpu(gpu_backend ? std::move(gpu_backend) : make_backend("cuda")), cpu(make_backend("cpu")) {}

  struct Pair {
    Tensor g, c;  // on the GPU (its dtype) and the CPU (f32)
  };

  DType dtype;
  std::unique_ptr<Backend> gpu;
  std::unique_ptr<Backend> cpu;
  Stream& gs() { return gpu->default_stream(); }
  Stream& cs() { return cpu->default_stream(); }

  /// `values` rounded to the GPU dtype (or `as`), uploaded to both.
  Pair values(const Shape& shape, std::vector<double> v, std::optional<DType> as = {}) {
    const DType t = as.value_or(dtype);
    for (double& x : v) x = round_to(t, x);
    Pair p{gpu->empty(t, shape), cpu->empty(DType::f32, shape)};
    gpu->upload_values(gs(), p.g, v);
    cpu->upload_values(cs(), p.c, v);
    return p;
  }
  Pair random(Rng& rng, const Shape& shape, double stddev = 1.0, std::optional<DType> as = {}, double mean = 0.0) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (double& x : v) x = rng.normal(mean, stddev);
    return values(shape, std::move(v), as);
  }
  /// Uninitialized outputs filled with the same random garbage on both sides (so kernels that
  /// must write every element are caught when they do not).
  Pair output(Rng& rng, const Shape& shape, std::optional<DType> as = {}) { return random(rng, shape, 3.0, as); }
  Pair ids(const std::vector<int32_t>& ids) {
    const Shape shape{static_cast<int64_t>(ids.size())};
    Pair p{gpu->empty(DType::i32, shape), cpu->empty(DType::i32, shape)};
    gpu->upload_ids(gs(), p.g, ids);
    cpu->upload_ids(cs(), p.c, ids);
    return p;
  }
  std::vector<double> got(const Pair& p) { return gpu->download_values(gs(), p.g); }
  std::vector<double> want(const Pair& p) { return cpu->download_values(cs(), p.c); }
  void check(const std::string& what, const Pair& p, const Tolerance& tol) { expect_close(what, got(p), want(p), tol); }
};

inline std::vector<int32_t> random_ids(Rng& rng, size_t n, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo))));
  return v;
}

}  // namespace trainplan::executor::gpu_testing
