// Real-structure attention inputs generated on the GPU, for benchmarks too large to build on the
// host: the same recipe as core/synthetic.cpp (an attention sink at position 0, a rotary-like band
// around the diagonal, a Gaussian far field), with a counter-based random stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace skipsoftmax::bench {

struct StructuredShape {
  float sink = 12.0f;   // score of every query against key 0
  float band = 8.0f;    // score of a query against its own position
  float noise = 0.75f;  // spread of the far-field scores
};

enum class Role { kQuery, kKey, kValue };

// Fills x [tokens, heads, dim] (16-bit, bf16 when is_bf16) for sequences of seq_len tokens laid
// end to end (positions restart at 0 every seq_len).
void fill_structured(void* x, bool is_bf16, std::int64_t tokens, int heads, int dim, int seq_len,
                     Role role, const StructuredShape& shape, std::uint64_t seed,
                     cudaStream_t stream);

}  // namespace skipsoftmax::bench
