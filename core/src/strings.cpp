#include "trainplan/core/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "trainplan/core/error.hpp"

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
  if (!c.empty()) {
    // Short lists (enum values) are always spelled out; long ones (catalog names) are not.
    if (candidates.size() <= max_list) return "did you mean \"" + c + "\"? (one of: " + join(candidates, ", ") + ")";
    return "did you mean \"" + c + "\"?";
  }
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

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;  // the sequence runs past the end
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points beyond U+10FFFF.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

std::string shell_quote(std::string_view s) {
  auto plain = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_./:=@%+,-").find(c) != std::string_view::npos;
  };
  if (!s.empty() && std::all_of(s.begin(), s.end(), plain)) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

namespace {
// Backslash escape of one control character (or DEL).
std::string control_escape(char c) {
  switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  }
}
bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; }
}  // namespace

std::string python_string(std::string_view s) {
  if (!valid_utf8(s)) throw Error("is not valid UTF-8 text").hint("give the value as UTF-8 text");
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (is_control(c)) {
      out += control_escape(c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string comment_text(std::string_view s) {
  std::string out;
  for (char c : s) out += is_control(c) ? control_escape(c) : std::string(1, c);
  return out;
}

}  // namespace trainplan
