// Tile shapes and KV visit orders shared by the CPU reference and the GPU kernels.
//
// The skip vote compares a tile's row maxima with the running maximum, so which tiles are
// skipped depends on the tile shape and on the order in which KV tiles are visited. The kernels
// and the reference enumerate tiles through these functions so that they agree exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skipsoftmax {

enum class KvOrder {
  kForward,          // tile 0, 1, ..., n-1
  kReverse,          // n-1, ..., 0: the diagonal first in causal prefill (FlashAttention-3's order)
  kSinkThenReverse,  // 0 (the attention sink), then n-1, ..., 1: sink and diagonal first
};

const char* to_string(KvOrder order);
// "forward", "reverse", "sink-reverse"; nullopt for anything else.
std::optional<KvOrder> parse_kv_order(std::string_view name);
std::string kv_order_names();  // for error messages: "forward, reverse, sink-reverse"

// The position'th tile visited out of n_tiles (0 <= position < n_tiles).
constexpr std::int64_t kv_tile_at(KvOrder order, std::int64_t position, std::int64_t n_tiles) {
  switch (order) {
    case KvOrder::kForward:
      return position;
    case KvOrder::kReverse:
      return n_tiles - 1 - position;
    case KvOrder::kSinkThenReverse:
      return position == 0 ? 0 : n_tiles - position;
  }
  return position;
}

struct TileShape {
  int tile_q = 128;  // query rows voting together (prefill)
  int tile_k = 128;  // keys per KV tile
  KvOrder order = KvOrder::kForward;
};

// Number of KV tiles a query tile visits in prefill. Rows [q_begin, q_end) of a query chunk of
// length q_len attend, when causal, bottom-right aligned: row i sees keys [0, kv_len - q_len + i].
// Tiles that no row of the query tile can see are not visited at all.
constexpr std::int64_t prefill_kv_tiles(std::int64_t q_end, std::int64_t q_len, std::int64_t kv_len,
                                        bool causal, int tile_k) {
  const std::int64_t keys = causal ? kv_len - q_len + q_end : kv_len;
  return (keys + tile_k - 1) / tile_k;
}

// KV tiles [begin, end).
struct TileRange {
  std::int64_t begin;
  std::int64_t end;
};

// The KV tiles rows [q_begin, q_end) of a causal chunk visit under a sliding window of `window`
// keys (row i at position p = kv_len - q_len + i sees keys [p - window + 1, p]; window 0: no
// window). The visit order applies to this range: position k of it is begin + kv_tile_at(...).
constexpr TileRange prefill_kv_tile_range(std::int64_t q_begin, std::int64_t q_end,
                                          std::int64_t q_len, std::int64_t kv_len, bool causal,
                                          std::int64_t window, int tile_k) {
  const std::int64_t end = prefill_kv_tiles(q_end, q_len, kv_len, causal, tile_k);
  if (window <= 0) return {0, end};
  const std::int64_t first_key = kv_len - q_len + q_begin - window + 1;
  return {first_key > 0 ? first_key / tile_k : 0, end};
}

// Splits of a decode launch at most (the decode kernels' combine holds one log-sum-exp a split in
// shared memory); the tools take the same bound for the CPU reference.
inline constexpr int kMaxDecodeSplits = 128;

// Split-KV decode: the KV tiles [0, n_tiles) are cut into num_splits contiguous ranges of
// ceil(n_tiles / num_splits) tiles (the last ones may be shorter or empty). Each split keeps its
// own running maximum; when it votes, every split after the first starts it from the row maxima
// of tile 0 (the attention sink), so that its far field meets the maximum one long pass would.
constexpr TileRange split_tile_range(std::int64_t n_tiles, int num_splits, int split) {
  const std::int64_t per = (n_tiles + num_splits - 1) / num_splits;
  const std::int64_t b = per * split < n_tiles ? per * split : n_tiles;
  const std::int64_t e = b + per < n_tiles ? b + per : n_tiles;
  return {b, e};
}

}  // namespace skipsoftmax
