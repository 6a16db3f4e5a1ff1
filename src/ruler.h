// RULER-style long prompts (needle in a haystack, several keys) from public-domain books, for
// calibration now and for accuracy evaluation later.
//
// A prompt of exactly N tokens is
//   [BOS] preamble  haystack with K needles planted between paragraphs at random depths  question
// where a needle is "One of the special magic numbers for <key> is: <7 digits>." and the question
// asks for one of the keys. The far field thus carries evidence that the answer depends on, unlike
// a plain book excerpt. Everything is drawn from a seed: the same (seed, index, length) gives the
// same tokens on every machine and standard library.
//
// The corpus is split so that evaluation runs on text calibration never saw:
//   calibration: Emma, Mansfield Park, Northanger Abbey, Persuasion  (austen_0 .. austen_3)
//   evaluation:  Pride and Prejudice, Sense and Sensibility (held-out Austen), and the King James
//                Bible (held-out style)                          (austen_4, austen_5, kjv)
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skipsoftmax {

// What prompt building needs from a tokenizer: text -> ids, and the id to start a prompt with.
// Any tokenizer fits (BpeTokenizer today, load_tokenizer() of src/tokenizer.h later).
struct TextTokenizer {
  std::function<std::vector<std::int32_t>(std::string_view)> encode;
  std::int32_t bos = -1;  // prepended to every prompt when >= 0
};

enum class CorpusSplit { kCalibration, kEvaluation };
const char* to_string(CorpusSplit split);
// File names (under the corpus directory) of a split's books, in drawing order.
const std::vector<std::string>& corpus_books(CorpusSplit split);

// $SKIPSOFTMAX_CORPUS_DIR, else /work/shared/corpora.
std::filesystem::path default_corpus_dir();

struct Needle {
  std::string key;        // e.g. "quiet-harbor"
  std::string value;      // 7 digits
  std::int64_t position;  // index of the needle's first token in the prompt
  std::int64_t length;    // its tokens
  double depth;           // where it sits in the haystack, in [0, 1]
};

struct RulerSample {
  std::vector<std::int32_t> tokens;    // exactly the requested length
  std::vector<Needle> needles;         // by position
  std::size_t asked = 0;               // the needle the question asks about
  std::string answer;                  // its value
  std::string book;                    // file the haystack starts in
  std::int64_t question_position = 0;  // first token of the question
};

struct RulerOptions {
  int needles = 4;
};

// A split's books, split into paragraphs and tokenized lazily (a paragraph is encoded once, when
// a prompt first needs it).
class RulerCorpus {
 public:
  // Reads the split's books from corpus_dir. Throws std::runtime_error naming a missing book.
  RulerCorpus(const std::filesystem::path& corpus_dir, CorpusSplit split, TextTokenizer tokenizer);

  // Prompt `index` of length `tokens` for `seed`. Throws std::invalid_argument when `tokens` is too
  // short to hold the preamble, the needles and the question with some haystack around them.
  RulerSample make_sample(std::int64_t tokens, std::uint64_t seed, std::int64_t index,
                          const RulerOptions& opt = {});

  CorpusSplit split() const { return split_; }

 private:
  struct Paragraph {
    std::size_t book;
    std::string text;  // with its trailing blank line
    std::optional<std::vector<std::int32_t>> ids;
  };
  const std::vector<std::int32_t>& ids(std::size_t paragraph);
  std::vector<std::int32_t> encode(std::string_view text) const { return tokenizer_.encode(text); }

  CorpusSplit split_;
  TextTokenizer tokenizer_;
  std::vector<std::string> books_;
  std::vector<Paragraph> paragraphs_;  // all books, in order
};

}  // namespace skipsoftmax
