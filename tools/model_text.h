// Text in and out of a checkpoint for the run and capture commands. The one place that picks the
// tokenizer: load_tokenizer() reads it from the GGUF (byte-level BPE for SmolLM2, SentencePiece
// for Gemma 3).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf.h"
#include "tokenizer.h"

namespace skipsoftmax::cli {

class ModelText {
 public:
  explicit ModelText(const gguf::File& file) {
    try {
      tokenizer_ = load_tokenizer(file);
    } catch (const std::exception& e) {
      unavailable_ = e.what();
    }
    if (const gguf::Value* v = file.find("tokenizer.ggml.add_bos_token")) {
      add_bos_ = std::get_if<bool>(v) && std::get<bool>(*v);
    }
    if (file.find("tokenizer.ggml.bos_token_id")) {
      bos_ = static_cast<std::int32_t>(file.integer("tokenizer.ggml.bos_token_id"));
    }
    if (file.find("tokenizer.ggml.eos_token_id")) {
      eos_ = static_cast<std::int32_t>(file.integer("tokenizer.ggml.eos_token_id"));
    }
  }

  bool available() const { return tokenizer_ != nullptr; }
  // Why the file's tokenizer cannot be used ("" when it can).
  const std::string& unavailable_reason() const { return unavailable_; }

  // The text's ids, after the BOS token when the file asks for one. Throws when unavailable.
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    if (add_bos_ && bos_ >= 0) ids.push_back(bos_);
    const std::vector<std::int32_t> body = get().encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  // The first `count` ids of encode(text), tokenizing only the prefix of the text they need.
  std::vector<std::int32_t> encode_prefix(std::string_view text, std::size_t count) const {
    std::vector<std::int32_t> ids;
    if (add_bos_ && bos_ >= 0 && count > 0) ids.push_back(bos_);
    const std::vector<std::int32_t> body = get().encode_prefix(text, count - ids.size());
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>& ids) const { return get().decode(ids); }

  bool adds_bos() const { return add_bos_ && bos_ >= 0; }
  std::int32_t eos() const { return eos_; }  // -1: none (generation stops at its length only)

 private:
  const Tokenizer& get() const {
    if (!tokenizer_) throw std::runtime_error("the model's tokenizer: " + unavailable_);
    return *tokenizer_;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::string unavailable_;
  bool add_bos_ = false;
  std::int32_t bos_ = -1;
  std::int32_t eos_ = -1;
};

}  // namespace skipsoftmax::cli
