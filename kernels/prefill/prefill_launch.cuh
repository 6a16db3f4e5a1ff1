// Host side of one prefill kernel instantiation: shared memory, grid, launch.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "prefill_kernel.cuh"

namespace skipsoftmax::prefill {

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip, bool kMulticast>
void launch(const Params& params, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto kernel = prefill_kernel<kBf16, kHeadDim, kCausal, kSkip, kMulticast>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("prefill: cudaFuncSetAttribute: ") +
                             cudaGetErrorString(err));
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(params.num_m_blocks, params.num_heads_q, params.batch);
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  if constexpr (kMulticast) {
    // Clusters of two query heads of one GQA group (grid y is the query head).
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim = {1, 2, 1};
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  err = cudaLaunchKernelEx(&config, kernel, params);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("prefill: launch: ") + cudaGetErrorString(err));
  }
}

// One declaration per compiled family; each is defined in its own instantiation file.
// multicast: clusters of two query heads sharing K/V (needs an even number of query heads per KV
// head).
template <bool kBf16, int kHeadDim, bool kSkip>
void launch_family(const Params& params, bool causal, bool multicast, cudaStream_t stream);

}  // namespace skipsoftmax::prefill

// Defines launch_family for one (dtype, head dim, dense/skip): both masks, with and without
// multicast.
#define SKIPSOFTMAX_PREFILL_FAMILY(BF16, HEAD_DIM, SKIP)                                      \
  namespace skipsoftmax::prefill {                                                          \
  template <>                                                                               \
  void launch_family<BF16, HEAD_DIM, SKIP>(const Params& params, bool causal, bool multicast, \
                                           cudaStream_t stream) {                          \
    if (causal && multicast) {                                                              \
      launch<BF16, HEAD_DIM, true, SKIP, true>(params, stream);                             \
    } else if (causal) {                                                                    \
      launch<BF16, HEAD_DIM, true, SKIP, false>(params, stream);                            \
    } else if (multicast) {                                                                 \
      launch<BF16, HEAD_DIM, false, SKIP, true>(params, stream);                            \
    } else {                                                                                \
      launch<BF16, HEAD_DIM, false, SKIP, false>(params, stream);                           \
    }                                                                                       \
  }                                                                                         \
  }
