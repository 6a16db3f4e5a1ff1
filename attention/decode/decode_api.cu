// Host API of the decode kernels: argument checks, the split heuristic, workspace, dispatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "../common/device_threshold.h"
#include "../common/families.h"
#include "../common/paged_kv_check.h"
#include "../common/tensor_map.h"
#include "decode_launch.cuh"
#include "skipsoftmax/decode.h"
#include "softmax_scale.h"

namespace skipsoftmax {
namespace {

using common::kMaxGridYZ;
using decode::kMaxSplits;

int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;  // an H100/H200 SXM
    }
    return sms;
  }();
  return count;
}

// CTAs of the kernel family a launch runs that one multiprocessor holds at once, from the
// runtime's occupancy calculator (once per family); where it cannot say (no GPU, as in the host
// tests), what it says on the H100/H200 for this build: 3 at head dim 64, 2 at 128, 1 at 256.
int ctas_per_sm(const DecodeArguments& a) {
  const bool bf16 = a.dtype == DType::kBF16;
  const bool skip = decode_kernel_choice(a) == KernelChoice::kSkip;
  const int dim_index = a.head_dim == 64 ? 0 : a.head_dim == 128 ? 1 : 2;
  static std::array<std::atomic<int>, 12> known{};  // 0: not asked yet
  std::atomic<int>& slot = known[(bf16 * 3 + dim_index) * 2 + skip];
  if (slot.load() == 0) {
    int ctas = 0;
    try {
      common::dispatch_family(bf16, a.head_dim, "decode", [&]<bool kBf16, int kD>() {
        ctas = skip ? decode::resident_ctas_family<kBf16, kD, true>()
                    : decode::resident_ctas_family<kBf16, kD, false>();
      });
    } catch (const std::invalid_argument&) {
      // Not compiled: can_implement refuses the launch; the count only sizes splits.
    }
    slot.store(ctas > 0 ? ctas : std::array{3, 2, 1}[dim_index]);
  }
  return slot.load();
}

template <bool kSkip>
void launch(const decode::Params& params, const DecodeArguments& a, cudaStream_t stream) {
  common::dispatch_family(a.dtype == DType::kBF16, a.head_dim, "decode", [&]<bool kBf16, int kD>() {
    decode::launch_family<kBf16, kD, kSkip>(params, a.batch, stream);
  });
}

}  // namespace

// Per-sequence lambdas live on the device, unread by the host: they take the skip kernel, in
// which each sequence guards itself.
KernelChoice decode_kernel_choice(const DecodeArguments& a) {
  if (a.lambdas != nullptr) return a.force_kernel.value_or(KernelChoice::kSkip);
  return a.force_kernel.value_or(choose_decode_kernel(a.threshold, a.max_seq_len, a.batch));
}

// Dense launches: as many splits as fit one wave of two CTAs per multiprocessor (one for head
// dim 256, whose tiles fill shared memory), rounded down so that no second, almost empty wave
// follows, and then to the fewest splits of the same tiles each, so that none is left empty; at
// least 4 tiles (256 keys) per split, so that the copy pipeline runs full. Head dim 64 holds
// three CTAs per multiprocessor (ctas_per_sm), but a one-wave launch of two a multiprocessor ran
// faster (8 x 32k: 4 splits 141.5 us, 6 splits 145.0-145.9).
// - Where that leaves splits of under 8 tiles (few, short sequences), one CTA per multiprocessor
//   instead (1 x 8k: 16 splits 20.0 us, 32 splits 20.4). Down to 8 tiles a split, two CTAs a
//   multiprocessor keep more bytes in flight than one (H200, clean L2: head dim 128
//   1 x 32k 42.9-43.3 us against 43.7-44.2, 1 x 64k 74.0 against 75.5, 2 x 32k 73.3 against
//   75.3; head dim 64 1 x 32k 25.8 against 34.6, 2 x 32k 40.3 against 60.0). With the L2 left
//   full of dirty lines by a zeroing sweep, one CTA a multiprocessor measured faster at head dim
//   128 (1 x 32k: 16 splits 50.8 us, 33 splits 53.1); the clean L2 is what a model's
//   weight reads leave before its attention.
// - Where one split already needs more than a wave of the CTAs a multiprocessor holds, the
//   fewest splits (up to 4) whose CTAs fill 90% of their waves' slots (else the best filled):
//   the multiprocessors of a thin last wave hold one CTA each, too few bytes in flight
//   (head dim 64, 64 x 32k, 512 CTAs on 396 slots: 1 split 1,211 us, 3 splits 1,011; head dim
//   128, 48 x 32k: 1 split 1,642 us, 2 splits 1,478-1,488).
// Examples, 132 SMs, 8 KV heads, head dim 128: batch 1: 32 splits of 16 tiles at 32k, 33 of 63
// at 128k, 16 of 4 at 4k (one CTA per SM); batch 4 at 32k: 8 splits of 64 tiles; batch 8: 264 /
// 64 = 4 splits (256 CTAs, not 5 splits in 1.2 waves); batch 48: 2 splits; batch 64: 1 split
// (512 CTAs, 97% of two waves).
// Skip launches: a CTA's time follows its sparsity, which differs between sequences and heads,
// so the block scheduler needs more, shorter CTAs to even out the multiprocessors' loads: the
// most splits, up to 4 waves where each split keeps 64 tiles (its own sink seed and pipeline
// fill stay small), whose CTAs fill 90% of their waves, and never fewer than the dense count.
// Measured at 75% of the tiles skipped (H200): 64 x 32k went from 1.45x (1 split) to
// 1.52x (2 splits), 8 x 32k from 1.39x (4) to 1.43x (8); at head dim 64, 8 x 32k, 8 splits (512
// CTAs on 396 slots) took 122.7 us, 6 splits 94.1 . A split that skips most of its V
// reads K alone: at one CTA a multiprocessor it kept too few bytes in flight (76-86%
// skipped, 16 splits against two CTAs per SM: 1 x 32k 37.2 against 33.9 us, 1 x 64k 49.5
// against 43.9, 2 x 32k 62.9 against 53.4).
int decode_num_splits(const DecodeArguments& a) {
  if (a.num_splits > 0) return a.num_splits;
  const int per_sm = ctas_per_sm(a);
  const int slots = multiprocessors() * per_sm;
  // (sequence, KV head) pairs, in 64 bits: up to 65535 x 65535, and multiplied by splits below.
  const std::int64_t ctas = std::max<std::int64_t>(1, std::int64_t{a.batch} * a.num_heads_kv);
  // With a window the new tokens see window + q_len - 1 keys, from a tile boundary.
  const int keys = a.window > 0
                       ? static_cast<int>(std::min<std::int64_t>(
                             a.max_seq_len, std::int64_t{a.window} + a.q_len - 1 + decode::kTileK))
                       : a.max_seq_len;
  const int n_tiles = (keys + decode::kTileK - 1) / decode::kTileK;
  const int most = std::max(1, n_tiles / 4);
  // The fewest splits of the same tiles each as s splits.
  const auto fewest = [&](int s) {
    const int per = (n_tiles + s - 1) / s;
    return (n_tiles + per - 1) / per;
  };
  // One wave of ctas_per_sm CTAs a multiprocessor.
  const auto one_wave = [&](int ctas_per_sm) {
    return fewest(static_cast<int>(
        std::clamp<std::int64_t>(multiprocessors() * ctas_per_sm / ctas, 1, most)));
  };
  // The share of its waves' slots that a launch of s splits fills.
  const auto filled = [&](int s) {
    const std::int64_t waves = (ctas * s + slots - 1) / slots;
    return static_cast<double>(ctas * s) / (static_cast<double>(waves) * slots);
  };
  int splits = one_wave(std::min(per_sm, 2));
  if (per_sm > 1 && splits > 1 && n_tiles / splits < 8) splits = one_wave(1);
  // Rounded down, two CTAs a multiprocessor can leave many with one: 90 (sequence, KV head) pairs
  // get 2 splits, 180 CTAs on 132 SMs. Where the kernel holds three (head dim 64) and that wave is
  // under three quarters full, one split more, 270 CTAs, ran 1.20x faster (SmolLM2's 30
  // layers at 1 x 8k).
  if (per_sm > 2 && 4 * ctas * splits < 3 * 2 * multiprocessors() && ctas * (splits + 1) <= slots &&
      splits < most) {
    splits = fewest(splits + 1);
  }
  if (ctas > slots) {
    double best = 0.0;
    for (int s = 1; s <= std::min(4, most); ++s) {
      if (filled(s) > best + 1e-9) {
        best = filled(s);
        splits = s;
      }
      if (filled(s) >= 0.9) break;
    }
  }
  if (decode_kernel_choice(a) == KernelChoice::kSkip) {
    const int finest = static_cast<int>(std::min<std::int64_t>(4 * slots / ctas, n_tiles / 64));
    for (int s = finest; s > splits; --s) {
      if (filled(s) >= 0.9) {
        splits = s;
        break;
      }
    }
    // A skip split reads little V, so its CTA waits on its own chain of votes more than on DRAM:
    // at head dim 64 a wave of all three CTAs a multiprocessor holds, 8 tiles a split or more, ran
    // 1.05-1.18x faster than the dense count (1 and 2 x 32k, and 1 x 8k with 90 KV heads).
    if (per_sm > 2) {
      const int full = one_wave(per_sm);
      if (n_tiles / full >= 8) splits = std::max(splits, full);
    }
  }
  return std::clamp(splits, 1, kMaxSplits);
}

std::string can_implement(const DecodeArguments& a) {
  std::ostringstream why;
  const PagedKv& kv = a.kv;
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    why << "head_dim " << a.head_dim << " is not supported (64, 128 or 256)";
  } else if (!common::family_compiled(a.dtype == DType::kBF16, a.head_dim)) {
    why << "this build has only the bf16 head-dim-128 kernels (configure with "
           "-DSKIPSOFTMAX_ALL_KERNELS=ON)";
  } else if (a.num_heads_q <= 0 || a.num_heads_kv <= 0 || a.num_heads_q % a.num_heads_kv != 0) {
    why << "Hq % Hkv != 0 (Hq=" << a.num_heads_q << ", Hkv=" << a.num_heads_kv << ")";
  } else if (a.num_heads_q / a.num_heads_kv > decode::kMaxGroup) {
    why << "GQA groups of more than " << decode::kMaxGroup << " query heads per KV head are not "
        << "supported (Hq / Hkv = " << a.num_heads_q / a.num_heads_kv << ")";
  } else if (a.q_len < 1 || a.q_len > decode::kMaxGroup / (a.num_heads_q / a.num_heads_kv)) {
    why << "q_len x (Hq / Hkv) must lie in [1, " << decode::kMaxGroup
        << "]: the new tokens' query rows of a GQA group are the 16 rows of one MMA (q_len = "
        << a.q_len << ", Hq / Hkv = " << a.num_heads_q / a.num_heads_kv << ")";
  } else if (a.max_seq_len < a.q_len) {
    why << "max_seq_len (" << a.max_seq_len << ") must hold the q_len = " << a.q_len
        << " new tokens";
  } else if (!a.q || !a.out || !a.seq_lens || !kv.k_pages || !kv.v_pages || !kv.page_table) {
    why << "q, out, seq_lens, k_pages, v_pages and page_table must be device pointers";
  } else if (a.batch <= 0 || a.max_seq_len <= 0) {
    why << "batch and max_seq_len must be positive";
  } else if (a.batch > kMaxGridYZ || a.num_heads_kv > kMaxGridYZ ||
             std::int64_t{a.batch} * a.q_len * a.num_heads_q >= (std::int64_t{1} << 31)) {
    // The decode grid is (splits, Hkv, batch), the combine grid one CTA a query row.
    why << "batch (" << a.batch << ") and num_heads_kv (" << a.num_heads_kv << ") must be at most "
        << kMaxGridYZ << ", and batch x q_len x num_heads_q below 2^31";
  } else if (const std::string paged =
                 common::paged_kv_problem(kv, a.batch, a.max_seq_len, "max_seq_len");
             !paged.empty()) {
    why << paged;
  } else if (a.num_splits < 0 || a.num_splits > kMaxSplits) {
    why << "num_splits must lie in [0, " << kMaxSplits << "] (0: automatic)";
  } else if ((reinterpret_cast<std::uintptr_t>(a.q) | reinterpret_cast<std::uintptr_t>(a.out) |
              reinterpret_cast<std::uintptr_t>(kv.k_pages) |
              reinterpret_cast<std::uintptr_t>(kv.v_pages)) %
                 16 !=
             0) {
    why << "q, out and the pages must be 16-byte aligned";
  } else if (const std::string s = softmax_scale_problem(a.softmax_scale); !s.empty()) {
    why << s;
  } else if (a.window < 0) {
    why << "sliding window must be >= 0 (0: none), got " << a.window;
  } else if (a.window > 0 &&
             (!a.threshold.never_skips() || a.lambdas != nullptr ||
              a.force_kernel.value_or(KernelChoice::kDense) != KernelChoice::kDense)) {
    why << "sliding-window decode runs the dense kernel (skipping is not applied to local "
           "layers): pass a dense threshold";
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

namespace {

// decode_workspace_size for arguments already checked.
std::size_t workspace_bytes_for(const DecodeArguments& a, int splits) {
  if (splits <= 1) return 0;
  const std::size_t rows = static_cast<std::size_t>(a.batch) * a.q_len * a.num_heads_q * splits;
  return rows * (static_cast<std::size_t>(a.head_dim) + 1) * sizeof(float);
}

}  // namespace

std::size_t decode_workspace_size(const DecodeArguments& a) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("decode: " + why);
  }
  return workspace_bytes_for(a, decode_num_splits(a));
}

KernelChoice run_decode(const DecodeArguments& a, void* workspace, std::size_t workspace_bytes,
                        void* stream) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("decode: " + why);
  }
  if (decode_tile_k(a.head_dim) != decode::kTileK) {
    throw std::logic_error("decode: decode_tile_k disagrees with the kernels' tile");
  }
  if (reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0) {
    throw std::invalid_argument("decode: the workspace must be 16-byte aligned");
  }
  const int splits = decode_num_splits(a);
  const std::size_t needed = workspace_bytes_for(a, splits);
  if (needed > 0 && (workspace == nullptr || workspace_bytes < needed)) {
    throw std::invalid_argument(
        "decode: " + std::to_string(splits) + " splits need " + std::to_string(needed) +
        " bytes of workspace (decode_workspace_size), got " +
        (workspace == nullptr ? std::string("none") : std::to_string(workspace_bytes)));
  }
  const KernelChoice choice = decode_kernel_choice(a);
  decode::Params p{};
  p.q = a.q;
  p.out = a.out;
  const std::int64_t cache_rows = a.kv.num_pages * a.kv.page_size;
  // L2 fills of the boxes' 128-byte rows, not 256: with 256-byte promotion the dense kernel ran
  // 5-7% slower (64 x 32k and 8 x 32k), with none or 128 bytes at the cp.async rate.
  constexpr CUtensorMapL2promotion kPromotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  p.tma_k = common::make_tensor_map("decode", a.kv.k_pages, cache_rows, a.num_heads_kv, a.head_dim,
                                    decode::kSliceKeys, a.dtype, kPromotion);
  p.tma_v = common::make_tensor_map("decode", a.kv.v_pages, cache_rows, a.num_heads_kv, a.head_dim,
                                    decode::kSliceKeys, a.dtype, kPromotion);
  p.page_table = a.kv.page_table;
  p.seq_lens = a.seq_lens;
  p.max_pages_per_seq = a.kv.max_pages_per_seq;
  p.max_seq_len = a.max_seq_len;
  p.page_shift = std::countr_zero(static_cast<unsigned>(a.kv.page_size));
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.group = a.num_heads_q / a.num_heads_kv;
  p.q_len = a.q_len;
  p.num_splits = splits;
  p.window = a.window;
  p.scale_log2 = scale_log2(a.softmax_scale, a.head_dim);
  p.threshold = common::to_device(a.threshold, a.lambdas);
  if (splits > 1) {
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + static_cast<std::size_t>(a.batch) * a.q_len * a.num_heads_q *
                                      splits * a.head_dim;
  }
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

}  // namespace skipsoftmax
