#include "trainplan/core/strings.hpp"

#include <algorithm>
#include <cctype>

namespace trainplan {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string closest(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string lname = to_lower(name);
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  for (const auto& c : candidates) {
    const std::string lc = to_lower(c);
    size_t d = edit_distance(lname, lc);
    // A prefix match ("p4d" for "p4d.24xlarge") counts as close.
    if (!lname.empty() && lc.rfind(lname, 0) == 0) d = std::min(d, size_t{1});
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best.empty() || best_d > std::max<size_t>(2, name.size() / 2)) return "";
  return best;
}

std::string suggestion(std::string_view name, const std::vector<std::string>& candidates,
                       size_t max_list) {
  std::string c = closest(name, candidates);
  if (!c.empty()) return "did you mean \"" + c + "\"?";
  std::vector<std::string> shown(candidates.begin(),
                                 candidates.begin() + static_cast<std::ptrdiff_t>(
                                                          std::min(max_list, candidates.size())));
  std::string out = "known: " + join(shown, ", ");
  if (candidates.size() > shown.size()) out += ", ...";
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    auto piece = text.substr(start, end - start);
    size_t b = 0, e = piece.size();
    while (b < e && std::isspace(static_cast<unsigned char>(piece[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(piece[e - 1]))) --e;
    if (e > b) out.emplace_back(piece.substr(b, e - b));
    start = end + 1;
  }
  return out;
}

}  // namespace trainplan
