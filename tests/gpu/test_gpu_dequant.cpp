// GPU dequantization (engine/dequant.cu) against the CPU dequantizer of gguf.cpp: every
// value equal after rounding to bf16 and to fp16, on random blocks of each type, on gguf-py's
// vectors and on the real checkpoints' tensors. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bits16.h"
#include "file_io.h"
#include "gguf.h"
#include "gpu_harness.h"
#include "npy.h"
#include "ops.h"

namespace skipsoftmax::gpu {
namespace {

namespace fs = std::filesystem;
using gguf::GgmlType;

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

// Dequantizes raw blocks on both sides, to bf16 and to fp16; returns the number of values that
// differ.
std::size_t mismatches(GgmlType type, const std::vector<std::uint8_t>& raw, std::int64_t count,
                       const std::string& what) {
  std::vector<float> cpu(static_cast<std::size_t>(count));
  gguf::dequantize(type, raw.data(), cpu.data(), count);
  DeviceBuffer src(raw.size()), dst(static_cast<std::size_t>(count) * 2);
  src.upload(raw);
  std::size_t bad = 0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    engine::dequantize(type, src.get(), static_cast<engine::bits16*>(dst.get()), count, nullptr,
                       dtype);
    check(cudaDeviceSynchronize(), "dequantize");
    const auto gpu = dst.download<std::uint16_t>(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      if (gpu[i] != to_bits(cpu[i], dtype) && bad++ < 5) {
        ADD_FAILURE() << what << " value " << i << ": gpu bits " << gpu[i] << ", cpu " << cpu[i]
                      << " -> " << to_bits(cpu[i], dtype)
                      << (dtype == DType::kF16 ? " (fp16)" : " (bf16)");
      }
    }
  }
  return bad;
}

// Random blocks whose fp16 scales are finite (random bytes there could be NaN or infinite).
std::vector<std::uint8_t> random_blocks(GgmlType type, std::int64_t blocks, std::mt19937& rng) {
  const std::int64_t bytes = gguf::block_bytes(type);
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(blocks * bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : raw) b = static_cast<std::uint8_t>(byte(rng));
  std::normal_distribution<float> scale(0.f, 0.05f);
  const auto put_half = [&](std::uint8_t* p) {
    const std::uint16_t h = float_to_half(scale(rng));
    std::memcpy(p, &h, 2);
  };
  std::normal_distribution<float> value(0.f, 1.f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint8_t* p = raw.data() + b * bytes;
    switch (type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kQ8_0:
        put_half(p);
        break;
      case GgmlType::kQ4_1:
      case GgmlType::kQ4_K:
        put_half(p);
        put_half(p + 2);
        break;
      case GgmlType::kQ6_K:
        put_half(p + 208);
        break;
      case GgmlType::kF16:
        put_half(p);
        break;
      case GgmlType::kBF16: {
        const std::uint16_t h = float_to_bf16(value(rng));
        std::memcpy(p, &h, 2);
        break;
      }
      case GgmlType::kF32: {
        const float f = value(rng);
        std::memcpy(p, &f, 4);
        break;
      }
    }
  }
  return raw;
}

TEST(GpuDequant, RandomBlocksOfEveryTypeMatchTheCpu) {
  REQUIRE_HOPPER();
  std::mt19937 rng(20261130);
  for (GgmlType type :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ8_0, GgmlType::kQ4_K,
        GgmlType::kQ6_K, GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32}) {
    const std::int64_t blocks = 4096 / gguf::block_values(type) * 16;  // 65536 values
    const std::vector<std::uint8_t> raw = random_blocks(type, blocks, rng);
    const std::string name = gguf::type_name(static_cast<std::uint32_t>(type));
    EXPECT_EQ(mismatches(type, raw, blocks * gguf::block_values(type), name), 0u) << name;
  }
}

TEST(GpuDequant, GgufPyVectorsMatchTheCpu) {
  REQUIRE_HOPPER();
  const nlohmann::json doc =
      read_json_file(fs::path(SKIPSOFTMAX_TEST_DATA) / "gguf_dequant_vectors.json");
  for (const auto& [name, v] : doc["vectors"].items()) {
    const std::string hex = v["raw_hex"];
    std::vector<std::uint8_t> raw(hex.size() / 2);
    for (std::size_t i = 0; i < raw.size(); ++i) {
      raw[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
    const auto type = static_cast<GgmlType>(v["type"].get<std::uint32_t>());
    EXPECT_EQ(mismatches(type, raw, static_cast<std::int64_t>(v["values"].size()), name), 0u);
  }
}

// Every tensor type of the checkpoints, on the first tensor of each type (whole).
void check_checkpoint(const char* env) {
  const char* path = std::getenv(env);
  if (!path || !fs::exists(path)) GTEST_SKIP() << env << " not set";
  const gguf::File f = gguf::File::open(path);
  std::vector<GgmlType> seen;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (std::find(seen.begin(), seen.end(), t.type) != seen.end()) continue;
    seen.push_back(t.type);
    EXPECT_EQ(mismatches(t.type, f.read_bytes(t), t.elements(), t.name), 0u) << t.name;
  }
}

TEST(GpuDequant, SmolLM2TensorsMatchTheCpu) {
  REQUIRE_HOPPER();
  check_checkpoint("SKIPSOFTMAX_SMOLLM2_GGUF");
}

TEST(GpuDequant, Gemma3TensorsMatchTheCpu) {
  REQUIRE_HOPPER();
  check_checkpoint("SKIPSOFTMAX_GEMMA3_GGUF");
}

}  // namespace
}  // namespace skipsoftmax::gpu
