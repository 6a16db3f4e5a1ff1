// Tokenizers from GGUF metadata, behind one interface; load_tokenizer() picks the implementation by
// tokenizer.ggml.model:
//   "gpt2"  BpeTokenizer, byte-level BPE (SmolLM2): digits split one by one, then GPT-2's
//           pre-tokenizer pattern
//             's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           then bytes mapped to printable code points and merged by rank. Unicode classes come
//           from ICU.
//   "llama" SpmTokenizer, SentencePiece BPE (Gemma 3): spaces written as U+2581, adjacent pieces
//           merged greedily by score, bytes of characters outside the vocabulary as <0xXX> tokens.
// encode() adds no BOS or EOS: a caller starts a prompt with bos() when add_bos() says so. Control
// tokens written in the text ("<end_of_turn>") are not recognised: prompts are plain text, and
// callers put control tokens in by id (find()).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf.h"

namespace skipsoftmax {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The first byte at or after `at` where the text may be cut: the ids of text.substr(0, cut)
  // begin encode(text). text.size() where no later byte may.
  virtual std::size_t prefix_cut(std::string_view text, std::size_t at) const = 0;
  // The first `count` ids of encode(text) (all of them when there are fewer), tokenizing a prefix
  // cut by prefix_cut() that holds them: `capture` takes 100k tokens of a corpus that may be many
  // times longer.
  std::vector<std::int32_t> encode_prefix(std::string_view text, std::size_t count) const;
  // Control tokens come out as their text; throws std::runtime_error for an id outside the
  // vocabulary.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;

  std::int32_t bos() const { return bos_; }
  std::int32_t eos() const { return eos_; }
  std::size_t vocab_size() const { return tokens_.size(); }
  // tokenizer.ggml.add_bos_token / add_eos_token: whether a prompt starts with bos() / ends with
  // eos().
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // The tokens that end generation, ascending: eos() and a chat model's end-of-turn tokens
  // (Gemma's <end_of_turn>, SmolLM2's <|endoftext|> besides its eos <|im_end|>).
  const std::vector<std::int32_t>& end_of_generation() const { return end_of_generation_; }
  bool is_end_of_generation(std::int32_t id) const;
  // A token's text as the vocabulary spells it; throws std::runtime_error outside the vocabulary.
  const std::string& token(std::int32_t id) const;
  // The id of a vocabulary entry ("<start_of_turn>"), or -1.
  std::int32_t find(std::string_view text) const;

 protected:
  Tokenizer() = default;
  Tokenizer(const Tokenizer&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;

  // Reads tokenizer.ggml.tokens, the special token ids and the add_bos/add_eos flags (defaults
  // given for files that lack them), and collects the end-of-generation tokens.
  void load_vocabulary(const gguf::File& file, bool add_bos_default);
  // A boolean metadata value, or the default when the key is missing.
  static bool flag(const gguf::File& file, const std::string& key, bool default_value);

  // Hashes std::string and std::string_view alike, so lookups of views allocate nothing.
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> ids_;
  std::int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<std::int32_t> end_of_generation_;
};

// Picks the tokenizer by tokenizer.ggml.model; throws std::runtime_error when the file has no
// tokenizer or one of another kind.
std::unique_ptr<Tokenizer> load_tokenizer(const gguf::File& file);

// The byte offset of the first sequence in `text` that is not UTF-8, or none. (The tokenizers
// take such bytes as they come; the tools that read "a text" refuse a file that is not one.)
std::optional<std::size_t> invalid_utf8_at(std::string_view text);

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws std::runtime_error when the file's tokenizer is not byte-level BPE or its vocabulary
  // and merges are inconsistent.
  static BpeTokenizer from_gguf(const gguf::File& file);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // Before an ASCII space or newline that follows a printable ASCII character: no piece of the
  // pattern holds a non-space and the space after it, and its one look-ahead, (?!\S), follows
  // spaces only, so the pieces before such a cut are the same with or without the rest.
  std::size_t prefix_cut(std::string_view text, std::size_t at) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;

  // Pre-tokenizer pieces in the byte-level alphabet (" x" as "Ġx"), for tests.
  static std::vector<std::string> pre_tokenize(std::string_view text);

 private:
  std::vector<std::int32_t> encode_piece(const std::string& mapped) const;

  std::unordered_map<std::string, std::int32_t> merge_rank_;  // "left right" -> rank
};

// SentencePiece BPE as llama.cpp's SPM tokenizer runs it (llm_tokenizer_spm), over a vocabulary
// of pieces with scores and types (tokenizer.ggml.scores, tokenizer.ggml.token_type):
// 1. Spaces become U+2581 ("▁"); a "▁" in the text is then a space too, as in SentencePiece.
// 2. The text is cut at user-defined tokens (Gemma's "\n\n", runs of spaces or tabs, "<table>"),
//    leftmost and longest first; each becomes its own token. Each stretch between them gets one
//    more "▁" in front when tokenizer.ggml.add_space_prefix is set (default true; Gemma's files
//    clear it).
// 3. Starting from single UTF-8 characters, the adjacent pair whose concatenation is the piece
//    of highest score is merged, the leftmost pair on ties, until no pair is a piece.
// 4. A character that is no piece is written as its UTF-8 bytes, tokens <0xXX> (or the unknown
//    token where the vocabulary lacks one).
// Where llama.cpp and SentencePiece part, this follows SentencePiece, the tokenizer Gemma was
// trained with: merges never form control, unknown or byte tokens (llama.cpp takes any vocabulary
// entry, so text "<eos>" could become the control token in a vocabulary that reaches it by
// merges; Gemma's reaches none), and user-defined tokens are matched after step 1 (llama.cpp
// matches them in the raw text, before spaces become U+2581). On Gemma 3 this equals
// sentencepiece on every case of tests/data/gemma3_tokenizer_cases.json and on the whole of
// shared/corpora.
// Decoding is the reverse: U+2581 to space, byte tokens to their byte, the prefix space dropped.
class SpmTokenizer final : public Tokenizer {
 public:
  // Throws std::runtime_error when the file's tokenizer is not SentencePiece ('llama'), the
  // scores or types do not match the tokens, or it asks for what is not implemented
  // (tokenizer.ggml.remove_extra_whitespaces).
  static SpmTokenizer from_gguf(const gguf::File& file);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // Where a user-defined token starts, as encode() finds them: merges stay inside a stretch.
  std::size_t prefix_cut(std::string_view text, std::size_t at) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;

  bool add_space_prefix() const { return add_space_prefix_; }

  // llama.cpp's token types (tokenizer.ggml.token_type).
  enum class TokenType : std::int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };

 private:
  void encode_stretch(std::string_view escaped, std::vector<std::int32_t>& out) const;
  // A user-defined token with its spaces written as U+2581.
  struct UserDefined {
    std::string escaped;
    std::int32_t id;
  };
  struct UserDefinedMatch {
    const UserDefined* token;  // nullptr: none
    std::size_t length;        // in the text
  };
  // The user-defined token at byte `at` of the text (a space matching U+2581), longest first.
  UserDefinedMatch user_defined_at(std::string_view text, std::size_t at) const;
  // The id of a token merges may form, or -1.
  std::int32_t piece_id(std::string_view piece) const;

  std::vector<float> scores_;
  std::vector<TokenType> types_;
  // The tokens merges may form, in an open-addressing table probed from hash & mask: a slot holds
  // the hash's upper half and id + 1, 0 where empty. Most lookups miss and read one slot; a
  // std::unordered_map of the whole vocabulary costs several cache misses each, the bulk of
  // encoding time.
  std::vector<std::uint64_t> pieces_;
  std::array<std::int32_t, 256> byte_tokens_{};  // <0xXX> by byte, -1 where absent
  // By first byte, longest first.
  std::array<std::vector<UserDefined>, 256> user_defined_;
  std::size_t longest_token_ = 0;  // in bytes
  bool add_space_prefix_ = true;
};

}  // namespace skipsoftmax
