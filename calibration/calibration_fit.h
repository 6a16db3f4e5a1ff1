// From pooled critical-scale histograms (calibration.h) to scale tables, the sparsity ladder, the
// shape advice and the checkpoint keys that record them. Pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "calibration.h"
#include "modelopt.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

// The tiers calibrated in one pass when no target is given, and the one deployed then.
inline constexpr std::array<double, 4> kSparsityLadder = {0.5, 0.6, 0.75, 0.8};
inline constexpr double kDefaultTarget = 0.75;

// bin_min, bin_min + bin_step, ... up to max_seqlen. Throws std::invalid_argument naming the flag
// (--bin-step, --bin-min, --max-seqlen) when bin_step <= 0, bin_min <= 0 or max_seqlen < bin_min.
std::vector<std::int64_t> calibration_bins(std::int64_t bin_min, std::int64_t bin_step,
                                           std::int64_t max_seqlen);

// Tiles of one bin, pooled over samples and (global) layers.
struct BinPool {
  std::int64_t bin = 0;
  CriticalHistogram hist;
};

struct BinFit {
  std::int64_t bin = 0;
  std::optional<double> scale;  // S reaching the target; nullopt: unreachable at this bin
  double sparsity = 0.0;        // pooled sparsity at S (unreachable: the most any S < L gives)
  double mass_share = 0.0;      // pooled skipped mass share at S (unreachable: 0)
};

struct TierFit {
  double target = 0.0;
  std::vector<BinFit> bins;

  // Rows of the bins that reach the target. A bin that does not is left out, so that the row below
  // it (a smaller lambda at these lengths) or the guard applies there: never a faked S.
  ScaleTable table() const;
  std::vector<std::int64_t> unreachable_bins() const;
};

// S per bin: the smallest S whose pooled sparsity reaches `target` (interpolated monotonically in
// log S, i.e. in log lambda), capped below the shortest pooled length (where the guard turns
// skipping off). For a fixed pool, S grows with the target.
TierFit fit_tier(const std::vector<BinPool>& pools, double target);

struct PhaseFit {
  Phase phase = Phase::kPrefill;
  std::vector<TierFit> tiers;  // by increasing target
  double deployed_target = kDefaultTarget;
  const TierFit& deployed() const;  // the tier of deployed_target
};

// The ladder, plus `target` when given (then deployed), else kDefaultTarget deployed.
PhaseFit fit_phase(Phase phase, const std::vector<BinPool>& pools, std::optional<double> target);

// ModelOpt's length-free curve S = a * exp(b * t) fitted to the ladder: every reached row of
// every tier is a point (tier target, S). nullopt when fewer than two tiers reach a bin.
std::optional<modelopt::Fit> modelopt_fit(const PhaseFit& fit);

// One request (calibration sample) of a phase, its tiles pooled over the global layers.
struct RequestPool {
  std::int64_t bin = 0;
  CriticalHistogram hist;
};

// The advisor: at each request's deployed S (the table's lookup at the request's length), its tile
// sparsity s and skipped mass share m. sparsity is the mean of s over requests, mass_share the
// tail (max) of m; ON when mass_share / sparsity < mass_ratio_limit: the skipped tiles hold much
// less mass than their share of the work, the A-shaped attention skipping is built for. Requests
// shorter than the table's first skippable length run dense and are left out (`requests` counts
// the others).
struct ShapeAdvice {
  bool on = false;
  double sparsity = 0.0;
  double mass_share = 0.0;
  double mass_ratio = 0.0;  // mass_share / sparsity (infinity when nothing is skipped)
  double mass_ratio_limit = 0.0;
  std::int64_t requests = 0;  // the requests the deployed table skips in
  std::string reason;         // why OFF, for the warning; empty when ON

  const char* verdict() const { return on ? "ON" : "OFF"; }
  nlohmann::ordered_json to_json() const;
};
ShapeAdvice advise_shape(const std::vector<RequestPool>& requests, const ScaleTable& deployed,
                         double mass_ratio_limit);

// The skip keys a calibration writes for one phase (config.h): the deployed table, the tiers
// that reached at least one bin, the deployed target (removed, with an empty deployed table,
// when its tier reached none) and the shape advice. For update_checkpoint_skip_keys().
nlohmann::ordered_json skip_key_updates(const PhaseFit& fit, const ShapeAdvice& advice);

// The keys skip_key_updates writes for `phase`: what a calibration replaces in a checkpoint's
// config, whatever they held before.
std::vector<std::string> calibration_skip_keys(Phase phase);

}  // namespace skipsoftmax
