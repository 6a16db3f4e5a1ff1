#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "structured_inputs.cuh"

namespace skipsoftmax::bench {
namespace {

// splitmix64: one independent 64-bit draw per counter.
__device__ std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ float normal(std::uint64_t counter) {
  const std::uint64_t r = mix(counter);
  const float u1 = (static_cast<float>(r >> 40) + 0.5f) * 0x1.0p-24f;
  const float u2 = static_cast<float>((r >> 16) & 0xffffff) * 0x1.0p-24f;
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}

template <typename T>
__global__ void fill_kernel(T* x, std::int64_t n, int heads, int dim, int seq_len, Role role,
                            StructuredShape shape, std::uint64_t seed) {
  const int pairs = max(1, dim / 8);
  const int first_noise = min(dim, 1 + 2 * pairs);
  const float root_dim = sqrtf(static_cast<float>(dim));
  const float sink_amp = sqrtf(shape.sink * root_dim);
  const float band_amp = sqrtf(shape.band * root_dim / pairs);
  const float noise_std =
      sqrtf(shape.noise * root_dim / sqrtf(static_cast<float>(max(1, dim - first_noise))));
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % dim);
    const std::int64_t token = i / dim / heads;
    const int pos = static_cast<int>(token % seq_len);
    float v;
    if (role == Role::kValue) {
      v = normal(seed ^ static_cast<std::uint64_t>(i));
    } else if (d == 0) {
      v = role == Role::kQuery || pos == 0 ? sink_amp : 0.f;
    } else if (d < first_noise) {
      const int f = (d - 1) / 2;
      const float wavelength = 64.f * powf(64.f, static_cast<float>(f) / pairs);
      const float phase = 2.f * 3.14159265358979f * static_cast<float>(pos) / wavelength;
      v = band_amp * ((d - 1) % 2 == 0 ? cosf(phase) : sinf(phase));
    } else {
      v = noise_std * normal(seed ^ static_cast<std::uint64_t>(i));
    }
    x[i] = static_cast<T>(v);
  }
}

}  // namespace

void fill_structured(void* x, bool is_bf16, std::int64_t tokens, int heads, int dim, int seq_len,
                     Role role, const StructuredShape& shape, std::uint64_t seed,
                     cudaStream_t stream) {
  const std::int64_t n = tokens * heads * dim;
  const int blocks = 132 * 16;
  if (is_bf16) {
    fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(x), n, heads, dim, seq_len,
                                            role, shape, seed);
  } else {
    fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<__half*>(x), n, heads, dim, seq_len, role,
                                            shape, seed);
  }
}

}  // namespace skipsoftmax::bench
