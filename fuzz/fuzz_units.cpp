// libFuzzer target: unit and quantity parsing (core/units) in every dimension, and the
// formatting of whatever it returns. Only trainplan::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"

using namespace trainplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the dimension; the rest is the text.
  const auto dim = static_cast<units::Dimension>(data[0] % 6);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const double v = units::parse(text, dim);
    (void)units::format_bytes(v);
    (void)units::format_bandwidth(v);
    (void)units::format_duration(v);
    (void)units::format_flops_rate(v);
    (void)units::format_count(v);
    (void)units::format_usd(v);
  } catch (const Error& e) {
    (void)e.what();
  }
  return 0;
}
