// The GPU side of `evaluate` and `price`: an engine answering the RULER-style tasks and scoring
// held-out text at one length (evaluation/evaluation.h), and the latency of one prompt (price).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine.h"
#include "evaluation.h"
#include "gguf.h"
#include "ruler.h"
#include "skipsoftmax/prefill.h"
#include "tokenizer.h"

namespace skipsoftmax::cli {

// The name of the current CUDA device ("NVIDIA H200").
std::string gpu_name();

// The revision the tool was built from (git describe at configure time).
std::string git_revision();

// "fp16" or "bf16" (the --dtype flags) to the engine's storage type; throws std::invalid_argument
// for anything else.
DType parse_engine_dtype(const std::string& text);
const char* engine_dtype_name(DType dtype);

class EvalRunner {
 public:
  // Reads the evaluation split of the corpus and the model's tokenizer. Throws std::runtime_error
  // for a missing book or a GGUF without a tokenizer.
  EvalRunner(const gguf::File& file, const std::filesystem::path& corpus_dir);

  // The task scores and the perplexity of `engine` at `length`, with the skip statistics of all
  // its requests. Prints progress to stderr, prefixed by `label`. Throws std::runtime_error when a
  // log-probability is not finite.
  LengthResult evaluate(Engine& engine, const EvalSettings& settings, std::int64_t length,
                        const std::string& label);

  // A real-text prompt of exactly `length` tokens (a multi-key needle task, so that the far field
  // carries evidence), the same for every arm.
  std::vector<std::int32_t> latency_prompt(std::int64_t length, std::uint64_t seed);

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  RulerCorpus corpus_;
  std::int32_t eos_ = -1;
};

struct Latency {
  double ttft_ms = 0.0;           // median over the repeats
  double tpot_ms = 0.0;           // median over the repeats
  PerPhase<double> attention_ms;  // one timed run: the attention kernels' time per phase
  PerPhase<double> phase_ms;      // the same run: each phase's wall time
  PerPhase<TileCount> tiles;     // the same run
};

// Generates `new_tokens` tokens (EOS ignored) after `prompt` once to warm up, `repeats` times for
// the latencies, and once more with the attention kernels timed by CUDA events. Throws
// std::invalid_argument unless new_tokens >= 2 and repeats >= 1.
Latency measure_latency(Engine& engine, const std::vector<std::int32_t>& prompt, int new_tokens,
                        int repeats);

}  // namespace skipsoftmax::cli
