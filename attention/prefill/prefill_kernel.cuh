// The Hopper prefill kernel: FlashAttention with warp specialization, and its skip-softmax twin.
//
// One CTA computes a tile of kBlockM query rows of one query head. Warpgroup 0 is the producer:
// one thread streams Q once and K/V tiles through multi-stage shared-memory pipelines with TMA,
// each stage guarded by a full and an empty mbarrier. The other warpgroups are consumers, 64 query
// rows each (two; three at head dim 64): S = Q K^T and O += P V run on the tensor cores with wgmma
// (S from shared memory, P from registers), and the next tile's Q K^T is issued before this tile's
// P V so that the softmax of one overlaps the matrix products of the other.
//
// Skip variant (kSkip): after each S tile every consumer warpgroup votes. The tile is skipped when
// rowmax(S) - max(m_run, rowmax(S)) < ln(lambda) / scale (raw scores; the same test as the
// reference's in scaled units) holds for all 64 rows of the warpgroup; a row that sees no key of
// the tile votes skip. A skipped tile runs no exponentials and no P V. The vote unit is therefore
// 64 query rows x kBlockN keys: the CPU reference with tile_q = 64 and tile_k = kBlockN emulates
// it exactly, its visit orders included (CtaWork::tile_at mirrors kv_tile_at of tiling.h).
//
// This file is the kernel's entry: it composes the parts, each in the file of its role.
//   prefill_traits.cuh          every tuned choice per head dim; the shared-memory layout
//   prefill_tile_order.cuh      a CTA's query tile and the order of its KV tiles
//   prefill_producer.cuh        the producer warpgroup: TMA copies of Q, K and V
//   prefill_consumer.cuh        a consumer warpgroup's state, matrix products and V stages
//   prefill_softmax.cuh         mask, row maxima, online softmax and rescale of O
//   prefill_mainloop_dense.cuh  the dense main loop
//   prefill_mainloop_vote.cuh   the voting main loops (skip kernels)
//   prefill_epilogue.cuh        normalization and store of O
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../hopper/ptx.cuh"
#include "prefill_consumer.cuh"
#include "prefill_epilogue.cuh"
#include "prefill_mainloop_dense.cuh"
#include "prefill_mainloop_vote.cuh"
#include "prefill_params.h"
#include "prefill_producer.cuh"
#include "prefill_softmax.cuh"
#include "prefill_tile_order.cuh"
#include "prefill_traits.cuh"

namespace skipsoftmax::prefill {

// Forced inline: when the inliner leaves it a call, ptxas serializes every wgmma of the kernel
// (C7520, a compiler-inserted warpgroup.arrive on the call path); today's kernels inline it
// anyway (the same SASS), larger loops did not.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ void Consumer<kBf16, kHeadDim, kCausal, kSkip>::run() {
  const int warp = tid / 32, lane = tid % 32;
  row0 = row_base() + warp * 16 + lane / 4;
  wg_row_end = min(row_base() + Cfg::kRowsPerWarpgroup, w.q_len);
  set_loop_constants();
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
  hopper::mbar_wait(&s.full_q, 0);

  // A sequence guarded to lambda = 0 runs the very loop of the dense kernel: bit-identical
  // output, and no cost for the vote it does not take.
  int skipped = 0;
  if (kSkip && w.voting) {
    if constexpr (Cfg::kConsumers == 2) {
      skipped = vote_loop();
    } else {
      skipped = vote_loop_single();
    }
  } else {
    mainloop();
    // The last warpgroup handed warpgroup 0 one turn more than it took (the first): take it
    // back, so that every arrival on a turn barrier meets its sync.
    if (wg == 0) hopper::named_barrier_sync(Cfg::turn_barrier(0), 256);
  }

  if constexpr (kSkip) {
    if (p.stats != nullptr && tid == 0) {
      const int visited = n_visible;
      if (visited > 0) {
        const int seq = blockIdx.z;
        atomicAdd(&p.stats[2 * seq], static_cast<unsigned long long>(visited));
        atomicAdd(&p.stats[2 * seq + 1], static_cast<unsigned long long>(skipped));
      }
    }
  }
  store_output();
}

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__global__ void __launch_bounds__(TileConfig<kHeadDim>::kThreads, 1)
    prefill_kernel(const __grid_constant__ Params p) {
  using Cfg = TileConfig<kHeadDim>;
  using namespace hopper;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<kHeadDim>*>(smem_raw);

  CtaWork w;
  if (!find_work<kHeadDim, kCausal, kSkip>(p, w)) return;

  // Read through a shuffle so that the compiler knows it is uniform across the warp: wgmma must
  // not sit in what ptxas considers divergent code.
  const int warpgroup = __shfl_sync(0xffffffff, static_cast<int>(threadIdx.x / 128), 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&p.tma_q);
    tma_prefetch_descriptor(&p.tma_k);
    tma_prefetch_descriptor(&p.tma_v);
    mbar_init(&s.full_q, 1);
    for (int i = 0; i < Cfg::kStagesK; ++i) {
      mbar_init(&s.full_k[i], 1);
      mbar_init(&s.empty_k[i], Cfg::kConsumerWarps);
    }
    for (int i = 0; i < Cfg::kStagesV; ++i) mbar_init(&s.empty_v[i], Cfg::kConsumerWarps);
    for (int i = 0; i < Cfg::kPositionRing; ++i) {
      mbar_init(&s.v_ready[i], 1);
      mbar_init(&s.voted[i], Cfg::kConsumers);  // one per warpgroup
      mbar_init(&s.slot_free[i], 1);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    reg_dealloc<Cfg::kProducerRegisters>();
    if (threadIdx.x == 0) produce_k<kHeadDim>(p, w, s);
    if (threadIdx.x == 32) produce_v<kHeadDim>(p, w, s);
  } else {
    reg_alloc<Cfg::kConsumerRegisters>();
    Consumer<kBf16, kHeadDim, kCausal, kSkip> c{p, w, s};
    c.wg = warpgroup - 1;
    c.tid = threadIdx.x % 128;
    // Warpgroup 0 issues first: give it the turn the last one would have handed over.
    // Voting CTAs do not take turns (measured with two warpgroups: 1.5-3% faster without).
    if (c.wg == Cfg::kConsumers - 1 && !(kSkip && w.voting)) {
      named_barrier_arrive(Cfg::turn_barrier(0), 256);
    }
    c.run();
  }
}

}  // namespace skipsoftmax::prefill
