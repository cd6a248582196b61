// Private to the reports: a report's content as a list of blocks (headings, paragraphs,
// bullets, tables, charts), built once and written as Markdown (charts left out) or as one
// self-contained HTML page (charts inline). Shared by the GPU plan report and the classic-ML
// report.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainplan::reports::report_detail {

struct Table {
  std::vector<std::string> headers;  // a leading '>' right-aligns the column (dropped on output)
  std::vector<std::vector<std::string>> rows;
};

struct Block {
  enum class Kind { title, heading, subheading, paragraph, markdown_only, bullets, table, chart };
  Kind kind = Kind::paragraph;
  std::string text;                  // title, headings, paragraphs; chart: its SVG
  std::vector<std::string> items;    // bullets
  Table table;
};

class Doc {
 public:
  void title(std::string t) { add(Block::Kind::title, std::move(t)); }
  void heading(std::string t) { add(Block::Kind::heading, std::move(t)); }
  void subheading(std::string t) { add(Block::Kind::subheading, std::move(t)); }
  void paragraph(std::string t) { add(Block::Kind::paragraph, std::move(t)); }
  void markdown_only(std::string t) { add(Block::Kind::markdown_only, std::move(t)); }
  void chart(std::string svg) { add(Block::Kind::chart, std::move(svg)); }
  void bullets(std::vector<std::string> items) {
    if (items.empty()) return;
    Block b;
    b.kind = Block::Kind::bullets;
    b.items = std::move(items);
    blocks_.push_back(std::move(b));
  }
  void table(Table t) {
    Block b;
    b.kind = Block::Kind::table;
    b.table = std::move(t);
    blocks_.push_back(std::move(b));
  }
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  void add(Block::Kind k, std::string text) {
    Block b;
    b.kind = k;
    b.text = std::move(text);
    blocks_.push_back(std::move(b));
  }
  std::vector<Block> blocks_;
};

/// The document as Markdown: headings, paragraphs, bullets and tables; charts left out.
std::string markdown_of(const Doc& d);
/// The document as one HTML page: inline CSS, inline SVG charts, no scripts.
std::string html_of(const Doc& d);

}  // namespace trainplan::reports::report_detail
