// GGUF checkpoints on disk: finding a checkpoint directory's model file, pinning it in an engine
// config (skipsoftmax/config.h's WeightsRef) and checking it again before the runtime loads it.
#pragma once

#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "model_config.h"
#include "skipsoftmax/config.h"

namespace skipsoftmax {

// The one *.gguf file directly in `dir`. Throws std::invalid_argument when there is none or
// there are several (the message lists them and names export's --weights flag).
std::filesystem::path find_checkpoint_gguf(const std::filesystem::path& dir);

// The file's absolute path, size, modification time and SHA-256, and the architecture read from
// its metadata. Throws std::runtime_error for a file that is not a GGUF of a supported model.
WeightsRef pin_weights(const std::filesystem::path& gguf);

// Throws std::runtime_error when the file is missing or is not the one export pinned: another
// size, or another SHA-256 when its modification time changed (a copied file keeps its hash).
void check_weights(const WeightsRef& ref);

// The hyper-parameters as the engine config's "architecture" object records them.
nlohmann::ordered_json architecture_json(const ModelConfig& config);

// Which weights export pins.
struct WeightsFlag {
  std::optional<std::filesystem::path> file;  // --weights FILE; relative: to the checkpoint dir
  bool config_only = false;                   // --config-only: no weights
};

// Plans from <checkpoint_dir>/config.json, pins the weights (the checkpoint's one *.gguf file
// unless `weights` says otherwise) and writes <engine_dir>/config.json atomically, creating
// engine_dir if needed. Nothing is written when anything fails: a checkpoint with no or several
// GGUF files, a file that is not a GGUF of a supported architecture. Returns the plan for its
// notes.
ExportPlan export_engine(const std::filesystem::path& checkpoint_dir,
                         const std::filesystem::path& engine_dir, const PerPhase<PhaseFlags>& flags,
                         const WeightsFlag& weights = {});

}  // namespace skipsoftmax
