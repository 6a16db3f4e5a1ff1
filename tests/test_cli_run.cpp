// The run, capture, evaluate and price subcommands on a CPU-only machine: every input error is
// reported with a clear message and a non-zero exit before any GPU work, a valid request stops at
// the missing GPU, and no output is left behind. The engine itself is tested in tests/gpu/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "file_io.h"
#include "test_util.h"
#include "tiny_gguf.h"
#include "tool_run.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::ToolRun;

class CliRun : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
#if !SKIPSOFTMAX_HAVE_CUDA
    GTEST_SKIP() << "run and capture exist only in CUDA builds";
#endif
    write(ckpt() / "config.json", R"({"skip_softmax_prefill_scale_table": [[1024, 512]]})");
    test::tiny_llama().save(ckpt() / "tiny.gguf");
    ASSERT_EQ(run("export " + q(ckpt()) + " " + q(engine())).code, 0);
    write(input(), R"(["hi you", {"token_ids": [5, 6], "max_new_tokens": 2, "id": "b"}])");
    write(text(), "the quick brown fox jumps over the lazy dog");
  }

  fs::path ckpt() const { return dir_ / "ckpt"; }
  fs::path engine() const { return dir_ / "engine"; }
  fs::path input() const { return dir_ / "in.json"; }
  fs::path output() const { return dir_ / "out.json"; }
  fs::path text() const { return dir_ / "text.txt"; }
  fs::path captures() const { return dir_ / "cap"; }

  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  static std::string q(const fs::path& p) { return test::shell_quote(p); }

  ToolRun run(const std::string& args) const { return test::run_tool(args, dir_ / "stderr.txt"); }

  std::string run_args(const std::string& extra = "") const {
    return "run --engine-dir " + q(engine()) + " --input-file " + q(input()) + " --output-file " +
           q(output()) + " " + extra;
  }
  std::string capture_args(const std::string& extra) const {
    return "capture --model-dir " + q(ckpt()) + " --text " + q(text()) + " --out-dir " +
           q(captures()) + " " + extra;
  }

  // Fails with `message` on stderr and leaves no output.
  void expect_fails(const std::string& args, const std::string& message) const {
    const ToolRun r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_FALSE(fs::exists(output())) << args;
    EXPECT_FALSE(fs::exists(captures())) << args;
  }

  // A valid command stops at the engine: no GPU here (or, on a GPU machine, the tiny model has
  // no tensors to load).
  void expect_stops_at_the_engine(const std::string& args) const {
    const ToolRun r = run(args);
    EXPECT_EQ(r.code, 1) << args;
    const bool no_gpu = r.err.find("needs a Hopper GPU") != std::string::npos;
    const bool no_tensors = r.err.find("no tensor token_embd.weight") != std::string::npos;
    EXPECT_TRUE(no_gpu || no_tensors) << r.err;
    EXPECT_FALSE(fs::exists(output()));
  }
};

TEST_F(CliRun, ValidRequestsReachTheEngine) {
  expect_stops_at_the_engine(run_args());
  expect_stops_at_the_engine(run_args("--max-new-tokens 8 --prefill-chunk 16 --time-attention"));
  expect_stops_at_the_engine(run_args("--dtype bf16"));
}

TEST_F(CliRun, FlagErrors) {
  expect_fails("run --engine-dir " + q(engine()) + " --input-file " + q(input()),
               "--output-file is required");
  expect_fails(run_args("--max-new-tokens 0"), "--max-new-tokens must be >= 1");
  expect_fails(run_args("--prefill-chunk -1"), "--prefill-chunk must be >= 0");
  expect_fails(run_args("--max-new-tokens x"), "--max-new-tokens");
  expect_fails(run_args("--dtype fp8"), "--dtype fp8: expected fp16 or bf16");
}

TEST_F(CliRun, EngineErrors) {
  expect_fails("run --engine-dir " + q(dir_ / "none") + " --input-file " + q(input()) +
                   " --output-file " + q(output()),
               "none: no such engine directory");
  ASSERT_EQ(run("export --config-only " + q(ckpt()) + " " + q(dir_ / "thresholds")).code, 0);
  expect_fails("run --engine-dir " + q(dir_ / "thresholds") + " --input-file " + q(input()) +
                   " --output-file " + q(output()),
               "no weights (exported with --config-only)");
  // The engine config is read at every launch: an edit takes effect (here, a broken table).
  json config = json::parse(read_text_file(engine() / "config.json"));
  config["skip_softmax_prefill_scale_table"] = json::parse("[[8, 1], [4, 1]]");
  write(engine() / "config.json", config.dump());
  expect_fails(run_args(), "skip_softmax_prefill_scale_table: scale table row 1");
}

TEST_F(CliRun, WeightsChangedSinceExport) {
  test::tiny_llama().str("general.name", "another").save(ckpt() / "tiny.gguf");
  expect_fails(run_args(), "differs from what export pinned");
  fs::remove(ckpt() / "tiny.gguf");
  expect_fails(run_args(), "the engine's weights file is missing");
}

TEST_F(CliRun, InputErrors) {
  write(input(), "[\"a\", ");
  expect_fails(run_args(), "in.json: malformed JSON at byte");
  write(input(), R"([{"prompt": "a", "max_tokens": 3}])");
  expect_fails(run_args(), "in.json: request 0: unknown key \"max_tokens\"");
  write(input(), R"([{"token_ids": [1, 500]}])");
  expect_fails(run_args(), "request 0: token id 500 is outside the vocabulary of 98");
  write(input(), R"([{"token_ids": []}])");
  expect_fails(run_args(), "request 0: the prompt has no tokens");
  write(input(), R"(["hi", "hi you"])");
  expect_fails(run_args("--max-new-tokens 251"),
               "request 1: 6 prompt tokens + 251 new tokens exceed the model's context of 256");
  fs::remove(input());
  expect_fails(run_args(), "in.json: no such file");
}

TEST_F(CliRun, OutputErrors) {
  expect_fails("run --engine-dir " + q(engine()) + " --input-file " + q(input()) +
                   " --output-file " + q(dir_ / "no" / "out.json"),
               "does not exist");
  fs::create_directories(dir_ / "d.json");
  expect_fails("run --engine-dir " + q(engine()) + " --input-file " + q(input()) +
                   " --output-file " + q(dir_ / "d.json"),
               "d.json: is a directory");
}

// An output that is, under any spelling, a file the command reads is refused before any work, and
// that file is left as it was.
TEST_F(CliRun, OutputThatIsAnInputIsRefused) {
  fs::create_symlink(input(), dir_ / "link.json");
  const std::pair<fs::path, const char*> cases[] = {
      {input(), "is also --input-file"},
      {dir_ / "link.json", "is also --input-file"},
      {engine() / "config.json", "is a file of --engine-dir"},
      {ckpt() / "config.json", "is a file of the engine's checkpoint"},
      {engine() / ".." / "ckpt" / "tiny.gguf", "is a file of the engine's checkpoint"},
  };
  for (const auto& [out, message] : cases) {
    const std::string before = read_text_file(out);
    const ToolRun r = run("run --engine-dir " + q(engine()) + " --input-file " + q(input()) +
                          " --output-file " + q(out));
    EXPECT_NE(r.code, 0) << out;
    EXPECT_NE(r.err.find(message), std::string::npos) << out << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find("it would overwrite"), std::string::npos) << r.err;
    EXPECT_EQ(read_text_file(out), before) << out;
  }
  // A new file inside the engine directory replaces nothing.
  expect_stops_at_the_engine("run --engine-dir " + q(engine()) + " --input-file " + q(input()) +
                             " --output-file " + q(engine() / "out.json"));
}

TEST_F(CliRun, CaptureValidRequestReachesTheEngine) {
  expect_stops_at_the_engine(capture_args("--tokens 20 --layers 0,1 --logits"));
  EXPECT_FALSE(fs::exists(captures()));
  fs::create_directories(captures());  // an empty directory is a valid target, left empty
  expect_stops_at_the_engine(capture_args("--tokens 20 --layers 1 --dtype f16"));
  EXPECT_TRUE(fs::is_empty(captures()));
  for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".cap")) << e.path() << " left behind";
  }
}

TEST_F(CliRun, CaptureErrors) {
  expect_fails(capture_args("--tokens 20"), "nothing to capture: give --layers and/or --logits");
  expect_fails(capture_args("--tokens 20 --layers 0,2"), "layer 2 is outside [0, 2)");
  expect_fails(capture_args("--tokens 0 --layers 0"), "--tokens must be >= 1");
  expect_fails(capture_args("--tokens 50 --layers 0"),
               "text.txt: 43 tokens, fewer than --tokens 50");
  expect_fails(capture_args("--tokens 5 --layers 0 --dtype bf16"), "--dtype bf16");
  write(dir_ / "binary.txt", std::string("A text") + "\xff\xfe" + " with bytes no UTF-8 has");
  expect_fails("capture --model-dir " + q(ckpt()) + " --text " + q(dir_ / "binary.txt") +
                   " --tokens 5 --layers 0 --out-dir " + q(captures()),
               "binary.txt: not UTF-8 text (an invalid byte at 6)");
  expect_fails("capture --model-dir " + q(dir_ / "none") + " --text " + q(text()) +
                   " --tokens 5 --layers 0 --out-dir " + q(captures()),
               "none: no such checkpoint directory");
  expect_fails("capture --model-dir " + q(ckpt()) + " --text " + q(dir_ / "none.txt") +
                   " --tokens 5 --layers 0 --out-dir " + q(captures()),
               "none.txt: no such file");
  write(captures() / "old.npy", "x");
  const ToolRun r = run(capture_args("--tokens 5 --layers 0"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not empty; captures go to a new or empty directory"), std::string::npos)
      << r.err;
  fs::remove_all(captures());
  test::tiny_llama().save(ckpt() / "second.gguf");
  expect_fails(capture_args("--tokens 5 --layers 0"), "several *.gguf files");
}

// evaluate and price on a checkpoint with a 4k context and a calibrated ladder, and small books.
class CliEvaluate : public CliRun {
 protected:
  void SetUp() override {
    CliRun::SetUp();
    if (IsSkipped()) return;
    write(ckpt4k() / "config.json", R"({
      "skip_softmax_prefill_scale_table": [[1024, 4]],
      "skip_softmax_prefill_scale_tables": {"50%": [[1024, 2]], "75%": [[1024, 4]]},
      "skip_softmax_prefill_target_sparsity": "75%",
      "skip_softmax_prefill_shape_advice": {"verdict": "ON", "sparsity": 0.74,
                                            "mass_share": 0.01, "mass_ratio": 0.0135}})");
    test::tiny_llama(4096).save(ckpt4k() / "tiny.gguf");
    ASSERT_EQ(run("export " + q(ckpt4k()) + " " + q(engine4k())).code, 0);
    for (const char* book :
         {"austen_4_pride_and_prejudice.txt", "austen_5_sense_and_sensibility.txt", "kjv.txt"}) {
      std::string text;
      for (int p = 0; p < 40; ++p) text += "it is a truth universally acknowledged\n\n";
      write(corpus() / book, text);
    }
  }
  fs::path ckpt4k() const { return dir_ / "ckpt4k"; }
  fs::path engine4k() const { return dir_ / "engine4k"; }
  fs::path corpus() const { return dir_ / "books"; }
  fs::path results() const { return dir_ / "results.json"; }

  std::string evaluate_args(const std::string& extra) const {
    return "evaluate --model-dir " + q(ckpt4k()) + " --engine-dir " + q(engine4k()) +
           " --corpus-dir " + q(corpus()) + " --save-results " + q(results()) + " " + extra;
  }
  std::string price_args(const std::string& extra) const {
    return "price --model-dir " + q(ckpt4k()) + " --work-dir " + q(dir_ / "work") +
           " --corpus-dir " + q(corpus()) + " " + extra;
  }
  void expect_no_results() const {
    EXPECT_FALSE(fs::exists(results()));
    EXPECT_FALSE(fs::exists(dir_ / "work" / "price.json"));
  }
  // Fails with `message` on stderr and writes no results.
  void fails(const std::string& args, const std::string& message) const {
    const ToolRun r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
    expect_no_results();
  }
};

TEST_F(CliEvaluate, ValidEvaluationReachesTheEngine) {
  const ToolRun r = run(evaluate_args("--max-context 2048 --lengths 1024 --samples 2"));
  EXPECT_EQ(r.code, 1);
  const bool no_gpu = r.err.find("needs a Hopper GPU") != std::string::npos;
  const bool no_tensors = r.err.find("no tensor token_embd.weight") != std::string::npos;
  EXPECT_TRUE(no_gpu || no_tensors) << r.err;
  expect_no_results();
}

TEST_F(CliEvaluate, EvaluateErrors) {
  fails(evaluate_args(""), "--max-context is required");
  fails(evaluate_args("--max-context 2048 --arm all"), "unknown arm 'all'");
  fails(evaluate_args("--max-context 2048 --max-drop 0.05"),
        "--max-drop gates against a baseline: give --baseline too");
  fails(evaluate_args("--max-context 2048 --lengths 100"), "--lengths: 100 is outside [512");
  fails(evaluate_args("--max-context 2048 --lengths 2048 1024"), "strictly increasing");
  fails(evaluate_args("--max-context 2048 --tasks ruler_qa"), "unknown task 'ruler_qa'");
  fails(evaluate_args("--max-context 2048 --samples 0"), "--samples must be >= 1");
  fails(evaluate_args("--max-context 2048 --tasks ruler_vt ruler_vt"),
        "--tasks: ruler_vt is given twice");
  fails(evaluate_args("--max-context 2048 --dtype fp8"), "--dtype fp8: expected fp16 or bf16");
  fails(evaluate_args("--max-context 8192"), "exceeds the model's context of 4096 tokens");
  fails(evaluate_args("--max-context 2048 --arm decode"),
        "--arm decode: the engine runs decode dense");
  fails("evaluate --model-dir " + q(ckpt()) + " --engine-dir " + q(engine4k()) +
            " --max-context 2048",
        "was exported from");
  ASSERT_EQ(run("export " + q(ckpt4k()) + " " + q(dir_ / "dense4k") +
                " --skip-softmax-prefill-scale-table none")
                .code,
            0);
  fails("evaluate --model-dir " + q(ckpt4k()) + " --engine-dir " + q(dir_ / "dense4k") +
            " --max-context 2048",
        "--arm both: the engine runs both phases dense");
  write(dir_ / "base.json", "{\"schema\": ");
  fails(evaluate_args("--max-context 2048 --baseline " + q(dir_ / "base.json")),
        "base.json: malformed JSON");
  fails(evaluate_args("--max-context 2048 --baseline " + q(dir_ / "none.json")),
        "none.json: no such file");
  fails("evaluate --model-dir " + q(ckpt4k()) + " --engine-dir " + q(engine4k()) +
            " --max-context 2048 --corpus-dir " + q(dir_ / "nobooks"),
        "no such book");
}

TEST_F(CliEvaluate, SaveResultsOverAnInputIsRefused) {
  write(dir_ / "base.json", "{}");
  const std::pair<fs::path, const char*> cases[] = {
      {ckpt4k() / "config.json", "is a file of --model-dir"},
      {ckpt4k() / "tiny.gguf", "is a file of --model-dir"},
      {engine4k() / "config.json", "is a file of --engine-dir"},
      {dir_ / "base.json", "is also --baseline"},
  };
  for (const auto& [out, message] : cases) {
    const std::string before = read_text_file(out);
    const ToolRun r = run("evaluate --model-dir " + q(ckpt4k()) + " --engine-dir " + q(engine4k()) +
                          " --corpus-dir " + q(corpus()) + " --max-context 2048 --baseline " +
                          q(dir_ / "base.json") + " --save-results " + q(out));
    EXPECT_NE(r.code, 0) << out;
    EXPECT_NE(r.err.find(message), std::string::npos) << out << "\nstderr: " << r.err;
    EXPECT_EQ(read_text_file(out), before) << out;
  }
}

TEST_F(CliEvaluate, PriceErrors) {
  fails(price_args("--lengths 1024"), "--accuracy-lengths is required");
  fails(price_args("--lengths 1024 2048 --accuracy-lengths 4096"),
        "--accuracy-lengths: 4096 is not one of --lengths");
  fails(price_args("--lengths 2048 1024 --accuracy-lengths 1024"),
        "--lengths must be strictly increasing");
  fails(price_args("--lengths 4096 --accuracy-lengths 4096"),
        "4096 and 32 decode tokens exceed the model's context of 4096");
  fails(price_args("--lengths 1024 --accuracy-lengths 1024 --decode-tokens 1"),
        "--decode-tokens must be >= 2");
  fails(price_args("--lengths 1024 --accuracy-lengths 1024 --tiers 90%"),
        "--tiers: 90% is not calibrated (the checkpoint has 50%, 75%)");
  fails(price_args("--lengths 1024 --accuracy-lengths 1024 --tiers 75% 0.75"),
        "--tiers: 0.75 is given twice");
  fails(price_args("--lengths 1024 --accuracy-lengths 1024 --dtype fp32"),
        "--dtype fp32: expected fp16 or bf16");
  fails("price --model-dir " + q(ckpt()) + " --work-dir " + q(dir_ / "work") +
            " --lengths 1024 --accuracy-lengths 1024",
        "no calibrated tiers");
  // A valid request stops at the GPU before it writes anything (no engines in the work
  // directory), with the checkpoint config untouched.
  const std::string before = read_text_file(ckpt4k() / "config.json");
  const ToolRun r = run(price_args("--lengths 1024 2048 --accuracy-lengths 1024 --tiers 75%"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.err.find("price measures on a Hopper GPU") != std::string::npos ||
              r.err.find("needs a Hopper GPU") != std::string::npos ||
              r.err.find("no tensor token_embd.weight") != std::string::npos)
      << r.err;
  if (r.err.find("price measures on a Hopper GPU") != std::string::npos) {
    EXPECT_FALSE(fs::exists(dir_ / "work")) << "a price run that cannot measure wrote engines";
  }
  EXPECT_EQ(read_text_file(ckpt4k() / "config.json"), before);
  expect_no_results();
}

}  // namespace
}  // namespace skipsoftmax
