// The decode kernel's tuned choices in one place: the KV tile and its key slices, the GQA rows,
// the warps per head dim, how far K runs ahead of the vote and P V behind it, the combine
// kernel's shape; and the shared-memory layout they imply.
//
//   head dim | warps (key slices x column groups) | K, V stages | score chains
//         64 |                              4 x 1 |        4, 3 |            2
//        128 |                              4 x 1 |        4, 3 |            2
//        256 |                              4 x 2 |        4, 3 |            1
// with KV tiles of kTileK = 64 keys, up to kMaxGroup = 16 query rows, K kAheadK = 3 tiles ahead
// of the vote and P V kBehindPV = 3 tiles behind it. Config computes each from the head dim.
#pragma once

#include <cstdint>

#include "skipsoftmax/tiling.h"

namespace skipsoftmax::decode {

inline constexpr int kTileK = 64;     // keys per KV tile: the vote unit with the GQA group
inline constexpr int kMaxGroup = 16;  // query heads per KV head: the rows of one m16 MMA
inline constexpr int kKeySlices = 4;  // warps across a tile's keys, 16 keys each
inline constexpr int kSliceKeys = kTileK / kKeySlices;
inline constexpr int kBoxCols = 64;  // columns of a TMA box: 128 bytes, one swizzle row
inline constexpr int kMaxSplits = kMaxDecodeSplits;

template <int kHeadDim>
struct Config {
  static constexpr int kColGroups = kHeadDim > 128 ? 2 : 1;  // O column groups
  static constexpr int kCols = kHeadDim / kColGroups;        // O columns of one warp
  static constexpr int kWarps = kKeySlices * kColGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBoxes = kHeadDim / kBoxCols;   // boxes across a row
  static constexpr int kWarpBoxes = kCols / kBoxCols;  // boxes across a warp's O columns
  // Bytes one slice's K rows (all columns) and one warp's V rows (its columns) bring.
  static constexpr std::uint32_t kSliceKBytes = kSliceKeys * kHeadDim * 2;
  static constexpr std::uint32_t kWarpVBytes = kSliceKeys * kCols * 2;
  // K runs three tiles ahead of the vote, P V three tiles behind it. V of tile t is requested
  // after the vote, into the stage P V of tile t - 3 has just read, and read three tiles later: a
  // run of skipped tiles goes fast, and the V of a kept tile among them needs that long to arrive
  // (two tiles behind: 1.44x at 75% of the tiles skipped, 64 x 32k; four ahead and two behind:
  // skip 2-5% slower). 4 + 3 stages of 16 KB (head dim 128) leave room for two CTAs per
  // multiprocessor; 32 KB at head dim 256, one CTA. Completion per stage (an mbarrier each) lets
  // K run ahead of a V still in flight.
  static constexpr int kAheadK = 3;
  static constexpr int kBehindPV = 3;
  static constexpr int kStagesK = kAheadK + 1;
  static constexpr int kStagesV = kBehindPV;
  // Independent chains of MMAs per n8 block in scores(), summed at the end (see there); head dim
  // 256, at 255 registers, would spill with two.
  static constexpr int kScoreChains = kHeadDim <= 128 ? 2 : 1;
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
  float warp_max[2][kKeySlices][kMaxGroup];          // double-buffered by tile parity
  std::uint64_t k_full[Cfg::kStagesK][kKeySlices];   // a slice's K rows landed
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
// epilogue at head dim 128, ~1 us at 256.
template <int kHeadDim>
inline constexpr int kRedStride = kHeadDim + 8;
static_assert(sizeof(float) * kKeySlices * kMaxGroup * kRedStride<256> <=
                  sizeof(SharedStorage<256>::k),
              "the partial outputs fit the K stages");
static_assert(sizeof(Epilogue) <= sizeof(SharedStorage<64>::v), "the epilogue fits the V stages");
static_assert(2 * (sizeof(SharedStorage<128>) + 1024) <= 228 * 1024,
              "two CTAs of head dim 128 per multiprocessor");
static_assert(sizeof(SharedStorage<256>) <= 227 * 1024, "one CTA of head dim 256");

// The combine kernel's CTA: one per (sequence, query head), kCombineThreads threads.
inline constexpr int kCombineThreads = 256;
// Partial outputs a combine thread requests with the lses, before the weights are known: one
// round trip to the L2 after the decode grid ends, not two (4 covers up to 32 splits at head dim
// 128; more would hold registers a decode CTA beside it may need).
inline constexpr int kCombineAhead = 4;

// Element offset of 16-byte chunk `chunk` of row `row` in a tile (the layout of SharedStorage).
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk / 8) * (kTileK * kBoxCols) + row * kBoxCols + ((chunk % 8) ^ (row % 8)) * 8;
}

}  // namespace skipsoftmax::decode
