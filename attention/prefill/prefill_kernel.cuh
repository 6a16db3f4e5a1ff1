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
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../hopper/ptx.cuh"
#include "prefill_params.h"

namespace skipsoftmax::prefill {

// Consumer warpgroups of a CTA. At head dim 64 a score tile carries half the tensor work of head
// dim 128 and the same softmax, and with two warpgroups the tensor cores sat idle half the time
// (Nsight Compute, run 76: 49% busy, the warps stalled mostly on fixed-latency dependencies), so
// CTAs of head dim 64 run three, as FlashAttention-3 does at this head dim. Three warpgroups get
// 160 registers a thread: their voting loop holds one score tile (vote_loop_single) where that of
// two holds two.
constexpr int consumer_warpgroups(int head_dim) { return head_dim == 64 ? 3 : 2; }

template <int kHeadDim>
struct TileConfig {
  static constexpr int kConsumers = consumer_warpgroups(kHeadDim);
  static constexpr int kRowsPerWarpgroup = 64;                    // the vote unit's rows
  static constexpr int kBlockM = kRowsPerWarpgroup * kConsumers;  // query rows per CTA
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;      // keys per KV tile
#ifndef SKIPSOFTMAX_K_STAGES
#define SKIPSOFTMAX_K_STAGES 3
#endif
  // K runs a stage deeper than V: the next Q K^T must never wait, while V is read a whole
  // softmax later. 32 + 3 x 32 + 2 x 32 KB for head dim 128; 64 + 3 x 32 + 2 x 32 KB for 256.
  static constexpr int kStagesK = SKIPSOFTMAX_K_STAGES;
  static constexpr int kStagesV = 2;
  // Rings indexed by KV position: the V copies' full barriers and the verdict slots. In a voting
  // CTA a consumer waits only for the V of tiles it keeps, so it may run several tiles ahead of
  // the V copies; a ring this deep keeps its parity waits unambiguous (produce_k bounds the lead).
  static constexpr int kPositionRing = 8;
  // Whether a kept tile's softmax overlaps the next Q K^T in the voting loop (land_qk_behind).
  // Measured on the H200 (docs/PERFORMANCE.md, run 55): at head dim 256 it made ptxas spill in the
  // dense main loop of the same kernel (the guard 2.3% slower, the voting loop 1-2%), at head dim
  // 64 (then with two warpgroups) it gained nothing at 54-75% and cost 2-4% below; head dim 256
  // waits before the softmax, and head dim 64's loop of three warpgroups holds one score tile.
  static constexpr bool kKeptSoftmaxOverlap = kHeadDim == 128;
  // Whether the mask compares 8 j + e (an immediate) with its bounds less 2 (lane % 4) rather than
  // each column index (a register) with the bounds. Measured on the H200 (docs/PERFORMANCE.md, runs
  // 131-132): at head dim 64 its kernels stop spilling (44-140 bytes before) and dense runs 4% and
  // the guard 6-7% faster; at head dim 128 ptxas reorders the guard's softmax and the guard runs
  // 1.8% slower, so head dims 128 and 256 keep the column in a register.
  static constexpr bool kMaskImmediates = kHeadDim == 64;
  // Whether the voting loop votes on each thread's own row maxima (its quarter of each row) and
  // runs the quad's shuffles only for a kept tile's softmax: the same verdicts, fewer steps before
  // each one. Measured on the H200 (docs/PERFORMANCE.md, runs 142-143 and 145): at head dim 128
  // skip calls 0.7-0.9% faster at 73% of the tiles skipped and 1.3-1.7% at 92% (0.5% slower at
  // 48%); at head dim 256, whose 64-key tiles give each thread 16 scores a row, 8% faster at 76%
  // and 12-13% at 94-99%; at head dim 64, whose loop holds one score tile, 1-3.6% slower.
  static constexpr bool kVoteOwnColumns = kHeadDim >= 128;
  static constexpr int kBoxCols = 64;  // 16-bit elements per 128-byte swizzled row
  static constexpr int kDBoxes = kHeadDim / kBoxCols;
  static constexpr std::uint32_t kKvTileBytes = kBlockN * kHeadDim * 2;  // one K or V tile
  static constexpr int kThreads = 128 * (1 + kConsumers);  // the producer and the consumers
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

#ifndef SKIPSOFTMAX_PINGPONG
#define SKIPSOFTMAX_PINGPONG 1
#endif
// The consumer warpgroups take turns at issuing their matrix products, so that one's softmax runs
// while the others' products occupy the tensor cores.
inline constexpr bool kPingPong = SKIPSOFTMAX_PINGPONG;

#ifndef SKIPSOFTMAX_PREFILL_DROP_V
#define SKIPSOFTMAX_PREFILL_DROP_V 1
#endif
// Voting CTAs: the V thread waits for every warpgroup's verdict on a tile and loads its V only if
// a warpgroup keeps it (0: every V is loaded). Measured on the H200 (docs/PERFORMANCE.md): 4-8%
// faster at 92-99% of the tiles skipped, within 1% at 48-73%, 6% slower when nothing is skipped.
inline constexpr bool kDropSkippedV = SKIPSOFTMAX_PREFILL_DROP_V;
// The voting loop holds the next tile's K while it waits for the one after: with one K stage
// that is a cycle (tests/protocol/prefill_pipeline_model.py finds it).
static_assert(TileConfig<128>::kStagesK >= 2 && TileConfig<256>::kStagesK >= 2,
              "the voting loop needs at least 2 K stages");

// Named barrier ids: 0 is __syncthreads. Per consumer warpgroup g: kVoteBarrier + g for its vote,
// and turn_barrier(g) of TileConfig for its turn at issuing matrix products.
inline constexpr int kVoteBarrier = 1;

using common::lambda_for;

// Where one CTA's work lies: its query rows, its KV tiles, and the sequence they belong to.
struct CtaWork {
  int head, kv_head;
  int q_start, q_len, kv_start, kv_len;
  int m_block;
  int first_tile;  // the first KV tile of the CTA's range (past the sliding window's left edge)
  int n_tiles;     // KV tiles the CTA visits, in the order of tile_at
  float skip_gap;  // raw-score gap below which a row votes skip: log2(lambda) / scale_log2
  bool voting;     // skip kernel and lambda > 0 for this sequence
  // The visit order (kv_tile_at of tiling.h) as a multiply-add, computed once: per tile it cost
  // instructions the consumers' loops are short of.
  int order_first, order_base, order_step;

  // The KV tile visited at `position` (0 <= position < n_tiles).
  __device__ int tile_at(int position) const {
    return position == 0 ? order_first : order_base + order_step * position;
  }
};

template <int kHeadDim, bool kCausal, bool kSkip>
__device__ __forceinline__ bool find_work(const Params& p, CtaWork& w) {
  using Cfg = TileConfig<kHeadDim>;
  const int seq = blockIdx.z;
  w.head = blockIdx.y;
  w.kv_head = w.head / (p.num_heads_q / p.num_heads_kv);
  // Causal tiles at the end of a sequence are the longest: launch them first.
  w.m_block = p.num_m_blocks - 1 - static_cast<int>(blockIdx.x);
  w.q_start = p.cu_seqlens_q[seq];
  w.q_len = p.cu_seqlens_q[seq + 1] - w.q_start;
  w.kv_start = p.cu_seqlens_k[seq];
  w.kv_len = p.cu_seqlens_k[seq + 1] - w.kv_start;
  if (w.m_block * Cfg::kBlockM >= w.q_len) return false;
  const int q_end = min((w.m_block + 1) * Cfg::kBlockM, w.q_len);
  const int keys = kCausal ? w.kv_len - w.q_len + q_end : w.kv_len;
  // The same range as prefill_kv_tile_range of tiling.h.
  w.first_tile = 0;
  if (kCausal && p.window > 0) {
    const int first_key = w.kv_len - w.q_len + w.m_block * Cfg::kBlockM - p.window + 1;
    w.first_tile = first_key > 0 ? first_key / Cfg::kBlockN : 0;
  }
  w.n_tiles = (keys + Cfg::kBlockN - 1) / Cfg::kBlockN - w.first_tile;
  w.order_first = w.order_base = w.first_tile;
  w.order_step = 1;       // forward
  if (p.kv_order == 1) {  // reverse: the diagonal first
    w.order_first += w.n_tiles - 1;
    w.order_base += w.n_tiles - 1;
    w.order_step = -1;
  } else if (p.kv_order == 2) {  // sink, then the diagonal backwards
    w.order_base += w.n_tiles;
    w.order_step = -1;
  }
  w.skip_gap = -__builtin_huge_valf();
  w.voting = false;
  if constexpr (kSkip) {
    // lambda = 0 (the guard) never skips: such a sequence runs the dense main loop.
    const float lambda = lambda_for(p.threshold, w.kv_len);
    w.voting = lambda > 0.f;
    if (w.voting) w.skip_gap = __log2f(lambda) / p.scale_log2;
  }
  return true;
}

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
// warpgroup's verdict on every tile, loads its V only if a warpgroup keeps it (kDropSkippedV),
// and releases its stage on behalf of the warpgroups that skipped it. One thread serves every
// tile of the CTA, so its step is kept short: a step of about 110 instructions and three mbarrier
// waits kept it busy for 80% of a voting CTA's life at 98.6% skipped and held the K thread on its
// verdict slots (Nsight Compute, run 164). A stage whose last tile someone kept is reused once
// that warpgroup has freed it after its P V, which waited for the copy to land; a stage whose
// last tile nobody kept held no copy (kDropSkippedV) and was freed by this thread's own
// arrivals, so it needs no wait at all.
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
        kept = kDropSkippedV ? history >> (kG * (kStages - 1)) & kAll : read_keepers(pos - kStages);
        const int skippers = kG - __popc(kept);
        if (skippers > 0) mbar_arrive(&s.empty_v[stage], 4 * skippers);  // four warps each
      }
      if (kept != 0) {
        mbar_wait(&s.empty_v[stage], ((pos / kStages) & 1) ^ 1);
      } else if (!kDropSkippedV) {  // a copy that no consumer waited for
        const unsigned prev = pos - kStages;
        mbar_wait(&s.v_ready[prev % kRing], (prev / kRing) & 1);
      }
    }
    std::uint64_t* ready = &s.v_ready[pos % kRing];
    const unsigned keep = w.voting && kDropSkippedV ? read_keepers(pos) : kAll;
    if (keep != 0) {
      mbar_arrive_expect_tx(ready, Cfg::kKvTileBytes);
      load_kv_tile<kHeadDim>(p, w, &p.tma_v, s.v[stage], ready, pos);
    } else {
      mbar_arrive(ready);
    }
    history = history << kG | keep;
  }
}

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

  // Masks S (raw scores) where needed and returns this thread's two raw row maxima (kQuad: of the
  // whole rows, over the quad of threads sharing them; else of this thread's columns). The softmax
  // scale is folded into the exponent later (one FFMA per score). kMasked is a template argument:
  // as a runtime flag every tile ran the mask's compares (about a third more instructions a tile).
  template <bool kMasked, bool kQuad = true>
  __device__ void mask_and_max(float (&sc)[kN / 2], int tile, float (&mx)[2]) const {
    const int lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      const int last_key =
          row >= w.q_len ? -1 : (kCausal ? w.kv_len - w.q_len + row : w.kv_len - 1);
      const int limit = min(last_key, w.kv_len - 1) - tile * kN;  // last visible column
      // First visible column under a sliding window (causal only).
      const int first = kCausal && p.window > 0 ? last_key - p.window + 1 - tile * kN : 0;
      // Column 8 j + 2 (lane % 4) + e; with kMaskImmediates the 2 (lane % 4) moves to the bounds.
      const int lane_col = 2 * (lane % 4);
      const int hi = Cfg::kMaskImmediates ? limit - lane_col : limit;
      const int lo = Cfg::kMaskImmediates ? first - lane_col : first;
      float r = kNegInf;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[4 * j + 2 * i + e];
          const int col = 8 * j + e + (Cfg::kMaskImmediates ? 0 : lane_col);
          if (kMasked && (col > hi || col < lo)) x = kNegInf;
          r = fmaxf(r, x);
        }
      }
      if constexpr (kQuad) r = quad_max(r);
      mx[i] = r;
    }
  }

  __device__ static float quad_max(float r) {
    r = fmaxf(r, __shfl_xor_sync(0xffffffff, r, 1));
    return fmaxf(r, __shfl_xor_sync(0xffffffff, r, 2));
  }

  template <bool kQuad = true>
  __device__ void row_max(float (&sc)[kN / 2], int tile, float (&mx)[2]) const {
    if (tile_needs_mask(tile)) {
      mask_and_max<true, kQuad>(sc, tile, mx);
    } else {
      mask_and_max<false, kQuad>(sc, tile, mx);
    }
  }

  // The skip vote of the whole warpgroup (kSkip only), in raw score units: the row gap times the
  // softmax scale is compared with ln(lambda), i.e. the raw gap with log2(lambda) / scale_log2.
  __device__ bool vote_skip(const float (&mx)[2]) const {
    bool votes = true;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      votes &= mx[i] == kNegInf || mx[i] - fmaxf(m[i], mx[i]) < w.skip_gap;
    }
    // The warp vote tells the compiler what bar.red already guarantees, that the verdict is
    // uniform, and lands it in a uniform predicate (a shuffle took longer: 1.5-4% at 8k-32k).
    return __all_sync(0xffffffff, hopper::named_barrier_and(kVoteBarrier + wg, 128, votes));
  }

  // Whether a tile with row maxima mx moves the running maximum of some row of the warp. Where
  // none moves, softmax's factors are all exp2(0) = 1 and the rescale of O may be left out
  // (bit-identical), as it mostly is in the voting loop once the sink and the diagonal are seen.
  __device__ bool moves_max(const float (&mx)[2]) const {
    return __any_sync(0xffffffff, mx[0] > m[0] || mx[1] > m[1]);
  }

  // exp2 of the tile, the running sums, and the factor that rescales O. Leaves P in sc.
  __device__ void softmax(float (&sc)[kN / 2], const float (&mx)[2], float (&corr)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float m_new = fmaxf(m[i], mx[i]);
      // A row that has seen nothing yet keeps m = -inf; exponentiate against 0 instead.
      const float m_scaled = m_new == kNegInf ? 0.f : m_new * p.scale_log2;
      corr[i] = hopper::fast_exp2(m[i] * p.scale_log2 - m_scaled);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[4 * j + 2 * i + e];
          x = hopper::fast_exp2(fmaf(x, p.scale_log2, -m_scaled));
          sum += x;
        }
      }
      l[i] = l[i] * corr[i] + sum;
      m[i] = m_new;
    }
  }

  __device__ void rescale_o(const float (&corr)[2]) {
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      o[4 * j + 0] *= corr[0];
      o[4 * j + 1] *= corr[0];
      o[4 * j + 2] *= corr[1];
      o[4 * j + 3] *= corr[1];
    }
  }

  // The accumulator layout of S equals wgmma's A-fragment layout per 16 keys.
  __device__ void convert_p(const float (&sc)[kN / 2]) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      pa[kk][0] = hopper::pack_half2<kBf16>(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = hopper::pack_half2<kBf16>(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = hopper::pack_half2<kBf16>(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = hopper::pack_half2<kBf16>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
  }

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

  // Forced inline: when the inliner leaves it a call, ptxas serializes every wgmma of the kernel
  // (C7520, a compiler-inserted warpgroup.arrive on the call path); today's kernels inline it
  // anyway (the same SASS), larger loops did not.
  __device__ __forceinline__ void run() {
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
      if (kPingPong && wg == 0) hopper::named_barrier_sync(Cfg::turn_barrier(0), 256);
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

  // KV tiles that some row of this warpgroup sees: the tiles the reference visits for this query
  // tile (tile_q = 64).
  __device__ int visible_tiles() const {
    if (wg_row_end <= row_base()) return 0;
    const int keys = kCausal ? w.kv_len - w.q_len + wg_row_end : w.kv_len;
    return min(w.n_tiles, (keys + kN - 1) / kN);
  }

  // The dense loop. Each tile's Q K^T is issued with the previous tile's P V, so that the softmax
  // of one overlaps the matrix products of the other. The first tile is peeled off (it has no
  // P V to issue): a data-dependent P V made ptxas commit a dummy product and wait for both.
  __device__ void mainloop() {
    using namespace hopper;
    if (w.n_tiles <= 0) return;  // only outside the contract (causal kv_len < q_len): no K comes
    float sc[kN / 2];
    dense_step<true>(sc, 0);
    for (int pos = 1; pos < w.n_tiles; ++pos) dense_step<false>(sc, pos);
    const int last = w.n_tiles - 1;
    finish_pv(last, w.tile_at(last));
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

  // One tile of the dense loop: Q K^T of tile `pos` and (kFirst: none) P V of tile pos - 1, whose
  // P waits in pa. Leaves this tile's P in pa.
  template <bool kFirst>
  __device__ __forceinline__ void dense_step(float (&sc)[kN / 2], int pos) {
    using namespace hopper;
    const int k_stage = pos % Cfg::kStagesK;
    const int prev_stage = (pos + Cfg::kStagesV - 1) % Cfg::kStagesV;
    const int tile = w.tile_at(pos);

    mbar_wait(&s.full_k[k_stage], (pos / Cfg::kStagesK) & 1);
    if (kPingPong) named_barrier_sync(Cfg::turn_barrier(wg), 256);
    issue_qk(sc, k_stage);
    if constexpr (!kFirst) {
      wait_v(pos - 1);
      zero_v_tail(prev_stage, w.tile_at(pos - 1));
      issue_pv(prev_stage);
      wgmma_commit();
    }
    if (kPingPong) named_barrier_arrive(Cfg::turn_barrier(Cfg::next_turn(wg)), 256);
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
  __device__ int vote_loop() {
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
  __device__ __forceinline__ void issue_qk_at(float (&sc)[kN / 2], int pos) {
    const int stage = pos % Cfg::kStagesK;
    hopper::mbar_wait(&s.full_k[stage], (pos / Cfg::kStagesK) & 1);
    issue_qk(sc, stage);
  }

  // Waits until at most kPending products are in flight, the oldest of which filled sc with the
  // scores of position `pos`, and releases that K stage.
  template <int kPending>
  __device__ __forceinline__ void land_qk(float (&sc)[kN / 2], int pos) {
    hopper::wgmma_wait<kPending>();
    release_k(sc, pos);
  }
  // land_qk<0> kept behind the computation of `dep` (a kept tile's row sums), so that the kept
  // tile's softmax runs while that Q K^T is in flight: a plain wait was hoisted above it.
  __device__ __forceinline__ void land_qk_behind(float (&sc)[kN / 2], int pos, float dep) {
    hopper::wgmma_wait_behind<0>(dep);
    release_k(sc, pos);
  }
  __device__ __forceinline__ void release_k(float (&sc)[kN / 2], int pos) {
    hopper::fence_registers(sc);
    release(&s.empty_k[pos % Cfg::kStagesK]);
  }

  // The vote on the tile at position `pos`, whose raw scores are in sc; leaves the row maxima of a
  // kept tile in mx and publishes the verdict for the V thread (the slot is free: see produce_k).
  // With kVoteOwnColumns each thread votes on the maxima of its own columns: a row votes skip when
  // its maximum lies below the bound, which holds exactly when it does for every quarter of the
  // row (the rule is monotone in the maximum), so the warpgroup's verdict is the same, and only a
  // kept tile pays for the quad's shuffles, which its softmax needs.
  __device__ __forceinline__ bool vote(float (&sc)[kN / 2], int pos, float (&mx)[2]) {
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
  template <bool kNext, bool kIssue>
  __device__ __forceinline__ int vote_step(float (&cur)[kN / 2], float (&next)[kN / 2], int pos,
                                           float (&mx)[2], bool& skip) {
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
  __device__ int vote_loop_single() {
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
  template <bool kNext>
  __device__ __forceinline__ int vote_step_single(float (&sc)[kN / 2], int pos, float (&mx)[2],
                                                  bool& skip) {
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

  __device__ void store_output() {
    const int lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = l[i];
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      sum += __shfl_xor_sync(0xffffffff, sum, 2);
      const float inv = 1.f / sum;
      const int row = row0 + 8 * i;
      if (row >= w.q_len) continue;
      auto* out =
          reinterpret_cast<std::uint32_t*>(p.out) +
          ((static_cast<std::int64_t>(w.q_start + row) * p.num_heads_q + w.head) * kHeadDim) / 2;
#pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        out[4 * j + lane % 4] =
            hopper::pack_half2<kBf16>(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
      }
    }
  }
};

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
    if (kPingPong && c.wg == Cfg::kConsumers - 1 && !(kSkip && w.voting)) {
      named_barrier_arrive(Cfg::turn_barrier(0), 256);
    }
    c.run();
  }
}

}  // namespace skipsoftmax::prefill
