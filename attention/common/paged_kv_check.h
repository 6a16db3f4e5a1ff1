// The checks a paged KV cache passes before either kernel family indexes it: the page size, the
// cache's extent and the page table's, as the kernels compute them in 32-bit integers.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "skipsoftmax/paged_kv.h"

namespace skipsoftmax::common {

// Empty when `kv` can hold `batch` sequences of up to `max_len` tokens (the argument named
// `max_len_name`); else the reason. The caller has checked that its pointers are set.
inline std::string paged_kv_problem(const PagedKv& kv, int batch, std::int64_t max_len,
                                    const char* max_len_name) {
  std::ostringstream why;
  if (kv.page_size < kMinPageSize || kv.page_size > kMaxPageSize ||
      (kv.page_size & (kv.page_size - 1)) != 0) {
    why << "page size " << kv.page_size << " is not a power of two in [" << kMinPageSize << ", "
        << kMaxPageSize << "]";
  } else if (kv.num_pages <= 0 || kv.num_pages >= (std::int64_t{1} << 31) / kv.page_size) {
    why << "num_pages * page_size must lie in [1, 2^31)";
  } else if (kv.max_pages_per_seq <= 0 ||
             static_cast<std::int64_t>(kv.max_pages_per_seq) * kv.page_size < max_len) {
    why << "max_pages_per_seq (" << kv.max_pages_per_seq << ") pages of " << kv.page_size
        << " tokens cannot hold " << max_len_name << " = " << max_len;
  } else if (static_cast<std::int64_t>(batch) * kv.max_pages_per_seq >= (std::int64_t{1} << 31)) {
    // The kernels index the page table with 32-bit integers.
    why << "batch x max_pages_per_seq (" << batch << " x " << kv.max_pages_per_seq
        << ") page-table entries must be fewer than 2^31";
  }
  return why.str();
}

}  // namespace skipsoftmax::common
