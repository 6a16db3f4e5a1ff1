// Small file helpers shared by the tools: whole-file reads with clear errors, and atomic writes
// (temporary file in the same directory, then rename) so that no output is left half-written.
#pragma once

#include <algorithm>
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

// nlohmann's message without its "[json.exception.*]" tag and "parse error at line L, column C: ".
std::string json_error_reason(const char* what);

// Parses JSON text (nlohmann::json, or nlohmann::ordered_json where key order matters); malformed
// or truncated text throws std::invalid_argument("<context>: malformed JSON at byte N (M bytes):
// <the parser's reason>"), a number beyond double's range std::invalid_argument("<context>: ...").
template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& context) {
  try {
    return Json::parse(text);
  } catch (const typename Json::parse_error& e) {
    // At the end of the text the parser reports the byte after it.
    const std::size_t byte = std::min<std::size_t>(e.byte, text.size());
    throw std::invalid_argument(context + ": malformed JSON at byte " + std::to_string(byte) +
                                " (" + std::to_string(text.size()) +
                                " bytes): " + json_error_reason(e.what()));
  } catch (const typename Json::out_of_range& e) {
    throw std::invalid_argument(context + ": " + json_error_reason(e.what()) +
                                " (beyond a double's range)");
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
// ("an empty path", "<path>: is a directory", "<path>: exists and is not a regular file",
// "<path>: directory D does not exist") otherwise.
void check_output_file(const std::filesystem::path& path);

// Whether two paths name the same file, under any spelling (./o/x.npy, o/../o/x.npy, links).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// Checks, before any work and without creating anything, that `dir` is or can become an output
// directory: throws std::invalid_argument naming `flag`, the path and the reason (an empty path,
// a file there, a file where a parent directory would go).
void check_output_directory(const std::filesystem::path& dir, const std::string& flag);

// Creates the output directory `dir` (and its parents), or throws std::invalid_argument as
// check_output_directory does, or naming the system's reason (not permitted, ...).
void ensure_output_directory(const std::filesystem::path& dir, const std::string& flag);

// "<path>[ and <path2>]: <operation>: <reason>" for a std::filesystem error, whose own text reads
// "filesystem error: <operation>: <reason> [<path>] [<path2>]".
std::string describe(const std::filesystem::filesystem_error& e);

}  // namespace skipsoftmax
