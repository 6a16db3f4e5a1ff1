#include "ruler.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>

#include "file_io.h"

namespace skipsoftmax {
namespace {

// The haystack must keep some text around the needles.
constexpr std::int64_t kMinHaystack = 32;

constexpr std::string_view kPreamble =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "them. I will quiz you about the numbers afterwards.\n\n";

constexpr std::array<std::string_view, 32> kAdjectives = {
    "quiet",  "amber", "brisk",  "calm",   "dusty",  "eager",  "faded", "gentle",
    "hollow", "icy",   "jolly",  "keen",   "lucky",  "misty",  "noble", "olive",
    "proud",  "rapid", "silver", "tidy",   "urban",  "vivid",  "wary",  "young",
    "bold",   "crisp", "deep",   "fierce", "golden", "humble", "lunar", "mellow"};
constexpr std::array<std::string_view, 32> kNouns = {
    "harbor",  "meadow", "lantern", "falcon",   "orchard", "canyon", "violin", "compass",
    "glacier", "pepper", "quarry",  "saddle",   "thimble", "walrus", "anchor", "biscuit",
    "cedar",   "dagger", "ember",   "fountain", "garnet",  "hazel",  "island", "jasmine",
    "kettle",  "ladder", "marble",  "nectar",   "oyster",  "parcel", "ribbon", "tundra"};

// mt19937_64 is fully specified by the standard; the distributions are not, so draws are made
// from its raw bits here.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>(uniform() * static_cast<double>(n));
  }

 private:
  std::mt19937_64 engine_;
};

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t sample_seed(std::uint64_t seed, std::int64_t tokens, std::int64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(tokens)) ^
                    static_cast<std::uint64_t>(index));
}

// A key not in `used` ("quiet-harbor"), recorded there.
std::string draw_key(Rng& rng, std::vector<std::uint64_t>& used) {
  std::uint64_t k = 0;
  do {
    k = rng.below(kAdjectives.size() * kNouns.size());
  } while (std::find(used.begin(), used.end(), k) != used.end());
  used.push_back(k);
  return std::string(kAdjectives[k / kNouns.size()]) + "-" + std::string(kNouns[k % kNouns.size()]);
}

// A number of exactly `digits` digits, the first not 0.
std::string draw_digits(Rng& rng, int digits) {
  std::uint64_t low = 1;
  for (int i = 1; i < digits; ++i) low *= 10;
  return std::to_string(low + rng.below(9 * low));
}

std::string needle_text(const std::string& key, const std::string& value) {
  return "One of the special magic numbers for " + key + " is: " + value + ".\n\n";
}

std::string question_text(const std::string& key) {
  return "\nWhat is the special magic number for " + key +
         " mentioned in the provided text? The special magic number for " + key +
         " mentioned in the provided text is";
}

// Paragraphs separated by blank lines, the hard line breaks inside one joined by spaces.
std::vector<std::string> paragraphs_of(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  std::istringstream in(text);
  std::string line;
  const auto flush = [&] {
    if (!current.empty()) out.push_back(current + "\n\n");
    current.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) {
      flush();
      continue;
    }
    const std::size_t last = line.find_last_not_of(" \t");
    if (!current.empty()) current += ' ';
    current += line.substr(first, last - first + 1);
  }
  flush();
  return out;
}

}  // namespace

const char* to_string(CorpusSplit split) {
  return split == CorpusSplit::kCalibration ? "calibration" : "evaluation";
}

const std::vector<std::string>& corpus_books(CorpusSplit split) {
  static const std::vector<std::string> calibration = {
      "austen_0_emma.txt", "austen_1_mansfield_park.txt", "austen_2_northanger_abbey.txt",
      "austen_3_persuasion.txt"};
  static const std::vector<std::string> evaluation = {
      "austen_4_pride_and_prejudice.txt", "austen_5_sense_and_sensibility.txt", "kjv.txt"};
  return split == CorpusSplit::kCalibration ? calibration : evaluation;
}

std::filesystem::path default_corpus_dir() {
  const char* env = std::getenv("SKIPSOFTMAX_CORPUS_DIR");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path("/work/shared/corpora");
}

RulerCorpus::RulerCorpus(const std::filesystem::path& corpus_dir, CorpusSplit split,
                         TextTokenizer tokenizer)
    : tokenizer_(std::move(tokenizer)), books_(corpus_books(split)) {
  for (std::size_t b = 0; b < books_.size(); ++b) {
    const std::filesystem::path path = corpus_dir / books_[b];
    if (!std::filesystem::is_regular_file(path)) {
      throw std::runtime_error(path.string() + ": no such book (the " + to_string(split) +
                               " split of the corpus needs it; see --corpus-dir)");
    }
    for (std::string& p : paragraphs_of(read_text_file(path))) {
      paragraphs_.push_back({b, std::move(p), std::nullopt});
    }
  }
  if (paragraphs_.empty()) throw std::runtime_error(corpus_dir.string() + ": the books are empty");
}

const std::vector<std::int32_t>& RulerCorpus::ids(std::size_t paragraph) {
  Paragraph& p = paragraphs_[paragraph];
  if (!p.ids) p.ids = encode(p.text);
  return *p.ids;
}

RulerCorpus::Assembled RulerCorpus::assemble(std::int64_t tokens, double start,
                                             std::string_view preamble_text,
                                             const std::vector<Insert>& inserts,
                                             std::string_view question_body,
                                             const std::string& what) {
  const std::vector<std::int32_t> preamble = encode(preamble_text);
  const std::vector<std::int32_t> question = encode(question_body);
  std::int64_t fixed = (tokenizer_.bos >= 0 ? 1 : 0) + static_cast<std::int64_t>(preamble.size()) +
                       static_cast<std::int64_t>(question.size());
  for (const Insert& in : inserts) fixed += static_cast<std::int64_t>(in.ids.size());
  const std::int64_t hay = tokens - fixed;
  if (hay < kMinHaystack) {
    throw std::invalid_argument(
        "a RULER prompt of " + std::to_string(tokens) + " tokens is too short: the preamble, " +
        what + " and the question take " + std::to_string(fixed) +
        ", and the haystack needs at least " + std::to_string(kMinHaystack));
  }

  // The haystack: whole paragraphs from a random one on (wrapping through the split's books),
  // the last one cut to length. Inserts go between whole paragraphs, at the boundary nearest
  // their depth.
  Assembled out;
  std::size_t p = static_cast<std::size_t>(start * static_cast<double>(paragraphs_.size()));
  out.book = books_[paragraphs_[p].book];
  std::vector<std::int32_t> haystack;
  std::vector<std::int64_t> boundaries = {0};
  while (static_cast<std::int64_t>(haystack.size()) < hay) {
    const std::vector<std::int32_t>& para = ids(p);
    const std::size_t take =
        std::min<std::size_t>(para.size(), static_cast<std::size_t>(hay) - haystack.size());
    haystack.insert(haystack.end(), para.begin(), para.begin() + static_cast<std::ptrdiff_t>(take));
    if (take == para.size()) boundaries.push_back(static_cast<std::int64_t>(haystack.size()));
    p = (p + 1) % paragraphs_.size();
  }

  std::vector<std::int32_t>& t = out.tokens;
  if (tokenizer_.bos >= 0) t.push_back(tokenizer_.bos);
  t.insert(t.end(), preamble.begin(), preamble.end());
  std::int64_t copied = 0;
  for (const Insert& in : inserts) {
    const double target = in.depth * static_cast<double>(hay);
    const std::int64_t at = *std::min_element(boundaries.begin(), boundaries.end(),
                                              [&](std::int64_t x, std::int64_t y) {
                                                return std::abs(static_cast<double>(x) - target) <
                                                       std::abs(static_cast<double>(y) - target);
                                              });
    const std::int64_t from = std::max(at, copied);
    t.insert(t.end(), haystack.begin() + copied, haystack.begin() + from);
    copied = from;
    out.positions.push_back(static_cast<std::int64_t>(t.size()));
    out.depths.push_back(static_cast<double>(from) / static_cast<double>(hay));
    t.insert(t.end(), in.ids.begin(), in.ids.end());
  }
  t.insert(t.end(), haystack.begin() + copied, haystack.end());
  out.question_position = static_cast<std::int64_t>(t.size());
  t.insert(t.end(), question.begin(), question.end());
  return out;
}

RulerSample RulerCorpus::make_sample(std::int64_t tokens, std::uint64_t seed, std::int64_t index,
                                     const RulerOptions& opt) {
  if (opt.needles < 1 || opt.needles > static_cast<int>(kAdjectives.size() * kNouns.size())) {
    throw std::invalid_argument("a RULER prompt needs between 1 and 1024 needles");
  }
  Rng rng(sample_seed(seed, tokens, index));
  RulerSample s;

  // Distinct keys, 7-digit values, depths in [0, 1), the key the question asks for.
  std::vector<std::uint64_t> used;
  std::vector<std::pair<double, std::pair<std::string, std::string>>> drawn;
  for (int i = 0; i < opt.needles; ++i) {
    std::string key = draw_key(rng, used);
    std::string value = draw_digits(rng, 7);
    const double depth = rng.uniform();
    drawn.push_back({depth, {std::move(key), std::move(value)}});
  }
  std::sort(drawn.begin(), drawn.end());
  s.asked = static_cast<std::size_t>(rng.below(drawn.size()));
  s.answer = drawn[s.asked].second.second;

  std::vector<Insert> inserts;
  for (const auto& [depth, kv] : drawn) {
    inserts.push_back({depth, encode(needle_text(kv.first, kv.second))});
  }
  const Assembled a = assemble(tokens, rng.uniform(), kPreamble, inserts,
                               question_text(drawn[s.asked].second.first),
                               std::to_string(opt.needles) + " needles");
  s.tokens = a.tokens;
  s.book = a.book;
  s.question_position = a.question_position;
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    s.needles.push_back({drawn[i].second.first, drawn[i].second.second, a.positions[i],
                         static_cast<std::int64_t>(inserts[i].ids.size()), a.depths[i]});
  }
  return s;
}

TaskSample RulerCorpus::make_task_sample(RulerTask task, std::int64_t tokens, std::uint64_t seed,
                                         std::int64_t index) {
  // Each task draws from its own stream, so adding a task changes no other task's samples.
  Rng rng(sample_seed(seed ^ (0x7a5c0000ULL + static_cast<std::uint64_t>(task)), tokens, index));
  TaskSample s;
  std::vector<Insert> inserts;
  std::string preamble(kPreamble);
  std::string question;
  std::string what;
  std::vector<std::uint64_t> used;
  switch (task) {
    case RulerTask::kNiahSingle: {
      const std::string key = draw_key(rng, used);
      const std::string value = draw_digits(rng, 7);
      inserts.push_back({static_cast<double>(index % 5) / 4.0, encode(needle_text(key, value))});
      question = question_text(key);
      s.answers = {value};
      what = "the needle";
      break;
    }
    case RulerTask::kNiahMultikey: {
      std::vector<std::pair<double, std::pair<std::string, std::string>>> drawn;
      for (int i = 0; i < 4; ++i) {
        std::string key = draw_key(rng, used);
        std::string value = draw_digits(rng, 7);
        drawn.push_back({rng.uniform(), {std::move(key), std::move(value)}});
      }
      std::sort(drawn.begin(), drawn.end());
      const auto& asked = drawn[rng.below(drawn.size())].second;
      for (const auto& [depth, kv] : drawn) {
        inserts.push_back({depth, encode(needle_text(kv.first, kv.second))});
      }
      question = question_text(asked.first);
      s.answers = {asked.second};
      what = "4 needles";
      break;
    }
    case RulerTask::kNiahMultivalue: {
      const std::string key = draw_key(rng, used);
      std::vector<std::pair<double, std::string>> drawn;
      for (int i = 0; i < 4; ++i) {
        std::string value;
        do {
          value = draw_digits(rng, 7);
        } while (std::any_of(drawn.begin(), drawn.end(),
                             [&](const auto& d) { return d.second == value; }));
        drawn.push_back({rng.uniform(), std::move(value)});
      }
      std::sort(drawn.begin(), drawn.end());
      for (const auto& [depth, value] : drawn) {
        inserts.push_back({depth, encode(needle_text(key, value))});
        s.answers.push_back(value);
      }
      question = "\nWhat are all the special magic numbers for " + key +
                 " mentioned in the provided text? The special magic numbers for " + key +
                 " mentioned in the provided text are";
      what = "4 needles";
      break;
    }
    case RulerTask::kVariableTracking: {
      constexpr int kHops = 4;
      std::vector<double> depths;
      for (int i = 0; i <= kHops; ++i) depths.push_back(rng.uniform());
      std::sort(depths.begin(), depths.end());
      const std::string value = draw_digits(rng, 5);
      std::vector<std::string> names;
      while (names.size() <= kHops) {
        std::string name;
        for (int c = 0; c < 5; ++c) name += static_cast<char>('A' + rng.below(26));
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
      }
      for (int i = 0; i <= kHops; ++i) {
        const std::string rhs = i == 0 ? value : "VAR " + names[i - 1];
        inserts.push_back({depths[i], encode("VAR " + names[i] + " = " + rhs + ".\n\n")});
      }
      preamble =
          "Memorize and track the chain(s) of variable assignment hidden in the following "
          "text.\n\n";
      const std::string count = std::to_string(kHops + 1);
      question = "\nQuestion: Find all variables that are assigned the value " + value +
                 " in the text above. Answer: According to the chain(s) of variable assignment "
                 "in the text above, " +
                 count + " variables are assigned the value " + value + ", they are:";
      s.answers = names;
      what = count + " assignments";
      break;
    }
  }
  const Assembled a = assemble(tokens, rng.uniform(), preamble, inserts, question, what);
  s.max_new_tokens = answer_budget(task);
  s.tokens = a.tokens;
  s.depths = a.depths;
  s.book = a.book;
  return s;
}

std::vector<std::int32_t> RulerCorpus::make_text(std::int64_t tokens, std::uint64_t seed,
                                                 std::int64_t index) {
  Rng rng(sample_seed(seed ^ 0x9e97000000ULL, tokens, index));
  const std::int64_t bos = tokenizer_.bos >= 0 ? 1 : 0;
  if (tokens < bos + kMinHaystack) {
    throw std::invalid_argument("a text of " + std::to_string(tokens) +
                                " tokens is too short (at least " +
                                std::to_string(bos + kMinHaystack) + ")");
  }
  return assemble(tokens, rng.uniform(), "", {}, "", "nothing").tokens;
}

const char* to_string(RulerTask task) {
  switch (task) {
    case RulerTask::kNiahSingle:
      return "ruler_niah_single";
    case RulerTask::kNiahMultikey:
      return "ruler_niah_multikey";
    case RulerTask::kNiahMultivalue:
      return "ruler_niah_multivalue";
    case RulerTask::kVariableTracking:
      return "ruler_vt";
  }
  return "?";
}

RulerTask parse_ruler_task(std::string_view name) {
  std::string names;
  for (RulerTask t : kRulerTasks) {
    if (name == to_string(t)) return t;
    names += (names.empty() ? "" : ", ") + std::string(to_string(t));
  }
  throw std::invalid_argument("unknown task '" + std::string(name) + "' (valid: " + names + ")");
}

int answer_budget(RulerTask task) {
  switch (task) {
    case RulerTask::kNiahSingle:
    case RulerTask::kNiahMultikey:
      return 16;  // 7 digits (a token each in both vocabularies) and a full stop
    case RulerTask::kNiahMultivalue:
      return 48;  // four of them, with separators
    case RulerTask::kVariableTracking:
      return 32;  // five 5-letter names
  }
  return 0;
}

double string_match_all(std::string_view generated, const std::vector<std::string>& answers) {
  if (answers.empty()) return 0.0;
  const auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string haystack = lower(generated);
  std::size_t found = 0;
  for (const std::string& a : answers) found += haystack.find(lower(a)) != std::string::npos;
  return static_cast<double>(found) / static_cast<double>(answers.size());
}

}  // namespace skipsoftmax
