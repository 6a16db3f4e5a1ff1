#include "skipsoftmax/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "file_io.h"
#include "modelopt.h"
#include "table_json.h"

namespace skipsoftmax {

namespace fs = std::filesystem;
// Ordered, so that rewriting a config keeps its key order.
using ordered_json = nlohmann::ordered_json;

namespace {

std::string phase_key(Phase phase, const char* suffix) {
  return std::string(kSkipKeyPrefix) + to_string(phase) + "_" + suffix;
}

std::invalid_argument error_in(const std::string& where, const std::string& what) {
  return std::invalid_argument(where + ": " + what);
}

ordered_json parse_json_object(std::string_view text, const std::string& context) {
  ordered_json j = parse_json_text<ordered_json>(text, context);
  if (!j.is_object()) {
    throw error_in(context, "expected a JSON object, got " + std::string(j.type_name()));
  }
  return j;
}

// The whole string as a decimal number, or nullopt.
std::optional<double> parse_number(std::string_view text) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end) return std::nullopt;
  return value;
}

// The skip_softmax part of a checkpoint's ModelOpt block; a part it cannot read is kept as the
// error (see ModelOptConfig::error).
ModelOptConfig read_modelopt(const ordered_json& value, const std::string& context) {
  ModelOptConfig out;
  modelopt::LlmBlock block;
  try {
    block = modelopt::read_llm_block(nlohmann::json::parse(value.dump()));
  } catch (const std::invalid_argument& e) {
    out.error = context + ": " + e.what();
    return out;
  }
  for (Phase phase : kPhases) {
    if (block.curves[phase]) {
      out.phases[phase] =
          ModelOptPhase{block.curves[phase]->a, block.curves[phase]->b, block.targets[phase]};
    }
  }
  out.ignore = std::move(block.ignore);
  out.notes = std::move(block.notes);
  return out;
}

// Shortest text that reads back as the same double.
std::string format_number(double value) {
  char buf[32];
  const auto [stop, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, stop);
}

double checked_fraction(double fraction, std::string_view spelled) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    throw std::invalid_argument("target sparsity " + std::string(spelled) +
                                " is not a fraction in (0, 1) or a percent such as \"75%\"");
  }
  return fraction;
}

// A table meant for the kernels: at most kMaxKernelTableRows rows (the kernels refuse longer ones
// at every launch, so a config holding one is refused when it is read).
ScaleTable kernel_table(ScaleTable table, const std::string& where) {
  if (table.rows().size() > static_cast<std::size_t>(kMaxKernelTableRows)) {
    throw std::invalid_argument(where + ": " + std::to_string(table.rows().size()) +
                                " rows; the GPU kernels take at most " +
                                std::to_string(kMaxKernelTableRows) +
                                " (calibrate with a wider --bin-step)");
  }
  return table;
}

ScaleTable table_from(const ordered_json& value, const std::string& where) {
  return kernel_table(scale_table_from_json(nlohmann::json(value), where), where);
}

double sparsity_from(const ordered_json& value, const std::string& where) {
  try {
    if (value.is_string()) return parse_target_sparsity(value.get<std::string>());
    if (value.is_number()) return checked_fraction(value.get<double>(), value.dump());
  } catch (const std::invalid_argument& e) {
    throw error_in(where, e.what());
  }
  throw error_in(where, "expected a number such as 0.75 or a string such as \"75%\", got " +
                            std::string(value.type_name()));
}

std::vector<Tier> tiers_from(const ordered_json& value, const std::string& where) {
  if (!value.is_object()) {
    throw error_in(where,
                   "expected an object of tiers such as {\"75%\": [[seqlen_bin, S], ...]}, got " +
                       std::string(value.type_name()));
  }
  std::vector<Tier> tiers;
  for (const auto& item : value.items()) {
    const std::string tier_where = where + ": tier \"" + item.key() + "\"";
    double sparsity = 0.0;
    try {
      sparsity = parse_target_sparsity(item.key());
    } catch (const std::invalid_argument& e) {
      throw error_in(tier_where, e.what());
    }
    tiers.push_back({item.key(), sparsity, table_from(item.value(), tier_where)});
  }
  std::sort(tiers.begin(), tiers.end(),
            [](const Tier& a, const Tier& b) { return a.sparsity < b.sparsity; });
  for (std::size_t i = 1; i < tiers.size(); ++i) {
    if (tiers[i].sparsity - tiers[i - 1].sparsity <= kTierTolerance) {
      throw error_in(where, "tiers \"" + tiers[i - 1].key + "\" and \"" + tiers[i].key +
                                "\" name the same sparsity");
    }
  }
  return tiers;
}

// Stores one per-phase checkpoint key; false when `key` is none of them.
bool read_phase_key(const std::string& key, const ordered_json& value, const std::string& context,
                    PerPhase<CheckpointPhase>& phases) {
  const std::string where = context + ": " + key;
  for (Phase phase : kPhases) {
    CheckpointPhase& p = phases[phase];
    if (key == scale_table_key(phase)) {
      p.scale_table = table_from(value, where);
    } else if (key == scale_tables_key(phase)) {
      p.tiers = tiers_from(value, where);
    } else if (key == target_sparsity_key(phase)) {
      p.target_sparsity = sparsity_from(value, where);
    } else {
      continue;
    }
    return true;
  }
  return false;
}

// Level 1: an explicit table or flat threshold; nullopt when neither flag is given.
std::optional<ResolvedPhase> explicit_choice(Phase phase, const PhaseFlags& flags) {
  if (flags.scale_table && flags.threshold) {
    throw std::invalid_argument(scale_table_flag(phase) + " and " + threshold_flag(phase) +
                                " are exclusive: give one of them");
  }
  if (flags.scale_table) {
    return ResolvedPhase{Threshold::table(flags.scale_table->table),
                         scale_table_flag(phase) + " " + flags.scale_table->spelled};
  }
  if (flags.threshold) {
    const std::string spelled = threshold_flag(phase) + " " + format_number(*flags.threshold);
    try {
      return ResolvedPhase{Threshold::flat(*flags.threshold), spelled};
    } catch (const std::invalid_argument& e) {
      throw error_in(threshold_flag(phase), e.what());
    }
  }
  return std::nullopt;
}

const Tier& tier_or_throw(const CheckpointPhase& checkpoint, double sparsity,
                          const std::string& asked_by, Phase phase) {
  const Tier* tier = checkpoint.find_tier(sparsity);
  if (!tier) {
    throw error_in(asked_by, "no tier " + format_percent(sparsity) + " in the checkpoint's " +
                                 scale_tables_key(phase) +
                                 "; tiers available: " + checkpoint.tier_list());
  }
  return *tier;
}

// The phase's ModelOpt curve at target t, as the one-row table [[1, S]]: lambda = S / L, dense
// where S >= L, as TensorRT-LLM applies it.
ResolvedPhase modelopt_choice(Phase phase, const ModelOptPhase& curve, double t,
                              const std::string& asked_by) {
  const double s = curve.a * std::exp(curve.b * t);
  std::ostringstream source;
  source << asked_by << " on " << kModelOptKey << " " << to_string(phase)
         << " a * exp(b * t) = " << format_number(s) << " at t = " << format_percent(t);
  try {
    return {Threshold::table(ScaleTable({{1, s}})), source.str()};
  } catch (const std::invalid_argument& e) {
    throw error_in(std::string(kModelOptKey), e.what());
  }
}

// The phase's curve in the checkpoint's ModelOpt block, read because the phase falls back to it:
// a block export could not read throws here, `why` naming what asked for it.
std::optional<ModelOptPhase> modelopt_curve(const CheckpointConfig& config, Phase phase,
                                            const std::string& why) {
  if (!config.modelopt) return std::nullopt;
  if (config.modelopt->error) {
    throw std::invalid_argument(*config.modelopt->error + " (" + why + ")");
  }
  return config.modelopt->phases[phase];
}

// Level 3: what the checkpoint deploys by itself.
ResolvedPhase checkpoint_choice(Phase phase, const CheckpointConfig& config,
                                std::vector<std::string>& notes) {
  const CheckpointPhase& checkpoint = config.phases[phase];
  if (checkpoint.target_sparsity) {
    const Tier& tier = tier_or_throw(checkpoint, *checkpoint.target_sparsity,
                                     "checkpoint " + target_sparsity_key(phase), phase);
    return {Threshold::table(tier.table), "checkpoint tier " + tier.key};
  }
  if (checkpoint.scale_table) {
    return {Threshold::table(*checkpoint.scale_table), "checkpoint " + scale_table_key(phase)};
  }
  const std::optional<ModelOptPhase> curve =
      modelopt_curve(config, phase,
                     std::string(to_string(phase)) +
                         " has no table of its own, so export would read the block: fix it, or "
                         "give the phase a table");
  if (curve && curve->target_sparsity) {
    return modelopt_choice(phase, *curve, *curve->target_sparsity, "checkpoint target");
  }
  if (curve) {
    notes.push_back(std::string(kModelOptKey) + " has a " + to_string(phase) +
                    " curve but no target_sparsity for it: " + to_string(phase) +
                    " stays dense (pass " + target_sparsity_flag(phase) + ")");
  }
  return {Threshold::dense(), "dense (no table)"};
}

ResolvedPhase resolve_phase(Phase phase, const PhaseFlags& flags, const CheckpointConfig& config,
                            std::vector<std::string>& notes) {
  const CheckpointPhase& checkpoint = config.phases[phase];
  std::optional<double> asked_sparsity;
  std::string asked_by;
  if (flags.target_sparsity) {
    asked_by = target_sparsity_flag(phase) + " " + *flags.target_sparsity;
    try {
      asked_sparsity = parse_target_sparsity(*flags.target_sparsity);
    } catch (const std::invalid_argument& e) {
      throw error_in(target_sparsity_flag(phase), e.what());
    }
  }
  if (std::optional<ResolvedPhase> chosen = explicit_choice(phase, flags)) {
    if (asked_sparsity) notes.push_back(asked_by + " is overridden by " + chosen->source);
    chosen->source = "flag " + chosen->source;
    return *chosen;
  }
  if (asked_sparsity) {
    // Tiers first; a checkpoint without any reads ModelOpt's curve at the asked sparsity.
    if (checkpoint.tiers.empty()) {
      if (const auto curve = modelopt_curve(config, phase, "asked for by " + asked_by)) {
        return modelopt_choice(phase, *curve, *asked_sparsity, "flag " + asked_by);
      }
    }
    const Tier& tier = tier_or_throw(checkpoint, *asked_sparsity, asked_by, phase);
    return {Threshold::table(tier.table),
            "flag " + asked_by + " (checkpoint tier " + tier.key + ")"};
  }
  return checkpoint_choice(phase, config, notes);
}

fs::path config_path(const fs::path& dir, const char* what) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (fs::exists(dir, ec)) {
      throw std::runtime_error(dir.string() + ": is a file; give the " + std::string(what) +
                               " directory that holds it");
    }
    throw std::runtime_error(dir.string() + ": no such " + std::string(what) + " directory");
  }
  return dir / kConfigFileName;
}

void reject_unknown_engine_keys(const ordered_json& j, const std::string& context) {
  std::vector<std::string> known;
  for (Phase phase : kPhases) {
    known.insert(known.end(), {scale_table_key(phase), threshold_key(phase), source_key(phase)});
  }
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (!key.starts_with(kSkipKeyPrefix)) continue;
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw error_in(context, "unknown key " + key + " (an engine config knows " + list + ")");
  }
}

Threshold lambda_from(const ordered_json& value, const std::string& where) {
  if (!value.is_number()) {
    throw error_in(where, "expected a number in [0, 1), got " + std::string(value.type_name()));
  }
  try {
    return Threshold::flat(value.get<double>());
  } catch (const std::invalid_argument& e) {
    throw error_in(where, e.what());
  }
}

ResolvedPhase engine_phase(const ordered_json& j, Phase phase, const std::string& context) {
  const std::string table_key = scale_table_key(phase);
  const std::string lambda_key = threshold_key(phase);
  const bool has_table = j.contains(table_key);
  const bool has_lambda = j.contains(lambda_key);
  if (has_table && has_lambda) {
    throw error_in(context, "both " + table_key + " and " + lambda_key + " are set; keep one");
  }
  ResolvedPhase r;
  if (has_table) {
    r = {Threshold::table(table_from(j.at(table_key), context + ": " + table_key)),
         "engine config " + table_key};
  } else if (has_lambda) {
    r = {lambda_from(j.at(lambda_key), context + ": " + lambda_key), "engine config " + lambda_key};
  } else {
    r.source = "dense: the engine config has no " + table_key + " or " + lambda_key;
  }
  const std::string recorded_key = source_key(phase);
  if (j.contains(recorded_key)) {
    const ordered_json& recorded = j.at(recorded_key);
    if (!recorded.is_string()) throw error_in(context + ": " + recorded_key, "expected a string");
    r.source += "; export recorded: " + recorded.get<std::string>();
  }
  return r;
}

ordered_json weights_to_json(const WeightsRef& w) {
  return {{"file", w.file.string()},
          {"bytes", w.bytes},
          {"mtime_ns", w.mtime_ns},
          {"sha256", w.sha256}};
}

WeightsRef weights_from(const ordered_json& j, const std::string& context) {
  const std::string where = context + ": " + std::string(kWeightsKey);
  if (!j.at(std::string(kWeightsKey)).is_object()) throw error_in(where, "expected an object");
  const ordered_json& w = j.at(std::string(kWeightsKey));
  const auto bad = [&](const char* key, const char* kind) {
    return error_in(where, std::string(key) + " must be " + kind);
  };
  WeightsRef ref;
  if (!w.contains("file") || !w.at("file").is_string()) throw bad("file", "a string (a path)");
  if (!w.contains("bytes") || !w.at("bytes").is_number_unsigned()) throw bad("bytes", "a size");
  if (!w.contains("mtime_ns") || !w.at("mtime_ns").is_number_integer()) {
    throw bad("mtime_ns", "an integer");
  }
  if (!w.contains("sha256") || !w.at("sha256").is_string()) throw bad("sha256", "a string");
  ref.file = w.at("file").get<std::string>();
  ref.bytes = w.at("bytes").get<std::uint64_t>();
  ref.mtime_ns = w.at("mtime_ns").get<std::int64_t>();
  ref.sha256 = w.at("sha256").get<std::string>();
  if (ref.sha256.size() != 64 ||
      ref.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw error_in(where, "sha256 must be 64 lowercase hex digits");
  }
  const std::string arch_key(kArchitectureKey);
  if (!j.contains(arch_key) || !j.at(arch_key).is_object()) {
    throw error_in(context, arch_key + " must be an object when weights are given");
  }
  ref.architecture_json = j.at(arch_key).dump();
  return ref;
}

}  // namespace

const char* to_string(Phase phase) { return phase == Phase::kPrefill ? "prefill" : "decode"; }

std::string scale_table_key(Phase phase) { return phase_key(phase, "scale_table"); }
std::string scale_tables_key(Phase phase) { return phase_key(phase, "scale_tables"); }
std::string target_sparsity_key(Phase phase) { return phase_key(phase, "target_sparsity"); }
std::string shape_advice_key(Phase phase) { return phase_key(phase, "shape_advice"); }
std::string threshold_key(Phase phase) { return phase_key(phase, "threshold"); }
std::string source_key(Phase phase) { return phase_key(phase, "source"); }

std::string scale_table_flag(Phase phase) {
  return std::string("--skip-softmax-") + to_string(phase) + "-scale-table";
}
std::string threshold_flag(Phase phase) {
  return std::string("--skip-softmax-") + to_string(phase) + "-threshold";
}
std::string target_sparsity_flag(Phase phase) {
  return std::string("--") + to_string(phase) + "-target-sparsity";
}

double parse_target_sparsity(std::string_view text) {
  const bool percent = text.ends_with('%');
  const std::optional<double> number =
      parse_number(percent ? text.substr(0, text.size() - 1) : text);
  // Text that is not a number becomes NaN, which fails the range check.
  const double fraction = !number ? std::nan("") : percent ? *number / 100.0 : *number;
  return checked_fraction(fraction, "\"" + std::string(text) + "\"");
}

std::string format_percent(double fraction) {
  // 10 significant digits hide the rounding of fraction * 100 (0.725 * 100 = 72.49999999999999).
  std::ostringstream out;
  out << std::setprecision(10) << fraction * 100.0 << '%';
  return out.str();
}

const Tier* CheckpointPhase::find_tier(double sparsity) const {
  for (const Tier& tier : tiers) {
    if (std::abs(tier.sparsity - sparsity) <= kTierTolerance) return &tier;
  }
  return nullptr;
}

std::string CheckpointPhase::tier_list() const {
  if (tiers.empty()) return "none";
  std::string list;
  for (const Tier& tier : tiers) list += (list.empty() ? "" : ", ") + tier.key;
  return list;
}

CheckpointConfig parse_checkpoint_config(std::string_view json_text, const std::string& context) {
  const ordered_json j = parse_json_object(json_text, context);
  CheckpointConfig config;
  ordered_json model = ordered_json::object();
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (!key.starts_with(kSkipKeyPrefix)) {
      if (key == kModelOptKey && !item.value().is_null()) {
        config.modelopt = read_modelopt(item.value(), context);
      }
      model[key] = item.value();
    } else if (key == kShapeAdviceKey) {
      config.shape_advice_json = item.value().dump();
    } else if (key == kDecodeShapeAdviceKey) {
      config.decode_shape_advice_json = item.value().dump();
    } else if (key == kPriceListKey) {
      config.price_list_json = item.value().dump();
    } else if (!read_phase_key(key, item.value(), context, config.phases)) {
      config.unknown_skip_keys.push_back(key);
    }
  }
  config.model_config_json = model.dump();
  return config;
}

CheckpointConfig load_checkpoint_config(const fs::path& checkpoint_dir) {
  const fs::path path = config_path(checkpoint_dir, "checkpoint");
  return parse_checkpoint_config(read_json_text(path), path.string());
}

std::string merge_skip_keys(std::string_view config_json, std::string_view updates_json,
                            const std::string& context) {
  ordered_json config = parse_json_object(config_json, context);
  const ordered_json updates = parse_json_object(updates_json, "skip key updates");
  for (const auto& item : updates.items()) {
    const std::string& key = item.key();
    if (!key.starts_with(kSkipKeyPrefix) && key != kModelOptKey) {
      throw error_in("skip key updates",
                     key + " does not start with " + std::string(kSkipKeyPrefix) + " and is not " +
                         std::string(kModelOptKey) +
                         "; only skip keys of a checkpoint config are rewritten");
    }
    if (item.value().is_null()) {
      config.erase(key);
    } else {
      config[key] = item.value();
    }
  }
  std::string text = config.dump(2) + "\n";
  parse_checkpoint_config(text, context);  // never write a config that export would reject
  return text;
}

void update_checkpoint_skip_keys(const fs::path& checkpoint_dir, std::string_view updates_json) {
  const fs::path path = config_path(checkpoint_dir, "checkpoint");
  const std::string text = merge_skip_keys(read_json_text(path), updates_json, path.string());
  write_file_atomic(path, [&](std::ostream& out) { out << text; });
}

TableFlag load_table_flag(const std::string& arg) {
  if (arg == "none" || arg == "0") return {arg, ScaleTable()};
  return {arg, kernel_table(read_scale_table_file(arg), arg)};
}

ExportPlan plan_export(const CheckpointConfig& checkpoint, const PerPhase<PhaseFlags>& flags) {
  ExportPlan plan;
  for (Phase phase : kPhases) {
    plan.phases[phase] = resolve_phase(phase, flags[phase], checkpoint, plan.notes);
  }
  if (checkpoint.modelopt) {
    if (checkpoint.modelopt->error) {
      plan.notes.push_back(std::string(kModelOptKey) +
                           " is not read: " + *checkpoint.modelopt->error);
    }
    for (const std::string& note : checkpoint.modelopt->notes) plan.notes.push_back(note);
    if (!checkpoint.modelopt->ignore.empty()) {
      std::string list;
      for (const std::string& p : checkpoint.modelopt->ignore)
        list += (list.empty() ? "" : ", ") + p;
      plan.notes.push_back(std::string(kModelOptKey) + " ignore patterns (" + list +
                           ") are not applied: the engine runs one threshold per phase on every "
                           "global attention layer");
    }
  }
  for (const std::string& key : checkpoint.unknown_skip_keys) {
    plan.notes.push_back("checkpoint key " + key + " is not read by export");
  }
  return plan;
}

std::vector<std::string> table_cautions(const PerPhase<ResolvedPhase>& phases) {
  std::vector<std::string> out;
  for (Phase phase : kPhases) {
    const Threshold& t = phases[phase].threshold;
    if (t.kind() != Threshold::Kind::kTable) continue;
    const std::vector<ScaleTableRow>& rows = t.scale_table().rows();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const ScaleTableRow& row = rows[i];
      const double first = std::floor(row.scale) + 1;  // the row's first length past S
      const bool reached =
          i + 1 == rows.size() || first < static_cast<double>(rows[i + 1].seqlen_bin);
      if (row.scale < static_cast<double>(row.seqlen_bin) || !reached) continue;
      std::ostringstream line;
      line << to_string(phase) << " table row [" << row.seqlen_bin << ", " << row.scale
           << "]: S is not below its bin, so its lengths up to " << std::floor(row.scale)
           << " run dense and " << first << " skips at lambda " << row.scale / first
           << ", where nearly every tile below the running maximum is skipped";
      out.push_back(line.str());
    }
  }
  return out;
}

std::string engine_config_json(const fs::path& checkpoint_dir, const CheckpointConfig& checkpoint,
                               const ExportPlan& plan, const WeightsRef* weights) {
  ordered_json j = ordered_json::object();
  j[std::string(kCheckpointDirKey)] = checkpoint_dir.string();
  for (Phase phase : kPhases) {
    const Threshold& threshold = plan.phases[phase].threshold;
    if (threshold.kind() == Threshold::Kind::kTable) {
      j[scale_table_key(phase)] = ordered_json(scale_table_to_json(threshold.scale_table()));
    } else if (threshold.kind() == Threshold::Kind::kFlat) {
      j[threshold_key(phase)] = threshold.flat_lambda();
    }
    j[source_key(phase)] = plan.phases[phase].source;
  }
  j[std::string(kModelConfigKey)] = ordered_json::parse(checkpoint.model_config_json);
  if (weights) {
    j[std::string(kWeightsKey)] = weights_to_json(*weights);
    j[std::string(kArchitectureKey)] = ordered_json::parse(weights->architecture_json);
  }
  return j.dump(2) + "\n";
}

EngineConfig parse_engine_config(std::string_view json_text, const std::string& context) {
  const ordered_json j = parse_json_object(json_text, context);
  reject_unknown_engine_keys(j, context);
  EngineConfig config;
  const std::string dir_key(kCheckpointDirKey);
  if (!j.contains(dir_key)) {
    throw error_in(context, dir_key +
                                " must be a string (the checkpoint the engine came from); "
                                "without it this is no engine config: skipsoftmax export "
                                "CHECKPOINT_DIR ENGINE_DIR makes one from a checkpoint");
  }
  if (!j.at(dir_key).is_string()) {
    throw error_in(context, dir_key + " must be a string (the checkpoint the engine came from)");
  }
  config.checkpoint_dir = j.at(dir_key).get<std::string>();
  const std::string model_key(kModelConfigKey);
  config.model_config_json = "{}";
  if (j.contains(model_key)) {
    if (!j.at(model_key).is_object())
      throw error_in(context + ": " + model_key, "expected an object");
    config.model_config_json = j.at(model_key).dump();
  }
  for (Phase phase : kPhases) config.phases[phase] = engine_phase(j, phase, context);
  if (j.contains(std::string(kWeightsKey))) config.weights = weights_from(j, context);
  return config;
}

EngineConfig load_engine_config(const fs::path& engine_dir) {
  const fs::path path = config_path(engine_dir, "engine");
  return parse_engine_config(read_json_text(path), path.string());
}

bool is_engine_dir(const fs::path& dir) {
  const fs::path path = config_path(dir, "checkpoint or engine");
  const ordered_json j = parse_json_text<ordered_json>(read_json_text(path), path.string());
  return j.is_object() && j.contains(std::string(kCheckpointDirKey));
}

}  // namespace skipsoftmax
