#include "trainplan/core/precision.hpp"

namespace trainplan {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

std::optional<Precision> parse_precision(std::string_view name) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16, Precision::fp8})
    if (precision_name(p) == name) return p;
  return std::nullopt;
}

std::vector<std::string> precision_names() { return {"fp32", "tf32", "fp16", "bf16", "fp8"}; }

double bytes_per_element(Precision p) {
  switch (p) {
    case Precision::fp32:
    case Precision::tf32: return 4.0;
    case Precision::fp16:
    case Precision::bf16:
    case Precision::fp8: return 2.0;
  }
  return 4.0;
}

bool is_mixed(Precision p) { return p == Precision::fp16 || p == Precision::bf16 || p == Precision::fp8; }

}  // namespace trainplan
