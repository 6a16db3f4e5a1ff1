// The CPU reference forward pass of the runtime's two model families (Llama, Gemma 3), in float
// from the GGUF weights dequantized on the CPU. It is the oracle of the GPU engine (as
// reference.h is the oracle of the attention kernels) and the Q/K source of CPU calibration.
// Slow by design: short prompts only (a few thousand tokens of SmolLM2).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gguf.h"
#include "model_config.h"

namespace skipsoftmax {

// Post-RoPE queries and keys and the values of one layer, as the attention kernels see them
// (unscaled). head_dim is in transformers' half-split rotary order, rotary pair i at (i, i +
// head_dim / 2), for Llama files too: their Q/K rows, stored with adjacent pairs, are un-permuted.
struct LayerCapture {
  int layer = 0;
  std::vector<float> q;  // [tokens, heads_q, head_dim]
  std::vector<float> k;  // [tokens, heads_kv, head_dim]
  std::vector<float> v;  // [tokens, heads_kv, head_dim]
};

struct CpuForwardOptions {
  std::vector<int> capture_layers;  // layers whose Q/K/V to return
  bool all_logits = false;          // false: logits of the last token only
  int num_threads = 0;              // 0: all hardware threads
};

struct CpuForwardResult {
  std::vector<float> logits;           // [tokens or 1, vocab]
  std::vector<LayerCapture> captures;  // in layer order
};

// One causal forward pass over `tokens` (the BOS token included by the caller if wanted), with
// dense attention. Throws std::runtime_error on a missing or mis-shaped tensor.
CpuForwardResult cpu_forward(const gguf::File& file, const ModelConfig& config,
                             std::span<const std::int32_t> tokens, const CpuForwardOptions& opt);

}  // namespace skipsoftmax
