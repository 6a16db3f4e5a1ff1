// skipsoftmax calibrate --model-dir DIR --phase prefill|decode|both --max-seqlen N: fits the
// per-length scale tables of a checkpoint on RULER-style prompts (calibration/calibrate.h) and
// records them, with the sparsity ladder and the shape advice, in DIR/config.json. A checkpoint
// without a GGUF (a Hugging Face model) calibrates on the prompts its --captures-dir holds.
//
// Every flag is checked before any work; the config is rewritten once, atomically, at the end, so
// a failed or interrupted run leaves it as it was.
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibrate.h"
#include "calibration_setup.h"
#include "commands.h"
#include "file_io.h"
#include "gguf.h"
#include "modelopt.h"
#include "npy.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

struct CalibrateArgs {
  std::string model_dir;
  std::string phase;
  std::int64_t max_seqlen = 0;
  std::int64_t bin_step = 2048;
  std::int64_t bin_min = 4096;
  std::string target;  // empty: the ladder, 75% deployed
  double mass_ratio = 0.3;
  int samples = 4;
  std::uint64_t seed = 0;
  std::string cache_dir;
  PassFlags pass;
  std::string write_samples;
  bool dry_run = false;
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// The flags that need no model, checked first.
CalibrationSettings parse_settings(const CalibrateArgs& a) {
  CalibrationSettings s;
  s.phases = parse_phases(a.phase);
  s.bins = calibration_bins(a.bin_min, a.bin_step, a.max_seqlen);
  s.max_seqlen = a.max_seqlen;
  if (!a.target.empty()) {
    try {
      s.target = parse_target_sparsity(a.target);
    } catch (const std::invalid_argument& e) {
      fail(std::string("--target-sparsity: ") + e.what());
    }
  }
  if (!(a.mass_ratio > 0.0)) fail("--mass-ratio must be > 0, got " + std::to_string(a.mass_ratio));
  if (a.samples < 1) fail("--samples must be >= 1, got " + std::to_string(a.samples));
  check_pass_flags(a.pass);
  if (a.pass.decode_steps > a.bin_min) {
    fail("--decode-steps must lie in [1, --bin-min], got " + std::to_string(a.pass.decode_steps));
  }
  s.samples = a.samples;
  s.seed = a.seed;
  s.mass_ratio = a.mass_ratio;
  s.decode_steps = a.pass.decode_steps;
  s.decode_splits = a.pass.decode_splits;
  s.num_threads = a.pass.threads;
  if (!a.cache_dir.empty()) s.cache_dir = fs::path(a.cache_dir);
  return s;
}

void check_context(const CalibrationSettings& s, const ModelConfig& m) {
  const std::int64_t longest = sample_length(s, s.bins.back());
  if (longest <= m.context_length) return;
  std::string why = "--max-seqlen " + std::to_string(s.max_seqlen);
  if (longest > s.bins.back()) {
    why += " with decode needs prompts of " + std::to_string(longest) + " tokens (the last " +
           std::to_string(s.decode_steps) + " are decode steps)";
  }
  fail(why + ", more than the model's context length " + std::to_string(m.context_length));
}

// The prompts, for an engine to capture: DIR/prompt_<bin>_<i>.npy (int32 tokens) and
// DIR/prompts.json describing them.
void write_samples(const fs::path& dir, const CalibrationSettings& s, RulerCorpus& corpus) {
  nlohmann::json list = nlohmann::json::array();
  for (std::int64_t bin : s.bins) {
    for (int i = 0; i < s.samples; ++i) {
      const RulerSample sample = corpus.make_sample(sample_length(s, bin), s.seed, i);
      const std::string name = "prompt_" + std::to_string(bin) + "_" + std::to_string(i) + ".npy";
      std::vector<std::int64_t> ids(sample.tokens.begin(), sample.tokens.end());
      write_npy_atomic(dir / name,
                       make_npy_int(NpyDtype::kI32, {static_cast<std::int64_t>(ids.size())}, ids));
      nlohmann::json needles = nlohmann::json::array();
      for (const Needle& n : sample.needles) {
        needles.push_back(
            {{"key", n.key}, {"value", n.value}, {"position", n.position}, {"depth", n.depth}});
      }
      list.push_back({{"bin", bin},
                      {"index", i},
                      {"tokens", name},
                      {"length", sample.tokens.size()},
                      {"book", sample.book},
                      {"needles", needles},
                      {"answer", sample.answer}});
    }
  }
  write_json_file(dir / "prompts.json",
                  nlohmann::ordered_json{{"seed", s.seed}, {"prompts", list}});
  std::cout << "wrote " << list.size() << " prompts to " << dir.string() << '\n';
}

// The checkpoint's config.json with this run's keys; a ModelOpt block already there keeps what
// this run does not calibrate (the other phase, ignore patterns, groups of other algorithms).
void write_config(const fs::path& dir, nlohmann::ordered_json updates,
                  const PerPhase<bool>& calibrated) {
  const fs::path path = dir / kConfigFileName;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const auto existing = nlohmann::ordered_json::parse(read_json_text(path));
    const std::string key = modelopt::kBlockKey;
    if (existing.contains(key) && !existing.at(key).is_null()) {
      updates[key] =
          modelopt::merge_block(existing.at(key), updates.value(key, nlohmann::ordered_json()),
                                calibrated, SKIPSOFTMAX_VERSION);
    }
    update_checkpoint_skip_keys(dir, updates.dump());
    return;
  }
  const std::string text = merge_skip_keys("{}", updates.dump(), path.string());
  write_file_atomic(path, [&](std::ostream& out) { out << text; });
}

// What the run writes to, checked before any work: the output directories, and the checkpoint's
// config.json, which must parse and keep valid skip keys once this run's keys replace theirs (a
// table of an old calibration that the kernels refuse is one it repairs).
void check_outputs(const CalibrateArgs& a, const CalibrationSettings& s,
                   const fs::path& model_dir) {
  if (!a.write_samples.empty()) check_output_directory(a.write_samples, "--write-samples");
  if (s.cache_dir) check_output_directory(*s.cache_dir, "--cache-dir");
  if (const fs::path config = model_dir / kConfigFileName;
      a.write_samples.empty() && fs::exists(config)) {
    nlohmann::ordered_json replaced = nlohmann::ordered_json::object();
    for (Phase phase : kPhases) {
      if (!s.phases[phase]) continue;
      for (const std::string& key : calibration_skip_keys(phase)) replaced[key] = nullptr;
    }
    merge_skip_keys(read_json_text(config), replaced.dump(), config.string());
  }
}

// Every check before work against the model's geometry, and the kernels' tiles for it.
void prepare(const CalibrateArgs& a, CalibrationSettings& s, const ModelConfig& model,
             const fs::path& model_dir) {
  check_context(s, model);
  check_outputs(a, s, model_dir);
  s.prefill_tiles = prefill_vote_tiles(model.head_dim, KvOrder::kSinkThenReverse);
  s.decode_tile_k = decode_tile_k(model.head_dim);
}

void calibrate_and_write(const CalibrateArgs& a, CalibrationSettings& s, const ModelConfig& model,
                         const PromptFn& prompts, CaptureSource& source,
                         const std::string& q_from) {
  const fs::path model_dir(a.model_dir);
  const StatsBackend backend = stats_backend(a.pass);
  std::cerr << "skipsoftmax calibrate: " << model.architecture << ", " << model.layers
            << " layers, " << s.bins.size() << " bins x " << s.samples << " prompts, backend "
            << backend.name << ", Q/K from " << q_from << '\n';
  const CalibrationResult result = run_calibration(
      s, model, prompts, source, backend,
      [](const std::string& line) { std::cerr << "skipsoftmax calibrate: " << line << '\n'; });
  const nlohmann::ordered_json updates = calibration_updates(s, result);
  if (!a.dry_run) write_config(model_dir, updates, s.phases);
  std::cout << calibration_summary(s, result);
  std::cout << (a.dry_run ? "dry run: nothing written\n"
                          : "wrote " + (model_dir / kConfigFileName).string() + "\n");
}

// A checkpoint without a GGUF (a Hugging Face model): its attention geometry from config.json,
// the prompts and their Q/K from the captures (python -m skipsoftmax capture).
void run_from_captures(const CalibrateArgs& a, CalibrationSettings& s, const fs::path& model_dir) {
  if (a.pass.captures_dir.empty()) {
    fail("--model-dir " + model_dir.string() +
         ": no .gguf model file in it; a checkpoint without one calibrates from captures: "
         "python -m skipsoftmax capture --model DIR --text FILE --tokens N... --samples K "
         "--out-dir C, then --captures-dir C");
  }
  if (!a.write_samples.empty()) {
    fail("--write-samples needs the model's tokenizer, which only a .gguf in --model-dir gives");
  }
  const fs::path config = model_dir / kConfigFileName;
  if (!fs::exists(config)) {
    fail("--model-dir " + model_dir.string() + ": neither a .gguf nor a config.json in it");
  }
  const ModelConfig model = read_hf_attention_config(read_json_text(config), config.string());
  prepare(a, s, model, model_dir);
  const std::unique_ptr<CaptureSource> source =
      npy_directory_source(a.pass.captures_dir, model, "");
  const PromptFn prompts = captured_prompt_set(source->prompts());
  // Every bin's prompts are there before any work (the error names the lengths held).
  for (std::int64_t bin : s.bins) prompts(sample_length(s, bin), s.samples - 1);
  calibrate_and_write(a, s, model, prompts, *source,
                      a.pass.captures_dir + " (its prompts; config.json's geometry)");
}

void run_calibrate(const CalibrateArgs& a) {
  CalibrationSettings s = parse_settings(a);
  const fs::path model_dir(a.model_dir);
  if (gguf_files(model_dir).empty()) {
    run_from_captures(a, s, model_dir);
    return;
  }
  const fs::path gguf_path = find_gguf(model_dir);
  const gguf::File file = gguf::File::open(gguf_path);
  const ModelConfig model = read_model_config(file);
  prepare(a, s, model, model_dir);

  RulerCorpus corpus(corpus_dir(a.pass), CorpusSplit::kCalibration, model_tokenizer(file));
  if (!a.write_samples.empty()) {
    ensure_output_directory(a.write_samples, "--write-samples");
    write_samples(a.write_samples, s, corpus);
    return;
  }

  // The model's checksum keys the cache and checks the captures; it costs a read of the file.
  const std::unique_ptr<CaptureSource> source = capture_source(
      file, model, gguf_path, a.pass, s.cache_dir.has_value() || !a.pass.captures_dir.empty());
  calibrate_and_write(a, s, model, ruler_prompts(corpus, s.seed), *source,
                      a.pass.captures_dir.empty() ? "the CPU forward pass" : a.pass.captures_dir);
}

void add_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* sub = app.add_subcommand(
      "calibrate",
      "Fit per-length scale tables (and a sparsity ladder) for a checkpoint on RULER-style "
      "prompts, and record them with the shape advice in its config.json");
  sub->add_option("--model-dir", a->model_dir,
                  "Checkpoint directory: one .gguf and config.json, or (with --captures-dir) a "
                  "Hugging Face config.json alone")
      ->required();
  sub->add_option("--phase", a->phase, "prefill, decode or both")->required();
  sub->add_option("--max-seqlen", a->max_seqlen,
                  "Longest bin to calibrate (at most the model's context length)")
      ->required();
  sub->add_option("--bin-step", a->bin_step, "Distance between length bins")->capture_default_str();
  sub->add_option("--bin-min", a->bin_min, "First length bin")->capture_default_str();
  sub->add_option("--target-sparsity", a->target,
                  "Deploy this tile sparsity (0.75 or 75%); default: the 50/60/75/80% ladder, "
                  "75% deployed");
  sub->add_option("--mass-ratio", a->mass_ratio,
                  "Shape advice: ON when skipped mass share / sparsity is below this")
      ->capture_default_str();
  sub->add_option("--samples", a->samples, "Prompts per bin")->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the prompts")
      ->check(kNonNegative)
      ->capture_default_str();
  sub->add_option("--cache-dir", a->cache_dir,
                  "Cache of per-prompt statistics, keyed by the model's SHA-256 and the prompt")
      ->check(kNonEmptyPath);
  add_pass_flags(*sub, a->pass);
  sub->add_option("--write-samples", a->write_samples,
                  "Write the prompts (int32 .npy and prompts.json) to this directory and stop")
      ->check(kNonEmptyPath);
  sub->add_flag("--dry-run", a->dry_run, "Calibrate and print, but leave config.json alone");
  sub->callback([a] { run_calibrate(*a); });
}

const Registration reg{25, &add_calibrate};

}  // namespace
}  // namespace skipsoftmax::cli
