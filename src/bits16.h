// Floats to and from the 16-bit values (fp16 or bf16 bits) that the GPU kernels take.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace skipsoftmax
