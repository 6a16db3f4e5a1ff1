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

void write_json_file(const fs::path& path, const nlohmann::json& value) {
  write_file_atomic(path, [&](std::ostream& out) { out << value.dump(2) << '\n'; });
}

void write_json_file(const fs::path& path, const nlohmann::ordered_json& value) {
  write_file_atomic(path, [&](std::ostream& out) { out << value.dump(2) << '\n'; });
}

void check_output_file(const fs::path& path) {
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

}  // namespace skipsoftmax
