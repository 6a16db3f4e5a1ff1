// skipsoftmax price --model-dir C --work-dir W --lengths ... --accuracy-lengths ...: the price
// list of a calibrated checkpoint on this GPU (evaluation/price.h, docs/REPORT.md). For the dense build
// and every calibrated tier it exports an engine (W/engines/<arm>), measures TTFT and TPOT on a
// real-text prompt per length with the attention kernels' time and skip statistics, evaluates the
// accuracy (RULER-style tasks and perplexity, W/evaluate_<arm>.json) at the accuracy lengths,
// then writes W/price.json and records a summary as skip_softmax_price_list in C/config.json.
//
// Every flag is checked before the GPU is touched; each file is written atomically.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
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
#include "price.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct PriceArgs {
  std::string model_dir;
  std::string work_dir;
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> accuracy_lengths;
  std::vector<std::string> tiers;
  int decode_tokens = 32;
  int repeats = 5;
  int samples = 8;
  int text_windows = 2;
  std::uint64_t seed = 0;
  std::string corpus_dir;
  int page_size = 64;
  std::string dtype = "fp16";
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

std::string file_label(const std::string& label) {
  std::string s;
  for (char c : label) {
    s += c == '%' ? std::string("pct") : c == ' ' ? std::string("_") : std::string(1, c);
  }
  return s;
}

std::string architecture_text(const ModelConfig& m) {
  int local = 0;
  for (int l = 0; l < m.layers; ++l) local += m.is_local(l);
  std::string s = m.architecture + ": " + std::to_string(m.layers) + " layers, ";
  if (local == 0) return s + "all global attention";
  return s + std::to_string(m.layers - local) + " global + " + std::to_string(local) +
         " sliding-window (" + std::to_string(m.sliding_window) + ") attention layers";
}

std::string utc_date() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

void check_lengths(const PriceArgs& a, const ModelConfig& model) {
  for (std::size_t i = 0; i < a.lengths.size(); ++i) {
    if (i > 0 && a.lengths[i] <= a.lengths[i - 1]) fail("--lengths must be strictly increasing");
    if (a.lengths[i] < kMinEvalLength) {
      fail("--lengths: " + std::to_string(a.lengths[i]) + " is below " +
           std::to_string(kMinEvalLength));
    }
    if (a.lengths[i] + a.decode_tokens > model.context_length) {
      fail("--lengths: " + std::to_string(a.lengths[i]) + " and " +
           std::to_string(a.decode_tokens) + " decode tokens exceed the model's context of " +
           std::to_string(model.context_length));
    }
  }
  for (std::size_t i = 0; i < a.accuracy_lengths.size(); ++i) {
    const std::int64_t l = a.accuracy_lengths[i];
    if (i > 0 && l <= a.accuracy_lengths[i - 1]) {
      fail("--accuracy-lengths must be strictly increasing");
    }
    if (std::find(a.lengths.begin(), a.lengths.end(), l) == a.lengths.end()) {
      fail("--accuracy-lengths: " + std::to_string(l) + " is not one of --lengths");
    }
  }
}

void price(const PriceArgs& a) {
  if (a.lengths.empty()) fail("--lengths: give at least one length");
  if (a.accuracy_lengths.empty()) fail("--accuracy-lengths: give at least one length");
  if (a.decode_tokens < 2) fail("--decode-tokens must be >= 2 (TPOT needs two tokens)");
  if (a.repeats < 1) fail("--repeats must be >= 1");
  if (a.samples < 1) fail("--samples must be >= 1");
  if (a.text_windows < 1) fail("--text-windows must be >= 1 (the price list has perplexities)");
  const DType dtype = parse_engine_dtype(a.dtype);
  std::error_code ec;
  if (fs::exists(a.work_dir, ec) && !fs::is_directory(a.work_dir, ec)) {
    fail("--work-dir " + a.work_dir + ": exists and is not a directory");
  }

  const CheckpointConfig checkpoint = load_checkpoint_config(a.model_dir);
  const std::string config_path = (fs::path(a.model_dir) / kConfigFileName).string();
  const PerPhase<std::optional<PhaseCalibration>> cal =
      calibration_from_checkpoint(checkpoint, config_path);
  if (!cal.prefill && !cal.decode) {
    fail(config_path +
         ": no calibrated tiers (skip_softmax_<phase>_scale_tables); run "
         "skipsoftmax calibrate first");
  }
  std::vector<PriceArmPlan> plans = plan_price_arms(cal, a.tiers);
  const fs::path gguf_path = find_checkpoint_gguf(a.model_dir);
  const gguf::File file = gguf::File::open(gguf_path);
  const ModelConfig model = read_model_config(file);
  check_lengths(a, model);
  EvalSettings settings;
  settings.seed = a.seed;
  settings.samples = a.samples;
  settings.text_windows = a.text_windows;
  settings.lengths = a.accuracy_lengths;

  const fs::path corpus = a.corpus_dir.empty() ? default_corpus_dir() : fs::path(a.corpus_dir);
  EvalRunner runner(file, corpus);
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t l : a.lengths) prompts.push_back(runner.latency_prompt(l, a.seed));
  // Nothing is written before every input has been read and the GPU found: a run that cannot
  // measure leaves no engines behind.
  if (!hopper_gpu_available()) fail("price measures on a Hopper GPU, and this machine has none");
  const fs::path work(a.work_dir);
  ensure_output_directory(work / "engines", "--work-dir");

  PriceList p;
  p.model_name = file.find("general.name") ? file.string("general.name") : model.architecture;
  p.architecture = architecture_text(model);
  p.checkpoint = fs::absolute(a.model_dir).lexically_normal().string();
  p.command = command_line();
  p.git_revision = git_revision();
  p.date = utc_date();
  p.phases = cal;
  p.lengths = a.lengths;
  p.accuracy_lengths = a.accuracy_lengths;
  for (RulerTask t : settings.tasks) p.tasks.push_back(to_string(t));
  p.setup = {{"dtype", engine_dtype_name(dtype)},
             {"batch", 1},
             {"heads",
              std::to_string(model.heads_q) + " query / " + std::to_string(model.heads_kv) + " KV"},
             {"head_dim", model.head_dim},
             {"decode_tokens", a.decode_tokens},
             {"repeats", a.repeats},
             {"page_size", a.page_size},
             {"samples_per_task", a.samples},
             {"perplexity_texts", a.text_windows}};

  std::vector<Latency> dense_latency;
  for (PriceArmPlan& plan : plans) {
    const std::string label = plan.arm.label();
    const fs::path engine_dir = work / "engines" / file_label(label);
    export_engine(a.model_dir, engine_dir, plan.flags);
    const EngineConfig config = load_engine_config(engine_dir);
    EngineOptions options;
    options.page_size = a.page_size;
    options.thresholds = {config.phases.prefill.threshold, config.phases.decode.threshold};
    options.dtype = dtype;
    Engine engine(file, model, options);
    p.gpu = gpu_name();
    std::fprintf(stderr, "price: arm %s (prefill %s; decode %s)\n", label.c_str(),
                 options.thresholds.prefill.describe().c_str(),
                 options.thresholds.decode.describe().c_str());

    EvalResults eval;
    eval.label = label;
    eval.arm = plan.arm.skip;
    eval.model = p.model_name;
    eval.weights_sha256 = config.weights->sha256;
    eval.dtype = engine_dtype_name(dtype);
    eval.engine_dir = fs::absolute(engine_dir).lexically_normal().string();
    eval.thresholds = {options.thresholds.prefill.describe(), options.thresholds.decode.describe()};
    eval.gpu = p.gpu;
    eval.git_revision = p.git_revision;
    eval.command = p.command;
    eval.settings = settings;

    for (std::size_t i = 0; i < a.lengths.size(); ++i) {
      const std::int64_t length = a.lengths[i];
      const Latency l = measure_latency(engine, prompts[i], a.decode_tokens, a.repeats);
      if (plan.arm.dense()) dense_latency.push_back(l);
      const Latency& d = dense_latency[i];
      PricePoint pt;
      pt.length = length;
      pt.ttft_ms = l.ttft_ms;
      pt.tpot_ms = l.tpot_ms;
      for (Phase phase : kPhases) {
        PhaseMetrics& m = pt.phases[phase];
        m.kernel_speedup = d.attention_ms[phase] / l.attention_ms[phase];
        m.attention_share = l.attention_ms[phase] / l.phase_ms[phase];
        m.tile_sparsity = l.tiles[phase].sparsity();
      }
      std::fprintf(stderr,
                   "  length %6lld: TTFT %8.2f ms  TPOT %6.3f ms  attention share %.3f / %.3f  "
                   "kernel x%.3f / x%.3f  sparsity %.3f / %.3f\n",
                   static_cast<long long>(length), pt.ttft_ms, pt.tpot_ms,
                   pt.phases.prefill.attention_share, pt.phases.decode.attention_share,
                   pt.phases.prefill.kernel_speedup, pt.phases.decode.kernel_speedup,
                   pt.phases.prefill.tile_sparsity, pt.phases.decode.tile_sparsity);
      if (std::find(a.accuracy_lengths.begin(), a.accuracy_lengths.end(), length) !=
          a.accuracy_lengths.end()) {
        const LengthResult r = runner.evaluate(engine, settings, length, "  " + label);
        eval.results.push_back(r);
        if (plan.arm.dense() && !(r.score > 0.0)) {
          // What was evaluated, as a file evaluate can read back: the lengths done so far.
          eval.settings.lengths.resize(eval.results.size());
          write_json_file(work / ("evaluate_" + file_label(label) + ".json"),
                          evaluation_to_json(eval));
          fail("the dense engine scores 0 on every task at length " + std::to_string(length) +
               ": no accuracy ratio can be formed there; choose shorter --accuracy-lengths");
        }
        AccuracyRecord acc;
        acc.scores = r.scores;
        acc.perplexity = r.perplexity;
        pt.accuracy = acc;
      }
      plan.arm.points.push_back(pt);
    }
    write_json_file(work / ("evaluate_" + file_label(label) + ".json"), evaluation_to_json(eval));
    p.arms.push_back(plan.arm);
  }

  derive_price(p);
  validate_price(p, "the measured price list");
  const fs::path price_file = work / "price.json";
  write_json_file(price_file, price_to_json(p));
  const nlohmann::ordered_json updates = {
      {std::string(kPriceListKey),
       price_summary_json(p, fs::absolute(price_file).lexically_normal().string())}};
  update_checkpoint_skip_keys(a.model_dir, updates.dump());

  std::printf("wrote %s and %s in %s\n", price_file.string().c_str(),
              std::string(kPriceListKey).c_str(), config_path.c_str());
  for (const PriceRecommendation& r : p.recommendations) {
    std::printf("accuracy ratio >= %.2f at every accuracy length, skipping %s: %s\n", r.bound,
                to_string(r.skip), r.tier ? ("tier " + *r.tier).c_str() : "stay dense");
  }
}

void add_price(CLI::App& app) {
  auto a = std::make_shared<PriceArgs>();
  CLI::App* sub = app.add_subcommand(
      "price",
      "Measure the speed/accuracy price list of a calibrated checkpoint on this GPU (price.json)");
  sub->add_option("--model-dir", a->model_dir, "Calibrated checkpoint directory")->required();
  sub->add_option("--work-dir", a->work_dir,
                  "Where the engines, the evaluation results and price.json go")
      ->required()
      ->check(kNonEmptyPath);
  sub->add_option("--lengths", a->lengths, "Prompt lengths for TTFT and TPOT")->required();
  sub->add_option("--accuracy-lengths", a->accuracy_lengths,
                  "Lengths (among --lengths) at which every arm's accuracy is evaluated")
      ->required();
  sub->add_option("--tiers", a->tiers, "Calibrated tiers to price (default: all), e.g. 50% 75%");
  sub->add_option("--decode-tokens", a->decode_tokens, "Tokens generated per timed request")
      ->capture_default_str();
  sub->add_option("--repeats", a->repeats, "Timed requests per length (the median is kept)")
      ->capture_default_str();
  sub->add_option("--samples", a->samples, "Samples per task and accuracy length")
      ->capture_default_str();
  sub->add_option("--text-windows", a->text_windows, "Held-out texts per accuracy length")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the prompts")
      ->check(kNonNegative)
      ->capture_default_str();
  sub->add_option("--corpus-dir", a->corpus_dir,
                  "Directory of the books (default $SKIPSOFTMAX_CORPUS_DIR or "
                  "/work/shared/corpora)");
  sub->add_option("--page-size", a->page_size, "Tokens per KV-cache page (16 to 128)")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype,
                  "16-bit type of the weights, activations and KV cache: fp16 or bf16")
      ->capture_default_str();
  sub->callback([a] { price(*a); });
}

const Registration reg{78, &add_price};

}  // namespace
}  // namespace skipsoftmax::cli
