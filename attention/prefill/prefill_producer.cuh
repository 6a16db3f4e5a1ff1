// The prefill kernel's producer warpgroup: TMA copies of Q once and of the K and V tiles into
// their shared-memory stages, in the tile order of CtaWork, and in voting CTAs the V bookkeeping
// of the tiles that the consumers skip.
#pragma once

#include <cstdint>

#include "../hopper/ptx.cuh"
#include "prefill_params.h"
#include "prefill_tile_order.cuh"
#include "prefill_traits.cuh"

namespace skipsoftmax::prefill {

// One KV tile into a stage: a box per 64 columns, and with paged KV a box per page (pages of 16
// to 64 keys) or per tile (pages of kBlockN keys or more). Boxes of a tile that start past the
// sequence's end load its last valid box again: those keys are masked and those V rows zeroed,
// and no page-table entry past the sequence is read.
template <int kHeadDim>
__device__ __forceinline__ void load_kv_tile(const Params& p, const CtaWork& w,
                                             const CUtensorMap* map, std::uint16_t* dst,
                                             std::uint64_t* bar, int pos) {
  using Cfg = TileConfig<kHeadDim>;
  using hopper::tma_load_3d;
  const int tile = w.tile_at(pos);
  if (p.page_table == nullptr) {
    for (int b = 0; b < Cfg::kDBoxes; ++b) {
      tma_load_3d(dst + b * Cfg::kBlockN * Cfg::kBoxCols, map, bar, b * Cfg::kBoxCols, w.kv_head,
                  w.kv_start + tile * Cfg::kBlockN);
    }
    return;
  }
  const int* pages = p.page_table + blockIdx.z * p.max_pages_per_seq;
  const int page_size = 1 << p.page_shift;
  const int box = min(page_size, Cfg::kBlockN);
  const int last_box = (w.kv_len - 1) / box * box;
  for (int c = 0; c < Cfg::kBlockN; c += box) {
    const int token = min(tile * Cfg::kBlockN + c, last_box);
    const int row = (pages[token >> p.page_shift] << p.page_shift) + (token & (page_size - 1));
    for (int b = 0; b < Cfg::kDBoxes; ++b) {
      tma_load_3d(dst + (b * Cfg::kBlockN + c) * Cfg::kBoxCols, map, bar, b * Cfg::kBoxCols,
                  w.kv_head, row);
    }
  }
}

// The producer warpgroup has two threads: one copies Q and the K tiles, the other the V tiles
// (produce_v), so that a K copy never waits for a V stage; in voting CTAs it waits only until the
// V thread has read the verdicts of the position 8 back (the ring's slot).
template <int kHeadDim>
__device__ __forceinline__ void produce_k(const Params& p, const CtaWork& w,
                                          SharedStorage<kHeadDim>& s) {
  using Cfg = TileConfig<kHeadDim>;
  using namespace hopper;
  mbar_arrive_expect_tx(&s.full_q, Cfg::kBlockM * kHeadDim * 2);
  for (int b = 0; b < Cfg::kDBoxes; ++b) {
    tma_load_3d(s.q + b * Cfg::kBlockM * Cfg::kBoxCols, &p.tma_q, &s.full_q, b * Cfg::kBoxCols,
                w.head, w.q_start + w.m_block * Cfg::kBlockM);
  }
  constexpr int kRing = Cfg::kPositionRing;
  for (int pos = 0; pos < w.n_tiles; ++pos) {
    const int stage = pos % Cfg::kStagesK;
    // A consumer publishes its verdict on a tile once the tile's K has landed: K of position t
    // waits until the V thread has read the verdicts of t - ring, whose slot t reuses.
    if (w.voting && pos >= kRing) mbar_wait(&s.slot_free[pos % kRing], ((pos / kRing) - 1) & 1);
    mbar_wait(&s.empty_k[stage], ((pos / Cfg::kStagesK) & 1) ^ 1);
    mbar_arrive_expect_tx(&s.full_k[stage], Cfg::kKvTileBytes);
    load_kv_tile<kHeadDim>(p, w, &p.tma_k, s.k[stage], &s.full_k[stage], pos);
  }
}

// In a voting CTA a warpgroup that skips a tile never touches its V: this thread reads every
// warpgroup's verdict on every tile, loads its V only if a warpgroup keeps it, and releases its
// stage on behalf of the warpgroups that skipped it. Measured on the H200, dropping the V of tiles
// that every warpgroup skips was 4-8% faster at 92-99% of the tiles skipped, within 1% at 48-73%,
// and 6% slower when nothing is skipped. One thread serves every tile of the CTA, so its step is
// kept short: a step of about 110 instructions and three mbarrier waits kept it busy for 80% of a
// voting CTA's life at 98.6% skipped and held the K thread on its verdict slots (Nsight Compute).
// A stage whose last tile someone kept is reused once that warpgroup has freed it after its P V,
// which waited for the copy to land; a stage whose last tile nobody kept held no copy and was
// freed by this thread's own arrivals, so it needs no wait at all.
template <int kHeadDim>
__device__ __forceinline__ void produce_v(const Params& p, const CtaWork& w,
                                          SharedStorage<kHeadDim>& s) {
  using Cfg = TileConfig<kHeadDim>;
  using namespace hopper;
  constexpr unsigned kRing = Cfg::kPositionRing;
  constexpr unsigned kStages = Cfg::kStagesV;
  constexpr int kG = Cfg::kConsumers;
  constexpr unsigned kAll = (1u << kG) - 1;
  static_assert(kG * kStages < 32, "the keepers of the last kStages positions fit a word");
  // Bit g set when warpgroup g keeps position q: read from q's verdict slot, which is then free.
  const auto read_keepers = [&](unsigned q) {
    const unsigned slot = q % kRing;
    mbar_wait(&s.voted[slot], (q / kRing) & 1);
    unsigned bits = 0;
#pragma unroll
    for (int g = 0; g < kG; ++g) bits |= s.verdict[slot][g] ? 0u : 1u << g;
    mbar_arrive(&s.slot_free[slot]);
    return bits;
  };
  // Keepers of positions pos - 1, pos - 2, ...: kG bits each, the latest lowest.
  unsigned history = 0;
  const unsigned n = max(w.n_tiles, 0);  // none outside the contract (causal kv_len < q_len)
  for (unsigned pos = 0; pos < n; ++pos) {
    const unsigned stage = pos % kStages;
    if (pos >= kStages) {
      unsigned kept = kAll;  // keepers of pos - kStages, the stage's last tile
      if (w.voting) {
        kept = history >> (kG * (kStages - 1)) & kAll;
        const int skippers = kG - __popc(kept);
        if (skippers > 0) mbar_arrive(&s.empty_v[stage], 4 * skippers);  // four warps each
      }
      if (kept != 0) mbar_wait(&s.empty_v[stage], ((pos / kStages) & 1) ^ 1);
    }
    std::uint64_t* ready = &s.v_ready[pos % kRing];
    const unsigned keep = w.voting ? read_keepers(pos) : kAll;
    if (keep != 0) {
      mbar_arrive_expect_tx(ready, Cfg::kKvTileBytes);
      load_kv_tile<kHeadDim>(p, w, &p.tma_v, s.v[stage], ready, pos);
    } else {
      mbar_arrive(ready);
    }
    history = history << kG | keep;
  }
}

}  // namespace skipsoftmax::prefill
