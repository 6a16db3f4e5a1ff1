// Host API of the prefill kernels: argument checks, TMA descriptors, dispatch.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "prefill_launch.cuh"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax {
namespace {

using prefill::Params;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("prefill: ") + what + ": " + cudaGetErrorString(err));
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                cudaEnableDefault, &status),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (status != cudaDriverEntryPointSuccess || ptr == nullptr) {
      throw std::runtime_error("prefill: the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// [rows, heads, head_dim] 16-bit tensor seen by TMA as (head_dim, heads, rows) with boxes of
// 64 x 1 x box_rows, 128-byte swizzled. Rows past `rows` read as zeros.
CUtensorMap make_tensor_map(const void* base, std::int64_t rows, int heads, int head_dim,
                            int box_rows, DType dtype) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * 2,
                                 static_cast<cuuint64_t>(heads) * head_dim * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(
      &map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream msg;
    msg << "prefill: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a [" << rows
        << ", " << heads << ", " << head_dim << "] tensor";
    throw std::runtime_error(msg.str());
  }
  return map;
}

prefill::DeviceThreshold device_threshold(const Threshold& t) {
  prefill::DeviceThreshold d{};
  if (t.kind() == Threshold::Kind::kFlat) d.flat_lambda = static_cast<float>(t.flat_lambda());
  if (t.kind() == Threshold::Kind::kTable) {
    const auto& rows = t.scale_table().rows();
    d.rows = static_cast<int>(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      d.bins[i] = static_cast<int>(rows[i].seqlen_bin);
      d.scales[i] = static_cast<float>(rows[i].scale);
    }
  }
  return d;
}

template <bool kSkip>
void launch(const Params& params, const PrefillArguments& a, cudaStream_t stream) {
  const bool bf16 = a.dtype == DType::kBF16;
#define SKIPSOFTMAX_FAMILY(BF16, D)                                   \
  if (bf16 == BF16 && a.head_dim == D) {                              \
    prefill::launch_family<BF16, D, kSkip>(params, a.causal, stream); \
    return;                                                           \
  }
  SKIPSOFTMAX_FAMILY(true, 128)
#if SKIPSOFTMAX_ALL_KERNELS
  SKIPSOFTMAX_FAMILY(true, 64)
  SKIPSOFTMAX_FAMILY(true, 256)
  SKIPSOFTMAX_FAMILY(false, 64)
  SKIPSOFTMAX_FAMILY(false, 128)
  SKIPSOFTMAX_FAMILY(false, 256)
#endif
#undef SKIPSOFTMAX_FAMILY
  throw std::invalid_argument("prefill: no kernel compiled for this dtype and head dim");
}

}  // namespace

std::string can_implement(const PrefillArguments& a) {
  std::ostringstream why;
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    why << "head_dim " << a.head_dim << " is not supported (64, 128 or 256)";
  } else if (!SKIPSOFTMAX_ALL_KERNELS && (a.dtype != DType::kBF16 || a.head_dim != 128)) {
    why << "this build has only the bf16 head-dim-128 kernels (configure with "
           "-DSKIPSOFTMAX_ALL_KERNELS=ON)";
  } else if (a.num_heads_q <= 0 || a.num_heads_kv <= 0 || a.num_heads_q % a.num_heads_kv != 0) {
    why << "Hq % Hkv != 0 (Hq=" << a.num_heads_q << ", Hkv=" << a.num_heads_kv << ")";
  } else if (!a.q || !a.k || !a.v || !a.out || !a.cu_seqlens_q || !a.cu_seqlens_k) {
    why << "q, k, v, out and both cu_seqlens must be device pointers";
  } else if (a.batch <= 0 || a.max_seqlen_q <= 0 || a.max_seqlen_k <= 0) {
    why << "batch, max_seqlen_q and max_seqlen_k must be positive";
  } else if (a.total_q <= 0 || a.total_k <= 0 || a.total_q >= (std::int64_t{1} << 31) ||
             a.total_k >= (std::int64_t{1} << 31)) {
    why << "total_q and total_k must lie in [1, 2^31)";
  } else if ((reinterpret_cast<std::uintptr_t>(a.q) | reinterpret_cast<std::uintptr_t>(a.k) |
              reinterpret_cast<std::uintptr_t>(a.v) | reinterpret_cast<std::uintptr_t>(a.out)) %
                 16 !=
             0) {
    why << "q, k, v and out must be 16-byte aligned";
  } else if (a.softmax_scale && !(std::isfinite(*a.softmax_scale) && *a.softmax_scale > 0)) {
    why << "softmax scale must be finite and > 0";
  } else if (a.threshold.kind() == Threshold::Kind::kTable &&
             a.threshold.scale_table().rows().size() > prefill::kMaxTableRows) {
    why << "scale tables hold at most " << prefill::kMaxTableRows << " rows";
  } else if (a.threshold.kind() == Threshold::Kind::kTable &&
             a.threshold.scale_table().rows().back().seqlen_bin >= (std::int64_t{1} << 31)) {
    why << "scale table bins must be below 2^31";
  }
  return why.str();
}

std::size_t prefill_workspace_size(const PrefillArguments&) { return 0; }

KernelChoice run_prefill(const PrefillArguments& a, void*, void* stream) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("prefill: " + why);
  }
  const KernelChoice choice =
      a.force_kernel.value_or(choose_prefill_kernel(a.threshold, a.max_seqlen_k, a.kv_history));
  constexpr int kBlockM = prefill::TileConfig<128>::kBlockM;  // the same for every head dim
  const int block_n = prefill_vote_tiles(a.head_dim, a.kv_order).tile_k;
  Params p{};
  p.tma_q = make_tensor_map(a.q, a.total_q, a.num_heads_q, a.head_dim, kBlockM, a.dtype);
  p.tma_k = make_tensor_map(a.k, a.total_k, a.num_heads_kv, a.head_dim, block_n, a.dtype);
  p.tma_v = make_tensor_map(a.v, a.total_k, a.num_heads_kv, a.head_dim, block_n, a.dtype);
  p.out = a.out;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.batch = a.batch;
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.num_m_blocks = (a.max_seqlen_q + kBlockM - 1) / kBlockM;
  constexpr double kLog2e = 1.4426950408889634;
  const double scale = a.softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  p.kv_order = static_cast<int>(a.kv_order);
  p.threshold = device_threshold(a.threshold);
  p.stats = a.stats;
  const auto s = static_cast<cudaStream_t>(stream);
  if (choice == KernelChoice::kSkip) {
    launch<true>(p, a, s);
  } else {
    launch<false>(p, a, s);
  }
  return choice;
}

bool hopper_gpu_available() {
  static const bool available = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      return false;
    }
    cudaDeviceProp prop{};
    return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9;
  }();
  return available;
}

}  // namespace skipsoftmax
