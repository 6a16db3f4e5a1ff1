#include "tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <limits>
#include <queue>
#include <stdexcept>

namespace skipsoftmax {
namespace {

// GPT-2's map from bytes to printable code points: printable Latin-1 bytes stand for themselves,
// the others take code points from 256 up, in byte order.
const std::array<std::string, 256>& byte_alphabet() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const UChar32 cp = printable ? b : next++;
      char buf[4];
      int len = 0;
      U8_APPEND_UNSAFE(buf, len, cp);
      t[b] = std::string(buf, static_cast<std::size_t>(len));
    }
    return t;
  }();
  return table;
}

std::string map_bytes(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) out += byte_alphabet()[c];
  return out;
}

enum class Kind { kLetter, kNumber, kSpace, kOther };

// One code point of the text with its byte span and class; invalid UTF-8 bytes count as kOther.
struct CodePoint {
  std::size_t begin, end;
  UChar32 cp;
  Kind kind;
};

}  // namespace

std::optional<std::size_t> invalid_utf8_at(std::string_view text) {
  const auto* s = reinterpret_cast<const std::uint8_t*>(text.data());
  // U8_NEXT counts in int32: a text of 2 GiB or more is checked in pieces that end on a lead byte.
  std::size_t base = 0;
  while (base < text.size()) {
    std::size_t end = std::min(text.size(), base + (std::size_t{1} << 30));
    while (end < text.size() && (s[end] & 0xC0) == 0x80) ++end;
    const auto n = static_cast<std::int32_t>(end - base);
    for (std::int32_t i = 0; i < n;) {
      const std::int32_t at = i;
      UChar32 c;
      U8_NEXT(s + base, i, n, c);
      if (c < 0) return base + static_cast<std::size_t>(at);
    }
    base = end;
  }
  return std::nullopt;
}

namespace {

std::vector<CodePoint> code_points(std::string_view text) {
  std::vector<CodePoint> out;
  const auto* s = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto n = static_cast<std::int32_t>(text.size());
  for (std::int32_t i = 0; i < n;) {
    const std::int32_t begin = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);
    Kind kind = Kind::kOther;
    if (c >= 0) {
      const std::uint32_t mask = U_GET_GC_MASK(c);
      if (mask & U_GC_L_MASK)
        kind = Kind::kLetter;
      else if (mask & U_GC_N_MASK)
        kind = Kind::kNumber;
      else if (u_isUWhiteSpace(c))
        kind = Kind::kSpace;
    }
    out.push_back({static_cast<std::size_t>(begin), static_cast<std::size_t>(i), c, kind});
  }
  return out;
}

// GPT-2's pattern over code points [b, e) (a digit-free stretch or a single digit), appending the
// byte spans of its matches.
void gpt2_pieces(const std::vector<CodePoint>& cps, std::size_t b, std::size_t e,
                 std::vector<std::pair<std::size_t, std::size_t>>& out) {
  const auto run = [&](std::size_t i, Kind kind) {
    while (i < e && cps[i].kind == kind) ++i;
    return i;
  };
  std::size_t i = b;
  while (i < e) {
    std::size_t j = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cps[i].cp == '\'' && i + 1 < e) {
      const UChar32 c1 = cps[i + 1].cp, c2 = i + 2 < e ? cps[i + 2].cp : 0;
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        j = i + 2;
      else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        j = i + 3;
    }
    if (j == i) {
      // An optional single space before a letter, number or other run.
      const std::size_t k = cps[i].cp == ' ' && i + 1 < e ? i + 1 : i;
      if (cps[k].kind == Kind::kLetter || cps[k].kind == Kind::kNumber) {
        j = run(k, cps[k].kind);
      } else if (cps[k].kind == Kind::kOther) {
        j = run(k, Kind::kOther);
      }
    }
    if (j == i) {
      // \s+(?!\S) or \s+: a whitespace run; before a non-space its last character is left for the
      // next piece (unless the run is that one character).
      j = run(i, Kind::kSpace);
      if (j < e && j - i > 1) --j;
    }
    out.emplace_back(cps[i].begin, cps[j - 1].end);
    i = j;
  }
}

}  // namespace

bool Tokenizer::is_end_of_generation(std::int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

const std::string& Tokenizer::token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
    throw std::runtime_error("token id " + std::to_string(id) + " is outside the vocabulary");
  }
  return tokens_[static_cast<std::size_t>(id)];
}

std::int32_t Tokenizer::find(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

bool Tokenizer::flag(const gguf::File& file, const std::string& key, bool default_value) {
  const gguf::Value* v = file.find(key);
  if (!v) return default_value;
  const bool* b = std::get_if<bool>(v);
  if (!b) throw std::runtime_error("metadata " + key + " is not a boolean");
  return *b;
}

void Tokenizer::load_vocabulary(const gguf::File& file, bool add_bos_default) {
  tokens_ = file.strings("tokenizer.ggml.tokens");
  if (tokens_.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::runtime_error("tokenizer.ggml.tokens: too many tokens");
  }
  ids_.clear();
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    ids_.emplace(tokens_[i], static_cast<std::int32_t>(i));
  }
  const auto id = [&](const std::string& key, bool required) -> std::int32_t {
    if (!required && !file.find(key)) return -1;
    const std::int64_t v = file.integer(key);
    if (v < 0 || static_cast<std::size_t>(v) >= tokens_.size()) {
      throw std::runtime_error(key + " = " + std::to_string(v) + " is outside the vocabulary");
    }
    return static_cast<std::int32_t>(v);
  };
  bos_ = id("tokenizer.ggml.bos_token_id", true);
  eos_ = id("tokenizer.ggml.eos_token_id", true);
  unk_ = id("tokenizer.ggml.unknown_token_id", false);
  add_bos_ = flag(file, "tokenizer.ggml.add_bos_token", add_bos_default);
  add_eos_ = flag(file, "tokenizer.ggml.add_eos_token", false);

  // GGUF names one eos; chat models end a turn with another token, which llama.cpp recognises by
  // its text (or by tokenizer.ggml.eot_token_id / eom_token_id where a converter wrote them).
  end_of_generation_ = {eos_};
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (const std::int32_t t = id(key, false); t >= 0) end_of_generation_.push_back(t);
  }
  for (const char* text : {"<end_of_turn>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                           "<|eom_id|>", "<|end|>", "<|end_of_text|>"}) {
    if (const std::int32_t t = find(text); t >= 0) end_of_generation_.push_back(t);
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()),
                           end_of_generation_.end());
}

std::unique_ptr<Tokenizer> load_tokenizer(const gguf::File& file) {
  if (!file.find("tokenizer.ggml.model")) {
    throw std::runtime_error(
        "the GGUF file has no tokenizer (no metadata key tokenizer.ggml.model)");
  }
  const std::string& model = file.string("tokenizer.ggml.model");
  if (model == "gpt2") return std::make_unique<BpeTokenizer>(BpeTokenizer::from_gguf(file));
  if (model == "llama") return std::make_unique<SpmTokenizer>(SpmTokenizer::from_gguf(file));
  throw std::runtime_error("tokenizer.ggml.model '" + model +
                           "' is not supported: only 'gpt2' (byte-level BPE) and 'llama' "
                           "(SentencePiece BPE) are implemented");
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) {
  const std::vector<CodePoint> cps = code_points(text);
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  // Digits one by one (HF's Digits(individual_digits)), the stretches between them by GPT-2's rule.
  std::size_t start = 0;
  for (std::size_t i = 0; i <= cps.size(); ++i) {
    if (i == cps.size() || cps[i].kind == Kind::kNumber) {
      gpt2_pieces(cps, start, i, spans);
      if (i < cps.size()) spans.emplace_back(cps[i].begin, cps[i].end);
      start = i + 1;
    }
  }
  std::vector<std::string> pieces;
  for (const auto& [b, e] : spans) pieces.push_back(map_bytes(text.substr(b, e - b)));
  return pieces;
}

BpeTokenizer BpeTokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw std::runtime_error("tokenizer.ggml.model is '" + model +
                             "': not byte-level BPE ('gpt2')");
  }
  BpeTokenizer t;
  // Vocabularies may lack the symbols of bytes that never occur in text (SmolLM2 lacks some
  // control bytes): such a byte encodes as the unknown token.
  t.load_vocabulary(file, /*add_bos_default=*/false);
  const std::vector<std::string>& merges = file.strings("tokenizer.ggml.merges");
  for (std::size_t r = 0; r < merges.size(); ++r) {
    if (merges[r].find(' ') == std::string::npos) {
      throw std::runtime_error("tokenizer.ggml.merges[" + std::to_string(r) + "] '" + merges[r] +
                               "' is not 'left right'");
    }
    t.merge_rank_.emplace(merges[r], static_cast<std::int32_t>(r));
  }
  return t;
}

std::vector<std::int32_t> BpeTokenizer::encode_piece(const std::string& mapped) const {
  if (const auto it = ids_.find(mapped); it != ids_.end()) return {it->second};
  // Symbols: the piece's code points; merge the lowest-ranked adjacent pair until none is known.
  std::vector<std::string> symbols;
  const auto* s = reinterpret_cast<const std::uint8_t*>(mapped.data());
  const auto n = static_cast<std::int32_t>(mapped.size());
  for (std::int32_t i = 0; i < n;) {
    const std::int32_t b = i;
    U8_FWD_1(s, i, n);
    symbols.emplace_back(
        mapped.substr(static_cast<std::size_t>(b), static_cast<std::size_t>(i - b)));
  }
  // The known adjacent pairs in a min-heap by (rank, position), so that each merge costs a log
  // instead of a rescan of the piece: the same merges in the same order as taking the lowest-ranked
  // pair, leftmost first, again and again. A symbol keeps its first code point's index and only
  // grows, so an entry whose two symbols still have the lengths it saw is still valid.
  struct Pair {
    std::int32_t rank;
    std::size_t left, right, left_bytes, right_bytes;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const std::size_t count = symbols.size();
  std::vector<std::size_t> next(count), prev(count);
  for (std::size_t i = 0; i < count; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for the first symbol, which has none
  }
  std::priority_queue<Pair, std::vector<Pair>, std::greater<>> heap;
  const auto push = [&](std::size_t left, std::size_t right) {
    const auto it = merge_rank_.find(symbols[left] + " " + symbols[right]);
    if (it != merge_rank_.end()) {
      heap.push({it->second, left, right, symbols[left].size(), symbols[right].size()});
    }
  };
  for (std::size_t i = 0; i + 1 < count; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    if (symbols[p.left].size() != p.left_bytes || next[p.left] != p.right ||
        symbols[p.right].size() != p.right_bytes) {
      continue;  // one side was merged into something else since
    }
    symbols[p.left] += symbols[p.right];
    symbols[p.right].clear();
    next[p.left] = next[p.right];
    if (next[p.left] < count) prev[next[p.left]] = p.left;
    if (p.left > 0) push(prev[p.left], p.left);
    if (next[p.left] < count) push(p.left, next[p.left]);
  }
  std::vector<std::string> merged;
  for (std::size_t i = 0; i < count; i = next[i]) merged.push_back(std::move(symbols[i]));
  symbols = std::move(merged);
  std::vector<std::int32_t> ids;
  for (const std::string& sym : symbols) {
    const auto it = ids_.find(sym);
    if (it != ids_.end()) {
      ids.push_back(it->second);
    } else if (unk_ >= 0) {
      ids.push_back(unk_);
    } else {
      throw std::runtime_error("the vocabulary has no token for '" + sym +
                               "' and no unknown token");
    }
  }
  return ids;
}

std::vector<std::int32_t> Tokenizer::encode_prefix(std::string_view text, std::size_t count) const {
  // English runs at 4 to 5 bytes per token: 8 per token wanted first, then twice the prefix.
  std::size_t want = 8 * count + 256;
  while (true) {
    const std::size_t cut = want >= text.size() ? text.size() : prefix_cut(text, want);
    std::vector<std::int32_t> ids = encode(text.substr(0, cut));
    if (ids.size() >= count || cut >= text.size()) {
      if (ids.size() > count) ids.resize(count);
      return ids;
    }
    want = 2 * cut;
  }
}

std::size_t BpeTokenizer::prefix_cut(std::string_view text, std::size_t at) const {
  for (std::size_t p = std::max<std::size_t>(at, 1); p < text.size(); ++p) {
    if ((text[p] == ' ' || text[p] == '\n') && text[p - 1] > ' ' && text[p - 1] < '\x7f') return p;
  }
  return text.size();
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  for (const std::string& piece : pre_tokenize(text)) {
    const std::vector<std::int32_t> p = encode_piece(piece);
    ids.insert(ids.end(), p.begin(), p.end());
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  static const std::unordered_map<std::string, char> to_byte = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_alphabet()[b], static_cast<char>(b));
    return m;
  }();
  std::string out;
  for (std::int32_t id : ids) {
    const std::string& tok = token(id);
    const auto* s = reinterpret_cast<const std::uint8_t*>(tok.data());
    const auto n = static_cast<std::int32_t>(tok.size());
    for (std::int32_t i = 0; i < n;) {
      const std::int32_t b = i;
      U8_FWD_1(s, i, n);
      const auto it =
          to_byte.find(tok.substr(static_cast<std::size_t>(b), static_cast<std::size_t>(i - b)));
      if (it != to_byte.end()) {
        out += it->second;
      } else {
        out.append(tok, static_cast<std::size_t>(b),
                   static_cast<std::size_t>(i - b));  // special token text
      }
    }
  }
  return out;
}

}  // namespace skipsoftmax
