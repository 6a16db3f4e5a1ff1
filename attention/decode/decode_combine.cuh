// The split-KV combine: a second kernel that merges the splits' normalized outputs into the
// output by their log2-sum-exp.
#pragma once

#include <cstdint>

#include "../hopper/ptx.cuh"
#include "decode_params.h"
#include "decode_traits.cuh"

namespace skipsoftmax::decode {

// out[b, h, :] = sum over splits of 2^(lse_s - lse) * partial_o_s, lse the log2-sum-exp of all
// (written, in natural log, to p.lse when set).
// One CTA per (sequence, query head): thread t sums columns 4 (t % kQuads) + {0..3} over the
// splits s = t / kQuads (mod kSplitGroups), so that a thread's few loads are in flight together;
// the split groups' sums meet in shared memory. Launched as a programmatic dependent of the decode
// kernel: its launch overlaps the decode grid, and it waits for that grid's results.
template <bool kBf16, int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ Params p) {
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kSplitGroups = kCombineThreads / kQuads;
  static_assert(kCombineThreads >= kMaxSplits, "one thread per split's lse");
  __shared__ float weight[kMaxSplits];
  __shared__ float4 group_sum[kSplitGroups][kQuads];
  hopper::wait_on_dependencies();
  const int tid = threadIdx.x;
  const std::int64_t head_row = blockIdx.x;
  const int n = p.num_splits;
  // This thread's first kAhead partial outputs are requested with the lses (kCombineAhead).
  constexpr int kAhead = kCombineAhead;
  const int quad = tid % kQuads;
  const auto* part = reinterpret_cast<const float4*>(p.partial_o + head_row * n * kHeadDim);
  float4 ahead[kAhead];
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const int i = tid / kQuads + j * kSplitGroups;
    ahead[j] = i < n ? part[i * kQuads + quad] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  if (tid < n) weight[tid] = p.partial_lse[head_row * n + tid];
  __syncthreads();
  float m = -__builtin_huge_valf();
  for (int i = 0; i < n; ++i) m = fmaxf(m, weight[i]);
  __syncthreads();  // every thread has the maximum before the weights replace the lses
  if (tid < n) weight[tid] = weight[tid] == -__builtin_huge_valf() ? 0.f : exp2f(weight[tid] - m);
  __syncthreads();
  // An empty split wrote a zero output with weight 0.
  // Splits i = tid / kQuads + j kSplitGroups in order, as one loop over them would sum.
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto add = [&](int i, const float4& x) {
    const float w = weight[i];
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  };
#pragma unroll
  for (int j = 0; j < kAhead; ++j) {
    const int i = tid / kQuads + j * kSplitGroups;
    if (i < n) add(i, ahead[j]);
  }
#pragma unroll 8
  for (int i = tid / kQuads + kAhead * kSplitGroups; i < n; i += kSplitGroups) {
    add(i, part[i * kQuads + quad]);
  }
  group_sum[tid / kQuads][quad] = acc;
  __syncthreads();
  if (tid >= kQuads) return;
  float total = 0.f;
  for (int i = 0; i < n; ++i) total += weight[i];
  float4 x = group_sum[0][quad];
#pragma unroll
  for (int g = 1; g < kSplitGroups; ++g) {
    const float4 y = group_sum[g][quad];
    x.x += y.x;
    x.y += y.y;
    x.z += y.z;
    x.w += y.w;
  }
  // total = 0: no split saw a key (a sequence shorter than q_len): 0, as one split writes.
  const float inv = total > 0.f ? 1.f / total : 0.f;
  if (p.lse != nullptr && tid == 0) {
    p.lse[head_row] = total > 0.f ? (m + log2f(total)) * hopper::kLn2 : -__builtin_huge_valf();
  }
  auto* out = static_cast<std::uint32_t*>(p.out) + (head_row * kHeadDim + 4 * quad) / 2;
  out[0] = hopper::pack_half2<kBf16>(x.x * inv, x.y * inv);
  out[1] = hopper::pack_half2<kBf16>(x.z * inv, x.w * inv);
}

}  // namespace skipsoftmax::decode
