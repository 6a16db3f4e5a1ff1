// Floats to and from the 16-bit values (fp16 or bf16 bits) that the GPU kernels take, on the host
// and, in CUDA code, on the device.
#pragma once

#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "bf16.h"
#include "npy.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {

inline std::uint16_t to_bits(float x, DType t) {
  return t == DType::kBF16 ? float_to_bf16(x) : float_to_half(x);
}
inline float from_bits(std::uint16_t b, DType t) {
  return t == DType::kBF16 ? bf16_to_float(b) : half_to_float(b);
}

inline std::vector<std::uint16_t> to_bits(const std::vector<float>& x, DType t) {
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) bits[i] = to_bits(x[i], t);
  return bits;
}
inline std::vector<double> from_bits(const std::vector<std::uint16_t>& bits, DType t) {
  std::vector<double> x(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) x[i] = from_bits(bits[i], t);
  return x;
}

#ifdef __CUDACC__
// On the device (the engine's 16-bit storage: weights, activations that feed a matrix product or
// attention, the KV cache), fp16 or bf16 chosen per engine (EngineOptions::dtype).
__device__ inline float from_bits16(std::uint16_t b, bool fp16) {
  return fp16 ? __half2float(__ushort_as_half(b)) : __bfloat162float(__ushort_as_bfloat16(b));
}

// Round to nearest even.
__device__ inline std::uint16_t to_bits16(float x, bool fp16) {
  return fp16 ? __half_as_ushort(__float2half_rn(x)) : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
#endif

}  // namespace skipsoftmax
