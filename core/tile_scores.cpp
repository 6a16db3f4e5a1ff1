#include "tile_scores.h"

namespace skipsoftmax {

__attribute__((target_clones("avx2", "default"))) void dot_rows(const double* q, const double* kt,
                                                                int head_dim, int cols, int stride,
                                                                double* acc) {
  for (int j = 0; j < cols; ++j) acc[j] = 0.0;
  for (int d = 0; d < head_dim; ++d) {
    const double qd = q[d];
    const double* krow = kt + static_cast<std::ptrdiff_t>(d) * stride;
    for (int j = 0; j < cols; ++j) acc[j] += qd * krow[j];
  }
}

}  // namespace skipsoftmax
