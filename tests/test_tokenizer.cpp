// The byte-level BPE tokenizer against HF tokenizers on SmolLM2's vocabulary
// (tests/data/smollm2_tokenizer_cases.json): pre-tokenizer pieces always, token ids when the
// checkpoint is present (scripts/fetch-models.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_map>

#include "file_io.h"
#include "gguf.h"
#include "test_util.h"
#include "tiny_gguf.h"
#include "tokenizer.h"
#include "tokenizer_checks.h"

namespace skipsoftmax {
namespace {

nlohmann::json cases() {
  return read_json_file(std::filesystem::path(SKIPSOFTMAX_TEST_DATA) /
                        "smollm2_tokenizer_cases.json")["cases"];
}

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_at("plain text, \xc3\xa9t\xc3\xa9 and \xe2\x80\x94 dashes"), std::nullopt);
  EXPECT_EQ(invalid_utf8_at(""), std::nullopt);
  EXPECT_EQ(invalid_utf8_at("ab\xff"), 2u);
  EXPECT_EQ(invalid_utf8_at("ok \xc3"), 3u);     // a lead byte cut off at the end
  EXPECT_EQ(invalid_utf8_at("x\xc0\xafy"), 1u);  // an overlong form of '/'
  EXPECT_EQ(invalid_utf8_at("\xed\xa0\x80 surrogate"), 0u);
}

TEST(BpeTokenizer, PreTokenizerMatchesHfTokenizers) {
  int n = 0;
  for (const auto& c : cases()) {
    EXPECT_EQ(BpeTokenizer::pre_tokenize(c["text"].get<std::string>()),
              c["pieces"].get<std::vector<std::string>>())
        << c["text"];
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(BpeTokenizer, EncodesLikeHfTokenizersAndDecodesBack) {
  const char* path = std::getenv("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path || !std::filesystem::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(path));
  EXPECT_EQ(tok.vocab_size(), 49152u);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  for (const auto& c : cases()) {
    const std::string text = c["text"];
    const std::vector<std::int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<std::int32_t>>()) << text.substr(0, 60);
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_THROW(tok.decode({49152}), std::runtime_error);
}

// A byte-level BPE vocabulary over a, b, c with merges whose ranks compete, written as a GGUF.
class BpeMerges : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    test::GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", vocabulary_)
        .strings("tokenizer.ggml.merges", merges_)
        .u32("tokenizer.ggml.unknown_token_id", 0)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .boolean("tokenizer.ggml.add_bos_token", false);
    b.save(dir_ / "bpe.gguf");
  }

  // The textbook rule, one rescan per merge: the lowest-ranked adjacent pair, leftmost first (a
  // word that is itself a token is that token).
  std::vector<std::int32_t> reference(const std::string& word) const {
    const auto id = [&](const std::string& s) {
      return static_cast<std::int32_t>(std::find(vocabulary_.begin(), vocabulary_.end(), s) -
                                       vocabulary_.begin());
    };
    if (std::find(vocabulary_.begin(), vocabulary_.end(), word) != vocabulary_.end()) {
      return {id(word)};
    }
    std::vector<std::string> symbols;
    for (char c : word) symbols.emplace_back(1, c);
    while (symbols.size() > 1) {
      std::size_t best = merges_.size(), at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        for (std::size_t r = 0; r < best; ++r) {
          if (merges_[r] == symbols[i] + " " + symbols[i + 1]) {
            best = r;
            at = i;
          }
        }
      }
      if (best == merges_.size()) break;
      symbols[at] += symbols[at + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    std::vector<std::int32_t> ids;
    for (const std::string& s : symbols) ids.push_back(id(s));
    return ids;
  }

  const std::vector<std::string> vocabulary_ = {
      "<unk>", "<s>", "</s>", "a",    "b",    "c",        "aa", "ab", "bc", "aaa",
      "abc",   "aab", "aaaa", "bcbc", "abca", "aaaaaaaa", "Ġ",  "Ċ",  "Ġa", "Ġab"};
  const std::vector<std::string> merges_ = {"a a",   "b c",   "a b",   "aa a",      "ab c", "a ab",
                                            "aa aa", "bc bc", "abc a", "aaaa aaaa", "Ġ a",  "Ġa b"};
};

TEST_F(BpeMerges, MergesAsTheTextbookRuleDoes) {
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(dir_ / "bpe.gguf"));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string word(1 + rng() % 40, 'a');
    for (char& c : word) c = "aaabbc"[rng() % 6];
    EXPECT_EQ(tok.encode(word), reference(word)) << word;
  }
}

// One repeated character took 0.9, 3.6 and 13.9 s for 10, 20 and 40 KB (a rescan of the piece per
// merge); 200 KB now take well under a second.
TEST_F(BpeMerges, EncodesALongRunInLinearithmicTime) {
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(dir_ / "bpe.gguf"));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids = tok.encode(std::string(200'000, 'a'));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ids.size(), 200'000u / 8);
  EXPECT_LT(seconds, 2.0);
}

// Every cut prefix_cut() gives begins the whole text's ids, on random text of letters, digits,
// spaces, tabs, newlines, apostrophes and accents, where the pattern's look-ahead and its optional
// leading space are at work on both sides of a cut ("Ġa" is a token); and encode_prefix() gives the
// whole text's first ids.
TEST_F(BpeMerges, CutsPrefixesThatEncodeAsTheWholeTextBegins) {
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(dir_ / "bpe.gguf"));
  const std::vector<std::string> alphabet = {"a",  "b",    "c",  "ab", "aa", " ", " ", "  ",
                                             "\n", "\n\n", "\t", "1",  "'",  "s", ".", "\xc3\xa9"};
  std::mt19937 rng(11);
  int cuts = 0;
  for (int trial = 0; trial < 300; ++trial) {
    ASSERT_NO_FATAL_FAILURE(
        test::check_prefix_cuts(tok, test::random_text(alphabet, rng), {0, 1, 5, 17}, 3, cuts));
  }
  EXPECT_GT(cuts, 10'000);
}

// capture takes --tokens from a corpus of any length: what follows the tokens it needs is never
// tokenized (5 MB of one letter take tens of seconds to merge).
TEST_F(BpeMerges, EncodesAPrefixWithoutTheRestOfTheText) {
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(dir_ / "bpe.gguf"));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "ab c ";
  text += std::string(5'000'000, 'a');
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids = tok.encode_prefix(text, 100);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 0.5);
  EXPECT_EQ(ids, tok.encode_prefix(text.substr(0, 10'000), 100));
  EXPECT_EQ(ids.size(), 100u);
}

TEST(BpeTokenizer, CutsCheckpointPrefixesThatEncodeAsTheWholeTextBegins) {
  const char* path = std::getenv("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path || !std::filesystem::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  const BpeTokenizer tok = BpeTokenizer::from_gguf(gguf::File::open(path));
  std::string text =
      read_text_file(std::filesystem::path(SKIPSOFTMAX_TEST_DATA) / "engine_text.txt");
  for (const auto& c : cases()) text += c["text"].get<std::string>();
  const std::vector<std::int32_t> all = tok.encode(text);
  for (std::size_t at = 0; at < text.size(); at += 97) {
    const std::size_t cut = tok.prefix_cut(text, at);
    ASSERT_LT(cut, at + 40);  // English has a space every few letters
    const std::vector<std::int32_t> ids = tok.encode(text.substr(0, cut));
    ASSERT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "cut at " << cut;
  }
  for (std::size_t count = 1; count <= all.size() + 1; count += 1 + count / 3) {
    const std::vector<std::int32_t> want(all.begin(), all.begin() + std::min(count, all.size()));
    ASSERT_EQ(tok.encode_prefix(text, count), want) << count;
  }
}

}  // namespace
}  // namespace skipsoftmax
