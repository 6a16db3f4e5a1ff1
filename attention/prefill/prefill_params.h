// Parameters of the Hopper prefill kernels, shared by the host launcher and the device code.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../common/device_threshold.h"

namespace skipsoftmax::prefill {

using common::DeviceThreshold;
using common::kMaxTableRows;

struct Params {
  CUtensorMap tma_q;  // [total_q, Hq, D] as (D, Hq, total_q), boxes of 64 x 1 x kBlockM
  // [total_k, Hkv, D] as (D, Hkv, total_k), boxes of 64 x 1 x kBlockN; paged: the pages
  // [num_pages * page_size, Hkv, D], boxes of 64 x 1 x min(page_size, kBlockN).
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  void* out;                // [total_q, Hq, D]
  const int* cu_seqlens_q;  // [batch + 1]
  const int* cu_seqlens_k;  // [batch + 1]
  int batch;
  int num_heads_q;
  int num_heads_kv;
  int num_m_blocks;           // query tiles of the longest sequence
  float scale_log2;           // softmax scale * log2(e): scores go through exp2
  int kv_order;               // skipsoftmax::KvOrder
  int window;                 // sliding window in keys (causal, dense kernels); 0: none
  // Paged KV (page_table non-null): token t of sequence b is row
  // page_table[b * max_pages_per_seq + t / page_size] * page_size + t % page_size of tma_k/v.
  const int* page_table;
  int max_pages_per_seq;
  int page_shift;  // log2(page_size)
  DeviceThreshold threshold;  // skip kernels only
  unsigned long long* stats;  // [batch][2] tiles visited, skipped; null: no statistics
  float* lse;                 // [total_q, Hq] natural log-sum-exp of each row; null: none
};

}  // namespace skipsoftmax::prefill
