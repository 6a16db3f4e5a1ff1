// The softmax scale as both kernel families take it: scale * log2(e), in float. The tools apply
// the same rule to the CPU reference, so that both backends take the same scales.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

namespace skipsoftmax {

inline constexpr double kLog2e = 1.4426950408889634;  // log2(e)

inline float scale_log2(const std::optional<double>& scale, int head_dim) {
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return static_cast<float>(s * kLog2e);
}

// Empty when the kernels can use the scale; else the reason. A scale finite in double may not be
// in float (above ~2.4e38), nor nonzero (below ~1e-45): the kernels' scores would be NaN or flat.
inline std::string softmax_scale_problem(const std::optional<double>& scale) {
  if (!scale) return {};
  const float log2_scale = static_cast<float>(*scale * kLog2e);
  if (!(std::isfinite(*scale) && *scale > 0 && std::isfinite(log2_scale) && log2_scale > 0.f)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", *scale);
    return std::string(
               "softmax scale must be positive, with scale x log2(e) a nonzero finite float "
               "(about 1e-45 to 2.36e38), got ") +
           got;
  }
  return {};
}

}  // namespace skipsoftmax
