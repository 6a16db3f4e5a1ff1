// The paged decode kernel: q_len new query tokens per sequence (1, or a few for speculative
// verification), every query head of a GQA group in one CTA, so that each K/V byte is read once.
// Its skip-softmax twin stops reading V.
//
// A CTA owns one (sequence, KV head, split) and walks the split's KV tiles of kTileK = 64 keys in
// order. The q_len x g <= 16 query rows (row r: token r / g, head r % g; token i sits at position
// kv_len - q_len + i and sees the keys up to it) are the M = 16 rows of mma.sync.m16n8k16 (rows
// past are zero and never vote). Each of the 4 key slices of a tile (16 keys) belongs to one warp
// (per 128 output columns: head dim 256 runs 8 warps, two column groups), which keeps its scores,
// its P and its partial O and row sums in registers; the slices are summed once, at the end. Each
// warp loads the K and V rows of its own slice (one page: pages hold at least 16 keys) with TMA
// boxes of 16 rows x 64 columns, completing on an mbarrier of its own per stage, so that its
// copies need no CTA barrier, and K and V complete independently (head dim 256: the first column
// group's warp loads the slice's K rows, and both warps of the slice wait on its barrier). Per
// tile t, with one CTA barrier:
//   1. K of tile t + 3 is requested (its page was read from the page table an iteration earlier,
//      and is kept for its V); K of tile t is awaited;
//   2. S_t = Q K_t^T for the warp's 16 keys; scores past the sequence are -inf; row maxima to
//      shared memory; the barrier;
//   3. the running maximum m_run moves; skip kernel: the vote. Tile t is skipped when every row
//      r < g has rowmax_t(r) - max(m_run(r), rowmax_t(r)) < ln(lambda) (in raw scores:
//      log2(lambda) / scale_log2). Every warp reads the four slices' maxima of all 16 rows, keeps
//      its own copy of m_run in registers: all warps reach the same verdict from the same
//      numbers, and no barrier is needed to publish m_run or the vote;
//   4. P V of tile t - 3 (its scores kept in registers), once its V has landed: three tiles after
//      it was requested;
//   5. V of tile t is requested only if the tile is kept, into the stage step 4 has just read: a
//      skipped tile's V is never read.
// The running maximum m_run covers every tile of the split visited so far (a skipped tile never
// raises it), and in a skip launch every split but the first starts from the row maxima of tile
// 0, the attention sink (its K is read once more; it adds nothing to O or l). O and l are kept
// relative to m_ref, which catches up with m_run at each P V. The combine kernel merges the
// splits' outputs by log-sum-exp. The CPU reference (reference_decode with tile_k = kTileK,
// forward order, the same num_splits) emulates all of it.
//
// Rows of the last tile past the sequence are loaded from its last slice (no cache row past the
// sequence is read; unused slots may hold anything, NaN included): their scores are masked,
// and their V rows are zeroed before P V, since P = 0 times NaN is NaN.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../common/device_threshold.h"
#include "../hopper/mma_sync.cuh"
#include "skipsoftmax/paged_kv.h"
#include "skipsoftmax/tiling.h"

namespace skipsoftmax::decode {

inline constexpr int kTileK = 64;     // keys per KV tile: the vote unit with the GQA group
inline constexpr int kMaxGroup = 16;  // query heads per KV head: the rows of one m16 MMA
inline constexpr int kKeySlices = 4;  // warps across a tile's keys, 16 keys each
inline constexpr int kSliceKeys = kTileK / kKeySlices;
inline constexpr int kBoxCols = 64;    // columns of a TMA box: 128 bytes, one swizzle row
inline constexpr int kMaxSplits = kMaxDecodeSplits;

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
  int page_shift;  // log2(page_size)
  int num_heads_q, num_heads_kv, group;
  int q_len;  // new tokens per sequence; q_len * group <= kMaxGroup
  int num_splits;
  int window;        // sliding window in keys (dense kernels); 0: none
  float scale_log2;  // softmax scale * log2(e)
  common::DeviceThreshold threshold;
  // num_splits > 1: each split's output normalized by its own sum, and its log2-sum-exp.
  float* partial_o;    // [batch, q_len, Hq, num_splits, D]
  float* partial_lse;  // [batch, q_len, Hq, num_splits]
  unsigned long long* stats;  // [batch][2] tiles visited, skipped; null: none
};

template <int kHeadDim>
struct Config {
  static constexpr int kColGroups = kHeadDim > 128 ? 2 : 1;        // O column groups
  static constexpr int kCols = kHeadDim / kColGroups;              // O columns of one warp
  static constexpr int kWarps = kKeySlices * kColGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBoxes = kHeadDim / kBoxCols;     // boxes across a row
  static constexpr int kWarpBoxes = kCols / kBoxCols;    // boxes across a warp's O columns
  // Bytes one slice's K rows (all columns) and one warp's V rows (its columns) bring.
  static constexpr std::uint32_t kSliceKBytes = kSliceKeys * kHeadDim * 2;
  static constexpr std::uint32_t kWarpVBytes = kSliceKeys * kCols * 2;
  // K runs three tiles ahead of the vote, P V three tiles behind it. V of tile t is requested
  // after the vote, into the stage P V of tile t - 3 has just read, and read three tiles later: a
  // run of skipped tiles goes fast, and the V of a kept tile among them needs that long to arrive
  // (two tiles behind: 1.44x at 75% of the tiles skipped, 64 x 32k; four ahead and two behind:
  // skip 2-5% slower, run 69). 4 + 3 stages of 16 KB (head dim 128) leave room for two CTAs per
  // multiprocessor; 32 KB at head dim 256, one CTA. Completion per stage (an mbarrier each) lets
  // K run ahead of a V still in flight.
#ifndef SKIPSOFTMAX_DECODE_K_AHEAD
#define SKIPSOFTMAX_DECODE_K_AHEAD 3
#endif
#ifndef SKIPSOFTMAX_DECODE_PV_BEHIND
#define SKIPSOFTMAX_DECODE_PV_BEHIND 3
#endif
  static constexpr int kAheadK = SKIPSOFTMAX_DECODE_K_AHEAD;
  static constexpr int kBehindPV = SKIPSOFTMAX_DECODE_PV_BEHIND;
  static constexpr int kStagesK = kAheadK + 1;
  static constexpr int kStagesV = kBehindPV;
};

template <int kHeadDim>
struct alignas(128) SharedStorage {
  using Cfg = Config<kHeadDim>;
  // Tiles are [kHeadDim / 64][kTileK][64], the TMA boxes' layout: rows of 128 bytes with the
  // 16-byte chunk c of row r at c ^ (r % 8) (128-byte swizzle; the stages are 1024-byte aligned),
  // so that ldmatrix reads 8 rows of one chunk column without bank conflicts. After the loop the K
  // stages hold the key slices' partial outputs, and the V stages the Epilogue.
  std::uint16_t k[Cfg::kStagesK][kTileK * kHeadDim];
  std::uint16_t v[Cfg::kStagesV][kTileK * kHeadDim];
  float warp_max[2][kKeySlices][kMaxGroup];  // double-buffered by tile parity
  std::uint64_t k_full[Cfg::kStagesK][kKeySlices];  // a slice's K rows landed
  std::uint64_t v_full[Cfg::kStagesV][Cfg::kWarps];  // a warp's V rows and columns landed
};
// What store() keeps after the loop, in the V stages.
struct Epilogue {
  float m_run[kMaxGroup];          // the split's final running maximum (raw scores), for its lse
  float l[kKeySlices][kMaxGroup];  // the key slices' partial row sums
};
// A row of a key slice's partial output in the K stages after the loop: 8 floats longer than the
// row, so that the 8 rows a warp stores at once start 8 banks apart. With rows of exactly 64, 128
// or 256 floats (multiples of the 32 banks) those stores conflicted 8 ways: ~0.5 us of a CTA's
// epilogue at head dim 128, ~1 us at 256 (run 194).
template <int kHeadDim>
inline constexpr int kRedStride = kHeadDim + 8;
static_assert(sizeof(float) * kKeySlices * kMaxGroup * kRedStride<256> <=
                  sizeof(SharedStorage<256>::k),
              "the partial outputs fit the K stages");
static_assert(sizeof(Epilogue) <= sizeof(SharedStorage<64>::v), "the epilogue fits the V stages");
static_assert(2 * (sizeof(SharedStorage<128>) + 1024) <= 228 * 1024,
              "two CTAs of head dim 128 per multiprocessor");
static_assert(sizeof(SharedStorage<256>) <= 227 * 1024, "one CTA of head dim 256");

// Element offset of 16-byte chunk `chunk` of row `row` in a tile (the layout of SharedStorage).
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk / 8) * (kTileK * kBoxCols) + row * kBoxCols + ((chunk % 8) ^ (row % 8)) * 8;
}

// Split s of n_tiles, as split_tile_range of tiling.h.
__device__ __forceinline__ void split_range(int n_tiles, int splits, int s, int& begin, int& end) {
  const int per = (n_tiles + splits - 1) / splits;
  begin = min(per * s, n_tiles);
  end = min(begin + per, n_tiles);
}

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

  unsigned k_phase = 0, v_phase = 0;   // bit j: the parity of the next wait on stage j

  // The cache row (page slot) of this warp's first key of tile `tile`: pages hold at least 16
  // keys and start at multiples of their size, so the slice's 16 keys are consecutive rows of one
  // page. Past the sequence, the sequence's last slice (its rows are masked or zeroed): no page
  // past the sequence is copied from (the prologue's guess of a longer length may read its page
  // table row further, up to max_seq_len, and drops what it read). Looked up an iteration before
  // the copies that need it and kept for the tile's V: a page-table read is an L2 round trip,
  // which in the copy's address would stall the whole iteration behind it.
  __device__ int slice_row(int tile) const {
    static_assert(kMinPageSize >= kSliceKeys, "a key slice lies in one page");
    const int token = min(tile * kTileK + kSliceKeys * slice, (kv_len - 1) / kSliceKeys * kSliceKeys);
    const int page = __ldg(p.page_table + seq * p.max_pages_per_seq + (token >> p.page_shift));
    return (page << p.page_shift) + (token & ((1 << p.page_shift) - 1));
  }

  // K of this warp's slice of a tile into K stage `stage`: all its columns, by the first column
  // group's warp; both column groups' warps wait for it (wait_k).
  __device__ void load_k(int stage, int row) const {
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
  __device__ void load_v(int stage, int row) const {
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

  __device__ void wait_k(int stage) {
    hopper::mbar_wait(&s.k_full[stage][slice], (k_phase >> stage) & 1u);
    k_phase ^= 1u << stage;
  }

  // Waits for V of tile `tile` in V stage `stage`; in the sequence's last tile, zeroes this warp's
  // V rows past the sequence (they were loaded from its last slice, or are unused slots).
  __device__ void wait_v(int stage, int tile) {
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

  // S of this warp's 16 keys of one tile, masked (C fragments of two n8 blocks); the first column
  // group publishes the row maxima.
  __device__ void scores(int stage, int tile, int buf, float (&acc)[2][4]) {
    // Two chains of MMAs per n8 block, the even and the odd k steps, summed at the end: a warp
    // of a CTA alone on its SM sub-partition waits out each MMA's latency, and one chain of
    // kHeadDim / 16 dependent MMAs was the longest path of a tile. (Head dim 256, at 255
    // registers, would spill: one chain.)
    constexpr int kChains = kHeadDim <= 128 ? 2 : 1;
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
  __device__ bool update_max(float gap, int buf) {
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
  __device__ void accumulate(int stage, const float (&acc)[2][4]) {
    const int r0 = lane / 4;
    float pr[2][4];
    float corr[2] = {1.f, 1.f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = r0 + 8 * i;
      float sum = 0.f;
      if (row < rows) {
        const float m_new = m_run[i];
        corr[i] = m_ref[i] == kNegInf ? 0.f
                                      : hopper::fast_exp2((m_ref[i] - m_new) * p.scale_log2);
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
    const std::uint32_t a[4] = {hopper::pack_half2<kBf16>(pr[0][0], pr[0][1]),
                                hopper::pack_half2<kBf16>(pr[0][2], pr[0][3]),
                                hopper::pack_half2<kBf16>(pr[1][0], pr[1][1]),
                                hopper::pack_half2<kBf16>(pr[1][2], pr[1][3])};
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

  __device__ bool seeded() const { return tile_begin > 0 && n_tiles > 0; }

  // The split's tiles in order, row[j] the cache row of this warp's slice of tile tile_begin + j,
  // K of the first kAhead tiles (and of the sink, for a seeded voting split) already requested.
  // kVote: take the skip vote. Returns the number of tiles skipped.
  template <bool kVote>
  __device__ int mainloop(float gap, int (&row)[Cfg::kAheadK + 1]) {
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

  // Sums the key slices' partial outputs and row sums, normalizes, and writes the output (one
  // split) or the split's output and log2-sum-exp.
  __device__ void store(int skipped) {
    __syncthreads();  // every warp is done with the stages
    auto* red = reinterpret_cast<float*>(s.k);  // [kKeySlices][kMaxGroup][kRedStride]
    constexpr int kStride = kRedStride<kHeadDim>;
    Epilogue& e = *reinterpret_cast<Epilogue*>(s.v);
    if (warp == 0 && lane % 4 == 0) {
      e.m_run[lane / 4] = m_run[0];
      e.m_run[lane / 4 + 8] = m_run[1];
    }
    const int r0 = lane / 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float li = l[i];
      li += __shfl_xor_sync(0xffffffff, li, 1);
      li += __shfl_xor_sync(0xffffffff, li, 2);
      if (col0 == 0 && lane % 4 == 0) e.l[slice][r0 + 8 * i] = li;
#pragma unroll
      for (int nb = 0; nb < Cfg::kCols / 8; ++nb) {
        const int col = col0 + 8 * nb + 2 * (lane % 4);
        *reinterpret_cast<float2*>(&red[(slice * kMaxGroup + r0 + 8 * i) * kStride + col]) =
            make_float2(o[nb][2 * i], o[nb][2 * i + 1]);
      }
    }
    __syncthreads();  // the partial outputs, row sums and m_run are published
    const bool split_out = p.num_splits > 1;
    // Thread t of the CTA writes columns 2 (t % (D / 2)) + {0, 1} of rows t / (D / 2) + k R.
    constexpr int kPairs = kHeadDim / 2, kRowStep = kThreads / kPairs;
    const int col = 2 * (tid % kPairs);
    for (int row = tid / kPairs; row < rows; row += kRowStep) {
      float sum = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
      for (int k = 0; k < kKeySlices; ++k) {
        sum += e.l[k][row];
        const float2 part =
            *reinterpret_cast<const float2*>(&red[(k * kMaxGroup + row) * kStride + col]);
        x0 += part.x;
        x1 += part.y;
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const std::int64_t hr = head_row(row);
      if (split_out) {
        float* dst = p.partial_o + (hr * p.num_splits + split) * kHeadDim + col;
        *reinterpret_cast<float2*>(dst) = make_float2(x0 * inv, x1 * inv);
        if (col == 0) {
          p.partial_lse[hr * p.num_splits + split] =
              sum > 0.f ? e.m_run[row] * p.scale_log2 + __log2f(sum) : kNegInf;
        }
      } else {
        auto* dst = static_cast<std::uint32_t*>(p.out) + (hr * kHeadDim + col) / 2;
        *dst = hopper::pack_half2<kBf16>(x0 * inv, x1 * inv);
      }
    }
    if (kSkip && p.stats != nullptr && tid == 0 && n_tiles > 0) {
      atomicAdd(&p.stats[2 * seq], static_cast<unsigned long long>(n_tiles));
      atomicAdd(&p.stats[2 * seq + 1], static_cast<unsigned long long>(skipped));
    }
  }

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

  __device__ void run() {
    tid = threadIdx.x;
    warp = tid / 32;
    lane = tid % 32;
    slice = warp % kKeySlices;
    col0 = (warp / kKeySlices) * Cfg::kCols;
    rows = p.q_len * p.group;
    if (tid == 0) {
      hopper::tma_prefetch_descriptor(&p.tma_k);
      hopper::tma_prefetch_descriptor(&p.tma_v);
#pragma unroll
      for (int j = 0; j < Cfg::kStagesK; ++j) {
#pragma unroll
        for (int w = 0; w < kKeySlices; ++w) hopper::mbar_init(&s.k_full[j][w], 1);
      }
#pragma unroll
      for (int j = 0; j < Cfg::kStagesV; ++j) {
#pragma unroll
        for (int w = 0; w < Cfg::kWarps; ++w) hopper::mbar_init(&s.v_full[j][w], 1);
      }
      hopper::fence_barrier_init();
    }
    // Q does not depend on the sequence length: its loads are issued while that one is in flight.
    load_q();
    // The cache rows of the split's first tiles (and of the sink) are requested for the batch's
    // longest length before the sequence's own has arrived: they are its rows wherever the two
    // agree (every sequence at batch 1), and any other sequence requests its own next. Where the
    // guess holds, the first K copies wait for one DRAM round trip instead of two (the length's
    // was 0.5-0.7 us of a CTA's ~2 us before its first copy, run 194; skip calls at batch 1-2 ran
    // up to 2.4% faster, run 200). The rows are read before the lambda lookup and
    // the barrier, which run while they are in flight (with the barrier first, ptxas placed them
    // after it in the skip kernel); then K is requested, the sink's first.
    const int len = p.seq_lens[seq];
    int seed_row;
    int row[Cfg::kAheadK + 1];
    first_rows(p.max_seq_len, seed_row, row);
    if (len != p.max_seq_len) first_rows(len, seed_row, row);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = lane / 4 + 8 * i;
      const int last = kv_len - p.q_len + row / p.group;  // this row's token's position
      key_hi[i] = row < rows ? last : -1;
      key_lo[i] = p.window > 0 ? max(0, last - p.window + 1) : 0;
    }
    // lambda = 0 (the guard, and the dense kernel) runs the dense loop: bit-identical.
    const float lambda = kSkip ? common::lambda_for(p.threshold, kv_len) : 0.f;
    __syncthreads();  // the barriers are initialized
    if (lambda > 0.f && seeded()) load_k(Cfg::kAheadK, seed_row);
#pragma unroll
    for (int j = 0; j < Cfg::kAheadK; ++j) {
      if (j < n_tiles) load_k(j, row[j]);
    }
    int skipped = 0;
    if (kSkip && lambda > 0.f) {
      skipped = mainloop<kSkip>(__log2f(lambda) / p.scale_log2, row);
    } else {
      mainloop<false>(kNegInf, row);
    }
    store(skipped);
  }
};

template <bool kBf16, int kHeadDim, bool kSkip>
__global__ void __launch_bounds__(Config<kHeadDim>::kThreads)
    decode_kernel(const __grid_constant__ Params p) {
  // The combine kernel may be scheduled now: it waits for this grid's completion and memory.
  hopper::launch_dependents();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<kHeadDim>*>(smem_raw);
  DecodeCta<kBf16, kHeadDim, kSkip> cta{p, s};
  cta.split = blockIdx.x;
  cta.kv_head = blockIdx.y;
  cta.seq = blockIdx.z;
  cta.run();
}

// out[b, h, :] = sum over splits of 2^(lse_s - lse) * partial_o_s, lse the log2-sum-exp of all.
// One CTA per (sequence, query head): thread t sums columns 4 (t % kQuads) + {0..3} over the
// splits s = t / kQuads (mod kSplitGroups), so that a thread's few loads are in flight together;
// the split groups' sums meet in shared memory. Launched as a programmatic dependent of the decode
// kernel: its launch overlaps the decode grid, and it waits for that grid's results.
inline constexpr int kCombineThreads = 256;

template <bool kBf16, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ Params p) {
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kSplitGroups = kCombineThreads / kQuads;
  static_assert(kCombineThreads >= kMaxSplits, "one thread per split's lse");
  __shared__ float weight[kMaxSplits];
  __shared__ float4 group_sum[kSplitGroups][kQuads];
  hopper::wait_on_dependencies();
  const int tid = threadIdx.x;
  const std::int64_t head_row = blockIdx.x;
  const int n = p.num_splits;
  // This thread's first kAhead partial outputs are requested with the lses, before the weights
  // are known: one round trip to the L2 after the decode grid ends, not two (kAhead covers up to
  // 32 splits at head dim 128; more would hold registers a decode CTA beside it may need).
  constexpr int kAhead = 4;
  const int quad = tid % kQuads;
  const auto* part = reinterpret_cast<const float4*>(p.partial_o + head_row * n * kHeadDim);
  float4 ahead[kAhead];
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const int i = tid / kQuads + j * kSplitGroups;
    ahead[j] = i < n ? part[i * kQuads + quad] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  if (tid < n) weight[tid] = p.partial_lse[head_row * n + tid];
  __syncthreads();
  float m = -__builtin_huge_valf();
  for (int i = 0; i < n; ++i) m = fmaxf(m, weight[i]);
  __syncthreads();  // every thread has the maximum before the weights replace the lses
  if (tid < n) weight[tid] = weight[tid] == -__builtin_huge_valf() ? 0.f : exp2f(weight[tid] - m);
  __syncthreads();
  // An empty split wrote a zero output with weight 0.
  // Splits i = tid / kQuads + j kSplitGroups in order, as one loop over them would sum.
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto add = [&](int i, const float4& x) {
    const float w = weight[i];
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  };
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const int i = tid / kQuads + j * kSplitGroups;
    if (i < n) add(i, ahead[j]);
  }
#pragma unroll 8
  for (int i = tid / kQuads + kAhead * kSplitGroups; i < n; i += kSplitGroups) {
    add(i, part[i * kQuads + quad]);
  }
  group_sum[tid / kQuads][quad] = acc;
  __syncthreads();
  if (tid >= kQuads) return;
  float total = 0.f;
  for (int i = 0; i < n; ++i) total += weight[i];
  float4 x = group_sum[0][quad];
#pragma unroll
  for (int g = 1; g < kSplitGroups; ++g) {
    const float4 y = group_sum[g][quad];
    x.x += y.x;
    x.y += y.y;
    x.z += y.z;
    x.w += y.w;
  }
  // total = 0: no split saw a key (a sequence shorter than q_len): 0, as one split writes.
  const float inv = total > 0.f ? 1.f / total : 0.f;
  auto* out = static_cast<std::uint32_t*>(p.out) + (head_row * kHeadDim + 4 * quad) / 2;
  out[0] = hopper::pack_half2<kBf16>(x.x * inv, x.y * inv);
  out[1] = hopper::pack_half2<kBf16>(x.z * inv, x.w * inv);
}

}  // namespace skipsoftmax::decode
