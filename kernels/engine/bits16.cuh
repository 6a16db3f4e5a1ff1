// The engine's 16-bit storage (weights, activations that feed a matrix product or attention, the
// KV cache): bf16 or fp16 bit patterns, chosen per engine (EngineOptions::dtype).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace skipsoftmax::engine {

__device__ inline float from_bits16(std::uint16_t b, bool fp16) {
  return fp16 ? __half2float(__ushort_as_half(b)) : __bfloat162float(__ushort_as_bfloat16(b));
}

// Round to nearest even.
__device__ inline std::uint16_t to_bits16(float x, bool fp16) {
  return fp16 ? __half_as_ushort(__float2half_rn(x)) : __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

}  // namespace skipsoftmax::engine
