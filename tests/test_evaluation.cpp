// The host side of `skipsoftmax evaluate`: default lengths, arms, the results file (round trip and
// its errors) and the gate against a baseline (verdicts at the bound, comparability).
#include <gtest/gtest.h>

#include <cmath>

#include "evaluation.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

EvalResults sample_results(double score_scale = 1.0, double ppl_scale = 1.0) {
  EvalResults r;
  r.label = "dense";
  r.arm = SkipScope::kNone;
  r.model = "SmolLM2 135M Instruct";
  r.weights_sha256 = std::string(64, 'a');
  r.dtype = "fp16";
  r.engine_dir = "/tmp/engine";
  r.thresholds = {"dense", "dense"};
  r.gpu = "NVIDIA H200";
  r.git_revision = "abc";
  r.command = "skipsoftmax evaluate";
  r.settings.seed = 3;
  r.settings.samples = 8;
  r.settings.text_windows = 2;
  r.settings.lengths = {1024, 4096};
  for (std::int64_t l : r.settings.lengths) {
    LengthResult x;
    x.length = l;
    x.scores = {1.0 * score_scale, 0.75 * score_scale, 0.5 * score_scale, 0.25 * score_scale};
    x.score = (x.scores[0] + x.scores[1] + x.scores[2] + x.scores[3]) / 4;
    x.perplexity = 10.0 * ppl_scale;
    x.perplexity_tokens = 2 * (l - 1);
    x.tiles.prefill = {100, 40};
    r.results.push_back(x);
  }
  return r;
}

TEST(Evaluation, DefaultLengthsDoubleUpToTheContext) {
  EXPECT_EQ(default_eval_lengths(8192), (std::vector<std::int64_t>{1024, 2048, 4096, 8192}));
  EXPECT_EQ(default_eval_lengths(6000), (std::vector<std::int64_t>{1024, 2048, 4096}));
  EXPECT_EQ(default_eval_lengths(700), (std::vector<std::int64_t>{700}));
  EXPECT_ERROR_HAS(default_eval_lengths(100), "below the shortest evaluation length (512)");
}

TEST(Evaluation, ArmsNameThePhasesThatSkip) {
  EXPECT_TRUE(skips(SkipScope::kPrefill, Phase::kPrefill));
  EXPECT_FALSE(skips(SkipScope::kPrefill, Phase::kDecode));
  EXPECT_TRUE(skips(SkipScope::kDecode, Phase::kDecode));
  EXPECT_FALSE(skips(SkipScope::kNone, Phase::kDecode));
  EXPECT_TRUE(skips(SkipScope::kBoth, Phase::kPrefill));
  EXPECT_EQ(parse_eval_arm("decode"), SkipScope::kDecode);
  EXPECT_ERROR_HAS(parse_eval_arm("all"),
                   "unknown arm 'all' (valid: dense, prefill, decode, both)");
}

TEST(Evaluation, ResultsRoundTrip) {
  EvalResults r = sample_results();
  r.gate = gate_against(sample_results(), sample_results(), 0.03);
  const EvalResults back = evaluation_from_json(evaluation_to_json(r), "r.json");
  EXPECT_EQ(back.label, r.label);
  EXPECT_EQ(back.weights_sha256, r.weights_sha256);
  EXPECT_EQ(back.settings.tasks, r.settings.tasks);
  EXPECT_EQ(back.settings.lengths, r.settings.lengths);
  ASSERT_EQ(back.results.size(), 2u);
  EXPECT_EQ(back.results[1].scores, r.results[1].scores);
  EXPECT_DOUBLE_EQ(back.results[1].perplexity, 10.0);
  EXPECT_EQ(back.results[0].tiles.prefill.skipped, 40u);
  ASSERT_TRUE(back.gate);
  EXPECT_TRUE(back.gate->pass);
  const std::string table = format_evaluation(r);
  EXPECT_NE(table.find("ruler_vt"), std::string::npos) << table;
  EXPECT_NE(table.find("verdict: PASS"), std::string::npos) << table;
}

TEST(Evaluation, MalformedResultsAreNamed) {
  const nlohmann::json good = evaluation_to_json(sample_results());
  auto broken = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return j;
  };
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) { j["schema"] = "x/1"; }), "f.json"),
                   "f.json.schema: expected \"skipsoftmax-evaluation/1\"");
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) { j.erase("label"); }), "f.json"),
                   "f.json: missing key \"label\"");
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) { j["extra"] = 1; }), "f.json"),
                   "unknown key \"extra\"");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["results"][0]["scores"]["ruler_vt"] = 1.5; }),
                           "f.json"),
      "f.json.results[0].scores.ruler_vt: must lie in [0, 1]");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["results"][0]["score"] = 0.9; }), "f.json"),
      "is not the mean of the task scores");
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) {
                                          j["settings"]["lengths"] = {4096, 1024};
                                        }),
                                        "f.json"),
                   "not strictly increasing");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["results"][1]["length"] = 2048; }), "f.json"),
      "does not follow settings.lengths");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["results"][1]["perplexity"] = 0.5; }), "f.json"),
      "must be >= 1");
  EXPECT_ERROR_HAS(
      evaluation_from_json(
          broken([](auto& j) { j["results"][0]["tiles"]["decode"]["skipped"] = 5; }), "f.json"),
      "more tiles skipped than visited");
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) { j["arm"] = "all"; }), "f.json"),
                   "f.json.arm: unknown arm 'all'");
  EXPECT_ERROR_HAS(evaluation_from_json(broken([](auto& j) { j["dtype"] = "fp8"; }), "f.json"),
                   "f.json.dtype: expected fp16 or bf16");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["provenance"]["host"] = "x"; }), "f.json"),
      "f.json.provenance: unknown key \"host\"");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["settings"]["samples"] = 1LL << 40; }), "f.json"),
      "must be at most");
  EXPECT_ERROR_HAS(
      evaluation_from_json(broken([](auto& j) { j["settings"]["tasks"] = {"qa"}; }), "f.json"),
      "unknown task 'qa'");
}

TEST(Evaluation, GateFollowsTheBound) {
  const EvalResults dense = sample_results();
  // Scores 0.625 * 0.96 = 0.6 (drop 0.025) and perplexity +2.5%: within 0.03.
  GateVerdict v = gate_against(sample_results(0.96, 1.025), dense, 0.03);
  EXPECT_TRUE(v.pass);
  ASSERT_EQ(v.checks.size(), 4u);
  EXPECT_EQ(v.checks[0].metric, "score");
  EXPECT_NEAR(v.checks[0].drop, 0.025, 1e-12);
  EXPECT_NEAR(v.checks[1].drop, 0.025, 1e-12);
  // Exactly at the bound passes; past it fails, for either metric.
  EXPECT_TRUE(gate_against(sample_results(0.96, 1.0), dense, 0.025).pass);
  v = gate_against(sample_results(0.9, 1.0), dense, 0.03);
  EXPECT_FALSE(v.pass);
  EXPECT_FALSE(v.checks[0].pass);
  EXPECT_TRUE(v.checks[1].pass);
  v = gate_against(sample_results(1.0, 1.05), dense, 0.03);
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(v.checks[0].pass);
  EXPECT_FALSE(v.checks[1].pass);
  // Better than the baseline always passes.
  EXPECT_TRUE(gate_against(sample_results(1.2, 0.9), dense, 0.0).pass);
  EXPECT_ERROR_HAS(gate_against(dense, dense, -0.1), "--max-drop must be a finite number >= 0");
  EXPECT_ERROR_HAS(gate_against(dense, dense, NAN), "--max-drop");
}

TEST(Evaluation, GateRefusesIncomparableRuns) {
  const EvalResults dense = sample_results();
  EvalResults r = sample_results();
  r.weights_sha256 = std::string(64, 'b');
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "not comparable: weights (SHA-256)");
  r = sample_results();
  r.settings.seed = 4;
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "not comparable: seed 3 there, 4 here");
  r = sample_results();
  r.settings.samples = 4;
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "samples 8 there, 4 here");
  r = sample_results();
  r.settings.tasks = {RulerTask::kNiahSingle};
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "tasks");
  r = sample_results();
  r.dtype = "bf16";
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "not comparable: dtype fp16 there, bf16 here");
  // A length missing from the baseline is known from the settings, before any result exists.
  r = sample_results();
  r.settings.lengths = {1024, 8192};
  r.results.clear();
  EXPECT_ERROR_HAS(gate_against(r, dense, 0.03), "has no results at length 8192");
}

// Runs without perplexity texts are gated on their task scores alone (no 0 / 0 perplexity check).
TEST(Evaluation, GateWithoutPerplexityTexts) {
  EvalResults dense = sample_results();
  EvalResults run = sample_results();
  for (EvalResults* r : {&dense, &run}) {
    r->settings.text_windows = 0;
    for (LengthResult& x : r->results) {
      x.perplexity = 0.0;
      x.perplexity_tokens = 0;
    }
  }
  const GateVerdict v = gate_against(run, dense, 0.0);
  EXPECT_TRUE(v.pass);
  ASSERT_EQ(v.checks.size(), 2u);
  EXPECT_EQ(v.checks[0].metric, "score");
  EXPECT_EQ(v.checks[1].metric, "score");
}

}  // namespace
}  // namespace skipsoftmax
