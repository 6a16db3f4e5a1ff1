// SHA-256 (FIPS 180-4) of byte strings and files: pins an engine's weights to the GGUF file that
// export saw, without a crypto library.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace skipsoftmax {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  // 64 lowercase hex digits. The object cannot be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// Reads the file in chunks; throws std::runtime_error naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace skipsoftmax
