// The decode kernel's main loop over the split's KV tiles: the scores of each warp's key slice,
// the running maximum and the skip vote that every warp takes alike, and P V of the kept tiles
// kBehindPV tiles behind the vote.
#pragma once

#include <cstdint>

#include "../hopper/mma_sync.cuh"
#include "decode_cta.cuh"

namespace skipsoftmax::decode {

// S of this warp's 16 keys of one tile, masked (C fragments of two n8 blocks); the first column
// group publishes the row maxima.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::scores(int stage, int tile, int buf,
                                                                 float (&acc)[2][4]) {
  // Two chains of MMAs per n8 block, the even and the odd k steps, summed at the end: a warp
  // of a CTA alone on its SM sub-partition waits out each MMA's latency, and one chain of
  // kHeadDim / 16 dependent MMAs was the longest path of a tile. (Head dim 256, at 255
  // registers, would spill: one chain.)
  constexpr int kChains = Cfg::kScoreChains;
  float part[kChains][2][4] = {};
  const std::uint16_t* k = s.k[stage];
  const int mi = lane / 8;
  const int key = 16 * slice + 8 * (mi / 2) + lane % 8;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    std::uint32_t b[4];
    hopper::ldmatrix_x4(b, k + tile_offset(key, 2 * kk + mi % 2));
    hopper::mma_16816<kBf16>(part[kk % kChains][0], qa[kk], b[0], b[1]);
    hopper::mma_16816<kBf16>(part[kk % kChains][1], qa[kk], b[2], b[3]);
  }
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[nb][e] = part[0][nb][e];
#pragma unroll
      for (int c = 1; c < kChains; ++c) acc[nb][e] += part[c][nb][e];
    }
  }
  const int r0 = lane / 4;
  float mx[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key_index = tile * kTileK + 16 * slice + 8 * nb + 2 * (lane % 4) + e % 2;
      if (key_index > key_hi[e / 2] || key_index < key_lo[e / 2]) acc[nb][e] = kNegInf;
      mx[e / 2] = fmaxf(mx[e / 2], acc[nb][e]);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 2));
    if (col0 == 0 && lane % 4 == 0) s.warp_max[buf][slice][r0 + 8 * i] = mx[i];
  }
}

// After scores() and a barrier: the tile's row maxima move m_run of this thread's rows r0 and
// r0 + 8; returns the warp's vote at raw-score gap `gap`, every row r < rows voting skip. Each
// warp covers all 16 rows, so every warp returns the CTA's verdict.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline bool DecodeCta<kBf16, kHeadDim, kSkip>::update_max(float gap, int buf) {
  bool vote = true;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = lane / 4 + 8 * i;
    float mx = s.warp_max[buf][0][row];
#pragma unroll
    for (int w = 1; w < kKeySlices; ++w) mx = fmaxf(mx, s.warp_max[buf][w][row]);
    const float m_old = m_run[i];
    m_run[i] = fmaxf(m_old, mx);
    vote &= row >= rows || mx == kNegInf || mx - fmaxf(m_old, mx) < gap;
  }
  return __all_sync(0xffffffff, vote);
}

// O += P V for this warp's keys and columns, with P = exp2((S - m_run) * scale_log2) from the
// scores `acc` of a tile that V stage `stage` holds; o and l are first rescaled to the new m_run.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::accumulate(int stage,
                                                                     const float (&acc)[2][4]) {
  const int r0 = lane / 4;
  float pr[2][4];
  float corr[2] = {1.f, 1.f};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = r0 + 8 * i;
    float sum = 0.f;
    if (row < rows) {
      const float m_new = m_run[i];
      corr[i] = m_ref[i] == kNegInf ? 0.f : hopper::fast_exp2((m_ref[i] - m_new) * p.scale_log2);
      m_ref[i] = m_new;
      // A token that has seen no key yet (its keys all lie past this split's first tiles)
      // keeps m = -inf: exponentiate against 0, so that its masked scores give 0, not NaN.
      const float ms = m_new == kNegInf ? 0.f : m_new * p.scale_log2;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          pr[nb][2 * i + e] = hopper::fast_exp2(fmaf(acc[nb][2 * i + e], p.scale_log2, -ms));
          sum += pr[nb][2 * i + e];
        }
      }
    } else {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) pr[nb][2 * i] = pr[nb][2 * i + 1] = 0.f;
    }
    l[i] = l[i] * corr[i] + sum;
  }
  // Past its first tiles the running maximum seldom moves (the sink holds it): o is rescaled
  // only when some row of the warp moved, since o x 1 is o (the 64 multiplications at head dim
  // 128 were a tenth of a tile's instructions).
  if (__any_sync(0xffffffff, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int nb = 0; nb < Cfg::kCols / 8; ++nb) {
        o[nb][2 * i] *= corr[i];
        o[nb][2 * i + 1] *= corr[i];
      }
    }
  }
  // The C fragments of two n8 blocks are the A fragment of one k16 step.
  const std::uint32_t a[4] = {
      hopper::pack_half2<kBf16>(pr[0][0], pr[0][1]), hopper::pack_half2<kBf16>(pr[0][2], pr[0][3]),
      hopper::pack_half2<kBf16>(pr[1][0], pr[1][1]), hopper::pack_half2<kBf16>(pr[1][2], pr[1][3])};
  const std::uint16_t* v = s.v[stage];
  const int mi = lane / 8;
  const int key = 16 * slice + 8 * (mi % 2) + lane % 8;
#pragma unroll
  for (int nb = 0; nb < Cfg::kCols / 8; nb += 2) {
    const int chunk = col0 / 8 + nb + mi / 2;
    std::uint32_t b[4];
    hopper::ldmatrix_x4_trans(b, v + tile_offset(key, chunk));
    hopper::mma_16816<kBf16>(o[nb], a, b[0], b[1]);
    hopper::mma_16816<kBf16>(o[nb + 1], a, b[2], b[3]);
  }
}

// The split's tiles in order, row[j] the cache row of this warp's slice of tile tile_begin + j,
// K of the first kAhead tiles (and of the sink, for a seeded voting split) already requested.
// kVote: take the skip vote. Returns the number of tiles skipped.
template <bool kBf16, int kHeadDim, bool kSkip>
template <bool kVote>
__device__ inline int DecodeCta<kBf16, kHeadDim, kSkip>::mainloop(float gap,
                                                                  int (&row)[Cfg::kAheadK + 1]) {
  constexpr int kAhead = Cfg::kAheadK;
  constexpr int kBehind = Cfg::kBehindPV;
  // Voting splits after the first start from the sink: tile 0's row maxima seed m_run (not O,
  // l or the tile counts), so that a split's far-field tiles meet the maximum they would meet
  // in one long pass. Its K is in the stage the loop fills first, K of tile kAhead's.
  if (kVote && seeded()) {
    float sink[2][4];
    wait_k(kAhead);
    scores(kAhead, 0, 1, sink);
    __syncthreads();
    update_max(gap, 1);
  }
  int skipped = 0;
  unsigned history = 0;       // bit i: the tile visited i iterations ago was skipped
  float held[kBehind][2][4];  // scores of the tiles visited 1 .. kBehind iterations ago
  for (int t = 0; t < n_tiles + kBehind; ++t) {
    // Issued first, used next iteration: the row of tile t + kAhead + 1.
    const int row_next = slice_row(tile_begin + t + kAhead + 1);
    // Into the stage of tile t - 1, which every warp has read before the last CTA barrier.
    if (t + kAhead < n_tiles) load_k((t + kAhead) % Cfg::kStagesK, row[kAhead]);
    bool skip = false;
    float s0[2][4];
    if (t < n_tiles) {
      wait_k(t % Cfg::kStagesK);
      // The one CTA barrier of a tile: every slice's row maxima are published. A warp writes
      // the other buffer of warp_max next tile, and this one only after the next barrier.
      scores(t % Cfg::kStagesK, tile_begin + t, t & 1, s0);
      __syncthreads();
      const bool vote = update_max(gap, t & 1);
      if constexpr (kVote) {
        skip = vote;
        skipped += skip;
      }
    }
    history = (history << 1) | (skip ? 1u : 0u);
    if (t >= kBehind && !(history & (1u << kBehind))) {
      wait_v(t % Cfg::kStagesV, tile_begin + t - kBehind);
      accumulate(t % Cfg::kStagesV, held[kBehind - 1]);
    }
    // This warp's reads of the V stage (tile t - kBehind's) precede its copy into it.
    __syncwarp();
    if (t < n_tiles && !skip) load_v(t % Cfg::kStagesV, row[0]);
#pragma unroll
    for (int j = kBehind - 1; j > 0; --j) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) held[j][nb][e] = held[j - 1][nb][e];
      }
    }
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) held[0][nb][e] = s0[nb][e];
    }
#pragma unroll
    for (int j = 0; j < kAhead; ++j) row[j] = row[j + 1];
    row[kAhead] = row_next;
  }
  return skipped;
}

}  // namespace skipsoftmax::decode
