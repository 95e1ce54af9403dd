#include "tools/report/report_html.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace qlens::tools::html {

namespace {

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Pixel coordinates with one decimal: enough for a screen, short in the file.
std::string px(double v) {
  if (!std::isfinite(v)) v = 0;
  std::string s = printf_string("%.1f", v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// "1.23e-4": printf's exponent without its padding and plus sign.
std::string compact_exponent(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", std::max(0, digits), v);
  std::string text = buf;
  const size_t e = text.find('e');
  if (e == std::string::npos) return text;
  return text.substr(0, e) + "e" + std::to_string(std::atoi(text.c_str() + e + 1));
}

// Approximate width of text at the charts' 11 px font (no font metrics in C++).
double text_width(std::string_view text, double per_char = 6.4) {
  size_t chars = 0;
  for (unsigned char c : text) chars += (c & 0xC0) != 0x80;  // count UTF-8 code points
  return per_char * static_cast<double>(chars);
}

struct Rgb {
  double r, g, b;
};

Rgb parse_hex(const std::string& hex) {
  if (hex.size() != 7 || hex[0] != '#') return {0.5, 0.5, 0.5};
  const long v = std::strtol(hex.c_str() + 1, nullptr, 16);
  return {((v >> 16) & 0xFF) / 255.0, ((v >> 8) & 0xFF) / 255.0, (v & 0xFF) / 255.0};
}

std::string to_hex(const Rgb& c) {
  char buf[8];
  const auto byte = [](double x) { return static_cast<int>(std::lround(std::clamp(x, 0.0, 1.0) * 255)); };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", byte(c.r), byte(c.g), byte(c.b));
  return buf;
}

template <size_t N>
std::string ramp(const std::array<const char*, N>& anchors, double t) {
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
  const size_t i = std::min(static_cast<size_t>(t), N - 2);
  const double f = t - static_cast<double>(i);
  const Rgb a = parse_hex(anchors[i]), b = parse_hex(anchors[i + 1]);
  return to_hex({a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)});
}

// Dark text on light cells, white on dark ones.
std::string text_colour_on(const std::string& fill) {
  const Rgb c = parse_hex(fill);
  return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b < 0.5 ? "#ffffff" : "#1a1a1a";
}

std::string svg_open(const std::string& id, double width, double height, const std::string& label) {
  return "<svg class=\"chart\" data-chart=\"" + escape(id) + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         px(width) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " + px(width) + " " + px(height) +
         "\" role=\"img\" aria-label=\"" + escape(label) + "\">";
}

std::string text_at(double x, double y, const std::string& text, const std::string& attributes = "") {
  return "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\"" + (attributes.empty() ? "" : " " + attributes) + ">" +
         escape(text) + "</text>";
}

std::string title_of(const std::string& hover) { return hover.empty() ? "" : "<title>" + escape(hover) + "</title>"; }

// ---- scales and ticks ----

struct Ticks {
  double lo = 0, hi = 1;  // the domain, in scale units (log10 of the value on log axes)
  std::vector<double> at; // tick positions, in scale units
  std::vector<std::string> labels;
};

double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
}

std::string tick_label(double v, double step) {
  if (std::fabs(v) < step * 1e-9) return "0";
  if (step >= 1e5 || step < 1e-3) return compact_exponent(v, 0);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

Ticks linear_ticks(double min, double max, const Axis& axis) {
  if (axis.include_zero) {
    min = std::min(min, 0.0);
    max = std::max(max, 0.0);
  }
  if (!(max > min)) {
    const double pad = min == 0 ? 1 : std::fabs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  Ticks t;
  double step = nice_step((max - min) / 5);
  if (axis.integer) {
    // Whole-number positions (layers) sit inside the frame, half a unit from its edges.
    step = std::max(1.0, std::ceil(step));
    t.lo = std::floor(min) - 0.5;
    t.hi = std::ceil(max) + 0.5;
    for (double v = std::ceil(t.lo / step) * step; v <= t.hi; v += step) {
      if (v == 0) v = 0;  // ceil(-0.5) is -0, which would print as "-0"
      t.at.push_back(v);
      t.labels.push_back(printf_string("%.0f", v));
    }
    return t;
  }
  t.lo = std::floor(min / step) * step;
  t.hi = std::ceil(max / step) * step;
  const long n = std::lround((t.hi - t.lo) / step);
  for (long k = 0; k <= n; ++k) {
    const double v = t.lo + static_cast<double>(k) * step;
    t.at.push_back(v);
    t.labels.push_back(tick_label(v, step));
  }
  return t;
}

std::string decade_label(int exponent) {
  if (exponent >= -2 && exponent <= 3) return tick_label(std::pow(10.0, exponent), std::pow(10.0, std::min(exponent, 0)));
  return "1e" + std::to_string(exponent);
}

Ticks log_ticks(double min, double max) {
  Ticks t;
  int lo = static_cast<int>(std::floor(std::log10(min) + 1e-12));
  int hi = static_cast<int>(std::ceil(std::log10(max) - 1e-12));
  if (hi <= lo) hi = lo + 1;
  t.lo = lo;
  t.hi = hi;
  const int stride = hi - lo > 8 ? 2 : 1;
  for (int e = lo; e <= hi; ++e) {
    if ((e - lo) % stride == 0) {
      t.at.push_back(e);
      t.labels.push_back(decade_label(e));
    }
    // Within two decades, 2x and 5x ticks give the eye something to read by.
    if (hi - lo <= 2 && e < hi)
      for (const int m : {2, 5}) {
        t.at.push_back(e + std::log10(m));
        t.labels.push_back(compact_exponent(m * std::pow(10.0, e), 0));
      }
  }
  return t;
}

struct Scale {
  Ticks ticks;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixels of lo and hi
  bool drawable(double v) const { return std::isfinite(v) && (!log || v > 0); }
  double operator()(double v) const {
    const double u = log ? std::log10(v) : v;
    return p0 + (u - ticks.lo) / (ticks.hi - ticks.lo) * (p1 - p0);
  }
};

Scale make_scale(const Axis& axis, const std::vector<double>& values, double p0, double p1) {
  Scale s;
  s.log = axis.log && axis.categories.empty();
  s.p0 = p0;
  s.p1 = p1;
  if (!axis.categories.empty()) {
    s.ticks.lo = -0.5;
    s.ticks.hi = static_cast<double>(axis.categories.size()) - 0.5;
    for (size_t i = 0; i < axis.categories.size(); ++i) {
      s.ticks.at.push_back(static_cast<double>(i));
      s.ticks.labels.push_back(axis.categories[i]);
    }
    return s;
  }
  double min = std::numeric_limits<double>::infinity(), max = -min;
  for (double v : values)
    if (s.drawable(v)) {
      min = std::min(min, v);
      max = std::max(max, v);
    }
  if (!(min <= max)) {  // nothing to draw: a unit domain keeps the frame sensible
    min = s.log ? 0.1 : 0;
    max = 1;
  }
  s.ticks = s.log ? log_ticks(min, max) : linear_ticks(min, max, axis);
  return s;
}

// ---- the XY chart ----

const char* dash_of(size_t series_index) {
  static const char* kDashes[] = {"", "6 3", "2 3", "8 3 2 3"};
  return kDashes[(series_index / 10) % 4];
}

struct Frame {
  double left, top, width, height;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

std::string draw_axes(const Frame& f, const Scale& x, const Scale& y, const XYChart& c) {
  std::string s = "<g class=\"axes\">";
  s += "<rect class=\"plot-area\" x=\"" + px(f.left) + "\" y=\"" + px(f.top) + "\" width=\"" + px(f.width) +
       "\" height=\"" + px(f.height) + "\"/>";
  for (size_t i = 0; i < y.ticks.at.size(); ++i) {
    const double py = y.p0 + (y.ticks.at[i] - y.ticks.lo) / (y.ticks.hi - y.ticks.lo) * (y.p1 - y.p0);
    s += "<line class=\"grid\" x1=\"" + px(f.left) + "\" x2=\"" + px(f.right()) + "\" y1=\"" + px(py) + "\" y2=\"" +
         px(py) + "\"/>";
    s += text_at(f.left - 6, py + 4, y.ticks.labels[i], "class=\"tick\" text-anchor=\"end\"");
  }
  const bool rotate = !c.x.categories.empty() && x.ticks.at.size() * 60.0 > f.width;
  for (size_t i = 0; i < x.ticks.at.size(); ++i) {
    const double pxv = x.p0 + (x.ticks.at[i] - x.ticks.lo) / (x.ticks.hi - x.ticks.lo) * (x.p1 - x.p0);
    s += "<line class=\"tick-mark\" x1=\"" + px(pxv) + "\" x2=\"" + px(pxv) + "\" y1=\"" + px(f.bottom()) +
         "\" y2=\"" + px(f.bottom() + 5) + "\"/>";
    if (rotate)
      s += "<text class=\"tick\" text-anchor=\"end\" transform=\"translate(" + px(pxv + 3) + "," + px(f.bottom() + 14) +
           ") rotate(-30)\">" + escape(x.ticks.labels[i]) + "</text>";
    else
      s += text_at(pxv, f.bottom() + 18, x.ticks.labels[i], "class=\"tick\" text-anchor=\"middle\"");
  }
  s += "<rect class=\"frame\" x=\"" + px(f.left) + "\" y=\"" + px(f.top) + "\" width=\"" + px(f.width) +
       "\" height=\"" + px(f.height) + "\"/>";
  s += text_at(f.left + f.width / 2, f.bottom() + (rotate ? 52 : 38), c.x.label,
               "class=\"axis-label\" text-anchor=\"middle\"");
  s += "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(14," + px(f.top + f.height / 2) +
       ") rotate(-90)\">" + escape(c.y.label) + "</text>";
  return s + "</g>";
}

std::string draw_bars(const Series& series, size_t bar_index, size_t n_bar_series, const Scale& x, const Scale& y,
                      const std::string& colour) {
  const double unit = std::fabs(x(1) - x(0));  // x of bars is an index or a whole number
  const double band = 0.75 * unit / static_cast<double>(n_bar_series);
  const double base = y.log ? y.p0 : y(std::clamp(0.0, std::min(y.ticks.lo, y.ticks.hi), std::max(y.ticks.lo, y.ticks.hi)));
  std::string s;
  for (const Point& p : series.points) {
    if (!x.drawable(p.x) || !y.drawable(p.y)) continue;
    const double left = x(p.x) - 0.375 * unit + band * static_cast<double>(bar_index);
    const double top = std::min(base, y(p.y)), height = std::fabs(base - y(p.y));
    s += "<rect class=\"bar\" x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"" + px(band) + "\" height=\"" +
         px(std::max(height, 0.5)) + "\" fill=\"" + colour + "\">" + title_of(p.hover) + "</rect>";
  }
  return s;
}

std::string draw_line_and_points(const Series& series, size_t index, const Scale& x, const Scale& y,
                                 const std::string& colour) {
  std::string s;
  if (series.connect) {
    // Points that cannot be drawn (zero on a log axis) break the line.
    std::string d;
    bool pen_down = false;
    for (const Point& p : series.points) {
      if (!x.drawable(p.x) || !y.drawable(p.y)) {
        pen_down = false;
        continue;
      }
      d += (pen_down ? "L" : "M") + px(x(p.x)) + " " + px(y(p.y));
      pen_down = true;
    }
    if (!d.empty()) {
      const std::string dash = dash_of(index);
      // A line without markers carries its value on the line itself.
      const std::string hover =
          !series.markers && !series.points.empty() && !series.points[0].hover.empty() ? series.points[0].hover
                                                                                        : series.name;
      s += "<path class=\"line\" d=\"" + d + "\" stroke=\"" + colour + "\"" +
           (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + ">" + title_of(hover) + "</path>";
    }
  }
  for (const Point& p : series.points) {
    if (!series.markers || !x.drawable(p.x) || !y.drawable(p.y)) continue;
    const double cx = x(p.x), cy = y(p.y);
    if (y.drawable(p.y_low) && y.drawable(p.y_high)) {
      const double y0 = y(p.y_low), y1 = y(p.y_high);
      s += "<path class=\"error-bar\" stroke=\"" + colour + "\" d=\"M" + px(cx) + " " + px(y0) + "V" + px(y1) + "M" +
           px(cx - 4) + " " + px(y0) + "h8M" + px(cx - 4) + " " + px(y1) + "h8\"/>";
    }
    s += "<circle class=\"point\" cx=\"" + px(cx) + "\" cy=\"" + px(cy) + "\" r=\"" + (series.hollow ? "4.5" : "3.5") +
         "\" fill=\"" + (series.hollow ? std::string("#ffffff") : colour) + "\" stroke=\"" + colour + "\">" +
         title_of(p.hover) + "</circle>";
    if (!p.label.empty()) s += text_at(cx + 7, cy - 7, p.label, "class=\"point-label\"");
  }
  return s;
}

std::string draw_legend(const XYChart& c, double left, double top) {
  std::string s = "<g class=\"legend\">";
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& series = c.series[i];
    const std::string colour = series.colour.empty() ? categorical_colour(i) : series.colour;
    const double y = top + 16.0 * static_cast<double>(i);
    if (series.bars) {
      s += "<rect x=\"" + px(left) + "\" y=\"" + px(y - 5) + "\" width=\"18\" height=\"10\" fill=\"" + colour + "\"/>";
    } else {
      if (series.connect) {
        const std::string dash = dash_of(i);
        s += "<line class=\"line\" x1=\"" + px(left) + "\" x2=\"" + px(left + 18) + "\" y1=\"" + px(y) + "\" y2=\"" +
             px(y) + "\" stroke=\"" + colour + "\"" + (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"") + "/>";
      }
      if (series.markers)
        s += "<circle cx=\"" + px(left + 9) + "\" cy=\"" + px(y) + "\" r=\"3.5\" fill=\"" +
             (series.hollow ? std::string("#ffffff") : colour) + "\" stroke=\"" + colour + "\"/>";
    }
    s += text_at(left + 24, y + 4, series.name, "class=\"legend-label\"");
  }
  return s + "</g>";
}

// The y tick labels' widest text decides the left margin.
double left_margin_for(const Scale& y) {
  double widest = 0;
  for (const std::string& label : y.ticks.labels) widest = std::max(widest, text_width(label));
  return std::max(56.0, widest + 34);
}

// ---- grids (heatmap, category grid) ----

struct GridGeometry {
  double left, top, cell_w, cell_h, legend_left;
  bool cell_text;
};

GridGeometry grid_geometry(const std::vector<std::string>& rows, const std::vector<std::string>& columns) {
  GridGeometry g{};
  double widest_row = 0, widest_column = 0;
  for (const std::string& r : rows) widest_row = std::max(widest_row, text_width(r));
  for (const std::string& c : columns) widest_column = std::max(widest_column, text_width(c));
  g.left = widest_row + 36;
  g.top = 44;
  g.cell_w = std::clamp(widest_column + 10, 50.0, 112.0);
  g.cell_h = rows.size() > 40 ? 12 : 22;
  g.cell_text = g.cell_h >= 18;
  g.legend_left = g.left + g.cell_w * static_cast<double>(columns.size()) + 28;
  return g;
}

std::string grid_labels(const GridGeometry& g, const std::vector<std::string>& rows,
                        const std::vector<std::string>& columns, const std::string& row_axis,
                        const std::string& column_axis) {
  std::string s = "<g class=\"axes\">";
  const double grid_w = g.cell_w * static_cast<double>(columns.size());
  const double grid_h = g.cell_h * static_cast<double>(rows.size());
  s += text_at(g.left + grid_w / 2, 14, column_axis, "class=\"axis-label\" text-anchor=\"middle\"");
  for (size_t c = 0; c < columns.size(); ++c) {
    const double cx = g.left + g.cell_w * (static_cast<double>(c) + 0.5);
    s += text_at(cx, g.top - 8, columns[c], "class=\"tick\" text-anchor=\"middle\"");
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const double cy = g.top + g.cell_h * (static_cast<double>(r) + 0.5);
    s += text_at(g.left - 6, cy + 4, rows[r], "class=\"tick\" text-anchor=\"end\"");
  }
  s += "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(14," + px(g.top + grid_h / 2) +
       ") rotate(-90)\">" + escape(row_axis) + "</text>";
  return s + "</g>";
}

std::string cell(const GridGeometry& g, size_t r, size_t c, const std::string& fill, const std::string& text,
                 const std::string& hover, const std::string& text_colour) {
  const double x = g.left + g.cell_w * static_cast<double>(c), y = g.top + g.cell_h * static_cast<double>(r);
  std::string s = "<g class=\"cell\"><rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(g.cell_w) +
                  "\" height=\"" + px(g.cell_h) + "\" fill=\"" + fill + "\"/>";
  if (g.cell_text && !text.empty())
    s += text_at(x + g.cell_w / 2, y + g.cell_h / 2 + 4, text,
                 "class=\"cell-text\" text-anchor=\"middle\" fill=\"" + text_colour + "\"");
  return s + title_of(hover) + "</g>";
}

const char* kNoValueFill = "#ffffff";
const char* kNonPositiveFill = "#d9d9d9";

// The colour scale's range in log10 units, widened to a decade when empty.
std::pair<double, double> log_range(const Heatmap& m) {
  const double low = m.low > 0 && std::isfinite(m.low) ? m.low : 1e-12;
  const double high = m.high > low && std::isfinite(m.high) ? m.high : low * 10;
  return {std::log10(low), std::log10(high)};
}

std::string colour_bar(const Heatmap& m, double left, double top, double height) {
  std::string s = "<g class=\"legend\">" + text_at(left, 14, m.value_label, "class=\"axis-label\"");
  const auto [lo, hi] = log_range(m);
  constexpr int kStripes = 48;
  for (int i = 0; i < kStripes; ++i) {
    const double t = 1.0 - (i + 0.5) / kStripes;  // the top is the highest value
    s += "<rect x=\"" + px(left) + "\" y=\"" + px(top + height * i / kStripes) + "\" width=\"14\" height=\"" +
         px(height / kStripes + 0.6) + "\" fill=\"" + sequential_colour(t) + "\"/>";
  }
  s += "<rect class=\"frame\" x=\"" + px(left) + "\" y=\"" + px(top) + "\" width=\"14\" height=\"" + px(height) + "\"/>";
  const Ticks ticks = log_ticks(std::pow(10.0, lo), std::pow(10.0, hi));
  for (size_t i = 0; i < ticks.at.size(); ++i) {
    if (ticks.at[i] < lo - 1e-9 || ticks.at[i] > hi + 1e-9) continue;
    const double y = top + height * (hi - ticks.at[i]) / (hi - lo);
    s += "<line class=\"tick-mark\" x1=\"" + px(left + 14) + "\" x2=\"" + px(left + 18) + "\" y1=\"" + px(y) +
         "\" y2=\"" + px(y) + "\"/>" + text_at(left + 21, y + 4, ticks.labels[i], "class=\"tick\"");
  }
  const double below = top + height + 16;
  s += "<rect x=\"" + px(left) + "\" y=\"" + px(below) + "\" width=\"14\" height=\"12\" fill=\"" + kNonPositiveFill +
       "\"/>" + text_at(left + 21, below + 10, "≤ 0 (no loss measured)", "class=\"tick\"");
  s += "<rect class=\"frame\" x=\"" + px(left) + "\" y=\"" + px(below + 18) + "\" width=\"14\" height=\"12\" fill=\"" +
       kNoValueFill + "\"/>" + text_at(left + 21, below + 28, "– not probed", "class=\"tick\"");
  return s + "</g>";
}

}  // namespace

// ---- text ----

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

std::string format_number(double v, int significant) {
  if (std::isnan(v)) return "–";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a < 1e-3 || a >= 1e5) return compact_exponent(v, significant - 1);
  const int decimals = std::max(0, significant - 1 - static_cast<int>(std::floor(std::log10(a))));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string format_integer(double v) {
  if (!std::isfinite(v)) return format_number(v);
  const std::string digits = printf_string("%.0f", std::fabs(v));
  std::string out;
  if (v <= -0.5) out += '-';
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_percent(double fraction, int decimals) {
  if (std::isnan(fraction)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%%", decimals, 100 * fraction);
  return buf;
}

std::string format_bytes(double bytes) {
  if (std::isnan(bytes)) return "–";
  if (bytes < 1024) return printf_string("%.0f B", bytes);
  if (bytes < 1024.0 * 1024) return printf_string("%.1f KiB", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024) return printf_string("%.2f MiB", bytes / (1024.0 * 1024));
  return printf_string("%.2f GiB", bytes / (1024.0 * 1024 * 1024));
}

std::string format_with_error(double value, double error) {
  if (std::isnan(error)) return format_number(value);
  return format_number(value) + " ± " + format_number(error, 2);
}

std::string Table::render(const std::string& id) const {
  std::string s = "<div class=\"table-wrap\"><table class=\"data\"" +
                  (id.empty() ? std::string() : " data-table=\"" + escape(id) + "\"") + "><thead><tr>";
  for (const Column& c : columns_) s += (c.numeric ? "<th class=\"num\">" : "<th>") + escape(c.header) + "</th>";
  s += "</tr></thead><tbody>";
  for (const auto& row : rows_) {
    s += "<tr>";
    for (size_t i = 0; i < columns_.size(); ++i) {
      const std::string text = i < row.size() ? row[i] : "";
      s += (columns_[i].numeric ? "<td class=\"num\">" : "<td>") + escape(text) + "</td>";
    }
    s += "</tr>";
  }
  return s + "</tbody></table></div>";
}

std::string figure(const std::string& title, const std::string& svg, const std::string& how_to_read) {
  return "<figure class=\"chart-figure\"><div class=\"chart-title\">" + escape(title) + "</div>" + svg +
         "<figcaption><strong>How to read this:</strong> " + escape(how_to_read) + "</figcaption></figure>";
}

// ---- colours ----

std::string categorical_colour(size_t index) {
  static const char* kTableau10[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                     "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#7f7f7f"};
  return kTableau10[index % 10];
}

std::string sequential_colour(double t) {
  static constexpr std::array<const char*, 9> kYellowOrangeRed = {
      "#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"};
  return ramp(kYellowOrangeRed, t);
}

std::string ordered_colour(double t) {
  static constexpr std::array<const char*, 10> kViridis = {"#440154", "#482878", "#3e4989", "#31688e", "#26828e",
                                                           "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"};
  return ramp(kViridis, t);
}

// ---- charts ----

std::string xy_chart_svg(const XYChart& c) {
  std::vector<double> xs, ys;
  size_t n_bar_series = 0;
  for (const Series& s : c.series) {
    n_bar_series += s.bars;
    for (const Point& p : s.points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
      ys.push_back(p.y_low);
      ys.push_back(p.y_high);
    }
  }
  const bool legend = c.series.size() > 1;
  double legend_width = 0;
  if (legend) {
    for (const Series& s : c.series) legend_width = std::max(legend_width, text_width(s.name));
    legend_width += 44;
  }
  Axis y_axis = c.y;
  if (n_bar_series > 0) y_axis.include_zero = !y_axis.log;
  Scale y = make_scale(y_axis, ys, 16.0 + c.plot_height, 16.0);
  const double left = left_margin_for(y);
  Frame f{left, 16, std::max(120.0, c.width - left - legend_width - 16), static_cast<double>(c.plot_height)};
  Scale x = make_scale(c.x, xs, f.left, f.right());
  const bool rotated_x = !c.x.categories.empty() && x.ticks.at.size() * 60.0 > f.width;
  const double legend_height = legend ? 16.0 * static_cast<double>(c.series.size()) + 24 : 0;
  const double height = std::max(f.bottom() + (rotated_x ? 62 : 48), legend_height);

  std::string s = svg_open(c.id, c.width, height, c.y.label + " against " + c.x.label);
  s += draw_axes(f, x, y, c);
  size_t bar_index = 0;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& series = c.series[i];
    const std::string colour = series.colour.empty() ? categorical_colour(i) : series.colour;
    s += "<g class=\"series\" data-series=\"" + escape(series.name) + "\">";
    s += series.bars ? draw_bars(series, bar_index++, n_bar_series, x, y, colour)
                     : draw_line_and_points(series, i, x, y, colour);
    s += "</g>";
  }
  if (legend) s += draw_legend(c, f.right() + 18, f.top + 8);
  return s + "</svg>";
}

std::string heatmap_svg(const Heatmap& m) {
  const GridGeometry g = grid_geometry(m.rows, m.columns);
  const double grid_h = g.cell_h * static_cast<double>(m.rows.size());
  const double bar_h = std::max(grid_h, 120.0);
  const double width = g.legend_left + std::max(text_width(m.value_label), 170.0) + 8;
  const double height = g.top + bar_h + 56;
  const auto [lo, hi] = log_range(m);
  std::string s = svg_open(m.id, width, height, m.value_label + " by " + m.row_axis + " and " + m.column_axis);
  s += grid_labels(g, m.rows, m.columns, m.row_axis, m.column_axis);
  s += "<g class=\"cells\">";
  for (size_t r = 0; r < m.rows.size(); ++r)
    for (size_t c = 0; c < m.columns.size(); ++c) {
      const double v = r < m.values.size() && c < m.values[r].size() ? m.values[r][c] : kNaN;
      const std::string hover = r < m.hovers.size() && c < m.hovers[r].size() ? m.hovers[r][c] : "";
      if (std::isnan(v)) {
        s += cell(g, r, c, kNoValueFill, "–", hover, "#999999");
      } else if (!(v > 0)) {
        s += cell(g, r, c, kNonPositiveFill, "≤0", hover, "#333333");
      } else {
        const std::string fill = sequential_colour((std::log10(v) - lo) / (hi - lo));
        s += cell(g, r, c, fill, format_number(v, 2), hover, text_colour_on(fill));
      }
    }
  s += "</g>";
  s += colour_bar(m, g.legend_left, g.top, bar_h);
  return s + "</svg>";
}

std::string category_grid_svg(const CategoryGrid& grid) {
  const GridGeometry g = grid_geometry(grid.rows, grid.columns);
  double legend_w = text_width(grid.legend_title);
  for (const std::string& l : grid.legend) legend_w = std::max(legend_w, text_width(l) + 20);
  const double grid_h = g.cell_h * static_cast<double>(grid.rows.size());
  const double legend_h = 18.0 * static_cast<double>(grid.categories.size());
  const double width = g.legend_left + legend_w + 8;
  const double height = g.top + std::max(grid_h, legend_h) + 16;
  std::string s = svg_open(grid.id, width, height, grid.legend_title + " by " + grid.row_axis + " and " + grid.column_axis);
  s += grid_labels(g, grid.rows, grid.columns, grid.row_axis, grid.column_axis);
  s += "<g class=\"cells\">";
  for (size_t r = 0; r < grid.rows.size(); ++r)
    for (size_t c = 0; c < grid.columns.size(); ++c) {
      const int k = r < grid.cells.size() && c < grid.cells[r].size() ? grid.cells[r][c] : -1;
      const std::string hover = r < grid.hovers.size() && c < grid.hovers[r].size() ? grid.hovers[r][c] : "";
      if (k < 0 || static_cast<size_t>(k) >= grid.categories.size()) {
        s += cell(g, r, c, kNoValueFill, "", hover, "#999999");
        continue;
      }
      const std::string& fill = grid.colours[static_cast<size_t>(k)];
      s += cell(g, r, c, fill, grid.categories[static_cast<size_t>(k)], hover, text_colour_on(fill));
    }
  s += "</g><g class=\"legend\">" + text_at(g.legend_left, 14, grid.legend_title, "class=\"axis-label\"");
  for (size_t k = 0; k < grid.categories.size(); ++k) {
    const double y = g.top + 18.0 * static_cast<double>(k);
    s += "<rect x=\"" + px(g.legend_left) + "\" y=\"" + px(y) + "\" width=\"12\" height=\"12\" fill=\"" +
         grid.colours[k] + "\"/>" +
         text_at(g.legend_left + 18, y + 10, k < grid.legend.size() ? grid.legend[k] : grid.categories[k],
                 "class=\"tick\"");
  }
  return s + "</g></svg>";
}

}  // namespace qlens::tools::html
