// Calibration statistics: the critical lambda of every voting tile, in one pass.
//
// The vote on KV tile t of a query tile (prefill) or of one split of a GQA group (decode) skips it
// iff, for every row r,  rowmax_t(S_r) - max(m_run_r, rowmax_t(S_r)) < ln(lambda),  where m_run_r
// is the row's maximum over the tiles visited before t. m_run does not depend on lambda: a tile is
// skipped only when its maximum lies below m_run (lambda < 1), so skipping never lowers m_run.
// Hence each tile has a critical log-lambda
//     c_t = max over rows of (rowmax_t - max(m_run, rowmax_t))   (<= 0; 0 when it raises a maximum)
// and is skipped at lambda exactly when c_t < ln(lambda). With lambda = S / L (L the sequence's KV
// length), tile t is skipped at scale S exactly when S > S_t = exp(c_t) * L, its critical scale.
// One pass that records c_t and the tile's softmax mass gives the sparsity s(S) and the skipped
// mass share m(S) at every S, for any table.
//
// The pass enumerates tiles exactly as the kernels vote (prefill_vote_tiles(): 64 query rows x 128
// or 64 keys, sink-then-reverse; decode: all query heads of a GQA group x decode_tile_k(d) keys per
// split, forward) and computes scores as the CPU reference does (tile_scores.h), so that
// c_t < ln(lambda) reproduces reference_prefill's and reference_decode's decisions exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "skipsoftmax/reference.h"
#include "skipsoftmax/tiling.h"

namespace skipsoftmax {

// One work unit of the pass: the KV tiles one query tile (prefill) or one split (decode) visits.
struct StatsItem {
  std::int64_t seq = 0;
  int head = 0;                 // prefill: query head; decode: KV head (the GQA group)
  std::int64_t q_tile = 0;      // prefill: query tile index in the sequence; decode: split index
  std::int64_t q_begin = 0;     // prefill: rows [q_begin, q_end) of the sequence's queries
  std::int64_t q_end = 0;       // decode: 0, 1 (the one new token)
  std::int64_t tile_begin = 0;  // KV tiles [tile_begin, tile_begin + tile_count), visited in
  std::int64_t tile_count = 0;  // the order of TileStats::order over that range
  std::int64_t offset = 0;      // index of the item's first visited tile in TileStats' arrays
};

// Per visited tile, items ordered by (seq, head, q_tile) and tiles by visit: the order of the
// reference's trace (ReferenceOptions::trace).
struct TileStats {
  KvOrder order = KvOrder::kForward;
  int tile_k = 0;
  std::vector<StatsItem> items;
  std::vector<double> log_crit;  // [tiles] c_t; NaN when a NaN score reaches the vote (never skips)
  // [tiles] sum over the item's rows of the share of the row's softmax mass (over every tile the
  // row visits, all splits of a decode row included) that lies in this tile.
  std::vector<double> mass;
  std::vector<std::int64_t> kv_len;  // [batch] L of the lambda lookup
  std::vector<std::int64_t> rows;    // [batch] rows with a finite maximum: the mass denominator

  std::int64_t tiles() const { return static_cast<std::int64_t>(log_crit.size()); }
  // The KV tile index of the pos'th tile item `it` visits.
  std::int64_t kv_tile(const StatsItem& it, std::int64_t pos) const {
    return it.tile_begin + kv_tile_at(order, pos, it.tile_count);
  }
};

struct StatsOptions {
  TileShape tiles;      // prefill: tile_q x tile_k and the order; decode: tile_k (forward)
  int num_splits = 1;   // decode only
  int num_threads = 0;  // 0: all hardware threads
};

// The layout a pass fills: the problem's items with their offsets, kv_len, and zeroed per-tile
// arrays and row counts.
TileStats prefill_stats_layout(const PrefillProblem& p, const TileShape& tiles);
TileStats decode_stats_layout(const DecodeProblem& p, int tile_k, int num_splits);

// The CPU pass, float64. V is not read (p.v may be null). Throws std::invalid_argument on a bad
// problem, as the reference does.
TileStats prefill_tile_stats(const PrefillProblem& p, const StatsOptions& opt);
TileStats decode_tile_stats(const DecodeProblem& p, const StatsOptions& opt);

// Skip decision of a tile at lambda (0: dense), the reference's rule.
inline bool skipped_at(double log_crit, double lambda) {
  return lambda > 0.0 && log_crit < std::log(lambda);
}

// The distribution of critical scales log(S_t) of many tiles (any mix of sequences, layers and
// lengths, since S_t carries its own L) with their mass, in buckets of 1/kPerNat in log S. Pooled
// statistics add histograms; s(S) and m(S) interpolate linearly in log S inside a bucket, so both
// are continuous and nondecreasing in S.
class CriticalHistogram {
 public:
  static constexpr double kLogMin = -32.0;  // below: counted in the first bucket
  static constexpr double kLogMax = 24.0;   // S_t < e^24 (L up to 2.6e10)
  static constexpr int kPerNat = 64;
  static constexpr int kBuckets = static_cast<int>((kLogMax - kLogMin) * kPerNat);

  // One tile of a sequence of KV length kv_len. log_crit >= 0 (the tile raises a row maximum) or
  // NaN: never skipped at any S < L.
  void add_tile(double log_crit, double mass, std::int64_t kv_len);
  // Rows of a sequence: the denominator of the mass share.
  void add_rows(std::int64_t rows) { rows_ += rows; }
  void merge(const CriticalHistogram& other);

  std::int64_t tiles() const { return tiles_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t min_kv_len() const { return min_kv_len_; }  // 0 when empty

  // Share of tiles skipped at scale S (lambda = S / L per tile), in [0, 1].
  double sparsity_at(double scale) const;
  // Mean over rows of the share of softmax mass in tiles skipped at S.
  double mass_share_at(double scale) const;
  // The smallest S with sparsity_at(S) >= target (interpolated in log S); nullopt when even
  // S -> cap does not reach it (cap: the smallest L pooled, where the guard turns the table off).
  std::optional<double> scale_for_sparsity(double target) const;
  // Sparsity as S -> min_kv_len(): the most any table can reach on these tiles.
  double max_sparsity() const;

  nlohmann::json to_json() const;
  // Throws std::invalid_argument("<context>: ...") on a malformed object.
  static CriticalHistogram from_json(const nlohmann::json& j, const std::string& context);

  bool operator==(const CriticalHistogram&) const = default;

 private:
  double cumulative(double log_scale, bool mass) const;
  void ensure_buckets();

  std::vector<std::int64_t> counts_;  // [kBuckets] when any tile was added, else empty
  std::vector<double> masses_;        // [kBuckets]
  std::int64_t tiles_ = 0;            // every tile, never-skipped ones included
  std::int64_t rows_ = 0;
  std::int64_t min_kv_len_ = 0;
};

// Per-sequence histograms of a pass.
std::vector<CriticalHistogram> sequence_histograms(const TileStats& stats);

}  // namespace skipsoftmax
