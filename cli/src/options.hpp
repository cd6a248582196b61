// Numeric, quantity and choice flags, declared and checked in one place so every flag of every
// command behaves the same:
//
//   add_int(cmd, "--runs", a.runs, 1, limits::kMaxRuns, "Monte Carlo runs");
//     --help: "Monte Carlo runs [1..1000000]"; `--runs -1` -> error: --runs: must not be negative ...
//   add_choice(cmd, "--to", a.to, {"deepspeed", "megatron"}, "Export target");
//     `--to ds` -> error: --to: unknown value "ds" — did you mean ...? (one of: ...)
//   double s = flag_positive_quantity("--deadline", a.deadline, units::Dimension::duration);
//     -> error: --deadline: unknown unit "x" in "3x" for a duration — use one of: ns, us, ...
//
// Integers are parsed as signed 64-bit values and range-checked before they reach the
// (possibly unsigned or narrower) target, so nothing wraps. Errors are trainplan::Error
// located at the flag ("--runs: ..."), printed by main as `error: --runs: what — hint`.
// at_flag, flag_quantity, flag_positive_quantity and flag_choice live in core/flags.hpp: the
// libraries check the Python module's keyword arguments with them too.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "trainplan/core/checked.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/flags.hpp"
#include "trainplan/core/units.hpp"

namespace trainplan::cli {

/// The long name of an option spec such as "--output,-o" ("--output").
std::string flag_name(const std::string& names);

namespace detail {
int64_t parse_int_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max);
double parse_real_flag(const std::string& flag, const std::string& text, double min, double max);
std::string range_help(const std::string& help, const std::string& range);
}  // namespace detail

/// An integer flag of any integer type T, in [min, max] (which must fit T); the range shows in
/// --help, and so does the default unless it lies outside the range (a "not given" sentinel).
template <typename T>
CLI::Option* add_int(CLI::App* cmd, const std::string& names, T& target, int64_t min, int64_t max, const std::string& help) {
  const std::string flag = flag_name(names);
  auto* o = cmd->add_option_function<std::string>(
      names, [&target, flag, min, max](const std::string& s) { target = static_cast<T>(detail::parse_int_flag(flag, s, min, max)); },
      detail::range_help(help, checked::range_text(min, max)));
  o->type_name("INT");
  if (static_cast<int64_t>(target) >= min && static_cast<int64_t>(target) <= max) o->default_str(std::to_string(target));
  return o;
}

/// A real-number flag in [min, max].
CLI::Option* add_real(CLI::App* cmd, const std::string& names, double& target, double min, double max, const std::string& help);

/// A flag taking one of `choices`; an unknown value lists them.
CLI::Option* add_choice(CLI::App* cmd, const std::string& names, std::string& target, std::vector<std::string> choices,
                        const std::string& help);

}  // namespace trainplan::cli
