// Diffusion transformers: the sparse_attention_config block that NVIDIA ModelOpt writes into a
// component's config.json (e.g. transformer/config.json), combined with the user's request.
//
// Block schemas accepted, the calibration being either `coefficients` or `prefill`:
//   {"threshold_scale_factor": {"formula": "a * exp(b * target_sparsity)",
//                               "coefficients": {"a": 1000.0, "b": 5.0}},
//    "ignore": ["blocks.0.attn1", "*.attn2"]}
//   {"config_groups": {"group_0": {"algorithm": "skip_softmax", "threshold_scale_factor": {...},
//                                  "ignore": [...]}}}
// `targets`, `target_sparsity` and `disabled_until_timestep` in the block are not read (the request
// supplies them); the resolver says so in its notes.
//
// The request sets lambda either directly (`threshold`) or through the calibration
// (`target_sparsity`: scale factor F = a * exp(b * s), lambda = F / max_kv_len, dense when
// F >= max_kv_len, the guard of a scale table). Modules matching an `ignore` pattern stay dense.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

// The user side; at most one of threshold and target_sparsity. Neither means dense.
struct DiffusionRequest {
  std::optional<double> threshold;        // lambda itself, in [0, 1)
  std::optional<double> target_sparsity;  // in [0, 1]; needs the checkpoint's calibration
  double disabled_until_timestep = 0.0;   // D in [0, 1]; 0 turns the gate off
};

// {"threshold": 0.05, "disabled_until_timestep": 0.9} or {"target_sparsity": 0.75, ...}.
// Throws std::invalid_argument for malformed JSON, an unknown key or a value of the wrong type.
DiffusionRequest parse_diffusion_request(std::string_view json_text);

// Keeps early denoising steps dense: no skipping while the published normalized timestep t > D.
// D = 0 is the sentinel "no gate" (t is never read). A pipeline that publishes no timestep (or a
// non-finite one) stays dense, and the gate warns about it once.
class TimestepGate {
 public:
  using WarningSink = std::function<void(const std::string&)>;

  // Throws std::invalid_argument for D outside [0, 1]. An empty sink writes to stderr.
  explicit TimestepGate(double disabled_until_timestep = 0.0, WarningSink warn = {});

  bool allows_skip(std::optional<double> timestep);
  double disabled_until_timestep() const { return disabled_until_; }
  bool warned() const { return warned_; }

 private:
  double disabled_until_;
  WarningSink warn_;
  bool warned_ = false;
};

// One component's resolved configuration. Not thread-safe: the gate remembers its warning.
class DiffusionSkipConfig {
 public:
  DiffusionSkipConfig(std::string component, Threshold threshold, std::vector<std::string> ignore,
                      TimestepGate gate, std::vector<std::string> notes);

  // lambda for one attention call of `module_name`; 0 means exact dense.
  double lambda_for(const std::string& module_name, std::int64_t max_kv_len,
                    std::optional<double> timestep);
  // True when an ignore pattern matches the full name or the name relative to the component
  // ("transformer.blocks.0.attn1" -> "blocks.0.attn1").
  bool is_ignored(const std::string& module_name) const;

  const std::string& component() const { return component_; }
  // Flat for a threshold request; the one-row table [[1, F]] for a target_sparsity request.
  const Threshold& threshold() const { return threshold_; }
  const std::vector<std::string>& ignore() const { return ignore_; }
  const TimestepGate& gate() const { return gate_; }
  // Lines about block keys that were present but not read.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  std::string component_;
  Threshold threshold_;
  std::vector<std::string> ignore_;
  TimestepGate gate_;
  std::vector<std::string> notes_;
};

// block_json is the sparse_attention_config object; an empty string means the checkpoint has
// none. Throws std::invalid_argument naming the problem: both threshold and target_sparsity, a
// formula other than a * exp(b * target_sparsity), target_sparsity without calibration, ...
DiffusionSkipConfig resolve_diffusion_config(std::string_view block_json,
                                             const DiffusionRequest& request, std::string component,
                                             TimestepGate::WarningSink warn = {});

// Reads <component_dir>/config.json (its sparse_attention_config may be absent); the component is
// named after the directory.
DiffusionSkipConfig load_diffusion_config(const std::filesystem::path& component_dir,
                                          const DiffusionRequest& request,
                                          TimestepGate::WarningSink warn = {});

// The same for a pipeline's secondary component (Wan 2.2's transformer_2): a config.json that is
// missing or malformed, or whose block cannot serve the request (a bad block, target_sparsity
// without calibration), leaves the component dense and says why once through `warn` (stderr when
// empty) instead of throwing. A malformed request (both threshold and target_sparsity, a value
// out of range) still throws: it is the user's, not the checkpoint's.
DiffusionSkipConfig load_secondary_diffusion_config(const std::filesystem::path& component_dir,
                                                    const DiffusionRequest& request,
                                                    TimestepGate::WarningSink warn = {});

}  // namespace skipsoftmax
