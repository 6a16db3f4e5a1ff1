#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "svg_chart.h"

namespace skipsoftmax {

namespace {

using svg::escape;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kAmdahlLegendColor = 7;  // grey: the legend entry of the dotted lines

// The stylesheet holds no '<' or '&', so that the page stays well-formed XML.
constexpr const char* kStyle = R"(
body { font-family: "Liberation Sans", "DejaVu Sans", Arial, sans-serif; font-size: 14px;
       color: #1d1d1d; background: #f6f6f4; margin: 0; padding: 24px 32px; }
h1 { font-size: 24px; margin: 0 0 4px 0; }
h2 { font-size: 20px; margin: 0 0 8px 0; border-bottom: 2px solid #0072b2; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 20px 0 8px 0; }
.arch { font-weight: normal; color: #555555; font-size: 15px; margin-left: 8px; }
.meta, .note { color: #555555; margin: 4px 0 12px 0; }
section.model, section.overview { background: #ffffff; border: 1px solid #dddddd;
       border-radius: 6px; padding: 16px 20px; margin: 0 0 24px 0; }
.banner { background: #fff3cd; border: 1px solid #e0c36a; color: #6b5300; padding: 6px 10px;
       border-radius: 4px; margin: 8px 0; font-weight: bold; }
table { border-collapse: collapse; margin: 4px 0 8px 0; font-size: 12.5px; }
th, td { border: 1px solid #d5d5d5; padding: 3px 7px; text-align: right; }
th { background: #eef2f6; }
th[colspan] { text-align: center; }
td.l, th.l { text-align: left; }
tr.dense td { color: #555555; }
code { font-family: "Liberation Mono", "DejaVu Sans Mono", monospace; font-size: 12px;
       word-break: break-all; }
.on { color: #ffffff; background: #009e73; padding: 1px 6px; border-radius: 3px; font-weight: bold; }
.off { color: #ffffff; background: #d55e00; padding: 1px 6px; border-radius: 3px; font-weight: bold; }
.warn { background: #fde2cf; }
.bad { background: #f7c1c1; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
.charts svg { width: 100%; height: auto; border: 1px solid #eeeeee; }
.scroll { overflow-x: auto; }
)";

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}
std::string times(double v) { return fixed(v, 2) + "\xc3\x97"; }
std::string percent(double v, int decimals = 1) { return fixed(v * 100, decimals) + "%"; }
std::string tokens(std::int64_t length) {
  return svg::format_value(static_cast<double>(length), svg::TickFormat::kTokens);
}

const char* phase_title(Phase phase) { return phase == Phase::kPrefill ? "Prefill" : "Decode"; }

// Charts and tables colour arms alike: by their order among the non-dense arms.
std::vector<const PriceArm*> skip_arms(const PriceList& p) {
  std::vector<const PriceArm*> arms;
  for (const PriceArm& a : p.arms) {
    if (!a.dense()) arms.push_back(&a);
  }
  return arms;
}

std::size_t arm_color(const PriceList& p, const PriceArm& arm) {
  const std::vector<const PriceArm*> arms = skip_arms(p);
  return static_cast<std::size_t>(std::find(arms.begin(), arms.end(), &arm) - arms.begin());
}

std::vector<double> lengths_of(const PriceList& p) { return {p.lengths.begin(), p.lengths.end()}; }

const PriceArm* find_arm(const PriceList& p, SkipScope scope,
                         const std::optional<std::string>& tier) {
  if (!tier) return nullptr;
  const double sparsity = parse_target_sparsity(*tier);
  for (const PriceArm& a : p.arms) {
    if (a.skip == scope && std::abs(a.tier_sparsity - sparsity) <= kTierTolerance) return &a;
  }
  return nullptr;
}

// The lowest accuracy ratio of an arm over the accuracy lengths.
double worst_ratio(const PriceArm& arm) {
  double worst = kNaN;
  for (const PricePoint& pt : arm.points) {
    if (pt.accuracy && !(pt.accuracy->ratio >= worst)) worst = pt.accuracy->ratio;
  }
  return worst;
}

std::string ratio_class(double ratio) {
  if (ratio < kPriceBounds[1] - kBoundSlack) return " class=\"bad\"";
  if (ratio < kPriceBounds[0] - kBoundSlack) return " class=\"warn\"";
  return "";
}

std::string verdict_badge(bool on) {
  return on ? "<span class=\"on\">ON</span>" : "<span class=\"off\">OFF</span>";
}

std::string recommendation_text(const PriceRecommendation& r) {
  return r.tier ? escape(*r.tier) : std::string("dense");
}

// ---- charts -----------------------------------------------------------------------------------

svg::Axis length_axis() { return {"sequence length (tokens)", svg::TickFormat::kTokens, true, {}}; }

std::string speedup_chart(const PriceList& p, Phase phase) {
  svg::LineChart c;
  c.title = std::string(phase_title(phase)) + ": end-to-end speedup vs dense (" +
            (phase == Phase::kPrefill ? "TTFT" : "TPOT") + ")";
  c.x = length_axis();
  c.y = {"speedup", svg::TickFormat::kTimes, false, {1.0}};
  c.ref_lines = {{1.0, "dense"}};
  for (const PriceArm* arm : skip_arms(p)) {
    if (!skips(arm->skip, phase)) continue;
    svg::LineSeries measured{arm->label(), lengths_of(p), {}, arm_color(p, *arm)};
    svg::LineSeries amdahl{arm->label() + " (Amdahl estimate)",
                           lengths_of(p),
                           {},
                           arm_color(p, *arm),
                           svg::Dash::kDotted,
                           false,
                           false};
    for (const PricePoint& pt : arm->points) {
      measured.y.push_back(pt.phases[phase].speedup);
      amdahl.y.push_back(pt.phases[phase].amdahl);
    }
    c.series.push_back(std::move(measured));
    c.series.push_back(std::move(amdahl));
  }
  c.series.push_back(
      {"Amdahl estimate (dotted)", {}, {}, kAmdahlLegendColor, svg::Dash::kDotted, false, true});
  return svg::render(c);
}

std::string kernel_chart(const PriceList& p, Phase phase) {
  svg::LineChart c;
  c.title = std::string(phase_title(phase)) + ": attention kernel speedup vs dense kernel";
  c.x = length_axis();
  c.y = {"kernel speedup", svg::TickFormat::kTimes, false, {1.0}};
  c.ref_lines = {{1.0, "dense"}};
  for (const PriceArm* arm : skip_arms(p)) {
    if (!skips(arm->skip, phase)) continue;
    svg::LineSeries s{arm->label(), lengths_of(p), {}, arm_color(p, *arm)};
    for (const PricePoint& pt : arm->points) s.y.push_back(pt.phases[phase].kernel_speedup);
    c.series.push_back(std::move(s));
  }
  return svg::render(c);
}

std::string sparsity_chart(const PriceList& p, Phase phase) {
  svg::LineChart c;
  c.title = std::string(phase_title(phase)) + ": measured tile sparsity";
  c.x = length_axis();
  c.y = {"KV tiles skipped", svg::TickFormat::kPercent, false, {0.0}};
  for (const PriceArm* arm : skip_arms(p)) {
    if (!skips(arm->skip, phase)) continue;
    svg::LineSeries s{arm->label(), lengths_of(p), {}, arm_color(p, *arm)};
    for (const PricePoint& pt : arm->points) s.y.push_back(pt.phases[phase].tile_sparsity);
    c.series.push_back(std::move(s));
  }
  return svg::render(c);
}

std::string share_chart(const PriceList& p) {
  svg::LineChart c;
  c.title = "Attention's share of GPU time (dense)";
  c.x = length_axis();
  c.y = {"share of GPU time", svg::TickFormat::kPercent, false, {0.0}};
  const PriceArm& dense = p.dense_arm();
  for (Phase phase : kPhases) {
    svg::LineSeries s{phase_title(phase),
                      lengths_of(p),
                      {},
                      phase == Phase::kPrefill ? 6u : 7u,
                      phase == Phase::kPrefill ? svg::Dash::kSolid : svg::Dash::kDashed};
    for (const PricePoint& pt : dense.points) s.y.push_back(pt.phases[phase].attention_share);
    c.series.push_back(std::move(s));
  }
  return svg::render(c);
}

std::string accuracy_chart(const PriceList& p) {
  svg::BarChart c;
  c.title = "Accuracy ratio vs dense (mean task score / dense)";
  c.x_label = "sequence length (tokens)";
  c.y = {"accuracy ratio", svg::TickFormat::kNumber, false, {1.0}};
  for (std::int64_t l : p.accuracy_lengths) c.categories.push_back(tokens(l));
  for (const PriceRecommendation& r : p.recommendations) {
    const bool seen = std::any_of(c.ref_lines.begin(), c.ref_lines.end(),
                                  [&](const svg::RefLine& l) { return l.y == r.bound; });
    if (!seen) c.ref_lines.push_back({r.bound, "bound " + fixed(r.bound, 2)});
  }
  for (const PriceArm* arm : skip_arms(p)) {
    svg::BarSeries s{arm->label(), {}, arm_color(p, *arm)};
    for (const PricePoint& pt : arm->points) {
      if (pt.accuracy) s.values.push_back(pt.accuracy->ratio);
    }
    c.series.push_back(std::move(s));
  }
  return svg::render(c);
}

// ---- sections ---------------------------------------------------------------------------------

void provenance(std::ostream& out, const ReportModel& m) {
  const PriceList& p = m.price;
  out << "<table><tbody>";
  const auto row = [&](const char* key, const std::string& html) {
    out << "<tr><th class=\"l\">" << key << "</th><td class=\"l\">" << html << "</td></tr>";
  };
  row("GPU", escape(p.gpu));
  row("git revision", "<code>" + escape(p.git_revision) + "</code>");
  row("command", "<code>" + escape(p.command) + "</code>");
  if (p.date) row("date", escape(*p.date));
  if (p.checkpoint) row("checkpoint", "<code>" + escape(*p.checkpoint) + "</code>");
  for (const auto& [key, value] : p.setup) {
    out << "<tr><th class=\"l\">" << escape(key) << "</th><td class=\"l\">"
        << escape(value.is_string() ? value.get<std::string>() : value.dump()) << "</td></tr>";
  }
  row("price list", "<code>" + escape(m.source) + "</code>");
  out << "</tbody></table>";
}

void recommendations(std::ostream& out, const PriceList& p) {
  const std::int64_t longest = p.lengths.back();
  out << "<p>The highest calibrated tier whose accuracy ratio (mean task score / dense) stays at "
         "or above the bound at every accuracy length ("
      << escape([&] {
           std::string s;
           for (std::int64_t l : p.accuracy_lengths) s += (s.empty() ? "" : ", ") + tokens(l);
           return s;
         }())
      << ").</p>"
      << "<table><thead><tr><th>bound</th><th class=\"l\">skip</th><th class=\"l\">tier</th>"
      << "<th>prefill speedup at " << tokens(longest) << "</th><th>decode speedup at "
      << tokens(longest) << "</th><th>lowest accuracy ratio</th></tr></thead><tbody>";
  for (const PriceRecommendation& r : p.recommendations) {
    const PriceArm* arm = find_arm(p, r.skip, r.tier);
    out << "<tr><td>" << fixed(r.bound, 2) << "</td><td class=\"l\">" << to_string(r.skip)
        << "</td><td class=\"l\"><b>" << recommendation_text(r) << "</b></td>";
    if (arm) {
      const PricePoint& last = arm->points.back();
      out << "<td>" << times(last.phases.prefill.speedup) << "</td><td>"
          << times(last.phases.decode.speedup) << "</td><td>" << fixed(worst_ratio(*arm), 3)
          << "</td>";
    } else {
      out << "<td>" << times(1.0) << "</td><td>" << times(1.0) << "</td><td>1.000</td>";
    }
    out << "</tr>";
  }
  out << "</tbody></table>";
  std::string off;
  for (Phase phase : kPhases) {
    if (p.phases[phase] && !p.phases[phase]->advice.on)
      off += (off.empty() ? "" : " and ") + std::string(to_string(phase));
  }
  if (!off.empty()) {
    out << "<p class=\"note\"><b>The advisor says OFF for " << off
        << "</b>: the skipped tiles hold too much softmax mass for the work they save. A tier "
           "within an accuracy bound here is what the measurements allow, not a reason to deploy "
           "it.</p>";
  }
}

void advice(std::ostream& out, const PriceList& p) {
  out << "<table><thead><tr><th class=\"l\">phase</th><th class=\"l\">verdict</th>"
      << "<th>sparsity s</th><th>mass share m</th><th>m / s</th><th>limit</th><th>requests</th>"
      << "<th>calibrated up to</th><th class=\"l\">reason</th></tr></thead><tbody>";
  for (Phase phase : kPhases) {
    if (!p.phases[phase]) continue;
    const ShapeAdviceRecord& a = p.phases[phase]->advice;
    out << "<tr><td class=\"l\">" << to_string(phase) << "</td><td class=\"l\">"
        << verdict_badge(a.on) << "</td><td>" << percent(a.sparsity) << "</td><td>"
        << percent(a.mass_share, a.mass_share < 0.01 ? 3 : 1) << "</td><td>"
        << (a.mass_ratio ? fixed(*a.mass_ratio, 4) : "n/a") << "</td><td>"
        << (a.mass_ratio_limit ? fixed(*a.mass_ratio_limit, 2) : "") << "</td><td>"
        << (a.requests ? std::to_string(*a.requests) : "") << "</td><td>"
        << (a.calibrated_max_seqlen ? tokens(*a.calibrated_max_seqlen) : "")
        << "</td><td class=\"l\">" << escape(a.reason.value_or("")) << "</td></tr>";
  }
  out << "</tbody></table>";
}

void price_table(std::ostream& out, const PriceList& p) {
  out << "<div class=\"scroll\"><table><thead><tr><th class=\"l\" rowspan=\"2\">arm</th>"
      << "<th rowspan=\"2\">length</th><th rowspan=\"2\">TTFT ms</th><th rowspan=\"2\">TPOT ms</th>"
      << "<th colspan=\"5\">prefill</th><th colspan=\"5\">decode</th></tr><tr>";
  for (int i = 0; i < 2; ++i) {
    out << "<th>end to end</th><th>kernel</th><th>Amdahl</th><th>attention share</th>"
        << "<th>sparsity</th>";
  }
  out << "</tr></thead><tbody>";
  for (const PriceArm& arm : p.arms) {
    for (const PricePoint& pt : arm.points) {
      out << "<tr" << (arm.dense() ? " class=\"dense\"" : "") << "><td class=\"l\">"
          << escape(arm.label()) << "</td><td>" << tokens(pt.length) << "</td><td>"
          << fixed(pt.ttft_ms, 1) << "</td><td>" << fixed(pt.tpot_ms, 2) << "</td>";
      for (Phase phase : kPhases) {
        const PhaseMetrics& m = pt.phases[phase];
        out << "<td>" << times(m.speedup) << "</td><td>" << times(m.kernel_speedup) << "</td><td>"
            << times(m.amdahl) << "</td><td>" << percent(m.attention_share) << "</td><td>"
            << percent(m.tile_sparsity) << "</td>";
      }
      out << "</tr>";
    }
  }
  out << "</tbody></table></div>";
}

void accuracy_table(std::ostream& out, const PriceList& p) {
  out << "<div class=\"scroll\"><table><thead><tr><th class=\"l\">arm</th><th>length</th>";
  for (const std::string& task : p.tasks) out << "<th>" << escape(task) << "</th>";
  out << "<th>mean score</th><th>accuracy ratio</th><th>perplexity</th>"
      << "<th>perplexity ratio</th></tr></thead><tbody>";
  for (const PriceArm& arm : p.arms) {
    for (const PricePoint& pt : arm.points) {
      if (!pt.accuracy) continue;
      const AccuracyRecord& a = *pt.accuracy;
      out << "<tr" << (arm.dense() ? " class=\"dense\"" : "") << "><td class=\"l\">"
          << escape(arm.label()) << "</td><td>" << tokens(pt.length) << "</td>";
      for (std::size_t t = 0; t < a.scores.size(); ++t) {
        out << "<td>" << fixed(a.scores[t], 3);
        if (!arm.dense() && a.task_ratios[t]) out << " (" << fixed(*a.task_ratios[t], 3) << ")";
        out << "</td>";
      }
      out << "<td>" << fixed(a.score, 3) << "</td><td" << ratio_class(a.ratio) << ">"
          << fixed(a.ratio, 4) << "</td><td>" << fixed(a.perplexity, 3) << "</td><td>"
          << fixed(a.perplexity_ratio, 4) << "</td></tr>";
    }
  }
  out << "</tbody></table></div><p class=\"note\">Task cells: score (ratio to dense). Ratios "
         "below 0.99 are shaded, below 0.97 shaded darker.</p>";
}

void scale_tables(std::ostream& out, const PriceList& p, Phase phase) {
  const PhaseCalibration& cal = *p.phases[phase];
  std::map<std::int64_t, std::map<std::size_t, double>> rows;  // bin -> column -> S
  for (const ScaleTableRow& r : cal.deployed.rows()) rows[r.seqlen_bin][0] = r.scale;
  for (std::size_t t = 0; t < cal.ladder.size(); ++t) {
    for (const ScaleTableRow& r : cal.ladder[t].table.rows()) rows[r.seqlen_bin][t + 1] = r.scale;
  }
  std::string deployed_is = cal.deployed.empty() ? " (dense)" : "";
  for (const LadderTier& t : cal.ladder) {
    if (!cal.deployed.empty() && t.table == cal.deployed) deployed_is = " = tier " + t.key;
  }
  out << "<h4>" << phase_title(phase) << "</h4><div class=\"scroll\"><table><thead><tr>"
      << "<th>seqlen_bin</th><th>deployed S" << escape(deployed_is) << "</th>";
  for (const LadderTier& t : cal.ladder) out << "<th>tier " << escape(t.key) << " S</th>";
  out << "</tr></thead><tbody>";
  for (const auto& [bin, cells] : rows) {
    out << "<tr><td>" << bin << "</td>";
    for (std::size_t col = 0; col <= cal.ladder.size(); ++col) {
      const auto it = cells.find(col);
      out << "<td>"
          << (it == cells.end() ? std::string("")
                                : svg::format_value(it->second, svg::TickFormat::kNumber))
          << "</td>";
    }
    out << "</tr>";
  }
  out << "</tbody></table></div>";
}

void model_section(std::ostream& out, const ReportModel& m, std::size_t index) {
  const PriceList& p = m.price;
  out << "<section class=\"model\" id=\"model-" << index << "\"><h2>" << escape(p.model_name)
      << "<span class=\"arch\">" << escape(p.architecture) << "</span></h2>";
  if (p.synthetic) {
    out << "<div class=\"banner\">Synthetic fixture: these numbers are made up to test the "
           "report, not measured.</div>";
  }
  if (p.note) out << "<p class=\"note\">" << escape(*p.note) << "</p>";
  out << "<h3>Provenance</h3>";
  provenance(out, m);
  out << "<h3>Recommendation</h3>";
  recommendations(out, p);
  out << "<h3>Advisor verdicts</h3>";
  advice(out, p);
  out << "<h3>Speed</h3><div class=\"charts\">";
  for (Phase phase : kPhases) {
    const std::vector<const PriceArm*> arms = skip_arms(p);
    if (std::none_of(arms.begin(), arms.end(),
                     [&](const PriceArm* a) { return skips(a->skip, phase); })) {
      continue;
    }
    out << speedup_chart(p, phase) << kernel_chart(p, phase);
  }
  out << share_chart(p) << "</div>";
  out << "<h3>Sparsity and accuracy</h3><div class=\"charts\">";
  for (Phase phase : kPhases) {
    if (p.phases[phase]) out << sparsity_chart(p, phase);
  }
  out << accuracy_chart(p) << "</div>";
  out << "<h3>Accuracy</h3>";
  accuracy_table(out, p);
  out << "<h3>Price list</h3>";
  price_table(out, p);
  out << "<h3>Deployed tables and tier ladders</h3><p class=\"note\">S per seqlen_bin; a "
         "sequence of length L uses the last bin at or below L, with lambda = S / L.</p>";
  for (Phase phase : kPhases) {
    if (p.phases[phase]) scale_tables(out, p, phase);
  }
  out << "</section>";
}

void overview(std::ostream& out, const std::vector<ReportModel>& models) {
  out << "<section class=\"overview\"><h2>Overview</h2><table><thead><tr>"
      << "<th class=\"l\">model</th><th class=\"l\">architecture</th><th class=\"l\">GPU</th>"
      << "<th class=\"l\">advisor prefill</th><th class=\"l\">advisor decode</th>";
  for (double bound : kPriceBounds) {
    out << "<th class=\"l\">tier for " << fixed(bound, 2) << "</th>";
  }
  out << "</tr></thead><tbody>";
  for (std::size_t i = 0; i < models.size(); ++i) {
    const PriceList& p = models[i].price;
    out << "<tr><td class=\"l\"><a href=\"#model-" << i << "\">" << escape(p.model_name) << "</a>"
        << (p.synthetic ? " (fixture)" : "") << "</td><td class=\"l\">" << escape(p.architecture)
        << "</td><td class=\"l\">" << escape(p.gpu) << "</td>";
    for (Phase phase : kPhases) {
      out << "<td class=\"l\">"
          << (p.phases[phase] ? verdict_badge(p.phases[phase]->advice.on) : std::string("n/a"))
          << "</td>";
    }
    for (double bound : kPriceBounds) {
      out << "<td class=\"l\">";
      bool first = true;
      for (const PriceRecommendation& r : p.recommendations) {
        if (r.bound != bound) continue;
        out << (first ? "" : "; ") << (r.skip == SkipScope::kBoth ? "" : to_string(r.skip))
            << (r.skip == SkipScope::kBoth ? "" : " ") << recommendation_text(r);
        first = false;
      }
      out << "</td>";
    }
    out << "</tr>";
  }
  out << "</tbody></table></section>";
}

}  // namespace

std::string render_report(const std::vector<ReportModel>& models, const std::string& title) {
  if (models.empty()) throw std::invalid_argument("a report needs at least one price list");
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
      << "<meta charset=\"utf-8\"/>\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "style-src 'unsafe-inline'\"/>\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
      << "<title>" << escape(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n"
      << "<body>\n<h1>" << escape(title) << "</h1>\n<p class=\"meta\">Skip-softmax price lists of "
      << models.size() << (models.size() == 1 ? " model" : " models")
      << ", written by <code>skipsoftmax report</code>. Speedups are against dense attention at "
         "the same length; the Amdahl estimate is 1 / (1 - share \xc3\x97 (1 - 1 / kernel "
         "speedup)) with attention's share of the dense GPU time.</p>\n";
  overview(out, models);
  out << '\n';
  for (std::size_t i = 0; i < models.size(); ++i) {
    model_section(out, models[i], i);
    out << '\n';
  }
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace skipsoftmax
