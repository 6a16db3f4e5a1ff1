// The decode kernel's epilogue: the key slices' partial outputs and row sums meet in shared
// memory and are summed, normalized and written (one split) or written with the split's
// log2-sum-exp for the combine kernel.
#pragma once

#include <cstdint>

#include "../hopper/mma_sync.cuh"
#include "decode_cta.cuh"

namespace skipsoftmax::decode {

// Sums the key slices' partial outputs and row sums, normalizes, and writes the output and its
// natural log-sum-exp (one split) or the split's output and log2-sum-exp.
template <bool kBf16, int kHeadDim, bool kSkip>
__device__ inline void DecodeCta<kBf16, kHeadDim, kSkip>::store(int skipped) {
  __syncthreads();                            // every warp is done with the stages
  auto* red = reinterpret_cast<float*>(s.k);  // [kKeySlices][kMaxGroup][kRedStride]
  constexpr int kStride = kRedStride<kHeadDim>;
  Epilogue& e = *reinterpret_cast<Epilogue*>(s.v);
  if (warp == 0 && lane % 4 == 0) {
    e.m_run[lane / 4] = m_run[0];
    e.m_run[lane / 4 + 8] = m_run[1];
  }
  const int r0 = lane / 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float li = l[i];
    li += __shfl_xor_sync(0xffffffff, li, 1);
    li += __shfl_xor_sync(0xffffffff, li, 2);
    if (col0 == 0 && lane % 4 == 0) e.l[slice][r0 + 8 * i] = li;
#pragma unroll
    for (int nb = 0; nb < Cfg::kCols / 8; ++nb) {
      const int col = col0 + 8 * nb + 2 * (lane % 4);
      *reinterpret_cast<float2*>(&red[(slice * kMaxGroup + r0 + 8 * i) * kStride + col]) =
          make_float2(o[nb][2 * i], o[nb][2 * i + 1]);
    }
  }
  __syncthreads();  // the partial outputs, row sums and m_run are published
  const bool split_out = p.num_splits > 1;
  // Thread t of the CTA writes columns 2 (t % (D / 2)) + {0, 1} of rows t / (D / 2) + k R.
  constexpr int kPairs = kHeadDim / 2, kRowStep = kThreads / kPairs;
  const int col = 2 * (tid % kPairs);
  for (int row = tid / kPairs; row < rows; row += kRowStep) {
    float sum = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
    for (int k = 0; k < kKeySlices; ++k) {
      sum += e.l[k][row];
      const float2 part =
          *reinterpret_cast<const float2*>(&red[(k * kMaxGroup + row) * kStride + col]);
      x0 += part.x;
      x1 += part.y;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const std::int64_t hr = head_row(row);
    if (split_out) {
      float* dst = p.partial_o + (hr * p.num_splits + split) * kHeadDim + col;
      *reinterpret_cast<float2*>(dst) = make_float2(x0 * inv, x1 * inv);
      if (col == 0) {
        p.partial_lse[hr * p.num_splits + split] =
            sum > 0.f ? e.m_run[row] * p.scale_log2 + __log2f(sum) : kNegInf;
      }
    } else {
      auto* dst = static_cast<std::uint32_t*>(p.out) + (hr * kHeadDim + col) / 2;
      *dst = hopper::pack_half2<kBf16>(x0 * inv, x1 * inv);
      if (p.lse != nullptr && col == 0) {
        p.lse[hr] = sum > 0.f ? e.m_run[row] * (p.scale_log2 * hopper::kLn2) + logf(sum) : kNegInf;
      }
    }
  }
  if (kSkip && p.stats != nullptr && tid == 0 && n_tiles > 0) {
    atomicAdd(&p.stats[2 * seq], static_cast<unsigned long long>(n_tiles));
    atomicAdd(&p.stats[2 * seq + 1], static_cast<unsigned long long>(skipped));
  }
}

}  // namespace skipsoftmax::decode
