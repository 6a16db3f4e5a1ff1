#include "svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace skipsoftmax::svg {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in XML 1.0 at all.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n') {
          out += ' ';
        } else {
          out += ch;
        }
    }
  }
  return out;
}

namespace {

constexpr const char* kTimesSign = "\xc3\x97";  // U+00D7 MULTIPLICATION SIGN, UTF-8

std::string plain_number(double v) {
  if (v == 0.0) return "0";  // also -0
  std::ostringstream out;
  if (std::abs(v) >= 1e4) {
    out << std::fixed << std::setprecision(0) << v;
  } else {
    out << std::setprecision(4) << v;
  }
  return out.str();
}

}  // namespace

std::string format_value(double v, TickFormat format) {
  if (std::isnan(v)) return "n/a";
  switch (format) {
    case TickFormat::kNumber:
      return plain_number(v);
    case TickFormat::kTokens: {
      constexpr double kKi = 1024.0, kMi = 1024.0 * 1024.0;
      if (v >= kMi && std::fmod(v, kMi) == 0.0) return plain_number(v / kMi) + "M";
      if (v >= kKi && std::fmod(v, kKi) == 0.0) return plain_number(v / kKi) + "k";
      return plain_number(v);
    }
    case TickFormat::kPercent:
      return plain_number(v * 100.0) + "%";
    case TickFormat::kTimes:
      return plain_number(v) + kTimesSign;
  }
  return plain_number(v);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi)) {
    throw std::invalid_argument("nice_ticks: need finite lo < hi");
  }
  const double rough = (hi - lo) / std::max(1, target);
  const double exponent = std::floor(std::log10(rough));
  const double norm = rough / std::pow(10.0, exponent);
  const double mult = norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0;
  // Tick k is k * mult * 10^exponent; for a negative exponent, dividing the exact integer k * mult
  // by the exact power 10^-exponent gives the double nearest the decimal (0.6, not 0.6000000001).
  const auto tick = [&](double k) {
    return exponent < 0 ? k * mult / std::pow(10.0, -exponent)
                        : k * mult * std::pow(10.0, exponent);
  };
  const double step = tick(1.0);
  // Small tolerances keep a bound that is already on a tick (1.0, 0.97) from adding a step.
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last + 0.5; k += 1.0) ticks.push_back(tick(k));
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  if (!(lo > 0 && hi > lo && std::isfinite(hi))) {
    throw std::invalid_argument("log_ticks: need 0 < lo < hi");
  }
  constexpr double kMaxBase2Span = 4096.0;
  const double base = hi / lo <= kMaxBase2Span ? 2.0 : 10.0;
  const double e0 = std::ceil(std::log(lo) / std::log(base) - 1e-9);
  const double e1 = std::floor(std::log(hi) / std::log(base) + 1e-9);
  std::vector<double> ticks;
  // At most about 8 labels: every second or third power of two on a wide axis.
  const double stride = std::max(1.0, std::ceil((e1 - e0 + 1) / 8.0));
  for (double e = e0; e <= e1 + 0.5; e += stride) ticks.push_back(std::pow(base, e));
  if (ticks.size() < 2) ticks = {lo, hi};
  return ticks;
}

const char* palette_color(std::size_t i) {
  static constexpr std::array<const char*, 8> kPalette = {
      "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999"};
  return kPalette[i % kPalette.size()];
}

namespace {

constexpr int kMarginLeft = 62;
constexpr int kMarginRight = 18;
constexpr int kMarginTop = 30;
constexpr int kAxisBelow = 46;  // tick labels and the x label under the plot
constexpr int kInset = 12;      // first and last x positions stay off the axis lines
constexpr int kLegendRow = 18;
constexpr double kCharWidth = 6.4;  // mean advance of 11 px sans-serif text, for the legend

std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

const char* dash_array(Dash dash) {
  switch (dash) {
    case Dash::kSolid:
      return nullptr;
    case Dash::kDashed:
      return "7 4";
    case Dash::kDotted:
      return "2 3";
  }
  return nullptr;
}

std::size_t display_width(std::string_view text) {
  // Code points, not bytes: UTF-8 continuation bytes are 10xxxxxx.
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

struct Scale {
  double d0, d1, r0, r1;
  bool log = false;
  double operator()(double v) const {
    const double t =
        log ? (std::log(v) - std::log(d0)) / (std::log(d1) - std::log(d0)) : (v - d0) / (d1 - d0);
    return r0 + t * (r1 - r0);
  }
};

// Values the y axis must cover: the finite data, the reference lines, the axis' include list.
std::vector<double> y_ticks(std::vector<double> values, const Axis& axis,
                            const std::vector<RefLine>& refs) {
  for (const RefLine& r : refs) values.push_back(r.y);
  values.insert(values.end(), axis.include.begin(), axis.include.end());
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  double lo = values.empty() ? 0.0 : *std::min_element(values.begin(), values.end());
  double hi = values.empty() ? 1.0 : *std::max_element(values.begin(), values.end());
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = std::max(0.5, std::abs(hi) * 0.1);
    lo -= pad;
    hi += pad;
  }
  return nice_ticks(lo, hi, 5);
}

struct LegendItem {
  std::string name;
  std::size_t color;
  Dash dash;
  bool marker;
  bool swatch;  // a filled square (bars) instead of a line sample
};

class Canvas {
 public:
  Canvas(int width, int plot_height, const std::string& title, std::vector<LegendItem> legend)
      : width_(width), plot_h_(plot_height), legend_(std::move(legend)) {
    plot_x0_ = kMarginLeft;
    plot_x1_ = width_ - kMarginRight;
    plot_y0_ = kMarginTop;
    plot_y1_ = kMarginTop + plot_h_;
    layout_legend();
    const int height = kMarginTop + plot_h_ + kAxisBelow + legend_rows_ * kLegendRow + 6;
    out_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << width_ << ' ' << height
         << "\" width=\"" << width_ << "\" height=\"" << height
         << "\" role=\"img\" font-family=\"Liberation Sans, DejaVu Sans, Arial, sans-serif\" "
            "font-size=\"11\">"
         << "<title>" << escape(title) << "</title>"
         << "<rect x=\"0\" y=\"0\" width=\"" << width_ << "\" height=\"" << height
         << "\" fill=\"#ffffff\"/>"
         << "<text x=\"" << plot_x0_ << "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">"
         << escape(title) << "</text>";
  }

  double left() const { return plot_x0_; }
  double right() const { return plot_x1_; }
  double top() const { return plot_y0_; }
  double bottom() const { return plot_y1_; }

  void y_axis(const std::vector<double>& ticks, const Scale& y, const Axis& axis) {
    for (double t : ticks) {
      const std::string py = px(y(t));
      out_ << "<line x1=\"" << px(left()) << "\" y1=\"" << py << "\" x2=\"" << px(right())
           << "\" y2=\"" << py << "\" stroke=\"#e4e4e4\"/>"
           << "<text x=\"" << px(left() - 6) << "\" y=\"" << px(y(t) + 4)
           << "\" text-anchor=\"end\" fill=\"#333333\">" << escape(format_value(t, axis.format))
           << "</text>";
    }
    const double mid = (top() + bottom()) / 2;
    out_ << "<text x=\"14\" y=\"" << px(mid) << "\" transform=\"rotate(-90 14 " << px(mid)
         << ")\" text-anchor=\"middle\" fill=\"#333333\">" << escape(axis.label) << "</text>";
  }

  void x_tick(double x, const std::string& label, bool grid) {
    if (grid) {
      out_ << "<line x1=\"" << px(x) << "\" y1=\"" << px(top()) << "\" x2=\"" << px(x) << "\" y2=\""
           << px(bottom()) << "\" stroke=\"#e4e4e4\"/>";
    }
    out_ << "<line x1=\"" << px(x) << "\" y1=\"" << px(bottom()) << "\" x2=\"" << px(x)
         << "\" y2=\"" << px(bottom() + 4) << "\" stroke=\"#444444\"/>"
         << "<text x=\"" << px(x) << "\" y=\"" << px(bottom() + 16)
         << "\" text-anchor=\"middle\" fill=\"#333333\">" << escape(label) << "</text>";
  }

  void x_label(const std::string& label) {
    out_ << "<text x=\"" << px((left() + right()) / 2) << "\" y=\"" << px(bottom() + 34)
         << "\" text-anchor=\"middle\" fill=\"#333333\">" << escape(label) << "</text>";
  }

  void frame() {
    out_ << "<path d=\"M" << px(left()) << ' ' << px(top()) << "V" << px(bottom()) << "H"
         << px(right()) << "\" fill=\"none\" stroke=\"#444444\"/>";
  }

  void ref_lines(const std::vector<RefLine>& refs, const Scale& y) {
    for (const RefLine& r : refs) {
      const std::string py = px(y(r.y));
      out_ << "<line x1=\"" << px(left()) << "\" y1=\"" << py << "\" x2=\"" << px(right())
           << "\" y2=\"" << py << "\" stroke=\"#777777\" stroke-dasharray=\"4 3\"/>"
           << "<text x=\"" << px(right() - 4) << "\" y=\"" << px(y(r.y) - 4)
           << "\" text-anchor=\"end\" fill=\"#555555\" font-size=\"10\">" << escape(r.label)
           << "</text>";
    }
  }

  std::ostringstream& raw() { return out_; }

  std::string finish() {
    draw_legend();
    out_ << "</svg>";
    return out_.str();
  }

 private:
  double item_width(const LegendItem& item) const {
    return 30.0 + kCharWidth * static_cast<double>(display_width(item.name)) + 14.0;
  }

  void layout_legend() {
    double x = plot_x0_;
    int row = legend_.empty() ? 0 : 1;
    for (const LegendItem& item : legend_) {
      const double w = item_width(item);
      if (x > plot_x0_ && x + w > width_ - kMarginRight) {
        ++row;
        x = plot_x0_;
      }
      positions_.push_back({x, row});
      x += w;
    }
    legend_rows_ = row;
  }

  void draw_legend() {
    for (std::size_t i = 0; i < legend_.size(); ++i) {
      const LegendItem& item = legend_[i];
      const double x = positions_[i].first;
      const double y = plot_y1_ + kAxisBelow + (positions_[i].second - 1) * kLegendRow + 8;
      const char* color = palette_color(item.color);
      if (item.swatch) {
        out_ << "<rect x=\"" << px(x + 6) << "\" y=\"" << px(y - 5) << "\" width=\"12\" "
             << "height=\"10\" fill=\"" << color << "\"/>";
      } else {
        out_ << "<line x1=\"" << px(x) << "\" y1=\"" << px(y) << "\" x2=\"" << px(x + 24)
             << "\" y2=\"" << px(y) << "\" stroke=\"" << color << "\" stroke-width=\"2\"";
        if (const char* d = dash_array(item.dash)) out_ << " stroke-dasharray=\"" << d << "\"";
        out_ << "/>";
        if (item.marker) {
          out_ << "<circle cx=\"" << px(x + 12) << "\" cy=\"" << px(y) << "\" r=\"3\" fill=\""
               << color << "\"/>";
        }
      }
      out_ << "<text x=\"" << px(x + 30) << "\" y=\"" << px(y + 4) << "\" fill=\"#222222\">"
           << escape(item.name) << "</text>";
    }
  }

  int width_;
  int plot_h_;
  std::vector<LegendItem> legend_;
  std::vector<std::pair<double, int>> positions_;
  int legend_rows_ = 0;
  double plot_x0_, plot_x1_, plot_y0_, plot_y1_;
  std::ostringstream out_;
};

void draw_series(std::ostringstream& out, const LineSeries& s, const Scale& x, const Scale& y,
                 const Axis& x_axis, const Axis& y_axis) {
  const char* color = palette_color(s.color);
  // One polyline per run of finite points: a NaN breaks the line.
  std::vector<std::string> run;
  const auto flush = [&] {
    if (run.size() >= 2) {
      out << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"";
      if (const char* d = dash_array(s.dash)) out << " stroke-dasharray=\"" << d << "\"";
      out << " points=\"";
      for (std::size_t i = 0; i < run.size(); ++i) out << (i ? " " : "") << run[i];
      out << "\"/>";
    }
    run.clear();
  };
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.y[i])) {
      flush();
      continue;
    }
    run.push_back(px(x(s.x[i])) + "," + px(y(s.y[i])));
  }
  flush();
  if (!s.markers) return;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.y[i])) continue;
    out << "<circle cx=\"" << px(x(s.x[i])) << "\" cy=\"" << px(y(s.y[i])) << "\" r=\"3\" fill=\""
        << color << "\"><title>"
        << escape(s.name + ": " + format_value(s.x[i], x_axis.format) + ", " +
                  format_value(s.y[i], y_axis.format))
        << "</title></circle>";
  }
}

}  // namespace

std::string render(const LineChart& chart) {
  std::vector<double> xs, ys;
  std::vector<LegendItem> legend;
  for (const LineSeries& s : chart.series) {
    if (s.x.size() != s.y.size()) {
      throw std::invalid_argument("chart \"" + chart.title + "\": series \"" + s.name + "\" has " +
                                  std::to_string(s.x.size()) + " x and " +
                                  std::to_string(s.y.size()) + " y values");
    }
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (chart.x.log && !(s.x[i] > 0)) {
        throw std::invalid_argument("chart \"" + chart.title + "\": x = " +
                                    format_value(s.x[i], TickFormat::kNumber) + " on a log axis");
      }
      if (!std::isfinite(s.x[i])) continue;
      xs.push_back(s.x[i]);
      ys.push_back(s.y[i]);
    }
    if (s.in_legend) legend.push_back({s.name, s.color, s.dash, s.markers, false});
  }
  xs.insert(xs.end(), chart.x.include.begin(), chart.x.include.end());
  Canvas canvas(chart.width, chart.plot_height, chart.title, std::move(legend));
  std::vector<double> yt = y_ticks(ys, chart.y, chart.ref_lines);
  const Scale y{yt.front(), yt.back(), canvas.bottom(), canvas.top()};
  canvas.y_axis(yt, y, chart.y);
  if (xs.empty()) {
    canvas.raw() << "<text x=\"" << px((canvas.left() + canvas.right()) / 2) << "\" y=\""
                 << px((canvas.top() + canvas.bottom()) / 2)
                 << "\" text-anchor=\"middle\" fill=\"#777777\">no data</text>";
    canvas.frame();
    return canvas.finish();
  }
  double lo = *std::min_element(xs.begin(), xs.end());
  double hi = *std::max_element(xs.begin(), xs.end());
  std::vector<double> xt;
  if (chart.x.log) {
    if (lo == hi) {
      lo /= 2;
      hi *= 2;
    }
    xt = log_ticks(lo, hi);
  } else {
    if (lo == hi) {
      lo -= 1;
      hi += 1;
    }
    xt = nice_ticks(lo, hi, 6);
    lo = xt.front();
    hi = xt.back();
  }
  const Scale x{lo, hi, canvas.left() + kInset, canvas.right() - kInset, chart.x.log};
  for (double t : xt) canvas.x_tick(x(t), format_value(t, chart.x.format), true);
  canvas.x_label(chart.x.label);
  canvas.ref_lines(chart.ref_lines, y);
  canvas.frame();
  for (const LineSeries& s : chart.series) draw_series(canvas.raw(), s, x, y, chart.x, chart.y);
  return canvas.finish();
}

std::string render(const BarChart& chart) {
  std::vector<double> values;
  std::vector<LegendItem> legend;
  for (const BarSeries& s : chart.series) {
    if (s.values.size() != chart.categories.size()) {
      throw std::invalid_argument("chart \"" + chart.title + "\": series \"" + s.name + "\" has " +
                                  std::to_string(s.values.size()) + " values for " +
                                  std::to_string(chart.categories.size()) + " categories");
    }
    values.insert(values.end(), s.values.begin(), s.values.end());
    legend.push_back({s.name, s.color, Dash::kSolid, false, true});
  }
  Canvas canvas(chart.width, chart.plot_height, chart.title, std::move(legend));
  const std::vector<double> yt = y_ticks(values, chart.y, chart.ref_lines);
  const Scale y{yt.front(), yt.back(), canvas.bottom(), canvas.top()};
  canvas.y_axis(yt, y, chart.y);
  const double n = static_cast<double>(std::max<std::size_t>(1, chart.categories.size()));
  const double band = (canvas.right() - canvas.left()) / n;
  constexpr double kGroupShare = 0.8;  // of a band; the rest separates the groups
  const double bar =
      band * kGroupShare / static_cast<double>(std::max<std::size_t>(1, chart.series.size()));
  for (std::size_t c = 0; c < chart.categories.size(); ++c) {
    const double x0 = canvas.left() + band * static_cast<double>(c);
    canvas.x_tick(x0 + band / 2, chart.categories[c], false);
    for (std::size_t s = 0; s < chart.series.size(); ++s) {
      const double v = chart.series[s].values[c];
      if (!std::isfinite(v)) continue;
      const double bx = x0 + band * (1 - kGroupShare) / 2 + bar * static_cast<double>(s);
      const double top = y(v);
      canvas.raw() << "<rect x=\"" << px(bx) << "\" y=\"" << px(top) << "\" width=\""
                   << px(bar * 0.92) << "\" height=\"" << px(std::max(0.0, canvas.bottom() - top))
                   << "\" fill=\"" << palette_color(chart.series[s].color) << "\"><title>"
                   << escape(chart.series[s].name + " at " + chart.categories[c] + ": " +
                             format_value(v, chart.y.format))
                   << "</title></rect>";
    }
  }
  canvas.x_label(chart.x_label);
  canvas.ref_lines(chart.ref_lines, y);
  canvas.frame();
  return canvas.finish();
}

}  // namespace skipsoftmax::svg
