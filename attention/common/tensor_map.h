// TMA descriptors for the kernels' K/V (and Q) tensors, encoded on the host.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "skipsoftmax/prefill.h"

namespace skipsoftmax::common {

// The driver's cuTensorMapEncodeTiled, looked up once through the runtime (no libcuda link).
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled(const char* who) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [who] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &status);
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
      throw std::runtime_error(std::string(who) + ": the driver has no cuTensorMapEncodeTiled (" +
                               cudaGetErrorString(err) + ")");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// [rows, heads, head_dim] tensor of `element_bytes`-byte elements seen by TMA as (head_dim, heads,
// rows) with boxes of (128 bytes) x 1 x box_rows, 128-byte swizzled (16-byte chunk c of box row r
// lands at c ^ (r % 8)). Rows past `rows` read as zeros.
inline CUtensorMap make_tensor_map(
    const char* who, const void* base, std::int64_t rows, int heads, int head_dim, int box_rows,
    CUtensorMapDataType type, int element_bytes,
    CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  CUtensorMap map{};
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(head_dim) * element_bytes;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {row_bytes, static_cast<cuuint64_t>(heads) * row_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / element_bytes), 1,
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r =
      encode_tiled(who)(&map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream msg;
    msg << who << ": cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a [" << rows
        << ", " << heads << ", " << head_dim << "] tensor";
    throw std::runtime_error(msg.str());
  }
  return map;
}

// The kernels' 16-bit tensors: boxes of 64 elements x 1 x box_rows.
inline CUtensorMap make_tensor_map(
    const char* who, const void* base, std::int64_t rows, int heads, int head_dim, int box_rows,
    DType dtype, CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  return make_tensor_map(
      who, base, rows, heads, head_dim, box_rows,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
      promotion);
}

}  // namespace skipsoftmax::common
