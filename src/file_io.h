// Small file helpers shared by the tools: whole-file reads with clear errors, and atomic writes
// (temporary file in the same directory, then rename) so that no output is left half-written.
#pragma once

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

namespace skipsoftmax {

// Throws std::runtime_error("<path>: ...") when the file is missing or unreadable.
std::string read_text_file(const std::filesystem::path& path);

// Parses a JSON file; a missing file, malformed or truncated JSON throws std::runtime_error naming
// the file and the byte offset of the problem.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Calls write(stream) on a temporary file next to `path`, then renames it over `path`. If write
// throws or the stream fails, the temporary file is removed and `path` is untouched.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(std::ostream&)>& write);

// JSON with 2-space indentation and a trailing newline, written atomically.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& value);

}  // namespace skipsoftmax
