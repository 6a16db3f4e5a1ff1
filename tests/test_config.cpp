// Checkpoint parsing, the export precedence (case by case, per phase), the engine config format
// and its strict loader, and the atomic rewrite of a checkpoint's skip keys.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "checkpoint.h"
#include "file_io.h"
#include "skipsoftmax/config.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every table differs, so a test can tell which one a resolution picked.
constexpr const char* kCheckpoint = R"({
  "hidden_size": 4096,
  "skip_softmax_prefill_scale_table": [[512, 100]],
  "skip_softmax_prefill_scale_tables": {"75%": [[1024, 2048], [4096, 3000]], "50%": [[1024, 900]]},
  "skip_softmax_prefill_target_sparsity": 0.75,
  "skip_softmax_prefill_shape_advice": {"tile_q": 128},
  "skip_softmax_decode_scale_table": [[1, 500.5]],
  "skip_softmax_decode_scale_tables": {"60%": [[64, 10]]},
  "num_attention_heads": 32
})";

const ScaleTable kPrefillDeployed({{512, 100.0}});
const ScaleTable kPrefill50({{1024, 900.0}});
const ScaleTable kPrefill75({{1024, 2048.0}, {4096, 3000.0}});
const ScaleTable kDecodeDeployed({{1, 500.5}});
const ScaleTable kDecode60({{64, 10.0}});
const ScaleTable kFlagTable({{8, 4.0}});

using test::message_of;

// kCheckpoint with some keys replaced or (null) removed.
CheckpointConfig checkpoint_with(const json& changes = json::object()) {
  json j = json::parse(kCheckpoint);
  for (const auto& item : changes.items()) {
    if (item.value().is_null()) {
      j.erase(item.key());
    } else {
      j[item.key()] = item.value();
    }
  }
  return parse_checkpoint_config(j.dump(), "ckpt/config.json");
}

PerPhase<PhaseFlags> prefill_flags(PhaseFlags f) {
  PerPhase<PhaseFlags> flags;
  flags.prefill = std::move(f);
  return flags;
}

TEST(TargetSparsity, ParsesFractionsAndPercents) {
  EXPECT_DOUBLE_EQ(parse_target_sparsity("0.75"), 0.75);
  EXPECT_DOUBLE_EQ(parse_target_sparsity("75%"), 0.75);
  EXPECT_DOUBLE_EQ(parse_target_sparsity("72.5%"), 0.725);
  EXPECT_DOUBLE_EQ(parse_target_sparsity("0.001"), 0.001);
}

TEST(TargetSparsity, RejectsValuesOutsideTheOpenUnitInterval) {
  for (const char* bad :
       {"0", "1", "100%", "0%", "75", "-0.5", "abc", "", "%", "0.75 ", "nan", "75%%"}) {
    EXPECT_THROW(parse_target_sparsity(bad), std::invalid_argument) << bad;
  }
  EXPECT_ERROR_HAS(parse_target_sparsity("75"),
                   "target sparsity \"75\" is not a fraction in (0, 1)");
}

TEST(TargetSparsity, FormatsPercents) {
  EXPECT_EQ(format_percent(0.75), "75%");
  EXPECT_EQ(format_percent(0.725), "72.5%");
  EXPECT_EQ(format_percent(0.5), "50%");
}

TEST(CheckpointConfig, ReadsEveryKey) {
  const CheckpointConfig c = checkpoint_with();
  const CheckpointPhase& p = c.phases.prefill;
  EXPECT_EQ(p.scale_table, kPrefillDeployed);
  ASSERT_EQ(p.tiers.size(), 2u);
  EXPECT_EQ(p.tiers[0].key, "50%");  // sorted by sparsity, not by key order
  EXPECT_DOUBLE_EQ(p.tiers[0].sparsity, 0.5);
  EXPECT_EQ(p.tiers[0].table, kPrefill50);
  EXPECT_EQ(p.tiers[1].table, kPrefill75);
  EXPECT_EQ(p.target_sparsity, 0.75);
  EXPECT_EQ(p.tier_list(), "50%, 75%");
  EXPECT_EQ(c.phases.decode.scale_table, kDecodeDeployed);
  EXPECT_FALSE(c.phases.decode.target_sparsity);
  EXPECT_EQ(c.shape_advice_json, R"({"tile_q":128})");
  EXPECT_TRUE(c.unknown_skip_keys.empty());
  EXPECT_EQ(json::parse(c.model_config_json),
            json::parse(R"({"hidden_size": 4096, "num_attention_heads": 32})"));
}

TEST(CheckpointConfig, ModelConfigKeepsKeyOrder) {
  const CheckpointConfig c = parse_checkpoint_config(R"({"z": 1, "a": 2})", "ctx");
  EXPECT_EQ(c.model_config_json, R"({"z":1,"a":2})");
}

TEST(CheckpointConfig, TargetSparsityMayBeAPercentString) {
  const CheckpointConfig c = checkpoint_with({{"skip_softmax_prefill_target_sparsity", "50%"}});
  EXPECT_EQ(c.phases.prefill.target_sparsity, 0.5);
}

TEST(CheckpointConfig, CollectsUnknownSkipKeys) {
  const CheckpointConfig c = checkpoint_with({{"skip_softmax_prefil_scale_table", json::array()}});
  EXPECT_EQ(c.unknown_skip_keys, std::vector<std::string>{"skip_softmax_prefil_scale_table"});
}

TEST(CheckpointConfig, TiersMatchNumerically) {
  const CheckpointPhase& p = checkpoint_with().phases.prefill;
  ASSERT_NE(p.find_tier(0.75), nullptr);
  EXPECT_EQ(p.find_tier(0.75)->key, "75%");
  EXPECT_EQ(p.find_tier(0.75 + 5e-10)->key, "75%");
  EXPECT_EQ(p.find_tier(0.75 + 1e-8), nullptr);
  EXPECT_EQ(p.find_tier(0.6), nullptr);
  EXPECT_EQ(checkpoint_with().phases.decode.find_tier(0.6)->key, "60%");
}

TEST(CheckpointConfig, RejectsMalformedInputNamingTheKey) {
  EXPECT_ERROR_HAS(parse_checkpoint_config(R"({"a": )", "ckpt/config.json"),
                   "ckpt/config.json: malformed JSON at byte");
  EXPECT_ERROR_HAS(parse_checkpoint_config("[1]", "ctx"), "ctx: expected a JSON object, got array");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_prefill_scale_table", {{8, 1}, {4, 1}}}}),
                   "ckpt/config.json: skip_softmax_prefill_scale_table: scale table row 1");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_decode_scale_table", {{8, 0}}}}),
                   "skip_softmax_decode_scale_table: scale table row 0 [8, 0]: S must be finite");
  EXPECT_ERROR_HAS(
      checkpoint_with({{"skip_softmax_prefill_scale_tables", {{"abc", json::array()}}}}),
      "skip_softmax_prefill_scale_tables: tier \"abc\": target sparsity \"abc\"");
  EXPECT_ERROR_HAS(
      checkpoint_with({{"skip_softmax_prefill_scale_tables", {{"150%", json::array()}}}}),
      "tier \"150%\"");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_prefill_scale_tables", {{"50%", {{16, -1}}}}}}),
                   "skip_softmax_prefill_scale_tables: tier \"50%\": scale table row 0");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_prefill_scale_tables",
                                     {{"75%", json::array()}, {"0.75", json::array()}}}}),
                   "name the same sparsity");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_prefill_scale_tables", {{16, 1}}}}),
                   "skip_softmax_prefill_scale_tables: expected an object of tiers");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_prefill_target_sparsity", 1.5}}),
                   "skip_softmax_prefill_target_sparsity: target sparsity 1.5 is not a fraction");
  EXPECT_ERROR_HAS(checkpoint_with({{"skip_softmax_decode_target_sparsity", true}}),
                   "skip_softmax_decode_target_sparsity: expected a number such as 0.75");
}

TEST(LoadTableFlag, NoneAndZeroAreDense) {
  EXPECT_TRUE(load_table_flag("none").table.empty());
  EXPECT_TRUE(load_table_flag("0").table.empty());
  EXPECT_EQ(load_table_flag("none").spelled, "none");
  EXPECT_ERROR_HAS(load_table_flag("/nonexistent/t.json"), "/nonexistent/t.json: no such file");
}

// Level 1, table flag: wins over everything, deployed as is.
TEST(Precedence, TableFlagDeploysTheFileAsIs) {
  const ExportPlan plan = plan_export(
      checkpoint_with(), prefill_flags({.scale_table = TableFlag{"t.json", kFlagTable}}));
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kFlagTable));
  EXPECT_EQ(plan.phases.prefill.source, "flag --skip-softmax-prefill-scale-table t.json");
  EXPECT_TRUE(plan.notes.empty());
}

TEST(Precedence, TableFlagNoneOrZeroMakesThePhaseDense) {
  for (const char* dense : {"none", "0"}) {
    const ExportPlan plan =
        plan_export(checkpoint_with(), prefill_flags({.scale_table = load_table_flag(dense)}));
    EXPECT_EQ(plan.phases.prefill.threshold, Threshold::dense());
    EXPECT_EQ(plan.phases.prefill.source,
              std::string("flag --skip-softmax-prefill-scale-table ") + dense);
  }
}

// Level 1, threshold flag.
TEST(Precedence, ThresholdFlagDeploysAFlatLambda) {
  const ExportPlan plan = plan_export(checkpoint_with(), prefill_flags({.threshold = 0.01}));
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::flat(0.01));
  EXPECT_EQ(plan.phases.prefill.source, "flag --skip-softmax-prefill-threshold 0.01");
  const ExportPlan zero = plan_export(checkpoint_with(), prefill_flags({.threshold = 0.0}));
  EXPECT_EQ(zero.phases.prefill.threshold, Threshold::dense());
}

TEST(Precedence, ThresholdFlagOutsideUnitIntervalIsAnError) {
  EXPECT_ERROR_HAS(plan_export(checkpoint_with(), prefill_flags({.threshold = 1.0})),
                   "--skip-softmax-prefill-threshold: threshold lambda=1 is outside [0, 1)");
  EXPECT_THROW(plan_export(checkpoint_with(), prefill_flags({.threshold = -0.5})),
               std::invalid_argument);
}

TEST(Precedence, TableAndThresholdFlagsAreExclusive) {
  EXPECT_ERROR_HAS(
      plan_export(checkpoint_with(), prefill_flags({.scale_table = TableFlag{"t.json", kFlagTable},
                                                    .threshold = 0.1})),
      "--skip-softmax-prefill-scale-table and --skip-softmax-prefill-threshold are exclusive");
}

TEST(Precedence, LevelOneOverridesATargetSparsityFlagWithANote) {
  const ExportPlan plan = plan_export(
      checkpoint_with(),
      prefill_flags({.scale_table = TableFlag{"t.json", kFlagTable}, .target_sparsity = "50%"}));
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kFlagTable));
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_EQ(plan.notes[0],
            "--prefill-target-sparsity 50% is overridden by --skip-softmax-prefill-scale-table "
            "t.json");
}

TEST(Precedence, OverriddenTargetSparsityMustStillParse) {
  EXPECT_ERROR_HAS(
      plan_export(checkpoint_with(), prefill_flags({.threshold = 0.1, .target_sparsity = "7.5"})),
      "--prefill-target-sparsity: target sparsity \"7.5\"");
}

// Level 2.
TEST(Precedence, TargetSparsityFlagPicksTheTierNumerically) {
  for (const char* spelled : {"50%", "0.5", "50.0%", "0.5000000001"}) {
    const ExportPlan plan =
        plan_export(checkpoint_with(), prefill_flags({.target_sparsity = spelled}));
    EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kPrefill50)) << spelled;
    EXPECT_EQ(plan.phases.prefill.source,
              std::string("flag --prefill-target-sparsity ") + spelled + " (checkpoint tier 50%)");
  }
}

TEST(Precedence, UnknownTierListsTheTiersAvailable) {
  EXPECT_ERROR_HAS(plan_export(checkpoint_with(), prefill_flags({.target_sparsity = "80%"})),
                   "--prefill-target-sparsity 80%: no tier 80% in the checkpoint's "
                   "skip_softmax_prefill_scale_tables; tiers available: 50%, 75%");
  EXPECT_ERROR_HAS(plan_export(checkpoint_with(), prefill_flags({.target_sparsity = "0.501"})),
                   "no tier 50.1%");
  PerPhase<PhaseFlags> decode;
  decode.decode.target_sparsity = "75%";
  EXPECT_ERROR_HAS(plan_export(checkpoint_with(), decode), "tiers available: 60%");
  EXPECT_ERROR_HAS(
      plan_export(checkpoint_with({{"skip_softmax_decode_scale_tables", nullptr}}), decode),
      "tiers available: none");
}

TEST(Precedence, MalformedTargetSparsityFlagIsAnError) {
  EXPECT_ERROR_HAS(plan_export(checkpoint_with(), prefill_flags({.target_sparsity = "high"})),
                   "--prefill-target-sparsity: target sparsity \"high\" is not a fraction");
}

// Level 3.
TEST(Precedence, CheckpointTargetSparsityTierComesFirst) {
  const ExportPlan plan = plan_export(checkpoint_with(), {});
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kPrefill75));
  EXPECT_EQ(plan.phases.prefill.source, "checkpoint tier 75%");
}

TEST(Precedence, CheckpointTargetSparsityWithoutItsTierIsAnError) {
  EXPECT_ERROR_HAS(
      plan_export(checkpoint_with({{"skip_softmax_prefill_target_sparsity", 0.6}}), {}),
      "checkpoint skip_softmax_prefill_target_sparsity: no tier 60% in the "
      "checkpoint's skip_softmax_prefill_scale_tables; tiers available: 50%, 75%");
  EXPECT_ERROR_HAS(plan_export(checkpoint_with({{"skip_softmax_decode_target_sparsity", 0.5}}), {}),
                   "checkpoint skip_softmax_decode_target_sparsity: no tier 50%");
}

TEST(Precedence, CheckpointScaleTableWithoutTarget) {
  const ExportPlan plan =
      plan_export(checkpoint_with({{"skip_softmax_prefill_target_sparsity", nullptr}}), {});
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kPrefillDeployed));
  EXPECT_EQ(plan.phases.prefill.source, "checkpoint skip_softmax_prefill_scale_table");
}

TEST(Precedence, NothingAnywhereIsDense) {
  const ExportPlan plan = plan_export(parse_checkpoint_config(R"({"hidden_size": 8})", "c"), {});
  for (Phase phase : kPhases) {
    EXPECT_EQ(plan.phases[phase].threshold, Threshold::dense());
    EXPECT_EQ(plan.phases[phase].source, "dense (no table)");
  }
}

TEST(Precedence, TargetSparsityFlagBeatsTheCheckpointTarget) {
  const ExportPlan plan = plan_export(checkpoint_with(), prefill_flags({.target_sparsity = "0.5"}));
  EXPECT_EQ(plan.phases.prefill.threshold, Threshold::table(kPrefill50));
  EXPECT_TRUE(plan.notes.empty());  // the checkpoint is not a flag: nothing to note
}

TEST(Precedence, PhasesResolveIndependently) {
  PerPhase<PhaseFlags> flags;
  flags.decode.target_sparsity = "60%";
  const ExportPlan a = plan_export(checkpoint_with(), flags);
  EXPECT_EQ(a.phases.prefill.threshold, Threshold::table(kPrefill75));  // level 3
  EXPECT_EQ(a.phases.decode.threshold, Threshold::table(kDecode60));    // level 2

  flags = prefill_flags({.scale_table = load_table_flag("none")});
  const ExportPlan b = plan_export(checkpoint_with(), flags);
  EXPECT_EQ(b.phases.prefill.threshold, Threshold::dense());                // level 1
  EXPECT_EQ(b.phases.decode.threshold, Threshold::table(kDecodeDeployed));  // level 3
  EXPECT_EQ(b.phases.decode.source, "checkpoint skip_softmax_decode_scale_table");

  flags.decode.threshold = 0.02;
  const ExportPlan c = plan_export(checkpoint_with(), flags);
  EXPECT_EQ(c.phases.prefill.threshold, Threshold::dense());
  EXPECT_EQ(c.phases.decode.threshold, Threshold::flat(0.02));
}

TEST(Precedence, UnknownCheckpointSkipKeysAreNoted) {
  const ExportPlan plan = plan_export(checkpoint_with({{"skip_softmax_calibration", 1}}), {});
  EXPECT_EQ(plan.notes, std::vector<std::string>{
                            "checkpoint key skip_softmax_calibration is not read by export"});
}

TEST(EngineConfig, HoldsTheResolvedPhasesAndTheModelConfig) {
  PerPhase<PhaseFlags> flags;
  flags.decode.threshold = 0.02;
  const CheckpointConfig checkpoint = checkpoint_with();
  const ExportPlan plan = plan_export(checkpoint, flags);
  const json j = json::parse(engine_config_json("/abs/ckpt", checkpoint, plan));
  EXPECT_EQ(j.at("checkpoint_dir"), "/abs/ckpt");
  EXPECT_EQ(j.at("skip_softmax_prefill_scale_table"), json::parse("[[1024, 2048], [4096, 3000]]"));
  EXPECT_EQ(j.at("skip_softmax_prefill_source"), "checkpoint tier 75%");
  EXPECT_EQ(j.at("skip_softmax_decode_threshold"), 0.02);
  EXPECT_EQ(j.at("skip_softmax_decode_source"), "flag --skip-softmax-decode-threshold 0.02");
  EXPECT_FALSE(j.contains("skip_softmax_decode_scale_table"));
  EXPECT_EQ(j.at("model_config"),
            json::parse(R"({"hidden_size": 4096, "num_attention_heads": 32})"));
  EXPECT_EQ(j.size(), 6u);
}

TEST(TableCautions, NameRowsWhoseSIsNotBelowTheirBin) {
  PerPhase<ResolvedPhase> phases;
  // Calibrated shape: S below every bin, no caution.
  phases.prefill.threshold = Threshold::table(ScaleTable({{4096, 1000.0}, {6144, 1500.0}}));
  EXPECT_TRUE(table_cautions(phases).empty());
  // Row 0 runs dense up to 2048, then skips at 2048 / 2049; row 1's S lies past its row's end.
  phases.decode.threshold =
      Threshold::table(ScaleTable({{1024, 2048.0}, {4096, 9000.0}, {8192, 10.0}}));
  const std::vector<std::string> cautions = table_cautions(phases);
  ASSERT_EQ(cautions.size(), 1u);
  EXPECT_NE(cautions[0].find("decode table row [1024, 2048]: S is not below its bin, so its "
                             "lengths up to 2048 run dense and 2049 skips at lambda 0.9995"),
            std::string::npos)
      << cautions[0];
}

TEST(EngineConfig, DensePhaseHasOnlyItsSource) {
  const CheckpointConfig checkpoint = parse_checkpoint_config("{}", "c");
  const json j = json::parse(engine_config_json("/abs", checkpoint, plan_export(checkpoint, {})));
  EXPECT_EQ(j, json::parse(R"j({"checkpoint_dir": "/abs", "model_config": {},
                                "skip_softmax_prefill_source": "dense (no table)",
                                "skip_softmax_decode_source": "dense (no table)"})j"));
}

TEST(EngineConfig, LoaderReadsBackWhatExportWrote) {
  PerPhase<PhaseFlags> flags;
  flags.decode.threshold = 0.02;
  const CheckpointConfig checkpoint = checkpoint_with();
  const ExportPlan plan = plan_export(checkpoint, flags);
  const EngineConfig e =
      parse_engine_config(engine_config_json("/abs/ckpt", checkpoint, plan), "e");
  EXPECT_EQ(e.checkpoint_dir, fs::path("/abs/ckpt"));
  EXPECT_EQ(json::parse(e.model_config_json), json::parse(checkpoint.model_config_json));
  for (Phase phase : kPhases) EXPECT_EQ(e.phases[phase].threshold, plan.phases[phase].threshold);
  EXPECT_EQ(e.phases.prefill.source,
            "engine config skip_softmax_prefill_scale_table; export recorded: checkpoint tier 75%");
  EXPECT_EQ(e.phases.decode.source,
            "engine config skip_softmax_decode_threshold; export recorded: flag "
            "--skip-softmax-decode-threshold 0.02");
}

TEST(EngineConfig, RetargetByEditingKeys) {
  json j = {{"checkpoint_dir", "/c"},
            {"skip_softmax_prefill_scale_table", {{1024, 2048}}},
            {"skip_softmax_prefill_source", "checkpoint tier 75%"},
            {"skip_softmax_decode_threshold", 0.05}};
  j["skip_softmax_prefill_scale_table"] = {{16, 4}};  // edited table
  EngineConfig e = parse_engine_config(j.dump(), "e");
  EXPECT_EQ(e.phases.prefill.threshold, Threshold::table(ScaleTable({{16, 4.0}})));
  EXPECT_EQ(e.phases.decode.threshold, Threshold::flat(0.05));

  j.erase("skip_softmax_prefill_scale_table");  // removed: prefill turns dense
  j["skip_softmax_decode_threshold"] = 0.1;
  e = parse_engine_config(j.dump(), "e");
  EXPECT_EQ(e.phases.prefill.threshold, Threshold::dense());
  EXPECT_EQ(e.phases.prefill.source,
            "dense: the engine config has no skip_softmax_prefill_scale_table or "
            "skip_softmax_prefill_threshold; export recorded: checkpoint tier 75%");
  EXPECT_EQ(e.phases.decode.threshold, Threshold::flat(0.1));

  j.erase("skip_softmax_decode_threshold");
  j["skip_softmax_decode_scale_table"] = {{64, 10}};  // a table instead of a flat lambda
  e = parse_engine_config(j.dump(), "e");
  EXPECT_EQ(e.phases.decode.threshold, Threshold::table(ScaleTable({{64, 10.0}})));
  EXPECT_EQ(e.model_config_json, "{}");
}

TEST(EngineConfig, LoaderIsStrict) {
  const json base = {{"checkpoint_dir", "/c"}, {"max_batch_size", 8}};  // non-skip keys are fine
  EXPECT_NO_THROW(parse_engine_config(base.dump(), "e"));
  const auto with = [&](const char* key, const json& value) {
    json j = base;
    j[key] = value;
    return j.dump();
  };
  EXPECT_ERROR_HAS(
      parse_engine_config(with("skip_softmax_prefill_scale_tabel", {{1, 1}}), "e/config.json"),
      "e/config.json: unknown key skip_softmax_prefill_scale_tabel");
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_decode_target_sparsity", 0.5), "e"),
                   "unknown key skip_softmax_decode_target_sparsity");
  json both = base;
  both["skip_softmax_prefill_scale_table"] = {{1, 1}};
  both["skip_softmax_prefill_threshold"] = 0.1;
  EXPECT_ERROR_HAS(
      parse_engine_config(both.dump(), "e"),
      "e: both skip_softmax_prefill_scale_table and skip_softmax_prefill_threshold are "
      "set; keep one");
  EXPECT_ERROR_HAS(
      parse_engine_config(with("skip_softmax_decode_scale_table", {{4, 1}, {2, 1}}), "e"),
      "e: skip_softmax_decode_scale_table: scale table row 1");
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_decode_scale_table", "t.json"), "e"),
                   "e: skip_softmax_decode_scale_table: a scale table is an array");
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_prefill_threshold", 1.5), "e"),
                   "e: skip_softmax_prefill_threshold: threshold lambda=1.5 is outside [0, 1)");
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_prefill_threshold", "0.1"), "e"),
                   "e: skip_softmax_prefill_threshold: expected a number in [0, 1), got string");
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_prefill_source", 3), "e"),
                   "e: skip_softmax_prefill_source: expected a string");
  EXPECT_ERROR_HAS(parse_engine_config(with("model_config", 3), "e"),
                   "e: model_config: expected an object");
  EXPECT_ERROR_HAS(parse_engine_config(R"({"skip_softmax_prefill_threshold": 0.1})", "e"),
                   "e: checkpoint_dir must be a string");
  EXPECT_ERROR_HAS(parse_engine_config(R"({"checkpoint_dir": "/c", )", "e"),
                   "e: malformed JSON at byte");
  // A table the kernels would refuse at every launch is refused here.
  json rows = json::array();
  for (int i = 0; i <= kMaxKernelTableRows; ++i) rows.push_back({4096 + 2048 * i, 1000});
  EXPECT_ERROR_HAS(parse_engine_config(with("skip_softmax_decode_scale_table", rows), "e"),
                   "e: skip_softmax_decode_scale_table: 65 rows; the GPU kernels take at most 64");
  rows.erase(rows.end() - 1);
  EXPECT_NO_THROW(parse_engine_config(with("skip_softmax_decode_scale_table", rows), "e"));
}

TEST(MergeSkipKeys, KeepsOtherKeysAndTheirOrder) {
  const std::string merged = merge_skip_keys(
      R"({"z": 1, "skip_softmax_prefill_target_sparsity": 0.5, "a": {"b": [1, 2]}})",
      R"({"skip_softmax_prefill_target_sparsity": null,
          "skip_softmax_decode_scale_table": [[16, 4]]})",
      "c");
  EXPECT_EQ(merged, R"({
  "z": 1,
  "a": {
    "b": [
      1,
      2
    ]
  },
  "skip_softmax_decode_scale_table": [
    [
      16,
      4
    ]
  ]
}
)");
}

TEST(MergeSkipKeys, RefusesNonSkipKeysAndInvalidResults) {
  EXPECT_ERROR_HAS(merge_skip_keys("{}", R"({"hidden_size": 1})", "c"),
                   "hidden_size does not start with skip_softmax_");
  EXPECT_ERROR_HAS(merge_skip_keys("{}", R"({"skip_softmax_prefill_scale_table": [[0, 1]]})", "c"),
                   "c: skip_softmax_prefill_scale_table: ");
  EXPECT_ERROR_HAS(merge_skip_keys("{}", "[]", "c"), "skip key updates: expected a JSON object");
  EXPECT_ERROR_HAS(merge_skip_keys("{", "{}", "c"), "c: malformed JSON");
}

class TempDir : public test::TempDirTest {
 protected:
  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
};

using CheckpointFiles = TempDir;

TEST_F(CheckpointFiles, UpdateRewritesTheFileAndFailureLeavesItUntouched) {
  const fs::path config = dir_ / "ckpt" / "config.json";
  write(config, R"({"hidden_size": 8, "skip_softmax_prefill_target_sparsity": 0.5})");
  update_checkpoint_skip_keys(dir_ / "ckpt", R"({"skip_softmax_prefill_target_sparsity": 0.75})");
  EXPECT_EQ(json::parse(read_text_file(config)),
            json::parse(R"({"hidden_size": 8, "skip_softmax_prefill_target_sparsity": 0.75})"));
  const std::string before = read_text_file(config);
  EXPECT_THROW(
      update_checkpoint_skip_keys(dir_ / "ckpt", R"({"skip_softmax_prefill_target_sparsity": 2})"),
      std::invalid_argument);
  EXPECT_EQ(read_text_file(config), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "ckpt"), fs::directory_iterator()), 1);
}

TEST_F(CheckpointFiles, ExportWritesTheEngineConfigCreatingTheDirectory) {
  write(dir_ / "ckpt" / "config.json", kCheckpoint);
  test::tiny_llama().save(dir_ / "ckpt" / "model.gguf");
  const fs::path engine = dir_ / "a" / "b" / "engine";
  export_engine(dir_ / "ckpt", engine, {});
  const EngineConfig e = load_engine_config(engine);
  EXPECT_EQ(e.checkpoint_dir, fs::canonical(dir_ / "ckpt"));
  EXPECT_EQ(e.phases.prefill.threshold, Threshold::table(kPrefill75));
  EXPECT_TRUE(is_engine_dir(engine));
  EXPECT_FALSE(is_engine_dir(dir_ / "ckpt"));
}

TEST_F(CheckpointFiles, ExportErrorsWriteNothing) {
  write(dir_ / "ckpt" / "config.json", kCheckpoint);
  test::tiny_llama().save(dir_ / "ckpt" / "model.gguf");
  const fs::path engine = dir_ / "engine";
  EXPECT_ERROR_HAS(export_engine(dir_ / "missing", engine, {}), "no such checkpoint directory");
  EXPECT_ERROR_HAS(export_engine(dir_ / "ckpt", engine, prefill_flags({.target_sparsity = "99%"})),
                   "tiers available: 50%, 75%");
  EXPECT_FALSE(fs::exists(engine));
  const std::string before = read_text_file(dir_ / "ckpt" / "config.json");
  EXPECT_ERROR_HAS(export_engine(dir_ / "ckpt", dir_ / "ckpt" / ".", {}),
                   "is the checkpoint directory");
  EXPECT_EQ(read_text_file(dir_ / "ckpt" / "config.json"), before);
}

TEST_F(CheckpointFiles, LoadersNameMissingFiles) {
  fs::create_directories(dir_ / "empty");
  EXPECT_ERROR_HAS(load_engine_config(dir_ / "nowhere"), "no such engine directory");
  EXPECT_ERROR_HAS(load_checkpoint_config(dir_ / "empty"), "config.json: no such file");
  EXPECT_ERROR_HAS(is_engine_dir(dir_ / "empty"), "config.json: no such file");
}

}  // namespace
}  // namespace skipsoftmax
