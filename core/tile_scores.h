// The scores of one (rows x KV tile) block in float64, and how rows and paged keys are fetched,
// shared by the CPU reference and the CPU calibration pass: both must see bit-identical scores so
// that calibration's critical lambdas reproduce the reference's skip decisions exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace skipsoftmax {

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The softmax scale of a problem: the given one, else 1 / sqrt(head_dim).
inline double softmax_scale_or_default(const std::optional<double>& scale, int head_dim) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// `rows` rows of `dim` values, row r at first + r * stride, widened to double and packed.
inline std::vector<double> gather_rows(const float* first, std::ptrdiff_t stride, int rows,
                                       int dim) {
  std::vector<double> out(static_cast<std::size_t>(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    const float* src = first + r * stride;
    std::copy(src, src + dim, out.begin() + static_cast<std::ptrdiff_t>(r) * dim);
  }
  return out;
}

// The cache slot of `token` of a sequence whose page-table row is `pages` (paged_kv.h).
inline std::int64_t paged_slot(const std::int32_t* pages, int page_size, std::int64_t token) {
  return static_cast<std::int64_t>(pages[token / page_size]) * page_size + token % page_size;
}

// KV tile t (keys [t * tile_k, ...) of a sequence of len tokens) of KV head kvh from a paged
// cache of float pages [num_pages, page_size, num_heads_kv, head_dim]: K transposed into kt
// ([head_dim][tile_k]) and, when v_pages and vt are given, V into vt ([tile_k][head_dim]).
// Returns the tile's key count.
inline int load_paged_tile(const float* k_pages, const float* v_pages, const std::int32_t* pages,
                           int page_size, int num_heads_kv, int kvh, int head_dim, int tile_k,
                           std::int64_t t, std::int64_t len, double* kt, double* vt) {
  const std::int64_t k0 = t * tile_k;
  const int cols = static_cast<int>(std::min<std::int64_t>(tile_k, len - k0));
  for (int j = 0; j < cols; ++j) {
    const std::int64_t slot = paged_slot(pages, page_size, k0 + j);
    const std::int64_t base = (slot * num_heads_kv + kvh) * head_dim;
    for (int d = 0; d < head_dim; ++d) {
      kt[static_cast<std::size_t>(d) * tile_k + j] = k_pages[base + d];
      if (vt) vt[static_cast<std::size_t>(j) * head_dim + d] = v_pages[base + d];
    }
  }
  return cols;
}

// NaN-propagating maximum: a NaN score must poison its row, not vanish in std::max.
inline double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

// acc[j] = sum_d q[d] * kt[d][j] in index order of d, vectorized across j: each acc[j] is summed
// in the same order as a scalar dot product, so the result does not depend on the vector width.
// kt: [head_dim][stride], the key tile transposed.
void dot_rows(const double* q, const double* kt, int head_dim, int cols, int stride, double* acc);

// Scaled scores of KV tile t for `rows` query rows: s[r * stride + j] = (q(r) . k_j) * scale, or
// -inf where visible(r, t, j) is false; rowmax[r] is the row's maximum over the tile (-inf when
// nothing is visible, NaN when a visible score is NaN).
template <typename QRow, typename Visible>
void score_tile(int rows, int cols, int head_dim, int stride, double scale, std::int64_t t,
                const QRow& q, const double* kt, const Visible& visible, double* s,
                double* rowmax) {
  for (int r = 0; r < rows; ++r) {
    double* sr = s + static_cast<std::ptrdiff_t>(r) * stride;
    dot_rows(q(r), kt, head_dim, cols, stride, sr);
    double mx = kNegInf;
    for (int j = 0; j < cols; ++j) {
      sr[j] = visible(r, t, j) ? sr[j] * scale : kNegInf;
      mx = nan_max(mx, sr[j]);
    }
    rowmax[r] = mx;
  }
}

}  // namespace skipsoftmax
