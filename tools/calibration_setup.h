// What `calibrate` and `check-tables` share: the checkpoint's model file, the phases flag, the
// statistics backend and the source of Q/K. Bad input throws std::invalid_argument naming the flag.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "calibrate.h"
#include "gguf.h"
#include "model_config.h"

namespace skipsoftmax::cli {

// The flags of the statistics pass, the same in both commands.
struct PassFlags {
  std::string backend = "cpu";
  std::string captures_dir;
  std::string corpus_dir;  // empty: default_corpus_dir()
  int decode_steps = 16;
  int decode_splits = 1;
  int threads = 0;
};
void add_pass_flags(CLI::App& sub, PassFlags& flags);
// Checks them before any work (the upper bound of --decode-steps is the command's to check).
void check_pass_flags(const PassFlags& flags);
std::filesystem::path corpus_dir(const PassFlags& flags);

// The *.gguf files of a checkpoint directory (fails when it is no directory).
std::vector<std::filesystem::path> gguf_files(const std::filesystem::path& dir);
// The checkpoint's GGUF file: the only *.gguf in the directory.
std::filesystem::path find_gguf(const std::filesystem::path& dir);

// --phase prefill|decode|both.
PerPhase<bool> parse_phases(const std::string& phase);

// The pass of --backend; cuda needs a Hopper GPU.
StatsBackend stats_backend(const PassFlags& flags);

// Q/K of the prompts: the CPU forward pass, or the captures under --captures-dir. needs_sha: the
// model's checksum keys a cache or checks the captures (a read of the whole file).
std::unique_ptr<CaptureSource> capture_source(const gguf::File& file, const ModelConfig& model,
                                              const std::filesystem::path& gguf_path,
                                              const PassFlags& flags, bool needs_sha);

}  // namespace skipsoftmax::cli
