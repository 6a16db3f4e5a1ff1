// Small SVG charts for the HTML report: line charts (linear or log x) and grouped bar charts, with
// axes, ticks, a grid, horizontal reference lines and a legend. render() returns one <svg>
// element: well-formed XML, every text escaped, no script, no external reference, sized by a
// viewBox so that it scales down with its container.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace skipsoftmax::svg {

// & < > " ' as entities: safe in XML and HTML text and attribute values alike.
std::string escape(std::string_view text);

enum class TickFormat {
  kNumber,   // 0.25 -> "0.25", 1e-3 -> "0.001"
  kTokens,   // 8192 -> "8k", 1048576 -> "1M", 1500 -> "1500"
  kPercent,  // 0.75 -> "75%"
  kTimes,    // 1.5 -> "1.5x"
};
std::string format_value(double v, TickFormat format);

// Ticks on steps of 1, 2 or 5 times a power of ten, about `target` of them, the first <= lo and
// the last >= hi. lo < hi, both finite.
std::vector<double> nice_ticks(double lo, double hi, int target);
// Powers of two within [lo, hi] when hi/lo <= 2^12 (sequence lengths), else powers of ten; at
// least the two ends when no power falls inside. 0 < lo < hi.
std::vector<double> log_ticks(double lo, double hi);

// A colour-blind-safe palette (Okabe-Ito); i wraps around.
const char* palette_color(std::size_t i);

enum class Dash { kSolid, kDashed, kDotted };

struct Axis {
  std::string label;
  TickFormat format = TickFormat::kNumber;
  bool log = false;             // x of line charts only
  std::vector<double> include;  // values the axis must cover besides the data (e.g. 1 or 0)
};

struct LineSeries {
  std::string name;
  std::vector<double> x;  // > 0 on a log axis
  std::vector<double> y;  // a NaN leaves a gap
  std::size_t color = 0;
  Dash dash = Dash::kSolid;
  bool markers = true;
  bool in_legend = true;  // a series without points is a legend entry only
};

struct RefLine {
  double y = 0.0;
  std::string label;
};

struct LineChart {
  std::string title;
  Axis x;
  Axis y;
  std::vector<LineSeries> series;
  std::vector<RefLine> ref_lines;
  int width = 600;
  int plot_height = 240;
};

struct BarSeries {
  std::string name;
  std::vector<double> values;  // one per category; NaN: no bar
  std::size_t color = 0;
};

struct BarChart {
  std::string title;
  std::string x_label;
  std::vector<std::string> categories;
  Axis y;  // bars rise from the bottom of the axis
  std::vector<BarSeries> series;
  std::vector<RefLine> ref_lines;
  int width = 600;
  int plot_height = 240;
};

// Throws std::invalid_argument for series whose x and y differ in length, bar series with other
// than one value per category, or non-positive x on a log axis.
std::string render(const LineChart& chart);
std::string render(const BarChart& chart);

}  // namespace skipsoftmax::svg
