// The kernel families this build compiled (dtype x head dim), one list for every launcher and
// every can_implement: without SKIPSOFTMAX_ALL_KERNELS only bf16 head dim 128 is built.
#pragma once

#include <stdexcept>
#include <string>

namespace skipsoftmax::common {

inline bool family_compiled(bool bf16, int head_dim) {
  return SKIPSOFTMAX_ALL_KERNELS || (bf16 && head_dim == 128);
}

// Calls launch.template operator()<kBf16, kHeadDim>() for the compiled family of (bf16,
// head_dim); throws std::invalid_argument naming `who` when there is none.
template <typename Launch>
void dispatch_family(bool bf16, int head_dim, const char* who, const Launch& launch) {
  if (bf16 && head_dim == 128) return launch.template operator()<true, 128>();
#if SKIPSOFTMAX_ALL_KERNELS
  if (bf16 && head_dim == 64) return launch.template operator()<true, 64>();
  if (bf16 && head_dim == 256) return launch.template operator()<true, 256>();
  if (!bf16 && head_dim == 64) return launch.template operator()<false, 64>();
  if (!bf16 && head_dim == 128) return launch.template operator()<false, 128>();
  if (!bf16 && head_dim == 256) return launch.template operator()<false, 256>();
#endif
  throw std::invalid_argument(std::string(who) + ": no kernel compiled for this dtype and head dim");
}

}  // namespace skipsoftmax::common
