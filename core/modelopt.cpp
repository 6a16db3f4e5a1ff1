#include "modelopt.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace skipsoftmax::modelopt {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

std::invalid_argument error_in(const std::string& where, const std::string& what) {
  return std::invalid_argument(where + ": " + what);
}

std::string without_spaces(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }),
          s.end());
  return s;
}

double finite_number(const json& parent, const char* key, const std::string& where) {
  if (!parent.contains(key) || !parent.at(key).is_number()) {
    throw error_in(where + "." + key, "missing or not a number");
  }
  const double value = parent.at(key).get<double>();
  if (!std::isfinite(value)) throw error_in(where + "." + key, "must be finite");
  return value;
}

double target_in_range(const json& value, const std::string& where) {
  if (!value.is_number()) throw error_in(where, "expected a number in [0, 1]");
  const double t = value.get<double>();
  if (!(t >= 0.0 && t <= 1.0)) throw error_in(where, "must lie in [0, 1]");
  return t;
}

}  // namespace

SkipBody find_skip_body(const json& block, std::vector<std::string>& notes) {
  const std::string root = kBlockKey;
  if (!block.is_object()) {
    throw error_in(root, "expected an object, got " + std::string(block.type_name()));
  }
  if (!block.contains("config_groups")) return {&block, root};
  for (const char* key : {"threshold_scale_factor", "ignore"}) {
    if (block.contains(key)) {
      throw error_in(root, std::string(key) +
                               " beside config_groups mixes the two schemas; move "
                               "it into the skip_softmax group");
    }
  }
  const std::string groups_where = root + ".config_groups";
  const json& groups = block.at("config_groups");
  if (!groups.is_object()) throw error_in(groups_where, "expected an object of groups");
  SkipBody found;
  std::string chosen;
  for (const auto& item : groups.items()) {
    const std::string where = groups_where + "." + item.key();
    if (!item.value().is_object()) throw error_in(where, "expected an object");
    const json algorithm = item.value().value("algorithm", json());
    if (algorithm != "skip_softmax") {
      notes.push_back(where + " (algorithm " + algorithm.dump() +
                      ") is not a skip_softmax group and is not read");
      continue;
    }
    if (!chosen.empty()) {
      throw error_in(groups_where, "two skip_softmax groups, " + chosen + " and " + item.key());
    }
    chosen = item.key();
    found = {&item.value(), where};
  }
  if (chosen.empty()) notes.push_back(groups_where + " has no skip_softmax group");
  return found;
}

void check_formula(const json& tsf, const std::string& where) {
  if (!tsf.is_object()) {
    throw error_in(where, "expected {\"formula\": \"" + std::string(kFormula) +
                              "\", \"coefficients\": {\"a\": ..., \"b\": ...}}, got " +
                              tsf.type_name());
  }
  if (!tsf.contains("formula") || !tsf.at("formula").is_string()) {
    throw error_in(where + ".formula", "missing; expected \"" + std::string(kFormula) + "\"");
  }
  const std::string formula = tsf.at("formula").get<std::string>();
  if (without_spaces(formula) != without_spaces(kFormula)) {
    throw error_in(where + ".formula",
                   "\"" + formula + "\" is not supported; only \"" + kFormula + "\" is");
  }
}

Curve read_curve(const json& c, const std::string& where) {
  if (!c.is_object()) throw error_in(where, "expected {\"a\": ..., \"b\": ...}");
  const Curve curve{finite_number(c, "a", where), finite_number(c, "b", where)};
  if (curve.a <= 0.0) throw error_in(where + ".a", "must be > 0 (the scale factor at sparsity 0)");
  return curve;
}

std::vector<std::string> read_patterns(const json& ignore, const std::string& where) {
  if (!ignore.is_array()) throw error_in(where, "expected an array of fnmatch patterns");
  std::vector<std::string> patterns;
  for (const json& p : ignore) {
    if (!p.is_string()) throw error_in(where, "pattern " + p.dump() + " is not a string");
    patterns.push_back(p.get<std::string>());
  }
  return patterns;
}

LlmBlock read_llm_block(const json& block) {
  LlmBlock out;
  const SkipBody skip = find_skip_body(block, out.notes);
  if (skip.body == nullptr) return out;
  const json& body = *skip.body;
  if (body.contains("threshold_scale_factor")) {
    const std::string where = skip.where + ".threshold_scale_factor";
    const json& tsf = body.at("threshold_scale_factor");
    check_formula(tsf, where);
    std::optional<Curve> shared;
    if (tsf.contains("coefficients")) {
      shared = read_curve(tsf.at("coefficients"), where + ".coefficients");
    }
    for (Phase phase : kPhases) {
      const char* name = to_string(phase);
      out.curves[phase] =
          tsf.contains(name) ? read_curve(tsf.at(name), where + "." + name) : shared;
    }
  }
  if (body.contains("target_sparsity")) {
    const std::string where = skip.where + ".target_sparsity";
    const json& t = body.at("target_sparsity");
    for (Phase phase : kPhases) {
      const char* name = to_string(phase);
      if (t.is_object()) {
        if (t.contains(name)) out.targets[phase] = target_in_range(t.at(name), where + "." + name);
      } else {
        out.targets[phase] = target_in_range(t, where);
      }
    }
  }
  if (body.contains("ignore"))
    out.ignore = read_patterns(body.at("ignore"), skip.where + ".ignore");
  return out;
}

std::optional<Fit> fit_curve(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) return std::nullopt;
  double st = 0.0, sy = 0.0;
  for (const auto& [t, s] : points) {
    if (!(s > 0.0) || !std::isfinite(s) || !std::isfinite(t)) return std::nullopt;
    st += t;
    sy += std::log(s);
  }
  const double n = static_cast<double>(points.size());
  const double mt = st / n, my = sy / n;
  double stt = 0.0, sty = 0.0, syy = 0.0;
  for (const auto& [t, s] : points) {
    const double dt = t - mt, dy = std::log(s) - my;
    stt += dt * dt;
    sty += dt * dy;
    syy += dy * dy;
  }
  if (stt <= 0.0) return std::nullopt;  // one target only: no slope
  Fit fit;
  fit.curve.b = sty / stt;
  fit.curve.a = std::exp(my - fit.curve.b * mt);
  double residual = 0.0;
  for (const auto& [t, s] : points) {
    const double e = std::log(s) - (std::log(fit.curve.a) + fit.curve.b * t);
    residual += e * e;
  }
  fit.r_squared = syy > 0.0 ? 1.0 - residual / syy : 1.0;
  fit.points = static_cast<int>(points.size());
  return fit;
}

ordered_json block_json(const PerPhase<std::optional<Curve>>& curves,
                        const PerPhase<std::optional<double>>& targets,
                        const std::string& version) {
  ordered_json group = ordered_json::object();
  group["algorithm"] = "skip_softmax";
  ordered_json tsf = ordered_json::object();
  tsf["formula"] = kFormula;
  ordered_json target = ordered_json::object();
  for (Phase phase : kPhases) {
    if (!curves[phase]) continue;
    tsf[to_string(phase)] = {{"a", curves[phase]->a}, {"b", curves[phase]->b}};
    if (targets[phase]) target[to_string(phase)] = *targets[phase];
  }
  group["threshold_scale_factor"] = std::move(tsf);
  if (!target.empty()) group["target_sparsity"] = std::move(target);

  ordered_json block = ordered_json::object();
  block["config_groups"] = {{"group_0", std::move(group)}};
  block["producer"] = {{"name", "skipsoftmax"}, {"version", version}};
  return block;
}

namespace {

// The skip_softmax fields of a block of either schema (null: none), and its other groups.
std::pair<ordered_json, ordered_json> split_block(const ordered_json& block) {
  ordered_json skip, others = ordered_json::object();
  if (!block.is_object()) return {skip, others};
  if (!block.contains("config_groups")) {
    skip = block;
    skip.erase("producer");
    return {skip, others};
  }
  const ordered_json& groups = block.at("config_groups");
  if (!groups.is_object()) return {skip, others};
  for (const auto& item : groups.items()) {
    const bool is_skip = item.value().is_object() &&
                         item.value().value("algorithm", ordered_json()) == "skip_softmax";
    if (is_skip && skip.is_null()) {
      skip = item.value();
    } else {
      others[item.key()] = item.value();
    }
  }
  return {skip, others};
}

}  // namespace

ordered_json merge_block(const ordered_json& existing, const ordered_json& fresh,
                         const PerPhase<bool>& calibrated, const std::string& version) {
  auto [group, others] = split_block(existing);
  const ordered_json fresh_group = split_block(fresh).first;
  if (!group.is_object()) group = ordered_json::object();
  group["algorithm"] = "skip_softmax";
  ordered_json tsf = group.value("threshold_scale_factor", ordered_json::object());
  const bool same_formula =
      tsf.is_object() && tsf.contains("formula") && tsf.at("formula").is_string() &&
      without_spaces(tsf.at("formula").get<std::string>()) == without_spaces(kFormula);
  if (!same_formula) tsf = ordered_json::object();  // another curve: ours replaces it
  tsf["formula"] = kFormula;
  ordered_json targets = group.value("target_sparsity", ordered_json::object());
  if (!targets.is_object()) {  // one number for both phases: spelled per phase from here on
    const ordered_json both = targets;
    targets = ordered_json::object();
    if (both.is_number()) {
      for (Phase phase : kPhases) targets[to_string(phase)] = both;
    }
  }
  // Shared coefficients apply to the phase this run leaves alone.
  if (tsf.contains("coefficients")) {
    for (Phase phase : kPhases) {
      if (!calibrated[phase] && !tsf.contains(to_string(phase))) {
        tsf[to_string(phase)] = tsf.at("coefficients");
      }
    }
    tsf.erase("coefficients");
  }
  const ordered_json fresh_tsf = fresh_group.is_object()
                                     ? fresh_group.value("threshold_scale_factor", ordered_json())
                                     : ordered_json();
  const ordered_json fresh_targets = fresh_group.is_object()
                                         ? fresh_group.value("target_sparsity", ordered_json())
                                         : ordered_json();
  for (Phase phase : kPhases) {
    if (!calibrated[phase]) continue;
    const char* name = to_string(phase);
    tsf.erase(name);
    targets.erase(name);
    if (fresh_tsf.is_object() && fresh_tsf.contains(name)) tsf[name] = fresh_tsf.at(name);
    if (fresh_targets.is_object() && fresh_targets.contains(name)) {
      targets[name] = fresh_targets.at(name);
    }
  }
  group["threshold_scale_factor"] = std::move(tsf);
  if (targets.empty()) {
    group.erase("target_sparsity");
  } else {
    group["target_sparsity"] = std::move(targets);
  }
  std::string name = "group_0";
  for (int i = 1; others.contains(name); ++i) name = "group_" + std::to_string(i);
  others[name] = std::move(group);
  ordered_json block = ordered_json::object();
  block["config_groups"] = std::move(others);
  block["producer"] = {{"name", "skipsoftmax"}, {"version", version}};
  return block;
}

}  // namespace skipsoftmax::modelopt
