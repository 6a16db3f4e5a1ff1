// Checks of the index tensors a launch's kernels trust, where the host holds them: run_*_host and
// the CPU reference on launch arguments read them before anything is computed.
#pragma once

#include <cstdint>
#include <span>

#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"

namespace skipsoftmax::common {

// cu_seqlens: batch + 1 offsets from 0 to `total`, never decreasing, the longest step `longest`
// (a maximum below a sequence's length would leave its last query rows unwritten).
void check_offsets(const char* who, const char* what, std::span<const std::int32_t> cu, int batch,
                   std::int64_t total, int longest);

// Every page id that the first length(b) tokens of sequence b reach lies inside the cache.
void check_page_ids(const char* who, const PagedKv& kv, std::span<const std::int32_t> page_table,
                    int batch, std::span<const std::int64_t> lengths);

// Decode's lengths: each within [q_len, max_seq_len], the longest equal to max_seq_len, their
// pages inside the cache.
void check_decode_lengths(const DecodeArguments& a, std::span<const std::int32_t> page_table,
                          std::span<const std::int32_t> seq_lens);

}  // namespace skipsoftmax::common
