// The prefill kernel's softmax step, shared by the dense and the voting main loops: the mask and
// the row maxima of a score tile, the online softmax (exp2, running maxima and sums), the rescale
// of O, and the conversion of P to wgmma A fragments.
#pragma once

#include "../hopper/ptx.cuh"
#include "prefill_consumer.cuh"

namespace skipsoftmax::prefill {

// Masks S (raw scores) where needed and returns this thread's two raw row maxima (kQuad: of the
// whole rows, over the quad of threads sharing them; else of this thread's columns). The softmax
// scale is folded into the exponent later (one FFMA per score). kMasked is a template argument:
// as a runtime flag every tile ran the mask's compares (about a third more instructions a tile).
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <bool kMasked, bool kQuad>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::mask_and_max(
    float (&sc)[kN / 2], int tile, float (&mx)[2]) const {
  const int lane = tid % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    const int last_key = row >= w.q_len ? -1 : (kCausal ? w.kv_len - w.q_len + row : w.kv_len - 1);
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

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline float Consumer<kBf16, kHeadDim, kCausal, kSkip>::quad_max(float r) {
  r = fmaxf(r, __shfl_xor_sync(0xffffffff, r, 1));
  return fmaxf(r, __shfl_xor_sync(0xffffffff, r, 2));
}

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
template <bool kQuad>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::row_max(float (&sc)[kN / 2],
                                                                          int tile,
                                                                          float (&mx)[2]) const {
  if (tile_needs_mask(tile)) {
    mask_and_max<true, kQuad>(sc, tile, mx);
  } else {
    mask_and_max<false, kQuad>(sc, tile, mx);
  }
}

// Whether a tile with row maxima mx moves the running maximum of some row of the warp. Where
// none moves, softmax's factors are all exp2(0) = 1 and the rescale of O may be left out
// (bit-identical), as it mostly is in the voting loop once the sink and the diagonal are seen.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline bool Consumer<kBf16, kHeadDim, kCausal, kSkip>::moves_max(
    const float (&mx)[2]) const {
  return __any_sync(0xffffffff, mx[0] > m[0] || mx[1] > m[1]);
}

// exp2 of the tile, the running sums, and the factor that rescales O. Leaves P in sc.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::softmax(float (&sc)[kN / 2],
                                                                          const float (&mx)[2],
                                                                          float (&corr)[2]) {
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

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::rescale_o(
    const float (&corr)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) {
    o[4 * j + 0] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

// The accumulator layout of S equals wgmma's A-fragment layout per 16 keys.
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::convert_p(
    const float (&sc)[kN / 2]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    pa[kk][0] = hopper::pack_half2<kBf16>(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = hopper::pack_half2<kBf16>(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = hopper::pack_half2<kBf16>(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = hopper::pack_half2<kBf16>(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

}  // namespace skipsoftmax::prefill
