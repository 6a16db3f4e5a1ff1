// What `calibrate` and `check-tables` share: the checkpoint's model file, the phases flag, the
// statistics backend and the source of Q/K. Bad input throws std::invalid_argument naming the flag.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "calibrate.h"
#include "gguf.h"
#include "model_config.h"

namespace skipsoftmax::cli {

// The checkpoint's GGUF file: the only *.gguf in the directory.
std::filesystem::path find_gguf(const std::filesystem::path& dir);

// --phase prefill|decode|both.
PerPhase<bool> parse_phases(const std::string& phase);

// Checks --backend before any work (cuda needs a CUDA build).
void check_backend_flag(const std::string& backend);
// The pass of --backend; cuda needs a Hopper GPU.
StatsBackend stats_backend(const std::string& backend);

// Checks --captures-dir (empty: none) before any work.
void check_captures_dir(const std::string& captures_dir);

// Q/K of the prompts: the CPU forward pass, or the captures under captures_dir. needs_sha: the
// model's checksum keys a cache or checks the captures (a read of the whole file).
std::unique_ptr<CaptureSource> capture_source(const gguf::File& file, const ModelConfig& model,
                                              const std::filesystem::path& gguf_path,
                                              const std::string& captures_dir, bool needs_sha,
                                              int threads);

}  // namespace skipsoftmax::cli
