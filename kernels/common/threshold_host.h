// Host side of device_threshold.h: the policy of a launch as the kernels read it.
#pragma once

#include "device_threshold.h"
#include "skipsoftmax/threshold.h"

namespace skipsoftmax::common {

// The caller has checked that a table fits kMaxTableRows rows with bins below 2^31.
inline DeviceThreshold to_device(const Threshold& t) {
  DeviceThreshold d{};
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
inline std::string device_threshold_problem(const Threshold& t) {
  if (t.kind() != Threshold::Kind::kTable) return {};
  const auto& rows = t.scale_table().rows();
  if (rows.size() > static_cast<std::size_t>(kMaxTableRows)) {
    return "scale tables hold at most " + std::to_string(kMaxTableRows) + " rows";
  }
  if (rows.back().seqlen_bin >= (std::int64_t{1} << 31)) return "scale table bins must be below 2^31";
  return {};
}

}  // namespace skipsoftmax::common
