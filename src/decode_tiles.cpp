// The host-only part of decode.h: what the decode kernels vote on, known without CUDA (the CPU
// calibration pass and the reference need it in builds without nvcc).
#include "skipsoftmax/decode.h"

namespace skipsoftmax {

int decode_tile_k(int) {
  // 64 keys x all query heads of a GQA group, as TensorRT-LLM's XQA decode votes: decode is
  // bandwidth bound, and a finer tile skips more V bytes at the same lambda.
  return 64;
}

}  // namespace skipsoftmax
