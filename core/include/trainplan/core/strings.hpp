// File: trainplan/core/strings.hpp
//
// Small string helpers used in error messages: the closest known name to a misspelled one,
// and joining lists.
//
//   closest("p4d.24xl", {"p4d.24xlarge", "p5.48xlarge"})  // "p4d.24xlarge"
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainplan {

/// Levenshtein edit distance.
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `name` by edit distance (case-insensitive), or "" when none is
/// within half of the name's length (so unrelated names are not suggested).
std::string closest(std::string_view name, const std::vector<std::string>& candidates);

/// "did you mean \"x\"?" or, with no close candidate, "known: a, b, c" (at most `max_list`).
std::string suggestion(std::string_view name, const std::vector<std::string>& candidates,
                       size_t max_list = 12);

std::string join(const std::vector<std::string>& items, std::string_view sep);

/// Splits on `sep`, trimming spaces, dropping empty pieces.
std::vector<std::string> split(std::string_view text, char sep);

std::string to_lower(std::string_view s);

}  // namespace trainplan
