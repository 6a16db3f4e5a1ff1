// The GPU engine of the Llama family (SmolLM2) and Gemma 3: GGUF weights dequantized to fp16 (or
// bf16, EngineOptions::dtype) at load, cuBLAS projections (16-bit in, fp32 accumulate and out),
// the residual stream in fp32, a paged KV cache, and attention through the library's kernels:
// run_prefill for prompts (dense or skip by the dispatch rule, with the sliding window on Gemma's
// local layers) and run_decode for generated tokens. Greedy decoding over a ragged batch, prompts
// prefilled whole or in chunks over the cache.
//
// Per layer, in the GGUF's conventions (llama.cpp's graphs):
//   h = rmsnorm(x) * w_attn;  q, k, v = h W_qkv^T
//   Gemma 3: q, k = rmsnorm per head * w_q, w_k (its norm weights hold the 1 + w of the original)
//   q, k rotated: Llama in adjacent pairs (the converter permuted its Q/K rows), Gemma in halves
//   a = attention(q, k, v), scale 1/sqrt(head_dim); Gemma's local layers see the last `window`
//   keys and never skip; o = a W_o^T
//   Llama: x += o;  Gemma 3: x += rmsnorm(o) * w_post_attn
//   h = rmsnorm(x) * w_ffn;  m = act(h W_gate^T) * (h W_up^T) W_down^T  (SiLU; Gemma: GELU-tanh)
//   Llama: x += m;  Gemma 3: x += rmsnorm(m) * w_post_ffn
// Embeddings are scaled by sqrt(hidden) on Gemma; logits = rmsnorm(x) * w_out W_lm^T (W_lm tied
// to the embeddings when the file has no output.weight), soft-capped when the file says so.
//
// This header is free of CUDA headers. Constructing an engine needs a Hopper GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gguf.h"
#include "model_config.h"
#include "model_ref.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

struct EngineOptions {
  int page_size = 64;              // tokens per KV page (paged_kv.h: a power of two in [16, 128])
  int prefill_chunk = 0;           // prompt tokens per sequence and prefill step; 0: all at once
  PerPhase<Threshold> thresholds;  // global layers; sliding-window layers always run dense
  bool time_attention = false;     // CUDA events around every attention launch
  // The 16-bit type of the weights, the activations that feed matrix products and attention, and
  // the KV cache. fp16 keeps 3 more mantissa bits than bf16 (the logits follow an fp32 reference
  // more closely); bf16's range guards against activations beyond 65504.
  DType dtype = DType::kF16;
};

struct GenerationRequest {
  std::vector<std::int32_t> prompt;
  int max_new_tokens = 1;
};

struct TileStats {
  std::uint64_t visited = 0;
  std::uint64_t skipped = 0;
};

struct GenerationResult {
  std::vector<std::int32_t> tokens;  // generated, the EOS token included when reached
  bool reached_eos = false;
  double ttft_ms = 0.0;        // from the start of generate() to this request's first token
  double last_token_ms = 0.0;  // from the start of generate() to its last token
  PerPhase<TileStats> tiles;   // the skip kernels' statistics over the global layers
};

struct GenerationReport {
  std::vector<GenerationResult> results;  // in request order
  double prefill_ms = 0.0;                // every prompt's prefill, the first tokens included
  double decode_ms = 0.0;
  PerPhase<double> attention_ms;             // with time_attention: the kernels' time per phase
  std::uint64_t peak_device_used_bytes = 0;  // device memory in use (all processes), sampled
};

struct ForwardOptions {
  std::vector<int> capture_layers;  // layers whose post-RoPE Q, K and V to return
  bool all_logits = false;          // false: the last token's logits only
  bool target_logprobs = false;     // the log-probability of each next prompt token
};

struct ForwardResult {
  std::vector<std::vector<float>> logits;           // per prompt: [tokens or 1, vocab]
  std::vector<std::vector<LayerCapture>> captures;  // per prompt, per capture layer
  // With target_logprobs, per prompt: [tokens - 1], entry i = log p(prompt[i + 1] | prompt[..i]),
  // computed on the device (no logits leave it).
  std::vector<std::vector<float>> logprobs;
};

class Engine {
 public:
  // Loads the weights onto the current device. Throws std::runtime_error without a Hopper GPU,
  // for a missing or mis-shaped tensor, or for options the kernels cannot run.
  Engine(const gguf::File& file, const ModelConfig& config, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const;
  // Bytes the engine holds on the device: weights, KV cache, buffers (most at any time).
  std::uint64_t device_bytes_peak() const;
  // Turns the CUDA events around attention launches on or off (EngineOptions::time_attention):
  // timed runs measure the attention share, untimed runs the latencies without the events.
  void set_time_attention(bool on);

  // Greedy generation for a ragged batch: prefill (whole or chunked), then one decode step per
  // token for the requests still running; a request stops at `eos` or at max_new_tokens.
  // Throws std::invalid_argument for an empty prompt, an id outside the vocabulary or a request
  // longer than the context.
  GenerationReport generate(const std::vector<GenerationRequest>& requests, std::int32_t eos);

  // Prefill only (whole or chunked, as the options say), returning logits, log-probabilities
  // and captures.
  ForwardResult forward(const std::vector<std::vector<std::int32_t>>& prompts,
                        const ForwardOptions& options);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace skipsoftmax
