// Parameters of the paged decode kernels, shared by the host launcher and the device code.
#pragma once

#include <cuda.h>

#include "../common/device_threshold.h"

namespace skipsoftmax::decode {

struct Params {
  // The pages [num_pages, page_size, Hkv, D] as (D, Hkv, num_pages x page_size), boxes of
  // kBoxCols x 1 x kSliceKeys, 128-byte swizzled.
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  const void* q;          // [batch, q_len, Hq, D]
  void* out;              // [batch, q_len, Hq, D]
  const int* page_table;  // [batch, max_pages_per_seq]
  const int* seq_lens;    // [batch]
  int max_pages_per_seq;
  int max_seq_len;  // the batch's longest KV length (every sequence's at batch 1)
  int page_shift;   // log2(page_size)
  int num_heads_q, num_heads_kv, group;
  int q_len;  // new tokens per sequence; q_len * group <= kMaxGroup
  int num_splits;
  int window;        // sliding window in keys (dense kernels); 0: none
  float scale_log2;  // softmax scale * log2(e)
  common::DeviceThreshold threshold;
  // num_splits > 1: each split's output normalized by its own sum, and its log2-sum-exp.
  float* partial_o;           // [batch, q_len, Hq, num_splits, D]
  float* partial_lse;         // [batch, q_len, Hq, num_splits]
  unsigned long long* stats;  // [batch][2] tiles visited, skipped; null: none
  float* lse;                 // [batch, q_len, Hq] natural log-sum-exp of each row; null: none
};

}  // namespace skipsoftmax::decode
