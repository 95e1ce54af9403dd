// Building blocks of the page `qlens report` writes: escaping, number
// formatting, HTML tables and inline SVG charts. Everything is drawn here, in
// C++, as static SVG: the page needs no script, no font and no network, and
// opens from a file:// URL offline. Every mark (point, bar, cell) carries an
// SVG <title>, which browsers show on hover, so exact values are one hover
// away while the chart shows their shape.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qlens::tools::html {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Text for HTML element content and attribute values (& < > " ').
std::string escape(std::string_view text);

// A number for people: 3 significant digits, scientific below 1e-3 and from
// 1e5 on ("1.23e-4", "0.0123", "4.56", "1.2e6"); "–" for NaN, "inf"/"-inf".
std::string format_number(double v, int significant = 3);
// A count with thousands separators: 401504 → "401,504" ("–" for NaN).
std::string format_integer(double v);
// 0.9444 → "94.44%" ("–" for NaN).
std::string format_percent(double fraction, int decimals = 2);
// Bytes with a binary unit: "832 B", "292.5 KiB", "1.08 GiB" ("–" for NaN).
std::string format_bytes(double bytes);
// "v ± e" with format_number, or "v" when e is NaN.
std::string format_with_error(double value, double error);

// An HTML table; cells are plain text (escaped here).
class Table {
 public:
  struct Column {
    std::string header;
    bool numeric = true;  // right-aligned, tabular figures
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  size_t size() const { return rows_.size(); }
  // `id` becomes data-table (what the tests look for); empty: none.
  std::string render(const std::string& id = "") const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// A titled chart with its one-line "how to read this" caption.
std::string figure(const std::string& title, const std::string& svg, const std::string& how_to_read);

// Colours. Categorical: distinct hues for up to 10 series (then repeating;
// charts vary the dash pattern). Sequential: light yellow (0) to dark red (1).
// Ordered: a perceptual purple-to-yellow ramp for ordered categories.
std::string categorical_colour(size_t index);
std::string sequential_colour(double t);
std::string ordered_colour(double t);

// ---- charts ----

struct Axis {
  std::string label;  // with its unit: "NMSE (log scale)", "layer", "size (KiB)"
  bool log = false;   // base 10; values <= 0 cannot be drawn and are left out
  bool integer = false;             // ticks at whole numbers only (layers)
  bool include_zero = false;        // linear axes: the domain reaches 0 (bars)
  std::vector<std::string> categories;  // non-empty: x is the category index
};

struct Point {
  double x = 0, y = 0;
  double y_low = kNaN, y_high = kNaN;  // an error bar when both are finite
  std::string label;  // drawn beside the point (optional)
  std::string hover;  // the point's <title>
};

struct Series {
  explicit Series(std::string series_name = "") : name(std::move(series_name)) {}
  std::string name;
  std::vector<Point> points;
  bool connect = true;  // a line through the points in order
  bool bars = false;    // bars from the axis instead of points
  bool hollow = false;  // open markers (a prediction beside a measurement)
  bool markers = true;  // false: the line alone (a reference level)
  std::string colour;   // empty: categorical_colour(series index)
};

// Points, lines, bars and error bars on two axes, with a legend when there
// is more than one series. `id` is written as data-chart.
struct XYChart {
  std::string id;
  Axis x, y;
  std::vector<Series> series;
  int width = 760;
  int plot_height = 300;
};
std::string xy_chart_svg(const XYChart& chart);

// Rows x columns of cells coloured by value on a log scale between low and
// high (a colour bar with ticks beside it). NaN: no value (blank cell, "–");
// values <= 0 (below any log scale) are drawn grey and say so.
struct Heatmap {
  std::string id;
  std::string row_axis, column_axis, value_label;  // axis titles, colour bar title (with unit)
  std::vector<std::string> rows, columns;
  std::vector<std::vector<double>> values;        // [row][column]
  std::vector<std::vector<std::string>> hovers;   // [row][column]
  double low = 1e-6, high = 1;                    // the colour scale's range (> 0)
};
std::string heatmap_svg(const Heatmap& map);

// Rows x columns of cells each showing one category (its name in the cell,
// its colour from `colours`), with a legend of the categories. -1: empty.
struct CategoryGrid {
  std::string id;
  std::string row_axis, column_axis, legend_title;
  std::vector<std::string> rows, columns;
  std::vector<std::vector<int>> cells;           // [row][column]: index into categories, or -1
  std::vector<std::vector<std::string>> hovers;  // [row][column]
  std::vector<std::string> categories;           // names drawn in the cells
  std::vector<std::string> legend;               // per category: the legend's text
  std::vector<std::string> colours;              // per category
};
std::string category_grid_svg(const CategoryGrid& grid);

}  // namespace qlens::tools::html
