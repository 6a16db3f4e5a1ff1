// Parameters of the Hopper prefill kernels, shared by the host launcher and the device code.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace skipsoftmax::prefill {

inline constexpr int kMaxTableRows = 64;

// The scale table on the device: lambda = S / L from the last row with bin <= L, with the guard.
struct DeviceThreshold {
  int rows = 0;             // 0: no table
  float flat_lambda = 0.f;  // used when rows == 0; 0 is dense
  int bins[kMaxTableRows];
  float scales[kMaxTableRows];
};

struct Params {
  CUtensorMap tma_q;  // [total_q, Hq, D] as (D, Hq, total_q), boxes of 64 x 1 x kBlockM
  CUtensorMap tma_k;  // [total_k, Hkv, D] as (D, Hkv, total_k), boxes of 64 x 1 x kBlockN
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
  DeviceThreshold threshold;  // skip kernels only
  unsigned long long* stats;  // [batch][2] tiles visited, skipped; null: no statistics
};

}  // namespace skipsoftmax::prefill
