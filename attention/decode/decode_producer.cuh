// The decode kernel's copies: each warp requests the K and V rows of its own key slice by TMA,
// completing on an mbarrier of its own per stage, and waits for them; the cache rows come from
// the page table an iteration ahead.
#pragma once

#include <cstdint>

#include "../hopper/mma_sync.cuh"
#include "decode_cta.cuh"
#include "skipsoftmax/paged_kv.h"

namespace skipsoftmax::decode {

// The cache row (page slot) of this warp's first key of tile `tile`: pages hold at least 16
// keys and start at multiples of their size, so the slice's 16 keys are consecutive rows of one
// page. Past the sequence, the sequence's last slice (its rows are masked or zeroed): no page
// past the sequence is copied from (the prologue's guess of a longer length may read its page
// table row further, up to max_seq_len, and drops what it read). Looked up an iteration before
// the copies that need it and kept for the tile's V: a page-table read is an L2 round trip,
// which in the copy's address would stall the whole iteration behind it.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline int DecodeCta<kBf16, kHeadDim, kSkip>::slice_row(int tile) const {
  static_assert(kMinPageSize >= kSliceKeys, "a key slice lies in one page");
  const int token = min(tile * kTileK + kSliceKeys * slice, (kv_len - 1) / kSliceKeys * kSliceKeys);
  const int page = __ldg(p.page_table + seq * p.max_pages_per_seq + (token >> p.page_shift));
  return (page << p.page_shift) + (token & ((1 << p.page_shift) - 1));
}

// K of this warp's slice of a tile into K stage `stage`: all its columns, by the first column
// group's warp; both column groups' warps wait for it (wait_k).
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::load_k(int stage, int row) const {
  if (col0 != 0 || lane != 0) return;
  std::uint64_t* bar = &s.k_full[stage][slice];
  hopper::mbar_arrive_expect_tx(bar, Cfg::kSliceKBytes);
#pragma unroll
  for (int b = 0; b < Cfg::kBoxes; ++b) {
    hopper::tma_load_3d(s.k[stage] + b * kTileK * kBoxCols + kSliceKeys * slice * kBoxCols,
                        &p.tma_k, bar, b * kBoxCols, kv_head, row);
  }
}

// V of this warp's slice and columns of a tile into V stage `stage`.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::load_v(int stage, int row) const {
  if (lane != 0) return;
  std::uint64_t* bar = &s.v_full[stage][warp];
  hopper::mbar_arrive_expect_tx(bar, Cfg::kWarpVBytes);
#pragma unroll
  for (int b = 0; b < Cfg::kWarpBoxes; ++b) {
    const int box = col0 / kBoxCols + b;
    hopper::tma_load_3d(s.v[stage] + box * kTileK * kBoxCols + kSliceKeys * slice * kBoxCols,
                        &p.tma_v, bar, box * kBoxCols, kv_head, row);
  }
}

template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::wait_k(int stage) {
  hopper::mbar_wait(&s.k_full[stage][slice], (k_phase >> stage) & 1u);
  k_phase ^= 1u << stage;
}

// Waits for V of tile `tile` in V stage `stage`; in the sequence's last tile, zeroes this warp's
// V rows past the sequence (they were loaded from its last slice, or are unused slots).
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::wait_v(int stage, int tile) {
  hopper::mbar_wait(&s.v_full[stage][warp], (v_phase >> stage) & 1u);
  v_phase ^= 1u << stage;
  const int valid = kv_len - (tile * kTileK + kSliceKeys * slice);
  if (valid < kSliceKeys) {
    constexpr int kChunks = Cfg::kCols / 8;  // 16-byte chunks of a row in this warp's columns
    for (int i = lane; i < kSliceKeys * kChunks; i += 32) {
      const int r = i / kChunks;
      if (r >= valid) {
        const int row = kSliceKeys * slice + r;
        *reinterpret_cast<uint4*>(s.v[stage] + tile_offset(row, col0 / 8 + i % kChunks)) =
            make_uint4(0, 0, 0, 0);
      }
    }
    __syncwarp();
  }
}

}  // namespace skipsoftmax::decode
