#include "trainplan/core/units.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"

namespace trainplan::units {
namespace {

struct Unit {
  std::string_view name;
  double factor;
};

// Sizes: decimal and binary prefixes, bytes (B) and bits (b).
std::optional<double> size_factor(std::string_view u) {
  static const std::vector<Unit> kUnits = {
      {"B", 1.0},       {"kB", 1e3},        {"KB", 1e3},       {"MB", 1e6},
      {"GB", 1e9},      {"TB", 1e12},       {"PB", 1e15},      {"KiB", 1024.0},
      {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"b", 0.125},     {"kb", 125.0},      {"Kb", 125.0},     {"Mb", 1.25e5},
      {"Gb", 1.25e8},   {"Tb", 1.25e11},    {"Kib", 128.0},    {"Mib", 131072.0},
      {"Gib", 134217728.0},
  };
  for (const auto& unit : kUnits)
    if (unit.name == u) return unit.factor;
  return std::nullopt;
}

std::optional<double> duration_factor(std::string_view u) {
  static const std::vector<Unit> kUnits = {
      {"ns", 1e-9}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ms", 1e-3}, {"s", 1.0},
      {"min", 60.0}, {"h", 3600.0}, {"d", 86400.0},
  };
  for (const auto& unit : kUnits)
    if (unit.name == u) return unit.factor;
  return std::nullopt;
}

std::optional<double> flops_factor(std::string_view u) {
  static const std::vector<Unit> kPrefix = {
      {"", 1.0}, {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}};
  for (std::string_view suffix : {"FLOPS", "FLOP/s", "flops", "FLOPs/s"}) {
    if (u.size() < suffix.size() || u.substr(u.size() - suffix.size()) != suffix) continue;
    auto prefix = u.substr(0, u.size() - suffix.size());
    for (const auto& p : kPrefix)
      if (p.name == prefix) return p.factor;
  }
  return std::nullopt;
}

std::optional<double> count_factor(std::string_view u) {
  static const std::vector<Unit> kUnits = {
      {"", 1.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12}};
  for (const auto& unit : kUnits)
    if (unit.name == u) return unit.factor;
  return std::nullopt;
}

std::string_view accepted_units(Dimension dim) {
  switch (dim) {
    case Dimension::bytes: return "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (or bits: Mb, Gb)";
    case Dimension::bandwidth: return "GBps, GB/s, MBps, Gbps, Gb/s (B = bytes, b = bits)";
    case Dimension::duration: return "ns, us, ms, s, min, h, d";
    case Dimension::flops_rate: return "FLOPS, GFLOPS, TFLOPS, PFLOPS (or FLOP/s)";
    case Dimension::count: return "a number with an optional suffix k, M, B (billion), T";
    case Dimension::ratio: return "a number, or a percentage such as 30%";
  }
  return "";
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string_view dimension_name(Dimension dim) {
  switch (dim) {
    case Dimension::bytes: return "a size in bytes";
    case Dimension::bandwidth: return "a bandwidth";
    case Dimension::duration: return "a duration";
    case Dimension::flops_rate: return "a FLOP rate";
    case Dimension::count: return "a count";
    case Dimension::ratio: return "a ratio";
  }
  return "a quantity";
}

double parse(std::string_view text_in, Dimension dim) {
  const std::string text = trim(text_in);
  const std::string shown = text.size() > 40 ? text.substr(0, 37) + "..." : text;  // for messages
  // Longest prefix that parses as a floating-point number.
  double value = 0.0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range && ptr != begin) {
    value = std::strtod(std::string(begin, ptr).c_str(), nullptr);  // inf on overflow, ~0 on underflow
    ec = std::errc();
  }
  if (ec != std::errc() || ptr == begin) {
    throw Error(fmt::format("cannot read \"{}\" as {}: it must start with a number", shown,
                            dimension_name(dim)))
        .hint(fmt::format("write e.g. \"{}\"", dim == Dimension::bytes       ? "80GiB"
                                                : dim == Dimension::bandwidth ? "450GBps"
                                                : dim == Dimension::duration  ? "2us"
                                                : dim == Dimension::flops_rate ? "312TFLOPS"
                                                : dim == Dimension::ratio      ? "0.3"
                                                                               : "300e9"));
  }
  if (!std::isfinite(value))
    throw Error(std::isnan(value) ? fmt::format("\"{}\" is not a number", shown)
                                  : fmt::format("\"{}\" is too large for {} (at most {:g})", shown, dimension_name(dim), max_of(dim)))
        .hint("write a finite number such as 300e9 (trainplan's limits are in core/README.md)");
  std::string unit = trim(std::string_view(ptr, static_cast<size_t>(end - ptr)));
  std::optional<double> factor;
  switch (dim) {
    case Dimension::bytes: factor = unit.empty() ? std::optional(1.0) : size_factor(unit); break;
    case Dimension::bandwidth: {
      std::string base = unit;
      if (base.size() > 2 && base.substr(base.size() - 2) == "/s") base.resize(base.size() - 2);
      else if (base.size() > 2 && base.substr(base.size() - 2) == "ps") base.resize(base.size() - 2);
      else if (!unit.empty()) { factor = std::nullopt; break; }
      factor = unit.empty() ? std::optional(1.0) : size_factor(base);
      break;
    }
    case Dimension::duration: factor = unit.empty() ? std::optional(1.0) : duration_factor(unit); break;
    case Dimension::flops_rate: factor = unit.empty() ? std::optional(1.0) : flops_factor(unit); break;
    case Dimension::count: factor = count_factor(unit); break;
    case Dimension::ratio:
      if (unit.empty()) factor = 1.0;
      else if (unit == "%") factor = 0.01;
      break;
  }
  if (!factor) {
    throw Error(fmt::format("unknown unit \"{}\" in \"{}\" for {}", unit.size() > 20 ? unit.substr(0, 17) + "..." : unit, shown, dimension_name(dim)))
        .hint(fmt::format("use one of: {}", accepted_units(dim)));
  }
  const double si = value * *factor;
  if (!std::isfinite(si) || std::fabs(si) > max_of(dim))
    throw Error(fmt::format("\"{}\" is too large for {} (at most {:g})", shown, dimension_name(dim), max_of(dim)))
        .hint("trainplan's limits lie far beyond any real training job (core/README.md lists them)");
  return si == 0.0 ? 0.0 : si;  // never a negative zero
}

double max_of(Dimension dim) {
  switch (dim) {
    case Dimension::bytes: return limits::kMaxBytes;
    case Dimension::bandwidth: return limits::kMaxBytesPerSecond;
    case Dimension::duration: return limits::kMaxSeconds;
    case Dimension::flops_rate: return limits::kMaxFlopsRate;
    case Dimension::count: return limits::kMaxTokens;
    case Dimension::ratio: return 1e6;
  }
  return limits::kMaxTokens;
}

namespace {
std::string sig3(double v) {
  double a = std::fabs(v);
  if (a >= 100.0 || a == 0.0) return fmt::format("{:.0f}", v);
  if (a >= 10.0) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}
std::string scaled(double v, const std::vector<Unit>& units, std::string_view sep) {
  const Unit* best = &units.front();
  for (const auto& u : units)
    if (std::fabs(v) >= u.factor * 0.9995) best = &u;
  return fmt::format("{}{}{}", sig3(v / best->factor), sep, best->name);
}
}  // namespace

std::string format_bytes(double bytes) {
  static const std::vector<Unit> kUnits = {
      {"B", 1.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  return scaled(bytes, kUnits, " ");
}

std::string format_bandwidth(double bytes_per_s) {
  static const std::vector<Unit> kUnits = {
      {"B/s", 1.0}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}};
  return scaled(bytes_per_s, kUnits, " ");
}

std::string format_duration(double seconds) {
  double a = std::fabs(seconds);
  if (a < 1e-6) return fmt::format("{} ns", sig3(seconds * 1e9));
  if (a < 1e-3) return fmt::format("{} us", sig3(seconds * 1e6));
  if (a < 1.0) return fmt::format("{} ms", sig3(seconds * 1e3));
  if (a < 120.0) return fmt::format("{} s", sig3(seconds));
  if (a < 7200.0) return fmt::format("{} min", sig3(seconds / 60.0));
  if (a < 172800.0) return fmt::format("{} h", sig3(seconds / 3600.0));
  return fmt::format("{} days", sig3(seconds / 86400.0));
}

std::string format_flops_rate(double flops_per_s) {
  static const std::vector<Unit> kUnits = {
      {"FLOP/s", 1.0}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}, {"EFLOP/s", 1e18}};
  return scaled(flops_per_s, kUnits, " ");
}

std::string format_count(double count) {
  static const std::vector<Unit> kUnits = {{"", 1.0}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"T", 1e12}};
  if (std::fabs(count) < 1000.0 && count == std::floor(count)) return fmt::format("{:.0f}", count);
  return scaled(count, kUnits, "");
}

std::string format_usd(double usd) {
  if (std::fabs(usd) < 100.0) return fmt::format("${:.2f}", usd);
  // Thousands separators.
  auto whole = static_cast<long long>(std::llround(usd));
  std::string digits = std::to_string(std::llabs(whole));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (whole < 0 ? "-$" : "$") + out;
}

}  // namespace trainplan::units
