// Small file helpers shared by the tools: whole-file reads with clear errors, and atomic writes
// (temporary file in the same directory, then rename) so that no output is left half-written.
#pragma once

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace skipsoftmax {

// Throws std::runtime_error("<path>: ...") when the file is missing or unreadable.
std::string read_text_file(const std::filesystem::path& path);

// Parses JSON text (nlohmann::json, or nlohmann::ordered_json where key order matters); malformed
// or truncated text throws std::invalid_argument("<context>: malformed JSON at byte N (M bytes)").
template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& context) {
  try {
    return Json::parse(text);
  } catch (const typename Json::parse_error& e) {
    throw std::invalid_argument(context + ": malformed JSON at byte " + std::to_string(e.byte) +
                                " (" + std::to_string(text.size()) + " bytes)");
  }
}

// Parses a JSON file; a missing file throws std::runtime_error, malformed or truncated JSON
// std::invalid_argument, both naming the file (and the byte offset of the problem).
nlohmann::json read_json_file(const std::filesystem::path& path);

// Calls write(stream) on a temporary file next to `path`, then renames it over `path`. If write
// throws or the stream fails, the temporary file is removed and `path` is untouched.
void write_file_atomic(const std::filesystem::path& path,
                       const std::function<void(std::ostream&)>& write);

// JSON with 2-space indentation and a trailing newline, written atomically. The ordered_json form
// keeps the keys in the order the writer put them.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& value);
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& value);

// Checks, before any work, that an output file can go to `path`: throws std::invalid_argument
// ("<path>: is a directory", "<path>: exists and is not a regular file", "<path>: directory D
// does not exist") otherwise.
void check_output_file(const std::filesystem::path& path);

}  // namespace skipsoftmax
