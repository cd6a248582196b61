#include "trainplan/core/flags.hpp"

#include <fmt/format.h>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan {
namespace {

std::string shortened(const std::string& text) { return text.size() > 40 ? text.substr(0, 37) + "..." : text; }

}  // namespace

std::string flag_choice(const std::string& flag, const std::string& value, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (c == value) return value;
  const std::string close = closest(value, choices);
  throw Error(fmt::format("unknown value \"{}\"", shortened(value)))
      .at(flag)
      .hint(close.empty() ? "use one of: " + join(choices, ", ")
                          : fmt::format("did you mean \"{}\"? (one of: {})", close, join(choices, ", ")));
}

double flag_quantity(const std::string& flag, const std::string& text, units::Dimension dim) {
  return at_flag(flag, [&] { return checked::in_range(units::parse(text, dim), 0.0, units::max_of(dim)); });
}

double flag_positive_quantity(const std::string& flag, const std::string& text, units::Dimension dim) {
  const double v = flag_quantity(flag, text, dim);
  if (!(v > 0))
    throw Error(fmt::format("must be positive, got \"{}\"", shortened(text)))
        .at(flag)
        .hint(fmt::format("give {} greater than zero", units::dimension_name(dim)));
  return v;
}

double flag_count_of_things(const std::string& flag, const std::string& text, const char* things) {
  const double v = flag_positive_quantity(flag, text, units::Dimension::count);
  if (!(v >= 1))
    throw Error(fmt::format("must be at least one, got \"{}\"", shortened(text)))
        .at(flag)
        .hint(fmt::format("give the number of {} (at least 1)", things));
  return v;
}

int64_t flag_in_range(const std::string& flag, int64_t value, int64_t min, int64_t max) {
  return at_flag(flag, [&] { return checked::in_range(value, min, max); });
}

double flag_in_range(const std::string& flag, double value, double min, double max) {
  return at_flag(flag, [&] { return checked::in_range(value, min, max); });
}

}  // namespace trainplan
