// Host side of one prefill kernel instantiation: shared memory, grid, launch.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "prefill_kernel.cuh"

namespace skipsoftmax::prefill {

template <bool kBf16, int kHeadDim, bool kCausal, bool kSkip>
void launch(const Params& params, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto kernel = prefill_kernel<kBf16, kHeadDim, kCausal, kSkip>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) {
    cudaGetLastError();  // reported once, here
    throw std::runtime_error(std::string("prefill: cudaFuncSetAttribute: ") +
                             cudaGetErrorString(err));
  }
  // An error left pending by earlier work would otherwise be read back as this launch's own;
  // reading it consumes it.
  err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("prefill: an error pending before the launch: ") +
                             cudaGetErrorString(err));
  }
  const dim3 grid(params.num_m_blocks, params.num_heads_q, params.batch);
  kernel<<<grid, Cfg::kThreads, kSmem, stream>>>(params);
  err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("prefill: launch: ") + cudaGetErrorString(err));
  }
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
