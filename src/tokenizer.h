// Tokenizers from GGUF metadata, behind one interface:
//   "gpt2"  BpeTokenizer, byte-level BPE (SmolLM2): digits split one by one, then GPT-2's
//           pre-tokenizer pattern
//             's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           then bytes mapped to printable code points and merged by rank. Unicode classes come
//           from ICU.
// encode() adds no BOS or EOS: a caller starts a prompt with bos() when add_bos() says so. Control
// tokens written in the text ("<end_of_turn>") are not recognised: prompts are plain text, and
// callers put control tokens in by id (find()).
#pragma once

#include <cstdint>
#include <functional>
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

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws std::runtime_error when the file's tokenizer is not byte-level BPE or its vocabulary
  // and merges are inconsistent.
  static BpeTokenizer from_gguf(const gguf::File& file);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;

  // Pre-tokenizer pieces in the byte-level alphabet (" x" as "Ġx"), for tests.
  static std::vector<std::string> pre_tokenize(std::string_view text);

 private:
  std::vector<std::int32_t> encode_piece(const std::string& mapped) const;

  std::unordered_map<std::string, std::int32_t> merge_rank_;  // "left right" -> rank
};

}  // namespace skipsoftmax
