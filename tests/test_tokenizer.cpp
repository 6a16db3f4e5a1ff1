// The byte-level BPE tokenizer against HF tokenizers on SmolLM2's vocabulary
// (tests/data/smollm2_tokenizer_cases.json): pre-tokenizer pieces always, token ids when the
// checkpoint is present (scripts/fetch-models.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "file_io.h"
#include "tokenizer.h"

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

}  // namespace
}  // namespace skipsoftmax
