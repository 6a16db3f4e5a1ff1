#include "eval_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "skipsoftmax_git_revision.h"

namespace skipsoftmax::cli {
namespace {

// Prompt tokens per generate() or forward() call: bounds the step buffers and the KV cache of a
// batch (about 2.4 GB of activations for SmolLM2, less for Gemma 3 270M).
constexpr std::int64_t kBatchTokens = std::int64_t{1} << 17;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Consecutive runs of `sizes` whose sum stays within kBatchTokens (each at least one item).
std::vector<std::pair<std::size_t, std::size_t>> batches(const std::vector<std::int64_t>& sizes) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t first = 0;
  std::int64_t used = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i > first && used + sizes[i] > kBatchTokens) {
      out.push_back({first, i});
      first = i;
      used = 0;
    }
    used += sizes[i];
  }
  if (first < sizes.size()) out.push_back({first, sizes.size()});
  return out;
}

TextTokenizer prompt_tokenizer(const std::shared_ptr<const Tokenizer>& tok) {
  TextTokenizer t;
  t.encode = [tok](std::string_view text) { return tok->encode(text); };
  t.bos = tok->add_bos() ? tok->bos() : -1;
  return t;
}

}  // namespace

std::string gpu_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    return "unknown GPU";
  }
  return prop.name;
}

std::string git_revision() { return SKIPSOFTMAX_GIT_REVISION; }

DType parse_engine_dtype(const std::string& text) {
  if (text == "fp16") return DType::kF16;
  if (text == "bf16") return DType::kBF16;
  throw std::invalid_argument("--dtype " + text + ": expected fp16 or bf16");
}

const char* engine_dtype_name(DType dtype) { return dtype == DType::kF16 ? "fp16" : "bf16"; }

EvalRunner::EvalRunner(const gguf::File& file, const std::filesystem::path& corpus_dir)
    : tokenizer_(load_tokenizer(file)),
      corpus_(corpus_dir, CorpusSplit::kEvaluation, prompt_tokenizer(tokenizer_)),
      eos_(tokenizer_->eos()) {}

std::vector<std::int32_t> EvalRunner::latency_prompt(std::int64_t length, std::uint64_t seed) {
  return corpus_.make_task_sample(RulerTask::kNiahMultikey, length, seed, 0).tokens;
}

LengthResult EvalRunner::evaluate(Engine& engine, const EvalSettings& s, std::int64_t length,
                                  const std::string& label) {
  LengthResult r;
  r.length = length;
  const auto add_tiles = [&](const GenerationResult& g) {
    for (Phase phase : kPhases) {
      r.tiles[phase].visited += g.tiles[phase].visited;
      r.tiles[phase].skipped += g.tiles[phase].skipped;
    }
  };

  // Every task's samples, the prompt leaving room for the answer.
  std::vector<TaskSample> samples;
  std::vector<std::size_t> task_of;
  std::vector<std::int64_t> sizes;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    const std::int64_t prompt_len = length - answer_budget(s.tasks[t]);
    for (int i = 0; i < s.samples; ++i) {
      samples.push_back(corpus_.make_task_sample(s.tasks[t], prompt_len, s.seed, i));
      task_of.push_back(t);
      sizes.push_back(length);
    }
  }
  std::vector<double> sums(s.tasks.size(), 0.0);
  std::size_t done = 0;
  for (const auto& [first, last] : batches(sizes)) {
    std::vector<GenerationRequest> requests;
    for (std::size_t i = first; i < last; ++i) {
      requests.push_back({samples[i].tokens, samples[i].max_new_tokens});
    }
    const GenerationReport report = engine.generate(requests, eos_);
    for (std::size_t i = first; i < last; ++i) {
      const GenerationResult& g = report.results[i - first];
      std::vector<std::int32_t> answer;
      for (std::int32_t id : g.tokens) {
        if (tokenizer_->is_end_of_generation(id)) break;
        answer.push_back(id);
      }
      sums[task_of[i]] += string_match_all(tokenizer_->decode(answer), samples[i].answers);
      add_tiles(g);
    }
    done += last - first;
    std::fprintf(stderr, "\r%s: length %lld: tasks %zu/%zu", label.c_str(),
                 static_cast<long long>(length), done, samples.size());
    std::fflush(stderr);
  }
  r.score = 0.0;
  for (std::size_t t = 0; t < s.tasks.size(); ++t) {
    r.scores.push_back(sums[t] / s.samples);
    r.score += r.scores.back();
  }
  r.score /= static_cast<double>(s.tasks.size());

  // Perplexity over every next-token prediction of the held-out texts.
  std::vector<std::vector<std::int32_t>> texts;
  for (int w = 0; w < s.text_windows; ++w) texts.push_back(corpus_.make_text(length, s.seed, w));
  double nll = 0.0;
  std::vector<std::int64_t> text_sizes(texts.size(), length);
  for (const auto& [first, last] : batches(text_sizes)) {
    ForwardOptions o;
    o.target_logprobs = true;
    const ForwardResult f = engine.forward({texts.begin() + static_cast<std::ptrdiff_t>(first),
                                            texts.begin() + static_cast<std::ptrdiff_t>(last)},
                                           o);
    for (std::size_t w = 0; w < f.logprobs.size(); ++w) {
      for (float x : f.logprobs[w]) {
        if (!std::isfinite(x)) {
          throw std::runtime_error("length " + std::to_string(length) + ", perplexity text " +
                                   std::to_string(first + w) +
                                   ": a log-probability is not finite (the engine's output is "
                                   "broken)");
        }
        nll -= x;
      }
      r.perplexity_tokens += static_cast<std::int64_t>(f.logprobs[w].size());
    }
  }
  r.perplexity =
      r.perplexity_tokens > 0 ? std::exp(nll / static_cast<double>(r.perplexity_tokens)) : 0.0;
  std::fprintf(stderr, ", perplexity %.3f over %lld tokens\n", r.perplexity,
               static_cast<long long>(r.perplexity_tokens));
  return r;
}

Latency measure_latency(Engine& engine, const std::vector<std::int32_t>& prompt, int new_tokens,
                        int repeats) {
  if (new_tokens < 2) throw std::invalid_argument("measure_latency: TPOT needs 2 new tokens");
  if (repeats < 1) throw std::invalid_argument("measure_latency: repeats must be >= 1");
  const std::vector<GenerationRequest> request = {{prompt, new_tokens}};
  constexpr std::int32_t kNoEos = -1;  // every run generates all its tokens
  engine.generate(request, kNoEos);
  std::vector<double> ttft, tpot;
  for (int i = 0; i < repeats; ++i) {
    const GenerationResult g = engine.generate(request, kNoEos).results[0];
    ttft.push_back(g.ttft_ms);
    tpot.push_back((g.last_token_ms - g.ttft_ms) / (new_tokens - 1));
  }
  engine.set_time_attention(true);
  const GenerationReport timed = engine.generate(request, kNoEos);
  engine.set_time_attention(false);
  Latency l;
  l.ttft_ms = median(ttft);
  l.tpot_ms = median(tpot);
  l.attention_ms = timed.attention_ms;
  l.phase_ms = {timed.prefill_ms, timed.decode_ms};
  for (Phase phase : kPhases) {
    l.tiles[phase] = {timed.results[0].tiles[phase].visited, timed.results[0].tiles[phase].skipped};
  }
  return l;
}

}  // namespace skipsoftmax::cli
