// The price list of skip-softmax for one model on one GPU (price.json, docs/REPORT.md): what the
// calibration advised and deployed, and what each arm (dense, each calibrated tier) costs in time
// and accuracy at each length, with the tier to deploy for an accuracy bound.
//
// Fields are measured (times, kernel speedups, attention shares, sparsities, task scores,
// perplexities) or derived from them (end-to-end speedups, Amdahl estimates, accuracy ratios,
// recommendations). derive_price() fills in the derived ones; validate_price() checks every
// field, including that the derived ones agree with what they are derived from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "skipsoftmax/config.h"
#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

inline constexpr std::string_view kPriceSchema = "skipsoftmax-price/1";

// The accuracy bounds every price list recommends a tier for.
inline constexpr double kPriceBounds[] = {0.99, 0.97};

// A derived field agrees with its recomputation when |stored - computed| <= this * max(1,
// |computed|): loose enough for derived values rounded to 4 significant digits, tight enough to
// catch a wrong formula.
inline constexpr double kDerivedTolerance = 1e-3;

// An accuracy ratio meets a bound when ratio >= bound - kBoundSlack (ratios are quotients of
// scores such as 99/100, which are not exact in binary).
inline constexpr double kBoundSlack = 1e-9;

// End-to-end speedup of a phase when attention, `attention_share` of the dense phase's GPU time,
// runs `kernel_speedup` times faster and the rest is unchanged: 1 / (1 - share * (1 - 1/kernel)).
// Example: share 0.6, kernel 2 -> 1 / (1 - 0.3) = 1.43. Throws std::invalid_argument unless
// share lies in [0, 1] and kernel_speedup is finite and > 0.
double amdahl_speedup(double attention_share, double kernel_speedup);

// One tier's accuracy ratio (score / dense score) at each length served.
struct TierAccuracy {
  double sparsity = 0.0;
  std::vector<double> ratios;
};

// The recommendation rule: the highest-sparsity tier whose ratio meets `bound` at every length
// (see kBoundSlack); nullopt (stay dense) when none does. Returns an index into `tiers`, which
// may come in any order. Throws std::invalid_argument for a tier without ratios or a NaN ratio.
std::optional<std::size_t> recommend_tier(const std::vector<TierAccuracy>& tiers, double bound);

// Which phases an arm runs with skip-softmax.
enum class SkipScope { kNone, kPrefill, kDecode, kBoth };
const char* to_string(SkipScope scope);  // "none", "prefill", "decode", "both"
bool skips(SkipScope scope, Phase phase);

// skip_softmax_<phase>_shape_advice, as the calibration writes it into the checkpoint config.
struct ShapeAdviceRecord {
  bool on = false;                         // "verdict": "ON" or "OFF"
  double sparsity = 0.0;                   // s: mean tile sparsity at the deployed table
  double mass_share = 0.0;                 // m: tail of the skipped softmax mass share
  std::optional<double> mass_ratio;        // m / s; null when s = 0
  std::optional<double> mass_ratio_limit;  // ON iff m / s < limit
  std::optional<std::int64_t> requests;
  std::optional<std::int64_t> calibrated_max_seqlen;
  std::optional<std::string> reason;  // why OFF
};

struct LadderTier {
  std::string key;  // as spelled, "75%" or "0.75"
  double sparsity = 0.0;
  ScaleTable table;
};

struct PhaseCalibration {
  ShapeAdviceRecord advice;
  ScaleTable deployed;             // empty: the phase deploys dense
  std::vector<LadderTier> ladder;  // by increasing sparsity
  const LadderTier* find_tier(double sparsity) const;
};

// One phase at one length, in one arm.
struct PhaseMetrics {
  double speedup = 1.0;          // derived: end to end vs dense (dense TTFT / TTFT, or TPOT)
  double kernel_speedup = 1.0;   // the attention kernel's own speedup vs the dense kernel
  double attention_share = 0.0;  // attention's share of this arm's GPU time in the phase
  double amdahl = 1.0;           // derived: amdahl_speedup(dense share, kernel_speedup)
  double tile_sparsity = 0.0;    // share of KV tiles skipped
};

// Accuracy at one length; vectors follow PriceList::tasks.
struct AccuracyRecord {
  std::vector<double> scores;                      // per task, >= 0
  std::vector<std::optional<double>> task_ratios;  // derived: score / dense score (null: dense 0)
  double score = 0.0;                              // derived: mean of scores
  double ratio = 1.0;                              // derived: score / dense score
  double perplexity = 0.0;                         // > 0
  double perplexity_ratio = 1.0;                   // derived: perplexity / dense perplexity
};

struct PricePoint {
  std::int64_t length = 0;  // prompt length (prefill), KV length (decode)
  double ttft_ms = 0.0;
  double tpot_ms = 0.0;
  PerPhase<PhaseMetrics> phases;
  std::optional<AccuracyRecord> accuracy;  // exactly at PriceList::accuracy_lengths
};

struct PriceArm {
  SkipScope skip = SkipScope::kNone;
  std::optional<std::string> tier;  // ladder key; none for the dense arm
  double tier_sparsity = 0.0;       // the tier as a fraction; 0 for dense
  std::vector<PricePoint> points;   // one per PriceList::lengths
  bool dense() const { return skip == SkipScope::kNone; }
  // "dense", "75%" (both phases), "prefill 75%", "decode 75%".
  std::string label() const;
};

struct PriceRecommendation {
  double bound = 0.0;
  SkipScope skip = SkipScope::kBoth;
  std::optional<std::string> tier;  // none: stay dense
};

struct PriceList {
  bool synthetic = false;  // a fixture, not a measurement
  std::optional<std::string> note;
  std::string model_name;
  std::string architecture;
  std::optional<std::string> checkpoint;
  std::string gpu;
  std::string git_revision;
  std::string command;
  std::optional<std::string> date;
  std::vector<std::pair<std::string, nlohmann::json>> setup;  // scalar values, in file order
  PerPhase<std::optional<PhaseCalibration>> phases;
  std::vector<std::int64_t> lengths;           // strictly increasing
  std::vector<std::int64_t> accuracy_lengths;  // a non-empty subset of lengths
  std::vector<std::string> tasks;
  std::vector<PriceArm> arms;  // exactly one dense
  std::vector<PriceRecommendation> recommendations;

  const PriceArm& dense_arm() const;  // throws std::invalid_argument when there is none
};

// Fills every derived field (speedups, Amdahl estimates, accuracy and perplexity ratios,
// recommendations for kPriceBounds and every skip scope of the arms, replacing any there).
// Throws std::invalid_argument where a measured field makes them undefined (no dense arm, a
// point missing, a dense time or score of 0).
void derive_price(PriceList& price);

// Throws std::invalid_argument("<context>: <field path>: ...") naming the first violation: NaN or
// out-of-range numbers, lengths not strictly increasing, points off the lengths, accuracy off the
// accuracy lengths, tables with non-increasing bins, a ladder whose S falls from one tier to the
// next at a bin, arms naming tiers not in a skipped phase's ladder, derived fields that disagree
// with their recomputation.
void validate_price(const PriceList& price, const std::string& context);

// The calibration a checkpoint config records, as a price list carries it: for each phase with
// calibrated tiers, its shape advice, deployed table (empty: dense) and ladder. Throws
// std::invalid_argument("<context>: ...") for a phase with tiers but no shape advice, or malformed
// advice.
PerPhase<std::optional<PhaseCalibration>> calibration_from_checkpoint(
    const CheckpointConfig& checkpoint, const std::string& context);

// One arm `skipsoftmax price` measures: its scope and tier (no points yet), and the export flags
// that build its engine from the checkpoint.
struct PriceArmPlan {
  PriceArm arm;
  PerPhase<PhaseFlags> flags;
};

// The arms to price: dense first (both phases "none"), then each tier, by increasing sparsity,
// skipping in the phases whose ladder has it (the other phase "none"). `wanted` (--tiers, "75%" or
// 0.75) picks tiers; empty: every tier. Throws std::invalid_argument for a tier not calibrated (the
// message lists those there are) or given twice.
std::vector<PriceArmPlan> plan_price_arms(const PerPhase<std::optional<PhaseCalibration>>& cal,
                                          const std::vector<std::string>& wanted);

// The compact form `skipsoftmax price` records in the checkpoint config (kPriceListKey): per arm
// and length the latencies, speedups and sparsities, the accuracy ratios, the recommendations, and
// where the full price list is.
nlohmann::ordered_json price_summary_json(const PriceList& price, const std::string& price_file);

// Parses and validates; errors as above, plus missing keys, unknown keys and wrong types.
PriceList price_from_json(const nlohmann::json& j, const std::string& context);
nlohmann::ordered_json price_to_json(const PriceList& price);

// A price.json file; errors name the file.
PriceList read_price_file(const std::filesystem::path& path);

}  // namespace skipsoftmax
