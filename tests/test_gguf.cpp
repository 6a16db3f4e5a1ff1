// The GGUF reader on files the test writes, and the dequantizers against gguf-py's numpy
// implementation (tests/data/gguf_dequant_vectors.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_io.h"
#include "gguf.h"
#include "model_config.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace skipsoftmax::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

TEST(GgufDequantize, MatchesGgufPyOnEveryType) {
  const nlohmann::json doc =
      read_json_file(fs::path(SKIPSOFTMAX_TEST_DATA) / "gguf_dequant_vectors.json");
  int types = 0;
  for (const auto& [name, v] : doc["vectors"].items()) {
    const auto type = static_cast<GgmlType>(v["type"].get<std::uint32_t>());
    EXPECT_EQ(type_name(static_cast<std::uint32_t>(type)), name);
    const std::vector<std::uint8_t> raw = from_hex(v["raw_hex"]);
    const std::vector<float> expected = v["values"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<std::int64_t>(raw.size()),
              static_cast<std::int64_t>(expected.size()) / block_values(type) * block_bytes(type))
        << name;
    std::vector<float> got(expected.size());
    dequantize(type, raw.data(), got.data(), static_cast<std::int64_t>(got.size()));
    for (std::size_t i = 0; i < got.size(); ++i) {
      // Both sides compute in float from the same fp16 scales: equal up to float rounding.
      EXPECT_NEAR(got[i], expected[i], 1e-6f * (1.f + std::abs(expected[i]))) << name << " " << i;
    }
    ++types;
  }
  EXPECT_EQ(types, 9);
}

TEST(GgufDequantize, RejectsPartialBlocks) {
  std::vector<std::uint8_t> raw(34);
  std::vector<float> out(31);
  EXPECT_ERROR_HAS(dequantize(GgmlType::kQ8_0, raw.data(), out.data(), 31),
                   "not whole Q8_0 blocks");
}

// Writes GGUF files field by field.
class Writer {
 public:
  template <typename T>
  Writer& pod(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
    return *this;
  }
  Writer& str(const std::string& s) {
    pod<std::uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Writer& pad_to(std::size_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back(0);
    return *this;
  }
  Writer& raw(const std::vector<std::uint8_t>& b) {
    bytes_.insert(bytes_.end(), b.begin(), b.end());
    return *this;
  }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  void save(const fs::path& path, std::size_t keep = SIZE_MAX) const {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes_.data()),
               static_cast<std::streamsize>(std::min(keep, bytes_.size())));
  }

 private:
  std::vector<std::uint8_t> bytes_;
};

// A GGUF v3 file with metadata of every kind and two tensors: an F32 [3] and a Q8_0 [32, 2].
Writer small_model(std::uint32_t q8_type = 8) {
  Writer w;
  w.pod<std::uint32_t>(0x46554747)
      .pod<std::uint32_t>(3)
      .pod<std::uint64_t>(2)
      .pod<std::uint64_t>(6);
  w.str("general.architecture").pod<std::uint32_t>(8).str("llama");
  w.str("llama.block_count").pod<std::uint32_t>(4).pod<std::uint32_t>(30);
  w.str("llama.rope.freq_base").pod<std::uint32_t>(6).pod<float>(100000.f);
  w.str("tokenizer.ggml.add_bos_token").pod<std::uint32_t>(7).pod<std::uint8_t>(1);
  w.str("tokenizer.ggml.tokens").pod<std::uint32_t>(9).pod<std::uint32_t>(8).pod<std::uint64_t>(2);
  w.str("<s>").str("hello");
  w.str("general.alignment").pod<std::uint32_t>(4).pod<std::uint32_t>(64);
  w.str("norm.weight").pod<std::uint32_t>(1).pod<std::uint64_t>(3).pod<std::uint32_t>(0);
  w.pod<std::uint64_t>(0);
  w.str("embd.weight").pod<std::uint32_t>(2).pod<std::uint64_t>(32).pod<std::uint64_t>(2);
  w.pod<std::uint32_t>(q8_type).pod<std::uint64_t>(64);
  w.pad_to(64);
  for (float x : {1.f, -2.f, 0.5f}) w.pod<float>(x);
  w.pad_to(64);
  for (int block = 0; block < 2; ++block) {
    w.pod<std::uint16_t>(0x3800);  // 0.5 in fp16
    for (int j = 0; j < 32; ++j) w.pod<std::int8_t>(static_cast<std::int8_t>(j - 16 + block));
  }
  return w;
}

class GgufFile : public test::TempDirTest {};

TEST_F(GgufFile, ReadsMetadataAndTensors) {
  small_model().save(dir_ / "m.gguf");
  const File f = File::open(dir_ / "m.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.string("general.architecture"), "llama");
  EXPECT_EQ(f.integer("llama.block_count"), 30);
  EXPECT_DOUBLE_EQ(f.number("llama.rope.freq_base"), 100000.0);
  EXPECT_DOUBLE_EQ(f.number("llama.block_count"), 30.0);
  EXPECT_EQ(std::get<bool>(*f.find("tokenizer.ggml.add_bos_token")), true);
  EXPECT_EQ(f.strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"<s>", "hello"}));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.read_floats(f.tensor("norm.weight")), (std::vector<float>{1.f, -2.f, 0.5f}));
  const TensorInfo& e = f.tensor("embd.weight");
  EXPECT_EQ(e.type, GgmlType::kQ8_0);
  EXPECT_EQ(e.dims, (std::vector<std::int64_t>{32, 2}));
  EXPECT_EQ(e.bytes, 68u);
  const std::vector<float> v = f.read_floats(e);
  EXPECT_FLOAT_EQ(v[0], -8.f);  // (0 - 16) * 0.5
  EXPECT_FLOAT_EQ(v[63], 8.f);  // (31 - 16 + 1) * 0.5
  EXPECT_ERROR_HAS(f.tensor("absent"), "no tensor absent");
  EXPECT_ERROR_HAS(f.integer("general.architecture"), "general.architecture is not an integer");
  EXPECT_ERROR_HAS(f.string("nope"), "no metadata key nope");
}

TEST_F(GgufFile, ModelConfigNamesWhatIsMissing) {
  small_model().save(dir_ / "m.gguf");
  EXPECT_ERROR_HAS(read_model_config(File::open(dir_ / "m.gguf")),
                   "no metadata key llama.embedding_length");
}

TEST_F(GgufFile, BadFilesAreNamedErrors) {
  EXPECT_ERROR_HAS(File::open(dir_ / "absent.gguf"), "absent.gguf: no such file");
  Writer bad_magic;
  bad_magic.pod<std::uint32_t>(0x12345678).pod<std::uint32_t>(3);
  bad_magic.save(dir_ / "magic.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "magic.gguf"), "not a GGUF file");
  Writer old;
  old.pod<std::uint32_t>(0x46554747).pod<std::uint32_t>(1);
  old.save(dir_ / "v1.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "v1.gguf"), "GGUF version 1 is not supported");
  const Writer model = small_model();
  model.save(dir_ / "header.gguf", 100);  // cut inside the metadata
  EXPECT_ERROR_HAS(File::open(dir_ / "header.gguf"), "truncated");
  model.save(dir_ / "data.gguf", model.bytes().size() - 10);  // cut inside the tensor data
  EXPECT_ERROR_HAS(File::open(dir_ / "data.gguf"), "embd.weight");
  EXPECT_ERROR_HAS(File::open(dir_ / "data.gguf"), "past the end of the file");
  small_model(7).save(dir_ / "q51.gguf");  // Q5_1
  EXPECT_ERROR_HAS(File::open(dir_ / "q51.gguf"), "embd.weight: ggml type 7 is not supported");
}

// A GGUF v3 header declaring `tensors` tensors and `keys` metadata entries.
Writer header(std::uint64_t tensors, std::uint64_t keys) {
  Writer w;
  w.pod<std::uint32_t>(0x46554747)
      .pod<std::uint32_t>(3)
      .pod<std::uint64_t>(tensors)
      .pod<std::uint64_t>(keys);
  return w;
}

// One F32 tensor info: name, dims, type 0, offset into the data section.
Writer& tensor_info(Writer& w, const std::string& name, const std::vector<std::uint64_t>& dims,
                    std::uint64_t offset) {
  w.str(name).pod<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
  for (std::uint64_t d : dims) w.pod(d);
  return w.pod<std::uint32_t>(0).pod(offset);
}

// Declared lengths are checked against the bytes left before anything is allocated: each of these
// made the reader allocate gigabytes.
TEST_F(GgufFile, DeclaredLengthsPastTheFileAreRefusedBeforeAllocating) {
  Writer strings = header(0, 1);  // 49 bytes: an array of 2^31 strings
  strings.str("tokenizer.ggml.tokens")
      .pod<std::uint32_t>(9)
      .pod<std::uint32_t>(8)
      .pod<std::uint64_t>(std::uint64_t{1} << 31);
  strings.save(dir_ / "strings.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "strings.gguf"),
                   "metadata tokenizer.ggml.tokens: array count 2147483648 needs at least");
  EXPECT_ERROR_HAS(File::open(dir_ / "strings.gguf"), "(at byte 69)");

  Writer big_string = header(0, 1);  // a 1 GiB string in a file of a few dozen bytes
  big_string.str("general.name").pod<std::uint32_t>(8).pod<std::uint64_t>(std::uint64_t{1} << 30);
  big_string.save(dir_ / "string.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "string.gguf"),
                   "metadata general.name: a string of 1073741824 bytes, the file has 0 left");

  header(std::uint64_t{1} << 28, 0).save(dir_ / "tensors.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "tensors.gguf"), "tensor count 268435456 needs at least");
}

TEST_F(GgufFile, SizesAndOffsetsAreCheckedArithmetic) {
  const auto open_with = [&](const std::string& name, const auto& fill) {
    Writer w = header(2, 0);
    fill(w);
    w.pad_to(32).raw(std::vector<std::uint8_t>(64, 0));
    w.save(dir_ / name);
    return dir_ / name;
  };
  // Dimensions whose product overflows 64 bits.
  EXPECT_ERROR_HAS(File::open(open_with(
                       "dims.gguf",
                       [](Writer& w) {
                         tensor_info(w, "a", {std::uint64_t{1} << 40, std::uint64_t{1} << 24}, 0);
                         tensor_info(w, "b", {4}, 32);
                       })),
                   "tensor a: its dimensions multiply past 2^62 elements");
  // An offset that wraps past 2^64 onto the header.
  EXPECT_ERROR_HAS(File::open(open_with("wrap.gguf",
                                        [](Writer& w) {
                                          tensor_info(w, "a", {4}, 0);
                                          tensor_info(w, "b", {4}, ~std::uint64_t{0} - 95);
                                        })),
                   "tensor b (16 bytes at data offset");
  EXPECT_ERROR_HAS(File::open(open_with("overlap.gguf",
                                        [](Writer& w) {
                                          tensor_info(w, "a", {16}, 0);
                                          tensor_info(w, "b", {4}, 32);
                                        })),
                   "tensors a and b overlap");
  EXPECT_ERROR_HAS(File::open(open_with("twice.gguf",
                                        [](Writer& w) {
                                          tensor_info(w, "a", {4}, 0);
                                          tensor_info(w, "a", {4}, 32);
                                        })),
                   "tensor a appears twice");
  EXPECT_ERROR_HAS(File::open(open_with("unaligned.gguf",
                                        [](Writer& w) {
                                          tensor_info(w, "a", {4}, 0);
                                          tensor_info(w, "b", {4}, 20);
                                        })),
                   "tensor b (16 bytes at data offset 20) is not aligned to 32 bytes");
  // The same two tensors, apart and aligned, are a valid file.
  const File ok = File::open(open_with("ok.gguf", [](Writer& w) {
    tensor_info(w, "a", {4}, 0);
    tensor_info(w, "b", {4}, 32);
  }));
  EXPECT_EQ(ok.tensor("b").bytes, 16u);

  Writer keys = header(0, 2);
  keys.str("general.name").pod<std::uint32_t>(8).str("x");
  keys.str("general.name").pod<std::uint32_t>(8).str("y");
  keys.save(dir_ / "keys.gguf");
  EXPECT_ERROR_HAS(File::open(dir_ / "keys.gguf"), "metadata key general.name appears twice");
}

// A Llama model's metadata with the hyper-parameters a test sets, the rest as tiny_llama's.
void save_llama(const fs::path& path, std::uint32_t hidden, std::uint32_t heads_q, float eps,
                float rope_base, const std::vector<std::string>& tokens) {
  test::GgufBuilder b;
  b.str("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .u32("llama.embedding_length", hidden)
      .u32("llama.feed_forward_length", 256)
      .u32("llama.attention.head_count", heads_q)
      .u32("llama.attention.head_count_kv", 1)
      .u32("llama.context_length", 256)
      .f32("llama.attention.layer_norm_rms_epsilon", eps)
      .f32("llama.rope.freq_base", rope_base)
      .strings("tokenizer.ggml.tokens", tokens);
  b.save(path);
}

TEST_F(GgufFile, NonsenseHyperParametersAreRefused) {
  const std::vector<std::string> tokens = {"a", "b"};
  const auto config_error = [&](std::uint32_t hidden, std::uint32_t heads, float eps, float rope,
                                const std::vector<std::string>& vocab) {
    save_llama(dir_ / "h.gguf", hidden, heads, eps, rope, vocab);
    return test::message_of([&] { read_model_config(File::open(dir_ / "h.gguf")); });
  };
  EXPECT_EQ(config_error(128, 2, 1e-5f, 10000.f, tokens), "");
  EXPECT_NE(config_error(128, 3, 1e-5f, 10000.f, tokens)
                .find("the hidden size 128 is not a multiple of the 3 query heads"),
            std::string::npos);
  EXPECT_NE(config_error(128, 256, 1e-5f, 10000.f, tokens).find("not a multiple"),
            std::string::npos);  // head dim 0
  EXPECT_NE(config_error(126, 2, 1e-5f, 10000.f, tokens).find("head dim 63 is odd"),
            std::string::npos);
  EXPECT_NE(config_error(128, 2, std::nanf(""), 10000.f, tokens)
                .find("llama.attention.layer_norm_rms_epsilon = nan must lie in (0, 1)"),
            std::string::npos);
  EXPECT_NE(config_error(128, 2, 0.f, 10000.f, tokens).find("must lie in (0, 1)"),
            std::string::npos);
  EXPECT_NE(config_error(128, 2, 1e-5f, INFINITY, tokens)
                .find("llama.rope.freq_base = inf must be a finite number above 1"),
            std::string::npos);
  EXPECT_NE(config_error(128, 2, 1e-5f, 10000.f, {}).find("tokenizer.ggml.tokens is empty"),
            std::string::npos);
  EXPECT_NE(config_error(0, 2, 1e-5f, 10000.f, tokens).find("embedding_length = 0 is out of range"),
            std::string::npos);
}

// The real checkpoints, when a machine has them (scripts/fetch-models.sh puts them in models/).
TEST(GgufGemma3, HasTheExpectedShape) {
  const char* path = std::getenv("SKIPSOFTMAX_GEMMA3_GGUF");
  if (!path || !fs::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_GEMMA3_GGUF not set";
  const File f = File::open(path);
  EXPECT_EQ(f.string("general.architecture"), "gemma3");
  EXPECT_EQ(f.integer("gemma3.block_count"), 18);
  EXPECT_EQ(f.integer("gemma3.attention.head_count_kv"), 1);
  EXPECT_EQ(f.integer("gemma3.attention.key_length"), 256);
  EXPECT_EQ(f.integer("gemma3.attention.sliding_window"), 512);
  const ModelConfig c = read_model_config(f);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.heads_q, 4);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_DOUBLE_EQ(c.rope_base, 1e6);
  EXPECT_DOUBLE_EQ(c.rope_base_local, 1e4);
  EXPECT_TRUE(c.is_local(0));
  EXPECT_FALSE(c.is_local(5));
  EXPECT_FALSE(c.is_local(17));
  EXPECT_EQ(std::count(c.local_layer.begin(), c.local_layer.end(), false), 3);
  std::size_t finite = 0, total = 0;
  for (const TensorInfo& t : f.tensors()) {  // every type of the file dequantizes to finite values
    for (float x : f.read_floats(t)) {
      finite += std::isfinite(x);
      ++total;
    }
  }
  EXPECT_EQ(finite, total);
}

TEST(GgufSmolLM2, HasTheExpectedShape) {
  const char* path = std::getenv("SKIPSOFTMAX_SMOLLM2_GGUF");
  if (!path || !fs::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
  const File f = File::open(path);
  EXPECT_EQ(f.string("general.architecture"), "llama");
  EXPECT_EQ(f.integer("llama.block_count"), 30);
  EXPECT_EQ(f.integer("llama.attention.head_count"), 9);
  EXPECT_EQ(f.integer("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.integer("llama.embedding_length"), 576);
  EXPECT_EQ(f.tensors().size(), 272u);
  const ModelConfig c = read_model_config(f);
  EXPECT_EQ(c.heads_q, 9);
  EXPECT_EQ(c.heads_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_DOUBLE_EQ(c.rope_base, 1e5);
  EXPECT_DOUBLE_EQ(c.attention_scale, 0.125);
  const std::vector<float> norm = f.read_floats(f.tensor("blk.0.attn_norm.weight"));
  for (float x : norm) ASSERT_TRUE(std::isfinite(x));
  const std::vector<float> up = f.read_floats(f.tensor("blk.0.ffn_up.weight"));  // Q4_1
  double sum_sq = 0;
  for (float x : up) sum_sq += double(x) * x;
  EXPECT_GT(sum_sq, 0.0);
  EXPECT_TRUE(std::isfinite(sum_sq));
}

}  // namespace
}  // namespace skipsoftmax::gguf
