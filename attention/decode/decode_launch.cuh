// Host side of one decode kernel family: shared memory, grid, launch, and the combine kernel.
#pragma once

#include <cuda_runtime.h>

#include "../common/launch_check.h"
#include "decode_combine.cuh"
#include "decode_kernel.cuh"

namespace skipsoftmax::decode {

template <bool kBf16, int kHeadDim, bool kSkip>
void launch(const Params& params, int batch, cudaStream_t stream) {
  auto kernel = decode_kernel<kBf16, kHeadDim, kSkip>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  common::check_launch(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "decode",
      "cudaFuncSetAttribute");
  common::check_nothing_pending("decode");
  const dim3 grid(params.num_splits, params.num_heads_kv, batch);
  kernel<<<grid, Config<kHeadDim>::kThreads, kSmem, stream>>>(params);
  common::check_launch(cudaGetLastError(), "decode", "launch");
  if (params.num_splits > 1) {
    // A programmatic dependent launch: the combine grid is set up while the decode grid runs.
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(batch * params.q_len * params.num_heads_q);
    config.blockDim = dim3(kCombineThreads);
    config.stream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    common::check_launch(cudaLaunchKernelEx(&config, combine_kernel<kBf16, kHeadDim>, params),
                         "decode", "combine launch");
  }
}

// CTAs of this family one multiprocessor holds at once (registers, shared memory); 0 when the
// runtime cannot say (no GPU).
template <bool kBf16, int kHeadDim, bool kSkip>
int resident_ctas() {
  auto kernel = decode_kernel<kBf16, kHeadDim, kSkip>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  int ctas = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, Config<kHeadDim>::kThreads,
                                                    kSmem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ctas;
}

// One declaration per compiled family; each is defined in its own instantiation file.
template <bool kBf16, int kHeadDim, bool kSkip>
void launch_family(const Params& params, int batch, cudaStream_t stream);
template <bool kBf16, int kHeadDim, bool kSkip>
int resident_ctas_family();

}  // namespace skipsoftmax::decode

#define SKIPSOFTMAX_DECODE_FAMILY(BF16, HEAD_DIM, SKIP)                                            \
  namespace skipsoftmax::decode {                                                                  \
  template <>                                                                                      \
  void launch_family<BF16, HEAD_DIM, SKIP>(const Params& params, int batch, cudaStream_t stream) { \
    launch<BF16, HEAD_DIM, SKIP>(params, batch, stream);                                           \
  }                                                                                                \
  template <>                                                                                      \
  int resident_ctas_family<BF16, HEAD_DIM, SKIP>() {                                               \
    return resident_ctas<BF16, HEAD_DIM, SKIP>();                                                  \
  }                                                                                                \
  }
