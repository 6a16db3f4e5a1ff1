// GGUF model files (the llama.cpp container): metadata, tensor index, and CPU dequantization of the
// block formats the shipped checkpoints use. The CPU dequantizer is the reference for the GPU one.
//
// Layout (version 2 and 3, little-endian): "GGUF", version u32, tensor count u64, metadata count
// u64; metadata (key string, value type u32, value); tensor infos (name, n_dims u32, dims u64[],
// ggml type u32, offset u64 into the data section); the data section starts at the next multiple
// of general.alignment (default 32).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace skipsoftmax::gguf {

enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

// The name of a ggml type id ("Q4_K", or "type 7" for ids this reader does not support).
std::string type_name(std::uint32_t type);
// Values per block and bytes per block; throws std::runtime_error for unsupported types.
std::int64_t block_values(GgmlType type);
std::int64_t block_bytes(GgmlType type);

// A metadata value: scalars widened (integers to int64 or uint64, floats to double), arrays kept
// as one vector of their element kind.
using Value =
    std::variant<std::int64_t, std::uint64_t, double, bool, std::string, std::vector<std::int64_t>,
                 std::vector<double>, std::vector<std::string>, std::vector<bool>>;

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<std::int64_t> dims;  // as GGUF stores them: dims[0] is the contiguous one
  std::uint64_t offset = 0;        // from the start of the file
  std::uint64_t bytes = 0;
  std::int64_t elements() const;
};

class File {
 public:
  // Parses the header, the metadata and the tensor index. Throws std::runtime_error naming the
  // file and the problem: missing, not GGUF, unsupported version, truncated, unknown value or
  // tensor type, tensor data past the end of the file.
  static File open(const std::filesystem::path& path);

  std::uint32_t version() const { return version_; }
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(const std::string& key) const;
  // Typed access; throws naming the key when it is missing or of another kind.
  std::int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;  // integers too
  const std::string& string(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  const TensorInfo& tensor(const std::string& name) const;

  // The tensor's raw bytes, and its values dequantized to float on the CPU.
  std::vector<std::uint8_t> read_bytes(const TensorInfo& t) const;
  std::vector<float> read_floats(const TensorInfo& t) const;

 private:
  std::filesystem::path path_;
  std::uint32_t version_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
};

// Dequantizes `count` values (a multiple of the type's block) from `src` into `dst`.
void dequantize(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t count);

}  // namespace skipsoftmax::gguf
