// skipsoftmax export CHECKPOINT_DIR ENGINE_DIR: resolves each phase's threshold from the flags and
// the checkpoint (precedence in skipsoftmax/config.h), pins the checkpoint's GGUF weights and
// writes ENGINE_DIR/config.json.
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "checkpoint.h"
#include "commands.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax::cli {
namespace {

// Each value with its option: count() tells whether the flag was given at all.
struct PhaseOptions {
  std::string table_arg;
  double threshold_arg = 0.0;
  std::string sparsity_arg;
  CLI::Option* table_opt = nullptr;
  CLI::Option* threshold_opt = nullptr;
  CLI::Option* sparsity_opt = nullptr;
};

struct ExportOptions {
  std::string checkpoint_dir;
  std::string engine_dir;
  PerPhase<PhaseOptions> phases;
  std::string weights_file;
  bool config_only = false;
};

PhaseFlags to_flags(Phase phase, const PhaseOptions& o) {
  PhaseFlags flags;
  if (o.table_opt->count() > 0) {
    try {
      flags.scale_table = load_table_flag(o.table_arg);
    } catch (const std::exception& e) {
      throw std::runtime_error(scale_table_flag(phase) + ": " + e.what());
    }
  }
  if (o.threshold_opt->count() > 0) flags.threshold = o.threshold_arg;
  if (o.sparsity_opt->count() > 0) flags.target_sparsity = o.sparsity_arg;
  return flags;
}

void run_export(const ExportOptions& o) {
  PerPhase<PhaseFlags> flags;
  for (Phase phase : kPhases) flags[phase] = to_flags(phase, o.phases[phase]);
  WeightsFlag weights;
  if (!o.weights_file.empty()) weights.file = o.weights_file;
  weights.config_only = o.config_only;
  const ExportPlan plan = export_engine(o.checkpoint_dir, o.engine_dir, flags, weights);
  for (const std::string& note : plan.notes) {
    std::cerr << "skipsoftmax export: note: " << note << '\n';
  }
  for (const std::string& caution : table_cautions(plan.phases)) {
    std::cerr << "skipsoftmax export: note: " << caution << '\n';
  }
  std::cout << "wrote " << (std::filesystem::path(o.engine_dir) / kConfigFileName).string() << '\n';
  for (Phase phase : kPhases) {
    const ResolvedPhase& r = plan.phases[phase];
    std::cout << to_string(phase) << ": " << r.threshold.describe() << "  [" << r.source << "]\n";
  }
  const EngineConfig written = load_engine_config(o.engine_dir);
  if (written.weights) {
    std::cout << "weights: " << written.weights->file.string() << " (" << written.weights->bytes
              << " bytes, sha256 " << written.weights->sha256 << ")\n";
  } else {
    std::cout << "weights: none (--config-only)\n";
  }
}

void add_phase_options(CLI::App& sub, Phase phase, PhaseOptions& o) {
  const std::string name = to_string(phase);
  const std::string table_help =
      "Deploy this " + name + " table file ([[seqlen_bin, S], ...]) as is; none or 0: dense";
  o.table_opt = sub.add_option(scale_table_flag(phase), o.table_arg, table_help);
  o.threshold_opt = sub.add_option(threshold_flag(phase), o.threshold_arg,
                                   "Deploy a flat " + name + " lambda in [0, 1)");
  o.table_opt->excludes(o.threshold_opt);
  o.sparsity_opt =
      sub.add_option(target_sparsity_flag(phase), o.sparsity_arg,
                     "Deploy tier R (0.75 or 75%) of skip_softmax_" + name + "_scale_tables");
}

void add_export(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand(
      "export", "Resolve the skip thresholds of a checkpoint and write an engine config.json");
  sub->add_option("CHECKPOINT_DIR", o->checkpoint_dir, "Checkpoint directory (has config.json)")
      ->required()
      ->check(kNonEmptyPath);
  sub->add_option("ENGINE_DIR", o->engine_dir, "Engine directory, created if missing")
      ->required()
      ->check(kNonEmptyPath);
  for (Phase phase : kPhases) add_phase_options(*sub, phase, o->phases[phase]);
  CLI::Option* weights = sub->add_option(
      "--weights", o->weights_file,
      "The GGUF file to pin (relative to CHECKPOINT_DIR); default: its one *.gguf file");
  sub->add_flag("--config-only", o->config_only,
                "Export the thresholds without weights (an engine that cannot run)")
      ->excludes(weights);
  sub->callback([o] { run_export(*o); });
}

const Registration reg{30, &add_export};

}  // namespace
}  // namespace skipsoftmax::cli
