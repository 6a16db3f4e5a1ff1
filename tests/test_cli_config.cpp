// The export, inspect and schedule subcommands, run as the built tool on temporary directories:
// exit codes, messages, and that a failing command leaves no output file behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_io.h"
#include "skipsoftmax/threshold.h"
#include "test_util.h"
#include "tiny_gguf.h"
#include "tool_run.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCheckpoint = R"({
  "hidden_size": 4096,
  "skip_softmax_prefill_scale_table": [[512, 100]],
  "skip_softmax_prefill_scale_tables": {"50%": [[1024, 900]], "75%": [[1024, 2048], [4096, 3000]]},
  "skip_softmax_prefill_target_sparsity": 0.75,
  "skip_softmax_prefill_shape_advice": {"tile_q": 128},
  "skip_softmax_decode_scale_table": [[1, 500.5]],
  "skip_softmax_decode_scale_tables": {"60%": [[64, 10]]}
})";

using test::ToolRun;

class Cli : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    write(ckpt() / "config.json", kCheckpoint);
    test::tiny_llama().save(ckpt() / "model.gguf");
  }

  fs::path ckpt() const { return dir_ / "ckpt"; }
  fs::path engine() const { return dir_ / "engine"; }

  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  static std::string q(const fs::path& p) { return test::shell_quote(p); }

  // Runs `skipsoftmax <args>`; stdout and stderr come back separately.
  ToolRun run(const std::string& args) const { return test::run_tool(args, dir_ / "stderr.txt"); }

  ToolRun export_with(const std::string& flags) const {
    return run("export " + q(ckpt()) + " " + q(engine()) + " " + flags);
  }

  json engine_config() const { return json::parse(read_text_file(engine() / "config.json")); }

  // A failing export: exit code 1 (or CLI11's own for parse errors), the message, no engine.
  void expect_export_fails(const std::string& flags, const std::string& message) const {
    const ToolRun r = export_with(flags);
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\nstderr: " << r.err;
    EXPECT_FALSE(fs::exists(engine())) << flags;
  }
};

// table_cautions' lines for the fixture's deployed tables.
const std::string kPrefillCaution =
    "prefill table row [1024, 2048]: S is not below its bin, so its lengths up to 2048 run dense "
    "and 2049 skips at lambda 0.999512, where nearly every tile below the running maximum is "
    "skipped";
const std::string kDecodeCaution =
    "decode table row [1, 500.5]: S is not below its bin, so its lengths up to 500 run dense and "
    "501 skips at lambda 0.999002, where nearly every tile below the running maximum is skipped";

TEST_F(Cli, ExportWithoutFlagsDeploysTheCheckpointTier) {
  const ToolRun r = export_with("");
  ASSERT_EQ(r.code, 0) << r.err;
  // The fixture's tables keep S at or above a bin (to test the guard): export says so.
  EXPECT_EQ(r.err, "skipsoftmax export: note: " + kPrefillCaution +
                       "\nskipsoftmax export: note: " + kDecodeCaution + "\n");
  EXPECT_NE(r.out.find("wrote "), std::string::npos);
  const json j = engine_config();
  EXPECT_EQ(j.at("checkpoint_dir"), fs::canonical(ckpt()).string());
  EXPECT_EQ(j.at("skip_softmax_prefill_scale_table"), json::parse("[[1024, 2048], [4096, 3000]]"));
  EXPECT_EQ(j.at("skip_softmax_prefill_source"), "checkpoint tier 75%");
  EXPECT_EQ(j.at("skip_softmax_decode_scale_table"), json::parse("[[1, 500.5]]"));
  EXPECT_EQ(j.at("skip_softmax_decode_source"), "checkpoint skip_softmax_decode_scale_table");
  EXPECT_EQ(j.at("model_config"), json::parse(R"({"hidden_size": 4096})"));
}

TEST_F(Cli, ExportFlagsResolvePerPhase) {
  const fs::path table = dir_ / "t.json";
  write(table, "[[8, 4]]");
  const ToolRun r = export_with("--skip-softmax-prefill-scale-table " + q(table) +
                                " --decode-target-sparsity 60%");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = engine_config();
  EXPECT_EQ(j.at("skip_softmax_prefill_scale_table"), json::parse("[[8, 4]]"));
  EXPECT_EQ(j.at("skip_softmax_prefill_source"),
            "flag --skip-softmax-prefill-scale-table " + table.string());
  EXPECT_EQ(j.at("skip_softmax_decode_scale_table"), json::parse("[[64, 10]]"));
  EXPECT_EQ(j.at("skip_softmax_decode_source"),
            "flag --decode-target-sparsity 60% (checkpoint tier 60%)");
}

TEST_F(Cli, ExportNoneAndZeroMakePhasesDense) {
  const ToolRun r = export_with(
      "--skip-softmax-prefill-scale-table none "
      "--skip-softmax-decode-scale-table 0");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = engine_config();
  EXPECT_FALSE(j.contains("skip_softmax_prefill_scale_table"));
  EXPECT_FALSE(j.contains("skip_softmax_decode_scale_table"));
  EXPECT_EQ(j.at("skip_softmax_prefill_source"), "flag --skip-softmax-prefill-scale-table none");
  EXPECT_EQ(j.at("skip_softmax_decode_source"), "flag --skip-softmax-decode-scale-table 0");
}

TEST_F(Cli, ExportFlatThreshold) {
  ASSERT_EQ(export_with("--skip-softmax-decode-threshold 0.02").code, 0);
  const json j = engine_config();
  EXPECT_EQ(j.at("skip_softmax_decode_threshold"), 0.02);
  EXPECT_FALSE(j.contains("skip_softmax_decode_scale_table"));
  EXPECT_EQ(j.at("skip_softmax_prefill_source"), "checkpoint tier 75%");
}

TEST_F(Cli, ExportNotesAnOverriddenFlagOnStderr) {
  const ToolRun r =
      export_with("--skip-softmax-prefill-threshold 0.1 --prefill-target-sparsity 50%");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err,
            "skipsoftmax export: note: --prefill-target-sparsity 50% is overridden by "
            "--skip-softmax-prefill-threshold 0.1\nskipsoftmax export: note: " +
                kDecodeCaution + "\n");
  EXPECT_EQ(engine_config().at("skip_softmax_prefill_threshold"), 0.1);
}

TEST_F(Cli, ExportUnknownTierListsTiers) {
  expect_export_fails("--prefill-target-sparsity 80%",
                      "skipsoftmax export: error: --prefill-target-sparsity 80%: no tier 80% in "
                      "the checkpoint's skip_softmax_prefill_scale_tables; tiers available: 50%, "
                      "75%\n");
}

TEST_F(Cli, ExportMissingCheckpointTier) {
  write(ckpt() / "config.json", R"({"skip_softmax_decode_target_sparsity": "60%"})");
  expect_export_fails("", "checkpoint skip_softmax_decode_target_sparsity: no tier 60%");
}

TEST_F(Cli, ExportBadCheckpointInput) {
  write(ckpt() / "config.json", R"({"skip_softmax_prefill_scale_table": [[1, 2)");
  expect_export_fails("", "config.json: malformed JSON at byte");
  write(ckpt() / "config.json", R"({"skip_softmax_prefill_scale_table": [[8, 1], [4, 1]]})");
  expect_export_fails("",
                      "skip_softmax_prefill_scale_table: scale table row 1 [4, 1]: bins must "
                      "be strictly increasing");
  write(ckpt() / "config.json", R"({"skip_softmax_decode_scale_tables": {"75%": [[8, 0]]}})");
  expect_export_fails("", "skip_softmax_decode_scale_tables: tier \"75%\": scale table row 0");
  fs::remove_all(ckpt());
  expect_export_fails("", "no such checkpoint directory");
}

TEST_F(Cli, ExportBadTableFiles) {
  const fs::path table = dir_ / "t.json";
  const std::string flag = "--skip-softmax-prefill-scale-table " + q(table) + " ";
  expect_export_fails(flag,
                      "--skip-softmax-prefill-scale-table: " + table.string() + ": no such file");
  write(table, "[[8, 1], [8, 2]]");
  expect_export_fails(flag, "bins must be strictly increasing");
  write(table, "[[8, 0]]");
  expect_export_fails(flag, "S must be finite and > 0");
  write(table, "[[8, -1]]");
  expect_export_fails(flag, "S must be finite and > 0");
  write(table, "[[8, 1], [16");
  expect_export_fails(flag, table.string() + ": malformed JSON at byte");
  // A table the kernels would refuse at every launch is refused here, and in the checkpoint.
  std::string rows;
  for (int i = 0; i <= kMaxKernelTableRows; ++i) {
    rows += (i ? ", [" : "[") + std::to_string(4096 + 2048 * i) + ", 100]";
  }
  write(table, "[" + rows + "]");
  expect_export_fails(flag, table.string() + ": 65 rows; the GPU kernels take at most 64");
  write(ckpt() / "config.json", "{\"skip_softmax_decode_scale_table\": [" + rows + "]}");
  expect_export_fails("", "skip_softmax_decode_scale_table: 65 rows; the GPU kernels take at most");
}

TEST_F(Cli, ExportBadFlags) {
  expect_export_fails("--skip-softmax-prefill-threshold 1.5",
                      "--skip-softmax-prefill-threshold: threshold lambda=1.5 is outside [0, 1)");
  expect_export_fails("--skip-softmax-decode-threshold -0.1", "outside [0, 1)");
  expect_export_fails("--skip-softmax-decode-threshold abc", "--skip-softmax-decode-threshold");
  expect_export_fails(
      "--skip-softmax-prefill-scale-table none --skip-softmax-prefill-threshold 0.1", "excludes");
  expect_export_fails("--prefill-target-sparsity 75", "target sparsity \"75\" is not a fraction");
  expect_export_fails("--prefill-sparsity 0.5", "--prefill-sparsity");
  // An empty ENGINE_DIR (a script's unset variable) is refused, not taken as here.
  const ToolRun r = run("export " + q(ckpt()) + " ''");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("ENGINE_DIR: an empty path"), std::string::npos) << r.err;
}

TEST_F(Cli, ExportPinsTheCheckpointsGgufFile) {
  const ToolRun r = export_with("");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string file = fs::canonical(ckpt() / "model.gguf").string();
  EXPECT_NE(r.out.find("weights: " + file + " ("), std::string::npos) << r.out;
  const json j = engine_config();
  EXPECT_EQ(j.at("weights").at("file"), file);
  EXPECT_EQ(j.at("weights").at("bytes"), fs::file_size(ckpt() / "model.gguf"));
  EXPECT_EQ(j.at("architecture").at("name"), "llama");
  EXPECT_EQ(j.at("architecture").at("heads_q"), 2);
}

TEST_F(Cli, ExportWeightsFlags) {
  fs::remove(ckpt() / "model.gguf");
  expect_export_fails("", "no *.gguf model file in the checkpoint directory");
  test::tiny_llama().save(ckpt() / "a.gguf");
  test::tiny_llama(32).save(ckpt() / "b.gguf");
  expect_export_fails("", "several *.gguf files (a.gguf, b.gguf)");
  ToolRun r = export_with("--weights b.gguf");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(engine_config().at("weights").at("file"), fs::canonical(ckpt() / "b.gguf").string());
  r = export_with("--config-only");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("weights: none (--config-only)"), std::string::npos) << r.out;
  EXPECT_FALSE(engine_config().contains("weights"));
  fs::remove_all(engine());
  expect_export_fails("--weights a.gguf --config-only", "--weights excludes --config-only");
  std::ofstream(ckpt() / "c.gguf") << "text";
  expect_export_fails("--weights c.gguf", "c.gguf: not a GGUF file");
}

TEST_F(Cli, FailedExportKeepsThePreviousEngineConfig) {
  ASSERT_EQ(export_with("").code, 0);
  const std::string before = read_text_file(engine() / "config.json");
  EXPECT_EQ(export_with("--prefill-target-sparsity 99%").code, 1);
  EXPECT_EQ(read_text_file(engine() / "config.json"), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(engine()), fs::directory_iterator()), 1);
}

TEST_F(Cli, ExportRefusesToOverwriteTheCheckpoint) {
  const ToolRun r = run("export " + q(ckpt()) + " " + q(ckpt()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is the checkpoint directory"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(read_text_file(ckpt() / "config.json")), json::parse(kCheckpoint));
}

TEST_F(Cli, InspectCheckpointText) {
  const ToolRun r = run("inspect " + q(ckpt()));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string expected = "checkpoint " + fs::canonical(ckpt()).string() +
                               " (what export without flags deploys)\n"
                               "prefill: skip\n"
                               "  source: checkpoint tier 75%\n"
                               "  first skippable length: 2049\n"
                               "  table (seqlen_bin, S):\n"
                               "    1024, 2048.0\n"
                               "    4096, 3000.0\n"
                               "  tiers available: 50% (first skippable length 1024), 75% (first "
                               "skippable length 2049)\n"
                               "decode: skip\n"
                               "  source: checkpoint skip_softmax_decode_scale_table\n"
                               "  first skippable length: 501\n"
                               "  table (seqlen_bin, S):\n"
                               "    1, 500.5\n"
                               "  tiers available: 60% (first skippable length 64)\n"
                               "shape advice: {\"tile_q\":128}\n"
                               "note: " +
                               kPrefillCaution + "\nnote: " + kDecodeCaution + "\n";
  EXPECT_EQ(r.out, expected);
}

TEST_F(Cli, InspectCheckpointJson) {
  const ToolRun r = run("inspect --json " + q(ckpt()));
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("kind"), "checkpoint");
  EXPECT_EQ(j.at("prefill").at("runs"), "skip");
  EXPECT_EQ(j.at("prefill").at("first_skippable_length"), 2049);
  EXPECT_EQ(j.at("prefill").at("source"), "checkpoint tier 75%");
  EXPECT_EQ(j.at("prefill").at("tiers").size(), 2u);
  EXPECT_EQ(j.at("prefill").at("tiers")[0].at("tier"), "50%");
  EXPECT_EQ(j.at("decode").at("scale_table"), json::parse("[[1, 500.5]]"));
  EXPECT_EQ(j.at("shape_advice"), json::parse(R"({"tile_q": 128})"));
}

TEST_F(Cli, InspectDensePhase) {
  write(ckpt() / "config.json", R"({"skip_softmax_decode_scale_table": [[1, 1e300]]})");
  const json j = json::parse(run("inspect --json " + q(ckpt())).out);
  EXPECT_EQ(j.at("prefill").at("runs"), "dense");
  EXPECT_EQ(j.at("prefill").at("source"), "dense (no table)");
  EXPECT_TRUE(j.at("prefill").at("first_skippable_length").is_null());
  EXPECT_EQ(j.at("decode").at("runs"), "dense");  // a table that never skips runs dense
  EXPECT_FALSE(j.contains("shape_advice"));
}

TEST_F(Cli, InspectEngineFollowsEdits) {
  ASSERT_EQ(export_with("--skip-softmax-decode-threshold 0.02").code, 0);
  ToolRun r = run("inspect " + q(engine()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("engine " + fs::canonical(engine()).string() + " (exported from " +
                       fs::canonical(ckpt()).string() + ")\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("weights: " + fs::canonical(ckpt() / "model.gguf").string() + " (llama, "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("decode: skip\n  source: engine config skip_softmax_decode_threshold; "
                       "export recorded: flag --skip-softmax-decode-threshold 0.02\n  first "
                       "skippable length: 1\n  flat lambda: 0.02\n"),
            std::string::npos)
      << r.out;

  json edited = engine_config();
  edited.erase("skip_softmax_prefill_scale_table");
  write(engine() / "config.json", edited.dump());
  const json j = json::parse(run("inspect --json " + q(engine())).out);
  EXPECT_EQ(j.at("kind"), "engine");
  EXPECT_EQ(j.at("checkpoint_dir"), fs::canonical(ckpt()).string());
  EXPECT_EQ(j.at("weights").at("architecture").at("name"), "llama");
  EXPECT_EQ(j.at("prefill").at("runs"), "dense");
  EXPECT_EQ(j.at("decode").at("threshold"), 0.02);

  edited["skip_softmax_prefill_scale_tabel"] = json::parse("[[1, 1]]");
  write(engine() / "config.json", edited.dump());
  r = run("inspect " + q(engine()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("skipsoftmax inspect: error: " + (engine() / "config.json").string() +
                       ": unknown key skip_softmax_prefill_scale_tabel"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(Cli, InspectErrors) {
  ToolRun r = run("inspect " + q(dir_ / "nowhere"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("nowhere: no such checkpoint or engine directory"), std::string::npos)
      << r.err;
  write(ckpt() / "config.json", "{\"hidden_size\": ");
  r = run("inspect " + q(ckpt()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("config.json: malformed JSON at byte"), std::string::npos) << r.err;
  // A file where the directory belongs is named as such.
  r = run("inspect " + q(ckpt() / "config.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("config.json: is a file; give the checkpoint or engine directory"),
            std::string::npos)
      << r.err;
}

// A config.json of 100,000 nested brackets crashed inspect, export and attend --scale-table (the
// parser's recursion ran out of stack); 20,000 levels made export write 800 MB. Now each names the
// file and the depth, and writes nothing.
TEST_F(Cli, DeeplyNestedJsonIsRefusedByName) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  write(ckpt() / "config.json", deep);
  for (const std::string& command :
       {"inspect " + q(ckpt()), "export " + q(ckpt()) + " " + q(engine())}) {
    const ToolRun r = run(command);
    EXPECT_EQ(r.code, 1) << command;
    EXPECT_NE(r.err.find((ckpt() / "config.json").string() +
                         ": JSON nested deeper than 256 levels at byte 261"),
              std::string::npos)
        << command << "\n"
        << r.err;
  }
  EXPECT_FALSE(fs::exists(engine()));
  write(ckpt() / "config.json", kCheckpoint);
  write(dir_ / "table.json", std::string(20000, '[') + std::string(20000, ']'));
  const ToolRun t = export_with("--skip-softmax-prefill-scale-table " + q(dir_ / "table.json"));
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("table.json: JSON nested deeper than 256 levels at byte 256"),
            std::string::npos)
      << t.err;
  EXPECT_FALSE(fs::exists(engine()));
}

// A FIFO where config.json belongs blocked the tool; /dev/zero was read for 512 MB.
TEST_F(Cli, ConfigThatIsNoRegularFileIsRefused) {
  fs::remove(ckpt() / "config.json");
  ASSERT_EQ(mkfifo((ckpt() / "config.json").c_str(), 0600), 0);
  const ToolRun r = run("inspect " + q(ckpt()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("config.json: is not a regular file"), std::string::npos) << r.err;
  fs::remove(ckpt() / "config.json");
  fs::create_symlink("/dev/zero", ckpt() / "config.json");
  const ToolRun z = run("export " + q(ckpt()) + " " + q(engine()));
  EXPECT_EQ(z.code, 1);
  EXPECT_NE(z.err.find("config.json: is not a regular file"), std::string::npos) << z.err;
}

TEST_F(Cli, ScheduleText) {
  const ToolRun r = run("schedule --shift 3 --steps 4 --cutoff 0.8 --cutoff 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "flow-shifted schedule t = s*u / (1 + (s-1)*u), shift s=3, 4 denoiser steps\n"
            "step  t\n"
            "   0  1.000000\n"
            "   1  0.900000\n"
            "   2  0.750000\n"
            "   3  0.500000\n"
            "cutoff D  dense steps  skip-softmax steps\n"
            "0.8       2            2\n"
            "0         0            4\n");
}

TEST_F(Cli, ScheduleJson) {
  const ToolRun r = run("schedule --shift 3 --steps 4 --cutoff 0.95 --cutoff 0.75 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  const std::vector<double> expected_t = {1.0, 0.9, 0.75, 0.5};
  ASSERT_EQ(j.at("timesteps").size(), expected_t.size());
  for (std::size_t i = 0; i < expected_t.size(); ++i) {
    EXPECT_NEAR(j.at("timesteps")[i].get<double>(), expected_t[i], 1e-12);
  }
  EXPECT_EQ(j.at("cutoffs"), json::parse(R"([
      {"disabled_until_timestep": 0.95, "dense_steps": 1, "skip_steps": 3},
      {"disabled_until_timestep": 0.75, "dense_steps": 2, "skip_steps": 2}])"));
}

TEST_F(Cli, ScheduleShowLimitsTheTimesteps) {
  ToolRun r = run("schedule --shift 12 --steps 49 --cutoff 0.9 --show 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("timesteps").size(), 2u);
  EXPECT_EQ(j.at("cutoffs")[0].at("dense_steps"), 28);
  r = run("schedule --shift 12 --steps 49 --cutoff 0.9");
  EXPECT_NE(r.out.find("   9  "), std::string::npos);
  EXPECT_EQ(r.out.find("  10  "), std::string::npos);
  EXPECT_NE(r.out.find("... 39 more"), std::string::npos) << r.out;
}

TEST_F(Cli, UnknownSubcommandIsNamed) {
  const ToolRun r = run("atend --q q.npy");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown subcommand 'atend' (valid: demo, attend, "), std::string::npos)
      << r.err;
}

TEST_F(Cli, ScheduleRejectsBadInput) {
  const std::pair<const char*, const char*> cases[] = {
      {"--shift 0 --steps 4 --cutoff 0.5", "shift s=0 must be finite and > 0"},
      {"--shift -2 --steps 4 --cutoff 0.5", "shift s=-2 must be finite and > 0"},
      {"--shift 3 --steps 0 --cutoff 0.5", "steps N=0 must lie in [1, 1000000]"},
      {"--shift 3 --steps 2000000000 --cutoff 0.5", "steps N=2000000000 must lie in [1, 1000000]"},
      {"--shift 3 --steps 4 --cutoff 1.5", "disabled_until_timestep D=1.5 is outside [0, 1]"},
      {"--shift 3 --steps 4 --cutoff -0.1", "disabled_until_timestep D=-0.1 is outside [0, 1]"},
      {"--shift 3 --steps 4", "--cutoff"},
      {"--shift 3 --steps 4 --cutoff 0.5 --show -1", "--show: must be finite and >= 0, got -1"},
  };
  for (const auto& [args, message] : cases) {
    const ToolRun r = run(std::string("schedule ") + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
}  // namespace skipsoftmax
