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
// warp copies (cp.async) the K and V rows of its own slice, so that its copies need no CTA
// barrier (head dim 256: the two column groups of a slice share its K rows, one barrier). Per
// tile t, with one CTA barrier:
//   1. K of tile t + 3 is requested (zero-filled past the sequence; its pages were read from the
//      page table an iteration earlier, and are kept for its V); K of tile t and V of tile t - 3
//      are awaited;
//   2. S_t = Q K_t^T for the warp's 16 keys; scores past the sequence are -inf; row maxima to
//      shared memory; the barrier;
//   3. the running maximum m_run moves; skip kernel: the vote. Tile t is skipped when every row
//      r < g has rowmax_t(r) - max(m_run(r), rowmax_t(r)) < ln(lambda) (in raw scores:
//      log2(lambda) / scale_log2). Every warp reads the four slices' maxima of all 16 rows, keeps
//      its own copy of m_run in registers: all warps reach the same verdict from the same
//      numbers, and no barrier is needed to publish m_run or the vote;
//   4. P V of tile t - 3 (its scores kept in registers), whose V has had three tiles to arrive;
//   5. V of tile t is requested only if the tile is kept, into the stage step 4 has just read: a
//      skipped tile's V is never read.
// The running maximum m_run covers every tile of the split visited so far (a skipped tile never
// raises it), and in a skip launch every split but the first starts from the row maxima of tile
// 0, the attention sink (its K is read once more; it adds nothing to O or l). O and l are kept
// relative to m_ref, which catches up with m_run at each P V. The combine kernel merges the
// splits' outputs by log-sum-exp. The CPU reference (reference_decode with tile_k = kTileK,
// forward order, the same num_splits) emulates all of it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../common/device_threshold.h"
#include "../hopper/mma_sync.cuh"
#include "skipsoftmax/paged_kv.h"

namespace skipsoftmax::decode {

inline constexpr int kTileK = 64;     // keys per KV tile: the vote unit with the GQA group
inline constexpr int kMaxGroup = 16;  // query heads per KV head: the rows of one m16 MMA
inline constexpr int kKeySlices = 4;  // warps across a tile's keys, 16 keys each

struct Params {
  const void* q;          // [batch, q_len, Hq, D]
  void* out;              // [batch, q_len, Hq, D]
  const void* k_pages;    // [num_pages, page_size, Hkv, D]
  const void* v_pages;    // [num_pages, page_size, Hkv, D]
  const int* page_table;  // [batch, max_pages_per_seq]
  const int* seq_lens;    // [batch]
  int max_pages_per_seq;
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
  // Each warp copies the K and V rows of its key slice, the chunks of its column group: what it
  // reads itself. Head dim <= 128: the copies are warp-private and need no CTA barrier; head dim
  // 256: the two column groups of a slice share its K rows (one barrier).
  static constexpr int kWarpChunks = kCols / 8;  // 16-byte chunks of a row that one warp copies
  static constexpr bool kSharedK = kColGroups > 1;
  // K runs three tiles ahead of the vote, P V three tiles behind it. V of tile t is requested
  // after the vote, into the stage P V of tile t - 3 has just read, and read three tiles later: a
  // run of skipped tiles goes fast, and the V of a kept tile among them needs that long to arrive
  // (two tiles behind: 1.44x at 75% of the tiles skipped, 64 x 32k). 4 + 3 stages of 16 KB (head
  // dim 128) leave room for two CTAs per multiprocessor; 32 KB at head dim 256, one CTA.
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
  static_assert(kAheadK >= kBehindPV, "K of tile t is committed before V of tile t - kBehindPV");
};

template <int kHeadDim>
struct alignas(128) SharedStorage {
  using Cfg = Config<kHeadDim>;
  // Tiles are [kTileK][kHeadDim] with the 16-byte chunk c of row r at c ^ (r % 8): ldmatrix
  // reads 8 rows of one chunk column without bank conflicts. After the loop the K stages hold
  // the key slices' partial outputs, [kKeySlices][kMaxGroup][kHeadDim] floats.
  std::uint16_t k[Cfg::kStagesK][kTileK * kHeadDim];
  std::uint16_t v[Cfg::kStagesV][kTileK * kHeadDim];
  float warp_max[2][kKeySlices][kMaxGroup];  // double-buffered by tile parity
  float m_run[kMaxGroup];          // the split's final running maximum (raw scores), for its lse
  float l[kKeySlices][kMaxGroup];  // the key slices' partial row sums
};
static_assert(sizeof(float) * kKeySlices * kMaxGroup * 256 <= sizeof(SharedStorage<256>::k),
              "the partial outputs fit the K stages");
static_assert(2 * (sizeof(SharedStorage<128>) + 1024) <= 228 * 1024,
              "two CTAs of head dim 128 per multiprocessor");
static_assert(sizeof(SharedStorage<256>) <= 227 * 1024, "one CTA of head dim 256");

__device__ __forceinline__ int swizzle(int row, int chunk) { return chunk ^ (row & 7); }

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

  // The rows of a tile this thread copies: 16 slice + lane / kWarpChunks + i kLaneRows, i <
  // kPasses, each at chunk col0 / 8 + lane % kWarpChunks.
  static constexpr int kLaneRows = 32 / Cfg::kWarpChunks;
  static constexpr int kPasses = 16 / kLaneRows;
  __device__ int copy_row(int i) const {
    return 16 * slice + lane / Cfg::kWarpChunks + i * kLaneRows;
  }

  // The page that holds this warp's 16 keys of tile `tile` (-1 past the sequence): pages hold
  // at least 16 tokens and start at multiples of their size, so one page per slice. Looked up an
  // iteration before the copies that need it and kept for the tile's V: a page-table read is an
  // L2 round trip, which in the copy's address would stall the whole iteration behind it.
  __device__ int lookup_page(int tile) const {
    static_assert(kMinPageSize >= 16, "a key slice lies in one page");
    const int token = tile * kTileK + 16 * slice;
    return token < kv_len
               ? __ldg(p.page_table + seq * p.max_pages_per_seq + (token >> p.page_shift))
               : -1;
  }

  // Requests this warp's rows of tile `tile` of K or V into `dst` from the page of its slice;
  // rows past the sequence are zero-filled.
  __device__ void load_tile(std::uint16_t* dst, const void* kv, int tile, int page) const {
    const int chunk = col0 / 8 + lane % Cfg::kWarpChunks;
    const int in_page = (1 << p.page_shift) - 1;
    const std::uint16_t* base =
        static_cast<const std::uint16_t*>(kv) + kv_head * kHeadDim + chunk * 8;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = copy_row(i);
      const int token = tile * kTileK + row;
      const bool valid = page >= 0 && token < kv_len;
      const std::uint16_t* src = base;
      if (valid) {
        const std::int64_t slot =
            (static_cast<std::int64_t>(page) << p.page_shift) + (token & in_page);
        src += slot * p.num_heads_kv * kHeadDim;
      }
      hopper::cp_async_16(dst + row * kHeadDim + swizzle(row, chunk) * 8, src, valid);
    }
  }

  // Row `row`'s index in the [batch, q_len, Hq] rows of q and of the output.
  __device__ std::int64_t head_row(int row) const {
    const std::int64_t token = static_cast<std::int64_t>(seq) * p.q_len + row / p.group;
    return token * p.num_heads_q + kv_head * p.group + row % p.group;
  }

  __device__ void load_q() {
    const int r0 = lane / 4, c0 = 2 * (lane % 4);
    const auto* q = static_cast<const std::uint32_t*>(p.q);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = r0 + 8 * (i % 2), col = 16 * kk + c0 + 8 * (i / 2);
        qa[kk][i] = row < rows ? q[(head_row(row) * kHeadDim + col) / 2] : 0u;
      }
    }
  }

  // S of this warp's 16 keys of one tile, masked (C fragments of two n8 blocks); the first column
  // group publishes the row maxima.
  __device__ void scores(int stage, int tile, int buf, float (&acc)[2][4]) {
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nb][e] = 0.f;
    }
    const std::uint16_t* k = s.k[stage];
    const int mi = lane / 8;
    const int key = 16 * slice + 8 * (mi / 2) + lane % 8;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      std::uint32_t b[4];
      hopper::ldmatrix_x4(b, k + key * kHeadDim + swizzle(key, 2 * kk + mi % 2) * 8);
      hopper::mma_16816<kBf16>(acc[0], qa[kk], b[0], b[1]);
      hopper::mma_16816<kBf16>(acc[1], qa[kk], b[2], b[3]);
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
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = r0 + 8 * i;
      float corr = 1.f, sum = 0.f;
      if (row < rows) {
        const float m_new = m_run[i];
        corr = m_ref[i] == kNegInf ? 0.f : hopper::fast_exp2((m_ref[i] - m_new) * p.scale_log2);
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
      l[i] = l[i] * corr + sum;
#pragma unroll
      for (int nb = 0; nb < Cfg::kCols / 8; ++nb) {
        o[nb][2 * i] *= corr;
        o[nb][2 * i + 1] *= corr;
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
      hopper::ldmatrix_x4_trans(b, v + key * kHeadDim + swizzle(key, chunk) * 8);
      hopper::mma_16816<kBf16>(o[nb], a, b[0], b[1]);
      hopper::mma_16816<kBf16>(o[nb + 1], a, b[2], b[3]);
    }
  }

  // After this thread's cp.async wait: the K rows this warp reads, copied by its lanes (and by the
  // other column group's warp of its slice at head dim 256), are visible.
  __device__ void k_landed() const {
    if constexpr (Cfg::kSharedK) {
      __syncthreads();
    } else {
      __syncwarp();
    }
  }

  // The split's tiles in order. kVote: take the skip vote. Returns the number of tiles skipped.
  // Every iteration commits two cp.async groups (K kAheadK tiles ahead, then this tile's V; either
  // may be empty), so the waits count the same on every path.
  template <bool kVote>
  __device__ int mainloop(float gap) {
    constexpr int kAhead = Cfg::kAheadK;
    // Voting splits after the first start from the sink: tile 0's row maxima seed m_run (not O,
    // l or the tile counts), so that a split's far-field tiles meet the maximum they would meet
    // in one long pass. Its K goes to the stage the loop fills first, K of tile kAhead's.
    const bool seed = kVote && tile_begin > 0 && n_tiles > 0;
    // pg[j]: the page of tile t + j, for this iteration's V (j = 0) and K (j = kAhead).
    int pg[kAhead + 1];
    if (seed) load_tile(s.k[kAhead], p.k_pages, 0, lookup_page(0));
    hopper::cp_async_commit();
#pragma unroll
    for (int j = 0; j <= kAhead; ++j) pg[j] = lookup_page(tile_begin + j);
    // The groups the iterations before the first would have committed: K of tile j, no V.
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      if (j < n_tiles) load_tile(s.k[j], p.k_pages, tile_begin + j, pg[j]);
      hopper::cp_async_commit();
      hopper::cp_async_commit();
    }
    if (seed) {
      float sink[2][4];
      hopper::cp_async_wait<2 * kAhead>();
      k_landed();
      scores(kAhead, 0, 1, sink);
      __syncthreads();
      update_max(gap, 1);
    }
    int skipped = 0;
    constexpr int kBehind = Cfg::kBehindPV;
    unsigned history = 0;       // bit i: the tile visited i iterations ago was skipped
    float held[kBehind][2][4];  // scores of the tiles visited 1 .. kBehind iterations ago
    for (int t = 0; t < n_tiles + kBehind; ++t) {
      // Issued first, used next iteration: the page of tile t + kAhead + 1.
      const int pg_next = lookup_page(tile_begin + t + kAhead + 1);
      if (t + kAhead < n_tiles) {
        load_tile(s.k[(t + kAhead) % Cfg::kStagesK], p.k_pages, tile_begin + t + kAhead,
                  pg[kAhead]);
      }
      hopper::cp_async_commit();
      // K of tile t and V of tile t - kBehind have landed: only the groups of the kBehind - 1
      // iterations since and this iteration's K, committed after them, may not.
      hopper::cp_async_wait<2 * kBehind - 1>();
      k_landed();
      bool skip = false;
      float s0[2][4];
      if (t < n_tiles) {
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
        accumulate(t % Cfg::kStagesV, held[kBehind - 1]);
      }
      // This warp's reads of the V stage (tile t - kBehind's) precede its copies into it.
      __syncwarp();
      if (t < n_tiles && !skip) {
        load_tile(s.v[t % Cfg::kStagesV], p.v_pages, tile_begin + t, pg[0]);
      }
      hopper::cp_async_commit();
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
      for (int j = 0; j < kAhead; ++j) pg[j] = pg[j + 1];
      pg[kAhead] = pg_next;
    }
    return skipped;
  }

  // Sums the key slices' partial outputs and row sums, normalizes, and writes the output (one
  // split) or the split's output and log2-sum-exp.
  __device__ void store(int skipped) {
    hopper::cp_async_wait<0>();
    if (warp == 0 && lane % 4 == 0) {
      s.m_run[lane / 4] = m_run[0];
      s.m_run[lane / 4 + 8] = m_run[1];
    }
    __syncthreads();  // every warp is done with the stages; m_run is published
    auto* red = reinterpret_cast<float*>(s.k);  // [kKeySlices][kMaxGroup][kHeadDim]
    const int r0 = lane / 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float li = l[i];
      li += __shfl_xor_sync(0xffffffff, li, 1);
      li += __shfl_xor_sync(0xffffffff, li, 2);
      if (col0 == 0 && lane % 4 == 0) s.l[slice][r0 + 8 * i] = li;
#pragma unroll
      for (int nb = 0; nb < Cfg::kCols / 8; ++nb) {
        const int col = col0 + 8 * nb + 2 * (lane % 4);
        *reinterpret_cast<float2*>(&red[(slice * kMaxGroup + r0 + 8 * i) * kHeadDim + col]) =
            make_float2(o[nb][2 * i], o[nb][2 * i + 1]);
      }
    }
    __syncthreads();
    const bool split_out = p.num_splits > 1;
    // Thread t of the CTA writes columns 2 (t % (D / 2)) + {0, 1} of rows t / (D / 2) + k R.
    constexpr int kPairs = kHeadDim / 2, kRowStep = kThreads / kPairs;
    const int col = 2 * (tid % kPairs);
    for (int row = tid / kPairs; row < rows; row += kRowStep) {
      float sum = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
      for (int k = 0; k < kKeySlices; ++k) {
        sum += s.l[k][row];
        const float2 part =
            *reinterpret_cast<const float2*>(&red[(k * kMaxGroup + row) * kHeadDim + col]);
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
              sum > 0.f ? s.m_run[row] * p.scale_log2 + __log2f(sum) : kNegInf;
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

  __device__ void run() {
    tid = threadIdx.x;
    warp = tid / 32;
    lane = tid % 32;
    slice = warp % kKeySlices;
    col0 = (warp / kKeySlices) * Cfg::kCols;
    rows = p.q_len * p.group;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = lane / 4 + 8 * i;
      const int last = kv_len - p.q_len + row / p.group;  // this row's token's position
      key_hi[i] = row < rows ? last : -1;
      key_lo[i] = p.window > 0 ? max(0, last - p.window + 1) : 0;
    }
    load_q();
    // The splits cut the tiles from the one holding the first token's first key, as
    // reference_decode.
    const int first_key = p.window > 0 ? max(0, kv_len - p.q_len - p.window + 1) : 0;
    const int first_tile = first_key / kTileK;
    int tile_end;
    split_range((kv_len + kTileK - 1) / kTileK - first_tile, p.num_splits, split, tile_begin,
                tile_end);
    tile_begin += first_tile;
    n_tiles = tile_end + first_tile - tile_begin;
    int skipped = 0;
    if constexpr (kSkip) {
      // lambda = 0 (the guard) runs the dense loop: bit-identical to the dense kernel.
      const float lambda = common::lambda_for(p.threshold, kv_len);
      if (lambda > 0.f) {
        skipped = mainloop<true>(__log2f(lambda) / p.scale_log2);
      } else {
        mainloop<false>(kNegInf);
      }
    } else {
      mainloop<false>(kNegInf);
    }
    store(skipped);
  }
};

template <bool kBf16, int kHeadDim, bool kSkip>
__global__ void __launch_bounds__(Config<kHeadDim>::kThreads)
    decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<kHeadDim>*>(smem_raw);
  DecodeCta<kBf16, kHeadDim, kSkip> cta{p, s};
  cta.split = blockIdx.x;
  cta.kv_head = blockIdx.y;
  cta.seq = blockIdx.z;
  cta.kv_len = p.seq_lens[cta.seq];
  cta.run();
}

// out[b, h, :] = sum over splits of 2^(lse_s - lse) * partial_o_s, lse the log2-sum-exp of all.
// One CTA per (sequence, query head), one thread per column.
template <bool kBf16, int kHeadDim>
__global__ void __launch_bounds__(kHeadDim) combine_kernel(const __grid_constant__ Params p) {
  const std::int64_t head_row = blockIdx.x;
  const float* lse = p.partial_lse + head_row * p.num_splits;
  float m = -__builtin_huge_valf();
  for (int i = 0; i < p.num_splits; ++i) m = fmaxf(m, lse[i]);
  float acc = 0.f, total = 0.f;
  for (int i = 0; i < p.num_splits; ++i) {
    if (lse[i] == -__builtin_huge_valf()) continue;
    const float w = exp2f(lse[i] - m);
    total += w;
    acc += w * p.partial_o[(head_row * p.num_splits + i) * kHeadDim + threadIdx.x];
  }
  // total = 0: no split saw a key (a sequence shorter than q_len): 0, as one split writes.
  const float x = total > 0.f ? acc / total : 0.f;
  auto* out = static_cast<std::uint16_t*>(p.out) + head_row * kHeadDim + threadIdx.x;
  if constexpr (kBf16) {
    *reinterpret_cast<__nv_bfloat16*>(out) = __float2bfloat16_rn(x);
  } else {
    *reinterpret_cast<__half*>(out) = __float2half_rn(x);
  }
}

}  // namespace skipsoftmax::decode
