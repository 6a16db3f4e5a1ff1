#include "gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include "bf16.h"
#include "file_io.h"
#include "npy.h"

namespace skipsoftmax::gguf {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint64_t kDefaultAlignment = 32;
// Bounds that no real file reaches; past them a count is corruption, not a large model.
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 32;
constexpr std::uint64_t kMaxString = std::uint64_t{1} << 30;

enum ValueType : std::uint32_t {
  kU8 = 0,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64,
};

// Sequential reads of the header with bounds checks; every error names the file and the offset.
class Reader {
 public:
  Reader(const std::filesystem::path& path, std::ifstream& in, std::uint64_t size)
      : path_(path), in_(in), size_(size) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_.string() + ": " + what + " (at byte " + std::to_string(pos_) +
                             ")");
  }
  void read(void* dst, std::uint64_t n) {
    if (n > size_ - pos_) fail("truncated: needs " + std::to_string(n) + " more bytes");
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_) fail("read error");
    pos_ += n;
  }
  template <typename T>
  T pod() {
    T v;
    read(&v, sizeof v);
    return v;
  }
  std::uint64_t remaining() const { return size_ - pos_; }
  // A count of items of at least `min_bytes` each, checked against the bytes left in the file
  // before anything is allocated for them.
  std::uint64_t count(const std::string& what, std::uint64_t min_bytes) {
    const auto n = pod<std::uint64_t>();
    if (n > kMaxCount) fail(what + " count " + std::to_string(n) + " is implausible");
    if (n > remaining() / min_bytes) {
      fail(what + " count " + std::to_string(n) + " needs at least " +
           std::to_string(n * min_bytes) + " bytes, the file has " + std::to_string(remaining()) +
           " left: truncated or corrupt");
    }
    return n;
  }
  std::string str(const std::string& what) {
    const auto n = pod<std::uint64_t>();
    if (n > kMaxString) fail(what + ": string length " + std::to_string(n) + " is implausible");
    if (n > remaining()) {
      fail(what + ": a string of " + std::to_string(n) + " bytes, the file has " +
           std::to_string(remaining()) + " left: truncated or corrupt");
    }
    std::string s(n, '\0');
    read(s.data(), n);
    return s;
  }
  std::uint64_t pos() const { return pos_; }
  std::uint64_t size() const { return size_; }

 private:
  const std::filesystem::path& path_;
  std::ifstream& in_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
};

std::int64_t scalar_integer(Reader& r, std::uint32_t type) {
  switch (type) {
    case kU8:
      return r.pod<std::uint8_t>();
    case kI8:
      return r.pod<std::int8_t>();
    case kU16:
      return r.pod<std::uint16_t>();
    case kI16:
      return r.pod<std::int16_t>();
    case kU32:
      return r.pod<std::uint32_t>();
    case kI32:
      return r.pod<std::int32_t>();
    case kI64:
      return r.pod<std::int64_t>();
    default:
      r.fail("not an integer type " + std::to_string(type));
  }
}

bool is_integer(std::uint32_t t) { return t <= kI32 ? t != kF32 && t != kBool : t == kI64; }

// The bytes of an array element of `type` at the least (a string: its length field).
std::uint64_t element_bytes(std::uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    default:
      return 8;  // u64, i64, f64, and a string's length
  }
}

// The value of metadata `key`; errors name the key.
Value read_value(Reader& r, std::uint32_t type, const std::string& key) {
  if (is_integer(type)) return scalar_integer(r, type);
  switch (type) {
    case kU64:
      return r.pod<std::uint64_t>();
    case kF32:
      return static_cast<double>(r.pod<float>());
    case kF64:
      return r.pod<double>();
    case kBool:
      return r.pod<std::uint8_t>() != 0;
    case kString:
      return r.str("metadata " + key);
    case kArray: {
      const auto elem = r.pod<std::uint32_t>();
      const std::uint64_t n = r.count("metadata " + key + ": array", element_bytes(elem));
      if (elem == kString) {
        std::vector<std::string> v(n);
        for (auto& s : v) s = r.str("metadata " + key);
        return v;
      }
      if (elem == kF32 || elem == kF64) {
        std::vector<double> v(n);
        for (auto& x : v) x = elem == kF32 ? r.pod<float>() : r.pod<double>();
        return v;
      }
      if (elem == kBool) {
        std::vector<bool> v(n);
        for (std::uint64_t i = 0; i < n; ++i) v[i] = r.pod<std::uint8_t>() != 0;
        return v;
      }
      if (is_integer(elem) || elem == kU64) {
        std::vector<std::int64_t> v(n);
        for (auto& x : v) {
          x = elem == kU64 ? static_cast<std::int64_t>(r.pod<std::uint64_t>())
                           : scalar_integer(r, elem);
        }
        return v;
      }
      r.fail("metadata " + key + ": unsupported array element type " + std::to_string(elem));
    }
    default:
      r.fail("metadata " + key + ": unknown value type " + std::to_string(type));
  }
}

bool supported(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
    case GgmlType::kBF16:
      return true;
  }
  return false;
}

float half(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_to_float(bits);
}

// The 6-bit scale and min of sub-block j of a Q4_K super-block (12 packed bytes).
void q4k_scale_min(int j, const std::uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequantize_block(GgmlType type, const std::uint8_t* b, float* y) {
  switch (type) {
    case GgmlType::kQ4_0: {  // d, then 16 bytes of nibbles: low nibbles first
      const float d = half(b);
      for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
      }
      return;
    }
    case GgmlType::kQ4_1: {  // d, m, 16 bytes of nibbles
      const float d = half(b), m = half(b + 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
        y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
      }
      return;
    }
    case GgmlType::kQ5_0: {  // d, 32 high bits (u32), 16 bytes of low nibbles
      const float d = half(b);
      std::uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      for (int j = 0; j < 16; ++j) {
        const int lo = (b[6 + j] & 0xF) | static_cast<int>(((qh >> j) << 4) & 0x10);
        const int hi = (b[6 + j] >> 4) | static_cast<int>((qh >> (j + 12)) & 0x10);
        y[j] = static_cast<float>(lo - 16) * d;
        y[j + 16] = static_cast<float>(hi - 16) * d;
      }
      return;
    }
    case GgmlType::kQ8_0: {  // d, 32 signed bytes
      const float d = half(b);
      for (int j = 0; j < 32; ++j)
        y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
      return;
    }
    case GgmlType::kQ4_K: {  // d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
      const float d = half(b), dmin = half(b + 2);
      const std::uint8_t* scales = b + 4;
      const std::uint8_t* q = b + 16;
      for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
        int sc, mn;
        q4k_scale_min(is, scales, sc, mn);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
        q4k_scale_min(is + 1, scales, sc, mn);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
        for (int l = 0; l < 32; ++l) {
          y[j + l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
          y[j + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
      }
      return;
    }
    case GgmlType::kQ6_K: {  // 128 bytes low 4 bits, 64 bytes high 2 bits, 16 scales, d
      const std::uint8_t* ql = b;
      const std::uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
      const float d = half(b + 208);
      for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[n + l] = d * static_cast<float>(sc[is + 0] * q1);
          y[n + l + 32] = d * static_cast<float>(sc[is + 2] * q2);
          y[n + l + 64] = d * static_cast<float>(sc[is + 4] * q3);
          y[n + l + 96] = d * static_cast<float>(sc[is + 6] * q4);
        }
      }
      return;
    }
    case GgmlType::kF32:
      std::memcpy(y, b, 4);
      return;
    case GgmlType::kF16:
      *y = half(b);
      return;
    case GgmlType::kBF16: {
      std::uint16_t bits;
      std::memcpy(&bits, b, 2);
      *y = bf16_to_float(bits);
      return;
    }
  }
}

}  // namespace

std::string type_name(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ5_0:
      return "Q5_0";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ4_K:
      return "Q4_K";
    case GgmlType::kQ6_K:
      return "Q6_K";
    case GgmlType::kBF16:
      return "BF16";
  }
  return "type " + std::to_string(type);
}

std::int64_t block_values(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
      return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return 256;
  }
  throw std::runtime_error("unsupported ggml " + type_name(static_cast<std::uint32_t>(type)));
}

std::int64_t block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ4_0:
      return 18;
    case GgmlType::kQ4_1:
      return 20;
    case GgmlType::kQ5_0:
      return 22;
    case GgmlType::kQ8_0:
      return 34;
    case GgmlType::kQ4_K:
      return 144;
    case GgmlType::kQ6_K:
      return 210;
  }
  throw std::runtime_error("unsupported ggml " + type_name(static_cast<std::uint32_t>(type)));
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

void dequantize(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t count) {
  const std::int64_t per = block_values(type), bytes = block_bytes(type);
  if (count % per != 0) {
    throw std::runtime_error("dequantize: " + std::to_string(count) + " values are not whole " +
                             type_name(static_cast<std::uint32_t>(type)) + " blocks of " +
                             std::to_string(per));
  }
  for (std::int64_t b = 0; b < count / per; ++b)
    dequantize_block(type, src + b * bytes, dst + b * per);
}

File File::open(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw std::runtime_error(path.string() + (std::filesystem::is_directory(path, ec)
                                                  ? ": is a directory, not a GGUF file"
                                                  : ": " + missing_file_reason(path)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open for reading");
  Reader r(path, in, std::filesystem::file_size(path));
  File f;
  f.path_ = path;
  if (r.size() < 4 || r.pod<std::uint32_t>() != kMagic) r.fail("not a GGUF file (bad magic)");
  f.version_ = r.pod<std::uint32_t>();
  if (f.version_ != 2 && f.version_ != 3) {
    r.fail("GGUF version " + std::to_string(f.version_) + " is not supported (2 or 3)");
  }
  // The least a tensor info takes (an empty name, one dimension) and a metadata entry (an empty
  // key, a type, a one-byte value).
  const std::uint64_t n_tensors = r.count("tensor", 8 + 4 + 8 + 4 + 8);
  const std::uint64_t n_kv = r.count("metadata", 8 + 4 + 1);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::uint64_t at = r.pos();
    std::string key = r.str("metadata key");
    const auto type = r.pod<std::uint32_t>();
    Value value = read_value(r, type, key);
    if (!f.metadata_.emplace(key, std::move(value)).second) {
      throw std::runtime_error(path.string() + ": metadata key " + key +
                               " appears twice (at byte " + std::to_string(at) + ")");
    }
  }
  std::set<std::string> names;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.str("tensor name");
    if (!names.insert(t.name).second) r.fail("tensor " + t.name + " appears twice");
    const auto n_dims = r.pod<std::uint32_t>();
    if (n_dims == 0 || n_dims > 4) {
      r.fail("tensor " + t.name + ": " + std::to_string(n_dims) + " dimensions (1 to 4)");
    }
    // The element count, checked as it grows: no tensor holds more values than the file bytes.
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = r.pod<std::uint64_t>();
      if (dim == 0 || dim > (std::uint64_t{1} << 40)) {
        r.fail("tensor " + t.name + ": bad dimension " + std::to_string(dim));
      }
      if (elements > (std::uint64_t{1} << 62) / dim) {
        r.fail("tensor " + t.name + ": its dimensions multiply past 2^62 elements");
      }
      elements *= dim;
      t.dims.push_back(static_cast<std::int64_t>(dim));
    }
    const auto type = r.pod<std::uint32_t>();
    if (!supported(type)) r.fail(t.name + ": ggml " + type_name(type) + " is not supported");
    t.type = static_cast<GgmlType>(type);
    t.offset = r.pod<std::uint64_t>();
    const std::int64_t per = block_values(t.type);
    if (t.dims[0] % per != 0) {
      r.fail(t.name + ": rows of " + std::to_string(t.dims[0]) + " are not whole " +
             type_name(type) + " blocks");
    }
    const std::uint64_t blocks = elements / static_cast<std::uint64_t>(per);
    if (blocks > r.size() / static_cast<std::uint64_t>(block_bytes(t.type))) {
      r.fail("tensor " + t.name + ": " + std::to_string(elements) +
             " values need more bytes than the file's " + std::to_string(r.size()));
    }
    t.bytes = blocks * static_cast<std::uint64_t>(block_bytes(t.type));
    f.tensors_.push_back(std::move(t));
  }
  std::uint64_t alignment = kDefaultAlignment;
  if (const Value* a = f.find("general.alignment")) {
    const auto* v = std::get_if<std::int64_t>(a);
    if (!v || *v <= 0 || (*v & (*v - 1)) != 0) r.fail("general.alignment must be a power of two");
    alignment = static_cast<std::uint64_t>(*v);
  }
  const std::uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
  const auto fail_tensor = [&](const TensorInfo& t, const std::string& what) {
    throw std::runtime_error(path.string() + ": tensor " + t.name + " (" + std::to_string(t.bytes) +
                             " bytes at data offset " + std::to_string(t.offset) + ") " + what);
  };
  for (TensorInfo& t : f.tensors_) {
    if (t.offset % alignment != 0) {
      fail_tensor(t, "is not aligned to " + std::to_string(alignment) + " bytes");
    }
    // Compared before adding, so that an offset near 2^64 cannot wrap onto the header.
    if (data_start > r.size() || t.offset > r.size() - data_start ||
        t.bytes > r.size() - data_start - t.offset) {
      fail_tensor(
          t, "lies past the end of the file (" + std::to_string(r.size()) + " bytes): truncated");
    }
    t.offset += data_start;
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.bytes > by_offset[i]->offset) {
      throw std::runtime_error(path.string() + ": tensors " + prev.name + " and " +
                               by_offset[i]->name + " overlap (bytes " +
                               std::to_string(by_offset[i]->offset) + " to " +
                               std::to_string(prev.offset + prev.bytes) + ")");
    }
  }
  return f;
}

const Value* File::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
template <typename T>
const T& typed(const File& f, const std::filesystem::path& path, const std::string& key,
               const char* kind) {
  const Value* v = f.find(key);
  if (!v) throw std::runtime_error(path.string() + ": no metadata key " + key);
  const T* t = std::get_if<T>(v);
  if (!t) throw std::runtime_error(path.string() + ": metadata " + key + " is not " + kind);
  return *t;
}
}  // namespace

std::int64_t File::integer(const std::string& key) const {
  if (const Value* v = find(key); v && std::holds_alternative<std::uint64_t>(*v)) {
    const std::uint64_t u = std::get<std::uint64_t>(*v);
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw std::runtime_error(path_.string() + ": metadata " + key + " does not fit int64");
    }
    return static_cast<std::int64_t>(u);
  }
  return typed<std::int64_t>(*this, path_, key, "an integer");
}

double File::number(const std::string& key) const {
  if (const Value* v = find(key); v && std::holds_alternative<std::int64_t>(*v)) {
    return static_cast<double>(std::get<std::int64_t>(*v));
  }
  return typed<double>(*this, path_, key, "a number");
}

const std::string& File::string(const std::string& key) const {
  return typed<std::string>(*this, path_, key, "a string");
}

const std::vector<std::string>& File::strings(const std::string& key) const {
  return typed<std::vector<std::string>>(*this, path_, key, "an array of strings");
}

const TensorInfo& File::tensor(const std::string& name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return t;
  }
  throw std::runtime_error(path_.string() + ": no tensor " + name);
}

std::vector<std::uint8_t> File::read_bytes(const TensorInfo& t) const {
  std::ifstream in(path_, std::ios::binary);
  std::vector<std::uint8_t> bytes(t.bytes);
  in.seekg(static_cast<std::streamoff>(t.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(t.bytes));
  if (!in) throw std::runtime_error(path_.string() + ": cannot read tensor " + t.name);
  return bytes;
}

std::vector<float> File::read_floats(const TensorInfo& t) const {
  const std::vector<std::uint8_t> bytes = read_bytes(t);
  std::vector<float> values(static_cast<std::size_t>(t.elements()));
  dequantize(t.type, bytes.data(), values.data(), t.elements());
  return values;
}

}  // namespace skipsoftmax::gguf
