// GGUF checkpoints: SHA-256, finding the model file, pinning it at export and checking it at
// launch, and the weights keys of the engine config.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint.h"
#include "file_io.h"
#include "sha256.h"
#include "skipsoftmax/config.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Sha256, MatchesFips180Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // A million 'a', fed in uneven pieces so that blocks straddle update() calls.
  Sha256 h;
  const std::string piece(997, 'a');
  std::size_t left = 1000000;
  while (left > 0) {
    const std::size_t n = std::min(left, piece.size());
    h.update(piece.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

class Checkpoint : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(ckpt());
    std::ofstream(ckpt() / "config.json") << R"({"skip_softmax_decode_scale_table": [[64, 10]]})";
  }
  fs::path ckpt() const { return dir_ / "ckpt"; }
  fs::path engine() const { return dir_ / "engine"; }
};

TEST_F(Checkpoint, Sha256OfAFileIsThatOfItsBytes) {
  const std::string text(3 << 20, 'x');  // several read chunks
  std::ofstream(dir_ / "f") << text;
  EXPECT_EQ(sha256_file(dir_ / "f"), sha256_hex(text));
  EXPECT_ERROR_HAS(sha256_file(dir_ / "absent"), "absent: cannot be read");
}

TEST_F(Checkpoint, FindsTheOneGgufFile) {
  EXPECT_ERROR_HAS(find_checkpoint_gguf(ckpt()), "no *.gguf model file in the checkpoint");
  test::tiny_llama().save(ckpt() / "b.gguf");
  fs::create_directories(ckpt() / "dir.gguf");  // not a file
  EXPECT_EQ(find_checkpoint_gguf(ckpt()), ckpt() / "b.gguf");
  test::tiny_llama().save(ckpt() / "a.gguf");
  EXPECT_ERROR_HAS(find_checkpoint_gguf(ckpt()),
                   "several *.gguf files (a.gguf, b.gguf); choose one with --weights FILE");
}

// A checkpoint directory that is a dangling link said only "cannot list the directory".
TEST_F(Checkpoint, ADanglingCheckpointLinkSaysSo) {
  fs::create_symlink(dir_ / "moved", dir_ / "link");
  EXPECT_ERROR_HAS(
      find_checkpoint_gguf(dir_ / "link"),
      "link: cannot list the directory: a dangling link to " + (dir_ / "moved").string());
}

TEST_F(Checkpoint, PinsTheFileAndItsArchitecture) {
  test::tiny_llama().save(ckpt() / "m.gguf");
  const WeightsRef ref = pin_weights(ckpt() / "m.gguf");
  EXPECT_TRUE(ref.file.is_absolute());
  EXPECT_EQ(ref.bytes, fs::file_size(ckpt() / "m.gguf"));
  EXPECT_EQ(ref.sha256, sha256_file(ckpt() / "m.gguf"));
  const json arch = json::parse(ref.architecture_json);
  EXPECT_EQ(arch.at("name"), "llama");
  EXPECT_EQ(arch.at("layers"), 2);
  EXPECT_EQ(arch.at("head_dim"), 64);
  EXPECT_EQ(arch.at("local_layers"), json::array());
  EXPECT_NO_THROW(check_weights(ref));

  std::ofstream(ckpt() / "bad.gguf") << "not a model";
  EXPECT_ERROR_HAS(pin_weights(ckpt() / "bad.gguf"), "not a GGUF file");
  test::GgufBuilder().str("general.architecture", "mamba").save(ckpt() / "mamba.gguf");
  EXPECT_ERROR_HAS(pin_weights(ckpt() / "mamba.gguf"), "architecture 'mamba' is not supported");
}

TEST_F(Checkpoint, CheckNoticesAChangedFile) {
  const fs::path file = ckpt() / "m.gguf";
  test::tiny_llama().save(file);
  const WeightsRef ref = pin_weights(file);
  // Touched (a copy, a restore from backup): the same bytes pass on their hash.
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(5));
  EXPECT_NO_THROW(check_weights(ref));
  test::tiny_llama(128).save(file);  // same size, other bytes
  ASSERT_EQ(fs::file_size(file), ref.bytes);
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(9));
  EXPECT_ERROR_HAS(check_weights(ref), "the SHA-256 differs from what export pinned");
  test::tiny_llama().str("extra", "key").save(file);
  EXPECT_ERROR_HAS(check_weights(ref), "the size differs from what export pinned");
  fs::remove(file);
  EXPECT_ERROR_HAS(check_weights(ref), "the engine's weights file is missing");
}

TEST_F(Checkpoint, ExportWritesTheWeightsAndTheLoaderReadsThem) {
  test::tiny_llama().save(ckpt() / "m.gguf");
  export_engine(ckpt(), engine(), {});
  const json j = json::parse(read_text_file(engine() / "config.json"));
  EXPECT_EQ(j.at("weights").at("file"), fs::canonical(ckpt() / "m.gguf").string());
  EXPECT_EQ(j.at("weights").at("sha256"), sha256_file(ckpt() / "m.gguf"));
  EXPECT_EQ(j.at("architecture").at("name"), "llama");
  const EngineConfig e = load_engine_config(engine());
  ASSERT_TRUE(e.weights.has_value());
  EXPECT_EQ(e.weights->file, fs::canonical(ckpt() / "m.gguf"));
  EXPECT_EQ(e.weights->bytes, fs::file_size(ckpt() / "m.gguf"));
  EXPECT_EQ(json::parse(e.weights->architecture_json), j.at("architecture"));
  EXPECT_NO_THROW(check_weights(*e.weights));
}

TEST_F(Checkpoint, ExportChoosesAmongSeveralFilesOrNone) {
  test::tiny_llama().save(ckpt() / "a.gguf");
  test::tiny_llama(128).save(ckpt() / "b.gguf");
  EXPECT_ERROR_HAS(export_engine(ckpt(), engine(), {}), "several *.gguf files");
  EXPECT_FALSE(fs::exists(engine()));
  export_engine(ckpt(), engine(), {}, {.file = "b.gguf"});
  EXPECT_EQ(load_engine_config(engine()).weights->file, fs::canonical(ckpt() / "b.gguf"));
  export_engine(ckpt(), engine(), {}, {.file = ckpt() / "a.gguf"});
  EXPECT_EQ(load_engine_config(engine()).weights->file, fs::canonical(ckpt() / "a.gguf"));
  export_engine(ckpt(), engine(), {}, {.file = {}, .config_only = true});
  const EngineConfig e = load_engine_config(engine());
  EXPECT_FALSE(e.weights.has_value());
  EXPECT_EQ(e.phases.decode.threshold, Threshold::table(ScaleTable({{64, 10.0}})));
  EXPECT_ERROR_HAS(export_engine(ckpt(), engine(), {}, {.file = "c.gguf"}), "c.gguf: no such file");
  EXPECT_ERROR_HAS(export_engine(ckpt(), engine(), {}, {.file = "a.gguf", .config_only = true}),
                   "--weights and --config-only are exclusive");
}

TEST(EngineConfigWeights, LoaderChecksTheWeightsKeys) {
  const json base = {
      {"checkpoint_dir", "/c"},
      {"weights",
       {{"file", "/c/m.gguf"}, {"bytes", 10}, {"mtime_ns", -3}, {"sha256", std::string(64, 'a')}}},
      {"architecture", {{"name", "llama"}}}};
  EXPECT_EQ(parse_engine_config(base.dump(), "e").weights->mtime_ns, -3);
  const auto with = [&](const std::string& key, const json& value) {
    json j = base;
    j["weights"][key] = value;
    return j.dump();
  };
  EXPECT_ERROR_HAS(parse_engine_config(with("file", 3), "e"), "e: weights: file must be a string");
  EXPECT_ERROR_HAS(parse_engine_config(with("bytes", -1), "e"), "e: weights: bytes must be a size");
  EXPECT_ERROR_HAS(parse_engine_config(with("sha256", "ABC"), "e"),
                   "e: weights: sha256 must be 64 lowercase hex digits");
  json no_arch = base;
  no_arch.erase("architecture");
  EXPECT_ERROR_HAS(parse_engine_config(no_arch.dump(), "e"),
                   "e: architecture must be an object when weights are given");
  json not_object = base;
  not_object["weights"] = "m.gguf";
  EXPECT_ERROR_HAS(parse_engine_config(not_object.dump(), "e"), "e: weights: expected an object");
}

}  // namespace
}  // namespace skipsoftmax
