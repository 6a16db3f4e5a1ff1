// Host API of the prefill kernels: argument checks, TMA descriptors, dispatch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "../common/device_threshold.h"
#include "../common/families.h"
#include "../common/paged_kv_check.h"
#include "../common/tensor_map.h"
#include "prefill_launch.cuh"
#include "skipsoftmax/prefill.h"
#include "softmax_scale.h"

namespace skipsoftmax {
namespace {

using common::kMaxGridYZ;
using common::make_tensor_map;
using prefill::Params;

template <bool kSkip>
void launch(const Params& params, const PrefillArguments& a, cudaStream_t stream) {
  common::dispatch_family(a.dtype == DType::kBF16, a.head_dim, "prefill",
                          [&]<bool kBf16, int kD>() {
                            prefill::launch_family<kBf16, kD, kSkip>(params, a.causal, stream);
                          });
}

bool paged(const PrefillArguments& a) { return a.paged_kv.k_pages != nullptr; }
const void* kv_k(const PrefillArguments& a) { return paged(a) ? a.paged_kv.k_pages : a.k; }
const void* kv_v(const PrefillArguments& a) { return paged(a) ? a.paged_kv.v_pages : a.v; }

std::string check_paged(const PrefillArguments& a) {
  if (!paged(a)) return {};
  const PagedKv& kv = a.paged_kv;
  if (kv.v_pages == nullptr || kv.page_table == nullptr) {
    return "paged KV needs k_pages, v_pages and page_table";
  }
  return common::paged_kv_problem(kv, a.batch, a.max_seqlen_k, "max_seqlen_k");
}

// Paged KV is selected by k_pages alone: the other fields of a PagedKv set without it would be
// ignored, and K and V read as contiguous tensors.
bool partly_paged(const PrefillArguments& a) {
  const PagedKv& kv = a.paged_kv;
  return !paged(a) && (kv.v_pages != nullptr || kv.page_table != nullptr || kv.num_pages != 0 ||
                       kv.page_size != 0 || kv.max_pages_per_seq != 0);
}

}  // namespace

std::string can_implement(const PrefillArguments& a) {
  std::ostringstream why;
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    why << "head_dim " << a.head_dim << " is not supported (64, 128 or 256)";
  } else if (!common::family_compiled(a.dtype == DType::kBF16, a.head_dim)) {
    why << "this build has only the bf16 head-dim-128 kernels (configure with "
           "-DSKIPSOFTMAX_ALL_KERNELS=ON)";
  } else if (a.num_heads_q <= 0 || a.num_heads_kv <= 0 || a.num_heads_q % a.num_heads_kv != 0) {
    why << "Hq % Hkv != 0 (Hq=" << a.num_heads_q << ", Hkv=" << a.num_heads_kv << ")";
  } else if (partly_paged(a)) {
    why << "paged_kv is set but its k_pages is NULL (paged KV needs k_pages, v_pages and "
           "page_table; contiguous KV leaves every paged_kv field empty)";
  } else if (!a.q || !a.out || !a.cu_seqlens_q || !a.cu_seqlens_k ||
             (!paged(a) && (!a.k || !a.v))) {
    why << "q, out, both cu_seqlens and k and v (or the KV pages) must be device pointers";
  } else if (const std::string paged_why = check_paged(a); !paged_why.empty()) {
    why << paged_why;
  } else if (a.window < 0 || (a.window > 0 && !a.causal)) {
    why << "a sliding window (" << a.window << ") needs a causal mask and must be positive";
  } else if (a.window > 0 &&
             (!a.threshold.never_skips() || a.lambdas != nullptr ||
              a.force_kernel.value_or(KernelChoice::kDense) != KernelChoice::kDense)) {
    why << "sliding-window launches run the dense kernel (skipping is not applied to local "
           "layers): pass a dense threshold";
  } else if (a.batch <= 0 || a.max_seqlen_q <= 0 || a.max_seqlen_k <= 0) {
    why << "batch, max_seqlen_q and max_seqlen_k must be positive";
  } else if (a.total_q <= 0 || a.total_k <= 0 || a.total_q >= (std::int64_t{1} << 31) ||
             a.total_k >= (std::int64_t{1} << 31)) {
    why << "total_q and total_k must lie in [1, 2^31)";
  } else if (a.max_seqlen_q > a.total_q || (!paged(a) && a.max_seqlen_k > a.total_k)) {
    why << "max_seqlen_q (" << a.max_seqlen_q << ") and max_seqlen_k (" << a.max_seqlen_k
        << ") cannot exceed total_q (" << a.total_q << ") and total_k (" << a.total_k << ")";
  } else if (a.batch > kMaxGridYZ || a.num_heads_q > kMaxGridYZ) {
    // The grid is (query tiles, Hq, batch).
    why << "batch (" << a.batch << ") and num_heads_q (" << a.num_heads_q << ") must be at most "
        << kMaxGridYZ;
  } else if ((reinterpret_cast<std::uintptr_t>(a.q) | reinterpret_cast<std::uintptr_t>(kv_k(a)) |
              reinterpret_cast<std::uintptr_t>(kv_v(a)) | reinterpret_cast<std::uintptr_t>(a.out)) %
                 16 !=
             0) {
    why << "q, k, v (or the pages) and out must be 16-byte aligned";
  } else if (const std::string s = softmax_scale_problem(a.softmax_scale); !s.empty()) {
    why << s;
  } else if (const std::string t = common::device_threshold_problem(a.threshold, a.lambdas);
             !t.empty()) {
    why << t;
  } else if ((reinterpret_cast<std::uintptr_t>(a.lse) |
              reinterpret_cast<std::uintptr_t>(a.lambdas)) %
                 alignof(float) !=
             0) {
    why << "lse and lambdas must be float32 arrays (4-byte aligned)";
  }
  return why.str();
}

// Per-sequence lambdas live on the device, unread by the host: they take the skip kernel, in
// which each sequence guards itself.
KernelChoice prefill_kernel_choice(const PrefillArguments& a) {
  if (a.lambdas != nullptr) return a.force_kernel.value_or(KernelChoice::kSkip);
  return a.force_kernel.value_or(choose_prefill_kernel(a.threshold, a.max_seqlen_k, a.batch));
}

std::size_t prefill_workspace_size(const PrefillArguments&) { return 0; }

KernelChoice run_prefill(const PrefillArguments& a, void*, void* stream) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("prefill: " + why);
  }
  const KernelChoice choice = prefill_kernel_choice(a);
  // Query rows per CTA: 64 a consumer warpgroup (the CTA's Q box and its grid's x extent).
  const int block_m = 64 * prefill::consumer_warpgroups(a.head_dim);
  const int block_n = prefill_vote_tiles(a.head_dim, a.kv_order).tile_k;
  Params p{};
  p.tma_q = make_tensor_map("prefill", a.q, a.total_q, a.num_heads_q, a.head_dim, block_m, a.dtype);
  if (paged(a)) {
    const PagedKv& kv = a.paged_kv;
    const std::int64_t rows = kv.num_pages * kv.page_size;
    const int box = std::min(kv.page_size, block_n);
    p.tma_k =
        make_tensor_map("prefill", kv.k_pages, rows, a.num_heads_kv, a.head_dim, box, a.dtype);
    p.tma_v =
        make_tensor_map("prefill", kv.v_pages, rows, a.num_heads_kv, a.head_dim, box, a.dtype);
    p.page_table = kv.page_table;
    p.max_pages_per_seq = kv.max_pages_per_seq;
    p.page_shift = std::countr_zero(static_cast<unsigned>(kv.page_size));
  } else {
    p.tma_k =
        make_tensor_map("prefill", a.k, a.total_k, a.num_heads_kv, a.head_dim, block_n, a.dtype);
    p.tma_v =
        make_tensor_map("prefill", a.v, a.total_k, a.num_heads_kv, a.head_dim, block_n, a.dtype);
  }
  p.window = a.window;
  p.out = a.out;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.batch = a.batch;
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.num_m_blocks = static_cast<int>((std::int64_t{a.max_seqlen_q} + block_m - 1) / block_m);
  p.scale_log2 = scale_log2(a.softmax_scale, a.head_dim);
  p.kv_order = static_cast<int>(a.kv_order);
  p.threshold = common::to_device(a.threshold, a.lambdas);
  p.stats = a.stats;
  p.lse = a.lse;
  const auto s = static_cast<cudaStream_t>(stream);
  if (choice == KernelChoice::kSkip) {
    launch<true>(p, a, s);
  } else {
    launch<false>(p, a, s);
  }
  return choice;
}

bool hopper_gpu_available() {
  int count = 0, device = 0, major = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();  // clear the "no device" error
    return false;
  }
  return major == 9;
}

}  // namespace skipsoftmax
