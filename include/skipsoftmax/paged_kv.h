// The paged KV cache shared by the decode kernel, the prefill kernel's history path and the
// runtime (vLLM's and FlashInfer's "NHD" page layout).
//
// A page holds page_size consecutive tokens of one sequence for every KV head:
//   k_pages, v_pages: [num_pages, page_size, num_heads_kv, head_dim], fp16 or bf16.
// Token t of sequence b lives in page page_table[b * max_pages_per_seq + t / page_size], slot
// t % page_size. Slots past a sequence's length may hold anything (NaN included): the kernels
// never let them reach the output. So may a page_table row's entries past the sequence's pages:
// the decode kernel may read them (up to max_seq_len) but never copies from the pages they name.
#pragma once

#include <cstdint>

namespace skipsoftmax {

inline constexpr int kMinPageSize = 16;
inline constexpr int kMaxPageSize = 128;

struct PagedKv {
  const void* k_pages = nullptr;  // device, [num_pages, page_size, num_heads_kv, head_dim]
  const void* v_pages = nullptr;  // device, same shape
  std::int64_t num_pages = 0;
  int page_size = 0;                      // a power of two in [16, 128]
  const std::int32_t* page_table = nullptr;  // device, [batch, max_pages_per_seq]
  int max_pages_per_seq = 0;
};

}  // namespace skipsoftmax
