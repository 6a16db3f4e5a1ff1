// The prefill kernel's tuned choices per head dim, in one place: the CTA's warpgroups and tiles,
// the pipeline depths, the register split, and the code-shape choices measured per head dim; and
// the shared-memory layout they imply.
//
//   head dim | consumers | kBlockM x kBlockN | K, V stages | registers | choices
//         64 |         3 |         192 x 128 |        3, 2 |   24, 160 | mask immediates
//        128 |         2 |         128 x 128 |        3, 2 |   24, 240 | overlap, own-column vote
//        256 |         2 |         128 x  64 |        3, 2 |   24, 240 | own-column vote
// (consumers: consumer warpgroups; registers: producer's, consumers'; overlap:
// kKeptSoftmaxOverlap; mask immediates: kMaskImmediates; own-column vote: kVoteOwnColumns).
// TileConfig computes each from the head dim.
#pragma once

#include <cstdint>

namespace skipsoftmax::prefill {

// Consumer warpgroups of a CTA. At head dim 64 a score tile carries half the tensor work of head
// dim 128 and the same softmax, and with two warpgroups the tensor cores sat idle half the time
// (Nsight Compute: 49% busy, the warps stalled mostly on fixed-latency dependencies), so CTAs of
// head dim 64 run three, as FlashAttention-3 does at this head dim. Three warpgroups get 160
// registers a thread: their voting loop holds one score tile (vote_loop_single) where that of two
// holds two.
constexpr int consumer_warpgroups(int head_dim) { return head_dim == 64 ? 3 : 2; }

template <int kHeadDim>
struct TileConfig {
  static constexpr int kConsumers = consumer_warpgroups(kHeadDim);
  static constexpr int kRowsPerWarpgroup = 64;                    // the vote unit's rows
  static constexpr int kBlockM = kRowsPerWarpgroup * kConsumers;  // query rows per CTA
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;      // keys per KV tile
  // K runs a stage deeper than V: the next Q K^T must never wait, while V is read a whole
  // softmax later. 32 + 3 x 32 + 2 x 32 KB for head dim 128; 64 + 3 x 32 + 2 x 32 KB for 256.
  static constexpr int kStagesK = 3;
  static constexpr int kStagesV = 2;
  // Rings indexed by KV position: the V copies' full barriers and the verdict slots. In a voting
  // CTA a consumer waits only for the V of tiles it keeps, so it may run several tiles ahead of
  // the V copies; a ring this deep keeps its parity waits unambiguous (produce_k bounds the lead).
  static constexpr int kPositionRing = 8;
  // Whether a kept tile's softmax overlaps the next Q K^T in the voting loop (land_qk_behind).
  // Measured on the H200: at head dim 256 it made ptxas spill in the dense main loop of the same
  // kernel (the guard 2.3% slower, the voting loop 1-2%), at head dim 64 (then with two
  // warpgroups) it gained nothing at 54-75% and cost 2-4% below; head dim 256 waits before the
  // softmax, and head dim 64's loop of three warpgroups holds one score tile.
  static constexpr bool kKeptSoftmaxOverlap = kHeadDim == 128;
  // Whether the mask compares 8 j + e (an immediate) with its bounds less 2 (lane % 4) rather than
  // each column index (a register) with the bounds. Measured on the H200: at head dim 64 its
  // kernels stop spilling (44-140 bytes before) and dense runs 4% and the guard 6-7% faster; at
  // head dim 128 ptxas reorders the guard's softmax and the guard runs 1.8% slower, so head dims
  // 128 and 256 keep the column in a register.
  static constexpr bool kMaskImmediates = kHeadDim == 64;
  // Whether the voting loop votes on each thread's own row maxima (its quarter of each row) and
  // runs the quad's shuffles only for a kept tile's softmax: the same verdicts, fewer steps before
  // each one. Measured on the H200: at head dim 128 skip calls 0.7-0.9% faster at 73% of the tiles
  // skipped and 1.3-1.7% at 92% (0.5% slower at 48%); at head dim 256, whose 64-key tiles give
  // each thread 16 scores a row, 8% faster at 76% and 12-13% at 94-99%; at head dim 64, whose
  // loop holds one score tile, 1-3.6% slower.
  static constexpr bool kVoteOwnColumns = kHeadDim >= 128;
  static constexpr int kBoxCols = 64;  // 16-bit elements per 128-byte swizzled row
  static constexpr int kDBoxes = kHeadDim / kBoxCols;
  static constexpr std::uint32_t kKvTileBytes = kBlockN * kHeadDim * 2;  // one K or V tile
  static constexpr int kThreads = 128 * (1 + kConsumers);  // the producer and the consumers
  // In the dense loop the consumer warpgroups take turns at issuing their matrix products
  // (pingpong), so that one's softmax runs while the others' products occupy the tensor cores.
  // Named barrier of warpgroup g's turn (after the vote barriers 1 .. kConsumers), and the
  // warpgroup whose turn follows g's (1 - g for two: the form head dims 128 and 256 were measured
  // with; the modulo compiles to other SASS).
  __host__ __device__ static constexpr int turn_barrier(int g) { return 1 + kConsumers + g; }
  __host__ __device__ static constexpr int next_turn(int g) {
    return kConsumers == 2 ? 1 - g : (g + 1) % kConsumers;
  }
  static constexpr int kConsumerWarps = 4 * kConsumers;  // arrivals that free a K or V stage
  // setmaxnreg moves registers between the warpgroups within what the CTA got at launch (65536 /
  // threads, rounded down to 8: 168 a thread with two consumers, 128 with three); a consumer's
  // allocation waits until the producer's release covers it, so asking for more than that pool
  // hangs every CTA.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;
  static_assert(128 * kProducerRegisters + 128 * kConsumers * kConsumerRegisters <=
                    kThreads * (65536 / kThreads / 8 * 8),
                "the warpgroups' registers exceed the CTA's launch allocation");
};

template <int kHeadDim>
struct alignas(1024) SharedStorage {
  using Cfg = TileConfig<kHeadDim>;
  // Each operand is kDBoxes column blocks of [rows][64] 16-bit elements, 128-byte swizzled.
  std::uint16_t q[Cfg::kBlockM * kHeadDim];
  std::uint16_t k[Cfg::kStagesK][Cfg::kBlockN * kHeadDim];
  std::uint16_t v[Cfg::kStagesV][Cfg::kBlockN * kHeadDim];
  std::uint64_t full_q;
  std::uint64_t full_k[Cfg::kStagesK];
  std::uint64_t empty_k[Cfg::kStagesK];
  std::uint64_t v_ready[Cfg::kPositionRing];  // V of position t landed (or was dropped): t % ring
  std::uint64_t empty_v[Cfg::kStagesV];
  // Voting CTAs: every warpgroup's verdict on position t in slot t % ring, read once by the V
  // thread, which then frees the slot.
  std::uint64_t voted[Cfg::kPositionRing];
  std::uint64_t slot_free[Cfg::kPositionRing];
  int verdict[Cfg::kPositionRing][Cfg::kConsumers];
};
static_assert(sizeof(SharedStorage<256>) <= 227 * 1024, "shared memory of an H100/H200 SM");

// The voting loop holds the next tile's K while it waits for the one after: with one K stage
// that is a cycle (tests/protocol/prefill_pipeline_model.py finds it).
static_assert(TileConfig<128>::kStagesK >= 2 && TileConfig<256>::kStagesK >= 2,
              "the voting loop needs at least 2 K stages");

// Named barrier ids: 0 is __syncthreads. Per consumer warpgroup g: kVoteBarrier + g for its vote,
// and turn_barrier(g) of TileConfig for its turn at issuing matrix products.
inline constexpr int kVoteBarrier = 1;

}  // namespace skipsoftmax::prefill
