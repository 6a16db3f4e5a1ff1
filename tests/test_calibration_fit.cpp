// Fitting scale tables from critical-scale histograms: known answers on synthetic curves, monotone
// ladders, unreachable tiers, the shape advisor on A-shaped and flat attention, and the checkpoint
// keys a calibration writes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "calibration.h"
#include "calibration_fit.h"
#include "file_io.h"
#include "skipsoftmax/config.h"
#include "synthetic.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

// `never` tiles that raise a maximum, and `spread` tiles whose critical scales are spread evenly in
// log S over [lo, hi], all of one sequence of length kv_len.
CriticalHistogram uniform_curve(std::int64_t kv_len, int never, int spread, double lo, double hi) {
  CriticalHistogram h;
  const double log_l = std::log(static_cast<double>(kv_len));
  for (int i = 0; i < never; ++i) h.add_tile(0.0, 0.0, kv_len);
  for (int i = 0; i < spread; ++i) {
    const double u = std::log(lo) + (std::log(hi) - std::log(lo)) * (i + 0.5) / spread;
    h.add_tile(u - log_l, 1e-3, kv_len);
  }
  h.add_rows(100);
  return h;
}

TEST(CalibrationFit, BinsAndTheirErrors) {
  EXPECT_EQ(calibration_bins(4096, 2048, 10000), (std::vector<std::int64_t>{4096, 6144, 8192}));
  EXPECT_EQ(calibration_bins(512, 512, 512), (std::vector<std::int64_t>{512}));
  EXPECT_ERROR_HAS(calibration_bins(4096, 0, 8192), "--bin-step must be > 0");
  EXPECT_ERROR_HAS(calibration_bins(4096, -5, 8192), "--bin-step must be > 0");
  EXPECT_ERROR_HAS(calibration_bins(0, 2048, 8192), "--bin-min must be > 0");
  EXPECT_ERROR_HAS(calibration_bins(4096, 2048, 4000), "--max-seqlen 4000 is below --bin-min 4096");
  // The kernels take 64 rows: 4k to 128k every 2k fits (63), 4k to 256k needs a step of 4096.
  EXPECT_EQ(calibration_bins(4096, 2048, 131072).size(), 63u);
  EXPECT_ERROR_HAS(calibration_bins(4096, 2048, 262144),
                   "is 127 bins; the GPU kernels take tables of at most 64 rows: pass --bin-step "
                   "4033 or more");
  EXPECT_EQ(calibration_bins(4096, 4033, 262144).size(), 64u);
  EXPECT_ERROR_HAS(calibration_bins(4096, 4032, 262144), "is 65 bins");
  EXPECT_EQ(calibration_bins(4096, 4096, 262144).size(), 64u);
  // A step near 2^62 takes the last bin within a step of 2^63: no bin past it wraps.
  const std::int64_t big = std::int64_t{1} << 62;
  EXPECT_EQ(calibration_bins(1, big, std::numeric_limits<std::int64_t>::max()),
            (std::vector<std::int64_t>{1, 1 + big}));
  EXPECT_ERROR_HAS(calibration_bins(1, 1, 100000000000), "pass --bin-step 1562500000 or more");
}

TEST(CalibrationFit, KnownAnswerOnAnEvenCurve) {
  // A quarter of the tiles never skip; the rest spread evenly in log S over [1, 100]. Sparsity s
  // needs s / 0.75 of the spread: S = 100^(s / 0.75).
  const CriticalHistogram h = uniform_curve(1000, 2500, 7500, 1.0, 100.0);
  EXPECT_NEAR(h.max_sparsity(), 0.75, 1e-12);
  for (double target : {0.1, 0.3, 0.5, 0.6, 0.7}) {
    const std::optional<double> s = h.scale_for_sparsity(target);
    ASSERT_TRUE(s) << target;
    EXPECT_NEAR(std::log(*s), std::log(100.0) * target / 0.75, 2.0 / CriticalHistogram::kPerNat)
        << target;
    EXPECT_NEAR(h.sparsity_at(*s), target, 1e-9) << target;  // the interpolation inverts exactly
  }
  EXPECT_FALSE(h.scale_for_sparsity(0.8));  // more than the skippable three quarters
  EXPECT_DOUBLE_EQ(h.sparsity_at(0.5), 0.0);
  EXPECT_DOUBLE_EQ(h.sparsity_at(200.0), 0.75);
}

TEST(CalibrationFit, TheCapIsTheShortestPooledLength) {
  // Tiles whose critical scale lies past 64 only skip at S > 64; a pool holding a sequence of
  // length 64 cannot use such S (the guard runs it dense), so the tier is unreachable there.
  CriticalHistogram h = uniform_curve(1000, 0, 100, 80.0, 90.0);
  EXPECT_TRUE(h.scale_for_sparsity(0.5));
  h.add_tile(0.0, 0.0, 64);
  EXPECT_EQ(h.min_kv_len(), 64);
  EXPECT_FALSE(h.scale_for_sparsity(0.5));
}

std::vector<BinPool> three_bins() {
  // Longer bins skip more at the same S (their far field is larger).
  return {{512, uniform_curve(512, 300, 700, 1.0, 50.0)},
          {1024, uniform_curve(1024, 200, 800, 1.0, 60.0)},
          {1536, uniform_curve(1536, 100, 900, 1.0, 70.0)}};
}

TEST(CalibrationFit, LadderTablesAreMonotoneInTheTarget) {
  const PhaseFit fit = fit_phase(Phase::kPrefill, three_bins(), std::nullopt);
  ASSERT_EQ(fit.tiers.size(), kSparsityLadder.size());
  EXPECT_DOUBLE_EQ(fit.deployed_target, 0.75);
  EXPECT_DOUBLE_EQ(fit.deployed().target, 0.75);
  for (std::size_t t = 1; t < fit.tiers.size(); ++t) {
    EXPECT_LT(fit.tiers[t - 1].target, fit.tiers[t].target);
    for (std::size_t b = 0; b < fit.tiers[t].bins.size(); ++b) {
      const BinFit& lo = fit.tiers[t - 1].bins[b];
      const BinFit& hi = fit.tiers[t].bins[b];
      if (lo.scale && hi.scale) {
        EXPECT_LT(*lo.scale, *hi.scale) << "bin " << hi.bin;
      }
      if (!lo.scale) {
        EXPECT_FALSE(hi.scale) << "a higher tier cannot reach where a lower fails";
      }
    }
  }
  // 75% is out of reach at 512 (70% skippable): left out of the table, not faked.
  const TierFit& deployed = fit.deployed();
  EXPECT_EQ(deployed.unreachable_bins(), (std::vector<std::int64_t>{512}));
  EXPECT_NEAR(deployed.bins[0].sparsity, 0.7, 1e-9);
  ASSERT_EQ(deployed.table().rows().size(), 2u);
  EXPECT_EQ(deployed.table().rows()[0].seqlen_bin, 1024);
  for (const BinFit& b : deployed.bins) {
    if (b.scale) {
      EXPECT_NEAR(b.sparsity, 0.75, 1e-9);
    }
  }
}

TEST(CalibrationFit, ExplicitTargetJoinsTheLadderAndIsDeployed) {
  const PhaseFit fit = fit_phase(Phase::kDecode, three_bins(), 0.65);
  ASSERT_EQ(fit.tiers.size(), kSparsityLadder.size() + 1);
  EXPECT_DOUBLE_EQ(fit.deployed().target, 0.65);
  EXPECT_EQ(fit_phase(Phase::kDecode, three_bins(), 0.6).tiers.size(), kSparsityLadder.size());
  EXPECT_THROW(fit_phase(Phase::kDecode, three_bins(), 1.0), std::invalid_argument);
}

// One request: a causal prefill of synthetic structure, pooled over its heads.
RequestPool request(const SyntheticSpec& shape, std::int64_t len, std::uint64_t seed) {
  SyntheticSpec spec = shape;
  spec.tokens = len;
  spec.num_heads_q = 2;
  spec.num_heads_kv = 1;
  spec.head_dim = 32;
  spec.seed = seed;
  const SyntheticQkv s = make_structured_qkv(spec);
  PrefillProblem p;
  p.q = s.q.data();
  p.k = s.k.data();
  p.num_heads_q = 2;
  p.num_heads_kv = 1;
  p.head_dim = 32;
  p.cu_seqlens_q = {0, len};
  p.cu_seqlens_k = {0, len};
  p.causal = true;
  StatsOptions so;
  so.tiles = {16, 32, KvOrder::kSinkThenReverse};
  RequestPool r;
  r.bin = len;
  for (const CriticalHistogram& h : sequence_histograms(prefill_tile_stats(p, so))) {
    r.hist.merge(h);
  }
  return r;
}

ShapeAdvice advice_for(const SyntheticSpec& shape) {
  std::vector<RequestPool> requests;
  BinPool pool{1024, {}};
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    requests.push_back(request(shape, 1024, seed));
    pool.hist.merge(requests.back().hist);
  }
  const double target = std::min(0.5, 0.8 * pool.hist.max_sparsity());
  const TierFit tier = fit_tier({pool}, target);
  EXPECT_TRUE(tier.bins[0].scale) << "target " << target;
  return advise_shape(requests, tier.table(), 0.3);
}

// ModelOpt's curve over the ladder: every reached row is a point (target, S); an unreachable bin
// adds none, and a ladder reaching one tier gives no curve.
TEST(CalibrationFit, ModelOptCurvePoolsTheLaddersRows) {
  const auto bin_fit = [](std::int64_t bin, std::optional<double> scale) {
    BinFit b;
    b.bin = bin;
    b.scale = scale;
    return b;
  };
  PhaseFit fit;
  for (const double t : {0.5, 0.75}) {
    TierFit tier;
    tier.target = t;
    const double s = 10.0 * std::exp(4.0 * t);
    tier.bins = {bin_fit(4096, s), bin_fit(6144, 1.2 * s)};
    fit.tiers.push_back(tier);
  }
  fit.tiers.back().bins.push_back(bin_fit(8192, std::nullopt));
  const std::optional<modelopt::Fit> f = modelopt_fit(fit);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->points, 4);
  EXPECT_NEAR(f->curve.b, 4.0, 1e-12);  // both bins move by the same factor
  EXPECT_NEAR(f->curve.a, 10.0 * std::sqrt(1.2), 1e-9);
  fit.tiers.pop_back();
  EXPECT_FALSE(modelopt_fit(fit));
}

TEST(CalibrationFit, AdvisorSaysOnForAShapedAndOffForFlatAttention) {
  const ShapeAdvice a_shaped = advice_for({});  // sink, local band, quiet far field
  EXPECT_TRUE(a_shaped.on) << a_shaped.to_json().dump();
  EXPECT_LT(a_shaped.mass_ratio, 0.3);
  EXPECT_GT(a_shaped.sparsity, 0.3);
  EXPECT_EQ(a_shaped.requests, 3);
  EXPECT_TRUE(a_shaped.reason.empty());

  SyntheticSpec flat;
  flat.sink = 0.0;
  flat.local = 0.0;
  flat.noise = 1.0;
  const ShapeAdvice f = advice_for(flat);
  EXPECT_FALSE(f.on) << f.to_json().dump();
  EXPECT_GE(f.mass_ratio, 0.3);
  EXPECT_FALSE(f.reason.empty());

  // Nothing skipped (a dense table): OFF, with the ratio recorded as null.
  const ShapeAdvice none = advise_shape({request({}, 1024, 1)}, ScaleTable(), 0.3);
  EXPECT_FALSE(none.on);
  EXPECT_EQ(none.requests, 0);
  EXPECT_TRUE(none.to_json()["mass_ratio"].is_null());
}

// A request shorter than the deployed table's first bin runs dense: it is left out of s and m
// instead of halving s (as when a tier is unreachable at the first bin).
TEST(CalibrationFit, AdvisorLeavesOutRequestsTheGuardRunsDense) {
  std::vector<RequestPool> requests;
  BinPool pool{1024, {}};
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    requests.push_back(request({}, 1024, seed));
    pool.hist.merge(requests.back().hist);
  }
  const TierFit tier = fit_tier({pool}, std::min(0.5, 0.8 * pool.hist.max_sparsity()));
  const ShapeAdvice skipping = advise_shape(requests, tier.table(), 0.3);
  for (std::uint64_t seed = 4; seed <= 6; ++seed) requests.push_back(request({}, 512, seed));
  const ShapeAdvice with_short = advise_shape(requests, tier.table(), 0.3);
  EXPECT_EQ(with_short.requests, 3);
  EXPECT_DOUBLE_EQ(with_short.sparsity, skipping.sparsity);
  EXPECT_DOUBLE_EQ(with_short.mass_share, skipping.mass_share);
  EXPECT_EQ(with_short.on, skipping.on);
}

class CalibrationConfig : public test::TempDirTest {};

TEST_F(CalibrationConfig, KeysRoundTripAndKeepTheModelsKeys) {
  std::ofstream(dir_ / "config.json") << R"({
  "hidden_size": 576,
  "skip_softmax_decode_scale_table": [[64, 10]],
  "rope_theta": 100000,
  "skip_softmax_prefill_scale_tables": {"90%": [[8, 1]]}
})";
  const PhaseFit fit = fit_phase(Phase::kPrefill, three_bins(), std::nullopt);
  ShapeAdvice advice;
  advice.on = true;
  advice.sparsity = 0.75;
  advice.mass_share = 0.01;
  advice.mass_ratio = 0.01 / 0.75;
  advice.mass_ratio_limit = 0.3;
  update_checkpoint_skip_keys(dir_, skip_key_updates(fit, advice).dump());

  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(read_text_file(dir_ / "config.json"));
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_EQ(keys[0], "hidden_size");
  EXPECT_EQ(keys[1], "skip_softmax_decode_scale_table");  // the other phase is untouched
  EXPECT_EQ(keys[2], "rope_theta");
  EXPECT_EQ(j["skip_softmax_decode_scale_table"], nlohmann::json::parse("[[64, 10]]"));
  EXPECT_EQ(j["skip_softmax_prefill_shape_advice"]["verdict"], "ON");

  const CheckpointConfig c = load_checkpoint_config(dir_);
  const CheckpointPhase& p = c.phases.prefill;
  ASSERT_EQ(p.tiers.size(), 4u);  // the stale 90% tier is replaced by the new ladder
  EXPECT_EQ(p.tier_list(), "50%, 60%, 75%, 80%");
  EXPECT_EQ(p.target_sparsity, 0.75);
  EXPECT_EQ(p.scale_table, fit.deployed().table());
  EXPECT_EQ(p.find_tier(0.5)->table, fit.tiers[0].table());
  ASSERT_TRUE(c.shape_advice_json);
  EXPECT_TRUE(c.unknown_skip_keys.empty());
  EXPECT_EQ(plan_export(c, {}).phases.prefill.threshold, Threshold::table(fit.deployed().table()));
}

TEST(CalibrationKeys, AreTheKeysTheUpdatesWrite) {
  const PhaseFit fit = fit_phase(Phase::kDecode, three_bins(), std::nullopt);
  const nlohmann::ordered_json updates = skip_key_updates(fit, ShapeAdvice{});
  std::vector<std::string> written;
  for (const auto& item : updates.items()) written.push_back(item.key());
  EXPECT_EQ(written, calibration_skip_keys(Phase::kDecode));
}

TEST_F(CalibrationConfig, UnreachableDeployedTierDeploysDenseAndDropsTheTarget) {
  std::ofstream(dir_ / "config.json") << R"({"skip_softmax_decode_target_sparsity": "60%",
            "skip_softmax_decode_scale_tables": {"60%": [[64, 10]]}})";
  // Only a tenth of the tiles can ever skip: no tier of the ladder is reachable.
  const PhaseFit fit =
      fit_phase(Phase::kDecode, {{512, uniform_curve(512, 900, 100, 1.0, 50.0)}}, std::nullopt);
  update_checkpoint_skip_keys(dir_, skip_key_updates(fit, ShapeAdvice{}).dump());
  const CheckpointConfig c = load_checkpoint_config(dir_);
  EXPECT_FALSE(c.phases.decode.target_sparsity);
  EXPECT_TRUE(c.phases.decode.tiers.empty());
  EXPECT_EQ(c.phases.decode.scale_table, ScaleTable());
  ASSERT_TRUE(c.decode_shape_advice_json);
  EXPECT_TRUE(plan_export(c, {}).phases.decode.threshold.never_skips());
}

}  // namespace
}  // namespace skipsoftmax
