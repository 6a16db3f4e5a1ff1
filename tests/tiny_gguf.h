// GGUF files written by the tests: a builder of metadata and F32 tensors, and a tiny Llama-family
// model (metadata and a byte-level BPE vocabulary, no tensors) that export, inspect and the run
// command's input checks accept without the real checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace skipsoftmax::test {

class GgufBuilder {
 public:
  GgufBuilder& u32(const std::string& key, std::uint32_t v) {
    header(key, 4);
    pod(meta_, v);
    return *this;
  }
  GgufBuilder& f32(const std::string& key, float v) {
    header(key, 6);
    pod(meta_, v);
    return *this;
  }
  GgufBuilder& boolean(const std::string& key, bool v) {
    header(key, 7);
    pod(meta_, static_cast<std::uint8_t>(v));
    return *this;
  }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    header(key, 8);
    string(meta_, v);
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    header(key, 9);
    pod(meta_, std::uint32_t{8});
    pod(meta_, static_cast<std::uint64_t>(v.size()));
    for (const std::string& s : v) string(meta_, s);
    return *this;
  }
  // An F32 tensor; dims[0] is the contiguous one, as GGUF stores them.
  GgufBuilder& tensor_f32(const std::string& name, const std::vector<std::uint64_t>& dims,
                          const std::vector<float>& values) {
    string(infos_, name);
    pod(infos_, static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) pod(infos_, d);
    pod(infos_, std::uint32_t{0});
    pod(infos_, static_cast<std::uint64_t>(data_.size()));
    for (float v : values) pod(data_, v);
    while (data_.size() % kAlignment) data_.push_back(0);
    ++tensors_;
    return *this;
  }

  void save(const std::filesystem::path& path) const {
    std::vector<std::uint8_t> out;
    pod(out, std::uint32_t{0x46554747});
    pod(out, std::uint32_t{3});
    pod(out, tensors_);
    pod(out, keys_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    while (out.size() % kAlignment) out.push_back(0);
    out.insert(out.end(), data_.begin(), data_.end());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  }

 private:
  static constexpr std::size_t kAlignment = 32;  // GGUF's default
  template <typename T>
  static void pod(std::vector<std::uint8_t>& b, T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  static void string(std::vector<std::uint8_t>& b, const std::string& s) {
    pod(b, static_cast<std::uint64_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  void header(const std::string& key, std::uint32_t type) {
    string(meta_, key);
    pod(meta_, type);
    ++keys_;
  }

  std::vector<std::uint8_t> meta_, infos_, data_;
  std::uint64_t keys_ = 0, tensors_ = 0;
};

// A Llama-family model's metadata: 2 layers, hidden 128, 2/1 heads of 64, a context of
// `context_length` tokens, and a vocabulary of single printable ASCII characters ("Ġ" is the
// space of byte-level BPE) without merges: "hi you" encodes as h, i, Ġ, y, o, u.
inline GgufBuilder tiny_llama(std::uint32_t context_length = 256) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xC4\xA0"};
  for (char c = '!'; c <= '~'; ++c) tokens.emplace_back(1, c);
  GgufBuilder b;
  b.str("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .u32("llama.embedding_length", 128)
      .u32("llama.feed_forward_length", 256)
      .u32("llama.attention.head_count", 2)
      .u32("llama.attention.head_count_kv", 1)
      .u32("llama.context_length", context_length)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .f32("llama.rope.freq_base", 10000.f)
      .str("tokenizer.ggml.model", "gpt2")
      .strings("tokenizer.ggml.tokens", tokens)
      .strings("tokenizer.ggml.merges", {})
      .u32("tokenizer.ggml.unknown_token_id", 0)
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2)
      .boolean("tokenizer.ggml.add_bos_token", false);
  return b;
}

}  // namespace skipsoftmax::test
