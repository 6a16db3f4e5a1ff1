// The threshold policy on the device, shared by the prefill and decode kernels: a per-length
// scale table (lambda = S / L from the last row with bin <= L, with the guard) or a flat lambda.
#pragma once

#include "skipsoftmax/threshold.h"

namespace skipsoftmax::common {

inline constexpr int kMaxTableRows = kMaxKernelTableRows;

struct DeviceThreshold {
  int rows = 0;             // 0: no table
  float flat_lambda = 0.f;  // used when rows == 0; 0 is dense
  int bins[kMaxTableRows];
  float scales[kMaxTableRows];
};

#ifdef __CUDACC__
// lambda for one sequence of KV length kv_len, as skipsoftmax::Threshold::lambda_for does.
__device__ __forceinline__ float lambda_for(const DeviceThreshold& t, int kv_len) {
  if (t.rows == 0) return kv_len > 0 ? t.flat_lambda : 0.f;
  if (kv_len < t.bins[0]) return 0.f;
  float s = t.scales[0];
  for (int i = 1; i < t.rows && t.bins[i] <= kv_len; ++i) s = t.scales[i];
  const float l = static_cast<float>(kv_len);
  return s >= l ? 0.f : s / l;
}
#endif

}  // namespace skipsoftmax::common
