#include "options.hpp"

#include <fmt/format.h>

#include "trainplan/core/strings.hpp"

namespace trainplan::cli {

std::string flag_name(const std::string& names) {
  std::string shortest;
  for (const auto& n : split(names, ',')) {
    if (n.rfind("--", 0) == 0) return n;
    if (shortest.empty()) shortest = n;
  }
  return shortest;
}

namespace detail {

int64_t parse_int_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  return at_flag(flag, [&] { return checked::parse_int(text, min, max); });
}

double parse_real_flag(const std::string& flag, const std::string& text, double min, double max) {
  return at_flag(flag, [&] { return checked::parse_real(text, min, max); });
}

std::string range_help(const std::string& help, const std::string& range) { return fmt::format("{} [{}]", help, range); }

}  // namespace detail

CLI::Option* add_real(CLI::App* cmd, const std::string& names, double& target, double min, double max, const std::string& help) {
  const std::string flag = flag_name(names);
  auto* o = cmd->add_option_function<std::string>(
      names, [&target, flag, min, max](const std::string& s) { target = detail::parse_real_flag(flag, s, min, max); },
      detail::range_help(help, checked::range_text(min, max)));
  o->type_name("NUMBER");
  if (target >= min && target <= max) o->default_str(fmt::format("{:g}", target));
  return o;
}

CLI::Option* add_choice(CLI::App* cmd, const std::string& names, std::string& target, std::vector<std::string> choices,
                        const std::string& help) {
  const std::string flag = flag_name(names);
  const std::string listed = join(choices, ", ");
  auto* o = cmd->add_option_function<std::string>(
      names, [&target, flag, choices = std::move(choices)](const std::string& s) { target = flag_choice(flag, s, choices); },
      help);
  o->type_name("{" + listed + "}");
  if (!target.empty()) o->default_str(target);
  return o;
}

}  // namespace trainplan::cli
