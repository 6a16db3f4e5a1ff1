#include "skipsoftmax/diffusion.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "file_io.h"
#include "modelopt.h"
#include "skipsoftmax/schedule.h"

namespace skipsoftmax {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using modelopt::kBlockKey;
using Calibration = modelopt::Curve;  // scale factor F = a * exp(b * target_sparsity)

std::invalid_argument error_in(const std::string& where, const std::string& what) {
  return std::invalid_argument(where + ": " + what);
}

// What the block contributes: the calibrated curve (if any), the ignore patterns, notes.
struct BlockContents {
  std::optional<Calibration> calibration;
  std::vector<std::string> ignore;
  std::vector<std::string> notes;
};

Calibration read_calibration(const json& tsf, const std::string& where,
                             std::vector<std::string>& notes) {
  modelopt::check_formula(tsf, where);
  const bool has_coefficients = tsf.contains("coefficients");
  const bool has_prefill = tsf.contains("prefill");
  if (has_coefficients == has_prefill) {
    throw error_in(where, "expected exactly one of coefficients and prefill holding a and b");
  }
  if (tsf.contains("decode")) {
    notes.push_back(where + ".decode is not read: diffusion attention has no decode phase");
  }
  const char* key = has_coefficients ? "coefficients" : "prefill";
  return modelopt::read_curve(tsf.at(key), where + "." + key);
}

void note_unread_keys(const json& body, const std::string& where, BlockContents& contents) {
  for (const char* key : {"target_sparsity", "disabled_until_timestep"}) {
    if (body.contains(key)) {
      contents.notes.push_back(where + "." + key + " = " + body.at(key).dump() +
                               " is not read: the request supplies " + key);
    }
  }
  if (body.contains("targets")) {
    contents.notes.push_back(where + ".targets is not read: every attention module that no " +
                             "ignore pattern matches may skip");
  }
}

BlockContents read_block(const json& block) {
  BlockContents contents;
  // The block's own top-level keys beside config_groups first (ModelOpt writes none of them),
  // then the groups that are not read, then the skip_softmax group's.
  if (block.is_object() && block.contains("config_groups")) {
    note_unread_keys(block, kBlockKey, contents);
  }
  const modelopt::SkipBody skip = modelopt::find_skip_body(block, contents.notes);
  if (skip.body == nullptr) return contents;
  const json& body = *skip.body;
  if (body.contains("threshold_scale_factor")) {
    contents.calibration = read_calibration(body.at("threshold_scale_factor"),
                                            skip.where + ".threshold_scale_factor", contents.notes);
  }
  if (body.contains("ignore")) {
    contents.ignore = modelopt::read_patterns(body.at("ignore"), skip.where + ".ignore");
  }
  note_unread_keys(body, skip.where, contents);
  return contents;
}

Threshold requested_threshold(const DiffusionRequest& request,
                              const std::optional<Calibration>& calibration) {
  if (request.threshold) {
    try {
      return Threshold::flat(*request.threshold);
    } catch (const std::invalid_argument& e) {
      throw error_in("threshold", e.what());
    }
  }
  if (!request.target_sparsity) return Threshold::dense();
  const double s = *request.target_sparsity;  // in [0, 1]: check_request
  if (!calibration) {
    throw std::invalid_argument(
        "target_sparsity needs the checkpoint's calibration (" + std::string(kBlockKey) +
        " threshold_scale_factor) and this checkpoint has none; set threshold (lambda in [0, 1)) "
        "instead");
  }
  const double factor = calibration->a * std::exp(calibration->b * s);
  try {
    // lambda = F / L, dense when F >= L: exactly the one-row table [[1, F]].
    return Threshold::table(ScaleTable({{1, factor}}));
  } catch (const std::invalid_argument& e) {
    throw error_in("target_sparsity scale factor a * exp(b * s)", e.what());
  }
}

// The request's own errors, whatever the checkpoint holds.
void check_request(const DiffusionRequest& request) {
  if (request.threshold && request.target_sparsity) {
    throw std::invalid_argument(
        "the request sets both threshold and target_sparsity; they are two ways to the same "
        "lambda, set one");
  }
  if (request.target_sparsity &&
      !(*request.target_sparsity >= 0.0 && *request.target_sparsity <= 1.0)) {
    std::ostringstream msg;
    msg << "target_sparsity " << *request.target_sparsity << " is outside [0, 1]";
    throw std::invalid_argument(msg.str());
  }
  if (request.threshold) requested_threshold(request, std::nullopt);  // its range
  validate_cutoff(request.disabled_until_timestep);
}

DiffusionSkipConfig resolve(const json* block, const DiffusionRequest& request,
                            std::string component, TimestepGate::WarningSink warn) {
  check_request(request);
  TimestepGate gate(request.disabled_until_timestep, std::move(warn));
  BlockContents contents = block ? read_block(*block) : BlockContents{};
  Threshold threshold = requested_threshold(request, contents.calibration);
  return DiffusionSkipConfig(std::move(component), std::move(threshold), std::move(contents.ignore),
                             std::move(gate), std::move(contents.notes));
}

double number_or_throw(const json& value, const std::string& key) {
  if (!value.is_number()) {
    throw error_in("diffusion request: " + key,
                   "expected a number, got " + std::string(value.type_name()));
  }
  return value.get<double>();
}

}  // namespace

DiffusionRequest parse_diffusion_request(std::string_view json_text) {
  const json j = parse_json_text(json_text, "diffusion request");
  if (!j.is_object()) throw error_in("diffusion request", "expected a JSON object");
  DiffusionRequest request;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key == "threshold") {
      request.threshold = number_or_throw(item.value(), key);
    } else if (key == "target_sparsity") {
      request.target_sparsity = number_or_throw(item.value(), key);
    } else if (key == "disabled_until_timestep") {
      request.disabled_until_timestep = number_or_throw(item.value(), key);
    } else {
      throw error_in(
          "diffusion request",
          "unknown key " + key + " (known: threshold, target_sparsity, disabled_until_timestep)");
    }
  }
  return request;
}

TimestepGate::TimestepGate(double disabled_until_timestep, WarningSink warn)
    : disabled_until_(disabled_until_timestep), warn_(std::move(warn)) {
  validate_cutoff(disabled_until_);
}

bool TimestepGate::allows_skip(std::optional<double> timestep) {
  if (disabled_until_ == 0.0) return true;  // the sentinel: no gate, t is not read
  if (timestep && std::isfinite(*timestep)) return !dense_at_timestep(*timestep, disabled_until_);
  if (!warned_) {
    warned_ = true;
    std::ostringstream msg;
    msg << "disabled_until_timestep=" << disabled_until_
        << " is set but the pipeline publishes no timestep; attention stays dense";
    if (warn_) {
      warn_(msg.str());
    } else {
      std::cerr << "skipsoftmax: warning: " << msg.str() << '\n';
    }
  }
  return false;
}

DiffusionSkipConfig::DiffusionSkipConfig(std::string component, Threshold threshold,
                                         std::vector<std::string> ignore, TimestepGate gate,
                                         std::vector<std::string> notes)
    : component_(std::move(component)),
      threshold_(std::move(threshold)),
      ignore_(std::move(ignore)),
      gate_(std::move(gate)),
      notes_(std::move(notes)) {}

double DiffusionSkipConfig::lambda_for(const std::string& module_name, std::int64_t max_kv_len,
                                       std::optional<double> timestep) {
  if (threshold_.never_skips() || is_ignored(module_name)) return 0.0;
  if (!gate_.allows_skip(timestep)) return 0.0;
  return threshold_.lambda_for(max_kv_len);
}

bool DiffusionSkipConfig::is_ignored(const std::string& module_name) const {
  const std::string prefix = component_ + ".";
  const bool prefixed = !component_.empty() && module_name.starts_with(prefix);
  const std::string relative = prefixed ? module_name.substr(prefix.size()) : module_name;
  // FNM_NOESCAPE: ModelOpt writes Python fnmatch patterns, which have no escape character.
  const auto matches = [](const std::string& pattern, const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), FNM_NOESCAPE) == 0;
  };
  return std::any_of(ignore_.begin(), ignore_.end(), [&](const std::string& pattern) {
    return matches(pattern, module_name) || matches(pattern, relative);
  });
}

DiffusionSkipConfig resolve_diffusion_config(std::string_view block_json,
                                             const DiffusionRequest& request, std::string component,
                                             TimestepGate::WarningSink warn) {
  if (block_json.empty()) return resolve(nullptr, request, std::move(component), std::move(warn));
  const json block = parse_json_text(block_json, kBlockKey);
  return resolve(&block, request, std::move(component), std::move(warn));
}

DiffusionSkipConfig load_diffusion_config(const fs::path& component_dir,
                                          const DiffusionRequest& request,
                                          TimestepGate::WarningSink warn) {
  fs::path dir = fs::absolute(component_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "transformer/" names transformer
  const fs::path path = component_dir / "config.json";
  const json config = read_json_file(path);
  if (!config.is_object()) throw error_in(path.string(), "expected a JSON object");
  const bool has_block = config.contains(kBlockKey) && !config.at(kBlockKey).is_null();
  try {
    return resolve(has_block ? &config.at(kBlockKey) : nullptr, request, dir.filename().string(),
                   std::move(warn));
  } catch (const std::invalid_argument& e) {
    throw error_in(path.string(), e.what());
  }
}

DiffusionSkipConfig load_secondary_diffusion_config(const fs::path& component_dir,
                                                    const DiffusionRequest& request,
                                                    TimestepGate::WarningSink warn) {
  check_request(request);  // the user's errors still throw
  try {
    return load_diffusion_config(component_dir, request, warn);
  } catch (const std::exception& e) {
    fs::path dir = fs::absolute(component_dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();
    const std::string component = dir.filename().string();
    const std::string message = std::string(e.what()) + "; " + component + " stays dense";
    if (warn) {
      warn(message);
    } else {
      std::cerr << "skipsoftmax: warning: " << message << '\n';
    }
    return DiffusionSkipConfig(component, Threshold::dense(), {},
                               TimestepGate(request.disabled_until_timestep, std::move(warn)),
                               {message});
  }
}

}  // namespace skipsoftmax
