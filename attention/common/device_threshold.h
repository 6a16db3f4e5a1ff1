// The threshold policy on the device, shared by the prefill and decode kernels: a per-length
// scale table (lambda = S / L from the last row with bin <= L, with the guard), a flat lambda, or
// one lambda per sequence read from device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "skipsoftmax/threshold.h"

namespace skipsoftmax::common {

inline constexpr int kMaxTableRows = kMaxKernelTableRows;

struct DeviceThreshold {
  int rows = 0;                    // 0: no table
  float flat_lambda = 0.f;         // used when rows == 0 and lambdas is null; 0 is dense
  const float* lambdas = nullptr;  // [batch]: one lambda per sequence, in place of the others
  int bins[kMaxTableRows];
  float scales[kMaxTableRows];
};

// The policy of a launch as the kernels read it: `lambdas` (device, [batch]) when set, else `t`.
// The caller has checked that a table fits kMaxTableRows rows with bins below 2^31.
inline DeviceThreshold to_device(const Threshold& t, const float* lambdas) {
  DeviceThreshold d{};
  d.lambdas = lambdas;
  if (t.kind() == Threshold::Kind::kFlat) d.flat_lambda = static_cast<float>(t.flat_lambda());
  if (t.kind() == Threshold::Kind::kTable) {
    const auto& rows = t.scale_table().rows();
    d.rows = static_cast<int>(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      d.bins[i] = static_cast<int>(rows[i].seqlen_bin);
      d.scales[i] = static_cast<float>(rows[i].scale);
    }
  }
  return d;
}

// Empty when the kernels can hold the policy; else the reason.
inline std::string device_threshold_problem(const Threshold& t, const float* lambdas) {
  if (lambdas != nullptr && t.kind() != Threshold::Kind::kDense) {
    return "per-sequence lambdas replace the threshold: give one or the other (the threshold "
           "stays dense)";
  }
  if (t.kind() != Threshold::Kind::kTable) return {};
  const auto& rows = t.scale_table().rows();
  if (rows.size() > static_cast<std::size_t>(kMaxTableRows)) {
    return "scale tables hold at most " + std::to_string(kMaxTableRows) + " rows";
  }
  if (rows.back().seqlen_bin >= (std::int64_t{1} << 31))
    return "scale table bins must be below 2^31";
  return {};
}

#ifdef __CUDACC__
// lambda for sequence `seq` of KV length kv_len, as skipsoftmax::Threshold::lambda_for does, or
// as sequence_lambda (threshold.h) reads a per-sequence one.
__device__ __forceinline__ float lambda_for(const DeviceThreshold& t, int seq, int kv_len) {
  if (t.lambdas != nullptr) {
    const float x = t.lambdas[seq];
    return kv_len > 0 && x > 0.f && x < 1.f ? x : 0.f;
  }
  if (t.rows == 0) return kv_len > 0 ? t.flat_lambda : 0.f;
  if (kv_len < t.bins[0]) return 0.f;
  float s = t.scales[0];
  for (int i = 1; i < t.rows && t.bins[i] <= kv_len; ++i) s = t.scales[i];
  const float l = static_cast<float>(kv_len);
  return s >= l ? 0.f : s / l;
}
#endif

}  // namespace skipsoftmax::common
