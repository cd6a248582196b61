// File: trainplan/core/units.hpp
//
// Quantities with units, parsed in one place. Hand-written JSON may say "450GBps", "2us",
// "80GiB", "312TFLOPS" or "300e9"; everything inside trainplan is SI base units in a double
// (bytes, bytes/s, seconds, FLOP/s, plain counts).
//
//   double bw = units::parse("100Gbps", units::Dimension::bandwidth);  // 12.5e9 bytes/s
//   double t  = units::parse("2us", units::Dimension::duration);       // 2e-6 s
//   std::string s = units::format_bytes(80.0 * (1ull << 30));          // "80.0 GiB"
//
// Decimal prefixes (k, M, G, T, P) are powers of 1000, binary ones (Ki, Mi, Gi, Ti) of 1024.
// "B" is bytes and "b" is bits: "100Gbps" is 12.5 GB/s.
#pragma once

#include <string>
#include <string_view>

namespace trainplan::units {

enum class Dimension {
  bytes,       // "80GiB", "40GB", "512MiB"
  bandwidth,   // bytes per second: "450GBps", "450GB/s", "100Gbps", "25Gb/s"
  duration,    // seconds: "2us", "1.5ms", "30s", "10min", "2h", "3d"
  flops_rate,  // FLOP per second: "312TFLOPS", "989TFLOP/s"
  count,       // a plain number with an optional SI suffix: "300e9", "300B", "1.5T", "4k"
  ratio,       // a plain number or a percentage: "0.3", "30%"
};

/// Name of the dimension as used in error messages ("bytes", "bandwidth", ...).
std::string_view dimension_name(Dimension dim);

/// Parses `text` as a quantity of `dim`, returning SI base units.
/// Throws trainplan::Error (without file/pointer; the caller adds them) naming the unknown
/// unit and listing the accepted ones.
double parse(std::string_view text, Dimension dim);

/// The largest value of `dim` trainplan accepts anywhere (limits in checked.hpp): parse()
/// refuses values beyond it, so no quantity overflows to inf later.
double max_of(Dimension dim);

/// Human-readable formatting, 3 significant digits: "80.0 GiB", "450 GB/s", "1.25 ms",
/// "312 TFLOP/s", "174.6B", "$1,234".
std::string format_bytes(double bytes);
std::string format_bandwidth(double bytes_per_s);
std::string format_duration(double seconds);
std::string format_flops_rate(double flops_per_s);
std::string format_count(double count);
std::string format_usd(double usd);

}  // namespace trainplan::units
