#include "price.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "file_io.h"
#include "table_json.h"

namespace skipsoftmax {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

double amdahl_speedup(double attention_share, double kernel_speedup) {
  if (!(attention_share >= 0.0 && attention_share <= 1.0)) {
    throw std::invalid_argument("attention share must lie in [0, 1]");
  }
  if (!(std::isfinite(kernel_speedup) && kernel_speedup > 0.0)) {
    throw std::invalid_argument("kernel speedup must be finite and > 0");
  }
  return 1.0 / (1.0 - attention_share * (1.0 - 1.0 / kernel_speedup));
}

std::optional<std::size_t> recommend_tier(const std::vector<TierAccuracy>& tiers, double bound) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const TierAccuracy& t = tiers[i];
    if (t.ratios.empty()) throw std::invalid_argument("a tier has no accuracy ratio");
    bool meets = true;
    for (double r : t.ratios) {
      if (std::isnan(r)) throw std::invalid_argument("an accuracy ratio is NaN");
      meets = meets && r >= bound - kBoundSlack;
    }
    if (meets && (!best || t.sparsity > tiers[*best].sparsity)) best = i;
  }
  return best;
}

const char* to_string(SkipScope scope) {
  switch (scope) {
    case SkipScope::kNone:
      return "none";
    case SkipScope::kPrefill:
      return "prefill";
    case SkipScope::kDecode:
      return "decode";
    case SkipScope::kBoth:
      return "both";
  }
  return "?";
}

bool skips(SkipScope scope, Phase phase) {
  return scope == SkipScope::kBoth ||
         (phase == Phase::kPrefill ? scope == SkipScope::kPrefill : scope == SkipScope::kDecode);
}

const LadderTier* PhaseCalibration::find_tier(double sparsity) const {
  for (const LadderTier& t : ladder) {
    if (std::abs(t.sparsity - sparsity) <= kTierTolerance) return &t;
  }
  return nullptr;
}

std::string PriceArm::label() const {
  if (dense()) return "dense";
  const std::string key = tier.value_or("?");
  return skip == SkipScope::kBoth ? key : std::string(to_string(skip)) + " " + key;
}

const PriceArm& PriceList::dense_arm() const {
  for (const PriceArm& arm : arms) {
    if (arm.dense()) return arm;
  }
  throw std::invalid_argument("arms: no dense arm (skip \"none\")");
}

namespace {

std::string num(double v) {
  std::ostringstream out;
  out << std::setprecision(6) << v;
  return out.str();
}

std::invalid_argument error_at(const std::string& where, const std::string& what) {
  return std::invalid_argument(where + ": " + what);
}

bool agrees(double stored, double computed) {
  return std::abs(stored - computed) <= kDerivedTolerance * std::max(1.0, std::abs(computed));
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// The tier a non-dense arm names, as a fraction; throws for a malformed key.
double tier_fraction(const std::string& key, const std::string& where) {
  try {
    return parse_target_sparsity(key);
  } catch (const std::invalid_argument& e) {
    throw error_at(where, e.what());
  }
}

// ---- derivation -------------------------------------------------------------------------------

// What the rule recommends among the arms of one skip scope; nullopt: stay dense.
std::optional<std::string> recommended(const PriceList& p, SkipScope scope, double bound) {
  std::vector<const PriceArm*> arms;
  std::vector<TierAccuracy> tiers;
  for (const PriceArm& arm : p.arms) {
    if (arm.skip != scope) continue;
    TierAccuracy t{arm.tier_sparsity, {}};
    for (const PricePoint& point : arm.points) {
      if (point.accuracy) t.ratios.push_back(point.accuracy->ratio);
    }
    arms.push_back(&arm);
    tiers.push_back(std::move(t));
  }
  const std::optional<std::size_t> best = recommend_tier(tiers, bound);
  if (!best) return std::nullopt;
  return arms[*best]->tier;
}

// The skip scopes of the non-dense arms: prefill, decode, both, as far as present.
std::vector<SkipScope> arm_scopes(const PriceList& p) {
  std::vector<SkipScope> scopes;
  for (SkipScope s : {SkipScope::kPrefill, SkipScope::kDecode, SkipScope::kBoth}) {
    for (const PriceArm& arm : p.arms) {
      if (arm.skip == s) {
        scopes.push_back(s);
        break;
      }
    }
  }
  return scopes;
}

}  // namespace

void derive_price(PriceList& p) {
  const PriceArm dense = p.dense_arm();
  for (PriceArm& arm : p.arms) {
    if (arm.points.size() != dense.points.size()) {
      throw std::invalid_argument("arm " + arm.label() + " has " +
                                  std::to_string(arm.points.size()) + " points, dense has " +
                                  std::to_string(dense.points.size()));
    }
    for (std::size_t i = 0; i < arm.points.size(); ++i) {
      PricePoint& pt = arm.points[i];
      const PricePoint& d = dense.points[i];
      const std::string where = "arm " + arm.label() + " at length " + std::to_string(pt.length);
      if (pt.length != d.length) throw error_at(where, "dense has no point at this length");
      if (!(pt.ttft_ms > 0 && pt.tpot_ms > 0)) throw error_at(where, "times must be > 0");
      pt.phases.prefill.speedup = d.ttft_ms / pt.ttft_ms;
      pt.phases.decode.speedup = d.tpot_ms / pt.tpot_ms;
      for (Phase phase : kPhases) {
        PhaseMetrics& m = pt.phases[phase];
        try {
          m.amdahl = amdahl_speedup(d.phases[phase].attention_share, m.kernel_speedup);
        } catch (const std::invalid_argument& e) {
          throw error_at(where + ", " + to_string(phase), e.what());
        }
      }
      if (!pt.accuracy) continue;
      if (!d.accuracy) throw error_at(where, "dense has no accuracy at this length");
      AccuracyRecord& a = *pt.accuracy;
      const AccuracyRecord& da = *d.accuracy;
      if (a.scores.empty() || a.scores.size() != da.scores.size()) {
        throw error_at(where, "scores do not match dense's tasks");
      }
      a.score = mean(a.scores);
      const double dense_score = mean(da.scores);
      if (!(dense_score > 0)) throw error_at(where, "dense scores 0: no accuracy ratio");
      if (!(da.perplexity > 0)) throw error_at(where, "dense perplexity must be > 0");
      a.ratio = a.score / dense_score;
      a.perplexity_ratio = a.perplexity / da.perplexity;
      a.task_ratios.clear();
      for (std::size_t t = 0; t < a.scores.size(); ++t) {
        a.task_ratios.push_back(da.scores[t] > 0 ? std::optional(a.scores[t] / da.scores[t])
                                                 : std::nullopt);
      }
    }
  }
  p.recommendations.clear();
  for (double bound : kPriceBounds) {
    for (SkipScope scope : arm_scopes(p)) {
      p.recommendations.push_back({bound, scope, recommended(p, scope, bound)});
    }
  }
}

// ---- validation -------------------------------------------------------------------------------

namespace {

class Checker {
 public:
  explicit Checker(std::string context) : context_(std::move(context)) {}

  std::string where(const std::string& path) const { return context_ + ": " + path; }
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw error_at(where(path), what);
  }
  void finite(double v, const std::string& path) const {
    if (std::isnan(v)) fail(path, "is NaN");
    if (!std::isfinite(v)) fail(path, "is infinite");
  }
  void positive(double v, const std::string& path) const {
    finite(v, path);
    if (!(v > 0)) fail(path, num(v) + " must be > 0");
  }
  void in_range(double v, double lo, double hi, const std::string& path) const {
    finite(v, path);
    if (v < lo || v > hi) fail(path, num(v) + " must lie in [" + num(lo) + ", " + num(hi) + "]");
  }
  void non_empty(const std::string& s, const std::string& path) const {
    if (s.empty()) fail(path, "must not be empty");
  }
  void derived(double stored, double computed, const std::string& path,
               const std::string& formula) const {
    finite(stored, path);
    if (!agrees(stored, computed)) {
      fail(path, num(stored) + " disagrees with " + formula + " = " + num(computed));
    }
  }
  void increasing(const std::vector<std::int64_t>& v, const std::string& path) const {
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (v[i] <= 0) fail(at, std::to_string(v[i]) + " must be > 0");
      if (i > 0 && v[i] <= v[i - 1]) {
        fail(at, std::to_string(v[i]) + " is not above the previous " + std::to_string(v[i - 1]) +
                     ": lengths must be strictly increasing");
      }
    }
  }

 private:
  std::string context_;
};

void check_advice(const Checker& c, const ShapeAdviceRecord& a, const std::string& path) {
  c.in_range(a.sparsity, 0.0, 1.0, path + ".sparsity");
  c.in_range(a.mass_share, 0.0, 1.0, path + ".mass_share");
  if (a.mass_ratio_limit) c.positive(*a.mass_ratio_limit, path + ".mass_ratio_limit");
  if (a.sparsity == 0.0) {
    if (a.mass_ratio) c.fail(path + ".mass_ratio", "must be null when sparsity is 0");
    if (a.on) c.fail(path + ".verdict", "ON, but the deployed table skips nothing (sparsity 0)");
    return;
  }
  if (!a.mass_ratio) c.fail(path + ".mass_ratio", "is null, but sparsity is not 0");
  c.derived(*a.mass_ratio, a.mass_share / a.sparsity, path + ".mass_ratio",
            "mass_share / sparsity");
  if (a.mass_ratio_limit && a.on != (a.mass_share / a.sparsity < *a.mass_ratio_limit)) {
    c.fail(path + ".verdict", std::string(a.on ? "ON" : "OFF") + ", but mass_ratio " +
                                  num(*a.mass_ratio) + (a.on ? " >= " : " < ") +
                                  "mass_ratio_limit " + num(*a.mass_ratio_limit));
  }
  if (a.calibrated_max_seqlen && *a.calibrated_max_seqlen <= 0) {
    c.fail(path + ".calibrated_max_seqlen", "must be > 0");
  }
  if (a.requests && *a.requests < 0) c.fail(path + ".requests", "must be >= 0");
}

void check_ladder(const Checker& c, const std::vector<LadderTier>& ladder,
                  const std::string& path) {
  for (std::size_t i = 0; i < ladder.size(); ++i) {
    const LadderTier& t = ladder[i];
    const std::string at = path + ".\"" + t.key + "\"";
    if (!(t.sparsity > 0 && t.sparsity < 1)) c.fail(at, "tier must lie in (0, 1)");
    if (std::abs(tier_fraction(t.key, c.where(at)) - t.sparsity) > kTierTolerance) {
      c.fail(at, "key and sparsity " + num(t.sparsity) + " disagree");
    }
    if (i == 0) continue;
    const LadderTier& lower = ladder[i - 1];
    if (t.sparsity - lower.sparsity <= kTierTolerance) {
      c.fail(at, "tiers must be distinct and ordered by sparsity (after \"" + lower.key + "\")");
    }
  }
  // A higher target needs a larger lambda at every length, so S never falls up the ladder.
  for (std::size_t i = 0; i < ladder.size(); ++i) {
    for (std::size_t j = i + 1; j < ladder.size(); ++j) {
      for (const ScaleTableRow& hi : ladder[j].table.rows()) {
        for (const ScaleTableRow& lo : ladder[i].table.rows()) {
          if (lo.seqlen_bin == hi.seqlen_bin && hi.scale < lo.scale) {
            c.fail(path + ".\"" + ladder[j].key + "\"",
                   "S " + num(hi.scale) + " at bin " + std::to_string(hi.seqlen_bin) +
                       " is below tier \"" + ladder[i].key + "\"'s " + num(lo.scale) +
                       ": the ladder must not fall as sparsity rises");
          }
        }
      }
    }
  }
}

void check_metrics(const Checker& c, const PhaseMetrics& m, const PhaseMetrics& dense,
                   double dense_time, double time, bool is_dense, const std::string& path) {
  c.positive(m.kernel_speedup, path + ".kernel_speedup");
  c.in_range(m.attention_share, 0.0, 1.0, path + ".attention_share");
  c.in_range(m.tile_sparsity, 0.0, 1.0, path + ".tile_sparsity");
  c.derived(m.speedup, dense_time / time, path + ".speedup", "dense time / time");
  c.derived(m.amdahl, amdahl_speedup(dense.attention_share, m.kernel_speedup), path + ".amdahl",
            "1 / (1 - dense share * (1 - 1 / kernel_speedup))");
  if (is_dense) {
    c.derived(m.kernel_speedup, 1.0, path + ".kernel_speedup", "1 for the dense arm");
    if (m.tile_sparsity != 0.0) c.fail(path + ".tile_sparsity", "must be 0 for the dense arm");
  }
}

void check_accuracy(const Checker& c, const PriceList& p, const AccuracyRecord& a,
                    const AccuracyRecord& d, const std::string& path) {
  if (a.scores.size() != p.tasks.size() || a.task_ratios.size() != p.tasks.size()) {
    c.fail(path, "needs one score and one ratio per task");
  }
  for (std::size_t t = 0; t < p.tasks.size(); ++t) {
    const std::string at = path + ".scores.\"" + p.tasks[t] + "\"";
    c.finite(a.scores[t], at);
    if (a.scores[t] < 0) c.fail(at, "must be >= 0");
  }
  c.positive(a.perplexity, path + ".perplexity");
  const double dense_score = mean(d.scores);
  if (!(dense_score > 0)) c.fail(path, "dense scores 0 on every task: the ratio is undefined");
  c.derived(a.score, mean(a.scores), path + ".score", "the mean of scores");
  c.derived(a.ratio, mean(a.scores) / dense_score, path + ".ratio", "score / dense score");
  c.derived(a.perplexity_ratio, a.perplexity / d.perplexity, path + ".perplexity_ratio",
            "perplexity / dense perplexity");
  for (std::size_t t = 0; t < p.tasks.size(); ++t) {
    const std::string at = path + ".task_ratios.\"" + p.tasks[t] + "\"";
    if (d.scores[t] == 0) {
      if (a.task_ratios[t]) c.fail(at, "must be null: dense scores 0 on this task");
    } else if (!a.task_ratios[t]) {
      c.fail(at, "is null, but dense scores " + num(d.scores[t]));
    } else {
      c.derived(*a.task_ratios[t], a.scores[t] / d.scores[t], at, "score / dense score");
    }
  }
}

void check_arm_tier(const Checker& c, const PriceList& p, const PriceArm& arm,
                    const std::string& path) {
  if (arm.dense()) {
    if (arm.tier) c.fail(path + ".tier", "must be null for the dense arm");
    return;
  }
  if (!arm.tier) c.fail(path + ".tier", "is null, but the arm skips");
  const double sparsity = tier_fraction(*arm.tier, c.where(path + ".tier"));
  if (std::abs(sparsity - arm.tier_sparsity) > kTierTolerance) {
    c.fail(path + ".tier", "key and sparsity " + num(arm.tier_sparsity) + " disagree");
  }
  for (Phase phase : kPhases) {
    if (!skips(arm.skip, phase)) continue;
    const std::optional<PhaseCalibration>& cal = p.phases[phase];
    if (!cal) {
      c.fail(path + ".skip", std::string("skips ") + to_string(phase) + ", which has no phases." +
                                 to_string(phase));
    }
    if (!cal->find_tier(sparsity)) {
      c.fail(path + ".tier",
             "\"" + *arm.tier + "\" is not in phases." + to_string(phase) + ".ladder");
    }
  }
}

void check_arms(const Checker& c, const PriceList& p) {
  if (p.arms.empty()) c.fail("arms", "must not be empty");
  const auto n_dense =
      std::count_if(p.arms.begin(), p.arms.end(), [](const PriceArm& a) { return a.dense(); });
  if (n_dense != 1) {
    c.fail("arms", "needs exactly one dense arm (skip \"none\"), has " + std::to_string(n_dense));
  }
  // The dense arm first: every other arm's derived fields divide by its measurements.
  std::vector<std::size_t> order(p.arms.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_partition(order.begin(), order.end(),
                        [&](std::size_t i) { return p.arms[i].dense(); });
  const PriceArm& dense = p.dense_arm();
  for (std::size_t ai : order) {
    const PriceArm& arm = p.arms[ai];
    const std::string path = "arms[" + std::to_string(ai) + "] (" + arm.label() + ")";
    check_arm_tier(c, p, arm, path);
    for (std::size_t aj = 0; aj < ai; ++aj) {
      const PriceArm& other = p.arms[aj];
      if (!arm.dense() && other.skip == arm.skip &&
          std::abs(other.tier_sparsity - arm.tier_sparsity) <= kTierTolerance) {
        c.fail(path, "repeats arms[" + std::to_string(aj) + "]");
      }
    }
    if (arm.points.size() != p.lengths.size()) {
      c.fail(path + ".points", "has " + std::to_string(arm.points.size()) +
                                   " points, one per length needs " +
                                   std::to_string(p.lengths.size()));
    }
    for (std::size_t i = 0; i < arm.points.size(); ++i) {
      const PricePoint& pt = arm.points[i];
      const PricePoint& d = dense.points[i];
      const std::string at = path + ".points[" + std::to_string(i) + "]";
      if (pt.length != p.lengths[i]) {
        c.fail(at + ".length", std::to_string(pt.length) + " is not lengths[" + std::to_string(i) +
                                   "] = " + std::to_string(p.lengths[i]));
      }
      const std::string here = at + " (length " + std::to_string(pt.length) + ")";
      c.positive(pt.ttft_ms, here + ".ttft_ms");
      c.positive(pt.tpot_ms, here + ".tpot_ms");
      for (Phase phase : kPhases) {
        const double dense_time = phase == Phase::kPrefill ? d.ttft_ms : d.tpot_ms;
        const double time = phase == Phase::kPrefill ? pt.ttft_ms : pt.tpot_ms;
        check_metrics(c, pt.phases[phase], d.phases[phase], dense_time, time, arm.dense(),
                      here + "." + to_string(phase));
      }
      const bool served =
          std::binary_search(p.accuracy_lengths.begin(), p.accuracy_lengths.end(), pt.length);
      if (served != pt.accuracy.has_value()) {
        c.fail(here + ".accuracy", served ? "is missing at an accuracy length"
                                          : "is given, but the length is not an accuracy length");
      }
      if (pt.accuracy) check_accuracy(c, p, *pt.accuracy, *d.accuracy, here + ".accuracy");
    }
  }
}

void check_recommendations(const Checker& c, const PriceList& p) {
  const std::vector<SkipScope> scopes = arm_scopes(p);
  for (std::size_t i = 0; i < p.recommendations.size(); ++i) {
    const PriceRecommendation& r = p.recommendations[i];
    const std::string path = "recommendations[" + std::to_string(i) + "]";
    c.in_range(r.bound, 0.0, 1.0, path + ".bound");
    if (std::find(scopes.begin(), scopes.end(), r.skip) == scopes.end()) {
      c.fail(path + ".skip", std::string("no arm skips \"") + to_string(r.skip) + "\"");
    }
    for (std::size_t j = 0; j < i; ++j) {
      const PriceRecommendation& o = p.recommendations[j];
      if (o.bound == r.bound && o.skip == r.skip) {
        c.fail(path, "repeats recommendations[" + std::to_string(j) + "]");
      }
    }
    const std::optional<std::string> want = recommended(p, r.skip, r.bound);
    const bool same = want && r.tier
                          ? std::abs(tier_fraction(*r.tier, c.where(path + ".tier")) -
                                     tier_fraction(*want, c.where(path))) <= kTierTolerance
                          : want.has_value() == r.tier.has_value();
    if (!same) {
      c.fail(path + ".tier",
             "\"" + r.tier.value_or("dense") +
                 "\", but the highest tier whose accuracy ratio is >= " + num(r.bound) +
                 " at every accuracy length is \"" + want.value_or("dense") + "\"");
    }
  }
  for (double bound : kPriceBounds) {
    for (SkipScope scope : scopes) {
      const bool found = std::any_of(
          p.recommendations.begin(), p.recommendations.end(),
          [&](const PriceRecommendation& r) { return r.bound == bound && r.skip == scope; });
      if (!found) {
        c.fail("recommendations",
               "missing bound " + num(bound) + " for skip \"" + to_string(scope) + "\"");
      }
    }
  }
}

}  // namespace

void validate_price(const PriceList& p, const std::string& context) {
  const Checker c(context);
  c.non_empty(p.model_name, "model.name");
  c.non_empty(p.architecture, "model.architecture");
  c.non_empty(p.gpu, "provenance.gpu");
  c.non_empty(p.git_revision, "provenance.git_revision");
  c.non_empty(p.command, "provenance.command");
  for (const auto& [key, value] : p.setup) {
    if (!value.is_primitive() || value.is_null()) {
      c.fail("setup." + key, "must be a string, number or boolean");
    }
  }
  if (!p.phases.prefill && !p.phases.decode) c.fail("phases", "needs prefill, decode or both");
  for (Phase phase : kPhases) {
    if (!p.phases[phase]) continue;
    const std::string path = std::string("phases.") + to_string(phase);
    check_advice(c, p.phases[phase]->advice, path + ".advice");
    check_ladder(c, p.phases[phase]->ladder, path + ".ladder");
  }
  if (p.lengths.empty()) c.fail("lengths", "must not be empty");
  c.increasing(p.lengths, "lengths");
  if (p.accuracy_lengths.empty()) c.fail("accuracy_lengths", "must not be empty");
  c.increasing(p.accuracy_lengths, "accuracy_lengths");
  for (std::int64_t l : p.accuracy_lengths) {
    if (!std::binary_search(p.lengths.begin(), p.lengths.end(), l)) {
      c.fail("accuracy_lengths", std::to_string(l) + " is not one of lengths");
    }
  }
  if (p.tasks.empty()) c.fail("tasks", "must not be empty");
  for (std::size_t i = 0; i < p.tasks.size(); ++i) {
    c.non_empty(p.tasks[i], "tasks[" + std::to_string(i) + "]");
    if (std::find(p.tasks.begin(), p.tasks.begin() + static_cast<std::ptrdiff_t>(i), p.tasks[i]) !=
        p.tasks.begin() + static_cast<std::ptrdiff_t>(i)) {
      c.fail("tasks[" + std::to_string(i) + "]", "\"" + p.tasks[i] + "\" is listed twice");
    }
  }
  check_arms(c, p);
  check_recommendations(c, p);
}

// ---- JSON -------------------------------------------------------------------------------------

namespace {

// A JSON value and where it sits in the file, for errors such as
// "price.json: arms[1].points[0].ttft_ms: expected a number, got string".
class Field {
 public:
  Field(const json& value, std::string context, std::string path)
      : value_(&value), context_(std::move(context)), path_(std::move(path)) {}

  const json& value() const { return *value_; }
  std::string where() const { return path_.empty() ? context_ : context_ + ": " + path_; }
  [[noreturn]] void fail(const std::string& what) const { throw error_at(where(), what); }

  bool is_null() const { return value_->is_null(); }

  // Only keys in `allowed`; every key in `required` present.
  void keys(std::initializer_list<std::string_view> required,
            std::initializer_list<std::string_view> optional = {}) const {
    expect(value_->is_object(), "an object");
    for (std::string_view key : required) {
      if (!value_->contains(key)) fail("missing key \"" + std::string(key) + "\"");
    }
    for (const auto& item : value_->items()) {
      const auto is = [&](std::string_view k) { return k == item.key(); };
      if (std::none_of(required.begin(), required.end(), is) &&
          std::none_of(optional.begin(), optional.end(), is)) {
        fail("unknown key \"" + item.key() + "\"");
      }
    }
  }
  Field at(std::string_view key) const {
    expect(value_->is_object(), "an object");
    const auto it = value_->find(key);
    if (it == value_->end()) fail("missing key \"" + std::string(key) + "\"");
    return Field(*it, context_, child(key));
  }
  std::optional<Field> find(std::string_view key) const {
    expect(value_->is_object(), "an object");
    const auto it = value_->find(key);
    if (it == value_->end()) return std::nullopt;
    return Field(*it, context_, child(key));
  }
  std::vector<Field> elements() const {
    expect(value_->is_array(), "an array");
    std::vector<Field> out;
    for (std::size_t i = 0; i < value_->size(); ++i) {
      out.emplace_back((*value_)[i], context_, path_ + "[" + std::to_string(i) + "]");
    }
    return out;
  }
  std::vector<std::pair<std::string, Field>> members() const {
    expect(value_->is_object(), "an object");
    std::vector<std::pair<std::string, Field>> out;
    for (const auto& item : value_->items()) {
      out.emplace_back(item.key(), Field(item.value(), context_, child(item.key())));
    }
    return out;
  }

  double number() const {
    expect(value_->is_number(), "a number");
    return value_->get<double>();
  }
  std::optional<double> number_or_null() const {
    if (is_null()) return std::nullopt;
    return number();
  }
  std::int64_t integer() const {
    const double v = number();
    if (v != std::floor(v) || std::abs(v) > 9.0e15) fail(num(v) + " is not an integer");
    return static_cast<std::int64_t>(v);
  }
  std::string string() const {
    expect(value_->is_string(), "a string");
    return value_->get<std::string>();
  }
  std::optional<std::string> string_or_null() const {
    if (is_null()) return std::nullopt;
    return string();
  }
  bool boolean() const {
    expect(value_->is_boolean(), "true or false");
    return value_->get<bool>();
  }
  std::vector<std::int64_t> integers() const {
    std::vector<std::int64_t> out;
    for (const Field& f : elements()) out.push_back(f.integer());
    return out;
  }

 private:
  void expect(bool ok, const char* what) const {
    if (!ok) fail(std::string("expected ") + what + ", got " + value_->type_name());
  }
  std::string child(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const json* value_;
  std::string context_;
  std::string path_;
};

template <typename T>
std::optional<T> optional_of(const Field& parent, std::string_view key, T (Field::*get)() const) {
  const std::optional<Field> f = parent.find(key);
  if (!f) return std::nullopt;
  return ((*f).*get)();
}

ShapeAdviceRecord advice_from(const Field& f) {
  f.keys({"verdict", "sparsity", "mass_share", "mass_ratio"},
         {"mass_ratio_limit", "requests", "calibrated_max_seqlen", "reason"});
  ShapeAdviceRecord a;
  const Field verdict = f.at("verdict");
  const std::string v = verdict.string();
  if (v != "ON" && v != "OFF") verdict.fail("\"" + v + "\" is neither \"ON\" nor \"OFF\"");
  a.on = v == "ON";
  a.sparsity = f.at("sparsity").number();
  a.mass_share = f.at("mass_share").number();
  a.mass_ratio = f.at("mass_ratio").number_or_null();
  a.mass_ratio_limit = optional_of(f, "mass_ratio_limit", &Field::number);
  a.requests = optional_of(f, "requests", &Field::integer);
  a.calibrated_max_seqlen = optional_of(f, "calibrated_max_seqlen", &Field::integer);
  a.reason = optional_of(f, "reason", &Field::string);
  return a;
}

PhaseCalibration phase_from(const Field& f) {
  f.keys({"advice", "deployed", "ladder"});
  PhaseCalibration cal;
  cal.advice = advice_from(f.at("advice"));
  const Field deployed = f.at("deployed");
  cal.deployed = scale_table_from_json(deployed.value(), deployed.where());
  for (const auto& [key, table] : f.at("ladder").members()) {
    cal.ladder.push_back({key, tier_fraction(key, table.where()),
                          scale_table_from_json(table.value(), table.where())});
  }
  std::stable_sort(
      cal.ladder.begin(), cal.ladder.end(),
      [](const LadderTier& a, const LadderTier& b) { return a.sparsity < b.sparsity; });
  return cal;
}

PhaseMetrics metrics_from(const Field& f) {
  f.keys({"speedup", "kernel_speedup", "attention_share", "amdahl", "tile_sparsity"});
  return {f.at("speedup").number(), f.at("kernel_speedup").number(),
          f.at("attention_share").number(), f.at("amdahl").number(),
          f.at("tile_sparsity").number()};
}

// Task-keyed object -> values in task order; every task present, no other key.
template <typename T>
std::vector<T> by_task(const Field& f, const std::vector<std::string>& tasks,
                       T (Field::*get)() const) {
  std::vector<T> out;
  for (const std::string& task : tasks) out.push_back((f.at(task).*get)());
  for (const auto& [key, value] : f.members()) {
    if (std::find(tasks.begin(), tasks.end(), key) == tasks.end()) {
      value.fail("\"" + key + "\" is not one of tasks");
    }
  }
  return out;
}

AccuracyRecord accuracy_from(const Field& f, const std::vector<std::string>& tasks) {
  f.keys({"scores", "task_ratios", "score", "ratio", "perplexity", "perplexity_ratio"});
  AccuracyRecord a;
  a.scores = by_task(f.at("scores"), tasks, &Field::number);
  a.task_ratios = by_task(f.at("task_ratios"), tasks, &Field::number_or_null);
  a.score = f.at("score").number();
  a.ratio = f.at("ratio").number();
  a.perplexity = f.at("perplexity").number();
  a.perplexity_ratio = f.at("perplexity_ratio").number();
  return a;
}

PricePoint point_from(const Field& f, const std::vector<std::string>& tasks) {
  f.keys({"length", "ttft_ms", "tpot_ms", "prefill", "decode"}, {"accuracy"});
  PricePoint pt;
  pt.length = f.at("length").integer();
  pt.ttft_ms = f.at("ttft_ms").number();
  pt.tpot_ms = f.at("tpot_ms").number();
  pt.phases.prefill = metrics_from(f.at("prefill"));
  pt.phases.decode = metrics_from(f.at("decode"));
  if (const std::optional<Field> a = f.find("accuracy")) pt.accuracy = accuracy_from(*a, tasks);
  return pt;
}

SkipScope scope_from(const Field& f) {
  const std::string s = f.string();
  for (SkipScope scope :
       {SkipScope::kNone, SkipScope::kPrefill, SkipScope::kDecode, SkipScope::kBoth}) {
    if (s == to_string(scope)) return scope;
  }
  f.fail("\"" + s + "\" is none of \"none\", \"prefill\", \"decode\", \"both\"");
}

PriceArm arm_from(const Field& f, const std::vector<std::string>& tasks) {
  f.keys({"skip", "tier", "points"});
  PriceArm arm;
  arm.skip = scope_from(f.at("skip"));
  const Field tier = f.at("tier");
  arm.tier = tier.string_or_null();
  if (arm.tier) arm.tier_sparsity = tier_fraction(*arm.tier, tier.where());
  for (const Field& p : f.at("points").elements()) arm.points.push_back(point_from(p, tasks));
  return arm;
}

PriceRecommendation recommendation_from(const Field& f) {
  f.keys({"bound", "skip", "tier"});
  const Field tier = f.at("tier");
  PriceRecommendation r{f.at("bound").number(), scope_from(f.at("skip")), tier.string_or_null()};
  if (r.tier) tier_fraction(*r.tier, tier.where());
  return r;
}

ordered_json table_json(const ScaleTable& t) { return ordered_json(scale_table_to_json(t)); }

ordered_json or_null(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json();
}
ordered_json or_null(const std::optional<std::string>& v) {
  return v ? ordered_json(*v) : ordered_json();
}

ordered_json metrics_json(const PhaseMetrics& m) {
  return {{"speedup", m.speedup},
          {"kernel_speedup", m.kernel_speedup},
          {"attention_share", m.attention_share},
          {"amdahl", m.amdahl},
          {"tile_sparsity", m.tile_sparsity}};
}

ordered_json accuracy_json(const AccuracyRecord& a, const std::vector<std::string>& tasks) {
  ordered_json scores = ordered_json::object(), ratios = ordered_json::object();
  for (std::size_t t = 0; t < tasks.size() && t < a.scores.size(); ++t) {
    scores[tasks[t]] = a.scores[t];
    ratios[tasks[t]] = t < a.task_ratios.size() ? or_null(a.task_ratios[t]) : ordered_json();
  }
  return {{"scores", scores},           {"task_ratios", ratios},
          {"score", a.score},           {"ratio", a.ratio},
          {"perplexity", a.perplexity}, {"perplexity_ratio", a.perplexity_ratio}};
}

ordered_json advice_json(const ShapeAdviceRecord& a) {
  ordered_json j = {{"verdict", a.on ? "ON" : "OFF"},
                    {"sparsity", a.sparsity},
                    {"mass_share", a.mass_share},
                    {"mass_ratio", or_null(a.mass_ratio)}};
  if (a.mass_ratio_limit) j["mass_ratio_limit"] = *a.mass_ratio_limit;
  if (a.requests) j["requests"] = *a.requests;
  if (a.calibrated_max_seqlen) j["calibrated_max_seqlen"] = *a.calibrated_max_seqlen;
  if (a.reason) j["reason"] = *a.reason;
  return j;
}

}  // namespace

PerPhase<std::optional<PhaseCalibration>> calibration_from_checkpoint(
    const CheckpointConfig& checkpoint, const std::string& context) {
  // What export deploys from this checkpoint with no flags (it throws for a target_sparsity
  // naming a missing tier).
  ExportPlan plan;
  try {
    plan = plan_export(checkpoint, {});
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(context + ": " + e.what());
  }
  PerPhase<std::optional<PhaseCalibration>> out;
  for (Phase phase : kPhases) {
    const CheckpointPhase& cp = checkpoint.phases[phase];
    if (cp.tiers.empty()) continue;
    const std::optional<std::string>& advice = phase == Phase::kPrefill
                                                   ? checkpoint.shape_advice_json
                                                   : checkpoint.decode_shape_advice_json;
    if (!advice) {
      throw std::invalid_argument(
          context + ": " + shape_advice_key(phase) +
          ": missing (calibrate the checkpoint with skipsoftmax calibrate)");
    }
    const json parsed = json::parse(*advice);
    PhaseCalibration cal;
    cal.advice = advice_from(Field(parsed, context, shape_advice_key(phase)));
    cal.deployed = plan.phases[phase].threshold.scale_table();
    for (const Tier& t : cp.tiers) cal.ladder.push_back({t.key, t.sparsity, t.table});
    out[phase] = std::move(cal);
  }
  return out;
}

std::vector<PriceArmPlan> plan_price_arms(const PerPhase<std::optional<PhaseCalibration>>& cal,
                                          const std::vector<std::string>& wanted) {
  std::vector<PriceArmPlan> plans;
  PriceArmPlan dense;
  for (Phase phase : kPhases) dense.flags[phase].scale_table = TableFlag{"none", ScaleTable()};
  plans.push_back(dense);
  std::vector<double> tiers;
  for (Phase phase : kPhases) {
    if (!cal[phase]) continue;
    for (const LadderTier& t : cal[phase]->ladder) {
      if (std::none_of(tiers.begin(), tiers.end(),
                       [&](double x) { return std::abs(x - t.sparsity) <= kTierTolerance; })) {
        tiers.push_back(t.sparsity);
      }
    }
  }
  std::sort(tiers.begin(), tiers.end());
  if (!wanted.empty()) {
    std::vector<double> picked;
    for (const std::string& w : wanted) {
      double x = 0.0;
      try {
        x = parse_target_sparsity(w);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("--tiers: ") + e.what());
      }
      if (std::none_of(tiers.begin(), tiers.end(),
                       [&](double t) { return std::abs(t - x) <= kTierTolerance; })) {
        std::string have;
        for (double t : tiers) have += (have.empty() ? "" : ", ") + format_percent(t);
        throw std::invalid_argument("--tiers: " + w + " is not calibrated (the checkpoint has " +
                                    (have.empty() ? "none" : have) + ")");
      }
      if (std::any_of(picked.begin(), picked.end(),
                      [&](double t) { return std::abs(t - x) <= kTierTolerance; })) {
        throw std::invalid_argument("--tiers: " + w + " is given twice");
      }
      picked.push_back(x);
    }
    std::sort(picked.begin(), picked.end());
    tiers = picked;
  }
  for (double sparsity : tiers) {
    PriceArmPlan p;
    PerPhase<bool> has{};
    for (Phase phase : kPhases) {
      const LadderTier* t = cal[phase] ? cal[phase]->find_tier(sparsity) : nullptr;
      has[phase] = t != nullptr;
      if (t) {
        p.flags[phase].target_sparsity = t->key;
        if (!p.arm.tier) p.arm.tier = t->key;  // as the first phase that has it spells it
      } else {
        p.flags[phase].scale_table = TableFlag{"none", ScaleTable()};
      }
    }
    p.arm.skip = has.prefill && has.decode ? SkipScope::kBoth
                 : has.prefill             ? SkipScope::kPrefill
                                           : SkipScope::kDecode;
    p.arm.tier_sparsity = sparsity;
    plans.push_back(p);
  }
  return plans;
}

ordered_json price_summary_json(const PriceList& p, const std::string& price_file) {
  ordered_json arms = ordered_json::array();
  for (const PriceArm& arm : p.arms) {
    ordered_json points = ordered_json::array();
    for (const PricePoint& pt : arm.points) {
      ordered_json point = {{"length", pt.length},
                            {"ttft_ms", pt.ttft_ms},
                            {"tpot_ms", pt.tpot_ms},
                            {"prefill_speedup", pt.phases.prefill.speedup},
                            {"decode_speedup", pt.phases.decode.speedup},
                            {"prefill_tile_sparsity", pt.phases.prefill.tile_sparsity},
                            {"decode_tile_sparsity", pt.phases.decode.tile_sparsity}};
      if (pt.accuracy) {
        point["accuracy_ratio"] = pt.accuracy->ratio;
        point["perplexity_ratio"] = pt.accuracy->perplexity_ratio;
      }
      points.push_back(point);
    }
    arms.push_back({{"arm", arm.label()}, {"points", points}});
  }
  ordered_json recs = ordered_json::array();
  for (const PriceRecommendation& r : p.recommendations) {
    recs.push_back({{"bound", r.bound}, {"skip", to_string(r.skip)}, {"tier", or_null(r.tier)}});
  }
  return {{"price_file", price_file}, {"gpu", p.gpu}, {"git_revision", p.git_revision},
          {"date", or_null(p.date)},  {"arms", arms}, {"recommendations", recs}};
}

PriceList price_from_json(const json& j, const std::string& context) {
  const Field root(j, context, "");
  root.keys({"schema", "model", "provenance", "phases", "lengths", "accuracy_lengths", "tasks",
             "arms", "recommendations"},
            {"synthetic", "note", "setup"});
  const Field schema = root.at("schema");
  if (schema.string() != kPriceSchema) {
    schema.fail("\"" + schema.string() + "\" is not \"" + std::string(kPriceSchema) + "\"");
  }
  PriceList p;
  p.synthetic = optional_of(root, "synthetic", &Field::boolean).value_or(false);
  p.note = optional_of(root, "note", &Field::string);
  const Field model = root.at("model");
  model.keys({"name", "architecture"}, {"checkpoint"});
  p.model_name = model.at("name").string();
  p.architecture = model.at("architecture").string();
  p.checkpoint = optional_of(model, "checkpoint", &Field::string);
  const Field prov = root.at("provenance");
  prov.keys({"gpu", "git_revision", "command"}, {"date"});
  p.gpu = prov.at("gpu").string();
  p.git_revision = prov.at("git_revision").string();
  p.command = prov.at("command").string();
  p.date = optional_of(prov, "date", &Field::string);
  if (const std::optional<Field> setup = root.find("setup")) {
    for (const auto& [key, value] : setup->members()) {
      if (!value.value().is_primitive() || value.is_null()) {
        value.fail("expected a string, number or boolean, got " +
                   std::string(value.value().type_name()));
      }
      p.setup.emplace_back(key, value.value());
    }
  }
  const Field phases = root.at("phases");
  phases.keys({}, {"prefill", "decode"});
  for (Phase phase : kPhases) {
    if (const std::optional<Field> f = phases.find(to_string(phase)))
      p.phases[phase] = phase_from(*f);
  }
  p.lengths = root.at("lengths").integers();
  p.accuracy_lengths = root.at("accuracy_lengths").integers();
  for (const Field& t : root.at("tasks").elements()) p.tasks.push_back(t.string());
  for (const Field& a : root.at("arms").elements()) p.arms.push_back(arm_from(a, p.tasks));
  for (const Field& r : root.at("recommendations").elements()) {
    p.recommendations.push_back(recommendation_from(r));
  }
  validate_price(p, context);
  return p;
}

ordered_json price_to_json(const PriceList& p) {
  ordered_json j;
  j["schema"] = kPriceSchema;
  if (p.synthetic) j["synthetic"] = true;
  if (p.note) j["note"] = *p.note;
  j["model"] = {{"name", p.model_name}, {"architecture", p.architecture}};
  if (p.checkpoint) j["model"]["checkpoint"] = *p.checkpoint;
  j["provenance"] = {{"gpu", p.gpu}, {"git_revision", p.git_revision}, {"command", p.command}};
  if (p.date) j["provenance"]["date"] = *p.date;
  if (!p.setup.empty()) {
    j["setup"] = ordered_json::object();
    for (const auto& [key, value] : p.setup) j["setup"][key] = ordered_json(value);
  }
  j["phases"] = ordered_json::object();
  for (Phase phase : kPhases) {
    const std::optional<PhaseCalibration>& cal = p.phases[phase];
    if (!cal) continue;
    ordered_json ladder = ordered_json::object();
    for (const LadderTier& t : cal->ladder) ladder[t.key] = table_json(t.table);
    j["phases"][to_string(phase)] = {{"advice", advice_json(cal->advice)},
                                     {"deployed", table_json(cal->deployed)},
                                     {"ladder", ladder}};
  }
  j["lengths"] = p.lengths;
  j["accuracy_lengths"] = p.accuracy_lengths;
  j["tasks"] = p.tasks;
  j["arms"] = ordered_json::array();
  for (const PriceArm& arm : p.arms) {
    ordered_json points = ordered_json::array();
    for (const PricePoint& pt : arm.points) {
      ordered_json q = {{"length", pt.length},
                        {"ttft_ms", pt.ttft_ms},
                        {"tpot_ms", pt.tpot_ms},
                        {"prefill", metrics_json(pt.phases.prefill)},
                        {"decode", metrics_json(pt.phases.decode)}};
      if (pt.accuracy) q["accuracy"] = accuracy_json(*pt.accuracy, p.tasks);
      points.push_back(std::move(q));
    }
    j["arms"].push_back(
        {{"skip", to_string(arm.skip)}, {"tier", or_null(arm.tier)}, {"points", points}});
  }
  j["recommendations"] = ordered_json::array();
  for (const PriceRecommendation& r : p.recommendations) {
    j["recommendations"].push_back(
        {{"bound", r.bound}, {"skip", to_string(r.skip)}, {"tier", or_null(r.tier)}});
  }
  return j;
}

PriceList read_price_file(const std::filesystem::path& path) {
  return price_from_json(read_json_file(path), path.string());
}

}  // namespace skipsoftmax
