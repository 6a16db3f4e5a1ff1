// The JSON a benchmark writes: its measurements with the command, the git revision of the build and
// the GPU, written atomically.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench_util.h"
#include "file_io.h"
#include "skipsoftmax_git_revision.h"

namespace skipsoftmax::bench {

// The command a benchmark was started with, for its record.
inline std::string command_line(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  return command;
}

// Writes j to `path` (nothing when it is empty) with the command, revision and GPU added.
inline void write_record(nlohmann::json j, const std::string& path, const std::string& command) {
  if (path.empty()) return;
  j["command"] = command;
  j["git_revision"] = SKIPSOFTMAX_GIT_REVISION;
  j["gpu"] = device_properties().name;
  write_json_file(path, j);
}

}  // namespace skipsoftmax::bench
