// SHA-256 (FIPS 180-4) of byte strings and files, without a crypto library: the model file's
// checksum (export pins an engine's weights with it), the keys of calibration's statistics cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace skipsoftmax {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  std::string hex_digest();  // 64 lowercase hex digits; the object is spent afterwards

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view text);
// Streams the file; throws std::runtime_error naming it when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace skipsoftmax
