// The prefill kernel's voting main loops (skip kernels, lambda > 0): after each Q K^T every
// consumer warpgroup votes on the tile, publishes its verdict for the V thread, and runs the
// softmax and P V only of the tiles it keeps. vote_loop holds two score tiles (two consumer
// warpgroups), vote_loop_single one (three).
#pragma once

#include "../hopper/ptx.cuh"
#include "prefill_consumer.cuh"

namespace skipsoftmax::prefill {

// The skip vote of the whole warpgroup (kSkip only), in raw score units: the row gap times the
// softmax scale is compared with ln(lambda), i.e. the raw gap with log2(lambda) / scale_log2.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline bool Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote_skip(
    const float (&mx)[2]) const {
  bool votes = true;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    votes &= mx[i] == kNegInf || mx[i] - fmaxf(m[i], mx[i]) < w.skip_gap;
  }
  // The warp vote tells the compiler what bar.red already guarantees, that the verdict is
  // uniform, and lands it in a uniform predicate (a shuffle took longer: 1.5-4% at 8k-32k).
  return __all_sync(0xffffffff, hopper::named_barrier_and(kVoteBarrier + wg, 128, votes));
}

// The voting loop (skip kernels, lambda > 0). Two score tiles take turns (cur / next, the loop
// unrolled by two): while this warpgroup votes on one tile, the next tile's Q K^T is in flight.
// A skipped tile's scores are dead once voted on, so its registers at once receive the Q K^T of
// the tile after next: along a run of skipped tiles two Q K^T are in flight, and a skipped tile
// costs little more than its share of the tensor cores. A kept tile's P V is issued once the
// next scores have landed and is waited for in its step (P, O and two score tiles would not fit
// in 240 registers), while the vote on the next tile runs; the tile after next is issued after
// it. Each vote is published for the V thread; a skipped tile's V is never waited for. The
// warpgroups do not take turns here: with pingpong the loop ran 1.5-3% slower (the dense loop
// keeps it, about 1% faster). Returns the number of visible tiles skipped.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline int Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote_loop() {
  using namespace hopper;
  float sa[kN / 2], sb[kN / 2];
  int skipped = 0;
  const int n = w.n_tiles;
  if (n <= 0) return 0;  // only outside the contract (causal kv_len < q_len): no K comes
  // The verdict on the tile a step begins with: its row maxima and whether it is skipped.
  float mx[2];
  bool skip;
  issue_qk_at(sa, 0);
  if (n == 1) {
    land_qk<0>(sa, 0);
    skip = vote(sa, 0, mx);
    return vote_step<false, false>(sa, sb, 0, mx, skip);
  }
  issue_qk_at(sb, 1);
  land_qk<1>(sa, 0);
  skip = vote(sa, 0, mx);
  // Whether a step has a next tile, and whether it issues the one after, are compile-time
  // choices: a data-dependent one merges two definitions of the score registers, and the copies
  // that reconcile them make ptxas serialize every wgmma of the kernel (C7515).
  int pos = 0;
  for (; pos + 3 < n; pos += 2) {
    skipped += vote_step<true, true>(sa, sb, pos, mx, skip);
    skipped += vote_step<true, true>(sb, sa, pos + 1, mx, skip);
  }
  if (pos + 3 == n) {
    skipped += vote_step<true, true>(sa, sb, pos, mx, skip);
    skipped += vote_step<true, false>(sb, sa, pos + 1, mx, skip);
    skipped += vote_step<false, false>(sa, sb, pos + 2, mx, skip);
  } else {
    skipped += vote_step<true, false>(sa, sb, pos, mx, skip);
    skipped += vote_step<false, false>(sb, sa, pos + 1, mx, skip);
  }
  return skipped;
}

// Q K^T of the tile at position `pos` into sc, once its K has landed.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::issue_qk_at(
    float (&sc)[kN / 2], int pos) {
  const int stage = pos % Cfg::kStagesK;
  hopper::mbar_wait(&s.full_k[stage], (pos / Cfg::kStagesK) & 1);
  issue_qk(sc, stage);
}

// Waits until at most kPending products are in flight, the oldest of which filled sc with the
// scores of position `pos`, and releases that K stage.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <int kPending>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::land_qk(
    float (&sc)[kN / 2], int pos) {
  hopper::wgmma_wait<kPending>();
  release_k(sc, pos);
}
// land_qk<0> kept behind the computation of `dep` (a kept tile's row sums), so that the kept
// tile's softmax runs while that Q K^T is in flight: a plain wait was hoisted above it.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::land_qk_behind(
    float (&sc)[kN / 2], int pos, float dep) {
  hopper::wgmma_wait_behind<0>(dep);
  release_k(sc, pos);
}
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::release_k(
    float (&sc)[kN / 2], int pos) {
  hopper::fence_registers(sc);
  release(&s.empty_k[pos % Cfg::kStagesK]);
}

// The vote on the tile at position `pos`, whose raw scores are in sc; leaves the row maxima of a
// kept tile in mx and publishes the verdict for the V thread (the slot is free: see produce_k).
// With kVoteOwnColumns each thread votes on the maxima of its own columns: a row votes skip when
// its maximum lies below the bound, which holds exactly when it does for every quarter of the
// row (the rule is monotone in the maximum), so the warpgroup's verdict is the same, and only a
// kept tile pays for the quad's shuffles, which its softmax needs.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ bool Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote(float (&sc)[kN / 2],
                                                                                int pos,
                                                                                float (&mx)[2]) {
  constexpr bool kQuad = !Cfg::kVoteOwnColumns;
  row_max<kQuad>(sc, w.tile_at(pos), mx);
  const bool skip = vote_skip(mx);
  if (!kQuad && !skip) {
#pragma unroll
    for (int i = 0; i < 2; ++i) mx[i] = quad_max(mx[i]);
  }
  if (tid == 0) {
    const int slot = pos % Cfg::kPositionRing;
    s.verdict[slot][wg] = skip;
    hopper::mbar_arrive(&s.voted[slot]);
  }
  return skip;
}

// One tile of the voting loop: `cur` holds its raw scores, and mx and skip the verdict on it;
// kNext: the next tile's Q K^T is in flight into `next`, and the step leaves the verdict on the
// next tile in mx and skip; kIssue: `cur` then receives the Q K^T of the tile after next.
// Returns 1 when the tile is visible to this warpgroup and skipped.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <bool kNext, bool kIssue>
__device__ __forceinline__ int Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote_step(
    float (&cur)[kN / 2], float (&next)[kN / 2], int pos, float (&mx)[2], bool& skip) {
  static_assert(kNext || !kIssue, "the tile after next is issued only behind the next one");
  using namespace hopper;
  const int tile = w.tile_at(pos);
  const int skipped = skip && tile_visible(tile) ? 1 : 0;
  if (skip) {
    // The V thread releases the V stage of a skipped tile for this warpgroup.
    if constexpr (kIssue) issue_qk_at(cur, pos + 2);
    if constexpr (kNext) {
      land_qk<kIssue ? 1 : 0>(next, pos + 1);
      skip = vote(next, pos + 1, mx);
    }
  } else {
    float corr[2];
    const bool moved = moves_max(mx);
    softmax(cur, mx, corr);
    convert_p(cur);
    // The next scores must land before O is rescaled: ptxas serializes wgmma when registers of
    // a product issued in the same pipeline stage are written while another one is in flight.
    if constexpr (kNext) {
      if constexpr (Cfg::kKeptSoftmaxOverlap) {
        land_qk_behind(next, pos + 1, l[0] + l[1]);
      } else {
        land_qk<0>(next, pos + 1);
      }
    }
    if (moved) rescale_o(corr);
    start_pv(pos, tile);
    // The vote on the next tile runs while this P V occupies the tensor cores. It compares with
    // the running maximum this tile has just moved, as a vote after the P V would.
    if constexpr (kNext) skip = vote(next, pos + 1, mx);
    end_pv(pos);
    if constexpr (kIssue) issue_qk_at(cur, pos + 2);
  }
  return skipped;
}

// The voting loop of three-warpgroup CTAs (head dim 64), whose 160 registers hold O, P and one
// score tile: a tile's Q K^T is issued once the previous tile's scores are dead. On a skipped
// tile that is at once, and the step waits for it; on a kept tile it is after its P has been
// converted, before its P V, and the vote on it runs while that P V occupies the tensor cores.
// The other two warpgroups' products fill the tensor cores while one waits. Each vote is
// published for the V thread as in vote_loop. Returns the number of visible tiles skipped.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline int Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote_loop_single() {
  float sc[kN / 2];
  const int n = w.n_tiles;
  if (n <= 0) return 0;  // only outside the contract (causal kv_len < q_len): no K comes
  float mx[2];
  issue_qk_at(sc, 0);
  land_qk<0>(sc, 0);
  bool skip = vote(sc, 0, mx);
  int skipped = 0;
  // Whether a step has a next tile is a compile-time choice (see vote_loop).
  for (int pos = 0; pos + 1 < n; ++pos) skipped += vote_step_single<true>(sc, pos, mx, skip);
  return skipped + vote_step_single<false>(sc, n - 1, mx, skip);
}

// One tile of vote_loop_single: sc holds its raw scores, mx and skip the verdict on it; kNext:
// the step leaves the next tile's scores in sc and the verdict on them in mx and skip.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <bool kNext>
__device__ __forceinline__ int Consumer<kBf16, kHeadDim, kCausal, kSkip>::vote_step_single(
    float (&sc)[kN / 2], int pos, float (&mx)[2], bool& skip) {
  const int tile = w.tile_at(pos);
  const int skipped = skip && tile_visible(tile) ? 1 : 0;
  if (skip) {
    if constexpr (kNext) {
      issue_qk_at(sc, pos + 1);
      land_qk<0>(sc, pos + 1);
      skip = vote(sc, pos + 1, mx);
    }
  } else {
    float corr[2];
    const bool moved = moves_max(mx);
    softmax(sc, mx, corr);
    if (moved) rescale_o(corr);
    convert_p(sc);
    if constexpr (kNext) issue_qk_at(sc, pos + 1);
    start_pv(pos, tile);
    if constexpr (kNext) {
      land_qk<1>(sc, pos + 1);
      skip = vote(sc, pos + 1, mx);
    }
    end_pv(pos);
  }
  return skipped;
}

}  // namespace skipsoftmax::prefill
