// What the file readers' fuzz targets share: a scratch file of their own, rewritten with each
// input (the readers take paths), and a byte-level BPE vocabulary for the tokenizer target.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tiny_gguf.h"

namespace skipsoftmax::fuzz {

class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("skipsoftmax_fuzz_" + name + "_XXXXXX"))
            .string();
    const int fd = mkstemp(pattern.data());
    if (fd < 0) throw std::runtime_error("cannot create a scratch file");
    close(fd);
    path_ = pattern;
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

  void write(const std::uint8_t* data, std::size_t size) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }

  // Printable ASCII and "Ġ" (byte-level BPE's space), with merges whose ranks compete.
  void write_bpe_vocabulary() const {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xC4\xA0"};
    for (char c = '!'; c <= '~'; ++c) tokens.emplace_back(1, c);
    const std::vector<std::string> merges = {"a a", "aa aa", "t h",  "th e", "\xC4\xA0 th",
                                             "e r", "a b",   "ab c", "aa a"};
    for (const std::string& m : merges) {
      const std::string joined = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
      tokens.push_back(joined);
    }
    test::GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2")
        .strings("tokenizer.ggml.tokens", tokens)
        .strings("tokenizer.ggml.merges", merges)
        .u32("tokenizer.ggml.unknown_token_id", 0)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .boolean("tokenizer.ggml.add_bos_token", false);
    b.save(path_);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace skipsoftmax::fuzz
