// Diffusion sparse_attention_config: both block schemas, the formula check, the request rules,
// ignore patterns on full and relative names, and the timestep gate.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "skipsoftmax/diffusion.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

// a = 1000, b = 5: F(0.5) = 1000 * e^2.5.
constexpr double kFactorAtHalf = 12182.493960703473;

constexpr const char* kTopLevel = R"j({
  "threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
                             "coefficients": {"a": 1000.0, "b": 5.0}},
  "ignore": ["blocks.0.attn1", "*.attn2", "transformer.blocks.5.*"]
})j";

constexpr const char* kGroups = R"j({
  "config_groups": {
    "group_0": {"algorithm": "skip_softmax",
                "threshold_scale_factor": {"formula": "a*exp(b*target_sparsity)",
                                           "prefill": {"a": 1000.0, "b": 5.0}},
                "ignore": ["blocks.0.attn1"],
                "target_sparsity": 0.5, "disabled_until_timestep": 0.9,
                "targets": ["*attn*"]},
    "group_1": {"algorithm": "nvfp4"}
  }
})j";

using test::message_of;

DiffusionRequest sparsity(double s, double d = 0.0) { return {{}, s, d}; }
DiffusionRequest lambda(double l, double d = 0.0) { return {l, {}, d}; }

DiffusionSkipConfig resolve(const std::string& block, const DiffusionRequest& request) {
  return resolve_diffusion_config(block, request, "transformer");
}

// A block with `formula` in the top-level schema.
std::string with_formula(const std::string& formula) {
  return R"({"threshold_scale_factor": {"formula": ")" + formula +
         R"(", "coefficients": {"a": 1000, "b": 5}}})";
}

TEST(DiffusionConfig, TopLevelSchemaTargetSparsity) {
  DiffusionSkipConfig c = resolve(kTopLevel, sparsity(0.5));
  EXPECT_NEAR(c.lambda_for("transformer.blocks.1.attn1", 100000, std::nullopt),
              kFactorAtHalf / 100000, 1e-15);
  EXPECT_NEAR(c.lambda_for("transformer.blocks.1.attn1", 20000, std::nullopt),
              kFactorAtHalf / 20000, 1e-15);
  EXPECT_TRUE(c.notes().empty());
}

TEST(DiffusionConfig, GroupSchemaWithPrefillCoefficients) {
  DiffusionSkipConfig c = resolve(kGroups, sparsity(0.0));
  // s = 0: F = a.
  EXPECT_DOUBLE_EQ(c.lambda_for("blocks.1.attn1", 4000, std::nullopt), 1000.0 / 4000);
  EXPECT_EQ(c.ignore(), std::vector<std::string>{"blocks.0.attn1"});
}

TEST(DiffusionConfig, ScaleFactorAtOrAboveLengthIsDense) {
  DiffusionSkipConfig c = resolve(kTopLevel, sparsity(0.5));  // F = 12182.49...
  EXPECT_EQ(c.lambda_for("m", 12182, std::nullopt), 0.0);
  EXPECT_GT(c.lambda_for("m", 12183, std::nullopt), 0.0);
  EXPECT_EQ(c.threshold().first_skippable_length(), 12183);
}

TEST(DiffusionConfig, FormulaIsWhitespaceInsensitive) {
  for (const char* ok : {"a*exp(b*target_sparsity)", "  a * exp( b * target_sparsity ) "}) {
    EXPECT_NO_THROW(resolve(with_formula(ok), sparsity(0.5))) << ok;
  }
}

TEST(DiffusionConfig, RejectsOtherFormulas) {
  for (const char* bad : {"a * exp(-b * target_sparsity)", "a * b", "exp(b * target_sparsity)",
                          "a * exp(b * target_sparsity) + 1", "A * EXP(B * TARGET_SPARSITY)"}) {
    EXPECT_ERROR_HAS(
        resolve(with_formula(bad), lambda(0.1)),
        "threshold_scale_factor.formula: \"" + std::string(bad) + "\" is not supported");
  }
  EXPECT_ERROR_HAS(
      resolve(R"({"threshold_scale_factor": {"coefficients": {"a": 1, "b": 1}}})", lambda(0.1)),
      "sparse_attention_config.threshold_scale_factor.formula: missing");
}

TEST(DiffusionConfig, RejectsMalformedCoefficients) {
  const auto block = [](const std::string& inner) {
    return R"j({"threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)", )j" + inner +
           "}}";
  };
  EXPECT_ERROR_HAS(
      resolve(block(R"("coefficients": {"a": 1, "b": 1}, "prefill": {"a": 1, "b": 1})"),
              sparsity(0.5)),
      "expected exactly one of coefficients and prefill");
  EXPECT_ERROR_HAS(resolve(block(R"("other": 1)"), sparsity(0.5)),
                   "expected exactly one of coefficients and prefill");
  EXPECT_ERROR_HAS(resolve(block(R"("coefficients": {"a": 1})"), sparsity(0.5)),
                   "threshold_scale_factor.coefficients.b: missing or not a number");
  EXPECT_ERROR_HAS(resolve(block(R"("coefficients": {"a": -1, "b": 1})"), sparsity(0.5)),
                   "threshold_scale_factor.coefficients.a: must be > 0");
  EXPECT_ERROR_HAS(resolve(block(R"("prefill": [1, 2])"), sparsity(0.5)),
                   "threshold_scale_factor.prefill: expected {\"a\": ..., \"b\": ...}");
  EXPECT_ERROR_HAS(resolve(R"({"threshold_scale_factor": 5000})", sparsity(0.5)),
                   "sparse_attention_config.threshold_scale_factor: expected {\"formula\"");
}

TEST(DiffusionConfig, DecodeCoefficientsAreNotedNotRead) {
  const std::string block =
      R"j({"threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
      "prefill": {"a": 1000, "b": 5}, "decode": {"a": 1, "b": 1}}})j";
  const DiffusionSkipConfig c = resolve(block, sparsity(0.5));
  ASSERT_EQ(c.notes().size(), 1u);
  EXPECT_EQ(
      c.notes()[0],
      "sparse_attention_config.threshold_scale_factor.decode is not read: diffusion attention "
      "has no decode phase");
}

TEST(DiffusionConfig, ThresholdAndTargetSparsityAreExclusive) {
  EXPECT_ERROR_HAS(resolve(kTopLevel, {0.1, 0.5, 0.0}),
                   "the request sets both threshold and target_sparsity");
}

TEST(DiffusionConfig, TargetSparsityWithoutCalibrationPointsToThreshold) {
  for (const std::string& block : {std::string(), std::string(R"({"ignore": ["x"]})")}) {
    EXPECT_ERROR_HAS(resolve(block, sparsity(0.5)),
                     "this checkpoint has none; set threshold (lambda in [0, 1)) instead");
  }
}

TEST(DiffusionConfig, ThresholdNeedsNoCalibration) {
  DiffusionSkipConfig c = resolve("", lambda(0.05));
  EXPECT_EQ(c.lambda_for("any", 10, std::nullopt), 0.05);
  EXPECT_EQ(c.lambda_for("any", 1000000, std::nullopt), 0.05);
  EXPECT_EQ(c.threshold(), Threshold::flat(0.05));
}

TEST(DiffusionConfig, RequestRanges) {
  EXPECT_ERROR_HAS(resolve("", lambda(1.0)), "threshold: threshold lambda=1 is outside [0, 1)");
  EXPECT_ERROR_HAS(resolve(kTopLevel, sparsity(1.5)), "target_sparsity 1.5 is outside [0, 1]");
  EXPECT_ERROR_HAS(resolve("", lambda(0.1, 1.5)),
                   "disabled_until_timestep D=1.5 is outside [0, 1]");
  DiffusionSkipConfig zero = resolve("", lambda(0.0));
  EXPECT_EQ(zero.lambda_for("m", 1000, std::nullopt), 0.0);
}

TEST(DiffusionConfig, NoRequestIsDense) {
  DiffusionSkipConfig c = resolve(kTopLevel, {});
  EXPECT_EQ(c.lambda_for("blocks.1.attn1", 1 << 20, std::nullopt), 0.0);
  EXPECT_TRUE(c.threshold().never_skips());
}

TEST(DiffusionConfig, IgnoreMatchesFullAndRelativeNames) {
  DiffusionSkipConfig c = resolve(kTopLevel, lambda(0.1));
  EXPECT_TRUE(c.is_ignored("blocks.0.attn1"));              // relative name as given
  EXPECT_TRUE(c.is_ignored("transformer.blocks.0.attn1"));  // prefix stripped
  EXPECT_TRUE(c.is_ignored("transformer.blocks.7.attn2"));  // wildcard
  EXPECT_TRUE(c.is_ignored("transformer.blocks.5.attn1"));  // full-name pattern
  EXPECT_FALSE(c.is_ignored("blocks.5.attn1"));             // the full pattern needs the prefix
  EXPECT_FALSE(c.is_ignored("transformer.blocks.1.attn1"));
  EXPECT_FALSE(c.is_ignored("transformer_2.blocks.0.attn1"));  // another component's prefix
  EXPECT_FALSE(c.is_ignored("transformer.blocks.0.attn10"));   // patterns match whole names
  EXPECT_EQ(c.lambda_for("transformer.blocks.0.attn1", 100000, std::nullopt), 0.0);
  EXPECT_EQ(c.lambda_for("transformer.blocks.1.attn1", 100000, std::nullopt), 0.1);
}

TEST(DiffusionConfig, IgnorePatternsUseFnmatchClasses) {
  DiffusionSkipConfig c = resolve(R"({"ignore": ["blocks.[01].attn?"]})", lambda(0.1));
  EXPECT_TRUE(c.is_ignored("transformer.blocks.1.attn2"));
  EXPECT_FALSE(c.is_ignored("transformer.blocks.2.attn2"));
}

TEST(DiffusionConfig, UnreadBlockKeysAreNoted) {
  const DiffusionSkipConfig c = resolve(kGroups, lambda(0.1));
  const std::vector<std::string> expected = {
      "sparse_attention_config.config_groups.group_1 (algorithm \"nvfp4\") is not a skip_softmax "
      "group and is not read",
      "sparse_attention_config.config_groups.group_0.target_sparsity = 0.5 is not read: the "
      "request supplies target_sparsity",
      "sparse_attention_config.config_groups.group_0.disabled_until_timestep = 0.9 is not read: "
      "the "
      "request supplies disabled_until_timestep",
      "sparse_attention_config.config_groups.group_0.targets is not read: every attention module "
      "that no ignore pattern matches may skip"};
  EXPECT_EQ(c.notes(), expected);
  const DiffusionSkipConfig root = resolve(R"({"config_groups": {}, "target_sparsity": 0.4})", {});
  EXPECT_EQ(root.notes()[0],
            "sparse_attention_config.target_sparsity = 0.4 is not read: the request supplies "
            "target_sparsity");
  // The checkpoint's disabled_until_timestep did not gate anything: the request's D = 0 holds.
  EXPECT_EQ(c.gate().disabled_until_timestep(), 0.0);
}

TEST(DiffusionConfig, GroupSchemaErrors) {
  EXPECT_ERROR_HAS(resolve(R"({"config_groups": {"a": {"algorithm": "skip_softmax"},
                                                  "b": {"algorithm": "skip_softmax"}}})",
                           lambda(0.1)),
                   "sparse_attention_config.config_groups: two skip_softmax groups, a and b");
  EXPECT_ERROR_HAS(resolve(R"({"config_groups": [1]})", lambda(0.1)),
                   "sparse_attention_config.config_groups: expected an object of groups");
  EXPECT_ERROR_HAS(resolve(R"({"config_groups": {"g": {"algorithm": "skip_softmax",
                                                       "ignore": "blocks.0"}}})",
                           lambda(0.1)),
                   "sparse_attention_config.config_groups.g.ignore: expected an array");
  EXPECT_ERROR_HAS(resolve(R"({"config_groups": {}, "ignore": ["blocks.0.*"]})", lambda(0.1)),
                   "sparse_attention_config: ignore beside config_groups mixes the two schemas");
  const DiffusionSkipConfig none = resolve(R"({"config_groups": {}})", lambda(0.1));
  EXPECT_EQ(none.notes(), std::vector<std::string>{
                              "sparse_attention_config.config_groups has no skip_softmax group"});
  EXPECT_ERROR_HAS(resolve(R"({"config_groups": {}})", sparsity(0.5)), "set threshold");
}

TEST(DiffusionConfig, MalformedBlockJson) {
  EXPECT_ERROR_HAS(resolve(R"({"ignore": [)", lambda(0.1)),
                   "sparse_attention_config: malformed JSON at byte");
  EXPECT_ERROR_HAS(resolve("[]", lambda(0.1)), "sparse_attention_config: expected an object");
}

TEST(TimestepGate, ZeroIsTheSentinelAndNeverReadsTheTimestep) {
  std::vector<std::string> warnings;
  TimestepGate gate(0.0, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_TRUE(gate.allows_skip(std::nullopt));
  EXPECT_TRUE(gate.allows_skip(1.0));
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(gate.warned());
}

TEST(TimestepGate, DenseWhileTAboveD) {
  TimestepGate gate(0.8, [](const std::string&) {});
  EXPECT_FALSE(gate.allows_skip(1.0));
  EXPECT_FALSE(gate.allows_skip(0.81));
  EXPECT_TRUE(gate.allows_skip(0.8));
  EXPECT_TRUE(gate.allows_skip(0.2));
  EXPECT_FALSE(gate.warned());
}

TEST(TimestepGate, MissingTimestepStaysDenseWithExactlyOneWarning) {
  std::vector<std::string> warnings;
  TimestepGate gate(0.8, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_FALSE(gate.allows_skip(std::nullopt));
  EXPECT_FALSE(gate.allows_skip(std::nullopt));
  EXPECT_FALSE(gate.allows_skip(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(gate.allows_skip(0.5));
  EXPECT_FALSE(gate.allows_skip(std::nullopt));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("publishes no timestep"), std::string::npos);
  EXPECT_TRUE(gate.warned());
}

TEST(TimestepGate, RejectsDOutsideUnitInterval) {
  EXPECT_THROW(TimestepGate(-0.1), std::invalid_argument);
  EXPECT_THROW(TimestepGate(1.1), std::invalid_argument);
}

TEST(DiffusionConfig, LambdaForAppliesTheGate) {
  std::vector<std::string> warnings;
  DiffusionSkipConfig c =
      resolve_diffusion_config(kTopLevel, sparsity(0.5, 0.9), "transformer",
                               [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(c.lambda_for("blocks.1.attn1", 100000, 0.95), 0.0);
  EXPECT_GT(c.lambda_for("blocks.1.attn1", 100000, 0.9), 0.0);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(c.lambda_for("blocks.1.attn1", 100000, std::nullopt), 0.0);
  }
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(DiffusionRequest, ParsesTheUserObject) {
  const DiffusionRequest r =
      parse_diffusion_request(R"({"target_sparsity": 0.75, "disabled_until_timestep": 0.86})");
  EXPECT_FALSE(r.threshold);
  EXPECT_EQ(r.target_sparsity, 0.75);
  EXPECT_EQ(r.disabled_until_timestep, 0.86);
  EXPECT_EQ(parse_diffusion_request(R"({"threshold": 0.05})").threshold, 0.05);
  EXPECT_ERROR_HAS(parse_diffusion_request(R"({"treshold": 0.05})"),
                   "diffusion request: unknown key treshold");
  EXPECT_ERROR_HAS(parse_diffusion_request(R"({"threshold": "0.05"})"),
                   "diffusion request: threshold: expected a number, got string");
  EXPECT_ERROR_HAS(parse_diffusion_request("{"), "diffusion request: malformed JSON");
}

class ComponentDir : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    root_ = dir_;
    fs::create_directories(root_ / "transformer");
  }
  void write_config(const std::string& text) {
    std::ofstream(root_ / "transformer" / "config.json") << text;
  }
  fs::path root_;
};

TEST_F(ComponentDir, ReadsTheBlockAndNamesTheComponentAfterTheDirectory) {
  write_config(R"({"_class_name": "WanTransformer3DModel", "sparse_attention_config": )" +
               std::string(kTopLevel) + "}");
  for (const fs::path& dir : {root_ / "transformer", root_ / "transformer" / ""}) {
    DiffusionSkipConfig c = load_diffusion_config(dir, sparsity(0.5));
    EXPECT_EQ(c.component(), "transformer");
    EXPECT_TRUE(c.is_ignored("transformer.blocks.0.attn1"));
    EXPECT_NEAR(c.lambda_for("transformer.blocks.1.attn1", 100000, std::nullopt),
                kFactorAtHalf / 100000, 1e-15);
  }
}

TEST_F(ComponentDir, NoBlockMeansNoCalibration) {
  write_config(R"({"_class_name": "WanTransformer3DModel"})");
  DiffusionSkipConfig c = load_diffusion_config(root_ / "transformer", lambda(0.05));
  EXPECT_EQ(c.lambda_for("transformer.blocks.0.attn1", 100, std::nullopt), 0.05);
  const std::string path = (root_ / "transformer" / "config.json").string();
  EXPECT_ERROR_HAS(load_diffusion_config(root_ / "transformer", sparsity(0.5)),
                   path + ": target_sparsity needs the checkpoint's calibration");
}

TEST_F(ComponentDir, FileErrorsNameTheFile) {
  EXPECT_ERROR_HAS(load_diffusion_config(root_ / "transformer", lambda(0.1)),
                   "config.json: no such file");
  write_config(R"({"sparse_attention_config": )");
  EXPECT_ERROR_HAS(load_diffusion_config(root_ / "transformer", lambda(0.1)),
                   "config.json: malformed JSON at byte");
}

// Wan 2.2's transformer_2: a config that cannot serve the request leaves it dense with one
// warning; the request's own errors still throw.
TEST_F(ComponentDir, ASecondaryComponentThatCannotBeReadStaysDenseWithOneWarning) {
  std::vector<std::string> warnings;
  const auto sink = [&](const std::string& w) { warnings.push_back(w); };
  DiffusionSkipConfig missing =
      load_secondary_diffusion_config(root_ / "transformer", lambda(0.1), sink);
  EXPECT_EQ(missing.lambda_for("transformer.blocks.0.attn1", 100000, std::nullopt), 0.0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("config.json: no such file"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("transformer stays dense"), std::string::npos) << warnings[0];
  write_config(R"({"_class_name": "WanTransformer3DModel"})");  // no calibration
  warnings.clear();
  DiffusionSkipConfig uncalibrated =
      load_secondary_diffusion_config(root_ / "transformer", sparsity(0.5), sink);
  EXPECT_TRUE(uncalibrated.threshold().never_skips());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("needs the checkpoint's calibration"), std::string::npos);
  // A readable config serves as the primary's does.
  EXPECT_EQ(load_secondary_diffusion_config(root_ / "transformer", lambda(0.05), sink)
                .lambda_for("transformer.blocks.0.attn1", 100, std::nullopt),
            0.05);
  DiffusionRequest both = lambda(0.1);
  both.target_sparsity = 0.5;
  EXPECT_ERROR_HAS(load_secondary_diffusion_config(root_ / "transformer", both, sink),
                   "both threshold and target_sparsity");
  EXPECT_ERROR_HAS(load_secondary_diffusion_config(root_ / "transformer", sparsity(1.5), sink),
                   "target_sparsity 1.5 is outside [0, 1]");
}

}  // namespace
}  // namespace skipsoftmax
