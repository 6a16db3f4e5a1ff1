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
#include <type_traits>
#include <vector>

namespace skipsoftmax {

// Why `path` names no file to read: "no such file", "a dangling link to <target>", or the
// system's reason ("Too many levels of symbolic links" for a loop of links).
std::string missing_file_reason(const std::filesystem::path& path);

// Throws std::runtime_error("<path>: ...") when the file is missing or unreadable.
std::string read_text_file(const std::filesystem::path& path);

// nlohmann's message without its "[json.exception.*]" tag and "parse error at line L, column C: ".
std::string json_error_reason(const char* what);

// Bounds on the JSON the tools read (configs, requests, price lists, manifests): real files stay
// far below both; past them a file is an attack or an accident, and the recursive parser would
// exhaust the stack (deep nesting) or the memory (size).
inline constexpr int kMaxJsonDepth = 256;
inline constexpr std::uintmax_t kMaxJsonBytes = std::uintmax_t{256} << 20;

// The text of a JSON file: throws std::runtime_error("<path>: ...") when it is missing, not a
// regular file (a FIFO or a device would block or never end) or larger than kMaxJsonBytes.
std::string read_json_text(const std::filesystem::path& path);

// Empty when `text` nests at most kMaxJsonDepth arrays and objects and holds no NUL byte (which
// would end the text early for some readers); else the reason, naming the byte. Linear time.
std::string json_shape_problem(std::string_view text);

// Parses JSON text (nlohmann::json, or nlohmann::ordered_json where key order matters); malformed
// or truncated text throws std::invalid_argument("<context>: malformed JSON at byte N (M bytes):
// <the parser's reason>"), a number beyond double's range std::invalid_argument("<context>: ..."),
// text that json_shape_problem refuses std::invalid_argument("<context>: <its reason>").
// nlohmann::ordered_json from text in time linear in its size (nlohmann's own parser looks each
// key up in the object's vector: an object of 200k keys took a minute and a half); a key given
// twice keeps its last value, as nlohmann's parser does. Throws what nlohmann's parse throws.
nlohmann::ordered_json parse_ordered_json(std::string_view text);

template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& context) {
  if (const std::string why = json_shape_problem(text); !why.empty()) {
    throw std::invalid_argument(context + ": " + why);
  }
  try {
    if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
      return parse_ordered_json(text);
    } else {
      return Json::parse(text);
    }
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

// Several outputs of one command, committed together: add() writes each to a temporary file
// beside its target at once, commit() renames them all into place once every one was written.
// Until then no target is touched; an OutputSet destroyed before commit() (a later write failed,
// an exception) removes its temporary files, leaving every previous output as it was.
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet();

  void add(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);
  void add_json(const std::filesystem::path& path, const nlohmann::json& value);
  void commit();

 private:
  struct Staged {
    std::filesystem::path temporary, target;
    int slot;  // its registration for removal on a signal, or -1
  };
  std::vector<Staged> staged_;
};

// Removes the temporary files of writes in flight when SIGINT, SIGTERM or SIGHUP ends the
// process, then lets the signal end it as it would have; a file-size limit (SIGXFSZ) becomes a
// write error. The tool installs it once in main().
void remove_temporary_files_on_signal();

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

// Something a command reads: a file, or a directory whose files it reads (a checkpoint, an
// engine). `name` says how the user named it ("--input-file", "the engine's checkpoint").
struct ReadPath {
  std::string name;
  std::filesystem::path path;
  bool directory = false;
};

// Throws std::invalid_argument when writing the output `path` (named by `flag`) would replace
// what the command reads: one of the files of `inputs`, or a file that exists in or under one of
// its directories, after resolving links and "..". Empty paths among `inputs` are ignored.
void check_not_an_input(const std::filesystem::path& path, const std::string& flag,
                        const std::vector<ReadPath>& inputs);

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
