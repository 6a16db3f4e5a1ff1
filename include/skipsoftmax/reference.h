// The CPU reference attention: BLASST skip-softmax over KV tiles, in float64 arithmetic.
//
// It is the oracle for the GPU kernels and the engine of CPU calibration, so it emulates the
// kernels' tiling exactly: the vote is taken per query tile (prefill: tile_q rows of one query
// head; decode: all query heads of one GQA group) and KV tile, in the visit order of TileShape.
//
// The vote for a KV tile: m_new = max(m_run, rowmax(S_tile)); the tile is skipped when
// rowmax(S_tile) - m_new < ln(lambda) holds for every row (a row fully masked inside the tile
// votes skip). A skipped tile adds nothing to the row sums or the output. With lambda = 0 no tile
// is skipped and the result is bit-identical to the dense path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "skipsoftmax/threshold.h"
#include "skipsoftmax/tiling.h"

namespace skipsoftmax {

struct SequenceStats {
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;  // L used for the lambda lookup
  double lambda = 0.0;
  std::int64_t tiles_total = 0;  // (query tile or GQA group, KV tile) pairs visited
  std::int64_t tiles_skipped = 0;
  // Share of softmax mass in skipped tiles: per row, sum over skipped tiles of exp(x - x_max)
  // over the same sum over all visited tiles (x_max the row's true maximum), averaged over rows.
  double mass_share = 0.0;
  double mass_share_max = 0.0;  // the largest per-row share
  std::int64_t nan_rows = 0;    // output rows (token, query head) holding NaN

  double sparsity() const {
    return tiles_total ? static_cast<double>(tiles_skipped) / static_cast<double>(tiles_total)
                       : 0.0;
  }
};

struct AttentionStats {
  std::vector<SequenceStats> sequences;
  std::int64_t tiles_total = 0;
  std::int64_t tiles_skipped = 0;
  double mass_share = 0.0;  // row-weighted mean over sequences
  std::int64_t nan_rows = 0;

  double sparsity() const {
    return tiles_total ? static_cast<double>(tiles_skipped) / static_cast<double>(tiles_total)
                       : 0.0;
  }
};

struct PrefillProblem {
  // Inputs widened to float (fp16 and bf16 widen exactly).
  const float* q = nullptr;  // [total_q, num_heads_q, head_dim]
  const float* k = nullptr;  // [total_k, num_heads_kv, head_dim]
  const float* v = nullptr;  // [total_k, num_heads_kv, head_dim]
  int num_heads_q = 0;
  int num_heads_kv = 0;  // num_heads_q % num_heads_kv == 0 (GQA, MQA)
  int head_dim = 0;
  std::vector<std::int64_t> cu_seqlens_q;  // [batch + 1], starts at 0
  std::vector<std::int64_t> cu_seqlens_k;  // [batch + 1]; kv_len >= q_len per sequence if causal
  bool causal = false;                     // bottom-right aligned
  // Sliding window (local layers, e.g. Gemma 3): with window W > 0 the query at position p sees
  // keys [p - W + 1, p] only. Needs causal. 0: no window.
  std::int64_t window = 0;
  std::optional<double> softmax_scale;  // default 1 / sqrt(head_dim)
};

struct PagedKvCache {
  const float* k_pages = nullptr;  // [num_pages, page_size, num_heads_kv, head_dim]
  const float* v_pages = nullptr;  // [num_pages, page_size, num_heads_kv, head_dim]
  std::int64_t num_pages = 0;
  int page_size = 0;
  std::vector<std::int32_t> page_table;  // [batch, max_pages_per_seq], row-major
  int max_pages_per_seq = 0;
  std::vector<std::int64_t> seq_lens;  // [batch] cached tokens per sequence
};

struct DecodeProblem {
  const float* q = nullptr;  // [batch, q_len, num_heads_q, head_dim]
  // New tokens per sequence, already in the cache: token i of a sequence of L cached tokens sits
  // at position L - q_len + i and sees keys [0, L - q_len + i] (speculative verification). Its
  // rows join the GQA group's (row i * group + head): one vote per tile covers all of them.
  int q_len = 1;
  PagedKvCache kv;
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int head_dim = 0;
  // Sliding window (local layers): the token at position P sees keys [P - W + 1, P]; the split-KV
  // ranges cut the tiles from the one holding the first token's first key. Dense only. 0: none.
  std::int64_t window = 0;
  std::optional<double> softmax_scale;
};

// One visited tile, for checking the GPU's decisions tile by tile and for calibration.
struct TileRecord {
  std::int64_t seq = 0;
  int head = 0;              // prefill: query head; decode: KV head (the GQA group)
  std::int64_t q_tile = 0;   // prefill: query tile index in the sequence; decode: split index
  std::int64_t kv_tile = 0;  // KV tile index (keys [kv_tile * tile_k, ...))
  std::int64_t visit = 0;    // position in the visit order of its query tile or split
  bool skipped = false;
  bool operator==(const TileRecord&) const = default;
};

struct ReferenceOptions {
  Threshold threshold;  // dense, per-length table or flat lambda
  // When not empty: one lambda per sequence, read as the kernels read theirs (sequence_lambda of
  // threshold.h), in place of `threshold` (which must then be dense).
  std::vector<float> lambdas;
  // The default (128 x 128, forward) is not the kernels' vote: to reproduce their decisions pass
  // prefill_vote_tiles(head_dim, order), or {.tile_k = decode_tile_k(head_dim)} for decode.
  TileShape tiles;           // tile_q is unused by decode
  int num_splits = 1;        // decode only: split-KV parts, each with its own running maximum
  bool collect_mass = true;  // the mass share costs exponentials of the skipped tiles
  int num_threads = 0;       // 0: all hardware threads
  // When set, receives every visited tile, ordered by (seq, head, q_tile, visit) whatever the
  // number of threads.
  std::vector<TileRecord>* trace = nullptr;
  // When set, receives each output row's log-sum-exp in natural log: ln of the sum over the keys
  // computed (skipped tiles excluded) of exp(scale * q.k), -inf for a row that sees no key.
  // Prefill: [total_q, num_heads_q]; decode: [batch, q_len, num_heads_q].
  double* lse = nullptr;
};

// Checks shapes and arguments; throws std::invalid_argument naming the problem.
void validate(const PrefillProblem& p);
void validate(const DecodeProblem& p);

// out: [total_q, num_heads_q, head_dim]. Throws std::invalid_argument on a bad problem.
AttentionStats reference_prefill(const PrefillProblem& p, const ReferenceOptions& opt, double* out);
// out: [batch, q_len, num_heads_q, head_dim].
AttentionStats reference_decode(const DecodeProblem& p, const ReferenceOptions& opt, double* out);

}  // namespace skipsoftmax
