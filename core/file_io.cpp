#include "file_io.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace skipsoftmax {

namespace fs = std::filesystem;

std::string missing_file_reason(const fs::path& path) {
  std::error_code ec;
  (void)fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) return ec.message();
  std::error_code link_ec;
  if (fs::is_symlink(fs::symlink_status(path, link_ec))) {
    return "a dangling link to " + fs::read_symlink(path, link_ec).string();
  }
  return "no such file";
}

std::string read_text_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw std::runtime_error(path.string() + ": " + missing_file_reason(path));
  }
  if (fs::is_directory(path, ec)) throw std::runtime_error(path.string() + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open for reading");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path.string() + ": read error");
  return buf.str();
}

std::string read_json_text(const fs::path& path) {
  std::error_code ec;
  // A missing file or a directory is named by read_text_file.
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    if (!fs::is_regular_file(path, ec)) {
      throw std::runtime_error(path.string() +
                               ": is not a regular file (a JSON file is read whole)");
    }
    const std::uintmax_t bytes = fs::file_size(path, ec);
    if (!ec && bytes > kMaxJsonBytes) {
      throw std::runtime_error(path.string() + ": " + std::to_string(bytes) +
                               " bytes, more than the " + std::to_string(kMaxJsonBytes >> 20) +
                               " MiB a JSON file may hold");
    }
  }
  return read_text_file(path);
}

namespace {

// Builds an ordered_json document from nlohmann's SAX events, appending each object member to
// the object's vector and finding repeated keys through a hash index instead of a scan.
class OrderedJsonBuilder {
 public:
  using json = nlohmann::ordered_json;

  explicit OrderedJsonBuilder(json& root) : root_(root) {}

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(json::number_integer_t v) { return add(v); }
  bool number_unsigned(json::number_unsigned_t v) { return add(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return add(v); }
  bool string(json::string_t& v) { return add(std::move(v)); }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    stack_.push_back({json::object(), {}, {}});
    return true;
  }
  bool key(json::string_t& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return finish(); }
  bool start_array(std::size_t) {
    stack_.push_back({json::array(), {}, {}});
    return true;
  }
  bool end_array() { return finish(); }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    throw e;
  }

 private:
  struct Frame {
    json value;
    std::string key;                                     // the member being read (objects)
    std::unordered_map<std::string, std::size_t> index;  // key -> position (objects)
  };

  bool add(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = stack_.back();
    if (f.value.is_array()) {
      f.value.get_ref<json::array_t&>().push_back(std::move(v));
      return true;
    }
    // ordered_map is a vector of members underneath: appending to it skips its linear lookup.
    auto& members = static_cast<std::vector<std::pair<const std::string, json>>&>(
        f.value.get_ref<json::object_t&>());
    const auto [at, fresh] = f.index.emplace(f.key, members.size());
    if (fresh) {
      members.emplace_back(std::move(f.key), std::move(v));
    } else {
      members[at->second].second = std::move(v);
    }
    return true;
  }
  bool finish() {
    json v = std::move(stack_.back().value);
    stack_.pop_back();
    return add(std::move(v));
  }

  json& root_;
  std::vector<Frame> stack_;
};

}  // namespace

nlohmann::ordered_json parse_ordered_json(std::string_view text) {
  nlohmann::ordered_json root;
  OrderedJsonBuilder builder(root);
  nlohmann::ordered_json::sax_parse(text, &builder);
  return root;
}

std::string json_shape_problem(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') return "a NUL byte at byte " + std::to_string(i) + " (JSON is text)";
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels at byte " +
               std::to_string(i);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return {};
}

nlohmann::json read_json_file(const fs::path& path) {
  return parse_json_text(read_json_text(path), path.string());
}

namespace {

// The temporary files being written, as C strings a signal handler may read: a slot is claimed
// with `used`, filled, then published with `ready`; the handler unlinks what is published.
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<bool> used{false};
  std::atomic<bool> ready{false};
  char path[4096];
};
TempSlot temp_slots[kTempSlots];

// Registers `path` for removal on a signal while it exists; -1 when every slot is taken or the
// path is too long (the file is then only removed on the ordinary paths).
int register_temp(const fs::path& path) {
  const std::string s = path.string();
  if (s.size() >= sizeof(TempSlot::path)) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    bool expected = false;
    if (temp_slots[i].used.compare_exchange_strong(expected, true)) {
      std::memcpy(temp_slots[i].path, s.c_str(), s.size() + 1);
      temp_slots[i].ready.store(true);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  temp_slots[slot].ready.store(false);
  temp_slots[slot].used.store(false);
}

extern "C" void remove_temps_and_reraise(int signal) {
  for (TempSlot& slot : temp_slots) {
    if (slot.ready.load()) ::unlink(slot.path);
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// A temporary file next to `path`, written by `write` and flushed; registered for removal on a
// signal until the caller renames or removes it. Returns the temporary path and its slot.
std::pair<fs::path, int> write_temporary(const fs::path& path,
                                         const std::function<void(std::ostream&)>& write) {
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
  const int slot = register_temp(tmp);
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path.string() + ": cannot open for writing");
    write(out);
    out.flush();
    if (!out) throw std::runtime_error(path.string() + ": write error");
  } catch (...) {
    fs::remove(tmp, ec);
    unregister_temp(slot);
    throw;
  }
  return {tmp, slot};
}

}  // namespace

void write_file_atomic(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  OutputSet output;
  output.add(path, write);
  output.commit();
}

OutputSet::~OutputSet() {
  std::error_code ec;
  for (const Staged& staged : staged_) {
    if (!staged.temporary.empty()) fs::remove(staged.temporary, ec);
    unregister_temp(staged.slot);
  }
}

void OutputSet::add(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  const auto [tmp, slot] = write_temporary(path, write);
  staged_.push_back({tmp, path, slot});
}

void OutputSet::add_json(const fs::path& path, const nlohmann::json& value) {
  add(path, [&](std::ostream& out) { out << value.dump(2) << '\n'; });
}

void OutputSet::commit() {
  for (Staged& staged : staged_) {
    fs::rename(staged.temporary, staged.target);
    unregister_temp(staged.slot);
    staged.temporary.clear();  // in place: nothing left for the destructor if a later one fails
    staged.slot = -1;
  }
  staged_.clear();
}

void remove_temporary_files_on_signal() {
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, remove_temps_and_reraise);
  // Past a file-size limit a write then fails (EFBIG) and is reported like a full disk, instead
  // of the signal ending the process with its temporary file in place.
  std::signal(SIGXFSZ, SIG_IGN);
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

void check_not_an_input(const fs::path& path, const std::string& flag,
                        const std::vector<ReadPath>& inputs) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(path, ec);
  const bool exists = fs::exists(path, ec);
  for (const ReadPath& input : inputs) {
    if (input.path.empty()) continue;
    if (!input.directory) {
      if (same_file(path, input.path)) {
        throw std::invalid_argument(flag + " " + path.string() + " is also " + input.name +
                                    ": it would overwrite an input");
      }
      continue;
    }
    if (!exists) continue;  // a new file beside the directory's own harms none of them
    const fs::path dir = fs::weakly_canonical(input.path, ec);
    if (ec) continue;
    const fs::path inside = out.lexically_relative(dir);
    if (!inside.empty() && *inside.begin() != "..") {
      throw std::invalid_argument(flag + " " + path.string() + " is a file of " + input.name + " " +
                                  input.path.string() +
                                  ": it would overwrite what the command reads");
    }
  }
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
