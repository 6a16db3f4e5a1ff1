#include "ruler.h"

#include <algorithm>
#include <array>
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
    : split_(split), tokenizer_(std::move(tokenizer)), books_(corpus_books(split)) {
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

RulerSample RulerCorpus::make_sample(std::int64_t tokens, std::uint64_t seed, std::int64_t index,
                                     const RulerOptions& opt) {
  if (opt.needles < 1 || opt.needles > static_cast<int>(kAdjectives.size() * kNouns.size())) {
    throw std::invalid_argument("a RULER prompt needs between 1 and 1024 needles");
  }
  Rng rng(splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(tokens)) ^
                     static_cast<std::uint64_t>(index)));
  RulerSample s;

  // Distinct keys, 7-digit values, depths in [0, 1), the key the question asks for.
  std::vector<std::uint64_t> used;
  std::vector<std::pair<double, std::pair<std::string, std::string>>> drawn;
  for (int i = 0; i < opt.needles; ++i) {
    std::uint64_t k = 0;
    do {
      k = rng.below(kAdjectives.size() * kNouns.size());
    } while (std::find(used.begin(), used.end(), k) != used.end());
    used.push_back(k);
    std::string key =
        std::string(kAdjectives[k / kNouns.size()]) + "-" + std::string(kNouns[k % kNouns.size()]);
    std::string value = std::to_string(1000000 + rng.below(9000000));
    const double depth = rng.uniform();
    drawn.push_back({depth, {std::move(key), std::move(value)}});
  }
  std::sort(drawn.begin(), drawn.end());
  s.asked = static_cast<std::size_t>(rng.below(drawn.size()));
  s.answer = drawn[s.asked].second.second;

  const std::vector<std::int32_t> preamble = encode(kPreamble);
  const std::vector<std::int32_t> question = encode(question_text(drawn[s.asked].second.first));
  std::vector<std::vector<std::int32_t>> needle_ids;
  std::int64_t fixed = (tokenizer_.bos >= 0 ? 1 : 0) + static_cast<std::int64_t>(preamble.size()) +
                       static_cast<std::int64_t>(question.size());
  for (const auto& [depth, kv] : drawn) {
    needle_ids.push_back(encode(needle_text(kv.first, kv.second)));
    fixed += static_cast<std::int64_t>(needle_ids.back().size());
  }
  const std::int64_t hay = tokens - fixed;
  if (hay < kMinHaystack) {
    throw std::invalid_argument(
        "a RULER prompt of " + std::to_string(tokens) + " tokens is too short: the preamble, " +
        std::to_string(opt.needles) + " needles and the question take " + std::to_string(fixed) +
        ", and the haystack needs at least " + std::to_string(kMinHaystack));
  }

  // The haystack: whole paragraphs from a random one on (wrapping through the split's books),
  // the last one cut to length. Needles go between whole paragraphs, at the boundary nearest
  // their depth.
  std::size_t p = static_cast<std::size_t>(rng.below(paragraphs_.size()));
  s.book = books_[paragraphs_[p].book];
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

  if (tokenizer_.bos >= 0) s.tokens.push_back(tokenizer_.bos);
  s.tokens.insert(s.tokens.end(), preamble.begin(), preamble.end());
  std::int64_t copied = 0;
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    const double target = drawn[i].first * static_cast<double>(hay);
    const std::int64_t at = *std::min_element(boundaries.begin(), boundaries.end(),
                                              [&](std::int64_t a, std::int64_t b) {
                                                return std::abs(static_cast<double>(a) - target) <
                                                       std::abs(static_cast<double>(b) - target);
                                              });
    const std::int64_t from = std::max(at, copied);
    s.tokens.insert(s.tokens.end(), haystack.begin() + copied, haystack.begin() + from);
    copied = from;
    s.needles.push_back({drawn[i].second.first, drawn[i].second.second,
                         static_cast<std::int64_t>(s.tokens.size()),
                         static_cast<std::int64_t>(needle_ids[i].size()),
                         static_cast<double>(from) / static_cast<double>(hay)});
    s.tokens.insert(s.tokens.end(), needle_ids[i].begin(), needle_ids[i].end());
  }
  s.tokens.insert(s.tokens.end(), haystack.begin() + copied, haystack.end());
  s.question_position = static_cast<std::int64_t>(s.tokens.size());
  s.tokens.insert(s.tokens.end(), question.begin(), question.end());
  return s;
}

}  // namespace skipsoftmax
