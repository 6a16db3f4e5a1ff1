// The SentencePiece tokenizer and load_tokenizer(): rules on small vocabularies the test writes
// as GGUF files, and Gemma 3's vocabulary against sentencepiece and transformers
// (tests/data/gemma3_tokenizer_cases.json, scripts/make_tokenizer_cases.py) when the checkpoint is
// present (scripts/fetch-models.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "file_io.h"
#include "test_util.h"
#include "tokenizer.h"
#include "tokenizer_checks.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using Type = SpmTokenizer::TokenType;

// A GGUF v3 file of metadata only.
class MetadataWriter {
 public:
  MetadataWriter& text(const std::string& key, const std::string& value) {
    head(key, 8);
    str(value);
    return *this;
  }
  MetadataWriter& u32(const std::string& key, std::uint32_t value) {
    head(key, 4);
    pod(value);
    return *this;
  }
  MetadataWriter& flag(const std::string& key, bool value) {
    head(key, 7);
    pod<std::uint8_t>(value);
    return *this;
  }
  MetadataWriter& texts(const std::string& key, const std::vector<std::string>& values) {
    array_head(key, 8, values.size());
    for (const std::string& v : values) str(v);
    return *this;
  }
  MetadataWriter& floats(const std::string& key, const std::vector<float>& values) {
    array_head(key, 6, values.size());
    for (float v : values) pod(v);
    return *this;
  }
  MetadataWriter& i32s(const std::string& key, const std::vector<std::int32_t>& values) {
    array_head(key, 5, values.size());
    for (std::int32_t v : values) pod(v);
    return *this;
  }
  void save(const fs::path& path) const {
    std::ofstream out(path, std::ios::binary);
    const auto put = [&](auto v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
    put(std::uint32_t{0x46554747});  // "GGUF"
    put(std::uint32_t{3});
    put(std::uint64_t{0});  // tensors
    put(count_);
    out.write(reinterpret_cast<const char*>(body_.data()),
              static_cast<std::streamsize>(body_.size()));
  }

 private:
  template <typename T>
  void pod(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    pod<std::uint64_t>(s.size());
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void head(const std::string& key, std::uint32_t type) {
    str(key);
    pod(type);
    ++count_;
  }
  void array_head(const std::string& key, std::uint32_t type, std::size_t n) {
    head(key, 9);
    pod(type);
    pod<std::uint64_t>(n);
  }

  std::vector<std::uint8_t> body_;
  std::uint64_t count_ = 0;
};

struct Piece {
  std::string text;
  float score;
  Type type;
};

// A SentencePiece vocabulary: <unk> <s> </s> <end_of_turn>, then `pieces`, then the 256 byte
// tokens unless `bytes` is false. Metadata keys in `w` come first.
MetadataWriter spm_vocabulary(const std::vector<Piece>& pieces, bool bytes = true,
                              MetadataWriter w = {}) {
  std::vector<Piece> all = {{"<unk>", 0, Type::kUnknown},
                            {"<s>", 0, Type::kControl},
                            {"</s>", 0, Type::kControl},
                            {"<end_of_turn>", 0, Type::kControl}};
  all.insert(all.end(), pieces.begin(), pieces.end());
  for (int b = 0; bytes && b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    all.push_back({name, 0, Type::kByte});
  }
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  for (const Piece& p : all) {
    texts.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(static_cast<std::int32_t>(p.type));
  }
  w.text("tokenizer.ggml.model", "llama")
      .texts("tokenizer.ggml.tokens", texts)
      .floats("tokenizer.ggml.scores", scores)
      .i32s("tokenizer.ggml.token_type", types)
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2)
      .u32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

// Gemma's flags: no prefix space.
MetadataWriter gemma_flags() {
  MetadataWriter w;
  w.flag("tokenizer.ggml.add_space_prefix", false);
  return w;
}

class SpmTokenizerRules : public test::TempDirTest {
 protected:
  fs::path save(const MetadataWriter& w) {
    fs::path path = dir_ / std::to_string(files_++);
    path += ".gguf";
    w.save(path);
    return path;
  }
  SpmTokenizer load(const MetadataWriter& w) {
    return SpmTokenizer::from_gguf(gguf::File::open(save(w)));
  }
  // The tokens' texts, for readable failures.
  static std::vector<std::string> pieces(const Tokenizer& t, std::string_view text) {
    std::vector<std::string> out;
    for (std::int32_t id : t.encode(text)) out.push_back(t.token(id));
    return out;
  }
  using Pieces = std::vector<std::string>;

  int files_ = 0;
};

const std::vector<Piece> kLetters = {{"a", -10, Type::kNormal},
                                     {"b", -11, Type::kNormal},
                                     {"c", -12, Type::kNormal},
                                     {"\xe2\x96\x81", -13, Type::kNormal}};  // U+2581

std::vector<Piece> with(std::vector<Piece> pieces, const std::vector<Piece>& more) {
  pieces.insert(pieces.end(), more.begin(), more.end());
  return pieces;
}

TEST_F(SpmTokenizerRules, MergesTheHighestScoringPairFirstLeftmostOnTies) {
  const auto ab_bc = [&](float ab, float bc) {
    return load(
        spm_vocabulary(with(kLetters, {{"ab", ab, Type::kNormal}, {"bc", bc, Type::kNormal}}), true,
                       gemma_flags()));
  };
  EXPECT_EQ(pieces(ab_bc(-1, -2), "abc"), (Pieces{"ab", "c"}));
  EXPECT_EQ(pieces(ab_bc(-2, -1), "abc"), (Pieces{"a", "bc"}));
  EXPECT_EQ(pieces(ab_bc(-1, -1), "abc"), (Pieces{"ab", "c"}));
  EXPECT_EQ(pieces(ab_bc(-1, -1), "bcabc"), (Pieces{"bc", "ab", "c"}));
  // Merged pieces merge on: "abc" is reached through "ab" + "c" only.
  const SpmTokenizer t =
      load(spm_vocabulary(with(kLetters, {{"ab", -1, Type::kNormal}, {"abc", -5, Type::kNormal}}),
                          true, gemma_flags()));
  EXPECT_EQ(pieces(t, "abcabcab"), (Pieces{"abc", "abc", "ab"}));
  EXPECT_EQ(t.decode(t.encode("abcabcab")), "abcabcab");
  EXPECT_TRUE(t.encode("").empty());
}

TEST_F(SpmTokenizerRules, SpacesAreU2581AndThePrefixSpaceFollowsTheFlag) {
  const std::vector<Piece> v = with(kLetters, {{"\xe2\x96\x81"
                                                "a",
                                                -1, Type::kNormal}});
  const SpmTokenizer gemma = load(spm_vocabulary(v, true, gemma_flags()));
  EXPECT_FALSE(gemma.add_space_prefix());
  EXPECT_EQ(pieces(gemma, "a a"), (Pieces{"a", "▁a"}));
  EXPECT_EQ(pieces(gemma, " a"), (Pieces{"▁a"}));
  EXPECT_EQ(gemma.decode(gemma.encode(" a a ")), " a a ");

  const SpmTokenizer llama = load(spm_vocabulary(v));  // add_space_prefix: default true
  EXPECT_TRUE(llama.add_space_prefix());
  EXPECT_EQ(pieces(llama, "a a"), (Pieces{"▁a", "▁a"}));
  EXPECT_EQ(pieces(llama, " a"), (Pieces{"▁", "▁a"}));
  EXPECT_EQ(llama.decode(llama.encode("a a")), "a a");
  EXPECT_EQ(llama.decode(llama.encode(" a")), " a");
}

TEST_F(SpmTokenizerRules, UserDefinedTokensAreCutOutLeftmostLongest) {
  // As llama.cpp's converter writes them: runs of spaces with real spaces.
  const SpmTokenizer t = load(spm_vocabulary(with(kLetters, {{"\n", -1000, Type::kUserDefined},
                                                             {"\n\n", -1000, Type::kUserDefined},
                                                             {"  ", -1000, Type::kUserDefined},
                                                             {"   ", -1000, Type::kUserDefined},
                                                             {"<b>", -1000, Type::kUserDefined},
                                                             {"ab", -1, Type::kNormal}}),
                                             true, gemma_flags()));
  EXPECT_EQ(pieces(t, "a\n\n\nb<b>ab"), (Pieces{"a", "\n\n", "\n", "b", "<b>", "ab"}));
  EXPECT_EQ(pieces(t, "a     b"), (Pieces{"a", "   ", "  ", "b"}));
  // A U+2581 in the text is a space, as in SentencePiece.
  EXPECT_EQ(pieces(t, "a\xe2\x96\x81 b"), (Pieces{"a", "  ", "b"}));
  EXPECT_EQ(t.decode(t.encode("a\n\n\nb<b>ab     c")), "a\n\n\nb<b>ab     c");
}

// Every cut prefix_cut() gives begins the whole text's ids, on random text where user-defined
// tokens overlap ("\n\n\n" is "\n\n" then "\n") and merges reach across spaces, with and without
// the prefix space; and encode_prefix() gives the whole text's first ids.
TEST_F(SpmTokenizerRules, CutsPrefixesThatEncodeAsTheWholeTextBegins) {
  const std::vector<Piece> v = with(kLetters, {{"\n", -1000, Type::kUserDefined},
                                               {"\n\n", -1000, Type::kUserDefined},
                                               {"  ", -1000, Type::kUserDefined},
                                               {"   ", -1000, Type::kUserDefined},
                                               {"<b>", -1000, Type::kUserDefined},
                                               {"ab", -1, Type::kNormal},
                                               {"\xe2\x96\x81"
                                                "a",
                                                -2, Type::kNormal},
                                               {"ab\xe2\x96\x81"
                                                "c",
                                                -3, Type::kNormal}});
  const std::vector<std::string> alphabet = {"a",  "b",   "c", "ab",       " ",           " ",
                                             "\n", "<b>", "<", "\xc3\xa9", "\xe2\x96\x81"};
  int cuts = 0;
  for (const SpmTokenizer& t :
       {load(spm_vocabulary(v, true, gemma_flags())), load(spm_vocabulary(v))}) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
      ASSERT_NO_FATAL_FAILURE(
          test::check_prefix_cuts(t, test::random_text(alphabet, rng), {0, 1, 3, 40}, 1, cuts));
    }
  }
  EXPECT_GT(cuts, 10'000);
}

TEST_F(SpmTokenizerRules, UnknownCharactersFallBackToBytes) {
  const SpmTokenizer t = load(spm_vocabulary(kLetters, true, gemma_flags()));
  const std::vector<std::int32_t> ids = t.encode(
      "a\xc3\xa9"
      "b");  // "aéb"
  EXPECT_EQ(pieces(t,
                   "a\xc3\xa9"
                   "b"),
            (Pieces{"a", "<0xC3>", "<0xA9>", "b"}));
  EXPECT_EQ(t.decode(ids),
            "a\xc3\xa9"
            "b");
  // Invalid UTF-8 round-trips through bytes too.
  EXPECT_EQ(t.decode(t.encode("a\xff\xc3")), "a\xff\xc3");

  const SpmTokenizer no_bytes = load(spm_vocabulary(kLetters, false, gemma_flags()));
  EXPECT_EQ(pieces(no_bytes, "a\xc3\xa9"), (Pieces{"a", "<unk>", "<unk>"}));
}

TEST_F(SpmTokenizerRules, MergesNeverFormControlOrByteTokens) {
  // "<x>" is a control token and "<0x61>" a byte token, both reachable by merges of normal pieces.
  const SpmTokenizer t = load(spm_vocabulary(with(kLetters, {{"<", -20, Type::kNormal},
                                                             {">", -21, Type::kNormal},
                                                             {"x", -22, Type::kNormal},
                                                             {"0", -23, Type::kNormal},
                                                             {"6", -24, Type::kNormal},
                                                             {"1", -25, Type::kNormal},
                                                             {"<x", -1, Type::kNormal},
                                                             {"<0x6", -2, Type::kNormal},
                                                             {"<0", -3, Type::kNormal},
                                                             {"<0x", -4, Type::kNormal},
                                                             {"1>", -5, Type::kNormal},
                                                             {"<x>", 0, Type::kControl}}),
                                             true, gemma_flags()));
  EXPECT_EQ(pieces(t, "<x>"), (Pieces{"<x", ">"}));
  EXPECT_EQ(pieces(t, "<0x61>"), (Pieces{"<0x6", "1>"}));
  EXPECT_EQ(pieces(t, "<end_of_turn>").size(), 13u);  // 13 characters, none merged
  EXPECT_EQ(t.decode({t.find("<end_of_turn>")}), "<end_of_turn>");
}

TEST_F(SpmTokenizerRules, ReadsTheSpecialTokensAndFlags) {
  const SpmTokenizer t = load(spm_vocabulary(kLetters));
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.vocab_size(), 4u + kLetters.size() + 256u);
  EXPECT_TRUE(t.add_bos());  // llama.cpp's default for SentencePiece files
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.end_of_generation(), (std::vector<std::int32_t>{2, 3}));
  EXPECT_TRUE(t.is_end_of_generation(3));
  EXPECT_FALSE(t.is_end_of_generation(1));
  EXPECT_EQ(t.find("<end_of_turn>"), 3);
  EXPECT_EQ(t.find("zz"), -1);
  EXPECT_ERROR_HAS(t.token(-1), "token id -1 is outside the vocabulary");
  EXPECT_ERROR_HAS(t.decode({static_cast<std::int32_t>(t.vocab_size())}), "outside the vocabulary");

  MetadataWriter flags;
  flags.flag("tokenizer.ggml.add_bos_token", false).flag("tokenizer.ggml.add_eos_token", true);
  const SpmTokenizer f = load(spm_vocabulary(kLetters, true, flags));
  EXPECT_FALSE(f.add_bos());
  EXPECT_TRUE(f.add_eos());
}

class LoadTokenizer : public SpmTokenizerRules {};

TEST_F(LoadTokenizer, PicksByModelAndNamesWhatIsWrong) {
  const gguf::File spm = gguf::File::open(save(spm_vocabulary(kLetters)));
  EXPECT_NE(dynamic_cast<const SpmTokenizer*>(load_tokenizer(spm).get()), nullptr);
  EXPECT_ERROR_HAS(BpeTokenizer::from_gguf(spm), "not byte-level BPE");

  MetadataWriter bare;
  bare.text("general.architecture", "llama");
  EXPECT_ERROR_HAS(load_tokenizer(gguf::File::open(save(bare))),
                   "has no tokenizer (no metadata key tokenizer.ggml.model)");

  MetadataWriter bert;
  bert.text("tokenizer.ggml.model", "bert").texts("tokenizer.ggml.tokens", {"[CLS]"});
  const gguf::File bert_file = gguf::File::open(save(bert));
  EXPECT_ERROR_HAS(load_tokenizer(bert_file), "tokenizer.ggml.model 'bert' is not supported");
  EXPECT_ERROR_HAS(SpmTokenizer::from_gguf(bert_file), "not SentencePiece");

  MetadataWriter no_tokens;
  no_tokens.text("tokenizer.ggml.model", "llama");
  EXPECT_ERROR_HAS(load_tokenizer(gguf::File::open(save(no_tokens))),
                   "no metadata key tokenizer.ggml.tokens");

  MetadataWriter short_scores;
  short_scores.text("tokenizer.ggml.model", "llama")
      .texts("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"})
      .floats("tokenizer.ggml.scores", {0, 0})
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2);
  EXPECT_ERROR_HAS(load_tokenizer(gguf::File::open(save(short_scores))),
                   "tokenizer.ggml.scores is not an array of 3 numbers");

  MetadataWriter bad_bos;
  bad_bos.text("tokenizer.ggml.model", "llama")
      .texts("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"})
      .u32("tokenizer.ggml.bos_token_id", 7)
      .u32("tokenizer.ggml.eos_token_id", 2);
  EXPECT_ERROR_HAS(load_tokenizer(gguf::File::open(save(bad_bos))),
                   "tokenizer.ggml.bos_token_id = 7 is outside the vocabulary");

  MetadataWriter collapse;
  collapse.flag("tokenizer.ggml.remove_extra_whitespaces", true);
  EXPECT_ERROR_HAS(load_tokenizer(gguf::File::open(save(spm_vocabulary(kLetters, true, collapse)))),
                   "remove_extra_whitespaces");
}

// The real checkpoints, when a machine has them.
const char* checkpoint(const char* env) {
  const char* path = std::getenv(env);
  return path && fs::exists(path) ? path : nullptr;
}

nlohmann::json gemma3_cases() {
  return read_json_file(fs::path(SKIPSOFTMAX_TEST_DATA) / "gemma3_tokenizer_cases.json")["cases"];
}

TEST(LoadTokenizerCheckpoints, PicksBpeForSmolLM2) {
  const char* path = checkpoint("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  const std::unique_ptr<Tokenizer> t = load_tokenizer(gguf::File::open(path));
  EXPECT_NE(dynamic_cast<const BpeTokenizer*>(t.get()), nullptr);
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->token(t->eos()), "<|im_end|>");
  EXPECT_EQ(t->end_of_generation(), (std::vector<std::int32_t>{0, 2}));  // <|endoftext|> too
  EXPECT_EQ(t->encode("Hello world!"), (std::vector<std::int32_t>{19556, 905, 17}));
}

TEST(LoadTokenizerCheckpoints, PicksSpmForGemma3) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  const std::unique_ptr<Tokenizer> t = load_tokenizer(gguf::File::open(path));
  const auto* spm = dynamic_cast<const SpmTokenizer*>(t.get());
  ASSERT_NE(spm, nullptr);
  EXPECT_FALSE(spm->add_space_prefix());
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->vocab_size(), 262144u);
  EXPECT_EQ(t->token(t->bos()), "<bos>");
  EXPECT_EQ(t->token(t->eos()), "<eos>");
  EXPECT_EQ(t->find("<start_of_turn>"), 105);
  EXPECT_EQ(t->end_of_generation(), (std::vector<std::int32_t>{1, 106}));  // <end_of_turn>
}

TEST(SpmTokenizerGemma3, EncodesLikeSentencePieceAndDecodesBack) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  const SpmTokenizer t = SpmTokenizer::from_gguf(gguf::File::open(path));
  int n = 0;
  for (const auto& c : gemma3_cases()) {
    const std::string text = c["text"];
    const std::vector<std::int32_t> ids = t.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<std::int32_t>>()) << text.substr(0, 60);
    if (c["round_trips"]) {
      EXPECT_EQ(t.decode(ids), text);
    }
    ++n;
  }
  EXPECT_GE(n, 30);
}

TEST(SpmTokenizerGemma3, EncodesAHundredThousandCharactersWellUnderASecond) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  const SpmTokenizer t = SpmTokenizer::from_gguf(gguf::File::open(path));
  std::string text;
  while (text.size() < 100'000) {
    for (const auto& c : gemma3_cases()) text += c["text"].get<std::string>();
  }
  // One stretch with no newline, the worst case for the merge queue.
  std::string one_line = text;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  for (const std::string& s : {text, one_line}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<std::int32_t> ids = t.encode(s);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 1.0) << s.size() << " bytes";
    EXPECT_GT(ids.size(), s.size() / 8);
  }
}

TEST(SpmTokenizerGemma3, CutsPrefixesThatEncodeAsTheWholeTextBegins) {
  const char* path = checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  const SpmTokenizer t = SpmTokenizer::from_gguf(gguf::File::open(path));
  std::string text = read_text_file(fs::path(SKIPSOFTMAX_TEST_DATA) / "engine_text.txt");
  for (const auto& c : gemma3_cases()) text += c["text"].get<std::string>();
  const std::vector<std::int32_t> all = t.encode(text);
  std::size_t cuts = 0;
  for (std::size_t at = 0; at < text.size(); at += 97) {
    const std::size_t cut = t.prefix_cut(text, at);
    if (cut == text.size()) break;
    const std::vector<std::int32_t> ids = t.encode(text.substr(0, cut));
    ASSERT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "cut at " << cut;
    ++cuts;
  }
  EXPECT_GT(cuts, text.size() / 97 / 2);  // paragraphs ("\n\n") are user-defined tokens
  for (std::size_t count = 1; count <= all.size() + 1; count += 1 + count / 3) {
    const std::vector<std::int32_t> want(all.begin(), all.begin() + std::min(count, all.size()));
    ASSERT_EQ(t.encode_prefix(text, count), want) << count;
  }
}

}  // namespace
}  // namespace skipsoftmax
