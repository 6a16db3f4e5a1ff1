#include "skipsoftmax/threshold.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace skipsoftmax {
namespace {

// The guard, S >= L, compared in float as the kernels compare it (attention/common/
// device_threshold.h), so that host and device agree on which lengths run dense even where S lies
// within float rounding of L.
bool guarded(double scale, std::int64_t kv_len) {
  return static_cast<float>(scale) >= static_cast<float>(kv_len);
}

// The first L in [lo, end) that guarded() lets skip, or end: it is monotone in L (guarded below
// some length, not from there on), and near 2^63 float steps are 2^40 integers wide, too many to
// walk.
std::int64_t first_unguarded(double scale, std::int64_t lo, std::int64_t end) {
  std::int64_t hi = end;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (guarded(scale, mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

ScaleTable::ScaleTable(std::vector<ScaleTableRow> rows) : rows_(std::move(rows)) {
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const ScaleTableRow& r = rows_[i];
    std::ostringstream where;
    where << "scale table row " << i << " [" << r.seqlen_bin << ", " << r.scale << "]: ";
    if (r.seqlen_bin <= 0) {
      throw std::invalid_argument(where.str() + "seqlen_bin must be a positive integer");
    }
    // The kernels take S in float: one that rounds to 0 there would guard on the device only.
    if (!std::isfinite(r.scale) || !(static_cast<float>(r.scale) > 0.0f)) {
      throw std::invalid_argument(where.str() +
                                  "S must be finite and > 0 (at least 1e-45, float's "
                                  "smallest)");
    }
    if (i > 0 && r.seqlen_bin <= rows_[i - 1].seqlen_bin) {
      throw std::invalid_argument(where.str() + "bins must be strictly increasing (previous bin " +
                                  std::to_string(rows_[i - 1].seqlen_bin) + ")");
    }
  }
}

double ScaleTable::lambda_for(std::int64_t kv_len) const {
  if (rows_.empty() || kv_len < rows_.front().seqlen_bin) return 0.0;
  // Last row whose bin is <= kv_len; tables are a few dozen rows, a linear scan is the clearest.
  double s = rows_.front().scale;
  for (const ScaleTableRow& r : rows_) {
    if (r.seqlen_bin > kv_len) break;
    s = r.scale;
  }
  if (guarded(s, kv_len)) return 0.0;
  return s / static_cast<double>(kv_len);
}

std::int64_t ScaleTable::first_skippable_length() const {
  // Row i serves L in [bin_i, bin_{i+1}); inside it lambda > 0 iff L > S_i in float (guarded()),
  // so the first such integer is the first from max(bin_i, floor(S_i) + 1) whose float exceeds
  // S_i's: the next one, or up to a float step further (2^40 integers near 2^63).
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const double floor_s = std::floor(rows_[i].scale);
    if (floor_s >= static_cast<double>(kNeverSkippable - 1)) continue;
    const std::int64_t above_s = static_cast<std::int64_t>(floor_s) + 1;
    const bool last = i + 1 == rows_.size();
    const std::int64_t end = last ? kNeverSkippable : rows_[i + 1].seqlen_bin;
    const std::int64_t candidate =
        first_unguarded(rows_[i].scale, std::max(rows_[i].seqlen_bin, above_s), end);
    if (candidate < end) return candidate;
  }
  return kNeverSkippable;
}

Threshold Threshold::table(ScaleTable t) {
  Threshold th;
  if (t.empty()) return th;
  th.kind_ = Kind::kTable;
  th.table_ = std::move(t);
  return th;
}

Threshold Threshold::flat(double lambda) {
  if (!std::isfinite(lambda) || lambda < 0.0 || lambda >= 1.0) {
    std::ostringstream msg;
    msg << "threshold lambda=" << lambda << " is outside [0, 1)";
    throw std::invalid_argument(msg.str());
  }
  Threshold th;
  if (lambda == 0.0) return th;
  th.kind_ = Kind::kFlat;
  th.flat_lambda_ = lambda;
  return th;
}

double Threshold::lambda_for(std::int64_t kv_len) const {
  switch (kind_) {
    case Kind::kDense:
      return 0.0;
    case Kind::kTable:
      return table_.lambda_for(kv_len);
    case Kind::kFlat:
      return kv_len > 0 ? flat_lambda_ : 0.0;
  }
  return 0.0;
}

std::int64_t Threshold::first_skippable_length() const {
  switch (kind_) {
    case Kind::kDense:
      return kNeverSkippable;
    case Kind::kTable:
      return table_.first_skippable_length();
    case Kind::kFlat:
      return 1;
  }
  return kNeverSkippable;
}

std::string Threshold::describe() const {
  std::ostringstream out;
  switch (kind_) {
    case Kind::kDense:
      out << "dense";
      break;
    case Kind::kFlat:
      out << "flat lambda=" << flat_lambda_;
      break;
    case Kind::kTable:
      out << "table of " << table_.rows().size() << (table_.rows().size() == 1 ? " row" : " rows")
          << ", first skippable length " << table_.first_skippable_length();
      break;
  }
  return out.str();
}

KernelChoice choose_prefill_kernel(const Threshold& threshold, std::int64_t max_kv_len, int batch) {
  const std::int64_t first = threshold.first_skippable_length();
  if (first == kNeverSkippable) return KernelChoice::kDense;
  if (batch == 1) {
    return threshold.lambda_for(max_kv_len) > 0.0 ? KernelChoice::kSkip : KernelChoice::kDense;
  }
  return max_kv_len < first ? KernelChoice::kDense : KernelChoice::kSkip;
}

KernelChoice choose_decode_kernel(const Threshold& threshold, std::int64_t max_kv_len, int batch) {
  return choose_prefill_kernel(threshold, max_kv_len, batch);
}

const char* to_string(KernelChoice choice) {
  return choice == KernelChoice::kDense ? "dense" : "skip";
}

}  // namespace skipsoftmax
