// The host-only part of prefill.h: what the GPU kernels vote on, known without CUDA.
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {

const char* to_string(DType dtype) { return dtype == DType::kBF16 ? "bf16" : "fp16"; }

TileShape prefill_vote_tiles(int head_dim, KvOrder order) {
  // 64 rows: one consumer warpgroup. 128 keys per KV tile, 64 for head dim 256 (registers).
  return {64, head_dim <= 128 ? 128 : 64, order};
}

}  // namespace skipsoftmax
