// The accuracy of an engine on real text (`skipsoftmax evaluate`, docs/EVALUATE.md): the
// RULER-style tasks of ruler.h scored by string match of the greedy answer, and perplexity on
// held-out text, at each length; the results file, and the gate that compares a run with a dense
// baseline.
//
// A length L is the whole budget of a request, as in RULER: a task prompt has L minus the task's
// answer tokens, so that prompt and answer fit a context of L; a perplexity text has L tokens.
// Prompts come from the evaluation split of the corpus (books calibration never saw).
//
// The gate (evaluate --baseline B --max-drop D): at every length of the run, with both runs'
// mean task scores in [0, 1],
//   baseline score - score <= D             (an absolute drop: D = 0.03 allows 3 points)
//   perplexity / baseline perplexity - 1 <= D   (when the runs scored texts: --text-windows > 0)
// The runs must be comparable: the same weights, storage type, seed, samples, texts and tasks, and
// every length of the run evaluated in the baseline.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine_io.h"
#include "price.h"
#include "ruler.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax {

inline constexpr std::string_view kEvaluationSchema = "skipsoftmax-evaluation/1";

// An arm is the phases that run with the engine's tables (price.h's SkipScope, skips()); the
// others run dense. Named as --arm spells it: "dense" (kNone), "prefill", "decode", "both".
const char* arm_name(SkipScope arm);
// Throws std::invalid_argument listing the valid arms.
SkipScope parse_eval_arm(std::string_view text);

struct EvalSettings {
  std::uint64_t seed = 0;
  int samples = 8;       // per task and length
  int text_windows = 2;  // held-out texts per length, for perplexity
  std::vector<RulerTask> tasks = {std::begin(kRulerTasks), std::end(kRulerTasks)};
  std::vector<std::int64_t> lengths;  // strictly increasing
};

// 1024, 2048, 4096, ... up to max_context (doubling); max_context itself when it is below 1024.
// Throws std::invalid_argument when max_context is below the shortest prompt a task can hold.
std::vector<std::int64_t> default_eval_lengths(std::int64_t max_context);

// The shortest length every task prompt fits in.
inline constexpr std::int64_t kMinEvalLength = 512;

struct LengthResult {
  std::int64_t length = 0;
  std::vector<double> scores;  // per EvalSettings::tasks, each the mean over samples, in [0, 1]
  double score = 0.0;          // the mean of `scores`
  double perplexity = 0.0;     // exp(mean negative log-likelihood) over every scored token
  std::int64_t perplexity_tokens = 0;
  PerPhase<TileCount> tiles;  // the skip kernels' statistics over all the length's requests
};

struct GateCheck {
  std::int64_t length = 0;
  std::string metric;  // "score" or "perplexity"
  double baseline = 0.0;
  double value = 0.0;
  double drop = 0.0;  // score: baseline - value; perplexity: value / baseline - 1
  bool pass = false;
};

struct GateVerdict {
  std::string baseline;  // the baseline's label
  double max_drop = 0.0;
  std::vector<GateCheck> checks;  // by length, score before perplexity
  bool pass = false;              // every check passes
};

struct EvalResults {
  std::string label;  // the name the run goes by (--label), e.g. "dense" or "75%"
  SkipScope arm = SkipScope::kBoth;
  std::string model;           // general.name of the GGUF
  std::string weights_sha256;  // of the GGUF file
  std::string dtype;           // the engine's 16-bit type: "fp16" or "bf16"
  std::string engine_dir;
  PerPhase<std::string> thresholds;  // Threshold::describe() of what ran
  std::string gpu;
  std::string git_revision;
  std::string command;
  EvalSettings settings;
  std::vector<LengthResult> results;  // one per settings.lengths
  std::optional<GateVerdict> gate;
};

// Compares `run` with `baseline` at every length of run.settings (run.results may still be empty:
// comparability is known before any work). Throws std::invalid_argument naming the difference when
// the two are not comparable (see the top of this file) or max_drop is negative or not finite.
GateVerdict gate_against(const EvalResults& run, const EvalResults& baseline, double max_drop);

nlohmann::ordered_json evaluation_to_json(const EvalResults& r);
// Throws std::invalid_argument("<context>: <field>: ...") for a missing, mistyped or out-of-range
// field, another schema, or results that do not follow the settings' lengths and tasks.
EvalResults evaluation_from_json(const nlohmann::json& j, const std::string& context);
EvalResults read_evaluation_file(const std::filesystem::path& path);

// The per-length table evaluate prints: length, each task's score, mean, perplexity, sparsities,
// and, with a gate, its checks and verdict.
std::string format_evaluation(const EvalResults& r);

}  // namespace skipsoftmax
