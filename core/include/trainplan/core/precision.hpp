// File: trainplan/core/precision.hpp
//
// Numeric precisions of training, shared by the hardware catalog (peak FLOP/s per precision),
// the models (bytes per activation element) and the plan.
//
//   Precision p = parse_precision("bf16");
//   bytes_per_element(p);  // 2
//   precision_name(p);     // "bf16"
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainplan {

/// Compute precision of matrix products. fp16/bf16 mean mixed precision training (16-bit
/// weights and activations, fp32 master weights and optimizer state); fp32 and tf32 keep
/// everything in 32 bits (tf32 only changes the tensor-core math).
enum class Precision { fp32, tf32, fp16, bf16, fp8 };

std::string_view precision_name(Precision p);
/// Parses "fp32", "tf32", "fp16", "bf16", "fp8"; nullopt otherwise.
std::optional<Precision> parse_precision(std::string_view name);
std::vector<std::string> precision_names();
/// Bytes of one activation/weight element in this precision (fp8 activations are kept in
/// 16 bits by every framework we model, so fp8 returns 2 here; fp32/tf32 return 4).
double bytes_per_element(Precision p);
/// True for the mixed-precision modes (fp16, bf16, fp8) that keep fp32 master weights.
bool is_mixed(Precision p);

}  // namespace trainplan
