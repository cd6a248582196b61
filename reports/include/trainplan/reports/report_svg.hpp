// File: trainplan/reports/report_svg.hpp
//
// A small SVG chart library for the reports (report.hpp): scatter with a frontier line, line
// chart with several series, stacked horizontal bars, histogram and Gantt chart. The output is
// an inline <svg> element: no JavaScript, no external fonts or files, inline styles only,
// accessible (<title> and <desc>, text labels on axes and legends, a <title> tooltip per
// mark), and deterministic (coordinates written with two decimals; the same chart gives the
// same bytes).
//
//   svg::LineChart c;
//   c.frame = {.id = "scaling", .title = "Throughput vs GPUs", .description = "..."};
//   c.x = {.label = "GPUs", .scale = svg::Scale::log2};
//   c.y = {.label = "throughput (tokens/s)", .zero = true};
//   c.series.push_back({.name = "p4d.24xlarge", .points = {{8, 1.2e5}, {16, 2.3e5}}});
//   std::string html_fragment = svg::line_chart(c);
//
// Colours come from a fixed colour-blind-safe palette (Okabe & Ito 2008); a series or category
// takes palette entry `color` (or its position when color < 0).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainplan::reports::svg {

enum class Scale { linear, log2, log10 };

/// value -> tick label text ("12", "1.5M", "$40").
using Format = std::function<std::string(double)>;

struct Axis {
  std::string label;               // with its unit: "time to train (h)"
  Scale scale = Scale::linear;
  Format format;                   // empty: compact_number() with decimals from the tick step
  std::optional<double> min;       // forced range; else the data's, widened to whole ticks
  std::optional<double> max;
  bool zero = false;               // linear axes: the range includes 0
};

struct Frame {
  std::string id;                  // unique in the page: prefixes the ids of <title>/<desc>
  std::string title;
  std::string description;         // one or two sentences for screen readers
  double width_px = 760;
  double height_px = 400;          // bar and Gantt charts: 0 = from the number of rows
};

struct Point {
  double x = 0;
  double y = 0;
  std::string label;               // tooltip of the mark
};

struct Series {
  std::string name;
  std::vector<Point> points;
  int color = -1;                  // palette index; < 0: the series' position
};

/// A vertical reference line across the plot at x, labelled at its top.
struct Marker {
  double x = 0;
  std::string label;
  bool dashed = true;
};

struct ScatterChart {
  Frame frame;
  Axis x, y;
  std::vector<Series> series;      // dots
  Series frontier;                 // a line through its points in x order (empty: none)
  std::vector<Point> highlighted;  // circled, with their label written beside them
};

struct LineChart {
  Frame frame;
  Axis x, y;
  std::vector<Series> series;      // lines with a dot per point, in x order
  std::vector<Marker> markers;
};

struct BarRow {
  std::string label;
  std::vector<double> values;      // one per category, stacked left to right (>= 0)
  std::optional<double> whisker_to;  // a thin line from the bar's end to this value (e.g. p90)
  std::string note;                // written right of the bar ("12.3 GiB")
};

struct BarChart {
  Frame frame;
  Axis x;
  std::vector<std::string> categories;
  std::vector<int> colors;         // palette index per category (empty: by position)
  std::vector<BarRow> rows;        // top to bottom
  std::vector<Marker> markers;     // e.g. the GPU's memory capacity
};

struct HistogramChart {
  Frame frame;
  Axis x;
  std::string y_label = "runs";
  std::vector<double> samples;
  int bins = 30;
  /// Samples above this are not binned (a long tail would squeeze the rest into one bin);
  /// the chart says how many and up to what value.
  std::optional<double> clip_above;
  int color = 0;
  std::vector<Marker> markers;     // e.g. p50, p90, the on-demand value
};

struct GanttBar {
  double start_s = 0;
  double end_s = 0;
  int category = 0;
  std::string label;
};

struct GanttRow {
  std::string label;               // "rank 0 compute"
  std::vector<GanttBar> bars;
};

struct GanttChart {
  Frame frame;
  Axis x;                          // time axis; values in the unit of start_s/end_s
  std::vector<std::string> categories;
  std::vector<int> colors;         // palette index per category (empty: by position)
  std::vector<GanttRow> rows;
};

std::string scatter_chart(const ScatterChart& chart);
std::string line_chart(const LineChart& chart);
/// Stacked horizontal bars with a legend of the categories.
std::string bar_chart(const BarChart& chart);
std::string histogram_chart(const HistogramChart& chart);
/// Bars of a row whose gap is under half a pixel and that share a category are drawn as one
/// rectangle (its tooltip counts them), so a step of 100k tasks stays a small drawing.
std::string gantt_chart(const GanttChart& chart);

/// Palette entry `index` (wraps around): "#0072b2", ...
std::string_view palette_color(int index);

/// About `target` evenly spaced "nice" ticks (1, 2 or 5 x 10^k apart) covering [lo, hi]:
/// the first tick <= lo, the last >= hi. lo == hi widens to a unit range around the value.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
/// Ticks of a logarithmic axis covering [lo, hi] (lo > 0): powers of 2 (log2), or 1-2-5 x 10^k
/// (log10; powers of ten only when that would give more than 10 ticks).
std::vector<double> log_ticks(double lo, double hi, Scale scale);

struct Bin {
  double lo = 0;
  double hi = 0;
  size_t count = 0;
};
/// `bins` equal-width bins over [min, max] of the samples (the last bin includes max); one
/// bin of width 0 when all samples are equal; no bins for no samples.
std::vector<Bin> histogram_bins(const std::vector<double>& samples, int bins);

/// "1.5M", "250k", "12", "0.35": 3 significant digits at most, SI suffix k/M/B/T.
std::string compact_number(double v);
/// Escapes &, <, >, " and ' for XML text and attributes.
std::string escape(std::string_view text);

}  // namespace trainplan::reports::svg
