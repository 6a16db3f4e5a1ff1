// price.json: the Amdahl estimate, the recommendation rule, and the schema's validation on the
// committed fixtures and on edits of them.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_io.h"
#include "price.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string fixture_path(const char* name) {
  return std::string(SKIPSOFTMAX_TEST_DATA) + "/price_fixture_" + name + ".json";
}
json fixture(const char* name) { return read_json_file(fixture_path(name)); }

// The arm of the fixture's JSON with this skip scope and tier (null for dense).
json& arm(json& j, const std::string& skip, const json& tier) {
  for (json& a : j["arms"]) {
    if (a["skip"] == skip && a["tier"] == tier) return a;
  }
  throw std::logic_error("no such arm");
}

// The error price_from_json gives for the fixture after `edit`.
std::string error_after(const std::function<void(json&)>& edit, const char* name = "llama") {
  json j = fixture(name);
  edit(j);
  return test::message_of([&] { price_from_json(j, "p.json"); });
}

#define EXPECT_EDIT_FAILS(edit, text)                                 \
  do {                                                                \
    const std::string msg_ = error_after([](json& j) { edit; });      \
    EXPECT_NE(msg_.find(text), std::string::npos) << "got: " << msg_; \
  } while (0)

TEST(Amdahl, MatchesTheFormula) {
  EXPECT_DOUBLE_EQ(amdahl_speedup(0.0, 3.0), 1.0);  // no attention: nothing to gain
  EXPECT_DOUBLE_EQ(amdahl_speedup(0.7, 1.0), 1.0);  // kernel no faster
  EXPECT_DOUBLE_EQ(amdahl_speedup(1.0, 2.5), 2.5);  // all attention: the kernel's speedup
  EXPECT_DOUBLE_EQ(amdahl_speedup(0.6, 2.0), 1.0 / 0.7);
  EXPECT_DOUBLE_EQ(amdahl_speedup(0.5, 0.5), 1.0 / 1.5);  // a slower kernel costs time
  for (double share : {-0.1, 1.1, kNaN}) {
    EXPECT_ERROR_HAS(amdahl_speedup(share, 2.0), "attention share must lie in [0, 1]");
  }
  for (double kernel : {0.0, -1.0, kInf, kNaN}) {
    EXPECT_ERROR_HAS(amdahl_speedup(0.5, kernel), "kernel speedup must be finite and > 0");
  }
}

TEST(RecommendTier, PicksTheHighestTierWithinTheBoundEverywhere) {
  const std::vector<TierAccuracy> tiers = {{0.5, {1.0, 1.0, 0.998}},
                                           {0.6, {1.0, 0.995, 0.993}},
                                           {0.75, {0.997, 0.993, 0.991}},
                                           {0.8, {0.996, 0.991, 0.982}}};  // fails 0.99 at one
  EXPECT_EQ(recommend_tier(tiers, 0.99), 2u);
  EXPECT_EQ(recommend_tier(tiers, 0.97), 3u);
  EXPECT_EQ(recommend_tier(tiers, 0.998), 0u);
  EXPECT_EQ(recommend_tier(tiers, 1.001), std::nullopt);  // nothing: stay dense
  EXPECT_EQ(recommend_tier({}, 0.99), std::nullopt);
}

TEST(RecommendTier, OrderAndNoiseDoNotMatter) {
  // Any order; a ratio above 1 is fine; 99/100 meets 0.99 although it is below it in binary.
  const std::vector<TierAccuracy> tiers = {
      {0.8, {0.95, 1.01}}, {0.5, {1.002, 1.0}}, {0.6, {99.0 / 100.0, 0.999}}};
  EXPECT_EQ(recommend_tier(tiers, 0.99), 2u);
  // The rule is the highest passing tier, even above a failing one.
  EXPECT_EQ(recommend_tier({{0.5, {0.98}}, {0.6, {0.995}}}, 0.99), 1u);
}

TEST(RecommendTier, RejectsMissingOrNaNRatios) {
  EXPECT_ERROR_HAS(recommend_tier({{0.5, {}}}, 0.99), "no accuracy ratio");
  EXPECT_ERROR_HAS(recommend_tier({{0.5, {1.0, kNaN}}}, 0.99), "NaN");
}

TEST(PriceFixture, TheAttentionModelGainsAndTheHybridIsAdvisedOff) {
  const PriceList llama = read_price_file(fixture_path("llama"));
  EXPECT_TRUE(llama.synthetic);
  ASSERT_TRUE(llama.phases.prefill && llama.phases.decode);
  EXPECT_TRUE(llama.phases.prefill->advice.on);
  EXPECT_EQ(llama.phases.prefill->ladder.size(), 4u);
  EXPECT_EQ(llama.phases.prefill->ladder.back().key, "80%");
  EXPECT_GT(llama.arms[3].points.back().phases.prefill.speedup, 1.1);
  ASSERT_EQ(llama.recommendations.size(), 4u);
  for (const PriceRecommendation& r : llama.recommendations) {
    const bool both_097 = r.skip == SkipScope::kBoth && r.bound == 0.97;
    EXPECT_EQ(r.tier, both_097 ? "80%" : "75%") << r.bound << " " << to_string(r.skip);
  }

  const PriceList hybrid = read_price_file(fixture_path("hybrid"));
  EXPECT_FALSE(hybrid.phases.prefill->advice.on);
  EXPECT_FALSE(hybrid.phases.decode->advice.on);
  ASSERT_EQ(hybrid.recommendations.size(), 2u);
  EXPECT_EQ(hybrid.recommendations[0].tier, std::nullopt);  // 0.99: dense
  EXPECT_EQ(hybrid.recommendations[1].tier, "50%");         // 0.97: 60% fails at 64k
  // Attention is a fifth of the time at 128k: even the 80% tier gains a few percent.
  EXPECT_LT(hybrid.arms.back().points.back().phases.prefill.speedup, 1.06);
}

TEST(PriceJson, RoundTrips) {
  for (const char* name : {"llama", "hybrid"}) {
    const PriceList p = read_price_file(fixture_path(name));
    const nlohmann::ordered_json once = price_to_json(p);
    const PriceList again = price_from_json(json(once), "again");
    EXPECT_EQ(price_to_json(again), once) << name;
    EXPECT_EQ(json(once), fixture(name)) << name;  // the fixture is in canonical form
  }
}

TEST(PriceDerive, RecomputesSpeedupsRatiosAndTheRecommendation) {
  PriceList p = read_price_file(fixture_path("llama"));
  // The 80% arm at 64k now matches dense: it meets 0.99 everywhere.
  PriceArm& top = p.arms[4];
  ASSERT_EQ(top.label(), "80%");
  top.points[4].accuracy->scores = p.arms[0].points[4].accuracy->scores;
  top.points[0].ttft_ms /= 2;
  EXPECT_ERROR_HAS(validate_price(p, "p"), "points[0] (length 4096).prefill.speedup: ");
  derive_price(p);
  EXPECT_NO_THROW(validate_price(p, "p"));
  EXPECT_NEAR(top.points[0].phases.prefill.speedup,
              p.arms[0].points[0].ttft_ms / top.points[0].ttft_ms, 1e-12);
  EXPECT_EQ(top.points[4].accuracy->ratio, 1.0);
  EXPECT_EQ(p.recommendations[1].skip, SkipScope::kBoth);
  EXPECT_EQ(p.recommendations[1].tier, "80%");
}

TEST(PriceValidate, NaNAndInfinityInTheStructs) {
  const PriceList good = read_price_file(fixture_path("llama"));
  PriceList p = good;
  p.arms[1].points[2].ttft_ms = kNaN;
  EXPECT_ERROR_HAS(validate_price(p, "p"),
                   "p: arms[1] (50%).points[2] (length 16384).ttft_ms: is NaN");
  p = good;
  p.arms[2].points[0].phases.decode.kernel_speedup = kInf;
  EXPECT_ERROR_HAS(validate_price(p, "p"), "decode.kernel_speedup: is infinite");
  p = good;
  p.phases.prefill->advice.mass_share = kNaN;
  EXPECT_ERROR_HAS(validate_price(p, "p"), "phases.prefill.advice.mass_share: is NaN");
  p = good;
  p.arms[3].points[0].accuracy->scores[1] = kNaN;
  EXPECT_ERROR_HAS(validate_price(p, "p"), "scores.\"ruler_niah_multikey\": is NaN");
}

TEST(PriceSchema, MissingKeysWrongTypesUnknownKeys) {
  EXPECT_EDIT_FAILS(j.erase("model"), "p.json: missing key \"model\"");
  EXPECT_EDIT_FAILS(j["provenance"].erase("gpu"), "p.json: provenance: missing key \"gpu\"");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][0].erase("tpot_ms"),
                    "p.json: arms[1].points[0]: missing key \"tpot_ms\"");
  EXPECT_EDIT_FAILS(j["lengths"][0] = "4096", "p.json: lengths[0]: expected a number, got string");
  EXPECT_EDIT_FAILS(j["arms"][2]["points"][1]["prefill"]["amdahl"] = nullptr,
                    "arms[2].points[1].prefill.amdahl: expected a number, got null");
  EXPECT_EDIT_FAILS(j["lengths"][1] = 8192.5, "lengths[1]: 8192.5 is not an integer");
  EXPECT_EDIT_FAILS(j["colour"] = "blue", "p.json: unknown key \"colour\"");
  EXPECT_EDIT_FAILS(j["phases"]["prefill"]["advice"]["mood"] = 1,
                    "phases.prefill.advice: unknown key \"mood\"");
  EXPECT_EDIT_FAILS(j["phases"]["verify"] = json::object(), "phases: unknown key \"verify\"");
  EXPECT_EDIT_FAILS(j["schema"] = "skipsoftmax-price/2",
                    "schema: \"skipsoftmax-price/2\" is not \"skipsoftmax-price/1\"");
  EXPECT_EDIT_FAILS(j["setup"]["heads"] = json::array(),
                    "setup.heads: expected a string, number or boolean, got array");
  EXPECT_EDIT_FAILS(j = json::array(), "p.json: expected an object, got array");
}

TEST(PriceSchema, Advice) {
  EXPECT_EDIT_FAILS(j["phases"]["decode"]["advice"]["verdict"] = "MAYBE",
                    "phases.decode.advice.verdict: \"MAYBE\" is neither \"ON\" nor \"OFF\"");
  EXPECT_EDIT_FAILS(j["phases"]["prefill"]["advice"]["verdict"] = "OFF",
                    "phases.prefill.advice.verdict: OFF, but mass_ratio");
  EXPECT_EDIT_FAILS(j["phases"]["prefill"]["advice"]["mass_ratio"] = 0.5,
                    "mass_ratio: 0.5 disagrees with mass_share / sparsity");
  EXPECT_EDIT_FAILS(j["phases"]["prefill"]["advice"]["sparsity"] = 1.2,
                    "advice.sparsity: 1.2 must lie in [0, 1]");
}

TEST(PriceSchema, TablesAndLadders) {
  EXPECT_EDIT_FAILS(
      std::swap(j["phases"]["prefill"]["deployed"][1], j["phases"]["prefill"]["deployed"][2]),
      "p.json: phases.prefill.deployed: scale table row 2 [8192, ");
  EXPECT_EDIT_FAILS(j["phases"]["prefill"]["deployed"][0][1] = -1.0, "S must be finite and > 0");
  EXPECT_EDIT_FAILS(j["phases"]["decode"]["ladder"]["80%"][3][1] = 1.0,
                    "phases.decode.ladder.\"80%\": S 1 at bin 32768 is below tier \"50%\"'s");
  EXPECT_EDIT_FAILS(j["phases"]["decode"]["ladder"]["120%"] = json::array(),
                    "phases.decode.ladder.120%: target sparsity \"120%\" is not a fraction");
  EXPECT_EDIT_FAILS(j["phases"]["decode"]["ladder"]["0.8"] = json::array(),
                    "tiers must be distinct");
}

TEST(PriceSchema, LengthsAndPoints) {
  EXPECT_EDIT_FAILS(std::swap(j["lengths"][0], j["lengths"][1]),
                    "lengths[1]: 4096 is not above the previous 8192");
  EXPECT_EDIT_FAILS(j["accuracy_lengths"].push_back(100000),
                    "accuracy_lengths: 100000 is not one of lengths");
  EXPECT_EDIT_FAILS(j["accuracy_lengths"] = json::array(), "accuracy_lengths: must not be empty");
  EXPECT_EDIT_FAILS(j["arms"][2]["points"][3]["length"] = 30000,
                    "arms[2] (60%).points[3].length: 30000 is not lengths[3] = 32768");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"].erase(5),
                    "arms[1] (50%).points: has 5 points, one per length needs 6");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][0]["tpot_ms"] = 0,
                    "points[0] (length 4096).tpot_ms: 0 must be > 0");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][1]["decode"]["attention_share"] = 1.5,
                    "decode.attention_share: 1.5 must lie in [0, 1]");
}

TEST(PriceSchema, Arms) {
  EXPECT_EDIT_FAILS(j["arms"][1]["skip"] = "none", "needs exactly one dense arm");
  EXPECT_EDIT_FAILS(j["arms"][0]["skip"] = "both", "needs exactly one dense arm");
  EXPECT_EDIT_FAILS(j["arms"][1]["skip"] = "sometimes", "\"sometimes\" is none of");
  EXPECT_EDIT_FAILS(j["arms"][1]["tier"] = "90%",
                    "arms[1] (90%).tier: \"90%\" is not in phases.prefill.ladder");
  EXPECT_EDIT_FAILS(j["arms"][2]["tier"] = "50%", "arms[2] (50%): repeats arms[1]");
  EXPECT_EDIT_FAILS(j["arms"][0]["tier"] = "50%", "tier: must be null for the dense arm");
  EXPECT_EDIT_FAILS(j["arms"][0]["points"][0]["prefill"]["tile_sparsity"] = 0.1,
                    "must be 0 for the dense arm");
  EXPECT_EDIT_FAILS(j["phases"].erase("decode"), "skips decode, which has no phases.decode");
}

TEST(PriceSchema, DerivedFieldsMustAgree) {
  EXPECT_EDIT_FAILS(arm(j, "both", "75%")["points"][5]["prefill"]["amdahl"] = 1.5,
                    "arms[3] (75%).points[5] (length 131072).prefill.amdahl: 1.5 disagrees with "
                    "1 / (1 - dense share * (1 - 1 / kernel_speedup)) = 1.1");
  EXPECT_EDIT_FAILS(arm(j, "both", "75%")["points"][5]["decode"]["speedup"] = 0.9,
                    "decode.speedup: 0.9 disagrees with dense time / time");
  EXPECT_EDIT_FAILS(arm(j, "both", "60%")["points"][2]["accuracy"]["ratio"] = 1.0,
                    "accuracy.ratio: 1 disagrees with score / dense score = 0.99");
  EXPECT_EDIT_FAILS(arm(j, "both", "60%")["points"][2]["accuracy"]["score"] = 0.5,
                    "accuracy.score: 0.5 disagrees with the mean of scores");
  EXPECT_EDIT_FAILS(arm(j, "both", "60%")["points"][2]["accuracy"]["perplexity_ratio"] = 2,
                    "perplexity_ratio: 2 disagrees with perplexity / dense perplexity");
  EXPECT_EDIT_FAILS(arm(j, "both", "60%")["points"][2]["accuracy"]["task_ratios"]["ruler_vt"] = 1,
                    "task_ratios.\"ruler_vt\": 1 disagrees with score / dense score");
}

TEST(PriceSchema, Accuracy) {
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][0].erase("accuracy"),
                    "points[0] (length 4096).accuracy: is missing at an accuracy length");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][1]["accuracy"] = j["arms"][1]["points"][0]["accuracy"],
                    "is given, but the length is not an accuracy length");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][0]["accuracy"]["scores"]["mmlu"] = 0.5,
                    "accuracy.scores.mmlu: \"mmlu\" is not one of tasks");
  EXPECT_EDIT_FAILS(j["arms"][1]["points"][0]["accuracy"]["scores"].erase("ruler_vt"),
                    "accuracy.scores: missing key \"ruler_vt\"");
  EXPECT_EDIT_FAILS(j["tasks"].push_back("ruler_vt"), "tasks[3]: \"ruler_vt\" is listed twice");
  EXPECT_EDIT_FAILS(j["arms"][2]["points"][0]["accuracy"]["perplexity"] = -1,
                    "accuracy.perplexity: -1 must be > 0");
}

TEST(PriceSchema, Recommendations) {
  EXPECT_EDIT_FAILS(j["recommendations"][1]["tier"] = "80%",
                    "recommendations[1].tier: \"80%\", but the highest tier whose accuracy ratio "
                    "is >= 0.99 at every accuracy length is \"75%\"");
  EXPECT_EDIT_FAILS(j["recommendations"][0]["tier"] = nullptr,
                    "recommendations[0].tier: \"dense\", but");
  EXPECT_EDIT_FAILS(j["recommendations"].erase(3),
                    "recommendations: missing bound 0.97 for skip \"both\"");
  EXPECT_EDIT_FAILS(j["recommendations"].push_back(j["recommendations"][0]),
                    "recommendations[4]: repeats recommendations[0]");
  EXPECT_EDIT_FAILS(j["recommendations"][0]["skip"] = "decode",
                    "recommendations[0].skip: no arm skips \"decode\"");
  // Another bound is fine when it is right.
  EXPECT_EQ(error_after([](json& j) {
              j["recommendations"].push_back({{"bound", 0.995}, {"skip", "both"}, {"tier", "60%"}});
            }),
            "");
  // A recommendation names a tier as its ladder spells it, or as a fraction.
  EXPECT_EQ(error_after([](json& j) { j["recommendations"][1]["tier"] = "0.75"; }), "");
}

}  // namespace
}  // namespace skipsoftmax

namespace skipsoftmax {
namespace {

// What `price` reads from a calibrated checkpoint config: per phase with tiers its advice, the
// deployed tier's table and the ladder in order; a phase without tiers is absent.
TEST(PriceCheckpoint, CalibrationFromTheCheckpointConfig) {
  const CheckpointConfig c = parse_checkpoint_config(R"({
    "model": "m",
    "skip_softmax_prefill_scale_tables": {"75%": [[4096, 8.0]], "50%": [[4096, 2.0]]},
    "skip_softmax_prefill_target_sparsity": "75%",
    "skip_softmax_prefill_shape_advice": {"verdict": "OFF", "sparsity": 0.75, "mass_share": 0.3,
                                          "mass_ratio": 0.4, "mass_ratio_limit": 0.3},
    "skip_softmax_decode_scale_table": [[2048, 5.0]]})",
                                                     "config.json");
  const PerPhase<std::optional<PhaseCalibration>> cal =
      calibration_from_checkpoint(c, "config.json");
  ASSERT_TRUE(cal.prefill);
  EXPECT_FALSE(cal.decode);  // a deployed table but no ladder: nothing to price
  EXPECT_FALSE(cal.prefill->advice.on);
  EXPECT_DOUBLE_EQ(cal.prefill->advice.mass_share, 0.3);
  ASSERT_EQ(cal.prefill->ladder.size(), 2u);
  EXPECT_EQ(cal.prefill->ladder[0].key, "50%");
  EXPECT_EQ(cal.prefill->deployed, ScaleTable({{4096, 8.0}}));

  const CheckpointConfig no_advice = parse_checkpoint_config(
      R"({"skip_softmax_decode_scale_tables": {"75%": [[4096, 8.0]]}})", "config.json");
  EXPECT_ERROR_HAS(calibration_from_checkpoint(no_advice, "config.json"),
                   "config.json: skip_softmax_decode_shape_advice: missing");
  const CheckpointConfig bad_advice = parse_checkpoint_config(R"({
    "skip_softmax_prefill_scale_tables": {"75%": [[4096, 8.0]]},
    "skip_softmax_prefill_shape_advice": {"verdict": "MAYBE", "sparsity": 0.7,
                                          "mass_share": 0.1, "mass_ratio": 0.1}})",
                                                              "config.json");
  EXPECT_ERROR_HAS(calibration_from_checkpoint(bad_advice, "config.json"), "neither");
  // The deployed table is what export would deploy: a target naming a missing tier is an error.
  const CheckpointConfig missing_tier = parse_checkpoint_config(R"({
    "skip_softmax_prefill_scale_tables": {"75%": [[4096, 8.0]]},
    "skip_softmax_prefill_target_sparsity": "50%",
    "skip_softmax_prefill_shape_advice": {"verdict": "ON", "sparsity": 0.7,
                                          "mass_share": 0.1, "mass_ratio": 0.1}})",
                                                                "config.json");
  EXPECT_ERROR_HAS(calibration_from_checkpoint(missing_tier, "config.json"), "config.json: ");
}

// The summary recorded in the checkpoint config follows the price list it summarises, and the
// checkpoint config keeps it as an informational key (export does not call it unknown).
TEST(PriceCheckpoint, SummaryIsRecordedAsAnInformationalKey) {
  const PriceList p = read_price_file(fixture_path("llama"));
  const nlohmann::ordered_json s = price_summary_json(p, "/w/price.json");
  EXPECT_EQ(s["price_file"], "/w/price.json");
  ASSERT_EQ(s["arms"].size(), p.arms.size());
  EXPECT_EQ(s["arms"][0]["arm"], "dense");
  EXPECT_EQ(s["arms"][1]["points"].size(), p.lengths.size());
  EXPECT_TRUE(s["arms"][1]["points"][0].contains("accuracy_ratio"));  // 4096: an accuracy length
  EXPECT_FALSE(s["arms"][1]["points"][1].contains("accuracy_ratio"));
  EXPECT_EQ(s["recommendations"].size(), p.recommendations.size());
  const std::string merged = merge_skip_keys(
      R"({"model": "m"})", nlohmann::json{{"skip_softmax_price_list", s}}.dump(), "config.json");
  const CheckpointConfig c = parse_checkpoint_config(merged, "config.json");
  ASSERT_TRUE(c.price_list_json);
  EXPECT_TRUE(c.unknown_skip_keys.empty());
}

}  // namespace
}  // namespace skipsoftmax

namespace skipsoftmax {
namespace {

PhaseCalibration ladder_of(std::initializer_list<const char*> keys) {
  PhaseCalibration c;
  double s = 1.0;
  for (const char* k : keys) {
    c.ladder.push_back({k, parse_target_sparsity(k), ScaleTable({{4096, s}})});
    s *= 2.0;
  }
  return c;
}

// Dense first; a tier both ladders have skips both phases, one only a phase has skips that phase
// and runs the other dense; --tiers picks, in order of sparsity, and refuses unknown or repeated
// tiers before any measurement.
TEST(PricePlan, ArmsFollowTheLadders) {
  PerPhase<std::optional<PhaseCalibration>> cal;
  cal.prefill = ladder_of({"50%", "75%"});
  cal.decode = ladder_of({"0.75", "80%"});
  const std::vector<PriceArmPlan> all = plan_price_arms(cal, {});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_TRUE(all[0].arm.dense());
  EXPECT_EQ(all[0].flags.prefill.scale_table->spelled, "none");
  EXPECT_EQ(all[0].flags.decode.scale_table->spelled, "none");
  EXPECT_EQ(all[1].arm.skip, SkipScope::kPrefill);
  EXPECT_EQ(all[1].arm.tier, "50%");
  EXPECT_EQ(all[1].flags.prefill.target_sparsity, "50%");
  EXPECT_TRUE(all[1].flags.decode.scale_table);
  EXPECT_EQ(all[2].arm.skip, SkipScope::kBoth);  // "75%" and "0.75" are one tier
  EXPECT_EQ(all[2].arm.tier, "75%");
  EXPECT_DOUBLE_EQ(all[2].arm.tier_sparsity, 0.75);
  EXPECT_EQ(all[2].flags.decode.target_sparsity, "0.75");
  EXPECT_EQ(all[3].arm.skip, SkipScope::kDecode);

  const std::vector<PriceArmPlan> picked = plan_price_arms(cal, {"80%", "0.5"});
  ASSERT_EQ(picked.size(), 3u);
  EXPECT_EQ(picked[1].arm.tier, "50%");
  EXPECT_EQ(picked[2].arm.tier, "80%");
  EXPECT_ERROR_HAS(plan_price_arms(cal, {"90%"}),
                   "--tiers: 90% is not calibrated (the checkpoint has 50%, 75%, 80%)");
  EXPECT_ERROR_HAS(plan_price_arms(cal, {"75%", "0.75"}), "--tiers: 0.75 is given twice");
}

}  // namespace
}  // namespace skipsoftmax
