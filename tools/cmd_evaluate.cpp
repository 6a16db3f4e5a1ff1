// skipsoftmax evaluate --model-dir C --engine-dir E --max-context N: the engine's accuracy on
// RULER-style tasks and held-out perplexity at each length (evaluation/evaluation.h), optionally
// gated against a dense baseline; the exit code follows the verdict (2: the gate failed).
//
// Every flag and file is checked before the GPU is touched; the results file is written
// atomically, also when the gate fails.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "commands.h"
#include "engine.h"
#include "eval_runner.h"
#include "evaluation.h"
#include "file_io.h"
#include "gguf.h"
#include "model_config.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct EvaluateArgs {
  std::string model_dir;
  std::string engine_dir;
  std::string arm = "both";
  std::int64_t max_context = 0;
  std::vector<std::int64_t> lengths;
  std::vector<std::string> tasks;
  int samples = 8;
  int text_windows = 2;
  std::uint64_t seed = 0;
  std::string save_results;
  std::string baseline;
  std::string label;
  double max_drop = 0.03;
  CLI::Option* max_drop_opt = nullptr;
  std::string corpus_dir;
  int page_size = 64;
  int prefill_chunk = 0;
  std::string dtype = "fp16";
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

fs::path same_dir(const fs::path& p) { return fs::weakly_canonical(fs::absolute(p)); }

void evaluate(const EvaluateArgs& a) {
  // Flags that need no file.
  const SkipScope arm = parse_eval_arm(a.arm);
  const DType dtype = parse_engine_dtype(a.dtype);
  if (a.samples < 1) fail("--samples must be >= 1");
  if (a.text_windows < 0) fail("--text-windows must be >= 0");
  if (a.max_drop_opt->count() > 0 && a.baseline.empty()) {
    fail("--max-drop gates against a baseline: give --baseline too");
  }
  EvalSettings settings;
  settings.seed = a.seed;
  settings.samples = a.samples;
  settings.text_windows = a.text_windows;
  if (!a.tasks.empty()) {
    settings.tasks.clear();
    for (const std::string& t : a.tasks) {
      const RulerTask task = parse_ruler_task(t);
      if (std::find(settings.tasks.begin(), settings.tasks.end(), task) != settings.tasks.end()) {
        fail("--tasks: " + t + " is given twice");
      }
      settings.tasks.push_back(task);
    }
  }
  if (a.lengths.empty()) {
    settings.lengths = default_eval_lengths(a.max_context);
  } else {
    for (std::int64_t l : a.lengths) {
      if (l < kMinEvalLength || l > a.max_context) {
        fail("--lengths: " + std::to_string(l) + " is outside [" + std::to_string(kMinEvalLength) +
             ", --max-context " + std::to_string(a.max_context) + "]");
      }
      if (!settings.lengths.empty() && l <= settings.lengths.back()) {
        fail("--lengths must be strictly increasing");
      }
      settings.lengths.push_back(l);
    }
  }
  if (!a.save_results.empty()) check_output_file(a.save_results);

  // The engine, its checkpoint and the arm's thresholds.
  const EngineConfig config = load_engine_config(a.engine_dir);
  if (same_dir(config.checkpoint_dir) != same_dir(a.model_dir)) {
    fail("--engine-dir " + a.engine_dir + " was exported from " + config.checkpoint_dir.string() +
         ", not from --model-dir " + a.model_dir);
  }
  if (!config.weights) {
    fail((fs::path(a.engine_dir) / kConfigFileName).string() +
         ": no weights (exported with --config-only); export the checkpoint with its GGUF file");
  }
  if (!a.save_results.empty()) {
    check_not_an_input(a.save_results, "--save-results",
                       {{"--model-dir", a.model_dir, true},
                        {"--engine-dir", a.engine_dir, true},
                        {"--baseline", a.baseline},
                        {"the engine's weights", config.weights->file}});
  }
  PerPhase<Threshold> thresholds;
  for (Phase phase : kPhases) {
    const Threshold& t = config.phases[phase].threshold;
    if (skips(arm, phase) && arm != SkipScope::kBoth && t.never_skips()) {
      fail("--arm " + a.arm + ": the engine runs " + to_string(phase) + " dense (" + t.describe() +
           "); export it with a " + to_string(phase) + " table");
    }
    thresholds[phase] = skips(arm, phase) ? t : Threshold::dense();
  }
  if (arm == SkipScope::kBoth && thresholds.prefill.never_skips() &&
      thresholds.decode.never_skips()) {
    fail(
        "--arm both: the engine runs both phases dense (no tables in its config.json); evaluate "
        "it with --arm dense");
  }
  check_weights(*config.weights);
  const gguf::File file = gguf::File::open(config.weights->file);
  const ModelConfig model = read_model_config(file);
  if (a.max_context > model.context_length) {
    fail("--max-context " + std::to_string(a.max_context) + " exceeds the model's context of " +
         std::to_string(model.context_length) + " tokens");
  }
  std::optional<EvalResults> baseline;
  if (!a.baseline.empty()) baseline = read_evaluation_file(a.baseline);

  EvalResults results;
  results.label = a.label.empty() ? std::string(arm_name(arm)) : a.label;
  results.arm = arm;
  results.model = file.find("general.name") ? file.string("general.name") : model.architecture;
  results.weights_sha256 = config.weights->sha256;
  results.dtype = engine_dtype_name(dtype);
  results.engine_dir = same_dir(a.engine_dir).string();
  results.thresholds = {thresholds.prefill.describe(), thresholds.decode.describe()};
  results.settings = settings;
  // Comparability is known before any GPU work.
  if (baseline) gate_against(results, *baseline, a.max_drop);

  const fs::path corpus = a.corpus_dir.empty() ? default_corpus_dir() : fs::path(a.corpus_dir);
  EvalRunner runner(file, corpus);
  EngineOptions options;
  options.page_size = a.page_size;
  options.prefill_chunk = a.prefill_chunk;
  options.thresholds = thresholds;
  options.dtype = dtype;
  Engine engine(file, model, options);
  results.gpu = gpu_name();
  results.git_revision = git_revision();
  results.command = command_line();
  for (std::int64_t length : settings.lengths) {
    results.results.push_back(runner.evaluate(engine, settings, length, results.label));
  }
  if (baseline) results.gate = gate_against(results, *baseline, a.max_drop);

  std::cout << format_evaluation(results);
  if (!a.save_results.empty()) {
    write_json_file(a.save_results, evaluation_to_json(results));
    std::cout << "wrote " << a.save_results << '\n';
  }
  if (results.gate && !results.gate->pass) {
    char drop[32];
    std::snprintf(drop, sizeof drop, "%g", a.max_drop);
    throw CommandFailed("the gate failed: '" + results.label + "' drops more than " + drop +
                            " below '" + baseline->label + "'",
                        2);
  }
}

void add_evaluate(CLI::App& app) {
  auto a = std::make_shared<EvaluateArgs>();
  CLI::App* sub = app.add_subcommand(
      "evaluate",
      "Score an engine on RULER-style tasks and held-out perplexity; gate it against a baseline");
  sub->add_option("--model-dir", a->model_dir, "Checkpoint directory the engine was exported from")
      ->required();
  sub->add_option("--engine-dir", a->engine_dir, "Engine directory (skipsoftmax export)")
      ->required();
  sub->add_option("--arm", a->arm,
                  "Phases that run with the engine's tables: prefill, decode, both, or dense; "
                  "the others run dense")
      ->capture_default_str();
  sub->add_option("--max-context", a->max_context,
                  "Longest request (prompt and answer) to evaluate, at most the model's context")
      ->required();
  sub->add_option("--lengths", a->lengths,
                  "Lengths to evaluate (default: 1024, 2048, ... up to --max-context)");
  sub->add_option("--tasks", a->tasks,
                  "Tasks (default all: ruler_niah_single ruler_niah_multikey "
                  "ruler_niah_multivalue ruler_vt)");
  sub->add_option("--samples", a->samples, "Samples per task and length")->capture_default_str();
  sub->add_option("--text-windows", a->text_windows,
                  "Held-out texts per length for perplexity (0: none)")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the prompts")
      ->check(kNonNegative)
      ->capture_default_str();
  sub->add_option("--save-results", a->save_results, "Write the results as JSON");
  sub->add_option("--baseline", a->baseline, "Results of a dense run (--save-results) to gate on");
  sub->add_option("--label", a->label, "Name of this run in its results (default: the arm)");
  a->max_drop_opt =
      sub->add_option("--max-drop", a->max_drop,
                      "Largest drop allowed against the baseline: of the mean task score "
                      "(absolute, scores in [0, 1]) and of perplexity (relative)")
          ->capture_default_str();
  sub->add_option("--corpus-dir", a->corpus_dir,
                  "Directory of the books (default $SKIPSOFTMAX_CORPUS_DIR or "
                  "/work/shared/corpora)");
  sub->add_option("--page-size", a->page_size, "Tokens per KV-cache page (16 to 128)")
      ->capture_default_str();
  sub->add_option("--prefill-chunk", a->prefill_chunk,
                  "Prefill prompts in chunks of this many tokens (0: whole)")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype,
                  "16-bit type of the weights, activations and KV cache: fp16 or bf16")
      ->capture_default_str();
  sub->callback([a] { evaluate(*a); });
}

const Registration reg{75, &add_evaluate};

}  // namespace
}  // namespace skipsoftmax::cli
