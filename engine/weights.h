// The model's weights on the device: matrices dequantized to the engine's 16-bit type (bf16 or
// fp16) at load (row-major [out, in], the GGUF layout, so that y = x W^T), norm vectors kept in
// fp32. The Q, K and V projections are stacked into one matrix, and the gate and up projections
// into another, so that each takes one matrix product.
#pragma once

#include <vector>

#include "device.h"
#include "gguf.h"
#include "model_config.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax::engine {

struct LayerWeights {
  DeviceBuffer qkv;      // [(heads_q + 2 heads_kv) head_dim, hidden] 16-bit: Q rows, K rows, V rows
  DeviceBuffer o;        // [hidden, heads_q head_dim] 16-bit
  DeviceBuffer gate_up;  // [2 ffn, hidden] 16-bit: gate rows, then up rows
  DeviceBuffer down;     // [hidden, ffn] 16-bit
  DeviceBuffer attn_norm;       // [hidden] fp32
  DeviceBuffer ffn_norm;        // [hidden] fp32
  DeviceBuffer post_attn_norm;  // [hidden] fp32, Gemma 3 only
  DeviceBuffer post_ffn_norm;   // [hidden] fp32, Gemma 3 only
  DeviceBuffer q_norm;          // [head_dim] fp32, Gemma 3 only
  DeviceBuffer k_norm;          // [head_dim] fp32, Gemma 3 only
};

struct ModelWeights {
  DeviceBuffer embed;        // [vocab, hidden] 16-bit
  DeviceBuffer lm_head;      // [vocab, hidden] 16-bit; empty when tied to embed
  DeviceBuffer output_norm;  // [hidden] fp32
  std::vector<LayerWeights> layers;

  const void* lm_head_or_embed() const { return lm_head.empty() ? embed.as() : lm_head.as(); }
};

// Reads and dequantizes every tensor the architecture needs. Throws std::runtime_error naming a
// missing tensor or one whose shape does not match the config.
ModelWeights load_weights(const gguf::File& file, const ModelConfig& config, DType dtype,
                          MemoryCounter* counter, cudaStream_t stream);

}  // namespace skipsoftmax::engine
