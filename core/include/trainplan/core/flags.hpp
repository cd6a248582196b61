// File: trainplan/core/flags.hpp
//
// Values of named options, checked the same way wherever they come from: a CLI flag
// (cli/src/options.hpp) or a keyword argument of the Python module, parsed by library code
// such as planner::search_request. Errors are located at the option as the CLI spells it:
//
//   double s = flag_positive_quantity("--deadline", "3x", units::Dimension::duration);
//     -> error: --deadline: unknown unit "x" in "3x" for a duration — use one of: ns, us, ...
//   flag_choice("--platform", "ec3", {"ec2", "sagemaker"});
//     -> error: --platform: unknown value "ec3" — did you mean "ec2"? (one of: ec2, sagemaker)
//   flag_in_range("--max-gpus", 100000, 1, 32768);
//     -> error: --max-gpus: must be at most 32768, got 100000 — ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/core/error.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan {

/// Runs `f`; an Error it throws without a location gets `flag` as its location.
template <typename F>
auto at_flag(const std::string& flag, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (Error& e) {
    if (e.file().empty()) e.at(flag);
    throw;
  }
}

/// The value of a quantity option ("30d", "300B", "25MB"): parsed with units::parse, at least
/// zero and at most units::max_of(dim); errors name the option.
double flag_quantity(const std::string& flag, const std::string& text, units::Dimension dim);
/// The same, and greater than zero.
double flag_positive_quantity(const std::string& flag, const std::string& text, units::Dimension dim);
/// A count of whole things (tokens, samples): a positive quantity of at least one ("0.5" tokens or
/// "1e-300" samples are errors naming the flag).
double flag_count_of_things(const std::string& flag, const std::string& text, const char* things);

/// One of `choices` for `flag`; an unknown value lists them (or says which one was meant).
std::string flag_choice(const std::string& flag, const std::string& value, const std::vector<std::string>& choices);

/// An integer option already read as a number (a keyword argument), in [min, max] with the
/// error text of checked::in_range located at `flag`.
int64_t flag_in_range(const std::string& flag, int64_t value, int64_t min, int64_t max);
/// A real option in [min, max] (finite).
double flag_in_range(const std::string& flag, double value, double min, double max);

}  // namespace trainplan
