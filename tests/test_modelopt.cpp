// ModelOpt's sparse_attention_config: the curve fit, the block as calibration writes it, the block
// as ModelOpt and older exports write it, and export's fallback to it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "modelopt.h"
#include "skipsoftmax/config.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// What ModelOpt 0.46's unified Hugging Face export writes (conversion.py's
// export_sparse_attention_config), beside a group of another algorithm.
constexpr const char* kModelOptBlock = R"J({
  "config_groups": {
    "group_0": {
      "algorithm": "skip_softmax",
      "targets": ["LlamaAttention"],
      "ignore": ["model.layers.0.self_attn"],
      "threshold_scale_factor": {
        "formula": "a * exp(b * target_sparsity)",
        "prefill": {"a": 7.93, "b": 8.61},
        "decode": {"a": 0.12, "b": 9.85}
      },
      "target_sparsity": {"prefill": 0.5, "decode": 0.75}
    },
    "group_1": {"algorithm": "sparse_softmax", "sparsity_n": 2, "sparsity_m": 4}
  },
  "producer": {"name": "modelopt", "version": "0.46.0"}
})J";

TEST(ModelOptFit, RecoversAnExactCurve) {
  const modelopt::Curve truth{40.0, 6.5};
  std::vector<std::pair<double, double>> points;
  for (double t : {0.5, 0.6, 0.75, 0.8}) {
    points.emplace_back(t, truth.scale_factor(t));
    points.emplace_back(t, truth.scale_factor(t));  // two bins of one tier
  }
  const auto fit = modelopt::fit_curve(points);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->curve.a, 40.0, 1e-9);
  EXPECT_NEAR(fit->curve.b, 6.5, 1e-12);
  EXPECT_NEAR(fit->r_squared, 1.0, 1e-12);
  EXPECT_EQ(fit->points, 8);
  // Scattered points: the least-squares line in log S, R^2 below 1.
  const auto noisy =
      modelopt::fit_curve({{0.5, 100.0}, {0.5, 140.0}, {0.75, 900.0}, {0.8, 1300.0}});
  ASSERT_TRUE(noisy);
  EXPECT_GT(noisy->curve.b, 0.0);
  EXPECT_LT(noisy->r_squared, 1.0);
  EXPECT_GT(noisy->r_squared, 0.9);
  // One target gives no slope; a non-positive S no logarithm.
  EXPECT_FALSE(modelopt::fit_curve({{0.75, 100.0}, {0.75, 200.0}}));
  EXPECT_FALSE(modelopt::fit_curve({{0.5, 100.0}}));
  EXPECT_FALSE(modelopt::fit_curve({{0.5, 100.0}, {0.75, 0.0}}));
}

TEST(ModelOptBlock, ReadsWhatModelOptWrites) {
  const modelopt::LlmBlock b = modelopt::read_llm_block(json::parse(kModelOptBlock));
  ASSERT_TRUE(b.curves.prefill && b.curves.decode);
  EXPECT_EQ(b.curves.prefill->a, 7.93);
  EXPECT_EQ(b.curves.decode->b, 9.85);
  EXPECT_EQ(b.targets.prefill, 0.5);
  EXPECT_EQ(b.targets.decode, 0.75);
  EXPECT_EQ(b.ignore, std::vector<std::string>{"model.layers.0.self_attn"});
  ASSERT_EQ(b.notes.size(), 1u);
  EXPECT_NE(b.notes[0].find("group_1 (algorithm \"sparse_softmax\") is not a skip_softmax"),
            std::string::npos);
  // The top-level schema of earlier exports, shared coefficients and one target for both phases.
  const modelopt::LlmBlock old = modelopt::read_llm_block(json::parse(R"J({
      "threshold_scale_factor": {"formula": "a*exp(b*target_sparsity)",
                                 "coefficients": {"a": 2.0, "b": 3.0}},
      "target_sparsity": 0.6})J"));
  EXPECT_EQ(old.curves.decode->a, 2.0);
  EXPECT_EQ(old.targets.prefill, 0.6);
  EXPECT_EQ(old.targets.decode, 0.6);
  // No skip_softmax group: nothing, and a note.
  const modelopt::LlmBlock none = modelopt::read_llm_block(
      json::parse(R"J({"config_groups": {"g": {"algorithm": "nvfp4"}}})J"));
  EXPECT_FALSE(none.curves.prefill || none.curves.decode);
  EXPECT_EQ(none.notes.size(), 2u);
}

TEST(ModelOptBlock, MalformedBlocksAreNamed) {
  const auto read = [](const char* text) { return modelopt::read_llm_block(json::parse(text)); };
  EXPECT_ERROR_HAS(read(R"J({"threshold_scale_factor": {"formula": "a * b ** t",
                                                        "prefill": {"a": 1, "b": 1}}})J"),
                   "sparse_attention_config.threshold_scale_factor.formula: \"a * b ** t\" is not "
                   "supported");
  EXPECT_ERROR_HAS(read(R"J({"config_groups": {"g": {"algorithm": "skip_softmax",
      "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                                 "decode": {"a": -1, "b": 1}}}}})J"),
                   "sparse_attention_config.config_groups.g.threshold_scale_factor.decode.a: must "
                   "be > 0");
  EXPECT_ERROR_HAS(read(R"J({"target_sparsity": {"prefill": 1.5}})J"),
                   "sparse_attention_config.target_sparsity.prefill: must lie in [0, 1]");
  EXPECT_ERROR_HAS(read(R"J({"config_groups": {"a": {"algorithm": "skip_softmax"},
                                              "b": {"algorithm": "skip_softmax"}}})J"),
                   "two skip_softmax groups, a and b");
  EXPECT_ERROR_HAS(read("[]"), "sparse_attention_config: expected an object");
}

TEST(ModelOptBlock, CalibrationWritesTheModelOptSchemaAndReadsItBack) {
  PerPhase<std::optional<modelopt::Curve>> curves;
  curves.prefill = modelopt::Curve{30.0, 7.0};
  curves.decode = modelopt::Curve{5.0, 9.0};
  PerPhase<std::optional<double>> targets;
  targets.prefill = 0.75;
  targets.decode = 0.75;
  const ordered_json block = modelopt::block_json(curves, targets, "0.5.0");
  const ordered_json& group = block.at("config_groups").at("group_0");
  EXPECT_EQ(group.at("algorithm"), "skip_softmax");
  EXPECT_EQ(group.at("threshold_scale_factor").at("formula"), "a * exp(b * target_sparsity)");
  EXPECT_EQ(group.at("threshold_scale_factor").at("prefill").at("a"), 30.0);
  EXPECT_EQ(group.at("target_sparsity").at("decode"), 0.75);
  EXPECT_EQ(block.at("producer").at("name"), "skipsoftmax");
  const modelopt::LlmBlock back = modelopt::read_llm_block(json::parse(block.dump()));
  EXPECT_EQ(back.curves.decode->b, 9.0);
  EXPECT_EQ(back.targets.prefill, 0.75);
  EXPECT_TRUE(back.notes.empty());
}

// Recalibrating one phase into a checkpoint's block: that phase's curve and target change, the
// other phase's, the ignore patterns, the other fields and the other groups stay.
TEST(ModelOptBlock, MergeReplacesOnlyTheCalibratedPhases) {
  PerPhase<std::optional<modelopt::Curve>> curves;
  curves.prefill = modelopt::Curve{30.0, 7.0};
  PerPhase<std::optional<double>> targets;
  targets.prefill = 0.75;
  const ordered_json fresh = modelopt::block_json(curves, targets, "0.5.0");
  const ordered_json existing = ordered_json::parse(kModelOptBlock);
  const ordered_json merged = modelopt::merge_block(existing, fresh, {true, false}, "0.5.0");
  const ordered_json& groups = merged.at("config_groups");
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups.at("group_1").at("algorithm"), "sparse_softmax");
  const ordered_json& g = groups.at("group_0");
  EXPECT_EQ(g.at("threshold_scale_factor").at("prefill").at("a"), 30.0);
  EXPECT_EQ(g.at("threshold_scale_factor").at("decode").at("a"), 0.12);
  EXPECT_EQ(g.at("target_sparsity").at("prefill"), 0.75);
  EXPECT_EQ(g.at("target_sparsity").at("decode"), 0.75);
  EXPECT_EQ(g.at("ignore"), ordered_json::parse(R"(["model.layers.0.self_attn"])"));
  EXPECT_EQ(g.at("targets"), ordered_json::parse(R"(["LlamaAttention"])"));
  EXPECT_EQ(merged.at("producer").at("name"), "skipsoftmax");
  // A calibrated phase without a fit loses its old curve and target.
  const ordered_json dropped = modelopt::merge_block(existing, fresh, {true, true}, "0.5.0")
                                   .at("config_groups")
                                   .at("group_0");
  EXPECT_FALSE(dropped.at("threshold_scale_factor").contains("decode"));
  EXPECT_FALSE(dropped.at("target_sparsity").contains("decode"));
  // The top-level schema with shared coefficients and one target: the untouched phase keeps
  // them, spelled per phase; a block in another formula is replaced.
  const ordered_json old = ordered_json::parse(R"J({"ignore": ["*lm_head*"],
      "threshold_scale_factor": {"formula": "a*exp(b*target_sparsity)",
                                 "coefficients": {"a": 2.0, "b": 3.0}},
      "target_sparsity": 0.6})J");
  const ordered_json from_old =
      modelopt::merge_block(old, fresh, {true, false}, "0.5.0").at("config_groups").at("group_0");
  EXPECT_EQ(from_old.at("threshold_scale_factor").at("decode").at("a"), 2.0);
  EXPECT_FALSE(from_old.at("threshold_scale_factor").contains("coefficients"));
  EXPECT_EQ(from_old.at("target_sparsity").at("decode"), 0.6);
  EXPECT_EQ(from_old.at("ignore"), ordered_json::parse(R"(["*lm_head*"])"));
  const ordered_json other = ordered_json::parse(R"J({"threshold_scale_factor": {
      "formula": "a * t + b", "decode": {"a": 1.0, "b": 2.0}}})J");
  const ordered_json replaced =
      modelopt::merge_block(other, fresh, {true, false}, "0.5.0").at("config_groups").at("group_0");
  EXPECT_FALSE(replaced.at("threshold_scale_factor").contains("decode"));
  EXPECT_EQ(replaced.at("threshold_scale_factor").at("formula"), "a * exp(b * target_sparsity)");
  EXPECT_NO_THROW(modelopt::read_llm_block(json::parse(replaced.dump())));
}

CheckpointConfig checkpoint(const std::string& extra) {
  return parse_checkpoint_config("{\"hidden_size\": 64" + extra + "}", "config.json");
}

TEST(ModelOptExport, APhaseWithoutTablesRunsTheCurveAtItsTarget) {
  const CheckpointConfig c =
      checkpoint(std::string(", \"sparse_attention_config\": ") + kModelOptBlock);
  ASSERT_TRUE(c.modelopt);
  const ExportPlan plan = plan_export(c, {});
  // lambda = S / L with S = a * exp(b * t): the one-row table [[1, S]].
  ASSERT_EQ(plan.phases.prefill.threshold.kind(), Threshold::Kind::kTable);
  const ScaleTableRow row = plan.phases.prefill.threshold.scale_table().rows()[0];
  EXPECT_DOUBLE_EQ(row.scale, 7.93 * std::exp(8.61 * 0.5));
  EXPECT_EQ(row.seqlen_bin, 1);
  EXPECT_NE(plan.phases.prefill.source.find("sparse_attention_config prefill"), std::string::npos)
      << plan.phases.prefill.source;
  EXPECT_DOUBLE_EQ(plan.phases.decode.threshold.lambda_for(32768),
                   0.12 * std::exp(9.85 * 0.75) / 32768);
  // Its ignore patterns and the other group are named, not dropped silently.
  bool ignore_noted = false;
  for (const std::string& n : plan.notes) {
    ignore_noted |= n.find("model.layers.0.self_attn") != std::string::npos;
  }
  EXPECT_TRUE(ignore_noted);
  // A flag's target reads the curve at that target.
  PerPhase<PhaseFlags> flags;
  flags.prefill.target_sparsity = "80%";
  const ExportPlan asked = plan_export(c, flags);
  EXPECT_DOUBLE_EQ(asked.phases.prefill.threshold.scale_table().rows()[0].scale,
                   7.93 * std::exp(8.61 * 0.8));
}

TEST(ModelOptExport, OwnTablesComeFirstAndACurveWithoutTargetStaysDense) {
  const CheckpointConfig both =
      checkpoint(std::string(", \"skip_softmax_prefill_scale_table\": [[4096, 100.0]], "
                             "\"sparse_attention_config\": ") +
                 kModelOptBlock);
  EXPECT_EQ(plan_export(both, {}).phases.prefill.source,
            "checkpoint skip_softmax_prefill_scale_table");
  const CheckpointConfig no_target = checkpoint(R"J(, "sparse_attention_config": {
      "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                                 "prefill": {"a": 2.0, "b": 3.0}}})J");
  const ExportPlan dense = plan_export(no_target, {});
  EXPECT_EQ(dense.phases.prefill.threshold.kind(), Threshold::Kind::kDense);
  ASSERT_FALSE(dense.notes.empty());
  EXPECT_NE(dense.notes[0].find("no target_sparsity"), std::string::npos) << dense.notes[0];
  // A block we cannot read is kept as an error: named in export's notes, thrown only for a phase
  // that would fall back to it; a null block is no block.
  const CheckpointConfig bad =
      checkpoint(R"J(, "sparse_attention_config": {"threshold_scale_factor": 3})J");
  ASSERT_TRUE(bad.modelopt && bad.modelopt->error);
  EXPECT_ERROR_HAS(plan_export(bad, {}),
                   "config.json: sparse_attention_config.threshold_scale_factor: expected");
  const CheckpointConfig bad_with_tables = checkpoint(
      R"J(, "skip_softmax_prefill_scale_table": [[4096, 100.0]],
            "skip_softmax_decode_scale_table": [[4096, 10.0]],
            "sparse_attention_config": {"threshold_scale_factor": 3})J");
  const ExportPlan noted = plan_export(bad_with_tables, {});
  ASSERT_FALSE(noted.notes.empty());
  EXPECT_NE(noted.notes[0].find("sparse_attention_config is not read"), std::string::npos);
  EXPECT_FALSE(checkpoint(R"J(, "sparse_attention_config": null)J").modelopt);
  // Calibration rewrites the block with the skip keys; other keys stay refused.
  const std::string merged = merge_skip_keys(
      "{}", std::string("{\"sparse_attention_config\": ") + kModelOptBlock + "}", "c");
  EXPECT_NE(merged.find("sparse_softmax"), std::string::npos);
  EXPECT_ERROR_HAS(merge_skip_keys("{}", R"J({"hidden_size": 3})J", "c"), "hidden_size does not");
}

}  // namespace
}  // namespace skipsoftmax
