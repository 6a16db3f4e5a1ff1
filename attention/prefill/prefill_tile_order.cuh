// The prefill kernel's tile order: which query tile, head and sequence a CTA computes, which KV
// tiles it visits and in what order (the KV visit orders of tiling.h), and whether it votes.
#pragma once

#include "prefill_params.h"
#include "prefill_traits.cuh"

namespace skipsoftmax::prefill {

using common::lambda_for;

// Where one CTA's work lies: its query rows, its KV tiles, and the sequence they belong to.
struct CtaWork {
  int head, kv_head;
  int q_start, q_len, kv_start, kv_len;
  int m_block;
  int first_tile;  // the first KV tile of the CTA's range (past the sliding window's left edge)
  int n_tiles;     // KV tiles the CTA visits, in the order of tile_at
  float skip_gap;  // raw-score gap below which a row votes skip: log2(lambda) / scale_log2
  bool voting;     // skip kernel and lambda > 0 for this sequence
  // The visit order (kv_tile_at of tiling.h) as a multiply-add, computed once: per tile it cost
  // instructions the consumers' loops are short of.
  int order_first, order_base, order_step;

  // The KV tile visited at `position` (0 <= position < n_tiles).
  __device__ int tile_at(int position) const {
    return position == 0 ? order_first : order_base + order_step * position;
  }
};

template <int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ bool find_work(const Params& p, CtaWork& w) {
  using Cfg = TileConfig<kHeadDim>;
  const int seq = blockIdx.z;
  w.head = blockIdx.y;
  w.kv_head = w.head / (p.num_heads_q / p.num_heads_kv);
  // Causal tiles at the end of a sequence are the longest: launch them first.
  w.m_block = p.num_m_blocks - 1 - static_cast<int>(blockIdx.x);
  w.q_start = p.cu_seqlens_q[seq];
  w.q_len = p.cu_seqlens_q[seq + 1] - w.q_start;
  w.kv_start = p.cu_seqlens_k[seq];
  w.kv_len = p.cu_seqlens_k[seq + 1] - w.kv_start;
  if (w.m_block * Cfg::kBlockM >= w.q_len) return false;
  const int q_end = min((w.m_block + 1) * Cfg::kBlockM, w.q_len);
  const int keys = kCausal ? w.kv_len - w.q_len + q_end : w.kv_len;
  // The same range as prefill_kv_tile_range of tiling.h.
  w.first_tile = 0;
  if (kCausal && p.window > 0) {
    const int first_key = w.kv_len - w.q_len + w.m_block * Cfg::kBlockM - p.window + 1;
    w.first_tile = first_key > 0 ? first_key / Cfg::kBlockN : 0;
  }
  w.n_tiles = (keys + Cfg::kBlockN - 1) / Cfg::kBlockN - w.first_tile;
  w.order_first = w.order_base = w.first_tile;
  w.order_step = 1;       // forward
  if (p.kv_order == 1) {  // reverse: the diagonal first
    w.order_first += w.n_tiles - 1;
    w.order_base += w.n_tiles - 1;
    w.order_step = -1;
  } else if (p.kv_order == 2) {  // sink, then the diagonal backwards
    w.order_base += w.n_tiles;
    w.order_step = -1;
  }
  w.skip_gap = -__builtin_huge_valf();
  w.voting = false;
  if constexpr (kSkip) {
    // lambda = 0 (the guard) never skips: such a sequence runs the dense main loop.
    const float lambda = lambda_for(p.threshold, seq, w.kv_len);
    w.voting = lambda > 0.f;
    if (w.voting) w.skip_gap = __log2f(lambda) / p.scale_log2;
  }
  return true;
}

}  // namespace skipsoftmax::prefill
