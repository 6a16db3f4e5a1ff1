#include "calibration_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "table_json.h"

namespace skipsoftmax {

std::vector<std::int64_t> calibration_bins(std::int64_t bin_min, std::int64_t bin_step,
                                           std::int64_t max_seqlen) {
  if (bin_step <= 0) {
    throw std::invalid_argument("--bin-step must be > 0, got " + std::to_string(bin_step));
  }
  if (bin_min <= 0) {
    throw std::invalid_argument("--bin-min must be > 0, got " + std::to_string(bin_min));
  }
  if (max_seqlen < bin_min) {
    throw std::invalid_argument("--max-seqlen " + std::to_string(max_seqlen) +
                                " is below --bin-min " + std::to_string(bin_min) +
                                ": no bin to calibrate");
  }
  const std::int64_t count = (max_seqlen - bin_min) / bin_step + 1;
  if (count > kMaxKernelTableRows) {
    // The smallest step that keeps the bins from bin_min to max_seqlen within the kernels' rows:
    // span / step + 1 <= rows, i.e. step > span / rows.
    const std::int64_t step = (max_seqlen - bin_min) / kMaxKernelTableRows + 1;
    throw std::invalid_argument(
        "--bin-min " + std::to_string(bin_min) + " to --max-seqlen " + std::to_string(max_seqlen) +
        " every " + std::to_string(bin_step) + " is " + std::to_string(count) +
        " bins; the GPU kernels take tables of at most " + std::to_string(kMaxKernelTableRows) +
        " rows: pass --bin-step " + std::to_string(step) + " or more");
  }
  std::vector<std::int64_t> bins;
  for (std::int64_t i = 0; i < count; ++i) bins.push_back(bin_min + i * bin_step);  // <= max
  return bins;
}

ScaleTable TierFit::table() const {
  std::vector<ScaleTableRow> rows;
  for (const BinFit& b : bins) {
    if (b.scale) rows.push_back({b.bin, *b.scale});
  }
  return ScaleTable(std::move(rows));
}

std::vector<std::int64_t> TierFit::unreachable_bins() const {
  std::vector<std::int64_t> out;
  for (const BinFit& b : bins) {
    if (!b.scale) out.push_back(b.bin);
  }
  return out;
}

TierFit fit_tier(const std::vector<BinPool>& pools, double target) {
  TierFit tier;
  tier.target = target;
  for (const BinPool& pool : pools) {
    BinFit fit;
    fit.bin = pool.bin;
    fit.scale = pool.hist.scale_for_sparsity(target);
    if (fit.scale) {
      fit.sparsity = pool.hist.sparsity_at(*fit.scale);
      fit.mass_share = pool.hist.mass_share_at(*fit.scale);
    } else {
      fit.sparsity = pool.hist.max_sparsity();
    }
    tier.bins.push_back(fit);
  }
  return tier;
}

const TierFit& PhaseFit::deployed() const {
  for (const TierFit& t : tiers) {
    if (std::abs(t.target - deployed_target) <= kTierTolerance) return t;
  }
  throw std::logic_error("PhaseFit: no tier for the deployed target");
}

PhaseFit fit_phase(Phase phase, const std::vector<BinPool>& pools, std::optional<double> target) {
  std::vector<double> targets(kSparsityLadder.begin(), kSparsityLadder.end());
  if (target) {
    if (!(*target > 0.0 && *target < 1.0)) {
      throw std::invalid_argument("target sparsity must lie in (0, 1)");
    }
    const bool in_ladder = std::any_of(targets.begin(), targets.end(), [&](double t) {
      return std::abs(t - *target) <= kTierTolerance;
    });
    if (!in_ladder) targets.push_back(*target);
  }
  std::sort(targets.begin(), targets.end());
  PhaseFit fit;
  fit.phase = phase;
  fit.deployed_target = target.value_or(kDefaultTarget);
  for (double t : targets) fit.tiers.push_back(fit_tier(pools, t));
  return fit;
}

nlohmann::ordered_json ShapeAdvice::to_json() const {
  using nlohmann::ordered_json;
  // JSON has no infinity: a ratio without any sparsity is recorded as null.
  const ordered_json ratio = std::isfinite(mass_ratio) ? ordered_json(mass_ratio) : ordered_json();
  return {{"verdict", verdict()},
          {"sparsity", sparsity},
          {"mass_share", mass_share},
          {"mass_ratio", ratio},
          {"mass_ratio_limit", mass_ratio_limit},
          {"requests", requests}};
}

ShapeAdvice advise_shape(const std::vector<RequestPool>& requests, const ScaleTable& deployed,
                         double mass_ratio_limit) {
  ShapeAdvice a;
  a.mass_ratio_limit = mass_ratio_limit;
  double sparsity_sum = 0.0;
  for (const RequestPool& r : requests) {
    const std::int64_t length = r.hist.min_kv_len();
    // A request the guard runs dense skips nothing and loses nothing: it says nothing about the
    // shape, and counting its zero sparsity would halve s where a tier is unreachable at a bin.
    const double lambda = deployed.lambda_for(length);
    if (lambda <= 0.0) continue;
    const double scale = lambda * static_cast<double>(length);
    sparsity_sum += r.hist.sparsity_at(scale);
    a.mass_share = std::max(a.mass_share, r.hist.mass_share_at(scale));
    ++a.requests;
  }
  a.sparsity = a.requests == 0 ? 0.0 : sparsity_sum / static_cast<double>(a.requests);
  if (a.sparsity <= 0.0) {
    a.mass_ratio = std::numeric_limits<double>::infinity();
    a.reason = a.requests == 0 ? "the deployed table runs every calibration request dense"
                               : "the deployed table skips no tile of the calibration requests";
    return a;
  }
  a.mass_ratio = a.mass_share / a.sparsity;
  a.on = a.mass_ratio < mass_ratio_limit;
  if (!a.on) {
    a.reason =
        "skipped tiles hold too much softmax mass for their share of the work: attention "
        "is too flat for skipping to pay off without accuracy loss";
  }
  return a;
}

std::vector<std::string> calibration_skip_keys(Phase phase) {
  return {scale_table_key(phase), scale_tables_key(phase), target_sparsity_key(phase),
          shape_advice_key(phase)};
}

nlohmann::ordered_json skip_key_updates(const PhaseFit& fit, const ShapeAdvice& advice) {
  const Phase phase = fit.phase;
  using nlohmann::ordered_json;
  ordered_json tiers = ordered_json::object();
  for (const TierFit& t : fit.tiers) {
    const ScaleTable table = t.table();
    if (!table.empty()) tiers[format_percent(t.target)] = ordered_json(scale_table_to_json(table));
  }
  const ScaleTable deployed = fit.deployed().table();
  ordered_json updates = ordered_json::object();
  updates[scale_table_key(phase)] = ordered_json(scale_table_to_json(deployed));
  updates[scale_tables_key(phase)] = tiers;
  updates[target_sparsity_key(phase)] =
      deployed.empty() ? ordered_json() : ordered_json(fit.deployed_target);
  updates[shape_advice_key(phase)] = advice.to_json();
  return updates;
}

std::optional<modelopt::Fit> modelopt_fit(const PhaseFit& fit) {
  std::vector<std::pair<double, double>> points;
  for (const TierFit& tier : fit.tiers) {
    const ScaleTable table = tier.table();  // alive while its rows are read
    for (const ScaleTableRow& row : table.rows()) points.emplace_back(tier.target, row.scale);
  }
  return modelopt::fit_curve(points);
}

}  // namespace skipsoftmax
