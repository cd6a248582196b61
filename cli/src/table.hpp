// A plain-text table for terminal output: columns sized to their widest cell, numbers
// right-aligned (columns whose header starts with '>' are right-aligned; the '>' is dropped).
//
//   Table t({"instance", ">GPUs", ">$/h"});
//   t.add({"p4d.24xlarge", "8", "21.96"});
//   std::fputs(t.render().c_str(), stdout);
#pragma once

#include <string>
#include <vector>

namespace trainplan::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add(std::vector<std::string> row);
  std::string render(const std::string& indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

/// Display width of UTF-8 text (code points; all our symbols are single-width).
size_t display_width(const std::string& s);

}  // namespace trainplan::cli
