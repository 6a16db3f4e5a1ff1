// GGUF blocks to bf16 or fp16 on the device, one thread per value. The arithmetic repeats
// gguf.cpp's CPU dequantizer operation by operation with round-to-nearest intrinsics (no fused
// multiply-adds, which nvcc would otherwise form), so that both agree bit for bit after rounding.
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "bits16.h"
#include "common/launch_check.h"
#include "ops.h"

namespace skipsoftmax::engine {
namespace {

using gguf::GgmlType;

__device__ float half_at(const std::uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// Value j of one block (layouts in gguf.cpp's dequantize_block).
template <GgmlType kType>
__device__ float block_value(const std::uint8_t* b, int j) {
  if constexpr (kType == GgmlType::kQ4_0) {  // d, 16 bytes: low nibbles are values 0..15
    const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
    return __fmul_rn(static_cast<float>(q - 8), half_at(b));
  } else if constexpr (kType == GgmlType::kQ4_1) {  // d, m, 16 bytes of nibbles
    const int q = j < 16 ? (b[4 + j] & 0xF) : (b[4 + j - 16] >> 4);
    return __fadd_rn(__fmul_rn(static_cast<float>(q), half_at(b)), half_at(b + 2));
  } else if constexpr (kType == GgmlType::kQ5_0) {  // d, 32 high bits, 16 bytes of nibbles
    const std::uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | (std::uint32_t{b[5]} << 24);
    const int q = j < 16 ? (b[6 + j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10)
                         : (b[6 + j - 16] >> 4) | static_cast<int>((qh >> (j - 16 + 12)) & 0x10);
    return __fmul_rn(static_cast<float>(q - 16), half_at(b));
  } else if constexpr (kType == GgmlType::kQ8_0) {  // d, 32 signed bytes
    return __fmul_rn(static_cast<float>(static_cast<std::int8_t>(b[2 + j])), half_at(b));
  } else if constexpr (kType == GgmlType::kQ4_K) {
    // d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes: 4 chunks of 64 values, each 32
    // bytes whose low nibbles are the chunk's first 32 values and high nibbles the next 32.
    const int chunk = j / 64, r = j % 64;
    const int sub = 2 * chunk + (r >= 32);
    const std::uint8_t* s = b + 4;
    int sc, mn;
    if (sub < 4) {
      sc = s[sub] & 63;
      mn = s[sub + 4] & 63;
    } else {
      sc = (s[sub + 4] & 0xF) | ((s[sub - 4] >> 6) << 4);
      mn = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
    }
    const std::uint8_t byte = b[16 + 32 * chunk + r % 32];
    const int q = r < 32 ? (byte & 0xF) : (byte >> 4);
    const float d1 = __fmul_rn(half_at(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(half_at(b + 2), static_cast<float>(mn));
    return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
  } else if constexpr (kType == GgmlType::kQ6_K) {
    // 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 signed scales, d; two halves of 128
    // values, each four groups of 32 sharing ql/qh bytes.
    const int half = j / 128, r = j % 128, group = r / 32, l = r % 32;
    const std::uint8_t* ql = b + 64 * half;
    const std::uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192 + 8 * half);
    const int low = group & 1 ? ql[l + 32] : ql[l];
    const int q = ((group < 2 ? low & 0xF : low >> 4) | (((qh[l] >> (2 * group)) & 3) << 4)) - 32;
    return __fmul_rn(half_at(b + 208), static_cast<float>(sc[l / 16 + 2 * group] * q));
  } else if constexpr (kType == GgmlType::kF16) {
    return half_at(b);
  } else {
    static_assert(kType == GgmlType::kF32);
    return __uint_as_float(b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t{b[3]} << 24));
  }
}

template <GgmlType kType, int kValues, int kBytes>
__global__ void dequantize_kernel(const std::uint8_t* src, bits16* dst, std::int64_t count,
                                  bool fp16) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    dst[i] = to_bits16(
        block_value<kType>(src + i / kValues * kBytes, static_cast<int>(i % kValues)), fp16);
  }
}

// bf16 values: copied as they are, or rounded to fp16.
__global__ void convert_bf16_kernel(const std::uint8_t* src, bits16* dst, std::int64_t count,
                                    bool fp16) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const auto b = static_cast<bits16>(src[2 * i] | (src[2 * i + 1] << 8));
    dst[i] = fp16 ? to_bits16(from_bits16(b, false), true) : b;
  }
}

constexpr int kThreads = 256;
// Enough blocks to fill the GPU; the grid-stride loops cover the rest.
constexpr std::int64_t kMaxBlocks = 1 << 16;

int blocks_for(std::int64_t count) {
  return static_cast<int>(std::min((count + kThreads - 1) / kThreads, kMaxBlocks));
}

template <GgmlType kType, int kValues, int kBytes>
void launch(const void* src, bits16* dst, std::int64_t count, bool fp16, cudaStream_t stream) {
  dequantize_kernel<kType, kValues, kBytes><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<const std::uint8_t*>(src), dst, count, fp16);
}

}  // namespace

void dequantize(GgmlType type, const void* src, bits16* dst, std::int64_t count,
                cudaStream_t stream, DType dtype) {
  if (count <= 0) return;
  const bool fp16 = dtype == DType::kF16;
  if (count % gguf::block_values(type) != 0) {
    throw std::invalid_argument("dequantize: " + std::to_string(count) + " values are not whole " +
                                gguf::type_name(static_cast<std::uint32_t>(type)) + " blocks");
  }
  switch (type) {
    case GgmlType::kQ4_0:
      launch<GgmlType::kQ4_0, 32, 18>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kQ4_1:
      launch<GgmlType::kQ4_1, 32, 20>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kQ5_0:
      launch<GgmlType::kQ5_0, 32, 22>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kQ8_0:
      launch<GgmlType::kQ8_0, 32, 34>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kQ4_K:
      launch<GgmlType::kQ4_K, 256, 144>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kQ6_K:
      launch<GgmlType::kQ6_K, 256, 210>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kF16:
      launch<GgmlType::kF16, 1, 2>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kF32:
      launch<GgmlType::kF32, 1, 4>(src, dst, count, fp16, stream);
      break;
    case GgmlType::kBF16:
      convert_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
          static_cast<const std::uint8_t*>(src), dst, count, fp16);
      break;
  }
  common::check_last_launch("dequantize");
}

}  // namespace skipsoftmax::engine
