#include "host_checks.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace skipsoftmax::common {

void check_offsets(const char* who, const char* what, std::span<const std::int32_t> cu, int batch,
                   std::int64_t total, int longest) {
  const std::string name = std::string(who) + ": " + what;
  if (static_cast<std::int64_t>(cu.size()) != std::int64_t{batch} + 1) {
    throw std::invalid_argument(name + " holds " + std::to_string(cu.size()) +
                                " values, expected " + std::to_string(std::int64_t{batch} + 1));
  }
  if (cu.front() != 0 || cu.back() != total) {
    throw std::invalid_argument(name + " must run from 0 to " + std::to_string(total) + ", got " +
                                std::to_string(cu.front()) + " to " + std::to_string(cu.back()));
  }
  int most = 0;
  for (int b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      throw std::invalid_argument(name + " decreases at entry " + std::to_string(b + 1));
    }
    most = std::max(most, cu[b + 1] - cu[b]);
  }
  if (most != longest) {
    throw std::invalid_argument(name + ": the longest sequence holds " + std::to_string(most) +
                                " tokens, the arguments' maximum is " + std::to_string(longest));
  }
}

void check_page_ids(const char* who, const PagedKv& kv, std::span<const std::int32_t> page_table,
                    int batch, std::span<const std::int64_t> lengths) {
  for (int b = 0; b < batch; ++b) {
    const std::int64_t pages = (lengths[b] + kv.page_size - 1) / kv.page_size;
    if (pages > kv.max_pages_per_seq) {
      throw std::invalid_argument(std::string(who) + ": sequence " + std::to_string(b) + " holds " +
                                  std::to_string(lengths[b]) + " tokens, more than its " +
                                  std::to_string(kv.max_pages_per_seq) + " pages of " +
                                  std::to_string(kv.page_size) + " hold");
    }
    for (std::int64_t i = 0; i < pages; ++i) {
      const std::int32_t page = page_table[std::size_t(b) * kv.max_pages_per_seq + i];
      if (page < 0 || page >= kv.num_pages) {
        throw std::invalid_argument(std::string(who) + ": page_table[" + std::to_string(b) + "][" +
                                    std::to_string(i) + "] = " + std::to_string(page) +
                                    " lies outside the cache's " + std::to_string(kv.num_pages) +
                                    " pages");
      }
    }
  }
}

void check_decode_lengths(const DecodeArguments& a, std::span<const std::int32_t> page_table,
                          std::span<const std::int32_t> seq_lens) {
  std::int32_t longest = 0;
  std::vector<std::int64_t> lengths;
  for (int b = 0; b < a.batch; ++b) {
    const std::int32_t len = seq_lens[b];
    if (len < a.q_len || len > a.max_seq_len) {
      throw std::invalid_argument(
          "decode: seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
          " lies outside [q_len, max_seq_len] = [" + std::to_string(a.q_len) + ", " +
          std::to_string(a.max_seq_len) + "]");
    }
    longest = std::max(longest, len);
    lengths.push_back(len);
  }
  check_page_ids("decode", a.kv, page_table, a.batch, lengths);
  if (longest != a.max_seq_len) {
    throw std::invalid_argument("decode: max_seq_len (" + std::to_string(a.max_seq_len) +
                                ") is not the longest seq_lens entry (" + std::to_string(longest) +
                                ")");
  }
}

}  // namespace skipsoftmax::common
