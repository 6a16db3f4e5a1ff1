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
//
// This file is the kernel's entry: it composes the parts, each in the file of its role.
//   decode_params.h      the launch parameters
//   decode_traits.cuh    every tuned choice (tiles, warps, stages); the shared-memory layout
//   decode_cta.cuh       a CTA's state, its split's KV range and the load of Q
//   decode_producer.cuh  each warp's K and V copies and waits
//   decode_mainloop.cuh  scores, running maximum and vote, P V, and the loop over the tiles
//   decode_epilogue.cuh  the key slices' sum and the store of the output or of a split's part
//   decode_combine.cuh   the split-KV combine kernel
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../common/device_threshold.h"
#include "../hopper/mma_sync.cuh"
#include "decode_cta.cuh"
#include "decode_epilogue.cuh"
#include "decode_mainloop.cuh"
#include "decode_params.h"
#include "decode_producer.cuh"
#include "decode_traits.cuh"

namespace skipsoftmax::decode {

template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::run() {
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
  // was 0.5-0.7 us of a CTA's ~2 us before its first copy; skip calls at batch 1-2 ran up to
  // 2.4% faster). The rows are read before the lambda lookup and the barrier, which run while
  // they are in flight (with the barrier first, ptxas placed them after it in the skip kernel);
  // then K is requested, the sink's first.
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
  const float lambda = kSkip ? common::lambda_for(p.threshold, seq, kv_len) : 0.f;
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

}  // namespace skipsoftmax::decode
