// The host-only part of decode.h: what the decode kernels vote on, known without CUDA (the CPU
// reference and the calibration pass need it in builds without nvcc). The decode kernels' tile
// (attention/decode/decode_traits.cuh, kTileK) is checked against it at every launch.
#include "skipsoftmax/decode.h"

namespace skipsoftmax {

// 64 keys x all query heads of a GQA group: decode is bandwidth bound, and a finer tile skips
// more V bytes at the same lambda.
int decode_tile_k(int) { return 64; }

}  // namespace skipsoftmax
