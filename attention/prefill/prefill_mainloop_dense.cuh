// The prefill kernel's dense main loop: every KV tile's Q K^T, softmax and P V, with the next
// tile's Q K^T issued beside this tile's P V and the consumer warpgroups taking turns. Dense
// kernels, and skip kernels on sequences whose lambda is 0 (the guard), run it.
#pragma once

#include "../hopper/ptx.cuh"
#include "prefill_consumer.cuh"

namespace skipsoftmax::prefill {

// The dense loop. Each tile's Q K^T is issued with the previous tile's P V, so that the softmax
// of one overlaps the matrix products of the other. The first tile is peeled off (it has no
// P V to issue): a data-dependent P V made ptxas commit a dummy product and wait for both.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::mainloop() {
  using namespace hopper;
  if (w.n_tiles <= 0) return;  // only outside the contract (causal kv_len < q_len): no K comes
  float sc[kN / 2];
  dense_step<true>(sc, 0);
  for (int pos = 1; pos < w.n_tiles; ++pos) dense_step<false>(sc, pos);
  const int last = w.n_tiles - 1;
  finish_pv(last, w.tile_at(last));
}

// One tile of the dense loop: Q K^T of tile `pos` and (kFirst: none) P V of tile pos - 1, whose
// P waits in pa. Leaves this tile's P in pa.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <bool kFirst>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::dense_step(
    float (&sc)[kN / 2], int pos) {
  using namespace hopper;
  const int k_stage = pos % Cfg::kStagesK;
  const int prev_stage = (pos + Cfg::kStagesV - 1) % Cfg::kStagesV;
  const int tile = w.tile_at(pos);

  mbar_wait(&s.full_k[k_stage], (pos / Cfg::kStagesK) & 1);
  named_barrier_sync(Cfg::turn_barrier(wg), 256);
  issue_qk(sc, k_stage);
  if constexpr (!kFirst) {
    wait_v(pos - 1);
    zero_v_tail(prev_stage, w.tile_at(pos - 1));
    issue_pv(prev_stage);
    wgmma_commit();
  }
  named_barrier_arrive(Cfg::turn_barrier(Cfg::next_turn(wg)), 256);
  wgmma_wait<kFirst ? 0 : 1>();
  fence_registers(sc);
  release(&s.empty_k[k_stage]);

  float mx[2];
  row_max(sc, tile, mx);
  float corr[2];
  softmax(sc, mx, corr);

  if constexpr (!kFirst) {
    // The previous P V must finish before O is rescaled and pa is overwritten.
    wgmma_wait<0>();
    fence_registers(o);
    fence_registers(pa);
    release(&s.empty_v[prev_stage]);
  }
  rescale_o(corr);
  convert_p(sc);
}

}  // namespace skipsoftmax::prefill
