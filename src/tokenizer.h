// The byte-level BPE tokenizer of GPT-2-style GGUF checkpoints (tokenizer.ggml.model = "gpt2"),
// as SmolLM2 uses it: digits split one by one, then GPT-2's pre-tokenizer pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// then bytes mapped to printable code points and merged by rank. Unicode classes come from ICU.
// Special tokens in the text are not recognised: prompts are plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf.h"

namespace skipsoftmax {

class BpeTokenizer {
 public:
  // Throws std::runtime_error when the file's tokenizer is not byte-level BPE or its vocabulary
  // and merges are inconsistent.
  static BpeTokenizer from_gguf(const gguf::File& file);

  std::vector<std::int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;

  // Pre-tokenizer pieces in the byte-level alphabet (" x" as "Ġx"), for tests.
  static std::vector<std::string> pre_tokenize(std::string_view text);

  std::int32_t bos() const { return bos_; }
  std::int32_t eos() const { return eos_; }
  std::size_t vocab_size() const { return tokens_.size(); }

 private:
  std::vector<std::int32_t> encode_piece(const std::string& mapped) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::unordered_map<std::string, std::int32_t> merge_rank_;  // "left right" -> rank
  std::int32_t bos_ = -1, eos_ = -1, unk_ = -1;
};

}  // namespace skipsoftmax
