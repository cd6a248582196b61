// The report's SVG charts: ticks, bins, coordinates, well-formedness, merging, determinism.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "test_support.hpp"
#include "trainplan/core/random.hpp"
#include "trainplan/reports/report_svg.hpp"

using namespace trainplan;
using namespace trainplan::reports;

namespace {

// A small XML well-formedness check: tags nest and close, attributes are quoted, text holds no
// raw '<' or unescaped '&'. Returns "" or the first problem.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < doc.size()) {
    if (doc[i] == '&') {
      static const std::regex entity("^&(amp|lt|gt|quot|#39);");
      if (!std::regex_search(doc.begin() + static_cast<long>(i), doc.end(), entity)) return "bare & at " + std::to_string(i);
      ++i;
      continue;
    }
    if (doc[i] != '<') {
      if (doc[i] == '>') return "bare > at " + std::to_string(i);
      ++i;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unclosed tag";
    std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find(' '));
    // Attributes: name="value" pairs only.
    static const std::regex attrs(R"re(^[a-zA-Z][\w:-]*(\s+[a-zA-Z][\w:-]*="[^"<>]*")*\s*$)re");
    if (!std::regex_match(tag, attrs)) return "bad attributes in <" + tag + ">";
    if (!self_closing) stack.push_back(name);
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

// Every value of attribute `attr` on elements `element`, in order.
std::vector<double> attr_values(const std::string& doc, const std::string& element, const std::string& attr) {
  std::vector<double> out;
  const std::regex re("<" + element + R"(\s[^>]*\b)" + attr + R"re(="([-0-9.]+)")re");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

size_t count_of(const std::string& doc, const std::string& needle) {
  size_t n = 0;
  for (size_t p = doc.find(needle); p != std::string::npos; p = doc.find(needle, p + 1)) ++n;
  return n;
}

svg::Frame frame(const std::string& id) { return {id, "A chart <of> \"things\" & more", "What it shows.", 700, 400}; }

}  // namespace

TEST_CASE("report svg: nice ticks are evenly spaced 1-2-5 steps covering the range", "[reports]") {
  Rng rng(11);
  for (int k = 0; k < 500; ++k) {
    const double scale = std::pow(10.0, rng.uniform() * 12 - 6);
    const double lo = (rng.uniform() * 2 - 1) * scale;
    const double hi = lo + rng.uniform() * scale * 3 + 1e-3 * scale;
    const auto t = svg::nice_ticks(lo, hi);
    INFO("lo " << lo << " hi " << hi);
    REQUIRE(t.size() >= 2);
    CHECK(t.size() <= 12);
    CHECK(t.front() <= lo);
    CHECK(t.back() >= hi);
    const double step = t[1] - t[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    CHECK((std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 || std::fabs(mantissa - 5) < 1e-6));
    for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(step).epsilon(1e-6));
    // Whole multiples of the step (a tick at zero when the range crosses it).
    for (double v : t) CHECK(std::fabs(v / step - std::round(v / step)) < 1e-6);
  }
  // A degenerate range still gets two ticks around the value.
  const auto one = svg::nice_ticks(5, 5);
  CHECK(one.front() <= 5);
  CHECK(one.back() >= 5);
  CHECK(one.size() >= 2);
}

TEST_CASE("report svg: log ticks are powers of two or 1-2-5 decades covering the range", "[reports]") {
  const auto p2 = svg::log_ticks(3, 100, svg::Scale::log2);
  CHECK(p2 == std::vector<double>{2, 4, 8, 16, 32, 64, 128});
  const auto p10 = svg::log_ticks(0.3, 40, svg::Scale::log10);
  CHECK(p10 == std::vector<double>{0.2, 0.5, 1, 2, 5, 10, 20, 50});
  const auto wide = svg::log_ticks(2e-3, 5e4, svg::Scale::log10);  // powers of ten only
  CHECK(wide.front() == Approx(1e-3));
  CHECK(wide.back() == Approx(1e5));
  for (size_t i = 1; i < wide.size(); ++i) CHECK(wide[i] / wide[i - 1] == Approx(10));
}

TEST_CASE("report svg: histogram bins hold every sample once, in the bin of its value", "[reports]") {
  Rng rng(5);
  std::vector<double> xs;
  for (int i = 0; i < 2000; ++i) xs.push_back(rng.exponential(0.5) + 3);
  const auto bins = svg::histogram_bins(xs, 25);
  REQUIRE(bins.size() == 25);
  size_t total = 0;
  for (size_t b = 0; b < bins.size(); ++b) {
    total += bins[b].count;
    // Brute-force oracle: samples in [lo, hi) (the last bin closed).
    size_t expect = 0;
    for (double v : xs)
      if (v >= bins[b].lo && (v < bins[b].hi || (b + 1 == bins.size() && v <= bins[b].hi))) ++expect;
    CHECK(bins[b].count == expect);
    if (b > 0) CHECK(bins[b].lo == Approx(bins[b - 1].hi));
  }
  CHECK(total == xs.size());
  CHECK(bins.front().lo == *std::min_element(xs.begin(), xs.end()));
  CHECK(bins.back().hi == *std::max_element(xs.begin(), xs.end()));
  // Equal samples: one bin of width 0; none for no samples.
  const auto same = svg::histogram_bins({2.5, 2.5, 2.5}, 10);
  REQUIRE(same.size() == 1);
  CHECK(same[0].count == 3);
  CHECK(svg::histogram_bins({}, 10).empty());
}

TEST_CASE("report svg: scatter and line charts place marks by the axis mapping", "[reports]") {
  Rng rng(21);
  for (svg::Scale scale : {svg::Scale::linear, svg::Scale::log10}) {
    svg::ScatterChart c;
    c.frame = frame("scatter");
    c.x = {"time (h)", scale, {}, {}, {}, false};
    c.y = {"cost (USD)", svg::Scale::linear, {}, {}, {}, true};
    svg::Series s{"a", {}, -1};
    for (int i = 0; i < 12; ++i) s.points.push_back({std::pow(10.0, rng.uniform() * 3), 10 + 90 * rng.uniform(), "p"});
    c.series.push_back(s);
    const std::string doc = svg::scatter_chart(c);
    REQUIRE(xml_problem(doc).empty());
    const auto cx = attr_values(doc, "circle", "cx"), cy = attr_values(doc, "circle", "cy");
    REQUIRE(cx.size() == s.points.size());
    // Pixel distances are proportional to (transformed) data distances; y grows upward.
    auto tx = [&](double v) { return scale == svg::Scale::linear ? v : std::log10(v); };
    const double kx = (cx[1] - cx[0]) / (tx(s.points[1].x) - tx(s.points[0].x));
    const double ky = (cy[1] - cy[0]) / (s.points[1].y - s.points[0].y);
    CHECK(kx > 0);
    CHECK(ky < 0);
    for (size_t i = 2; i < cx.size(); ++i) {
      CHECK(cx[i] - cx[0] == Approx(kx * (tx(s.points[i].x) - tx(s.points[0].x))).margin(0.02));
      CHECK(cy[i] - cy[0] == Approx(ky * (s.points[i].y - s.points[0].y)).margin(0.02));
    }
  }
  // A forced range maps its ends to the plot's edges: two points at min and max.
  svg::LineChart l;
  l.frame = frame("line");
  l.x = {"GPUs", svg::Scale::log2, {}, 1.0, 64.0, false};
  l.y = {"tokens/s", svg::Scale::linear, {}, 0.0, 100.0, false};
  l.series.push_back({"a", {{1, 0, ""}, {8, 50, ""}, {64, 100, ""}}, 0});
  const std::string doc = svg::line_chart(l);
  const auto cx = attr_values(doc, "circle", "cx");
  REQUIRE(cx.size() == 3);
  CHECK(cx[1] - cx[0] == Approx((cx[2] - cx[0]) / 2).margin(0.01));  // log2(8) is half of log2(64)
  CHECK(count_of(doc, "<polyline") == 1);
}

TEST_CASE("report svg: every chart is well-formed, titled, described, escaped and script-free", "[reports]") {
  Rng rng(3);
  std::vector<std::string> docs;
  svg::ScatterChart sc;
  sc.frame = frame("c1");
  sc.series.push_back({"s<1>", {{1, 2, "a & b"}, {2, 1, "c"}}, -1});
  sc.frontier = {"frontier", {{1, 2, ""}, {2, 1, ""}}, -1};
  sc.highlighted = {{1, 2, "best"}};
  docs.push_back(svg::scatter_chart(sc));
  svg::LineChart lc;
  lc.frame = frame("c2");
  lc.series.push_back({"l", {{1, 1, ""}, {2, 4, ""}}, 2});
  lc.markers = {{1.5, "Young", true}, {1.52, "Daly", true}};
  docs.push_back(svg::line_chart(lc));
  svg::BarChart bc;
  bc.frame = frame("c3");
  bc.frame.height_px = 0;
  bc.categories = {"compute", "comm"};
  bc.rows = {{"plan #1", {1.0, 0.5}, 2.0, "1.5 s"}, {"plan #2", {0.7, 0.1}, {}, ""}};
  bc.markers = {{1.8, "capacity", false}};
  docs.push_back(svg::bar_chart(bc));
  svg::HistogramChart hc;
  hc.frame = frame("c4");
  for (int i = 0; i < 300; ++i) hc.samples.push_back(rng.normal(10, 2));
  hc.samples.push_back(1000);  // a long tail, cut off
  hc.clip_above = 20.0;
  hc.markers = {{10, "p50", true}};
  docs.push_back(svg::histogram_chart(hc));
  svg::GanttChart gc;
  gc.frame = frame("c5");
  gc.frame.height_px = 0;
  gc.categories = {"forward", "backward"};
  gc.rows = {{"rank 0 compute", {{0, 1, 0, "fwd"}, {1, 3, 1, "bwd"}}}};
  docs.push_back(svg::gantt_chart(gc));
  // Empty charts still draw (with a "no data" note).
  svg::LineChart empty;
  empty.frame = frame("c6");
  docs.push_back(svg::line_chart(empty));

  for (const auto& doc : docs) {
    INFO(doc.substr(0, 300));
    CHECK(xml_problem(doc).empty());
    CHECK(doc.rfind("<svg ", 0) == 0);
    CHECK(doc.find("role=\"img\"") != std::string::npos);
    CHECK(count_of(doc, "<title id=") == 1);
    CHECK(count_of(doc, "<desc id=") == 1);
    CHECK(doc.find("A chart &lt;of&gt; &quot;things&quot; &amp; more") != std::string::npos);
    CHECK(doc.find("<script") == std::string::npos);
    CHECK(doc.find("href") == std::string::npos);
    CHECK(doc.find("url(") == std::string::npos);
    CHECK(doc.find("nan") == std::string::npos);
    CHECK(doc.find("inf") == std::string::npos);
  }
  CHECK(docs[0].find("a &amp; b") != std::string::npos);
  CHECK(docs[0].find("s&lt;1&gt;") != std::string::npos);
  CHECK(docs[3].find("1 runs above 20 (up to 1000) not drawn") != std::string::npos);
  CHECK(docs[5].find("no data") != std::string::npos);
  // Stacked bars: segment widths proportional to the values (1.0 : 0.5 on the first row).
  const auto widths = attr_values(docs[2], "rect", "width");
  std::vector<double> bars;
  for (size_t i = 0; i < widths.size(); ++i)
    if (widths[i] < 600 && widths[i] != 12) bars.push_back(widths[i]);  // not the background or legend swatches
  REQUIRE(bars.size() == 4);
  CHECK(bars[0] / bars[1] == Approx(2.0).epsilon(1e-3));
  CHECK(bars[2] / bars[3] == Approx(7.0).epsilon(1e-3));
}

TEST_CASE("report svg: the Gantt chart merges sub-pixel runs of one category only", "[reports]") {
  svg::GanttChart g;
  g.frame = frame("gantt");
  g.frame.height_px = 0;
  g.categories = {"forward", "tp"};
  svg::GanttRow same{"rank 0 compute", {}};
  svg::GanttRow alternating{"rank 0 tp", {}};
  // 1000 back-to-back tasks of 1 us over 1 ms: far below a pixel each.
  for (int i = 0; i < 1000; ++i) {
    same.bars.push_back({i * 1e-3, (i + 1) * 1e-3, 0, fmt::format("fwd {}", i)});
    alternating.bars.push_back({i * 1e-3, (i + 1) * 1e-3, i % 2, fmt::format("t {}", i)});
  }
  // Two wide tasks with a visible gap stay apart.
  svg::GanttRow gap{"rank 1 compute", {{0, 0.3, 0, "a"}, {0.6, 1.0, 0, "b"}}};
  g.rows = {same, alternating, gap};
  const std::string doc = svg::gantt_chart(g);
  REQUIRE(xml_problem(doc).empty());
  CHECK(doc.find("fwd 0 .. fwd 999 (1000 tasks)") != std::string::npos);
  CHECK(count_of(doc, "(1000 tasks)") == 1);
  CHECK(count_of(doc, "<title>t ") == 1000);  // alternating categories are never merged
  CHECK(doc.find("<title>a: ") != std::string::npos);
  CHECK(doc.find("<title>b: ") != std::string::npos);
}

TEST_CASE("report svg: output is deterministic and numbers are fixed-point", "[reports]") {
  auto make = [] {
    Rng rng(99);
    svg::ScatterChart c;
    c.frame = frame("det");
    svg::Series s{"a", {}, -1};
    for (int i = 0; i < 50; ++i) s.points.push_back({rng.uniform() * 1e4, rng.uniform() * 1e-3, ""});
    c.series.push_back(s);
    return svg::scatter_chart(c);
  };
  const std::string a = make(), b = make();
  CHECK(a == b);
  // Coordinates carry exactly two decimals.
  const std::regex coord(R"re(c[xy]="(-?\d+)\.(\d+)")re");
  size_t n = 0;
  for (auto it = std::sregex_iterator(a.begin(), a.end(), coord); it != std::sregex_iterator(); ++it, ++n)
    CHECK((*it)[2].length() == 2);
  CHECK(n == 100);
  // No exponent notation in numbers (colour codes such as #56b4e9 aside).
  const std::string no_colours = std::regex_replace(a, std::regex("#[0-9a-f]{6}"), "#");
  CHECK_FALSE(std::regex_search(no_colours, std::regex(R"(\d[eE][-+]?\d)")));
}

TEST_CASE("report svg: compact numbers keep three significant digits with SI suffixes", "[reports]") {
  CHECK(svg::compact_number(1.5e6) == "1.5M");
  CHECK(svg::compact_number(250000) == "250k");
  CHECK(svg::compact_number(12) == "12");
  CHECK(svg::compact_number(0.35) == "0.35");
  CHECK(svg::compact_number(999.96) == "1k");
  CHECK(svg::compact_number(-2.5e9) == "-2.5B");
  CHECK(svg::compact_number(0) == "0");
  CHECK(svg::compact_number(123456) == "123k");
  CHECK(svg::escape("<a href='x'>&</a>") == "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;");
}
