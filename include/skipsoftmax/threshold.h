// Skip thresholds: per-length scale tables, the guard, and the dense/skip dispatch rule.
//
// A table is rows [seqlen_bin, S] with strictly increasing bins and finite S > 0 (the GPU kernels
// take at most kMaxKernelTableRows rows, with bins below 2^31; can_implement says so). For a
// sequence whose KV length is L, the last row with seqlen_bin <= L gives S and lambda = S / L. The
// guard makes the sequence exact dense (lambda = 0) when L is below the first bin or S >= L
// (compared in float, as the kernels compare it).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace skipsoftmax {

// Rows of a scale table the GPU kernels take (a table lives in the kernels' parameters): at 2k
// bins from 4k, contexts up to 133k. Calibration and the engine config refuse longer tables.
inline constexpr int kMaxKernelTableRows = 64;

// KV length that no table ever reaches: "this policy never skips".
inline constexpr std::int64_t kNeverSkippable = std::numeric_limits<std::int64_t>::max();

struct ScaleTableRow {
  std::int64_t seqlen_bin;  // first KV length this row applies to (> 0)
  double scale;             // S: lambda = S / L
  bool operator==(const ScaleTableRow&) const = default;
};

class ScaleTable {
 public:
  ScaleTable() = default;  // empty: dense at every length
  // Throws std::invalid_argument naming the first offending row.
  explicit ScaleTable(std::vector<ScaleTableRow> rows);

  const std::vector<ScaleTableRow>& rows() const { return rows_; }
  bool empty() const { return rows_.empty(); }

  // lambda for one sequence of KV length kv_len, with the guard applied (0 means exact dense).
  double lambda_for(std::int64_t kv_len) const;
  // Smallest L with lambda_for(L) > 0, or kNeverSkippable for an empty table.
  std::int64_t first_skippable_length() const;

  bool operator==(const ScaleTable&) const = default;

 private:
  std::vector<ScaleTableRow> rows_;
};

// What a phase runs: exact dense, a per-length table, or a flat lambda (length-independent).
class Threshold {
 public:
  enum class Kind { kDense, kTable, kFlat };

  Threshold() = default;  // dense
  static Threshold dense() { return {}; }
  static Threshold table(ScaleTable t);
  // lambda in [0, 1); 0 is dense. Throws std::invalid_argument otherwise.
  static Threshold flat(double lambda);

  Kind kind() const { return kind_; }
  const ScaleTable& scale_table() const { return table_; }
  double flat_lambda() const { return flat_lambda_; }

  double lambda_for(std::int64_t kv_len) const;
  std::int64_t first_skippable_length() const;
  bool never_skips() const { return first_skippable_length() == kNeverSkippable; }

  // "dense", "flat lambda=...", "table of N rows, first skippable L=...".
  std::string describe() const;

  bool operator==(const Threshold&) const = default;

 private:
  Kind kind_ = Kind::kDense;
  ScaleTable table_;
  double flat_lambda_ = 0.0;
};

// A per-sequence lambda as the kernels read it from device memory: x in (0, 1), else 0 (dense;
// NaN included), and 0 for a sequence without keys.
inline double sequence_lambda(float x, std::int64_t kv_len) {
  return kv_len > 0 && x > 0.f && x < 1.f ? static_cast<double>(x) : 0.0;
}

enum class KernelChoice { kDense, kSkip };

// Host dispatch for one prefill launch (max_kv_len: the longest KV length of the batch, history
// included): the separately compiled dense kernel when no sequence of the batch can skip, else
// the skip kernel, in which each sequence guards itself.
// - A batch of one sequence is decided exactly: it runs the dense kernel whenever its own lambda
//   is 0 (below the first bin, or a row with S >= L).
// - A larger batch runs the dense kernel when its longest sequence cannot reach the first
//   skippable length.
KernelChoice choose_prefill_kernel(const Threshold& threshold, std::int64_t max_kv_len, int batch);

// Host dispatch for one decode launch: the dense kernel when no sequence of the batch can skip
// (a batch of one: its own lambda is 0; a larger batch: the longest sequence is below the first
// skippable length), else the skip kernel (each sequence guards itself on the device).
KernelChoice choose_decode_kernel(const Threshold& threshold, std::int64_t max_kv_len, int batch);

const char* to_string(KernelChoice choice);

}  // namespace skipsoftmax
