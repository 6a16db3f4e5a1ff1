// The SVG chart helper: escaping, tick choice and labels, and charts that are well-formed XML
// whatever their text holds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "svg_chart.h"
#include "test_util.h"
#include "xml_check.h"

namespace skipsoftmax::svg {
namespace {

using test::xml_error;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kNasty = "<b>\"Q&A\" 'x'</b>";
constexpr const char* kNastyEscaped = "&lt;b&gt;&quot;Q&amp;A&quot; &#39;x&#39;&lt;/b&gt;";

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

int svg_height(const std::string& svg) {
  const std::size_t at = svg.find("height=\"");
  return std::stoi(svg.substr(at + 8));
}

LineChart speed_chart() {
  LineChart c;
  c.title = "Prefill speedup";
  c.x = {"length", TickFormat::kTokens, true, {}};
  c.y = {"speedup", TickFormat::kTimes, false, {1.0}};
  c.series.push_back({"75%", {4096, 8192, 16384, 32768}, {1.01, 1.04, 1.08, 1.12}, 0});
  c.series.push_back({"75% Amdahl",
                      {4096, 8192, 16384, 32768},
                      {1.02, 1.05, 1.09, 1.13},
                      0,
                      Dash::kDotted,
                      false});
  c.ref_lines = {{1.0, "dense"}};
  return c;
}

TEST(SvgEscape, EscapesMarkupAndQuotes) {
  EXPECT_EQ(escape(kNasty), kNastyEscaped);
  EXPECT_EQ(escape("plain \xc3\x97 text"), "plain \xc3\x97 text");  // UTF-8 passes through
  EXPECT_EQ(escape(std::string("a\x01"
                               "b\tc")),
            "a b\tc");  // XML 1.0 has no control chars
  EXPECT_EQ(xml_error("<t>" + escape(kNasty) + "</t>"), "");
}

TEST(SvgTicks, FormatsValues) {
  EXPECT_EQ(format_value(0.25, TickFormat::kNumber), "0.25");
  EXPECT_EQ(format_value(-0.0, TickFormat::kNumber), "0");
  EXPECT_EQ(format_value(131072, TickFormat::kNumber), "131072");
  EXPECT_EQ(format_value(8192, TickFormat::kTokens), "8k");
  EXPECT_EQ(format_value(1048576, TickFormat::kTokens), "1M");
  EXPECT_EQ(format_value(1500, TickFormat::kTokens), "1500");
  EXPECT_EQ(format_value(0.725, TickFormat::kPercent), "72.5%");
  EXPECT_EQ(format_value(1.5, TickFormat::kTimes), "1.5\xc3\x97");
  EXPECT_EQ(format_value(kNaN, TickFormat::kNumber), "n/a");
}

TEST(SvgTicks, NiceTicksCoverTheRangeOnRoundSteps) {
  EXPECT_EQ(nice_ticks(0.0, 1.0, 5), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0}));
  const std::vector<double> t = nice_ticks(0.93, 1.01, 5);
  ASSERT_GE(t.size(), 2u);
  EXPECT_LE(t.front(), 0.93);
  EXPECT_GE(t.back(), 1.01);
  EXPECT_NEAR(t[1] - t[0], 0.02, 1e-12);
  for (double v : t) EXPECT_LE(format_value(v, TickFormat::kNumber).size(), 4u) << v;
  // A bound already on a tick adds no step.
  EXPECT_EQ(nice_ticks(1.0, 2.0, 5).back(), 2.0);
  EXPECT_THROW(nice_ticks(1.0, 1.0, 5), std::invalid_argument);
  EXPECT_THROW(nice_ticks(0.0, kNaN, 5), std::invalid_argument);
}

TEST(SvgTicks, LogTicksArePowersOfTwoOrTen) {
  EXPECT_EQ(log_ticks(4096, 131072),
            (std::vector<double>{4096, 8192, 16384, 32768, 65536, 131072}));
  EXPECT_EQ(log_ticks(3000, 100000), (std::vector<double>{4096, 8192, 16384, 32768, 65536}));
  EXPECT_EQ(log_ticks(1, 1e6), (std::vector<double>{1, 10, 100, 1e3, 1e4, 1e5, 1e6}));
  EXPECT_EQ(log_ticks(5000, 6000), (std::vector<double>{5000, 6000}));  // no power inside
  EXPECT_LE(log_ticks(1, 4096).size(), 8u);                             // thinned
  EXPECT_THROW(log_ticks(0, 10), std::invalid_argument);
}

TEST(SvgLineChart, IsWellFormedWithAxesTicksAndLegend) {
  const std::string svg = render(speed_chart());
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 600 "));
  EXPECT_NE(svg.find("<title>Prefill speedup</title>"), std::string::npos);
  for (const char* tick : {">4k<", ">8k<", ">16k<", ">32k<", ">1\xc3\x97<", ">dense<"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "stroke-dasharray=\"2 3\""), 2u);  // the dotted series and its legend
  EXPECT_EQ(count(svg, "<circle"), 4u + 1u);              // markers of one series, one legend
  EXPECT_NE(svg.find("<title>75%: 8k, 1.04\xc3\x97</title>"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
}

TEST(SvgLineChart, EscapesEveryText) {
  LineChart c = speed_chart();
  c.title = kNasty;
  c.x.label = kNasty;
  c.y.label = kNasty;
  c.series[0].name = kNasty;
  c.ref_lines[0].label = kNasty;
  const std::string svg = render(c);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  // The title twice, the axis labels, the reference line, the legend and 4 marker tooltips.
  EXPECT_EQ(count(svg, kNastyEscaped), 10u);
}

TEST(SvgLineChart, NaNBreaksTheLine) {
  LineChart c = speed_chart();
  c.series.resize(1);
  c.series[0].y[2] = kNaN;
  const std::string svg = render(c);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_EQ(count(svg, "<polyline"), 1u);  // points 0-1; point 3 alone draws no line
  EXPECT_EQ(count(svg, "<circle"), 3u + 1u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(SvgLineChart, LinearAxisAndEmptyChart) {
  LineChart c;
  c.title = "linear";
  c.series.push_back({"a", {0, 1, 2}, {5, 7, 6}, 1});
  EXPECT_EQ(xml_error(render(c)), "");
  LineChart empty;
  empty.title = "nothing";
  const std::string svg = render(empty);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_NE(svg.find("no data"), std::string::npos);
}

TEST(SvgLineChart, LegendWrapsIntoRows) {
  LineChart c = speed_chart();
  const int one_row = svg_height(render(c));
  for (int i = 0; i < 12; ++i) {
    c.series.push_back(
        {"a long series name " + std::to_string(i), {4096}, {1.0}, static_cast<std::size_t>(i)});
  }
  const std::string svg = render(c);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_GT(svg_height(svg), one_row + 2 * 18);
}

TEST(SvgLineChart, RejectsBadSeries) {
  LineChart c = speed_chart();
  c.series[0].y.pop_back();
  EXPECT_ERROR_HAS(render(c), "series \"75%\" has 4 x and 3 y values");
  c = speed_chart();
  c.series[0].x[0] = 0;
  EXPECT_ERROR_HAS(render(c), "x = 0 on a log axis");
}

TEST(SvgBarChart, GroupsBarsByCategory) {
  BarChart c;
  c.title = "Accuracy ratio";
  c.x_label = "length";
  c.categories = {"4k", "16k", "64k"};
  c.y = {"ratio", TickFormat::kNumber, false, {1.0}};
  c.series.push_back({"50%", {1.0, 0.99, kNaN}, 0});
  c.series.push_back({kNasty, {0.98, 0.97, 0.95}, 1});
  c.ref_lines = {{0.99, "bound 0.99"}, {0.97, "bound 0.97"}};
  const std::string svg = render(c);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_EQ(count(svg, "<rect"), 1u + 5u + 2u);  // background, bars, legend swatches
  EXPECT_NE(svg.find("bound 0.97"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  c.series[0].values.pop_back();
  EXPECT_ERROR_HAS(render(c), "series \"50%\" has 2 values for 3 categories");
}

TEST(XmlCheck, CatchesMalformedMarkup) {
  // The checker the report tests rely on must itself reject what a browser's XML parser would.
  EXPECT_EQ(xml_error("<a><b/></a>"), "");
  EXPECT_EQ(xml_error("<!DOCTYPE html>\n<a x=\"1\">&amp;&#215;&#xD7;</a>"), "");
  EXPECT_NE(xml_error("<a><b></a>"), "");
  EXPECT_NE(xml_error("<a>&nbsp;</a>"), "");
  EXPECT_NE(xml_error("<a>x & y</a>"), "");
  EXPECT_NE(xml_error("<a x=1/>"), "");
  EXPECT_NE(xml_error("<a x=\"1\" x=\"2\"/>"), "");
  EXPECT_NE(xml_error("<a x=\"<\"/>"), "");
  EXPECT_NE(xml_error("<a/><b/>"), "");
  EXPECT_NE(xml_error("<a>"), "");
}

}  // namespace
}  // namespace skipsoftmax::svg
