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

/// "did you mean \"x\"? (one of: a, b, x)" (the list only when it has at most `max_list`
/// names) or, with no close candidate, "known: a, b, c" (at most `max_list`).
std::string suggestion(std::string_view name, const std::vector<std::string>& candidates,
                       size_t max_list = 12);

std::string join(const std::vector<std::string>& items, std::string_view sep);

/// Splits on `sep`, trimming spaces, dropping empty pieces.
std::vector<std::string> split(std::string_view text, char sep);

std::string to_lower(std::string_view s);

// ---- text for generated code (exports): every user string goes through one of these ----------

/// True when `s` is well-formed UTF-8.
bool valid_utf8(std::string_view s);

/// `s` as one shell word: unchanged when it has only characters no shell treats specially
/// (letters, digits, and _ . / : = @ % + , -), else in single quotes with each ' written as
/// '\''. The empty string is ''.
std::string shell_quote(std::string_view s);

/// `s` as a Python string literal: double quotes, backslash escapes for \, ", and control
/// characters; other UTF-8 passes through. Throws Error (no location) if `s` is not UTF-8.
std::string python_string(std::string_view s);

/// `s` for the rest of a `# ...` comment line: control characters (a newline would end the
/// comment) written as escapes such as \n.
std::string comment_text(std::string_view s);

}  // namespace trainplan
