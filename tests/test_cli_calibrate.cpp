// The calibrate and check-tables subcommands run as the built tool: their flag checks (exit code,
// message), and that a failed run leaves the checkpoint config as it was. With
// SKIPSOFTMAX_SMOLLM2_GGUF: the prompts calibrate writes for an engine to capture, a small CPU
// calibration of the real model, and check-tables on held-out prompts with its verdict's exit code.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_io.h"
#include "npy.h"
#include "skipsoftmax/threshold.h"
#include "synthetic.h"
#include "test_util.h"
#include "tool_run.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

using test::ToolRun;

// A metadata-only GGUF of a Llama model (no tensors, no merges): enough for the flag checks that
// read the model's shape and context length.
void write_tiny_gguf(const fs::path& path, std::uint32_t context) {
  std::vector<char> b;
  const auto pod = [&](auto v) {
    const char* p = reinterpret_cast<const char*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  };
  const auto str = [&](const std::string& s) {
    pod(std::uint64_t{s.size()});
    b.insert(b.end(), s.begin(), s.end());
  };
  const auto u32 = [&](const std::string& key, std::uint32_t v) {
    str(key);
    pod(std::uint32_t{4});
    pod(v);
  };
  const auto f32 = [&](const std::string& key, float v) {
    str(key);
    pod(std::uint32_t{6});
    pod(v);
  };
  pod(std::uint32_t{0x46554747});  // "GGUF"
  pod(std::uint32_t{3});
  pod(std::uint64_t{0});   // tensors
  pod(std::uint64_t{11});  // metadata
  str("general.architecture");
  pod(std::uint32_t{8});
  str("llama");
  u32("llama.block_count", 2);
  u32("llama.embedding_length", 64);
  u32("llama.feed_forward_length", 128);
  u32("llama.attention.head_count", 2);
  u32("llama.attention.head_count_kv", 1);
  u32("llama.context_length", context);
  f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  f32("llama.rope.freq_base", 10000.f);
  str("tokenizer.ggml.model");
  pod(std::uint32_t{8});
  str("gpt2");
  str("tokenizer.ggml.tokens");
  pod(std::uint32_t{9});
  pod(std::uint32_t{8});
  pod(std::uint64_t{2});
  str("a");
  str("b");
  std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

class CliCalibrate : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(model());
    write_tiny_gguf(model() / "tiny.gguf", 1024);
    std::ofstream(model() / "config.json") << kConfig;
  }

  static constexpr const char* kConfig =
      "{\"hidden_size\": 64, \"skip_softmax_prefill_scale_table\": [[512, 10]]}\n";
  fs::path model() const { return dir_ / "model"; }
  static std::string q(const fs::path& p) { return test::shell_quote(p); }

  ToolRun run(const std::string& args) const {
    return test::run_tool("calibrate " + args, dir_ / "stderr.txt");
  }

  // Fails with `message`, and the checkpoint config is byte for byte what it was.
  void expect_fails(const std::string& flags, const std::string& message) const {
    const ToolRun r = run("--model-dir " + q(model()) + " " + flags);
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\nstderr: " << r.err;
    EXPECT_EQ(read_text_file(model() / "config.json"), kConfig) << flags;
  }
};

TEST_F(CliCalibrate, RejectsBadFlagsBeforeAnyWork) {
  const std::string ok = " --bin-min 256 --bin-step 256 --corpus-dir " + q(dir_);
  expect_fails("--phase prefill --max-seqlen 512 --bin-step 0 --bin-min 256",
               "--bin-step must be > 0");
  expect_fails("--phase prefill --max-seqlen 512 --bin-step -2048", "--bin-step must be > 0");
  expect_fails("--phase prefill --max-seqlen 1000", "--max-seqlen 1000 is below --bin-min 4096");
  expect_fails("--phase prefill --max-seqlen 512 --target-sparsity 1.5" + ok,
               "--target-sparsity: target sparsity \"1.5\" is not a fraction in (0, 1)");
  expect_fails("--phase prefill --max-seqlen 512 --target-sparsity 0" + ok, "--target-sparsity");
  expect_fails("--phase prefill --max-seqlen 512 --target-sparsity 100%" + ok, "--target-sparsity");
  expect_fails("--phase both --max-seqlen 512 --mass-ratio 0" + ok, "--mass-ratio must be > 0");
  expect_fails("--phase both --max-seqlen 512 --samples 0" + ok, "--samples must be >= 1");
  expect_fails("--phase everything --max-seqlen 512" + ok, "unknown --phase 'everything'");
  expect_fails("--phase decode --max-seqlen 512 --backend tpu" + ok, "unknown --backend 'tpu'");
  expect_fails("--phase decode --max-seqlen 512 --decode-steps 0" + ok, "--decode-steps");
  expect_fails("--phase decode --max-seqlen 512 --decode-splits 0" + ok, "--decode-splits");
  expect_fails("--phase decode --max-seqlen 512 --decode-splits 129" + ok,
               "--decode-splits must lie in [1, 128], got 129");
  expect_fails("--phase decode --max-seqlen 512 --threads 1025" + ok,
               "--threads must lie in [0, 1024] (0: every core), got 1025");
  expect_fails("--phase prefill --max-seqlen 262144 --bin-min 4096",
               "every 2048 is 127 bins; the GPU kernels take tables of at most 64 rows");
  expect_fails("--max-seqlen 512" + ok, "--phase is required");
  // The model's context length (1024) bounds the prompts.
  expect_fails("--phase prefill --max-seqlen 2048" + ok,
               "--max-seqlen 2048, more than the model's context length 1024");
  expect_fails("--phase decode --max-seqlen 1024" + ok,
               "with decode needs prompts of 1039 tokens (the last 16 are decode steps), more "
               "than the model's context length 1024");
  expect_fails("--phase prefill --max-seqlen 512 --captures-dir " + q(dir_ / "nowhere") + ok,
               "--captures-dir");
}

TEST_F(CliCalibrate, NamesAMissingOrAmbiguousModel) {
  const std::string flags = " --phase prefill --max-seqlen 512 --bin-min 512";
  ToolRun r = run("--model-dir " + q(dir_ / "absent") + flags);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("absent: no such directory"), std::string::npos) << r.err;
  fs::create_directories(dir_ / "empty");
  r = run("--model-dir " + q(dir_ / "empty") + flags);
  EXPECT_NE(r.err.find("no .gguf model file in it"), std::string::npos) << r.err;
  write_tiny_gguf(model() / "other.gguf", 1024);
  expect_fails(flags, "several .gguf files (");
}

// What the run writes to is checked before the pass (which, on the tiny model, fails at its
// tokenizer).
TEST_F(CliCalibrate, ChecksItsOutputsBeforeThePass) {
  const std::string flags = "--phase prefill --max-seqlen 512 --bin-min 512 ";
  std::ofstream(dir_ / "file") << "x";
  expect_fails(flags + "--cache-dir " + q(dir_ / "file"),
               "--cache-dir " + (dir_ / "file").string() + ": exists and is not a directory");
  expect_fails(flags + "--write-samples " + q(dir_ / "file"),
               "--write-samples " + (dir_ / "file").string() + ": exists and is not a directory");
  expect_fails(flags + "--write-samples ''", "--write-samples: an empty path");
  expect_fails(flags + "--cache-dir " + q(dir_ / "file" / "cache"),
               (dir_ / "file").string() + " is not a directory");
  // A config this run could not write back is named before the pass, and before the cache's
  // directory is made ...
  std::ofstream(model() / "config.json") << "{\"skip_softmax_decode_scale_table\": 3}";
  ToolRun r = run("--model-dir " + q(model()) + " " + flags + "--cache-dir " + q(dir_ / "cache"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("skip_softmax_decode_scale_table"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "cache"));
  // --dry-run makes the same checks as the run it previews (it skipped this one).
  r = run("--model-dir " + q(model()) + " " + flags + "--dry-run");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("skip_softmax_decode_scale_table"), std::string::npos) << r.err;
  // ... but a key this run replaces is not held against it: a 65-row table of an old calibration.
  std::string rows;
  for (int i = 0; i <= kMaxKernelTableRows; ++i) {
    rows += (i ? ", [" : "[") + std::to_string(512 + 64 * i) + ", 10]";
  }
  std::ofstream(model() / "config.json")
      << "{\"skip_softmax_prefill_scale_table\": [" + rows + "]}";
  r = run("--model-dir " + q(model()) + " " + flags);
  EXPECT_NE(r.code, 0);  // the tiny model's tokenizer fails in the pass
  EXPECT_EQ(r.err.find("rows; the GPU kernels take at most"), std::string::npos) << r.err;
  std::ofstream(model() / "config.json") << kConfig;
}

TEST_F(CliCalibrate, AFailureAfterTheFlagChecksLeavesTheConfigAlone) {
  // The tiny model has no tokenizer merges: the run fails once it builds the prompts.
  expect_fails("--phase both --max-seqlen 512 --bin-min 256 --bin-step 256 --corpus-dir " + q(dir_),
               "error");
  expect_fails("--phase prefill --max-seqlen 512 --bin-min 512 --corpus-dir " + q(dir_ / "x"),
               "error");
}

// check-tables: every flag and the checkpoint's tiers are checked before any prompt is built.
TEST_F(CliCalibrate, CheckTablesRejectsBadFlagsBeforeAnyWork) {
  const auto check = [&](const std::string& flags, const std::string& message) {
    const ToolRun r =
        test::run_tool("check-tables --model-dir " + q(model()) + " " + flags, dir_ / "stderr.txt");
    EXPECT_EQ(r.code, 1) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\nstderr: " << r.err;
  };
  check("--lengths 512 256", "--lengths must increase, got 512 then 256");
  check("--lengths 0", "--lengths must be positive");
  check("--lengths 512 --tolerance 0", "--tolerance must lie in (0, 1)");
  check("--lengths 512 --samples 0", "--samples must be >= 1");
  check("--lengths 8 --decode-steps 16", "--decode-steps 16 exceeds the shortest length 8");
  check("--lengths 512 --backend tpu", "unknown --backend 'tpu'");
  check("--lengths 512 --phase all", "unknown --phase 'all'");
  check("--lengths 512 --captures-dir " + q(dir_ / "nowhere"), "no such directory");
  check("--lengths 512 --save-results " + q(dir_ / "no" / "r.json"), "does not exist");
  // The config has a deployed prefill table but no calibrated tiers.
  check("--lengths 512 --phase prefill",
        "no prefill target sparsity: name the tier to check with --tier (calibrated: none)");
  std::ofstream(model() / "config.json")
      << "{\"skip_softmax_prefill_scale_tables\": {\"50%\": [[512, 10]]},"
         " \"skip_softmax_prefill_target_sparsity\": 0.5}";
  check("--lengths 512 --phase prefill --tier 75%",
        "no prefill tier 75% (calibrated: 50%); run skipsoftmax calibrate first");
  check("--lengths 2048 --phase prefill", "more than the model's context length 1024");
}

// --save-results may not replace the checkpoint's config or weights, under any spelling; the
// checkpoint stays byte for byte what it was.
TEST_F(CliCalibrate, CheckTablesRefusesToSaveOverTheCheckpoint) {
  const std::string weights = read_text_file(model() / "tiny.gguf");
  fs::create_symlink(model() / "config.json", dir_ / "cfg.json");
  const std::pair<fs::path, const char*> cases[] = {
      {model() / "config.json", "is a file of --model-dir"},
      {dir_ / "cfg.json", "is a file of --model-dir"},
      {model() / "." / "tiny.gguf", "is a file of --model-dir"},
  };
  for (const auto& [out, message] : cases) {
    const ToolRun r = test::run_tool(
        "check-tables --model-dir " + q(model()) + " --lengths 512 --save-results " + q(out),
        dir_ / "stderr.txt");
    EXPECT_EQ(r.code, 1) << out;
    EXPECT_NE(r.err.find(message), std::string::npos) << out << "\nstderr: " << r.err;
    EXPECT_EQ(read_text_file(model() / "config.json"), kConfig);
    EXPECT_EQ(read_text_file(model() / "tiny.gguf"), weights);
  }
}

// The real checkpoint in a model directory of its own (a link to the file).
class CliCalibrateSmolLM2 : public CliCalibrate {
 protected:
  void SetUp() override {
    const char* path = std::getenv("SKIPSOFTMAX_SMOLLM2_GGUF");
    if (!path || !fs::exists(path)) GTEST_SKIP() << "SKIPSOFTMAX_SMOLLM2_GGUF not set";
    CliCalibrate::SetUp();
    fs::remove(model() / "tiny.gguf");
    fs::create_symlink(fs::absolute(path), model() / "smollm2.gguf");
  }
};

TEST_F(CliCalibrateSmolLM2, WritesThePromptsForAnEngineToCapture) {
  const ToolRun r = run("--model-dir " + q(model()) +
                        " --phase both --bin-min 512 --bin-step 512 --max-seqlen 1024 --samples 2 "
                        "--write-samples " +
                        q(dir_ / "prompts"));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = read_json_file(dir_ / "prompts" / "prompts.json");
  ASSERT_EQ(j["prompts"].size(), 4u);
  for (const auto& p : j["prompts"]) {
    const std::int64_t bin = p["bin"];
    const NpyArray a = read_npy(dir_ / "prompts" / p["tokens"].get<std::string>());
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{bin + 15}));  // 16 decode steps
    const auto ids = to_int64_vector(a, "prompt");
    // SmolLM2 asks for no BOS (tokenizer.ggml.add_bos_token), as the engine and transformers run
    // it.
    EXPECT_NE(ids.front(), 1);
    for (const auto& n : p["needles"]) EXPECT_LT(n["position"].get<std::int64_t>(), bin);
  }
  EXPECT_EQ(read_text_file(model() / "config.json"), kConfig);
}

// The GPU engine's route, with synthetic structured Q/K standing in for its captures: prompts out,
// captures in (one manifest per prompt, every layer pointing at the same arrays), statistics
// cached.
TEST_F(CliCalibrateSmolLM2, CalibratesFromCapturedQk) {
  const std::string common = "--model-dir " + q(model()) +
                             " --phase both --bin-min 512 --bin-step 512 --max-seqlen 512 "
                             "--samples 2 --target-sparsity 0.45 ";
  ASSERT_EQ(run(common + "--write-samples " + q(dir_ / "prompts")).code, 0);
  const nlohmann::json prompts = read_json_file(dir_ / "prompts" / "prompts.json");
  int i = 0;
  for (const auto& p : prompts["prompts"]) {
    const fs::path cap = dir_ / "captures" / std::to_string(i);
    fs::create_directories(cap);
    const auto ids =
        to_int64_vector(read_npy(dir_ / "prompts" / p["tokens"].get<std::string>()), "prompt");
    const auto n = static_cast<std::int64_t>(ids.size());
    SyntheticSpec spec{n, 9, 3, 64};  // SmolLM2's heads
    spec.seed = static_cast<std::uint64_t>(10 + i++);
    const SyntheticQkv s = make_structured_qkv(spec);
    const std::vector<double> qd(s.q.begin(), s.q.end()), kd(s.k.begin(), s.k.end());
    write_npy_atomic(cap / "q.npy", make_npy_float(NpyDtype::kF16, {n, 9, 64}, qd));
    write_npy_atomic(cap / "k.npy", make_npy_float(NpyDtype::kF16, {n, 3, 64}, kd));
    nlohmann::json layers = nlohmann::json::array();
    for (int l = 0; l < 30; ++l) layers.push_back({{"layer", l}, {"q", "q.npy"}, {"k", "k.npy"}});
    write_json_file(cap / "manifest.json", nlohmann::json{{"tokens", ids}, {"layers", layers}});
  }
  const std::string flags =
      common + "--captures-dir " + q(dir_ / "captures") + " --cache-dir " + q(dir_ / "cache");
  ToolRun r = run(flags);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("of the work"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("calibrated 2 prompts (0 from the cache) on 30 global layers"),
            std::string::npos)
      << r.out;
  const nlohmann::json j = read_json_file(model() / "config.json");
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["skip_softmax_prefill_target_sparsity"], 0.45) << r.out;
  // Prompts this short leave few skippable prefill tiles: the higher tiers are out of reach,
  // reported and left out, while decode reaches all of them.
  EXPECT_TRUE(j["skip_softmax_prefill_scale_tables"].contains("45%")) << r.out;
  EXPECT_NE(r.out.find("prefill tier 80% is unreachable at bin 512"), std::string::npos) << r.out;
  EXPECT_EQ(j["skip_softmax_decode_scale_tables"].size(), 5u) << r.out;  // the ladder and 45%
  ASSERT_EQ(j["skip_softmax_prefill_scale_table"].size(), 1u);
  EXPECT_EQ(j["skip_softmax_prefill_scale_table"][0][0], 512);
  EXPECT_EQ(j["skip_softmax_decode_shape_advice"]["calibrated_max_seqlen"], 512);
  r = run(flags + " --dry-run");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("calibrated 2 prompts (2 from the cache)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dry run: nothing written"), std::string::npos) << r.out;
}

// bins 512 and 1024, one prompt each, both phases: the CPU forward pass of a 135M model.
TEST_F(CliCalibrateSmolLM2, CalibratesOnTheCpu) {
  const ToolRun r = run("--model-dir " + q(model()) +
                        " --phase both --bin-min 512 --bin-step 512 --max-seqlen 1024 --samples 1 "
                        "--cache-dir " +
                        q(dir_ / "cache"));
  if (r.err.find("not in this build yet") != std::string::npos) {
    GTEST_SKIP() << "the CPU forward pass is not in this build";
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("prefill shape advice:"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("ETA"), std::string::npos) << r.err;
  const nlohmann::json j = read_json_file(model() / "config.json");
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_TRUE(j.contains("skip_softmax_prefill_scale_tables"));
  EXPECT_TRUE(j.contains("skip_softmax_decode_shape_advice"));
}

// check-tables on held-out prompts of the real model (the CPU forward pass of one 527-token
// prompt per run): PASS at a tolerance any skipping table meets, exit code 2 at one none does.
TEST_F(CliCalibrateSmolLM2, ChecksTablesOnHeldOutPrompts) {
  std::ofstream(model() / "config.json")
      << "{\"hidden_size\": 64,"
         " \"skip_softmax_prefill_scale_tables\": {\"75%\": [[256, 40], [1024, 80]]},"
         " \"skip_softmax_prefill_target_sparsity\": 0.75,"
         " \"skip_softmax_decode_scale_tables\": {\"75%\": [[256, 40]]},"
         " \"skip_softmax_decode_target_sparsity\": 0.75}";
  const std::string flags = "check-tables --model-dir " + q(model()) +
                            " --lengths 512 --samples 1 --save-results " + q(dir_ / "r.json");
  ToolRun r = test::run_tool(flags + " --tolerance 0.99", dir_ / "stderr.txt");
  if (r.err.find("not in this build yet") != std::string::npos) {
    GTEST_SKIP() << "the CPU forward pass is not in this build";
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("checked 1 held-out prompts on 30 global layers"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("of the work"), std::string::npos) << r.err;
  const nlohmann::json j = read_json_file(dir_ / "r.json");
  EXPECT_EQ(j["format"], "skipsoftmax-table-check/1");
  EXPECT_EQ(j["corpus_split"], "evaluation");
  for (const char* phase : {"prefill", "decode"}) {
    const nlohmann::json& p = j["phases"][phase];
    EXPECT_EQ(p["tier"], "75%") << phase;
    ASSERT_EQ(p["points"].size(), 1u) << phase;
    const nlohmann::json& pt = p["points"][0];
    EXPECT_EQ(pt["length"], 512);
    EXPECT_GT(pt["tiles"].get<int>(), 0);
    EXPECT_GT(pt["tables"].get<double>(), 0.0) << phase;
    EXPECT_EQ(p["flat_table"].size(), 1u);
  }
  // At 512 keys the prefill table's first row applies, so a flat S is the table itself.
  EXPECT_EQ(j["phases"]["prefill"]["points"][0]["tables"],
            j["phases"]["prefill"]["points"][0]["flat"]);
  r = test::run_tool(flags + " --tolerance 0.000001", dir_ / "stderr.txt");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("the tables do not hold their target: FAIL"), std::string::npos) << r.err;
  EXPECT_FALSE(read_json_file(dir_ / "r.json")["pass"].get<bool>());
}

}  // namespace
}  // namespace skipsoftmax
