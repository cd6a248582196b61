#include "trainplan/core/checked.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

namespace trainplan::checked {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}

// Shortened text of a value for messages.
std::string shown(std::string_view text) {
  if (text.size() <= 40) return std::string(text);
  return std::string(text.substr(0, 37)) + "...";
}

Error out_of_range(const std::string& got, const std::string& range) {
  return Error(fmt::format("must be {}, got {}", range, got))
      .hint("trainplan's limits lie far beyond any real training job (core/README.md lists them)");
}

}  // namespace

std::string range_text(int64_t min, int64_t max) {
  if (max == std::numeric_limits<int64_t>::max()) return fmt::format("at least {}", min);
  if (min == std::numeric_limits<int64_t>::min()) return fmt::format("at most {}", max);
  return fmt::format("between {} and {}", min, max);
}

std::string range_text(double min, double max) {
  if (min == 0.0 && max >= std::numeric_limits<double>::max()) return "zero or more";
  return fmt::format("between {:g} and {:g}", min, max);
}

int64_t in_range(int64_t value, int64_t min, int64_t max) {
  if (value < min || value > max) {
    if (value < 0 && min >= 0)
      throw Error(fmt::format("must not be negative, got {}", value)).hint(fmt::format("use a value {}", range_text(min, max)));
    if (value < min)
      throw Error(fmt::format("must be {}, got {}", range_text(min, max), value)).hint(fmt::format("use a value {}", range_text(min, max)));
    throw out_of_range(std::to_string(value), range_text(min, max));
  }
  return value;
}

double in_range(double value, double min, double max) {
  if (!std::isfinite(value))
    throw Error(fmt::format("must be a finite number, got {}", value)).hint(fmt::format("use a value {}", range_text(min, max)));
  if (value < min || value > max) {
    if (value < 0 && min >= 0)
      throw Error(fmt::format("must not be negative, got {:g}", value)).hint(fmt::format("use a value {}", range_text(min, max)));
    if (value < min)
      throw Error(fmt::format("must be {}, got {:g}", range_text(min, max), value)).hint(fmt::format("use a value {}", range_text(min, max)));
    throw out_of_range(fmt::format("{:g}", value), range_text(min, max));
  }
  return value == 0.0 ? 0.0 : value;  // never a negative zero
}

int64_t parse_int(std::string_view text_in, int64_t min, int64_t max) {
  const std::string text = trim(text_in);
  const char* begin = text.data();
  const char* end = begin + text.size();
  int64_t whole = 0;
  auto [p, ec] = std::from_chars(begin, end, whole);
  if (ec == std::errc() && p == end) return in_range(whole, min, max);
  // Exponent or suffix forms: 1e6, 4k, 2M.
  double v = 0.0;
  auto [q, ec2] = std::from_chars(begin, end, v);
  if (q == begin || (ec2 != std::errc() && ec2 != std::errc::result_out_of_range))
    throw Error(fmt::format("must be a whole number, got \"{}\"", shown(text)))
        .hint(fmt::format("write a number {}", range_text(min, max)));
  if (ec2 == std::errc::result_out_of_range) v = (text[0] == '-' ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
  const std::string_view suffix(q, static_cast<size_t>(end - q));
  double factor = 1.0;
  if (suffix == "k" || suffix == "K") factor = 1e3;
  else if (suffix == "M") factor = 1e6;
  else if (suffix == "B" || suffix == "G") factor = 1e9;
  else if (suffix == "T") factor = 1e12;
  else if (!suffix.empty())
    throw Error(fmt::format("must be a whole number, got \"{}\"", shown(text)))
        .hint(fmt::format("write a number {} (suffixes k, M, B, T allowed)", range_text(min, max)));
  v *= factor;
  if (!std::isfinite(v) || v < static_cast<double>(min) || v > static_cast<double>(max)) {
    if (v < 0 && min >= 0)
      throw Error(fmt::format("must not be negative, got {}", shown(text))).hint(fmt::format("use a value {}", range_text(min, max)));
    throw out_of_range(shown(text), range_text(min, max));
  }
  if (v != std::floor(v))
    throw Error(fmt::format("must be a whole number, got {}", shown(text))).hint(fmt::format("write a number {}", range_text(min, max)));
  return in_range(static_cast<int64_t>(v), min, max);
}

double parse_real(std::string_view text_in, double min, double max) {
  const std::string text = trim(text_in);
  const char* begin = text.data();
  const char* end = begin + text.size();
  double v = 0.0;
  auto [p, ec] = std::from_chars(begin, end, v);
  if (p != end || p == begin || (ec != std::errc() && ec != std::errc::result_out_of_range))
    throw Error(fmt::format("must be a number, got \"{}\"", shown(text))).hint(fmt::format("write a number {}", range_text(min, max)));
  if (ec == std::errc::result_out_of_range) {
    // from_chars reports both overflow and underflow; underflow reads as zero.
    const bool tiny = text.find_first_of("eE") != std::string::npos && text.find("e-") != std::string::npos;
    if (!tiny) throw out_of_range(shown(text), range_text(min, max));
    v = 0.0;
  }
  return in_range(v, min, max);
}

int64_t to_int(double value, int64_t min, int64_t max, std::string_view what, bool ceil, std::string_view inputs) {
  const std::string hint = inputs.empty() ? std::string("check the inputs this is computed from (token count, batch, step time, sizes)")
                                          : fmt::format("check {}", inputs);
  if (!std::isfinite(value) || value < static_cast<double>(min) - 1.0 || value > static_cast<double>(max) + 1.0)
    throw Error(fmt::format("{} would be {:g}, outside the range trainplan handles ({})", what, value, range_text(min, max)))
        .hint(hint);
  const double r = ceil ? std::ceil(value) : std::trunc(value);
  const auto i = static_cast<int64_t>(r);
  if (i < min || i > max)
    throw Error(fmt::format("{} would be {}, outside the range trainplan handles ({})", what, i, range_text(min, max)))
        .hint(hint);
  return i;
}

int64_t multiply(int64_t a, int64_t b, int64_t max, std::string_view what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > max)
    throw Error(fmt::format("{} = {} x {} is more than {}", what, a, b, max))
        .hint("trainplan's limits lie far beyond any real training job (core/README.md lists them)");
  return out;
}

}  // namespace trainplan::checked
