// Host side of one decode kernel family: shared memory, grid, launch, and the combine kernel.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "decode_kernel.cuh"

namespace skipsoftmax::decode {

inline void check_launch(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("decode: ") + what + ": " + cudaGetErrorString(err));
  }
}

template <bool kBf16, int kHeadDim, bool kSkip>
void launch(const Params& params, int batch, cudaStream_t stream) {
  auto kernel = decode_kernel<kBf16, kHeadDim, kSkip>;
  constexpr int kSmem = static_cast<int>(sizeof(SharedStorage<kHeadDim>));
  check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
               "cudaFuncSetAttribute");
  const dim3 grid(params.num_splits, params.num_heads_kv, batch);
  kernel<<<grid, Config<kHeadDim>::kThreads, kSmem, stream>>>(params);
  check_launch(cudaGetLastError(), "launch");
  if (params.num_splits > 1) {
    const int head_rows = batch * params.q_len * params.num_heads_q;
    combine_kernel<kBf16, kHeadDim><<<head_rows, kHeadDim, 0, stream>>>(params);
    check_launch(cudaGetLastError(), "combine launch");
  }
}

// One declaration per compiled family; each is defined in its own instantiation file.
template <bool kBf16, int kHeadDim, bool kSkip>
void launch_family(const Params& params, int batch, cudaStream_t stream);

}  // namespace skipsoftmax::decode

#define SKIPSOFTMAX_DECODE_FAMILY(BF16, HEAD_DIM, SKIP)                                      \
  namespace skipsoftmax::decode {                                                            \
  template <>                                                                                \
  void launch_family<BF16, HEAD_DIM, SKIP>(const Params& params, int batch,                  \
                                           cudaStream_t stream) {                            \
    launch<BF16, HEAD_DIM, SKIP>(params, batch, stream);                                     \
  }                                                                                          \
  }
