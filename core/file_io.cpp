#include "file_io.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace skipsoftmax {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw std::runtime_error(path.string() + ": no such file");
  if (fs::is_directory(path, ec)) throw std::runtime_error(path.string() + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open for reading");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path.string() + ": read error");
  return buf.str();
}

nlohmann::json read_json_file(const fs::path& path) {
  return parse_json_text(read_text_file(path), path.string());
}

void write_file_atomic(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw std::runtime_error(path.string() + ": directory " + dir.string() + " does not exist");
  }
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    throw std::runtime_error(path.string() + ": exists and is not a regular file");
  }
  std::string name = ".";
  name += path.filename().string();
  name += ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  const fs::path tmp = dir / name;
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw std::runtime_error(path.string() + ": cannot open for writing");
      write(out);
      out.flush();
      if (!out) throw std::runtime_error(path.string() + ": write error");
    }
    fs::rename(tmp, path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
}

std::string json_error_reason(const char* what) {
  std::string_view s(what);
  if (s.starts_with("[json.exception.")) {
    const std::size_t end = s.find("] ");
    if (end != std::string_view::npos) s.remove_prefix(end + 2);
  }
  for (std::string_view prefix : {"parse error at line ", "parse error: "}) {
    if (s.starts_with(prefix)) {
      const std::size_t colon = s.find(": ");
      if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
    }
  }
  return std::string(s);
}

void write_json_file(const fs::path& path, const nlohmann::json& value) {
  write_file_atomic(path, [&](std::ostream& out) { out << value.dump(2) << '\n'; });
}

void write_json_file(const fs::path& path, const nlohmann::ordered_json& value) {
  write_file_atomic(path, [&](std::ostream& out) { out << value.dump(2) << '\n'; });
}

void check_output_file(const fs::path& path) {
  if (path.empty()) throw std::invalid_argument("an empty path is not an output file");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::invalid_argument(path.string() + ": is a directory");
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    // The output is renamed into place: a device or a pipe would be replaced, not written.
    throw std::invalid_argument(path.string() + ": exists and is not a regular file");
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw std::invalid_argument(path.string() + ": directory " + dir.string() + " does not exist");
  }
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  if (ea || eb) return a.lexically_normal() == b.lexically_normal();
  return ca == cb;
}

void check_output_directory(const fs::path& dir, const std::string& flag) {
  if (dir.empty()) throw std::invalid_argument(flag + ": an empty path is not a directory");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw std::invalid_argument(flag + " " + dir.string() + ": exists and is not a directory");
  }
  // The nearest ancestor that exists must be a directory: the others are created.
  const fs::path absolute = fs::absolute(dir, ec);
  for (fs::path a = absolute.parent_path(); !ec && !a.empty(); a = a.parent_path()) {
    if (fs::exists(a, ec)) {
      if (!fs::is_directory(a, ec)) {
        throw std::invalid_argument(flag + " " + dir.string() + ": " + a.string() +
                                    " is not a directory");
      }
      break;
    }
    if (a == a.parent_path()) break;
  }
}

void ensure_output_directory(const fs::path& dir, const std::string& flag) {
  check_output_directory(dir, flag);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw std::invalid_argument(flag + " " + dir.string() + ": cannot create it: " + ec.message());
  }
}

std::string describe(const fs::filesystem_error& e) {
  std::string_view what(e.what());
  if (what.starts_with("filesystem error: ")) what.remove_prefix(18);
  // The paths the library appends in brackets are named in front instead.
  if (!e.path1().empty() || what.ends_with(" []")) {
    const std::size_t bracket = what.find(" [");
    if (bracket != std::string_view::npos) what = what.substr(0, bracket);
  }
  std::string paths = e.path1().empty() ? std::string("''") : e.path1().string();
  if (!e.path2().empty()) paths += " and " + e.path2().string();
  return paths + ": " + std::string(what);
}

}  // namespace skipsoftmax
