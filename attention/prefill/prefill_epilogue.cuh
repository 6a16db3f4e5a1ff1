// The prefill kernel's epilogue: each consumer thread normalizes its two rows of O by their
// row sums and stores them, packed to 16 bits, to the output (and the rows' log-sum-exps).
#pragma once

#include "../hopper/ptx.cuh"
#include "prefill_consumer.cuh"

namespace skipsoftmax::prefill {

// O / l of this thread's two rows, each row's sum over the quad of threads that share it; rows
// past the sequence's query rows are not stored. The log-sum-exp in natural log: l sums
// exp2(scale_log2 (s - m)), so ln(sum exp(scale s)) = scale m + ln l (-inf where no key was seen).
template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
__device__ inline void Consumer<kBf16, kHeadDim, kCausal, kSkip>::store_output() {
  const int lane = tid % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffff, sum, 1);
    sum += __shfl_xor_sync(0xffffffff, sum, 2);
    const float inv = 1.f / sum;
    const int row = row0 + 8 * i;
    if (row >= w.q_len) continue;
    if (p.lse != nullptr && lane % 4 == 0) {
      p.lse[static_cast<std::int64_t>(w.q_start + row) * p.num_heads_q + w.head] =
          sum > 0.f ? m[i] * (p.scale_log2 * hopper::kLn2) + logf(sum) : kNegInf;
    }
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

}  // namespace skipsoftmax::prefill
