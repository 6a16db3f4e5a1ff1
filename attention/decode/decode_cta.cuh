// The decode kernel's CTA: its state (one sequence, KV head and split; Q fragments, partial O,
// running maxima and sums of each warp), the split's KV range and the prologue's loads. The
// steps that use them are defined by role in the files named below, and decode_kernel.cuh
// composes them in DecodeCta::run.
#pragma once

#include <cstdint>

#include "../hopper/mma_sync.cuh"
#include "decode_params.h"
#include "decode_traits.cuh"

namespace skipsoftmax::decode {

// Split s of n_tiles, as split_tile_range of tiling.h.
__device__ __forceinline__ void split_range(int n_tiles, int splits, int s, int& begin, int& end) {
  const int per = (n_tiles + splits - 1) / splits;
  begin = min(per * s, n_tiles);
  end = min(begin + per, n_tiles);
}

// One CTA of the decode kernel: its work (sequence, KV head, split), each thread's rows and
// fragments, and the steps of its run.
template <bool kBf16, int kHeadDim, bool kSkip>
struct DecodeCta {
  using Cfg = Config<kHeadDim>;
  static constexpr float kNegInf = -__builtin_huge_valf();
  static constexpr int kThreads = Cfg::kThreads;

  const Params& p;
  SharedStorage<kHeadDim>& s;
  int seq, kv_head, split, kv_len, tile_begin, n_tiles;
  int rows;                  // q_len * group query rows
  int key_lo[2], key_hi[2];  // the keys rows r0 and r0 + 8 see (none past the rows: hi = -1)
  int tid, warp, lane;
  int slice, col0;                      // this warp's 16 keys of a tile, its first O column
  std::uint32_t qa[kHeadDim / 16][4];   // Q as A fragments, one group per 16 dims
  float o[Cfg::kCols / 8][4] = {};      // partial O: rows r0, r0 + 8 of this warp's columns
  float m_run[2] = {kNegInf, kNegInf};  // running maximum over the tiles so far, rows r0, r0 + 8
  float m_ref[2] = {kNegInf, kNegInf};  // the maximum o and l are relative to, rows r0, r0 + 8
  float l[2] = {0.f, 0.f};              // partial row sums over this thread's keys

  unsigned k_phase = 0, v_phase = 0;  // bit j: the parity of the next wait on stage j

  // Row `row`'s index in the [batch, q_len, Hq] rows of q and of the output.
  __device__ std::int64_t head_row(int row) const {
    const std::int64_t token = static_cast<std::int64_t>(seq) * p.q_len + row / p.group;
    return token * p.num_heads_q + kv_head * p.group + row % p.group;
  }

  // The A fragments of Q: this thread's two rows r0 and r0 + 8, their addresses computed once.
  // (Per fragment, head_row's divisions by the group made the prologue ~1,500 instructions long,
  // all of them ahead of the first K copy.)
  __device__ void load_q() {
    const int r0 = lane / 4, c0 = 2 * (lane % 4);
    const auto* q = static_cast<const std::uint32_t*>(p.q);
    const std::uint32_t* src[2];
    bool valid[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = r0 + 8 * i;
      valid[i] = row < rows;
      src[i] = q + (valid[i] ? head_row(row) : 0) * (kHeadDim / 2) + c0 / 2;
    }
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 16 * kk + 8 * (i / 2);
        qa[kk][i] = valid[i % 2] ? src[i % 2][col / 2] : 0u;
      }
    }
  }

  __device__ bool seeded() const { return tile_begin > 0 && n_tiles > 0; }

  // For KV length `len`: kv_len, the split's tiles (tile_begin, n_tiles) and the cache rows of
  // its first kAheadK + 1 tiles and of the sink (seed_row; a seeded skip split's only).
  __device__ void first_rows(int len, int& seed_row, int (&row)[Cfg::kAheadK + 1]) {
    kv_len = len;
    // The splits cut the tiles from the one holding the first token's first key, as
    // reference_decode.
    const int first_key = p.window > 0 ? max(0, kv_len - p.q_len - p.window + 1) : 0;
    const int first_tile = first_key / kTileK;
    int tile_end;
    split_range((kv_len + kTileK - 1) / kTileK - first_tile, p.num_splits, split, tile_begin,
                tile_end);
    tile_begin += first_tile;
    n_tiles = tile_end + first_tile - tile_begin;
    seed_row = kSkip && seeded() ? slice_row(0) : 0;
#pragma unroll
    for (int j = 0; j <= Cfg::kAheadK; ++j) row[j] = slice_row(tile_begin + j);
  }

  // The producer side of each warp: its own K and V copies (decode_producer.cuh).
  __device__ int slice_row(int tile) const;
  __device__ void load_k(int stage, int row) const;
  __device__ void load_v(int stage, int row) const;
  __device__ void wait_k(int stage);
  __device__ void wait_v(int stage, int tile);

  // The main loop and its steps (decode_mainloop.cuh).
  __device__ void scores(int stage, int tile, int buf, float (&acc)[2][4]);
  __device__ bool update_max(float gap, int buf);
  __device__ void accumulate(int stage, const float (&acc)[2][4]);
  template <bool kVote>
  __device__ int mainloop(float gap, int (&row)[Cfg::kAheadK + 1]);

  // The epilogue (decode_epilogue.cuh).
  __device__ void store(int skipped);

  // The CTA's work from the prologue to the output (decode_kernel.cuh).
  __device__ void run();
};

}  // namespace skipsoftmax::decode
