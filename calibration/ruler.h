// RULER-style long prompts (needle in a haystack, several keys) from public-domain books, for
// calibration and for the accuracy tasks of `skipsoftmax evaluate`.
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
// Any tokenizer fits (BpeTokenizer today, load_tokenizer() of model/tokenizer.h later).
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

// The accuracy tasks (after RULER, Hsieh et al. 2024), each scored by string match of the greedy
// answer against every expected string:
//   niah_single      one needle at a depth stepping through 0, 1/4, 1/2, 3/4, 1 by sample index;
//                    asks its value
//   niah_multikey    four needles with distinct keys at random depths; asks one key's value
//   niah_multivalue  four values for one key at random depths; asks for all of them
//   vt               variable tracking: "VAR A = 12345." then "VAR B = VAR A." ... four hops at
//                    increasing depths; asks for every variable holding the value
enum class RulerTask { kNiahSingle, kNiahMultikey, kNiahMultivalue, kVariableTracking };
inline constexpr RulerTask kRulerTasks[] = {RulerTask::kNiahSingle, RulerTask::kNiahMultikey,
                                            RulerTask::kNiahMultivalue,
                                            RulerTask::kVariableTracking};
// "ruler_niah_single", "ruler_niah_multikey", "ruler_niah_multivalue", "ruler_vt".
const char* to_string(RulerTask task);
// The inverse of to_string. Throws std::invalid_argument listing the task names.
RulerTask parse_ruler_task(std::string_view name);

struct TaskSample {
  std::vector<std::int32_t> tokens;  // exactly the requested length, ending in the answer's prefix
  std::vector<std::string> answers;  // every one must appear in the generated text
  int max_new_tokens = 0;            // answer_budget(task)
  std::vector<double> depths;        // of the planted sentences, in [0, 1], in order
  std::string book;
};

// The generated tokens a task's answer gets (greedy decoding stops there): its values and slack.
int answer_budget(RulerTask task);

// The fraction of `answers` found in `generated`, ignoring case (RULER's string_match_all); 0 for
// no answers.
double string_match_all(std::string_view generated, const std::vector<std::string>& answers);

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

  // Sample `index` of `task` at length `tokens` for `seed`; errors as make_sample.
  TaskSample make_task_sample(RulerTask task, std::int64_t tokens, std::uint64_t seed,
                              std::int64_t index);

  // Plain text of exactly `tokens` tokens (BOS first when the tokenizer has one), from whole
  // paragraphs starting at a random one: the held-out text of perplexity.
  std::vector<std::int32_t> make_text(std::int64_t tokens, std::uint64_t seed, std::int64_t index);

 private:
  struct Paragraph {
    std::size_t book;
    std::string text;  // with its trailing blank line
    std::optional<std::vector<std::int32_t>> ids;
  };
  struct Insert {
    double depth;  // where in the haystack, in [0, 1]
    std::vector<std::int32_t> ids;
  };
  struct Assembled {
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> positions;  // of the inserts
    std::vector<double> depths;           // where they landed
    std::string book;
    std::int64_t question_position = 0;
  };
  // [BOS] preamble haystack-with-inserts question, exactly `tokens` long. The inserts go, in
  // order of `inserts` (sorted by depth), at the paragraph boundary nearest their depth. `start`,
  // a uniform draw in [0, 1), picks the haystack's first paragraph; `what` names the prompt in the
  // error for a length too short.
  Assembled assemble(std::int64_t tokens, double start, std::string_view preamble,
                     const std::vector<Insert>& inserts, std::string_view question,
                     const std::string& what);
  const std::vector<std::int32_t>& ids(std::size_t paragraph);
  std::vector<std::int32_t> encode(std::string_view text) const { return tokenizer_.encode(text); }

  TextTokenizer tokenizer_;
  std::vector<std::string> books_;
  std::vector<Paragraph> paragraphs_;  // all books, in order
};

}  // namespace skipsoftmax
