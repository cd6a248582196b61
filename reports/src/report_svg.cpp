// The report's SVG charts. See report_svg.hpp.
//
// Layout of every chart (pixels): the title on top, then the legend (wrapping rows), then the
// plot area with the y axis on the left and the x axis below. Text widths are estimated at
// kCharPx per character of the 12 px sans-serif font (no font files: the viewer's default).
#include "trainplan/reports/report_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "trainplan/core/error.hpp"

namespace trainplan::reports::svg {
namespace {

constexpr double kCharPx = 6.8;       // estimated width of one character of 12 px text
constexpr double kTitlePx = 30;       // title band
constexpr double kLegendRowPx = 18;
constexpr double kBottomPx = 46;      // x tick labels + x axis label
constexpr double kRightPx = 24;
constexpr double kBarRowPx = 26;      // bar chart: row pitch
constexpr double kGanttRowPx = 18;    // Gantt: row pitch
constexpr double kMarkerRowPx = 13;   // a row of marker labels above the plot
// Okabe & Ito (2008) colour-blind-safe palette, three colours of Paul Tol's "muted" scheme (wine,
// teal, indigo last), greys; yellow late (low contrast on white).
constexpr std::array<std::string_view, 14> kPalette = {"#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7",
                                                        "#56b4e9", "#882255", "#44aa99", "#999999", "#7f5f00",
                                                        "#000000", "#f0e442", "#dddddd", "#332288"};

// Fixed-point coordinates: deterministic and short; -0.00 is written as 0.00.
std::string n2(double v) {
  if (std::fabs(v) < 0.005) v = 0;
  return fmt::format("{:.2f}", v);
}

double text_px(std::string_view s) { return static_cast<double>(s.size()) * kCharPx; }

double transform(Scale s, double v) {
  switch (s) {
    case Scale::linear: return v;
    case Scale::log2: return std::log2(v);
    case Scale::log10: return std::log10(v);
  }
  return v;
}

// A resolved axis: range, ticks and the mapping to pixels.
struct Mapped {
  Scale scale = Scale::linear;
  double lo = 0, hi = 1;       // data range
  double p_lo = 0, p_hi = 1;   // pixels of lo and hi
  std::vector<double> ticks;
  Format format;

  double px(double v) const {
    const double a = transform(scale, lo), b = transform(scale, hi);
    const double t = b > a ? (transform(scale, v) - a) / (b - a) : 0.5;
    return p_lo + t * (p_hi - p_lo);
  }
  std::string label(double v) const { return format(v); }
};

Format default_format(const std::vector<double>& ticks) {
  double max_abs = 0, step = 0;
  for (double t : ticks) max_abs = std::max(max_abs, std::fabs(t));
  if (ticks.size() >= 2) step = std::fabs(ticks[1] - ticks[0]);
  if (max_abs >= 1e4 || step == 0) return [](double v) { return compact_number(v); };
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
  return [decimals](double v) {
    if (std::fabs(v) < 1e-12) v = 0;
    return fmt::format("{:.{}f}", v, decimals);
  };
}

// Range and ticks of `axis` over `values` (non-finite values and, on log axes, non-positive
// ones are ignored).
Mapped resolve(const Axis& axis, const std::vector<double>& values) {
  Mapped m;
  m.scale = axis.scale;
  const bool log = axis.scale != Scale::linear;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!std::isfinite(v) || (log && v <= 0)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (axis.min) lo = *axis.min;
  if (axis.max) hi = *axis.max;
  if (!std::isfinite(lo) || !std::isfinite(hi)) {  // no data
    lo = log ? 1 : 0;
    hi = log ? 10 : 1;
  }
  if (!log && axis.zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  if (log) {
    m.ticks = log_ticks(lo, hi, axis.scale);
  } else {
    m.ticks = nice_ticks(lo, hi);
  }
  m.lo = axis.min ? *axis.min : std::min(lo, m.ticks.front());
  m.hi = axis.max ? *axis.max : std::max(hi, m.ticks.back());
  if (axis.min || axis.max) {
    std::vector<double> inside;
    for (double t : m.ticks)
      if (t >= m.lo - 1e-12 * std::fabs(m.lo) && t <= m.hi + 1e-12 * std::fabs(m.hi)) inside.push_back(t);
    m.ticks = inside;
  }
  m.format = axis.format ? axis.format : default_format(m.ticks);
  return m;
}

// Legend entries flow left to right and wrap: the (x, y offset) of each entry.
std::vector<std::pair<double, double>> legend_layout(const std::vector<std::string>& names, double width_px) {
  std::vector<std::pair<double, double>> places;
  double x = 12, y = 0;
  for (const auto& name : names) {
    const double w = 18 + text_px(name) + 14;
    if (x + w > width_px - 8 && x > 12) {
      x = 12;
      y += kLegendRowPx;
    }
    places.emplace_back(x, y);
    x += w;
  }
  return places;
}

double legend_height_px(const std::vector<std::string>& names, double width_px) {
  return names.empty() ? 0 : legend_layout(names, width_px).back().second + kLegendRowPx;
}

// The document being written.
class Writer {
 public:
  Writer(const Frame& f, double height) : frame_(f) {
    TP_ASSERT(!f.id.empty());
    out_ += fmt::format(
        "<svg class=\"chart\" id=\"{0}\" role=\"img\" aria-labelledby=\"{0}-title {0}-desc\" width=\"{1}\" height=\"{2}\" "
        "viewBox=\"0 0 {1} {2}\" style=\"font-family:sans-serif;font-size:12px\">\n",
        escape(f.id), n2(f.width_px), n2(height));
    out_ += fmt::format("<title id=\"{}-title\">{}</title>\n", escape(f.id), escape(f.title));
    out_ += fmt::format("<desc id=\"{}-desc\">{}</desc>\n", escape(f.id), escape(f.description));
    out_ += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", n2(f.width_px), n2(height));
    text(12, 20, f.title, "start", "font-size:14px;font-weight:bold");
  }

  void text(double x, double y, std::string_view s, std::string_view anchor = "start", std::string_view style = "",
            std::string_view transform_attr = "") {
    out_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\"", n2(x), n2(y), anchor);
    if (!style.empty()) out_ += fmt::format(" style=\"{}\"", style);
    if (!transform_attr.empty()) out_ += fmt::format(" transform=\"{}\"", transform_attr);
    out_ += fmt::format(">{}</text>\n", escape(s));
  }
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1, bool dashed = false) {
    out_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n", n2(x1), n2(y1),
                        n2(x2), n2(y2), stroke, n2(width), dashed ? " stroke-dasharray=\"4 3\"" : "");
  }
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view tooltip = "") {
    out_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"", n2(x), n2(y), n2(std::max(w, 0.0)),
                        n2(std::max(h, 0.0)), fill);
    close_with_tooltip("rect", tooltip);
  }
  void circle(double cx, double cy, double r, std::string_view fill, std::string_view stroke, std::string_view tooltip = "",
              double opacity = 1) {
    out_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\" stroke=\"{}\"", n2(cx), n2(cy), n2(r), fill, stroke);
    if (opacity < 1) out_ += fmt::format(" fill-opacity=\"{}\"", n2(opacity));
    close_with_tooltip("circle", tooltip);
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, std::string_view stroke, double width) {
    if (pts.size() < 2) return;
    out_ += "<polyline fill=\"none\" stroke=\"";
    out_ += stroke;
    out_ += fmt::format("\" stroke-width=\"{}\" points=\"", n2(width));
    for (size_t i = 0; i < pts.size(); ++i) out_ += fmt::format("{}{},{}", i ? " " : "", n2(pts[i].first), n2(pts[i].second));
    out_ += "\"/>\n";
  }
  void raw(std::string_view s) { out_ += s; }

  // Legend entries flowing left to right under the title, wrapping; returns its height.
  // `lines[i]`: draw entry i as a line instead of a square.
  double legend(const std::vector<std::string>& names, const std::vector<std::string>& colors, const std::vector<bool>& lines,
                double y0) {
    const auto places = legend_layout(names, frame_.width_px);
    for (size_t i = 0; i < names.size(); ++i) {
      const double x = places[i].first, y = y0 + places[i].second;
      if (i < lines.size() && lines[i]) line(x, y - 4, x + 12, y - 4, colors[i], 2);
      else rect(x, y - 10, 12, 12, colors[i]);
      text(x + 17, y, names[i]);
    }
    return legend_height_px(names, frame_.width_px);
  }

  std::string finish() {
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  // Ends the open element `tag`, with a <title> child (the tooltip) when there is one.
  void close_with_tooltip(std::string_view tag, std::string_view tooltip) {
    if (tooltip.empty()) out_ += "/>\n";
    else out_ += fmt::format("><title>{}</title></{}>\n", escape(tooltip), tag);
  }

  const Frame& frame_;
  std::string out_;
};

// Plot rectangle.
struct Box {
  double left = 0, top = 0, right = 0, bottom = 0;
};

// Vertical grid, ticks and labels of an x axis along the box's bottom.
void draw_x_axis(Writer& w, const Mapped& x, const Box& b, const std::string& label) {
  for (double t : x.ticks) {
    const double px = x.px(t);
    w.line(px, b.top, px, b.bottom, "#e6e6e6");
    w.line(px, b.bottom, px, b.bottom + 4, "#333333");
    w.text(px, b.bottom + 16, x.label(t), "middle");
  }
  w.line(b.left, b.bottom, b.right, b.bottom, "#333333");
  w.text((b.left + b.right) / 2, b.bottom + 36, label, "middle");
}

void draw_y_axis(Writer& w, const Mapped& y, const Box& b, const std::string& label) {
  for (double t : y.ticks) {
    const double py = y.px(t);
    w.line(b.left, py, b.right, py, "#e6e6e6");
    w.line(b.left - 4, py, b.left, py, "#333333");
    w.text(b.left - 7, py + 4, y.label(t), "end");
  }
  w.line(b.left, b.top, b.left, b.bottom, "#333333");
  const double cx = 14, cy = (b.top + b.bottom) / 2;
  w.text(cx, cy, label, "middle", "", fmt::format("rotate(-90 {} {})", n2(cx), n2(cy)));
}

// Marker labels sit in a band above the plot, in rows: each label takes the first row where
// it does not overlap a label already there.
struct MarkerRows {
  std::vector<int> row;  // per marker; -1: not drawn (non-finite x)
  int rows = 0;
  double band_px() const { return rows > 0 ? rows * kMarkerRowPx + 4 : 0; }
};

// The label's horizontal extent: right of the line, or left of it near the plot's right end.
std::pair<double, double> marker_label_span(const Mapped& x, const Box& b, const Marker& m) {
  const double px = x.px(m.x), w = text_px(m.label) * 11.0 / 12.0;
  return px > b.left + 0.7 * (b.right - b.left) ? std::make_pair(px - 4 - w, px - 4) : std::make_pair(px + 4, px + 4 + w);
}

MarkerRows layout_markers(const Mapped& x, const Box& b, const std::vector<Marker>& markers) {
  MarkerRows out;
  std::vector<std::vector<std::pair<double, double>>> taken;
  for (const auto& m : markers) {
    if (!std::isfinite(m.x)) {
      out.row.push_back(-1);
      continue;
    }
    const auto span = marker_label_span(x, b, m);
    size_t r = 0;
    for (; r < taken.size(); ++r) {
      const bool clash = std::any_of(taken[r].begin(), taken[r].end(), [&](const auto& t) {
        return span.first < t.second + 6 && t.first < span.second + 6;
      });
      if (!clash) break;
    }
    if (r == taken.size()) taken.emplace_back();
    taken[r].push_back(span);
    out.row.push_back(static_cast<int>(r));
  }
  out.rows = static_cast<int>(taken.size());
  return out;
}

void draw_markers(Writer& w, const Mapped& x, const Box& b, const std::vector<Marker>& markers, const MarkerRows& rows) {
  for (size_t i = 0; i < markers.size(); ++i) {
    if (rows.row[i] < 0) continue;
    const auto& m = markers[i];
    const double px = x.px(m.x);
    const double py = b.top - rows.band_px() + kMarkerRowPx * (rows.row[i] + 1) - 2;
    w.line(px, py + 3, px, b.bottom, "#333333", 1.2, m.dashed);
    w.text(marker_label_span(x, b, m).first, py, m.label, "start", "font-size:11px");
  }
}

// Width of the y axis band for these tick labels (+ rotated axis label).
double y_band_px(const Mapped& y) {
  double widest = 0;
  for (double t : y.ticks) widest = std::max(widest, text_px(y.label(t)));
  return 30 + widest + 8;
}

std::string color_of(int index, int fallback) { return std::string(palette_color(index >= 0 ? index : fallback)); }

std::vector<std::string> category_colors(const std::vector<std::string>& categories, const std::vector<int>& colors) {
  std::vector<std::string> out;
  for (size_t i = 0; i < categories.size(); ++i)
    out.push_back(color_of(i < colors.size() ? colors[i] : -1, static_cast<int>(i)));
  return out;
}

void no_data(Writer& w, const Box& b) {
  w.text((b.left + b.right) / 2, (b.top + b.bottom) / 2, "no data", "middle", "fill:#666666");
}

// Shared frame of the x-y charts: legend, marker label band, axes.
struct XY {
  Box box;
  Mapped x, y;
  MarkerRows marker_rows;
};
XY xy_frame(Writer& w, const Frame& f, const Axis& xa, const Axis& ya, const std::vector<double>& xs,
            const std::vector<double>& ys, const std::vector<std::string>& names, const std::vector<std::string>& colors,
            const std::vector<bool>& lines, const std::vector<Marker>& markers = {}) {
  XY r;
  const double legend_h = w.legend(names, colors, lines, kTitlePx + 12);
  r.y = resolve(ya, ys);
  r.box.left = y_band_px(r.y);
  r.box.right = f.width_px - kRightPx;
  r.x = resolve(xa, xs);
  r.x.p_lo = r.box.left;
  r.x.p_hi = r.box.right;
  r.marker_rows = layout_markers(r.x, r.box, markers);
  r.box.top = kTitlePx + legend_h + 14 + r.marker_rows.band_px();
  r.box.bottom = f.height_px - kBottomPx;
  r.y.p_lo = r.box.bottom;
  r.y.p_hi = r.box.top;
  draw_y_axis(w, r.y, r.box, ya.label);
  draw_x_axis(w, r.x, r.box, xa.label);
  return r;
}

bool usable(const Axis& a, double v) { return std::isfinite(v) && (a.scale == Scale::linear || v > 0); }

std::vector<Point> usable_sorted(const Axis& xa, const Axis& ya, std::vector<Point> pts) {
  std::erase_if(pts, [&](const Point& p) { return !usable(xa, p.x) || !usable(ya, p.y); });
  std::stable_sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  return pts;
}

}  // namespace

std::string_view palette_color(int index) {
  const int n = static_cast<int>(kPalette.size());
  return kPalette[static_cast<size_t>(((index % n) + n) % n)];
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string compact_number(double v) {
  if (!std::isfinite(v)) return "n/a";
  const double a = std::fabs(v);
  struct Suffix { double scale; const char* name; };
  static constexpr Suffix kSuffixes[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
  double m = v;
  const char* suffix = "";
  for (const auto& s : kSuffixes) {
    if (a >= s.scale * 0.9995) {
      m = v / s.scale;
      suffix = s.name;
      break;
    }
  }
  const double am = std::fabs(m);
  const int decimals = am == 0 ? 0 : std::clamp(2 - static_cast<int>(std::floor(std::log10(am) + 1e-9)), 0, 6);
  std::string s = fmt::format("{:.{}f}", m, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s + suffix;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  TP_ASSERT(std::isfinite(lo) && std::isfinite(hi) && target >= 2);
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-300 || hi - lo < 1e-12 * std::max(std::fabs(lo), std::fabs(hi))) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / (target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    step = f * mag;
    if (step >= raw) break;
  }
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (long k = 0;; ++k) {
    double t = first + static_cast<double>(k) * step;
    if (std::fabs(t) < step * 1e-9) t = 0;
    ticks.push_back(t);
    if (t >= last - step * 1e-9) break;
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi, Scale scale) {
  TP_ASSERT(scale != Scale::linear && lo > 0 && hi >= lo);
  std::vector<double> ticks;
  if (scale == Scale::log2) {
    const double a = std::floor(std::log2(lo) + 1e-9), b = std::ceil(std::log2(hi) - 1e-9);
    for (double e = a; e <= b; ++e) ticks.push_back(std::pow(2.0, e));
    if (ticks.size() == 1) ticks.push_back(ticks.front() * 2);
    return ticks;
  }
  const double a = std::floor(std::log10(lo) + 1e-9), b = std::ceil(std::log10(hi) - 1e-9);
  // 1-2-5 steps from the largest one <= lo to the smallest one >= hi.
  for (double e = a; e < b; ++e)
    for (double f : {1.0, 2.0, 5.0}) ticks.push_back(f * std::pow(10.0, e));
  ticks.push_back(std::pow(10.0, b));
  size_t first = 0, last = ticks.size() - 1;
  for (size_t i = 0; i < ticks.size(); ++i)
    if (ticks[i] <= lo * (1 + 1e-9)) first = i;
  for (size_t i = ticks.size(); i-- > 0;)
    if (ticks[i] >= hi * (1 - 1e-9)) last = i;
  ticks = std::vector<double>(ticks.begin() + static_cast<long>(first), ticks.begin() + static_cast<long>(last) + 1);
  if (ticks.size() > 10) {
    // Powers of ten only, thinned to at most ~10 labels.
    ticks.clear();
    const double every = std::ceil((b - a + 1) / 10.0);
    for (double e = a; e < b + every; e += every) ticks.push_back(std::pow(10.0, e));
  }
  if (ticks.size() == 1) ticks.push_back(ticks.front() * 2);
  return ticks;
}

std::vector<Bin> histogram_bins(const std::vector<double>& samples, int bins) {
  TP_ASSERT(bins >= 1);
  std::vector<Bin> out;
  if (samples.empty()) return out;
  const auto [mn, mx] = std::minmax_element(samples.begin(), samples.end());
  const double lo = *mn, hi = *mx;
  if (!(hi > lo)) return {{lo, hi, samples.size()}};
  const double width = (hi - lo) / bins;
  out.resize(static_cast<size_t>(bins));
  for (int i = 0; i < bins; ++i) {
    out[static_cast<size_t>(i)].lo = lo + width * i;
    out[static_cast<size_t>(i)].hi = i + 1 == bins ? hi : lo + width * (i + 1);
  }
  for (double v : samples) {
    auto k = static_cast<long>(std::floor((v - lo) / width));
    k = std::clamp<long>(k, 0, bins - 1);
    ++out[static_cast<size_t>(k)].count;
  }
  return out;
}

// ---- charts ----------------------------------------------------------------------------------

std::string scatter_chart(const ScatterChart& c) {
  Writer w(c.frame, c.frame.height_px);
  std::vector<double> xs, ys;
  std::vector<std::string> names, colors;
  std::vector<bool> lines;
  for (size_t i = 0; i < c.series.size(); ++i) {
    names.push_back(c.series[i].name);
    colors.push_back(color_of(c.series[i].color, static_cast<int>(i)));
    lines.push_back(false);
    for (const auto& p : c.series[i].points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
  }
  if (!c.frontier.points.empty()) {
    names.push_back(c.frontier.name);
    colors.push_back("#333333");
    lines.push_back(true);
  }
  XY g = xy_frame(w, c.frame, c.x, c.y, xs, ys, names, colors, lines);
  if (xs.empty()) no_data(w, g.box);
  std::vector<std::pair<double, double>> line_pts;
  for (const auto& p : usable_sorted(c.x, c.y, c.frontier.points)) line_pts.emplace_back(g.x.px(p.x), g.y.px(p.y));
  w.polyline(line_pts, "#333333", 1.5);
  for (size_t i = 0; i < c.series.size(); ++i)
    for (const auto& p : c.series[i].points)
      if (usable(c.x, p.x) && usable(c.y, p.y)) w.circle(g.x.px(p.x), g.y.px(p.y), 4, colors[i], "none", p.label, 0.8);
  for (const auto& p : c.highlighted) {
    if (!usable(c.x, p.x) || !usable(c.y, p.y)) continue;
    const double px = g.x.px(p.x), py = g.y.px(p.y);
    w.circle(px, py, 7.5, "none", "#000000");
    w.text(px + 10, py - 6, p.label, "start", "font-size:11px;font-weight:bold");
  }
  return w.finish();
}

std::string line_chart(const LineChart& c) {
  Writer w(c.frame, c.frame.height_px);
  std::vector<double> xs, ys;
  std::vector<std::string> names, colors;
  for (size_t i = 0; i < c.series.size(); ++i) {
    names.push_back(c.series[i].name);
    colors.push_back(color_of(c.series[i].color, static_cast<int>(i)));
    for (const auto& p : c.series[i].points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
  }
  for (const auto& m : c.markers) xs.push_back(m.x);
  XY g = xy_frame(w, c.frame, c.x, c.y, xs, ys, names, colors, std::vector<bool>(names.size(), true), c.markers);
  if (ys.empty()) no_data(w, g.box);
  draw_markers(w, g.x, g.box, c.markers, g.marker_rows);
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto pts = usable_sorted(c.x, c.y, c.series[i].points);
    std::vector<std::pair<double, double>> line_pts;
    for (const auto& p : pts) line_pts.emplace_back(g.x.px(p.x), g.y.px(p.y));
    w.polyline(line_pts, colors[i], 2);
    for (const auto& p : pts) w.circle(g.x.px(p.x), g.y.px(p.y), 3.5, colors[i], "#ffffff", p.label);
  }
  return w.finish();
}

std::string bar_chart(const BarChart& c) {
  const std::vector<std::string> colors = category_colors(c.categories, c.colors);
  double label_w = 0, note_w = 0;
  std::vector<double> xs = {0.0};
  for (const auto& r : c.rows) {
    label_w = std::max(label_w, text_px(r.label));
    note_w = std::max(note_w, text_px(r.note));
    double sum = 0;
    for (double v : r.values) sum += std::max(0.0, v);
    xs.push_back(sum);
    if (r.whisker_to) xs.push_back(*r.whisker_to);
  }
  for (const auto& m : c.markers) xs.push_back(m.x);
  // Columns first (they fix the x mapping and so the marker label rows), then rows.
  Box b;
  b.left = std::min(12 + label_w + 10, c.frame.width_px * 0.4);
  b.right = c.frame.width_px - kRightPx - std::min(note_w + 6, c.frame.width_px * 0.25);
  Axis xa = c.x;
  xa.zero = true;
  Mapped x = resolve(xa, xs);
  x.p_lo = b.left;
  x.p_hi = b.right;
  const MarkerRows marker_rows = layout_markers(x, b, c.markers);
  b.top = kTitlePx + legend_height_px(c.categories, c.frame.width_px) + 16 + marker_rows.band_px();
  const double height = c.frame.height_px > 0
                            ? c.frame.height_px
                            : b.top + kBarRowPx * static_cast<double>(std::max<size_t>(c.rows.size(), 1)) + 4 + kBottomPx;
  b.bottom = height - kBottomPx;

  Writer w(c.frame, height);
  w.legend(c.categories, colors, {}, kTitlePx + 12);
  draw_x_axis(w, x, b, c.x.label);
  if (c.rows.empty()) no_data(w, b);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const auto& r = c.rows[i];
    const double y = b.top + kBarRowPx * static_cast<double>(i) + 3, h = kBarRowPx - 8;
    w.text(b.left - 8, y + h / 2 + 4, r.label, "end");
    double acc = 0;
    for (size_t k = 0; k < r.values.size() && k < c.categories.size(); ++k) {
      const double v = std::max(0.0, r.values[k]);
      if (v <= 0) continue;
      const double x0 = x.px(acc), x1 = x.px(acc + v);
      w.rect(x0, y, x1 - x0, h, colors[k], fmt::format("{}: {} {}", r.label, c.categories[k], x.label(v)));
      acc += v;
    }
    double end_px = x.px(acc);
    if (r.whisker_to && *r.whisker_to > acc) {
      const double xe = x.px(*r.whisker_to);
      w.line(end_px, y + h / 2, xe, y + h / 2, "#333333", 1.2);
      w.line(xe, y + 3, xe, y + h - 3, "#333333", 1.2);
      end_px = xe;
    }
    if (!r.note.empty()) w.text(end_px + 5, y + h / 2 + 4, r.note, "start", "font-size:11px");
  }
  draw_markers(w, x, b, c.markers, marker_rows);
  return w.finish();
}

std::string histogram_chart(const HistogramChart& c) {
  Writer w(c.frame, c.frame.height_px);
  std::vector<double> kept;
  size_t clipped = 0;
  double clipped_max = 0;
  for (double v : c.samples) {
    if (c.clip_above && v > *c.clip_above) {
      clipped_max = clipped++ ? std::max(clipped_max, v) : v;
    } else {
      kept.push_back(v);
    }
  }
  const std::vector<Bin> bins = histogram_bins(kept, c.bins);
  std::vector<double> xs, ys = {0.0};
  for (const auto& bin : bins) {
    xs.push_back(bin.lo);
    xs.push_back(bin.hi);
    ys.push_back(static_cast<double>(bin.count));
  }
  for (const auto& m : c.markers) xs.push_back(m.x);
  // A single bin of width 0 (all samples equal): give it a visible width.
  double single_w = 0;
  if (bins.size() == 1 && bins.front().hi == bins.front().lo) {
    single_w = std::max(std::fabs(bins.front().lo) * 0.01, 1e-9);
    xs.push_back(bins.front().lo - 5 * single_w);
    xs.push_back(bins.front().lo + 5 * single_w);
  }
  Axis ya{.label = c.y_label, .scale = Scale::linear, .format = {}, .min = {}, .max = {}, .zero = true};
  if (!bins.empty()) {
    size_t most = 0;
    for (const auto& bin : bins) most = std::max(most, bin.count);
    if (most < 5) ya.max = 5.0;  // integer ticks for small counts
  }
  XY g = xy_frame(w, c.frame, c.x, ya, xs, ys, {}, {}, {}, c.markers);
  if (bins.empty()) no_data(w, g.box);
  const std::string color = color_of(c.color, 0);
  for (const auto& bin : bins) {
    if (bin.count == 0) continue;
    double x0 = g.x.px(bin.lo), x1 = g.x.px(bin.hi);
    if (single_w > 0) {
      x0 = g.x.px(bin.lo - single_w / 2);
      x1 = g.x.px(bin.lo + single_w / 2);
    }
    const double y1 = g.y.px(static_cast<double>(bin.count));
    w.rect(x0 + 0.5, y1, std::max(x1 - x0 - 1, 1.0), g.y.px(0) - y1, color,
           fmt::format("{} to {}: {} {}", g.x.label(bin.lo), g.x.label(bin.hi), bin.count, c.y_label));
  }
  draw_markers(w, g.x, g.box, c.markers, g.marker_rows);
  if (clipped > 0)
    w.text(g.box.right - 4, g.box.top + 14,
           fmt::format("{} {} above {} (up to {}) not drawn", clipped, c.y_label, g.x.label(*c.clip_above), g.x.label(clipped_max)),
           "end", "font-size:11px;fill:#444444");
  return w.finish();
}

std::string gantt_chart(const GanttChart& c) {
  const std::vector<std::string> colors = category_colors(c.categories, c.colors);
  double label_w = 0;
  for (const auto& r : c.rows) label_w = std::max(label_w, text_px(r.label));
  const double top = kTitlePx + legend_height_px(c.categories, c.frame.width_px) + 16;
  const double height = c.frame.height_px > 0
                            ? c.frame.height_px
                            : top + kGanttRowPx * static_cast<double>(std::max<size_t>(c.rows.size(), 1)) + 4 + kBottomPx;
  Writer w(c.frame, height);
  w.legend(c.categories, colors, {}, kTitlePx + 12);
  std::vector<double> xs = {0.0};
  for (const auto& r : c.rows)
    for (const auto& bar : r.bars) xs.push_back(bar.end_s);
  Box b;
  b.top = top;
  b.bottom = height - kBottomPx;
  b.left = std::min(12 + label_w + 10, c.frame.width_px * 0.35);
  b.right = c.frame.width_px - kRightPx;
  Axis xa = c.x;
  xa.zero = true;
  Mapped x = resolve(xa, xs);
  x.p_lo = b.left;
  x.p_hi = b.right;
  draw_x_axis(w, x, b, c.x.label);
  if (c.rows.empty()) no_data(w, b);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const auto& r = c.rows[i];
    const double y = b.top + kGanttRowPx * static_cast<double>(i) + 2, h = kGanttRowPx - 5;
    if (i % 2 == 1) w.rect(b.left, y - 2, b.right - b.left, kGanttRowPx, "#f4f4f4");
    w.text(b.left - 8, y + h / 2 + 4, r.label, "end", "font-size:11px");
    std::vector<GanttBar> bars = r.bars;
    std::stable_sort(bars.begin(), bars.end(), [](const GanttBar& a, const GanttBar& b2) { return a.start_s < b2.start_s; });
    // Merge runs of one category whose gaps are below half a pixel.
    size_t k = 0;
    while (k < bars.size()) {
      const GanttBar& first = bars[k];
      double x0 = x.px(first.start_s), x1 = x.px(first.end_s);
      size_t j = k + 1;
      while (j < bars.size() && bars[j].category == first.category && x.px(bars[j].start_s) - x1 < 0.5) {
        x1 = std::max(x1, x.px(bars[j].end_s));
        ++j;
      }
      const size_t merged = j - k;
      const GanttBar& last = bars[j - 1];
      std::string tip = merged == 1 ? fmt::format("{}: {} to {}", first.label, x.label(first.start_s), x.label(first.end_s))
                                    : fmt::format("{} .. {} ({} tasks): {} to {}", first.label, last.label, merged,
                                                  x.label(first.start_s), x.label(std::max(first.end_s, last.end_s)));
      const int cat = std::clamp(first.category, 0, std::max(0, static_cast<int>(colors.size()) - 1));
      w.rect(x0, y, std::max(x1 - x0, 0.5), h, colors.empty() ? std::string(palette_color(0)) : colors[static_cast<size_t>(cat)], tip);
      k = j;
    }
  }
  return w.finish();
}

}  // namespace trainplan::reports::svg
