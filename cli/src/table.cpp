#include "table.hpp"

#include <algorithm>

namespace trainplan::cli {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

Table::Table(std::vector<std::string> headers) {
  for (auto& h : headers) {
    bool right = !h.empty() && h[0] == '>';
    right_.push_back(right);
    headers_.push_back(right ? h.substr(1) : h);
  }
}

void Table::add(std::vector<std::string> row) {
  row.resize(headers_.size());
  rows_.push_back(std::move(row));
}

std::string Table::render(const std::string& indent) const {
  std::vector<size_t> width(headers_.size(), 0);
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = display_width(headers_[c]);
    for (const auto& r : rows_) width[c] = std::max(width[c], display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = indent;
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - display_width(cells[c]);
      const bool last = c + 1 == cells.size();
      if (right_[c]) out += std::string(pad, ' ') + cells[c];
      else out += cells[c] + (last ? "" : std::string(pad, ' '));
      if (!last) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(headers_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  out += line(rule);
  for (const auto& r : rows_) out += line(r);
  return out;
}

}  // namespace trainplan::cli
