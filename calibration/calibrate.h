// The calibration run behind `skipsoftmax calibrate`: RULER prompts sized to each length bin ->
// post-RoPE Q/K per global layer (a CaptureSource) -> critical-scale statistics per layer (the CPU
// or CUDA pass, cached on disk) -> pooled per bin and per request -> scale tables, the sparsity
// ladder and the shape advice of each phase.
//
// Prefill: each prompt is one causal prefill, voted on the kernels' tiles (prefill_vote_tiles, in
// sink-then-reverse order). Decode: the prompt's last decode_steps tokens are decode steps over the
// tokens before them (one GQA group per vote, decode_tile_k(d) keys per tile, forward order,
// decode_splits splits). Sliding-window (local) layers never skip: they are listed, not pooled.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calibration.h"
#include "calibration_fit.h"
#include "capture_source.h"
#include "model_config.h"
#include "ruler.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax {

// What the passes over RULER prompts share, calibration's and the held-out check's
// (table_check.h): the phases voted, the prompts per length and the kernels' vote tiles.
struct PromptPass {
  PerPhase<bool> phases;
  int samples = 4;  // prompts per length
  std::uint64_t seed = 0;
  int decode_steps = 16;
  int decode_splits = 1;
  TileShape prefill_tiles;  // the prefill kernels' vote tiles
  int decode_tile_k = 64;   // the decode kernels' vote tile
  int num_threads = 0;
};

struct CalibrationSettings : PromptPass {
  std::vector<std::int64_t> bins;  // calibration_bins()
  std::int64_t max_seqlen = 0;     // --max-seqlen, recorded with the advice
  std::optional<double> target;    // nullopt: the ladder, 75% deployed
  double mass_ratio = 0.3;         // the advisor's limit on mass share / sparsity
  std::optional<std::filesystem::path> cache_dir;
};

// Tokens of the prompts for a KV length (a bin): the length, plus decode_steps - 1 when decode is
// voted (its steps then see KV lengths length .. length + decode_steps - 1, all under one row).
std::int64_t sample_length(const PromptPass& s, std::int64_t length);

// The voted phases, prefill first. Throws std::invalid_argument when there are none.
std::vector<Phase> voted_phases(const PromptPass& s);

// Text -> ids with the checkpoint's own tokenizer (byte-level BPE today; load_tokenizer() of
// tokenizer.h once it covers the other families). Throws what the tokenizer's loader throws.
TextTokenizer model_tokenizer(const gguf::File& file);

// The statistics pass: CPU (float64, calibration.h) or CUDA (calibration_cuda.h).
struct StatsBackend {
  std::string name;  // part of the cache key: the passes round differently
  std::function<TileStats(const PrefillProblem&, const StatsOptions&)> prefill;
  std::function<TileStats(const DecodeProblem&, const StatsOptions&)> decode;
};
StatsBackend cpu_stats_backend();

// The layers whose tiles are pooled (global attention) and the sliding-window ones left out.
struct LayerPlan {
  std::vector<int> pooled;
  std::vector<int> local;
};
LayerPlan layer_plan(const ModelConfig& config);

// Problems over one layer's capture of an n-token prompt (q and k borrowed from it).
PrefillProblem capture_prefill_problem(const LayerCapture& c, const ModelConfig& m, std::int64_t n);
struct DecodeSteps {
  std::vector<float> q;   // [steps, heads_q, head_dim]: the last `steps` queries
  DecodeProblem problem;  // KV lengths n - steps + 1 .. n over the capture's keys
};
DecodeSteps capture_decode_steps(const LayerCapture& c, const ModelConfig& m, std::int64_t n,
                                 int steps);

struct PhaseResult {
  PhaseFit fit;
  ShapeAdvice advice;
  std::vector<BinPool> pools;         // per bin, pooled over prompts and layers
  std::vector<RequestPool> requests;  // per prompt, pooled over layers
};

struct CalibrationResult {
  std::vector<PhaseResult> phases;  // the calibrated ones, prefill first
  LayerPlan layers;
  std::int64_t prompts = 0;
  std::int64_t prompts_from_cache = 0;
};

// Progress lines for people.
using ProgressFn = std::function<void(const std::string&)>;

// Progress lines at most every 2 s (or forced), with an ETA from the work done so far; the
// caller weighs the work (tokens^2 per layer and prompt here).
class ProgressMeter {
 public:
  ProgressMeter(const ProgressFn& fn, double total)
      : fn_(fn), total_(total), start_(std::chrono::steady_clock::now()) {}
  void drop(double work) { total_ -= work; }  // cached: no longer to do
  void advance(double work) { done_ += work; }
  void report(const std::string& where, bool force);

 private:
  const ProgressFn& fn_;
  double total_;
  double done_ = 0.0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
};

// The progress weight of one prompt of n tokens: n^2 per pooled layer.
double prompt_work(std::int64_t n, const LayerPlan& layers);

// One prompt through the capture source and the statistics pass: for each pooled layer, in order,
// and each of `phases`, sink(index in phases, that phase's statistics of the layer), the tiles
// and visit orders of the kernels. Progress per layer on `meter`, under `where`. Throws what the
// source or the backend throws.
void prompt_tile_stats(const PromptPass& s, const ModelConfig& model, CaptureSource& source,
                       const StatsBackend& backend, const LayerPlan& layers,
                       std::span<const std::int32_t> tokens, std::span<const Phase> phases,
                       ProgressMeter& meter, const std::string& where,
                       const std::function<void(std::size_t, TileStats&&)>& sink);

// The prompts of a calibration: the `index`-th prompt of `tokens` tokens (index < samples).
using PromptFn = std::function<std::vector<std::int32_t>(std::int64_t tokens, int index)>;
// RULER prompts of the corpus's books (its tokenizer), deterministic from seed.
PromptFn ruler_prompts(RulerCorpus& corpus, std::uint64_t seed);
// The prompts a capture set holds (captured_prompts of capture_source.h), in its order: for a
// model whose tokenizer this build lacks. Throws std::runtime_error listing the lengths it holds
// when fewer than index + 1 prompts have `tokens` tokens.
PromptFn captured_prompt_set(std::vector<std::vector<std::int32_t>> prompts);

// Throws what the prompts, the source or the backend throw; writes nothing but cache files.
CalibrationResult run_calibration(const CalibrationSettings& settings, const ModelConfig& model,
                                  const PromptFn& prompts, CaptureSource& source,
                                  const StatsBackend& backend, const ProgressFn& progress);

// The skip keys of every calibrated phase (skip_key_updates), the advice also recording the
// calibrated --max-seqlen.
nlohmann::ordered_json calibration_updates(const CalibrationSettings& settings,
                                           const CalibrationResult& result);

// The summary table and the verdicts, for people.
std::string calibration_summary(const CalibrationSettings& settings,
                                const CalibrationResult& result);

// 0.7512 -> "75.1%" (decimals 1).
std::string percent_text(double fraction, int decimals = 1);

// "1:05:03", "4:10".
std::string format_duration(double seconds);

}  // namespace skipsoftmax
