// ModelOpt's sparse_attention_config: the checkpoint block that NVIDIA ModelOpt's Hugging Face
// export writes into config.json and that TensorRT-LLM, vLLM-Omni and ModelOpt's vLLM plugin
// read. Its skip_softmax part carries, per phase, a curve from a target sparsity t to the scale
// factor S = a * exp(b * t) (lambda = S / L at KV length L, one S for every length), the targets,
// and fnmatch patterns of attention modules kept dense. Two schemas are read: the group of
// config_groups whose algorithm is skip_softmax (ModelOpt 0.46 on, what block_json writes), or
// the same fields at the top level (earlier exports and diffusion checkpoints).
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "skipsoftmax/config.h"

namespace skipsoftmax::modelopt {

inline constexpr const char* kBlockKey = "sparse_attention_config";
inline constexpr const char* kFormula = "a * exp(b * target_sparsity)";

struct Curve {
  double a = 0.0;  // the scale factor at sparsity 0 (> 0)
  double b = 0.0;
  double scale_factor(double target_sparsity) const { return a * std::exp(b * target_sparsity); }
};

// Where the skip_softmax fields of a block lie: `body` is null when it has none.
struct SkipBody {
  const nlohmann::json* body = nullptr;
  std::string where;  // its path, for messages: "sparse_attention_config[.config_groups.<name>]"
};

// Finds the skip_softmax fields; `notes` gets what is not read (groups of other algorithms, a
// config_groups without a skip_softmax group). Throws std::invalid_argument naming the path for a
// block that is not an object, malformed groups, two skip_softmax groups, or threshold_scale_factor
// or ignore beside config_groups.
SkipBody find_skip_body(const nlohmann::json& block, std::vector<std::string>& notes);

// threshold_scale_factor must be an object whose formula is kFormula (spaces aside).
void check_formula(const nlohmann::json& threshold_scale_factor, const std::string& where);
// {"a": > 0, "b": finite}.
Curve read_curve(const nlohmann::json& coefficients, const std::string& where);
// An array of fnmatch patterns.
std::vector<std::string> read_patterns(const nlohmann::json& ignore, const std::string& where);

// A language model's reading of a block: per phase the curve (threshold_scale_factor.<phase>, else
// its shared coefficients) and the target (target_sparsity as a number for both phases, or per
// phase), and the ignore patterns; all empty when the block has no skip_softmax fields (the notes
// say so). Throws like find_skip_body, and for a bad formula, curve, target or pattern.
struct LlmBlock {
  PerPhase<std::optional<Curve>> curves;
  PerPhase<std::optional<double>> targets;
  std::vector<std::string> ignore;
  std::vector<std::string> notes;
};
LlmBlock read_llm_block(const nlohmann::json& block);

// Least squares of ln S = ln a + b t over (t, S) points, the fit ModelOpt's calibration makes
// (natural exp): the curve, its R^2 in log space and the points used. nullopt with fewer than two
// distinct t or a non-positive S.
struct Fit {
  Curve curve;
  double r_squared = 0.0;
  int points = 0;
};
std::optional<Fit> fit_curve(const std::vector<std::pair<double, double>>& points);

// The block as ModelOpt 0.46 writes it: one skip_softmax group ("group_0") holding the phases
// that have a curve, and their targets; producer {"name": "skipsoftmax", "version": version}.
nlohmann::ordered_json block_json(const PerPhase<std::optional<Curve>>& curves,
                                  const PerPhase<std::optional<double>>& targets,
                                  const std::string& version);

// The checkpoint's block (`existing`, either schema) updated by a calibration of the phases
// `calibrated`: each of them takes `fresh`'s curve and target (block_json's; null: none), or
// loses its old ones where this calibration fitted none; the other phase, the skip_softmax
// group's other fields (ignore, targets, ...) and the groups of other algorithms stay. A group
// whose formula is another is replaced. The result is in the config_groups schema.
nlohmann::ordered_json merge_block(const nlohmann::ordered_json& existing,
                                   const nlohmann::ordered_json& fresh,
                                   const PerPhase<bool>& calibrated, const std::string& version);

}  // namespace skipsoftmax::modelopt
