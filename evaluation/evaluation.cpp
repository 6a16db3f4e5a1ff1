#include "evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "file_io.h"

namespace skipsoftmax {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Slack for comparing a drop with its bound: the scores are sums of fractions such as 7/8.
constexpr double kDropSlack = 1e-9;

[[noreturn]] void fail(const std::string& context, const std::string& what) {
  throw std::invalid_argument(context + ": " + what);
}

const json& field(const json& j, const char* key, const std::string& context) {
  if (!j.is_object()) fail(context, "expected an object");
  const auto it = j.find(key);
  if (it == j.end()) fail(context, std::string("missing key \"") + key + "\"");
  return *it;
}

std::string get_string(const json& j, const char* key, const std::string& context) {
  const json& v = field(j, key, context);
  if (!v.is_string()) fail(context + "." + key, "expected a string");
  return v.get<std::string>();
}

double get_number(const json& j, const char* key, const std::string& context) {
  const json& v = field(j, key, context);
  if (!v.is_number()) fail(context + "." + key, "expected a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) fail(context + "." + key, "not finite");
  return x;
}

std::int64_t get_integer(const json& j, const char* key, const std::string& context,
                         std::int64_t min) {
  const json& v = field(j, key, context);
  if (!v.is_number_integer()) fail(context + "." + key, "expected an integer");
  const auto x = v.get<std::int64_t>();
  if (x < min) fail(context + "." + key, "must be >= " + std::to_string(min));
  return x;
}

void check_keys(const json& j, std::initializer_list<const char*> allowed,
                const std::string& context) {
  for (const auto& item : j.items()) {
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](const char* k) { return item.key() == k; })) {
      fail(context, "unknown key \"" + item.key() + "\"");
    }
  }
}

TileCount tiles_from(const json& j, const std::string& context) {
  check_keys(j, {"visited", "skipped", "sparsity"}, context);
  TileCount t;
  t.visited = static_cast<std::uint64_t>(get_integer(j, "visited", context, 0));
  t.skipped = static_cast<std::uint64_t>(get_integer(j, "skipped", context, 0));
  if (t.skipped > t.visited) fail(context, "more tiles skipped than visited");
  return t;
}

ordered_json tiles_json(const TileCount& t) {
  return {{"visited", t.visited}, {"skipped", t.skipped}, {"sparsity", t.sparsity()}};
}

}  // namespace

const char* arm_name(SkipScope arm) { return arm == SkipScope::kNone ? "dense" : to_string(arm); }

SkipScope parse_eval_arm(std::string_view text) {
  for (SkipScope a :
       {SkipScope::kNone, SkipScope::kPrefill, SkipScope::kDecode, SkipScope::kBoth}) {
    if (text == arm_name(a)) return a;
  }
  throw std::invalid_argument("unknown arm '" + std::string(text) +
                              "' (valid: dense, prefill, decode, both)");
}

std::vector<std::int64_t> default_eval_lengths(std::int64_t max_context) {
  if (max_context < kMinEvalLength) {
    throw std::invalid_argument("the maximum context " + std::to_string(max_context) +
                                " is below the shortest evaluation length (" +
                                std::to_string(kMinEvalLength) + ")");
  }
  if (max_context < 1024) return {max_context};
  std::vector<std::int64_t> lengths;
  for (std::int64_t l = 1024; l <= max_context; l *= 2) lengths.push_back(l);
  return lengths;
}

GateVerdict gate_against(const EvalResults& run, const EvalResults& baseline, double max_drop) {
  if (!(std::isfinite(max_drop) && max_drop >= 0.0)) {
    throw std::invalid_argument("--max-drop must be a finite number >= 0");
  }
  const auto differ = [&](const std::string& what, const std::string& a, const std::string& b) {
    throw std::invalid_argument("the baseline '" + baseline.label + "' is not comparable: " + what +
                                " " + b + " there, " + a + " here");
  };
  if (run.weights_sha256 != baseline.weights_sha256) {
    differ("weights (SHA-256)", run.weights_sha256.substr(0, 12),
           baseline.weights_sha256.substr(0, 12));
  }
  if (run.dtype != baseline.dtype) differ("dtype", run.dtype, baseline.dtype);
  const EvalSettings& a = run.settings;
  const EvalSettings& b = baseline.settings;
  if (a.seed != b.seed) differ("seed", std::to_string(a.seed), std::to_string(b.seed));
  if (a.samples != b.samples) {
    differ("samples", std::to_string(a.samples), std::to_string(b.samples));
  }
  if (a.text_windows != b.text_windows) {
    differ("text windows", std::to_string(a.text_windows), std::to_string(b.text_windows));
  }
  const auto names = [](const std::vector<RulerTask>& tasks) {
    std::string s;
    for (RulerTask t : tasks) {
      if (!s.empty()) s += ',';
      s += to_string(t);
    }
    return s;
  };
  if (a.tasks != b.tasks) differ("tasks", names(a.tasks), names(b.tasks));

  const auto baseline_at = [&](std::int64_t length) {
    const auto it = std::find_if(baseline.results.begin(), baseline.results.end(),
                                 [&](const LengthResult& x) { return x.length == length; });
    if (it == baseline.results.end()) {
      throw std::invalid_argument("the baseline '" + baseline.label +
                                  "' has no results at length " + std::to_string(length));
    }
    return it;
  };
  for (std::int64_t length : a.lengths) baseline_at(length);

  GateVerdict v;
  v.baseline = baseline.label;
  v.max_drop = max_drop;
  v.pass = true;
  for (const LengthResult& r : run.results) {
    const auto base = baseline_at(r.length);
    GateCheck score{r.length, "score", base->score, r.score, base->score - r.score, false};
    score.pass = score.drop <= max_drop + kDropSlack;
    v.pass = v.pass && score.pass;
    v.checks.push_back(score);
    if (a.text_windows == 0) continue;  // no perplexity on either side
    GateCheck ppl{r.length,
                  "perplexity",
                  base->perplexity,
                  r.perplexity,
                  r.perplexity / base->perplexity - 1.0,
                  false};
    ppl.pass = ppl.drop <= max_drop + kDropSlack;
    v.pass = v.pass && ppl.pass;
    v.checks.push_back(ppl);
  }
  return v;
}

ordered_json evaluation_to_json(const EvalResults& r) {
  ordered_json j;
  j["schema"] = kEvaluationSchema;
  j["label"] = r.label;
  j["arm"] = arm_name(r.arm);
  j["model"] = r.model;
  j["weights_sha256"] = r.weights_sha256;
  j["dtype"] = r.dtype;
  j["engine_dir"] = r.engine_dir;
  j["thresholds"] = {{"prefill", r.thresholds.prefill}, {"decode", r.thresholds.decode}};
  j["provenance"] = {{"gpu", r.gpu}, {"git_revision", r.git_revision}, {"command", r.command}};
  ordered_json tasks = ordered_json::array();
  for (RulerTask t : r.settings.tasks) tasks.push_back(to_string(t));
  j["settings"] = {{"seed", r.settings.seed},
                   {"samples", r.settings.samples},
                   {"text_windows", r.settings.text_windows},
                   {"tasks", tasks},
                   {"lengths", r.settings.lengths}};
  ordered_json results = ordered_json::array();
  for (const LengthResult& x : r.results) {
    ordered_json scores = ordered_json::object();
    for (std::size_t t = 0; t < x.scores.size(); ++t) {
      scores[to_string(r.settings.tasks[t])] = x.scores[t];
    }
    results.push_back(
        {{"length", x.length},
         {"scores", scores},
         {"score", x.score},
         {"perplexity", x.perplexity},
         {"perplexity_tokens", x.perplexity_tokens},
         {"tiles",
          {{"prefill", tiles_json(x.tiles.prefill)}, {"decode", tiles_json(x.tiles.decode)}}}});
  }
  j["results"] = results;
  if (r.gate) {
    ordered_json checks = ordered_json::array();
    for (const GateCheck& c : r.gate->checks) {
      checks.push_back({{"length", c.length},
                        {"metric", c.metric},
                        {"baseline", c.baseline},
                        {"value", c.value},
                        {"drop", c.drop},
                        {"pass", c.pass}});
    }
    j["gate"] = {{"baseline", r.gate->baseline},
                 {"max_drop", r.gate->max_drop},
                 {"verdict", r.gate->pass ? "PASS" : "FAIL"},
                 {"checks", checks}};
  }
  return j;
}

EvalResults evaluation_from_json(const json& j, const std::string& context) {
  if (!j.is_object()) fail(context, "expected a JSON object");
  check_keys(j,
             {"schema", "label", "arm", "model", "weights_sha256", "dtype", "engine_dir",
              "thresholds", "provenance", "settings", "results", "gate"},
             context);
  if (get_string(j, "schema", context) != kEvaluationSchema) {
    fail(context + ".schema", "expected \"" + std::string(kEvaluationSchema) + "\"");
  }
  EvalResults r;
  r.label = get_string(j, "label", context);
  try {
    r.arm = parse_eval_arm(get_string(j, "arm", context));
  } catch (const std::invalid_argument& e) {
    fail(context + ".arm", e.what());
  }
  r.model = get_string(j, "model", context);
  r.weights_sha256 = get_string(j, "weights_sha256", context);
  r.dtype = get_string(j, "dtype", context);
  if (r.dtype != "fp16" && r.dtype != "bf16") fail(context + ".dtype", "expected fp16 or bf16");
  r.engine_dir = get_string(j, "engine_dir", context);
  const json& th = field(j, "thresholds", context);
  check_keys(th, {"prefill", "decode"}, context + ".thresholds");
  r.thresholds.prefill = get_string(th, "prefill", context + ".thresholds");
  r.thresholds.decode = get_string(th, "decode", context + ".thresholds");
  const json& prov = field(j, "provenance", context);
  check_keys(prov, {"gpu", "git_revision", "command"}, context + ".provenance");
  r.gpu = get_string(prov, "gpu", context + ".provenance");
  r.git_revision = get_string(prov, "git_revision", context + ".provenance");
  r.command = get_string(prov, "command", context + ".provenance");

  const std::string sc = context + ".settings";
  const json& s = field(j, "settings", context);
  check_keys(s, {"seed", "samples", "text_windows", "tasks", "lengths"}, sc);
  const json& seed = field(s, "seed", sc);
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<std::int64_t>() >= 0)) {
    fail(sc + ".seed", "expected an integer >= 0");
  }
  r.settings.seed = seed.get<std::uint64_t>();
  constexpr std::int64_t kMaxCount = 1 << 20;  // far above any run; keeps the int conversions safe
  const std::int64_t samples = get_integer(s, "samples", sc, 1);
  const std::int64_t text_windows = get_integer(s, "text_windows", sc, 0);
  if (samples > kMaxCount || text_windows > kMaxCount) {
    fail(sc, "samples and text_windows must be at most " + std::to_string(kMaxCount));
  }
  r.settings.samples = static_cast<int>(samples);
  r.settings.text_windows = static_cast<int>(text_windows);
  const json& tasks = field(s, "tasks", sc);
  if (!tasks.is_array() || tasks.empty()) fail(sc + ".tasks", "expected a non-empty array");
  r.settings.tasks.clear();
  for (const json& t : tasks) {
    if (!t.is_string()) fail(sc + ".tasks", "expected task names");
    try {
      r.settings.tasks.push_back(parse_ruler_task(t.get<std::string>()));
    } catch (const std::invalid_argument& e) {
      fail(sc + ".tasks", e.what());
    }
  }
  const json& lengths = field(s, "lengths", sc);
  if (!lengths.is_array() || lengths.empty()) fail(sc + ".lengths", "expected a non-empty array");
  for (const json& l : lengths) {
    if (!l.is_number_integer() || l.get<std::int64_t>() < 1) {
      fail(sc + ".lengths", "expected integers >= 1");
    }
    if (!r.settings.lengths.empty() && l.get<std::int64_t>() <= r.settings.lengths.back()) {
      fail(sc + ".lengths", "not strictly increasing");
    }
    r.settings.lengths.push_back(l.get<std::int64_t>());
  }

  const json& results = field(j, "results", context);
  if (!results.is_array() || results.size() != r.settings.lengths.size()) {
    fail(context + ".results", "expected one entry per length of settings.lengths");
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string rc = context + ".results[" + std::to_string(i) + "]";
    const json& x = results[i];
    check_keys(x, {"length", "scores", "score", "perplexity", "perplexity_tokens", "tiles"}, rc);
    LengthResult l;
    l.length = get_integer(x, "length", rc, 1);
    if (l.length != r.settings.lengths[i]) fail(rc + ".length", "does not follow settings.lengths");
    const json& scores = field(x, "scores", rc);
    if (!scores.is_object() || scores.size() != r.settings.tasks.size()) {
      fail(rc + ".scores", "expected one score per task of settings.tasks");
    }
    double sum = 0.0;
    for (RulerTask t : r.settings.tasks) {
      const double v = get_number(scores, to_string(t), rc + ".scores");
      if (v < 0.0 || v > 1.0) fail(rc + ".scores." + to_string(t), "must lie in [0, 1]");
      l.scores.push_back(v);
      sum += v;
    }
    l.score = get_number(x, "score", rc);
    if (std::abs(l.score - sum / static_cast<double>(l.scores.size())) > 1e-9) {
      fail(rc + ".score", "is not the mean of the task scores");
    }
    l.perplexity = get_number(x, "perplexity", rc);
    l.perplexity_tokens = get_integer(x, "perplexity_tokens", rc, 0);
    if (l.perplexity_tokens > 0 ? !(l.perplexity >= 1.0) : l.perplexity != 0.0) {
      fail(rc + ".perplexity", "must be >= 1 (0 when no token was scored)");
    }
    const json& tiles = field(x, "tiles", rc);
    l.tiles.prefill = tiles_from(field(tiles, "prefill", rc + ".tiles"), rc + ".tiles.prefill");
    l.tiles.decode = tiles_from(field(tiles, "decode", rc + ".tiles"), rc + ".tiles.decode");
    r.results.push_back(std::move(l));
  }
  // A gate of a saved run is informational: it is recomputed whenever a run is gated.
  if (j.contains("gate")) {
    const json& g = j["gate"];
    check_keys(g, {"baseline", "max_drop", "verdict", "checks"}, context + ".gate");
    GateVerdict v;
    v.baseline = get_string(g, "baseline", context + ".gate");
    v.max_drop = get_number(g, "max_drop", context + ".gate");
    const std::string verdict = get_string(g, "verdict", context + ".gate");
    if (verdict != "PASS" && verdict != "FAIL") fail(context + ".gate.verdict", "PASS or FAIL");
    v.pass = verdict == "PASS";
    r.gate = v;
  }
  return r;
}

EvalResults read_evaluation_file(const std::filesystem::path& path) {
  return evaluation_from_json(read_json_file(path), path.string());
}

std::string format_evaluation(const EvalResults& r) {
  std::ostringstream out;
  char buf[64];
  out << "length";
  for (RulerTask t : r.settings.tasks) out << "  " << to_string(t);
  out << "  score  perplexity  prefill_sparsity  decode_sparsity\n";
  for (const LengthResult& x : r.results) {
    std::snprintf(buf, sizeof buf, "%6lld", static_cast<long long>(x.length));
    out << buf;
    for (std::size_t t = 0; t < x.scores.size(); ++t) {
      const int width = static_cast<int>(std::string_view(to_string(r.settings.tasks[t])).size());
      std::snprintf(buf, sizeof buf, "  %*.3f", width, x.scores[t]);
      out << buf;
    }
    std::snprintf(buf, sizeof buf, "  %5.3f  %10.4f  %16.3f  %15.3f\n", x.score, x.perplexity,
                  x.tiles.prefill.sparsity(), x.tiles.decode.sparsity());
    out << buf;
  }
  if (r.gate) {
    out << "gate against '" << r.gate->baseline << "', max drop " << r.gate->max_drop << ":\n";
    for (const GateCheck& c : r.gate->checks) {
      std::snprintf(buf, sizeof buf, "  %7lld  %-10s", static_cast<long long>(c.length),
                    c.metric.c_str());
      out << buf;
      std::snprintf(buf, sizeof buf, " %.4f -> %.4f  drop %+.4f  %s\n", c.baseline, c.value, c.drop,
                    c.pass ? "ok" : "FAIL");
      out << buf;
    }
    out << "verdict: " << (r.gate->pass ? "PASS" : "FAIL") << '\n';
  }
  return out.str();
}

}  // namespace skipsoftmax
