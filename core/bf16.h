// bfloat16 <-> float on the host: the top 16 bits of a float, rounded to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace skipsoftmax {

inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

}  // namespace skipsoftmax
