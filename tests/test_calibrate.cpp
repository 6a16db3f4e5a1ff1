// The calibration run end to end on a fake capture source (synthetic structured Q/K per prompt):
// pooling over prompts and global layers only, the statistics cache, progress, the decode steps
// over a capture, the npy-directory source, SHA-256.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "calibrate.h"
#include "capture_source.h"
#include "file_io.h"
#include "npy.h"
#include "ruler.h"
#include "sha256.h"
#include "synthetic.h"
#include "table_check.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

ModelConfig small_model() {
  ModelConfig m;
  m.architecture = "gemma3";
  m.layers = 3;
  m.heads_q = 4;
  m.heads_kv = 2;
  m.head_dim = 32;
  m.context_length = 4096;
  m.local_layer = {false, true, false};  // layer 1 slides: never pooled
  m.sliding_window = 128;
  m.attention_scale = 1.0 / std::sqrt(32.0);
  return m;
}

// Structured synthetic Q/K, a different seed per prompt and layer.
class FakeSource final : public CaptureSource {
 public:
  explicit FakeSource(const ModelConfig& m) : m_(m) {}
  std::string identity() const override { return "fake"; }
  void capture(std::span<const std::int32_t> tokens, std::span<const int> layers,
               const std::function<void(LayerCapture&&)>& sink) override {
    ++calls;
    std::uint64_t seed = tokens.size();
    for (std::int32_t t : tokens) seed = seed * 1000003u + static_cast<std::uint32_t>(t);
    for (int layer : layers) {
      asked.insert(layer);
      SyntheticSpec spec{static_cast<std::int64_t>(tokens.size()), m_.heads_q, m_.heads_kv,
                         m_.head_dim};
      spec.seed = seed + static_cast<std::uint64_t>(layer);
      SyntheticQkv s = make_structured_qkv(spec);
      sink({layer, std::move(s.q), std::move(s.k), {}});
    }
  }
  int calls = 0;
  std::set<int> asked;

 private:
  ModelConfig m_;
};

// One token per word.
TextTokenizer word_tokenizer() {
  TextTokenizer t;
  t.encode = [](std::string_view text) {
    std::vector<std::int32_t> ids;
    std::uint32_t h = 0;
    bool in_word = false;
    for (char c : text) {
      if (c == ' ' || c == '\n') {
        if (in_word) ids.push_back(static_cast<std::int32_t>(h % 50000 + 2));
        in_word = false;
        h = 0;
      } else {
        in_word = true;
        h = h * 31 + static_cast<unsigned char>(c);
      }
    }
    if (in_word) ids.push_back(static_cast<std::int32_t>(h % 50000 + 2));
    return ids;
  };
  t.bos = 1;
  return t;
}

class Calibrate : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    corpus_dir_ = dir_ / "corpus";
    fs::create_directories(corpus_dir_);
    for (const std::string& book : corpus_books(CorpusSplit::kCalibration)) {
      std::ofstream out(corpus_dir_ / book);
      for (int p = 0; p < 200; ++p) out << "A paragraph of " << book << " number " << p << ".\n\n";
    }
    settings_.phases = {true, true};
    settings_.bins = calibration_bins(512, 256, 768);
    settings_.max_seqlen = 768;
    settings_.samples = 2;
    settings_.seed = 3;
    settings_.decode_steps = 4;
    settings_.decode_splits = 2;
    settings_.prefill_tiles = {64, 128, KvOrder::kSinkThenReverse};
    settings_.decode_tile_k = 64;
  }

  CalibrationResult run(FakeSource& source, std::vector<std::string>* lines = nullptr) {
    RulerCorpus corpus(corpus_dir_, CorpusSplit::kCalibration, word_tokenizer());
    return run_calibration(settings_, small_model(), ruler_prompts(corpus, settings_.seed), source,
                           cpu_stats_backend(), [&](const std::string& line) {
                             if (lines) lines->push_back(line);
                           });
  }

  fs::path corpus_dir_;
  CalibrationSettings settings_;
};

TEST_F(Calibrate, PoolsGlobalLayersAndFitsBothPhases) {
  FakeSource source(small_model());
  std::vector<std::string> lines;
  const CalibrationResult r = run(source, &lines);
  EXPECT_EQ(source.asked, (std::set<int>{0, 2}));
  EXPECT_EQ(r.layers.local, std::vector<int>{1});
  EXPECT_EQ(source.calls, 4);  // 2 bins x 2 prompts, one capture for both phases
  EXPECT_EQ(r.prompts, 4);
  ASSERT_EQ(r.phases.size(), 2u);
  EXPECT_EQ(r.phases[0].fit.phase, Phase::kPrefill);
  EXPECT_EQ(r.phases[1].fit.phase, Phase::kDecode);
  for (const PhaseResult& p : r.phases) {
    ASSERT_EQ(p.pools.size(), 2u);
    EXPECT_EQ(p.requests.size(), 4u);
    EXPECT_EQ(p.pools[0].bin, 512);
    // Prompts are bin + decode_steps - 1 tokens; decode steps see bin .. bin + 3 keys.
    EXPECT_EQ(p.pools[0].hist.min_kv_len(), p.fit.phase == Phase::kPrefill ? 515 : 512);
    std::int64_t tiles = 0;
    for (const RequestPool& q : p.requests) tiles += q.hist.tiles();
    EXPECT_EQ(tiles, p.pools[0].hist.tiles() + p.pools[1].hist.tiles());
    EXPECT_DOUBLE_EQ(p.fit.deployed_target, 0.75);
  }
  // Prefill of a 515-token prompt over 2 global layers: 4 heads x causal 64 x 128 tiles.
  std::int64_t per_head = 0;
  for (std::int64_t q0 = 0; q0 < 515; q0 += 64) {
    per_head += (std::min<std::int64_t>(q0 + 64, 515) + 127) / 128;
  }
  EXPECT_EQ(r.phases[0].requests[0].hist.tiles(), 2 * 4 * per_head);
  EXPECT_EQ(r.phases[0].requests[0].hist.rows(), 2 * 4 * 515);
  EXPECT_EQ(r.phases[1].requests[0].hist.rows(), 2 * 4 * 4);  // 4 steps x 4 heads x 2 layers
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("of the work"), std::string::npos) << lines.back();

  const nlohmann::ordered_json u = calibration_updates(settings_, r);
  for (const char* key :
       {"skip_softmax_prefill_scale_table", "skip_softmax_prefill_scale_tables",
        "skip_softmax_prefill_target_sparsity", "skip_softmax_prefill_shape_advice",
        "skip_softmax_decode_scale_table", "skip_softmax_decode_shape_advice"}) {
    EXPECT_TRUE(u.contains(key)) << key;
  }
  EXPECT_EQ(u["skip_softmax_prefill_shape_advice"]["calibrated_max_seqlen"], 768);
  // The same calibration in ModelOpt's form: a phase whose ladder gives a curve is in the block
  // with its deployed target (these short prompts reach one tier in prefill, two in decode).
  const auto& group = u.at("sparse_attention_config").at("config_groups").at("group_0");
  EXPECT_EQ(group.at("algorithm"), "skip_softmax");
  for (const char* phase : {"prefill", "decode"}) {
    const auto fit = modelopt_fit(r.phases[phase[0] == 'p' ? 0 : 1].fit);
    EXPECT_EQ(group.at("threshold_scale_factor").contains(phase), fit.has_value()) << phase;
    if (!fit) continue;
    EXPECT_EQ(group.at("threshold_scale_factor").at(phase).at("a"), fit->curve.a) << phase;
    EXPECT_EQ(group.at("target_sparsity").at(phase), 0.75) << phase;
  }
  const std::string summary = calibration_summary(settings_, r);
  EXPECT_NE(summary.find("sliding-window layers never skip and are not pooled: 1"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("prefill shape advice:"), std::string::npos);
  EXPECT_NE(summary.find("calibration does not extrapolate"), std::string::npos);
}

TEST_F(Calibrate, CacheServesTheSecondRunAndMatchesIt) {
  settings_.cache_dir = dir_ / "cache";
  FakeSource first(small_model());
  const CalibrationResult a = run(first);
  EXPECT_EQ(a.prompts_from_cache, 0);
  FakeSource second(small_model());
  const CalibrationResult b = run(second);
  EXPECT_EQ(second.calls, 0);
  EXPECT_EQ(b.prompts_from_cache, 4);
  for (std::size_t p = 0; p < a.phases.size(); ++p) {
    for (std::size_t i = 0; i < a.phases[p].pools.size(); ++i) {
      EXPECT_EQ(a.phases[p].pools[i].hist, b.phases[p].pools[i].hist);
    }
    EXPECT_EQ(a.phases[p].fit.deployed().table(), b.phases[p].fit.deployed().table());
  }
  // Another seed: other prompts, computed afresh.
  settings_.seed = 4;
  FakeSource third(small_model());
  EXPECT_EQ(run(third).prompts_from_cache, 0);
  // Prefill alone prompts with bin tokens (no decode steps): other prompts, computed afresh.
  settings_.seed = 3;
  settings_.phases = {true, false};
  FakeSource fourth(small_model());
  run(fourth);
  EXPECT_EQ(fourth.calls, 4);
}

// Checked on the calibration's own prompts, each phase's tables reach the target at every bin
// (up to the histogram's interpolation), and a flat S equals the tables at the first bin.
TEST_F(Calibrate, CheckOnTheCalibrationPromptsReachesTheTarget) {
  settings_.target = 0.5;  // 75% of the prefill tiles cannot skip in prompts this short
  FakeSource source(small_model());
  const CalibrationResult cal = run(source);
  TableCheckSettings s;
  s.phases = settings_.phases;
  s.lengths = settings_.bins;
  s.samples = settings_.samples;
  s.seed = settings_.seed;
  s.decode_steps = settings_.decode_steps;
  s.decode_splits = settings_.decode_splits;
  s.prefill_tiles = settings_.prefill_tiles;
  s.decode_tile_k = settings_.decode_tile_k;
  TableArm tables, flat;
  for (const PhaseResult& p : cal.phases) {
    tables[p.fit.phase] = p.fit.deployed().table();
    ASSERT_FALSE(tables[p.fit.phase].empty()) << to_string(p.fit.phase);
    flat[p.fit.phase] = ScaleTable({tables[p.fit.phase].rows().front()});
  }
  RulerCorpus corpus(corpus_dir_, CorpusSplit::kCalibration, word_tokenizer());
  FakeSource again(small_model());
  std::vector<std::string> lines;
  const TableCheckResult r =
      run_table_check(s, small_model(), corpus, again, cpu_stats_backend(), {tables, flat},
                      [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(r.prompts, 4);
  ASSERT_EQ(r.points.size(), 4u);  // 2 phases x 2 lengths
  for (const PhaseResult& p : cal.phases) {
    for (std::size_t i = 0; i < p.fit.deployed().bins.size(); ++i) {
      const BinFit& bin = p.fit.deployed().bins[i];
      const TableCheckPoint& pt = r.points[(p.fit.phase == Phase::kPrefill ? 0 : 2) + i];
      EXPECT_EQ(pt.length, bin.bin);
      EXPECT_EQ(pt.arms[0].visited, static_cast<std::uint64_t>(p.pools[i].hist.tiles()));
      if (!bin.scale) continue;
      EXPECT_NEAR(pt.arms[0].sparsity(), 0.5, 0.02) << to_string(p.fit.phase) << ' ' << bin.bin;
      if (i == 0) {
        EXPECT_EQ(pt.arms[1].skipped, pt.arms[0].skipped);
      }
    }
    const HoldVerdict v = hold_verdict(r, p.fit.phase, tables[p.fit.phase], 0.5, 0.02);
    EXPECT_TRUE(v.pass) << to_string(p.fit.phase) << " " << v.lowest << "-" << v.highest;
    EXPECT_GT(v.judged, 0);
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("of the work"), std::string::npos) << lines.back();
}

TEST(TableCheck, TheVerdictJudgesOnlyTheLengthsWhereTheTableSkips) {
  TableCheckResult r;
  const auto point = [](Phase p, std::int64_t length, std::uint64_t skipped) {
    return TableCheckPoint{p, length, {TileCount{1000, skipped}}};
  };
  r.points = {point(Phase::kPrefill, 1000, 0), point(Phase::kPrefill, 3000, 745),
              point(Phase::kPrefill, 5000, 768), point(Phase::kDecode, 3000, 700)};
  const ScaleTable table({{2048, 500.0}});  // dense at 1000
  HoldVerdict v = hold_verdict(r, Phase::kPrefill, table, 0.75, 0.02);
  EXPECT_TRUE(v.pass);
  EXPECT_EQ(v.judged, 2);
  EXPECT_DOUBLE_EQ(v.lowest, 0.745);
  EXPECT_DOUBLE_EQ(v.highest, 0.768);
  v = hold_verdict(r, Phase::kPrefill, table, 0.75, 0.015);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.outside, std::vector<std::int64_t>{5000});
  v = hold_verdict(r, Phase::kDecode, table, 0.75, 0.02);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.outside, std::vector<std::int64_t>{3000});
  // A table that skips nowhere checked proves nothing: FAIL.
  v = hold_verdict(r, Phase::kPrefill, ScaleTable({{8192, 500.0}}), 0.75, 0.02);
  EXPECT_FALSE(v.pass);
  EXPECT_EQ(v.judged, 0);
}

TEST(CalibrateSteps, DecodeStepsAreTheLastTokensOverTheirPrefix) {
  const ModelConfig m = small_model();
  SyntheticSpec spec{100, m.heads_q, m.heads_kv, m.head_dim};
  SyntheticQkv s = make_structured_qkv(spec);
  const LayerCapture c{0, s.q, s.k, {}};
  const DecodeSteps d = capture_decode_steps(c, m, 100, 3);
  EXPECT_EQ(d.problem.kv.seq_lens, (std::vector<std::int64_t>{98, 99, 100}));
  ASSERT_EQ(d.q.size(), 3u * 4 * 32);
  EXPECT_EQ(d.q.front(), s.q[97 * 4 * 32]);
  DecodeProblem p = d.problem;
  p.kv.v_pages = p.kv.k_pages;
  EXPECT_NO_THROW(validate(p));
  EXPECT_ERROR_HAS(capture_decode_steps(c, m, 100, 101), "decode steps");
}

class NpySource : public test::TempDirTest {
 protected:
  // One prompt's capture: 10 tokens, layers 0 and 2, q [10, 4, 32] and k [10, 2, 32].
  void write_capture(const fs::path& dir, const std::vector<std::int32_t>& tokens,
                     const std::string& sha = "") {
    fs::create_directories(dir);
    const auto n = static_cast<std::int64_t>(tokens.size());
    std::vector<std::int64_t> ids(tokens.begin(), tokens.end());
    write_npy_atomic(dir / "tokens.npy", make_npy_int(NpyDtype::kI64, {n}, ids));
    nlohmann::json layers = nlohmann::json::array();
    for (int layer : {0, 2}) {
      std::vector<double> q(n * 4 * 32, layer + 0.5), k(n * 2 * 32, layer + 0.25);
      const std::string qn = "q" + std::to_string(layer) + ".npy";
      const std::string kn = "k" + std::to_string(layer) + ".npy";
      write_npy_atomic(dir / qn, make_npy_float(NpyDtype::kF16, {n, 4, 32}, q));
      write_npy_atomic(dir / kn, make_npy_float(NpyDtype::kF32, {n, 2, 32}, k));
      layers.push_back({{"layer", layer}, {"q", qn}, {"k", kn}});
    }
    nlohmann::json manifest = {{"tokens", "tokens.npy"}, {"layers", layers}};
    if (!sha.empty()) manifest["model_sha256"] = sha;
    write_json_file(dir / "manifest.json", manifest);
  }
};

TEST_F(NpySource, FindsAPromptByItsTokens) {
  const std::vector<std::int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<std::int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11};
  write_capture(dir_ / "p0", a);
  write_capture(dir_ / "p1", b);
  const ModelConfig m = small_model();
  auto source = npy_directory_source(dir_, m, "");
  std::vector<int> layers;
  source->capture(b, std::vector<int>{2, 0}, [&](LayerCapture&& c) {
    layers.push_back(c.layer);
    ASSERT_EQ(c.q.size(), 10u * 4 * 32);
    EXPECT_EQ(c.q[5], static_cast<float>(c.layer) + 0.5f);
    EXPECT_EQ(c.k[5], static_cast<float>(c.layer) + 0.25f);
  });
  EXPECT_EQ(layers, (std::vector<int>{2, 0}));
  EXPECT_ERROR_HAS(
      source->capture(std::vector<std::int32_t>{1, 2}, std::vector<int>{0}, [](LayerCapture&&) {}),
      "no capture of this prompt");
  EXPECT_ERROR_HAS(source->capture(a, std::vector<int>{1}, [](LayerCapture&&) {}), "no layer 1");
  EXPECT_ERROR_HAS(npy_directory_source(dir_ / "none", m, ""), "no such captures directory");
}

TEST_F(NpySource, ChecksTheModelAndTheShapes) {
  write_capture(dir_ / "p0", {1, 2, 3}, "abc");
  EXPECT_ERROR_HAS(npy_directory_source(dir_, small_model(), "def"),
                   "captured from model abc, not from this one (def)");
  ModelConfig wide = small_model();
  wide.heads_q = 8;
  auto source = npy_directory_source(dir_, wide, "abc");
  EXPECT_ERROR_HAS(source->capture(std::vector<std::int32_t>{1, 2, 3}, std::vector<int>{0},
                                   [](LayerCapture&&) {}),
                   "expected (3, 8, 32)");
  fs::create_directories(dir_ / "empty");
  EXPECT_ERROR_HAS(npy_directory_source(dir_ / "empty", small_model(), ""), "no manifest.json");
}

// Transposed or flattened Q/K passed (only the element count was checked), all-NaN Q/K were
// pooled, and a manifest's malformed layer entry surfaced as a raw parser exception.
TEST_F(NpySource, RefusesTransposedFlattenedOrNonFiniteCaptures) {
  const std::vector<std::int32_t> tokens = {1, 2, 3};
  const auto capture_error = [&](const NpyArray& q) {
    write_capture(dir_ / "p0", tokens);
    write_npy_atomic(dir_ / "p0" / "q0.npy", q);
    auto source = npy_directory_source(dir_, small_model(), "");
    return test::message_of(
        [&] { source->capture(tokens, std::vector<int>{0}, [](LayerCapture&&) {}); });
  };
  const std::vector<double> values(3 * 4 * 32, 0.5);
  EXPECT_NE(capture_error(make_npy_float(NpyDtype::kF32, {4, 3, 32}, values))
                .find("q0.npy: shape (4, 3, 32), expected (3, 4, 32) (tokens, heads, head dim)"),
            std::string::npos);
  EXPECT_NE(capture_error(make_npy_float(NpyDtype::kF32, {3, 128}, values)).find("shape (3, 128)"),
            std::string::npos);
  std::vector<double> nan = values;
  nan[7] = std::nan("");
  EXPECT_NE(capture_error(make_npy_float(NpyDtype::kF32, {3, 4, 32}, nan))
                .find("q0.npy: element 7 is nan; captured Q/K must be finite"),
            std::string::npos);
  EXPECT_EQ(capture_error(make_npy_float(NpyDtype::kF32, {3, 4, 32}, values)), "");

  write_json_file(
      dir_ / "p0" / "manifest.json",
      nlohmann::json{{"tokens", "tokens.npy"},
                     {"layers", nlohmann::json::array({nlohmann::json{{"layer", 0}}})}});
  EXPECT_ERROR_HAS(npy_directory_source(dir_, small_model(), ""),
                   "manifest.json: each \"layers\" entry needs an integer \"layer\"");
  write_json_file(dir_ / "p0" / "manifest.json",
                  nlohmann::json{{"tokens", nlohmann::json::array({"a"})},
                                 {"layers", nlohmann::json::array()}});
  const std::string raw = test::message_of([&] { npy_directory_source(dir_, small_model(), ""); });
  EXPECT_NE(raw.find("manifest.json: "), std::string::npos) << raw;
  EXPECT_EQ(raw.find("[json.exception"), std::string::npos) << raw;
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks, and a message that straddles them.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  const std::string a(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(a);
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace skipsoftmax
