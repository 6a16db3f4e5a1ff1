// The paged decode kernel: one new query token per sequence, every query head of a GQA group in
// one CTA, so that each K/V byte is read once. Its skip-softmax twin stops reading V.
//
// A CTA (128 threads, 4 warps) owns one (sequence, KV head, split) and walks the split's KV tiles
// of kTileK = 64 keys in order. The group's g <= 16 query rows are the M = 16 rows of
// mma.sync.m16n8k16 (rows past g are zero and never vote). Per tile t:
//   1. K of tile t + kStagesK - 1 is requested (cp.async, zero-filled past the sequence);
//   2. S_t = Q K_t^T, each warp 16 keys; scores past the sequence are -inf; S_t is kept in shared
//      memory for the P V that runs kLookahead tiles later;
//   3. skip kernel: the vote. Tile t is skipped when every row r < g has
//      rowmax_t(r) - max(m_run(r), rowmax_t(r)) < ln(lambda) (raw scores: log2(lambda) / scale_log2);
//   4. V of tile t is requested only if the tile is kept: a skipped tile's V is never read;
//   5. P V of tile t - kLookahead, whose V has had kLookahead tiles of time to arrive.
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

namespace skipsoftmax::decode {

inline constexpr int kTileK = 64;     // keys per KV tile: the vote unit with the GQA group
inline constexpr int kMaxGroup = 16;  // query heads per KV head: the rows of one m16 MMA
inline constexpr int kThreads = 128;
inline constexpr int kWarps = kThreads / 32;

struct Params {
  const void* q;          // [batch, Hq, D]
  void* out;              // [batch, Hq, D]
  const void* k_pages;    // [num_pages, page_size, Hkv, D]
  const void* v_pages;    // [num_pages, page_size, Hkv, D]
  const int* page_table;  // [batch, max_pages_per_seq]
  const int* seq_lens;    // [batch]
  int max_pages_per_seq;
  int page_shift;  // log2(page_size)
  int num_heads_q, num_heads_kv, group;
  int num_splits;
  float scale_log2;  // softmax scale * log2(e)
  common::DeviceThreshold threshold;
  // num_splits > 1: each split's output normalized by its own sum, and its log2-sum-exp.
  float* partial_o;    // [batch, Hq, num_splits, D]
  float* partial_lse;  // [batch, Hq, num_splits]
  unsigned long long* stats;  // [batch][2] tiles visited, skipped; null: none
};

template <int kHeadDim>
struct Config {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per key row
  static constexpr int kStagesK = 3;            // K requested two tiles ahead
  static constexpr int kLookahead = 2;          // P V runs two tiles behind the vote
  static constexpr int kStagesV = kLookahead + 1;
  static constexpr int kColsPerWarp = kHeadDim / kWarps;  // O columns of one warp
};

template <int kHeadDim>
struct alignas(128) SharedStorage {
  using Cfg = Config<kHeadDim>;
  // Tiles are [kTileK][kHeadDim] with the 16-byte chunk c of row r at c ^ (r % 8): ldmatrix
  // reads 8 rows of one chunk column without bank conflicts.
  std::uint16_t k[Cfg::kStagesK][kTileK * kHeadDim];
  std::uint16_t v[Cfg::kStagesV][kTileK * kHeadDim];
  // Raw scores of the tiles awaiting P V; rows padded by 4 floats against bank conflicts.
  float s[Cfg::kStagesV][kMaxGroup][kTileK + 4];
  std::uint16_t p[kMaxGroup * kTileK];        // P of one tile, swizzled like the tiles
  float warp_max[kWarps][kMaxGroup];
  float m_run[kMaxGroup];  // running maximum over the split's tiles so far (raw scores)
  float m_ref[kMaxGroup];  // the maximum O and l are relative to
  float l[kMaxGroup];
  float corr[kMaxGroup];  // O's rescale factor for the current P V
};

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

  const Params& p;
  SharedStorage<kHeadDim>& s;
  int seq, kv_head, split, kv_len, tile_begin, n_tiles;
  int tid, warp, lane;
  std::uint32_t qa[kHeadDim / 16][4];         // Q as A fragments, one group per 16 dims
  float o[Cfg::kColsPerWarp / 8][4] = {};     // this warp's O columns, C-fragment layout

  __device__ const std::uint16_t* kv_row(const void* pages, int token) const {
    const int page = __ldg(p.page_table + seq * p.max_pages_per_seq + (token >> p.page_shift));
    const std::int64_t slot =
        (static_cast<std::int64_t>(page) << p.page_shift) + (token & ((1 << p.page_shift) - 1));
    return static_cast<const std::uint16_t*>(pages) +
           (slot * p.num_heads_kv + kv_head) * kHeadDim;
  }

  // Requests tile `tile` of K or V into `dst`; rows past the sequence are zero-filled. The page
  // lookups all come first: a cp.async is a compiler memory barrier, and lookups interleaved with
  // the copies would run one L2 round trip after another.
  __device__ void load_tile(std::uint16_t* dst, const void* pages, int tile) const {
    constexpr int kRowsPerPass = kThreads / Cfg::kChunks;
    constexpr int kPasses = kTileK / kRowsPerPass;
    const int chunk = tid % Cfg::kChunks, row0 = tid / Cfg::kChunks;
    const std::uint16_t* src[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int token = tile * kTileK + row0 + i * kRowsPerPass;
      src[i] = token < kv_len ? kv_row(pages, token) + chunk * 8
                              : static_cast<const std::uint16_t*>(pages);
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = row0 + i * kRowsPerPass;
      hopper::cp_async_16(dst + row * kHeadDim + swizzle(row, chunk) * 8, src[i],
                          tile * kTileK + row < kv_len);
    }
  }

  __device__ void load_q() {
    const int r0 = lane / 4, c0 = 2 * (lane % 4);
    const auto* q = static_cast<const std::uint32_t*>(p.q);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = r0 + 8 * (i % 2), col = 16 * kk + c0 + 8 * (i / 2);
        const int head = kv_head * p.group + row;
        qa[kk][i] = row < p.group
                        ? q[((static_cast<std::int64_t>(seq) * p.num_heads_q + head) * kHeadDim +
                             col) / 2]
                        : 0u;
      }
    }
  }

  // S of one tile: this warp's 16 keys, masked; stored to `slot`, row maxima to warp_max.
  __device__ void scores(int stage, int slot, int tile) {
    float acc[2][4] = {};
    const std::uint16_t* k = s.k[stage];
    const int mi = lane / 8;
    const int key = 16 * warp + 8 * (mi / 2) + lane % 8;
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
      for (int i = 0; i < 2; ++i) {
        const int row = r0 + 8 * i;
        const int col = 16 * warp + 8 * nb + 2 * (lane % 4);
        float x0 = acc[nb][2 * i], x1 = acc[nb][2 * i + 1];
        if (row >= p.group || tile * kTileK + col >= kv_len) x0 = kNegInf;
        if (row >= p.group || tile * kTileK + col + 1 >= kv_len) x1 = kNegInf;
        *reinterpret_cast<float2*>(&s.s[slot][row][col]) = make_float2(x0, x1);
        mx[i] = fmaxf(mx[i], fmaxf(x0, x1));
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 2));
      if (lane % 4 == 0) s.warp_max[warp][r0 + 8 * i] = mx[i];
    }
  }

  // After scores() and a barrier: the tile's row maxima update m_run; returns whether row `tid`
  // (for tid < group) votes skip at raw-score gap `gap`.
  __device__ bool update_max(float gap) {
    if (tid >= p.group) return true;
    float mx = s.warp_max[0][tid];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s.warp_max[w][tid]);
    const float m_old = s.m_run[tid];
    s.m_run[tid] = fmaxf(m_old, mx);
    return mx == kNegInf || mx - fmaxf(m_old, mx) < gap;
  }

  // P = exp2((S - m_ref) * scale_log2) of the tile in `slot`, the row sums and the rescale of O,
  // with m_ref caught up with m_run. Eight threads a row, eight keys each.
  __device__ void probabilities(int slot) {
    const int row = tid / 8, chunk = tid % 8;
    float corr = 1.f, sum = 0.f;
    float x[8] = {};
    float m_new = kNegInf;
    if (row < p.group) {
      m_new = s.m_run[row];
      const float m_ref = s.m_ref[row];
      corr = m_ref == kNegInf ? 0.f : hopper::fast_exp2((m_ref - m_new) * p.scale_log2);
      const float ms = m_new * p.scale_log2;
      const float4 lo = *reinterpret_cast<const float4*>(&s.s[slot][row][8 * chunk]);
      const float4 hi = *reinterpret_cast<const float4*>(&s.s[slot][row][8 * chunk + 4]);
      const float raw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[e] = hopper::fast_exp2(fmaf(raw[e], p.scale_log2, -ms));
        sum += x[e];
      }
    }
    uint4 packed;
    packed.x = hopper::pack_half2<kBf16>(x[0], x[1]);
    packed.y = hopper::pack_half2<kBf16>(x[2], x[3]);
    packed.z = hopper::pack_half2<kBf16>(x[4], x[5]);
    packed.w = hopper::pack_half2<kBf16>(x[6], x[7]);
    *reinterpret_cast<uint4*>(s.p + row * kTileK + swizzle(row, chunk) * 8) = packed;
    sum += __shfl_xor_sync(0xffffffff, sum, 1);
    sum += __shfl_xor_sync(0xffffffff, sum, 2);
    sum += __shfl_xor_sync(0xffffffff, sum, 4);
    if (chunk == 0) {
      s.corr[row] = corr;
      if (row < p.group) {
        s.l[row] = s.l[row] * corr + sum;
        s.m_ref[row] = m_new;
      }
    }
  }

  // O (this warp's columns) = O * corr + P V.
  __device__ void accumulate(int stage) {
    const float c_lo = s.corr[lane / 4], c_hi = s.corr[lane / 4 + 8];
#pragma unroll
    for (int nb = 0; nb < Cfg::kColsPerWarp / 8; ++nb) {
      o[nb][0] *= c_lo;
      o[nb][1] *= c_lo;
      o[nb][2] *= c_hi;
      o[nb][3] *= c_hi;
    }
    const std::uint16_t* v = s.v[stage];
    const int mi = lane / 8;
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      std::uint32_t a[4];
      const int prow = 8 * (mi % 2) + lane % 8;
      hopper::ldmatrix_x4(a, s.p + prow * kTileK + swizzle(prow, 2 * kk + mi / 2) * 8);
      const int key = 16 * kk + 8 * (mi % 2) + lane % 8;
#pragma unroll
      for (int nb = 0; nb < Cfg::kColsPerWarp / 8; nb += 2) {
        const int chunk = (warp * Cfg::kColsPerWarp) / 8 + nb + mi / 2;
        std::uint32_t b[4];
        hopper::ldmatrix_x4_trans(b, v + key * kHeadDim + swizzle(key, chunk) * 8);
        hopper::mma_16816<kBf16>(o[nb], a, b[0], b[1]);
        hopper::mma_16816<kBf16>(o[nb + 1], a, b[2], b[3]);
      }
    }
  }

  // The split's tiles in order. kVote: take the skip vote. Returns the number of tiles skipped.
  // Every iteration commits two cp.async groups (K ahead, then this tile's V, either possibly
  // empty), so the waits count the same on every path.
  template <bool kVote>
  __device__ int mainloop(float gap) {
    constexpr int kSK = Cfg::kStagesK, kD = Cfg::kLookahead;
    // Voting splits after the first start from the sink: tile 0's row maxima seed m_run (not O,
    // l or the tile counts), so that a split's far-field tiles meet the maximum they would meet
    // in one long pass. Its K goes to the stage the loop fills last.
    const bool seed = kVote && tile_begin > 0 && n_tiles > 0;
    if (seed) load_tile(s.k[kSK - 1], p.k_pages, 0);
    hopper::cp_async_commit();
    for (int j = 0; j < kSK - 1; ++j) {
      if (j < n_tiles) load_tile(s.k[j], p.k_pages, tile_begin + j);
      hopper::cp_async_commit();
      hopper::cp_async_commit();
    }
    if (seed) {
      hopper::cp_async_wait<2 * (kSK - 1)>();
      __syncthreads();
      scores(kSK - 1, 0, 0);
      __syncthreads();
      update_max(gap);
    }
    int skipped = 0;
    unsigned history = 0;  // bit i: the tile visited i iterations ago was skipped
    for (int t = 0; t < n_tiles + kD; ++t) {
      if (t + kSK - 1 < n_tiles) {
        load_tile(s.k[(t + kSK - 1) % kSK], p.k_pages, tile_begin + t + kSK - 1);
      }
      hopper::cp_async_commit();
      bool skip = false;
      if (t < n_tiles) {
        hopper::cp_async_wait<2 * kSK - 2>();
        __syncthreads();
        scores(t % kSK, t % Cfg::kStagesV, tile_begin + t);
        __syncthreads();
        const bool vote = update_max(gap);
        if constexpr (kVote) {
          skip = __syncthreads_and(vote);
          skipped += skip;
        }
        if (!skip) load_tile(s.v[t % Cfg::kStagesV], p.v_pages, tile_begin + t);
      }
      hopper::cp_async_commit();
      history = (history << 1) | (skip ? 1u : 0u);
      const int u = t - kD;
      if (u >= 0 && !(history & (1u << kD))) {
        hopper::cp_async_wait<2 * kD>();
        __syncthreads();
        probabilities(u % Cfg::kStagesV);
        __syncthreads();
        accumulate(u % Cfg::kStagesV);
      }
    }
    return skipped;
  }

  __device__ void store(int skipped) {
    __syncthreads();
    const int r0 = lane / 4;
    const bool split_out = p.num_splits > 1;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = r0 + 8 * i;
      if (row >= p.group) continue;
      const float l = s.l[row];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const std::int64_t head_row =
          static_cast<std::int64_t>(seq) * p.num_heads_q + kv_head * p.group + row;
#pragma unroll
      for (int nb = 0; nb < Cfg::kColsPerWarp / 8; ++nb) {
        const int col = warp * Cfg::kColsPerWarp + 8 * nb + 2 * (lane % 4);
        const float x0 = o[nb][2 * i] * inv, x1 = o[nb][2 * i + 1] * inv;
        if (split_out) {
          float* dst = p.partial_o + (head_row * p.num_splits + split) * kHeadDim + col;
          *reinterpret_cast<float2*>(dst) = make_float2(x0, x1);
        } else {
          auto* dst = static_cast<std::uint32_t*>(p.out) + (head_row * kHeadDim + col) / 2;
          *dst = hopper::pack_half2<kBf16>(x0, x1);
        }
      }
      if (split_out && warp == 0 && lane % 4 == 0) {
        p.partial_lse[head_row * p.num_splits + split] =
            l > 0.f ? s.m_ref[row] * p.scale_log2 + __log2f(l) : kNegInf;
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
    if (tid < kMaxGroup) {
      s.m_run[tid] = kNegInf;
      s.m_ref[tid] = kNegInf;
      s.l[tid] = 0.f;
    }
    load_q();
    int tile_end;
    split_range((kv_len + kTileK - 1) / kTileK, p.num_splits, split, tile_begin, tile_end);
    n_tiles = tile_end - tile_begin;
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
__global__ void __launch_bounds__(kThreads) decode_kernel(const __grid_constant__ Params p) {
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
  const float x = acc / total;
  auto* out = static_cast<std::uint16_t*>(p.out) + head_row * kHeadDim + threadIdx.x;
  if constexpr (kBf16) {
    *reinterpret_cast<__nv_bfloat16*>(out) = __float2bfloat16_rn(x);
  } else {
    *reinterpret_cast<__half*>(out) = __float2half_rn(x);
  }
}

}  // namespace skipsoftmax::decode
