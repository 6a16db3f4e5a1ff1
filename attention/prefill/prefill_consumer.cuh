// The prefill kernel's consumer warpgroups: the per-thread state of one warpgroup (its O
// accumulator, running maxima and sums, P fragments), its matrix products, its masks and its V
// stage bookkeeping. The steps that use them are defined by role in the files named below, and
// prefill_kernel.cuh composes them in Consumer::run.
#pragma once

#include <cstdint>

#include "../hopper/ptx.cuh"
#include "prefill_params.h"
#include "prefill_tile_order.cuh"
#include "prefill_traits.cuh"

namespace skipsoftmax::prefill {

// The consumer's per-thread view of a 64-row accumulator: rows r0 and r0 + 8 of the warpgroup's
// slice, columns 8 j + 2 (lane % 4) + {0, 1}: element [4 j + 2 i + e] is (row r0 + 8 i, column
// 8 j + 2 (lane % 4) + e).
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
struct Consumer {
  using Cfg = TileConfig<kHeadDim>;
  static constexpr int kN = Cfg::kBlockN;
  static constexpr float kNegInf = -__builtin_huge_valf();

  const Params& p;
  const CtaWork& w;
  SharedStorage<kHeadDim>& s;
  int wg;          // consumer warpgroup 0 .. kConsumers - 1
  int tid;         // thread in the warpgroup
  int row0;        // first of this thread's two rows, relative to the sequence's query start
  int wg_row_end;  // one past the last query row of this warpgroup that exists

  float o[kHeadDim / 2];
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.f, 0.f};
  std::uint32_t pa[kN / 16][4];  // P as wgmma A fragments, one group per 16 keys

  // Descriptors of the k-th 16-wide step of each operand: a base descriptor plus a byte offset
  // (in 16-byte units in the low bits). Q and K are K-major: a step of 16 elements moves 32 bytes
  // inside a 128-byte row, and every 4 steps the next column block. V is MN-major: 16 keys are 16
  // rows of 128 bytes, and its column blocks of 64 lie kN rows apart (the leading byte offset).
  __host__ __device__ static constexpr std::uint32_t q_step(int kk) {
    return ((kk / 4) * Cfg::kBlockM * 128 + (kk % 4) * 32) >> 4;
  }
  __host__ __device__ static constexpr std::uint32_t k_step(int kk) {
    return ((kk / 4) * kN * 128 + (kk % 4) * 32) >> 4;
  }
  __host__ __device__ static constexpr std::uint32_t v_step(int kk) { return (kk * 16 * 128) >> 4; }

  __device__ void issue_qk(float (&sc)[kN / 2], int stage) {
    const std::uint64_t dq =
        hopper::make_smem_desc(s.q + wg * Cfg::kRowsPerWarpgroup * Cfg::kBoxCols, 16, 1024);
    const std::uint64_t dk = hopper::make_smem_desc(s.k[stage], 16, 1024);
    // The first product overwrites sc and does not read it (no register fence on sc before it
    // either), so that the old scores need not stay alive until the next tile's Q K^T is issued.
    hopper::wgmma_fence();
    hopper::Wgmma<kBf16, kN>::ss_first(sc, dq + q_step(0), dk + k_step(0));
#pragma unroll
    for (int kk = 1; kk < kHeadDim / 16; ++kk) {
      hopper::Wgmma<kBf16, kN>::ss(sc, dq + q_step(kk), dk + k_step(kk), 1);
    }
    hopper::wgmma_commit();
    hopper::fence_registers(sc);
  }

  __device__ void issue_pv(int stage) {
    const std::uint64_t dv = hopper::make_smem_desc(s.v[stage], kN * 128, 1024);
    hopper::fence_registers(o);
    hopper::fence_registers(pa);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
      hopper::Wgmma<kBf16, kHeadDim>::rs(o, pa[kk], dv + v_step(kk));
    hopper::fence_registers(o);
    hopper::fence_registers(pa);
  }

  // Per-warpgroup constants of the main loops, set once in run(): per tile they cost instructions
  // the loops are short of.
  int clear_lo = 0, clear_hi = 0;  // the tiles [clear_lo, clear_hi) need no mask
  int n_visible = 0;               // visible_tiles()

  __device__ void set_loop_constants() {
    // A tile needs a mask when it reaches past the sequence ((t + 1) kN > kv_len), when some row
    // of the warpgroup lies past the query chunk, past the causal diagonal of the first row
    // ((t + 1) kN - 1 > kv_len - q_len + row_base) or before the window of the last row
    // (t kN < kv_len - q_len + row_end - window).
    const int row_end = row_base() + Cfg::kRowsPerWarpgroup;
    if (row_end <= w.q_len) {
      clear_hi = w.kv_len / kN;
      if (kCausal) clear_hi = min(clear_hi, (w.kv_len - w.q_len + row_base() + 1) / kN);
      if (kCausal && p.window > 0) {
        const int first_clear_key = w.kv_len - w.q_len + row_end - p.window;
        clear_lo = first_clear_key > 0 ? (first_clear_key + kN - 1) / kN : 0;
      }
    }
    n_visible = visible_tiles();
  }

  // Does some row of this warpgroup see a key of the tile (causal: bottom-right aligned)?
  __device__ bool tile_visible(int tile) const { return tile < n_visible; }
  __device__ int row_base() const { return w.m_block * Cfg::kBlockM + wg * Cfg::kRowsPerWarpgroup; }
  // Does any element of this tile need masking for this warpgroup?
  __device__ bool tile_needs_mask(int tile) const { return tile < clear_lo || tile >= clear_hi; }

  // Rows of a partial last tile beyond the sequence may hold anything (the next sequence, or
  // NaN-poisoned memory); P is 0 there, but 0 * NaN is NaN, so zero those V rows before P V.
  // Every consumer warpgroup that keeps the tile writes the same zeros, each fencing and syncing
  // its own writes; another's P V may already read them, which sees the same bytes.
  __device__ void zero_v_tail(int stage, int tile) {
    const int valid = w.kv_len - tile * kN;
    if (valid >= kN) return;
    constexpr int kChunks = kN * Cfg::kDBoxes * 8;  // 16-byte chunks: rows x boxes x 8
    uint4* base = reinterpret_cast<uint4*>(s.v[stage]);
    for (int c = tid; c < kChunks; c += 128) {
      const int row = (c / 8) % kN;  // chunk c lies in box c / (8 kN), row (c / 8) % kN
      if (row >= valid) base[c] = make_uint4(0, 0, 0, 0);
    }
    hopper::fence_proxy_async();
    hopper::named_barrier_sync(kVoteBarrier + wg, 128);
  }

  __device__ void release(std::uint64_t* bar) {
    if (tid % 32 == 0) hopper::mbar_arrive(bar);
  }

  // Waits until the V of position `pos` has landed in its stage.
  __device__ void wait_v(int pos) {
    constexpr int kRing = Cfg::kPositionRing;
    hopper::mbar_wait(&s.v_ready[pos % kRing], (pos / kRing) & 1);
  }

  // KV tiles that some row of this warpgroup sees: the tiles the reference visits for this query
  // tile (tile_q = 64).
  __device__ int visible_tiles() const {
    if (wg_row_end <= row_base()) return 0;
    const int keys = kCausal ? w.kv_len - w.q_len + wg_row_end : w.kv_len;
    return min(w.n_tiles, (keys + kN - 1) / kN);
  }

  // P V of the tile at position `pos`, whose P waits in pa: issued once its V landed, waited for,
  // and its V stage released.
  __device__ __forceinline__ void finish_pv(int pos, int tile) {
    start_pv(pos, tile);
    end_pv(pos);
  }
  __device__ __forceinline__ void start_pv(int pos, int tile) {
    using namespace hopper;
    const int stage = pos % Cfg::kStagesV;
    wait_v(pos);
    zero_v_tail(stage, tile);
    issue_pv(stage);
    wgmma_commit();
  }
  __device__ __forceinline__ void end_pv(int pos) {
    using namespace hopper;
    wgmma_wait<0>();
    fence_registers(o);
    fence_registers(pa);
    release(&s.empty_v[pos % Cfg::kStagesV]);
  }

  // The softmax and rescale step (prefill_softmax.cuh).
  template <bool kMasked, bool kQuad = true>
  __device__ void mask_and_max(float (&sc)[kN / 2], int tile, float (&mx)[2]) const;
  __device__ static float quad_max(float r);
  template <bool kQuad = true>
  __device__ void row_max(float (&sc)[kN / 2], int tile, float (&mx)[2]) const;
  __device__ bool moves_max(const float (&mx)[2]) const;
  __device__ void softmax(float (&sc)[kN / 2], const float (&mx)[2], float (&corr)[2]);
  __device__ void rescale_o(const float (&corr)[2]);
  __device__ void convert_p(const float (&sc)[kN / 2]);

  // The dense main loop (prefill_mainloop_dense.cuh).
  __device__ void mainloop();
  template <bool kFirst>
  __device__ __forceinline__ void dense_step(float (&sc)[kN / 2], int pos);

  // The voting main loops (prefill_mainloop_vote.cuh).
  __device__ bool vote_skip(const float (&mx)[2]) const;
  __device__ int vote_loop();
  __device__ __forceinline__ void issue_qk_at(float (&sc)[kN / 2], int pos);
  template <int kPending>
  __device__ __forceinline__ void land_qk(float (&sc)[kN / 2], int pos);
  __device__ __forceinline__ void land_qk_behind(float (&sc)[kN / 2], int pos, float dep);
  __device__ __forceinline__ void release_k(float (&sc)[kN / 2], int pos);
  __device__ __forceinline__ bool vote(float (&sc)[kN / 2], int pos, float (&mx)[2]);
  template <bool kNext, bool kIssue>
  __device__ __forceinline__ int vote_step(float (&cur)[kN / 2], float (&next)[kN / 2], int pos,
                                           float (&mx)[2], bool& skip);
  __device__ int vote_loop_single();
  template <bool kNext>
  __device__ __forceinline__ int vote_step_single(float (&sc)[kN / 2], int pos, float (&mx)[2],
                                                  bool& skip);

  // The epilogue (prefill_epilogue.cuh).
  __device__ void store_output();

  // One consumer warpgroup's work from Q to the output (prefill_kernel.cuh).
  __device__ __forceinline__ void run();
};

}  // namespace skipsoftmax::prefill
