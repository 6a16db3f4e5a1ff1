// Checks of Tokenizer::prefix_cut and encode_prefix that the BPE and SentencePiece tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "tokenizer.h"

namespace skipsoftmax::test {

// 1 to 300 pieces of `alphabet`, drawn from rng.
inline std::string random_text(const std::vector<std::string>& alphabet, std::mt19937& rng) {
  std::string text;
  for (std::size_t n = 1 + rng() % 300; n > 0; --n) text += alphabet[rng() % alphabet.size()];
  return text;
}

// Every cut prefix_cut() gives in `text` begins encode(text); encode_prefix() gives its first
// ids for each of `counts`, for half and all of them and for `beyond` more than there are. Adds
// the cuts checked to `cuts`. Call it under ASSERT_NO_FATAL_FAILURE.
inline void check_prefix_cuts(const Tokenizer& t, const std::string& text,
                              std::initializer_list<std::size_t> counts, std::size_t beyond,
                              int& cuts) {
  const std::vector<std::int32_t> all = t.encode(text);
  for (std::size_t at = 0; at <= text.size(); ++at) {
    const std::size_t cut = t.prefix_cut(text, at);
    ASSERT_GE(cut, at);
    ASSERT_LE(cut, text.size());
    if (cut == text.size()) break;
    const std::vector<std::int32_t> ids = t.encode(text.substr(0, cut));
    ASSERT_TRUE(ids.size() <= all.size() && std::equal(ids.begin(), ids.end(), all.begin()))
        << "cut at " << cut << " of " << text;
    ++cuts;
  }
  std::vector<std::size_t> all_counts(counts);
  all_counts.insert(all_counts.end(), {all.size() / 2, all.size(), all.size() + beyond});
  for (std::size_t count : all_counts) {
    const std::vector<std::int32_t> want(all.begin(), all.begin() + std::min(count, all.size()));
    ASSERT_EQ(t.encode_prefix(text, count), want) << "count " << count << " of " << text;
  }
}

}  // namespace skipsoftmax::test
