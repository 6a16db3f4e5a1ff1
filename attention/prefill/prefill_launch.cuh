// Host side of one prefill kernel instantiation: shared memory, grid, launch.
#pragma once

#include <cuda_runtime.h>

#include "../common/launch_check.h"
#include "prefill_kernel.cuh"

namespace skipsoftmax::prefill {

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
void launch(const Params& params, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto kernel = prefill_kernel<kBf16, kHeadDim, kCausal, kSkip>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  common::check_launch(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "prefill",
      "cudaFuncSetAttribute");
  common::check_nothing_pending("prefill");
  const dim3 grid(params.num_m_blocks, params.num_heads_q, params.batch);
  kernel<<<grid, Cfg::kThreads, kSmem, stream>>>(params);
  common::check_launch(cudaGetLastError(), "prefill", "launch");
}

// One declaration per compiled family; each is defined in its own instantiation file.
template <bool kBf16, int kHeadDim, bool kSkip>
void launch_family(const Params& params, bool causal, cudaStream_t stream);

}  // namespace skipsoftmax::prefill

// Defines launch_family for one (dtype, head dim, dense/skip), both masks.
#define SKIPSOFTMAX_PREFILL_FAMILY(BF16, HEAD_DIM, SKIP)                      \
  namespace skipsoftmax::prefill {                                            \
  template <>                                                                 \
  void launch_family<BF16, HEAD_DIM, SKIP>(const Params& params, bool causal, \
                                           cudaStream_t stream) {             \
    if (causal) {                                                             \
      launch<BF16, HEAD_DIM, true, SKIP>(params, stream);                     \
    } else {                                                                  \
      launch<BF16, HEAD_DIM, false, SKIP>(params, stream);                    \
    }                                                                         \
  }                                                                           \
  }
