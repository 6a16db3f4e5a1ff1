// Checkpoint and engine configuration: which threshold each phase deploys, and where it came from.
//
// A checkpoint's config.json may carry, per phase (<phase> is prefill or decode):
//   skip_softmax_<phase>_scale_table      the deployed table, [[seqlen_bin, S], ...]
//   skip_softmax_<phase>_scale_tables     calibrated tiers, {"50%": table, "75%": table, ...}
//   skip_softmax_<phase>_target_sparsity  the deployed tier, 0.75 or "75%"
// and skip_softmax_<phase>_shape_advice (informational, never read by export; written by
// `skipsoftmax calibrate`), and skip_softmax_price_list (informational, written by
// `skipsoftmax price`). Every other key
// belongs to the model and is preserved wherever the checkpoint config is rewritten.
//
// `skipsoftmax export` resolves one Threshold per phase, first match wins:
//   1. --skip-softmax-<phase>-scale-table FILE|none|0, or --skip-softmax-<phase>-threshold LAMBDA;
//   2. --<phase>-target-sparsity R: tier R of skip_softmax_<phase>_scale_tables;
//   3. the checkpoint: its target_sparsity tier, else its scale_table, else dense.
// The engine's config.json then holds:
//   checkpoint_dir                  absolute path of the checkpoint
//   model_config                    the checkpoint's non-skip keys
//   skip_softmax_<phase>_scale_table or skip_softmax_<phase>_threshold  (neither: dense)
//   skip_softmax_<phase>_source     how export chose it, for people
//   weights                         the checkpoint's GGUF file: {file, bytes, mtime_ns, sha256}
//   architecture                    the model's hyper-parameters as export read them (for people
//                                   and tools; the runtime reads the GGUF file itself)
// A GGUF checkpoint directory holds config.json and one *.gguf file; export finds that file (or
// takes --weights FILE when there are several) and pins it: the runtime refuses a file whose size
// or, when its modification time changed, SHA-256 differs. --config-only exports the thresholds
// of a checkpoint without weights (no `run`).
// The runtime reads the engine config at load time, so editing it re-targets the engine.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

enum class Phase { kPrefill, kDecode };
inline constexpr std::array<Phase, 2> kPhases = {Phase::kPrefill, Phase::kDecode};
const char* to_string(Phase phase);  // "prefill", "decode"

template <typename T>
struct PerPhase {
  T prefill{};
  T decode{};
  T& operator[](Phase p) { return p == Phase::kPrefill ? prefill : decode; }
  const T& operator[](Phase p) const { return p == Phase::kPrefill ? prefill : decode; }
};

inline constexpr std::string_view kConfigFileName = "config.json";
inline constexpr std::string_view kSkipKeyPrefix = "skip_softmax_";
inline constexpr std::string_view kShapeAdviceKey = "skip_softmax_prefill_shape_advice";
inline constexpr std::string_view kDecodeShapeAdviceKey = "skip_softmax_decode_shape_advice";
// Written by `skipsoftmax price`, informational (never read by export).
inline constexpr std::string_view kPriceListKey = "skip_softmax_price_list";
inline constexpr std::string_view kCheckpointDirKey = "checkpoint_dir";
inline constexpr std::string_view kModelConfigKey = "model_config";
inline constexpr std::string_view kWeightsKey = "weights";
inline constexpr std::string_view kArchitectureKey = "architecture";
inline constexpr std::string_view kWeightsExtension = ".gguf";

std::string scale_table_key(Phase phase);      // skip_softmax_<phase>_scale_table
std::string scale_tables_key(Phase phase);     // skip_softmax_<phase>_scale_tables
std::string target_sparsity_key(Phase phase);  // skip_softmax_<phase>_target_sparsity
std::string shape_advice_key(Phase phase);     // skip_softmax_<phase>_shape_advice
std::string threshold_key(Phase phase);        // skip_softmax_<phase>_threshold (engine)
std::string source_key(Phase phase);           // skip_softmax_<phase>_source (engine)

std::string scale_table_flag(Phase phase);      // --skip-softmax-<phase>-scale-table
std::string threshold_flag(Phase phase);        // --skip-softmax-<phase>-threshold
std::string target_sparsity_flag(Phase phase);  // --<phase>-target-sparsity

// Tiers are compared numerically: "75%", "75.0%" and 0.75 name the same tier.
inline constexpr double kTierTolerance = 1e-9;

// "0.75" or "75%" -> 0.75. Throws std::invalid_argument unless the value lies in (0, 1).
double parse_target_sparsity(std::string_view text);
// 0.75 -> "75%", 0.725 -> "72.5%".
std::string format_percent(double fraction);

struct Tier {
  std::string key;  // as spelled in the checkpoint, e.g. "75%"
  double sparsity;  // the key as a fraction
  ScaleTable table;
};

struct CheckpointPhase {
  std::optional<ScaleTable> scale_table;
  std::vector<Tier> tiers;  // by increasing sparsity
  std::optional<double> target_sparsity;

  // The tier within kTierTolerance of `sparsity`, or nullptr.
  const Tier* find_tier(double sparsity) const;
  // "50%, 75%", or "none".
  std::string tier_list() const;
};

// ModelOpt's sparse_attention_config, the block TensorRT-LLM and vLLM read (its skip_softmax
// group): per phase the curve S = a * exp(b * t) from a target sparsity t to the scale factor
// (lambda = S / L at every length), the target it names, and fnmatch patterns of attention
// modules it keeps dense. `skipsoftmax calibrate` writes it beside the per-length tables.
struct ModelOptPhase {
  double a = 0.0;
  double b = 0.0;
  std::optional<double> target_sparsity;
};
struct ModelOptConfig {
  PerPhase<std::optional<ModelOptPhase>> phases;
  std::vector<std::string> ignore;
  std::vector<std::string> notes;  // parts of the block not read (groups of other algorithms)
  // Why the block's skip_softmax fields cannot be read (another formula, a malformed curve):
  // kept rather than thrown, so that calibration can replace them and export can name them; export
  // throws it only for a phase that would fall back to the block.
  std::optional<std::string> error;
};

// The key of that block in a checkpoint config.
inline constexpr std::string_view kModelOptKey = "sparse_attention_config";

struct CheckpointConfig {
  PerPhase<CheckpointPhase> phases;
  // Read when the checkpoint has the block (null counts as absent); export falls back to it for
  // a phase without tables.
  std::optional<ModelOptConfig> modelopt;
  std::optional<std::string> shape_advice_json;  // prefill; informational, never read by export
  std::optional<std::string> decode_shape_advice_json;  // the same for decode
  std::optional<std::string> price_list_json;           // skip_softmax_price_list
  std::vector<std::string> unknown_skip_keys;           // skip_softmax_* keys nothing here reads
  std::string model_config_json;                        // the non-skip keys, as a JSON object
};

// Throws std::invalid_argument("<context>: <key>: ...") for malformed JSON, a config that is not
// an object, or a malformed skip key (bad table, tier or target sparsity).
CheckpointConfig parse_checkpoint_config(std::string_view json_text, const std::string& context);
// Reads <checkpoint_dir>/config.json.
CheckpointConfig load_checkpoint_config(const std::filesystem::path& checkpoint_dir);

// Applies `updates_json`, an object of skip_softmax_* keys and sparse_attention_config (null
// removes a key), to a checkpoint config and returns the new text. Every other key and the key
// order are kept. Throws for any other update key or if the result is not a valid checkpoint
// config.
std::string merge_skip_keys(std::string_view config_json, std::string_view updates_json,
                            const std::string& context);
// The same on <checkpoint_dir>/config.json, rewritten atomically.
void update_checkpoint_skip_keys(const std::filesystem::path& checkpoint_dir,
                                 std::string_view updates_json);

// The argument of --skip-softmax-<phase>-scale-table.
struct TableFlag {
  std::string spelled;  // as given: a table file, "none" or "0"
  ScaleTable table;     // empty (dense) for "none" and "0"
};
// Reads the table file unless `arg` is "none" or "0".
TableFlag load_table_flag(const std::string& arg);

struct PhaseFlags {
  std::optional<TableFlag> scale_table{};        // level 1
  std::optional<double> threshold{};             // level 1, exclusive with scale_table
  std::optional<std::string> target_sparsity{};  // level 2, "0.75" or "75%"
};

struct ResolvedPhase {
  Threshold threshold;
  std::string source;  // e.g. "checkpoint tier 75%", "dense (no table)"
};

struct ExportPlan {
  PerPhase<ResolvedPhase> phases;
  std::vector<std::string> notes;  // one line each: overridden flags, unread checkpoint keys
};

// Cautions about the deployed tables of `phases`, one line each: a row whose S is not below its
// bin runs its lengths up to S dense and then skips at lambda = S / L close to 1, where nearly
// every tile below the running maximum is skipped (a calibrated table keeps S below its bin; a
// hand-edited one may not).
std::vector<std::string> table_cautions(const PerPhase<ResolvedPhase>& phases);

// Resolves each phase independently by the precedence above. Throws std::invalid_argument for
// conflicting flags, a malformed or unknown tier (the message lists the tiers available), or a
// checkpoint target_sparsity whose tier is missing.
ExportPlan plan_export(const CheckpointConfig& checkpoint, const PerPhase<PhaseFlags>& flags);

// The weights an engine runs, pinned at export.
struct WeightsRef {
  std::filesystem::path file;            // absolute path of the GGUF file
  std::uint64_t bytes = 0;               // its size
  std::int64_t mtime_ns = 0;             // its last write time, ns since the Unix epoch
  std::string sha256;                    // 64 lowercase hex digits
  std::string architecture_json = "{}";  // the hyper-parameters read from its metadata
};

// The engine config.json text. checkpoint_dir should be absolute; weights may be null.
std::string engine_config_json(const std::filesystem::path& checkpoint_dir,
                               const CheckpointConfig& checkpoint, const ExportPlan& plan,
                               const WeightsRef* weights = nullptr);

struct EngineConfig {
  std::filesystem::path checkpoint_dir;
  std::string model_config_json;  // "{}" when absent
  // source names the engine key the threshold came from and what export recorded.
  PerPhase<ResolvedPhase> phases;
  std::optional<WeightsRef> weights;  // absent: exported with --config-only
};

// Strict: an unknown skip_softmax_* key, a table and a threshold for one phase, a malformed table
// or a threshold outside [0, 1) throws std::invalid_argument naming the key.
EngineConfig parse_engine_config(std::string_view json_text, const std::string& context);
// Reads <engine_dir>/config.json.
EngineConfig load_engine_config(const std::filesystem::path& engine_dir);

// True when <dir>/config.json is an engine config (it has checkpoint_dir). Throws when the file is
// missing or malformed.
bool is_engine_dir(const std::filesystem::path& dir);

}  // namespace skipsoftmax
