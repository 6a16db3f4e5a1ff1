// The calibration statistics pass (calibration.h) on the GPU: the same items, tiles, visit orders
// and per-tile (critical log-lambda, mass) as the CPU pass, in fp32 arithmetic from fp32, fp16 or
// bf16 inputs. A plain CUDA kernel (calibration_stats.cu), no tensor cores: one CTA per query tile
// (prefill) or per GQA group of a sequence (decode, all its splits). Built into the CUDA library
// only; this header is free of CUDA headers.
//
// fp32 scores differ from the float64 pass by rounding, so a tile whose gap lies within rounding of
// a threshold can fall the other way; the pooled curves agree to a fraction of a percent. NaN
// inputs are outside what this pass promises (fmaxf drops NaN).
#pragma once

#include "calibration.h"

namespace skipsoftmax {

enum class StatsDtype { kF32, kF16, kBF16 };

// q and k in device memory: prefill q [total_q, heads_q, d] and k [total_k, heads_kv, d]; decode q
// [batch, heads_q, d] and k the pages [num_pages, page_size, heads_kv, d].
struct DeviceQk {
  StatsDtype dtype = StatsDtype::kF32;
  const void* q = nullptr;
  const void* k = nullptr;
};

// The problems' shapes, lengths and page tables are read from `shape` (its q, k, v pointers are
// ignored); `stream` is a cudaStream_t. Throws std::invalid_argument on a bad problem or an
// unsupported shape (more than 64 rows per vote, head dim above 256, tile_k other than 32, 64 or
// 128), std::runtime_error on a CUDA error.
TileStats prefill_tile_stats_device(const PrefillProblem& shape, const DeviceQk& qk,
                                    const StatsOptions& opt, void* stream);
TileStats decode_tile_stats_device(const DecodeProblem& shape, const DeviceQk& qk,
                                   const StatsOptions& opt, void* stream);

// The same on host float tensors (copied to the device), for the tool and the tests.
TileStats prefill_tile_stats_cuda(const PrefillProblem& p, const StatsOptions& opt);
TileStats decode_tile_stats_cuda(const DecodeProblem& p, const StatsOptions& opt);

}  // namespace skipsoftmax
