// RULER-style samples: exact lengths, determinism from the seed, needles where they are said to
// be, the question about one of them, and the calibration / evaluation split of the books.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

#include "ruler.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

// One token per byte: prompts read back as text, and lengths are easy to reason about.
TextTokenizer byte_tokenizer() {
  TextTokenizer t;
  t.encode = [](std::string_view text) {
    return std::vector<std::int32_t>(text.begin(), text.end());
  };
  t.bos = 1;
  return t;
}

std::string text_of(const std::vector<std::int32_t>& ids, std::size_t from, std::size_t count) {
  std::string s;
  for (std::size_t i = from; i < from + count && i < ids.size(); ++i) s += char(ids[i]);
  return s;
}

class Ruler : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    // Small books with the corpus's file names; each paragraph names its book.
    for (CorpusSplit split : {CorpusSplit::kCalibration, CorpusSplit::kEvaluation}) {
      for (const std::string& book : corpus_books(split)) {
        std::ofstream out(dir_ / book);
        for (int p = 0; p < 60; ++p) {
          out << "Paragraph " << p << " of " << book << ", which goes on\nfor a while over\n"
              << "several lines of text.\n\n";
        }
      }
    }
  }
};

TEST_F(Ruler, ExactLengthAndDeterministic) {
  RulerCorpus corpus(dir_, CorpusSplit::kCalibration, byte_tokenizer());
  for (std::int64_t n : {700, 1024, 4099}) {
    const RulerSample a = corpus.make_sample(n, 7, 0);
    EXPECT_EQ(static_cast<std::int64_t>(a.tokens.size()), n);
    EXPECT_EQ(a.tokens.front(), 1);  // BOS
    RulerCorpus again(dir_, CorpusSplit::kCalibration, byte_tokenizer());
    const RulerSample b = again.make_sample(n, 7, 0);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.answer, b.answer);
    EXPECT_NE(corpus.make_sample(n, 8, 0).tokens, a.tokens);  // another seed
    EXPECT_NE(corpus.make_sample(n, 7, 1).tokens, a.tokens);  // another sample index
  }
}

TEST_F(Ruler, NeedlesAreWhereTheSampleSaysAndTheQuestionAsksOne) {
  RulerCorpus corpus(dir_, CorpusSplit::kCalibration, byte_tokenizer());
  std::vector<double> depths;
  for (std::int64_t i = 0; i < 20; ++i) {
    const RulerSample s = corpus.make_sample(3000, 3, i);
    ASSERT_EQ(s.needles.size(), 4u);
    std::set<std::string> keys;
    for (std::size_t k = 0; k < s.needles.size(); ++k) {
      const Needle& n = s.needles[k];
      EXPECT_EQ(text_of(s.tokens, n.position, n.length),
                "One of the special magic numbers for " + n.key + " is: " + n.value + ".\n\n");
      EXPECT_EQ(n.value.size(), 7u);
      EXPECT_GE(n.depth, 0.0);
      EXPECT_LE(n.depth, 1.0);
      if (k > 0) {
        EXPECT_LE(s.needles[k - 1].position + s.needles[k - 1].length, n.position);
      }
      // Planted between paragraphs: the text before a needle ends a paragraph (or the preamble).
      EXPECT_EQ(text_of(s.tokens, n.position - 2, 2), "\n\n");
      keys.insert(n.key);
      depths.push_back(n.depth);
    }
    EXPECT_EQ(keys.size(), 4u) << "keys are distinct";
    ASSERT_LT(s.asked, s.needles.size());
    EXPECT_EQ(s.answer, s.needles[s.asked].value);
    const std::string question =
        text_of(s.tokens, s.question_position, s.tokens.size() - s.question_position);
    EXPECT_NE(question.find("magic number for " + s.needles[s.asked].key + " mentioned"),
              std::string::npos)
        << question;
    EXPECT_EQ(question.back(), 's');  // "... is": the answer comes next
  }
  // Depths cover the haystack: early, middle and late needles all occur.
  std::sort(depths.begin(), depths.end());
  EXPECT_LT(depths.front(), 0.1);
  EXPECT_GT(depths.back(), 0.9);
  const auto mid =
      std::count_if(depths.begin(), depths.end(), [](double d) { return d > 0.3 && d < 0.7; });
  EXPECT_GT(mid, 10);
}

TEST_F(Ruler, HaystackComesFromItsSplitOnly) {
  for (CorpusSplit split : {CorpusSplit::kCalibration, CorpusSplit::kEvaluation}) {
    RulerCorpus corpus(dir_, split, byte_tokenizer());
    const std::vector<std::string>& mine = corpus_books(split);
    const std::vector<std::string>& other = corpus_books(
        split == CorpusSplit::kCalibration ? CorpusSplit::kEvaluation : CorpusSplit::kCalibration);
    for (std::int64_t i = 0; i < 8; ++i) {
      // Longer than a whole book: the haystack wraps into the split's next books.
      const RulerSample s = corpus.make_sample(12000, 5, i);
      EXPECT_NE(std::find(mine.begin(), mine.end(), s.book), mine.end());
      const std::string text = text_of(s.tokens, 0, s.tokens.size());
      for (const std::string& book : other) EXPECT_EQ(text.find(book), std::string::npos) << book;
    }
  }
  // The split is disjoint and covers the corpus.
  std::set<std::string> all;
  for (CorpusSplit split : {CorpusSplit::kCalibration, CorpusSplit::kEvaluation}) {
    for (const std::string& b : corpus_books(split)) EXPECT_TRUE(all.insert(b).second) << b;
  }
  EXPECT_EQ(all.size(), 7u);
}

TEST_F(Ruler, TaskSamplesHoldTheirAnswersAtTheirDepths) {
  RulerCorpus corpus(dir_, CorpusSplit::kEvaluation, byte_tokenizer());
  for (RulerTask task : kRulerTasks) {
    for (std::int64_t i = 0; i < 10; ++i) {
      const TaskSample s = corpus.make_task_sample(task, 3000, 11, i);
      ASSERT_EQ(s.tokens.size(), 3000u) << to_string(task);
      EXPECT_EQ(s.max_new_tokens, answer_budget(task));
      const std::string text = text_of(s.tokens, 0, s.tokens.size());
      const std::size_t question = text.rfind("\n\n") + 2;
      ASSERT_FALSE(s.answers.empty());
      for (const std::string& a : s.answers) {
        // Each answer is planted in the haystack, and the question does not give it away.
        const std::size_t at = text.find(a);
        EXPECT_NE(at, std::string::npos) << to_string(task) << ": " << a;
        EXPECT_LT(at, question) << to_string(task);
      }
      EXPECT_TRUE(std::is_sorted(s.depths.begin(), s.depths.end()));
      const TaskSample again = corpus.make_task_sample(task, 3000, 11, i);
      EXPECT_EQ(again.tokens, s.tokens);
      EXPECT_NE(corpus.make_task_sample(task, 3000, 12, i).tokens, s.tokens);
      switch (task) {
        case RulerTask::kNiahSingle:
          ASSERT_EQ(s.depths.size(), 1u);
          // The depth steps through 0, 1/4, ..., 1 by index (to the nearest paragraph).
          EXPECT_NEAR(s.depths[0], static_cast<double>(i % 5) / 4.0, 0.05);
          EXPECT_EQ(s.answers[0].size(), 7u);
          break;
        case RulerTask::kNiahMultikey:
          EXPECT_EQ(s.depths.size(), 4u);
          EXPECT_EQ(s.answers.size(), 1u);
          break;
        case RulerTask::kNiahMultivalue:
          EXPECT_EQ(s.depths.size(), 4u);
          EXPECT_EQ(std::set<std::string>(s.answers.begin(), s.answers.end()).size(), 4u);
          EXPECT_NE(text.find("The special magic numbers for"), std::string::npos);
          break;
        case RulerTask::kVariableTracking: {
          ASSERT_EQ(s.answers.size(), 5u);
          // A chain: the first name holds the value, each next one the previous name.
          for (std::size_t k = 1; k < 5; ++k) {
            const std::size_t link =
                text.find("VAR " + s.answers[k] + " = VAR " + s.answers[k - 1] + ".");
            EXPECT_NE(link, std::string::npos);
            EXPECT_GT(link, text.find("VAR " + s.answers[k - 1] + " = "));
          }
          EXPECT_EQ(text.back(), ':');
          break;
        }
      }
    }
  }
}

TEST_F(Ruler, TextSamplesAreExactAndHeldOut) {
  RulerCorpus corpus(dir_, CorpusSplit::kEvaluation, byte_tokenizer());
  const std::vector<std::int32_t> t = corpus.make_text(2000, 3, 0);
  ASSERT_EQ(t.size(), 2000u);
  EXPECT_EQ(t.front(), 1);
  EXPECT_EQ(corpus.make_text(2000, 3, 0), t);
  EXPECT_NE(corpus.make_text(2000, 3, 1), t);
  EXPECT_EQ(text_of(t, 0, t.size()).find("magic"), std::string::npos);
  EXPECT_ERROR_HAS(corpus.make_text(20, 3, 0), "too short");
}

TEST(RulerScoring, StringMatchAllCountsEachAnswer) {
  EXPECT_EQ(string_match_all(" 1234567.", {"1234567"}), 1.0);
  EXPECT_EQ(string_match_all(" 123456.", {"1234567"}), 0.0);
  EXPECT_EQ(string_match_all("ABCDE, FGHIJ and KLMNO", {"ABCDE", "KLMNO", "PQRST", "UVWXY"}), 0.5);
  EXPECT_EQ(string_match_all("abcde and Klmno", {"ABCDE", "KLMNO"}), 1.0);  // case ignored
  EXPECT_EQ(string_match_all("anything", {}), 0.0);
  for (RulerTask t : kRulerTasks) EXPECT_EQ(parse_ruler_task(to_string(t)), t);
  EXPECT_ERROR_HAS(parse_ruler_task("ruler_qa"),
                   "unknown task 'ruler_qa' (valid: ruler_niah_single");
}

TEST_F(Ruler, ErrorsNameTheProblem) {
  RulerCorpus corpus(dir_, CorpusSplit::kCalibration, byte_tokenizer());
  EXPECT_ERROR_HAS(corpus.make_sample(300, 1, 0), "tokens is too short");
  EXPECT_ERROR_HAS(RulerCorpus(dir_ / "nowhere", CorpusSplit::kCalibration, byte_tokenizer()),
                   "austen_0_emma.txt: no such book");
}

}  // namespace
}  // namespace skipsoftmax
