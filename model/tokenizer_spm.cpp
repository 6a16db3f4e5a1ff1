// SentencePiece BPE (tokenizer.ggml.model = "llama"): see SpmTokenizer in tokenizer.h.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <queue>
#include <stdexcept>

#include "tokenizer.h"

namespace skipsoftmax {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// Bytes in the UTF-8 sequence that `lead` starts, by its high bits, as llama.cpp splits text; a
// stray continuation byte is a character of its own.
std::size_t utf8_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// A run of the text being merged: [begin, begin + size) of the escaped stretch, in a doubly linked
// list over the symbols still alive (size 0 once merged into its left neighbour).
struct Symbol {
  std::int32_t prev, next;
  std::size_t begin, size;
};

// A candidate merge of two adjacent symbols into the piece of that score. `size` is the sum of
// their sizes when it was queued: a merge since then of either one makes it stale.
struct Bigram {
  float score;
  std::int32_t left, right;
  std::size_t size;
};

// The queue's top is the highest score, the leftmost pair on ties.
struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// The byte a "<0xXX>" token stands for, or -1 when the text is not of that form.
int byte_of(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The text with every space written as U+2581.
std::string escape_spaces(std::string_view text) {
  std::string s;
  s.reserve(text.size() + 2 * static_cast<std::size_t>(std::count(text.begin(), text.end(), ' ')));
  for (char c : text) {
    if (c == ' ') {
      s += kSpaceMark;
    } else {
      s += c;
    }
  }
  return s;
}

}  // namespace

SpmTokenizer SpmTokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.string("tokenizer.ggml.model");
  if (model != "llama") {
    throw std::runtime_error("tokenizer.ggml.model is '" + model +
                             "': not SentencePiece ('llama')");
  }
  SpmTokenizer t;
  // llama.cpp's defaults for SentencePiece files that lack the flags.
  t.load_vocabulary(file, /*add_bos_default=*/true);
  t.add_space_prefix_ = flag(file, "tokenizer.ggml.add_space_prefix", true);
  if (flag(file, "tokenizer.ggml.remove_extra_whitespaces", false)) {
    throw std::runtime_error(
        "tokenizer.ggml.remove_extra_whitespaces is set: collapsing whitespace is not implemented");
  }
  const std::size_t n = t.tokens_.size();

  t.scores_.assign(n, 0.f);
  if (const gguf::Value* v = file.find("tokenizer.ggml.scores")) {
    const auto* scores = std::get_if<std::vector<double>>(v);
    if (!scores || scores->size() != n) {
      throw std::runtime_error("tokenizer.ggml.scores is not an array of " + std::to_string(n) +
                               " numbers, one per token");
    }
    std::transform(scores->begin(), scores->end(), t.scores_.begin(),
                   [](double s) { return static_cast<float>(s); });
  }
  t.types_.assign(n, TokenType::kNormal);
  if (const gguf::Value* v = file.find("tokenizer.ggml.token_type")) {
    const auto* types = std::get_if<std::vector<std::int64_t>>(v);
    if (!types || types->size() != n) {
      throw std::runtime_error("tokenizer.ggml.token_type is not an array of " + std::to_string(n) +
                               " integers, one per token");
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t type = (*types)[i];
      t.types_[i] = type >= 0 && type <= static_cast<std::int64_t>(TokenType::kByte)
                        ? static_cast<TokenType>(type)
                        : TokenType::kUndefined;
    }
  }

  t.byte_tokens_.fill(-1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens_[i];
    const auto id = static_cast<std::int32_t>(i);
    t.longest_token_ = std::max(t.longest_token_, text.size());
    if (t.types_[i] == TokenType::kByte) {
      const int b = byte_of(text);
      if (b < 0) {
        throw std::runtime_error("byte token " + std::to_string(i) + " '" + text +
                                 "' is not of the form <0xXX>");
      }
      if (t.byte_tokens_[static_cast<std::size_t>(b)] < 0) {
        t.byte_tokens_[static_cast<std::size_t>(b)] = id;
      }
    } else if (t.types_[i] == TokenType::kUserDefined && !text.empty()) {
      std::string escaped = escape_spaces(text);
      t.user_defined_[static_cast<unsigned char>(escaped[0])].push_back({std::move(escaped), id});
    }
  }
  // Control, unknown and byte tokens are never formed, as in SentencePiece.
  std::size_t slots = 2;
  while (slots < 2 * n) slots *= 2;  // load factor at most 1/2
  t.pieces_.assign(slots, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const TokenType type = t.types_[i];
    if (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kByte ||
        t.find(t.tokens_[i]) != static_cast<std::int32_t>(i)) {  // a duplicate: the first counts
      continue;
    }
    const std::uint64_t hash = std::hash<std::string_view>{}(t.tokens_[i]);
    std::size_t at = hash & (slots - 1);
    while (t.pieces_[at] != 0) at = (at + 1) & (slots - 1);
    t.pieces_[at] = (hash >> 32 << 32) | (i + 1);
  }
  for (auto& candidates : t.user_defined_) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const UserDefined& a, const UserDefined& b) {
                       return a.escaped.size() > b.escaped.size();
                     });
  }
  return t;
}

std::int32_t SpmTokenizer::piece_id(std::string_view piece) const {
  const std::uint64_t hash = std::hash<std::string_view>{}(piece);
  const std::size_t mask = pieces_.size() - 1;
  for (std::size_t at = hash & mask;; at = (at + 1) & mask) {
    const std::uint64_t slot = pieces_[at];
    if (slot == 0) return -1;
    if (slot >> 32 == hash >> 32) {
      const auto id = static_cast<std::int32_t>((slot & 0xffffffffu) - 1);
      if (tokens_[static_cast<std::size_t>(id)] == piece) return id;
    }
  }
}

SpmTokenizer::UserDefinedMatch SpmTokenizer::user_defined_at(std::string_view text,
                                                             std::size_t at) const {
  const auto first = static_cast<unsigned char>(text[at] == ' ' ? kSpaceMark[0] : text[at]);
  for (const UserDefined& u : user_defined_[first]) {
    std::size_t i = at, j = 0;
    for (; i < text.size() && j < u.escaped.size(); ++i) {
      if (text[i] == ' ') {
        if (u.escaped.compare(j, kSpaceMark.size(), kSpaceMark) != 0) break;
        j += kSpaceMark.size();
      } else {
        if (u.escaped[j] != text[i]) break;
        ++j;
      }
    }
    if (j == u.escaped.size()) return {&u, i - at};
  }
  return {nullptr, 0};
}

std::vector<std::int32_t> SpmTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  std::size_t start = 0;  // of the stretch since the last user-defined token
  for (std::size_t at = 0; at < text.size();) {
    const UserDefinedMatch match = user_defined_at(text, at);
    if (!match.token) {
      ++at;
      continue;
    }
    if (at > start) encode_stretch(escape_spaces(text.substr(start, at - start)), ids);
    ids.push_back(match.token->id);
    at += match.length;
    start = at;
  }
  if (start < text.size()) encode_stretch(escape_spaces(text.substr(start)), ids);
  return ids;
}

std::size_t SpmTokenizer::prefix_cut(std::string_view text, std::size_t at) const {
  // Leftmost-longest matching is sequential: the scan starts where encode()'s does.
  for (std::size_t p = 0; p < text.size();) {
    const UserDefinedMatch match = user_defined_at(text, p);
    if (match.token && p >= at) return p;
    p += match.token ? match.length : 1;
  }
  return text.size();
}

void SpmTokenizer::encode_stretch(std::string_view escaped, std::vector<std::int32_t>& out) const {
  // Every stretch starts the text or follows a user-defined token: llama.cpp gives each the
  // prefix space.
  std::string s;
  if (add_space_prefix_) {
    s.reserve(kSpaceMark.size() + escaped.size());
    s += kSpaceMark;
  }
  s += escaped;
  const std::string_view view = s;

  std::vector<Symbol> symbols;
  for (std::size_t at = 0; at < s.size();) {
    const std::size_t size =
        std::min(utf8_length(static_cast<unsigned char>(s[at])), s.size() - at);
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({index - 1, index + 1, at, size});
    at += size;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue;
  const auto try_pair = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    const std::size_t size = l.size + symbols[static_cast<std::size_t>(right)].size;
    if (size > longest_token_) return;
    const std::int32_t id = piece_id(view.substr(l.begin, size));
    if (id < 0) return;
    queue.push({scores_[static_cast<std::size_t>(id)], left, right, size});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) {
    try_pair(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
  }
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<std::size_t>(b.left)];
    Symbol& r = symbols[static_cast<std::size_t>(b.right)];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }

  for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    const Symbol& sym = symbols[static_cast<std::size_t>(i)];
    const std::string_view piece = view.substr(sym.begin, sym.size);
    if (const std::int32_t id = piece_id(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Only single characters are left unmerged outside the vocabulary: their UTF-8 bytes.
    for (char c : piece) {
      const std::int32_t byte = byte_tokens_[static_cast<unsigned char>(c)];
      if (byte >= 0) {
        out.push_back(byte);
      } else if (unk_ >= 0) {
        out.push_back(unk_);
      } else {
        throw std::runtime_error("the vocabulary has no token for byte " +
                                 std::to_string(static_cast<unsigned char>(c)) +
                                 " and no unknown token");
      }
    }
  }
}

std::string SpmTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::string& text = token(ids[k]);
    std::string piece;
    switch (types_[static_cast<std::size_t>(ids[k])]) {
      case TokenType::kByte:
        piece = std::string(1, static_cast<char>(byte_of(text)));
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
        piece = text;
        break;
      default:
        for (std::size_t at = 0; at < text.size();) {
          if (text.compare(at, kSpaceMark.size(), kSpaceMark) == 0) {
            piece += ' ';
            at += kSpaceMark.size();
          } else {
            piece += text[at++];
          }
        }
    }
    // The space encode() put in front of the text.
    if (k == 0 && add_space_prefix_ && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

}  // namespace skipsoftmax
