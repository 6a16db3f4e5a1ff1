// The softmax scale as both kernel families take it: scale * log2(e), in float.
#pragma once

#include <cmath>
#include <optional>
#include <string>

namespace skipsoftmax::common {

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
    return "softmax scale must be finite and > 0 in float (scale x log2(e) in (0, 3.4e38)), got " +
           std::to_string(*scale);
  }
  return {};
}

}  // namespace skipsoftmax::common
