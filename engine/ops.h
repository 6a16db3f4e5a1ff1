// The engine's device operations besides attention and the matrix products: GGUF dequantization,
// embeddings, RMSNorm, rotary embedding with the paged-cache append, gated activations, logit
// soft-capping and greedy sampling. Host launchers over device pointers; 16-bit tensors are passed
// as their bit patterns, bf16 or fp16 as `dtype` says (the engine's storage type). Every launcher
// checks the launch and throws std::runtime_error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gguf.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax::engine {

using bits16 = std::uint16_t;  // a bf16 or fp16 value

// dst[i] = value i of the ggml tensor at src, computed with the CPU dequantizer's float arithmetic
// (gguf.cpp, no fused multiply-adds) and rounded to nearest even in `dtype`. count is a multiple
// of the type's block.
void dequantize(gguf::GgmlType type, const void* src, bits16* dst, std::int64_t count,
                cudaStream_t stream, DType dtype = DType::kBF16);

// x[t, :] = table[tokens[t], :] * scale. table: [vocab, hidden] 16-bit; x: [tokens, hidden] fp32.
void embed_tokens(const std::int32_t* tokens, int num_tokens, const bits16* table, int hidden,
                  float scale, float* x, cudaStream_t stream, DType dtype = DType::kBF16);

// y[i, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, r = rows ? rows[i] : i.
// x: [*, hidden] fp32; w: [hidden] fp32; y: [num_rows, hidden] 16-bit.
void rms_norm(const float* x, const std::int32_t* rows, int num_rows, int hidden, const float* w,
              float eps, bits16* y, cudaStream_t stream, DType dtype = DType::kBF16);

// x += y / sqrt(mean(y^2) + eps) * w, row by row (Gemma's post-attention and post-MLP norms).
// x, y: [num_rows, hidden] fp32.
void add_rms_norm(const float* y, int num_rows, int hidden, const float* w, float eps, float* x,
                  cudaStream_t stream);

// Rotation pairs of the rotary embedding: llama.cpp's NORM (GGUF Llama files, whose Q/K rows the
// converter permuted) and NEOX (Gemma).
enum class RopePairs { kAdjacent, kHalves };

// Splits the fused projection into Q, K and V; normalizes Q and K per head when norm weights are
// given (Gemma 3), rotates them by their positions, and writes K and V into the paged cache when
// k_pages is set.
struct QkvArgs {
  const float* qkv = nullptr;  // [tokens, (heads_q + 2 heads_kv) * head_dim]: Q, K, V heads
  int num_tokens = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;                         // even, <= 256
  const std::int32_t* positions = nullptr;  // [tokens]: position in its sequence
  const float* q_norm = nullptr;            // [head_dim] or null
  const float* k_norm = nullptr;            // [head_dim] or null
  float eps = 0.f;
  RopePairs pairs = RopePairs::kAdjacent;
  float rope_base = 10000.f;   // theta_i = position * rope_base^(-2i / head_dim)
  DType dtype = DType::kBF16;  // of q, k, v and the cache
  bits16* q = nullptr;         // [tokens, heads_q, head_dim]
  bits16* k = nullptr;         // [tokens, heads_kv, head_dim]
  bits16* v = nullptr;         // [tokens, heads_kv, head_dim]
  // The cache (paged_kv.h layout): token t goes to page page_table[seq_row[t] * max_pages +
  // positions[t] / page_size], slot positions[t] % page_size.
  bits16* k_pages = nullptr;  // [pages, page_size, heads_kv, head_dim]
  bits16* v_pages = nullptr;
  const std::int32_t* page_table = nullptr;  // [rows, max_pages]
  const std::int32_t* seq_row = nullptr;     // [tokens]
  int max_pages = 0;
  int page_size = 0;
};
void qkv_rope_append(const QkvArgs& args, cudaStream_t stream);

enum class Activation { kSilu, kGeluTanh };

// h[t, i] = act(gate_up[t, i]) * gate_up[t, ffn + i]. gate_up: [tokens, 2 ffn] fp32 (the gate
// projection's outputs, then the up projection's); h: [tokens, ffn] 16-bit.
void gated_activation(const float* gate_up, int num_tokens, int ffn, Activation act, bits16* h,
                      cudaStream_t stream, DType dtype = DType::kBF16);

// x = cap * tanh(x / cap) over n values.
void soft_cap(float* x, std::int64_t n, float cap, cudaStream_t stream);

// out[r] = the first index of the largest value of logits[r, :vocab]. logits: [rows, vocab].
void argmax_rows(const float* logits, int rows, int vocab, std::int32_t* out, cudaStream_t stream);

// out[r] = log softmax(logits[r, :vocab])[targets[r]], in fp32 with the row maximum subtracted;
// 0 where targets[r] < 0 (a row with nothing to score). logits: [rows, vocab].
void target_logprobs(const float* logits, int rows, int vocab, const std::int32_t* targets,
                     float* out, cudaStream_t stream);

}  // namespace skipsoftmax::engine
