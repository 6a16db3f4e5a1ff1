#include "npy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "file_io.h"

namespace skipsoftmax {

namespace fs = std::filesystem;

// Array bytes are copied to and from memory unchanged, so the host must be little-endian.
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr std::string_view kMagic{"\x93NUMPY", 6};
constexpr std::size_t kPreambleV1 = 10;  // magic, version (2 bytes), uint16 header length
constexpr std::size_t kPreambleV2 = 12;  // magic, version (2 bytes), uint32 header length
constexpr std::size_t kHeaderAlign = 64;
// NumPy itself refuses headers over 10,000 bytes unless told otherwise; this only stops a corrupt
// length field from allocating gigabytes.
constexpr std::uint32_t kMaxHeaderBytes = 1u << 20;

constexpr NpyDtype kAllDtypes[] = {NpyDtype::kF16, NpyDtype::kF32, NpyDtype::kF64, NpyDtype::kI32,
                                   NpyDtype::kI64};

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what);
}

std::string supported_descrs() {
  std::string out;
  for (NpyDtype d : kAllDtypes) out += std::string(out.empty() ? "" : ", ") + npy_descr(d);
  return out;
}

NpyDtype parse_descr(const fs::path& path, const std::string& descr) {
  for (NpyDtype d : kAllDtypes) {
    if (descr == npy_descr(d)) return d;
  }
  const std::string quoted = "'" + descr + "'";
  if (descr.find('O') != std::string::npos) {
    fail(path, "object arrays (dtype " + quoted + ") are not supported");
  }
  if (!descr.empty() && descr[0] == '>') {
    fail(path, "big-endian dtype " + quoted + " is not supported; save it with arr.astype('<" +
                   descr.substr(1) + "')");
  }
  std::string hint;
  if (descr == "<V2" || descr == "|V2") {
    hint =
        "; bfloat16 (ml_dtypes) is saved like this and cannot be told apart from other 2-byte "
        "data: convert it to float32";
  }
  fail(path, "unsupported dtype " + quoted + " (supported: " + supported_descrs() + ")" + hint);
}

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// The header is a Python dict literal, e.g. "{'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }", padded with spaces and ending in a newline.
class HeaderParser {
 public:
  HeaderParser(const fs::path& path, std::string_view text) : path_(path), text_(text) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::string key = parse_string();
      expect(':');
      if (key == "descr" && !seen_descr) {
        h.descr = parse_descr_value();
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_order) {
        h.fortran_order = parse_bool();
        seen_order = true;
      } else if (key == "shape" && !seen_shape) {
        h.shape = parse_shape();
        seen_shape = true;
      } else {
        malformed("unexpected or repeated key '" + key + "'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) malformed("text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape) {
      malformed("the keys 'descr', 'fortran_order' and 'shape' are all required");
    }
    return h;
  }

 private:
  // The header is quoted without the padding and the newline that end it, on the message's line.
  [[noreturn]] void malformed(const std::string& what) const {
    std::string_view shown = text_;
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.remove_suffix(1);
    fail(path_, "malformed header: " + what + " (header: " + std::string(shown) + ")");
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c))
      malformed(std::string("expected '") + c + "' at offset " + std::to_string(pos_));
  }

  std::string parse_string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      malformed("expected a quoted string at offset " + std::to_string(pos_));
    }
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) malformed("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  // A record dtype is a list of fields: reject it with its own message, not as malformed.
  std::string parse_descr_value() {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '[') {
      fail(path_, "unsupported dtype: structured (record) arrays are not supported");
    }
    return parse_string();
  }

  bool parse_bool() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w(word);
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        return value;
      }
    }
    malformed("'fortran_order' must be True or False");
  }

  // "()", "(5,)", "(2, 3)": non-negative integers.
  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> shape;
    expect('(');
    while (!consume(')')) {
      shape.push_back(parse_dim());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  std::int64_t parse_dim() {
    skip_space();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    const std::size_t begin = pos_;
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        malformed("dimension too large");
      }
      value = value * 10 + digit;
    }
    if (pos_ == begin)
      malformed("expected an integer dimension at offset " + std::to_string(begin));
    if (negative) {
      fail(path_, "malformed header: negative dimension -" + std::to_string(value) + " in shape");
    }
    return value;
  }

  const fs::path& path_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

// Product of the dimensions times itemsize, or nullopt when it overflows int64.
std::optional<std::int64_t> byte_count(const std::vector<std::int64_t>& shape,
                                       std::size_t itemsize) {
  std::int64_t bytes = static_cast<std::int64_t>(itemsize);
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  }
  return bytes;
}

std::uint32_t read_le(const unsigned char* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// Reads exactly n bytes at the stream's position; false when the file ends first.
bool read_exact(std::ifstream& in, void* dst, std::size_t n) {
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  return static_cast<std::size_t>(in.gcount()) == n;
}

// Reads magic, version and header length; returns the header text.
std::string read_header_text(const fs::path& path, std::ifstream& in) {
  unsigned char pre[kPreambleV2] = {};
  const bool got_magic = read_exact(in, pre, kMagic.size());
  const std::size_t got = got_magic ? kMagic.size() : static_cast<std::size_t>(in.gcount());
  if (got == 0) fail(path, "empty file, not a NumPy .npy file");
  if (std::string_view(reinterpret_cast<const char*>(pre), got) != kMagic.substr(0, got)) {
    fail(path, "not a NumPy .npy file (bad magic)");
  }
  if (!got_magic || !read_exact(in, pre + kMagic.size(), 2)) fail(path, "truncated header");
  const int major = pre[6], minor = pre[7];
  if ((major < 1 || major > 3) || minor != 0) {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  if (!read_exact(in, pre + 8, len_bytes)) fail(path, "truncated header");
  const std::uint32_t header_len = read_le(pre + 8, len_bytes);
  if (header_len > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_len) + " is implausibly large");
  }
  std::string text(header_len, '\0');
  if (!read_exact(in, text.data(), header_len)) {
    fail(path, "truncated header (" + std::to_string(header_len) + " bytes announced, " +
                   std::to_string(in.gcount()) + " present)");
  }
  return text;
}

std::string header_text(const NpyArray& a) {
  return std::string("{'descr': '") + npy_descr(a.dtype) +
         "', 'fortran_order': False, 'shape': " + npy_shape_string(a.shape) + ", }";
}

void put_le(std::string& out, std::uint32_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Magic, version, length and the header padded with spaces and a final newline so that the data
// starts on a 64-byte boundary.
std::string preamble_and_header(const NpyArray& a) {
  std::string dict = header_text(a);
  const auto padded_len = [&](std::size_t preamble) {
    const std::size_t unpadded = preamble + dict.size() + 1;
    return (unpadded + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign - preamble;
  };
  const bool v1 = padded_len(kPreambleV1) <= std::numeric_limits<std::uint16_t>::max();
  const std::size_t header_len = padded_len(v1 ? kPreambleV1 : kPreambleV2);
  dict.resize(header_len - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(v1 ? 1 : 2));
  out.push_back(0);
  put_le(out, static_cast<std::uint32_t>(header_len), v1 ? 2 : 4);
  return out + dict;
}

void check_size(const NpyArray& a, std::size_t size, const char* what) {
  const std::int64_t n = a.element_count();
  if (n < 0 || static_cast<std::size_t>(n) != size) {
    throw std::invalid_argument(std::string(what) + ": shape " + npy_shape_string(a.shape) +
                                " does not match " + std::to_string(size) + " elements");
  }
}

template <class T>
std::vector<T> copy_elements(const NpyArray& a) {
  std::vector<T> out(a.data.size() / sizeof(T));
  std::memcpy(out.data(), a.data.data(), out.size() * sizeof(T));
  return out;
}

template <class T, class Src>
void append_element(std::vector<std::byte>& data, Src value) {
  const T v = static_cast<T>(value);
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  data.insert(data.end(), p, p + sizeof(T));
}

// Round to nearest even from any binary format with more precision and range than binary16.
template <class Float, class Bits>
std::uint16_t round_to_half(Float value) {
  constexpr int kBits = 8 * sizeof(Bits);
  constexpr int kMant = std::numeric_limits<Float>::digits - 1;  // stored mantissa bits
  constexpr int kBias = std::numeric_limits<Float>::max_exponent - 1;
  constexpr Bits kExpMask = (Bits{1} << (kBits - 1 - kMant)) - 1;
  constexpr int kHalfMant = 10;
  constexpr int kHalfBias = 15;
  constexpr std::uint16_t kHalfInf = 0x7c00;
  constexpr std::uint16_t kHalfQuietBit = 0x0200;

  const Bits bits = std::bit_cast<Bits>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> (kBits - 1)) << 15);
  const Bits exp_field = (bits >> kMant) & kExpMask;
  const Bits mant = bits & ((Bits{1} << kMant) - 1);
  if (exp_field == kExpMask) {
    if (mant == 0) return sign | kHalfInf;
    const auto payload = static_cast<std::uint16_t>(mant >> (kMant - kHalfMant));
    return sign | kHalfInf | (payload ? payload : kHalfQuietBit);
  }
  // Source subnormals lie far below half the smallest half subnormal (2^-25).
  if (exp_field == 0) return sign;
  const int exponent = static_cast<int>(exp_field) - kBias;  // value in [2^e, 2^(e+1))
  if (exponent > kHalfBias) return sign | kHalfInf;
  // Half exponent field, 1 for subnormals (same quantum 2^-24); the result counts quanta.
  const int field = std::max(1, exponent + kHalfBias);
  const int quantum_exp = field - kHalfBias - kHalfMant;
  const Bits significand = mant | (Bits{1} << kMant);  // value = significand * 2^(e - kMant)
  const int shift = quantum_exp - (exponent - kMant);  // > 0 for every format wider than half
  Bits quanta = 0;
  if (shift < kMant + 2) {  // else value < quantum / 2: rounds to zero
    const Bits rest = significand & ((Bits{1} << shift) - 1);
    const Bits halfway = Bits{1} << (shift - 1);
    quanta = significand >> shift;
    if (rest > halfway || (rest == halfway && (quanta & 1))) ++quanta;
  }
  // A carry out of the mantissa bumps the exponent field; past the largest finite value (65504)
  // it lands exactly on infinity (0x7c00).
  return sign | static_cast<std::uint16_t>(((field - 1) << kHalfMant) + quanta);
}

}  // namespace

const char* npy_descr(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kF16:
      return "<f2";
    case NpyDtype::kF32:
      return "<f4";
    case NpyDtype::kF64:
      return "<f8";
    case NpyDtype::kI32:
      return "<i4";
    case NpyDtype::kI64:
      return "<i8";
  }
  return "?";
}

std::size_t npy_itemsize(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kF16:
      return 2;
    case NpyDtype::kF32:
    case NpyDtype::kI32:
      return 4;
    case NpyDtype::kF64:
    case NpyDtype::kI64:
      return 8;
  }
  return 0;
}

bool npy_is_float(NpyDtype dtype) {
  return dtype == NpyDtype::kF16 || dtype == NpyDtype::kF32 || dtype == NpyDtype::kF64;
}

std::int64_t NpyArray::element_count() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string npy_shape_string(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

NpyArray read_npy(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, missing_file_reason(path));
  if (fs::is_directory(path, ec)) fail(path, "is a directory");
  const std::uintmax_t file_size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) fail(path, "cannot open for reading");

  const std::string text = read_header_text(path, in);
  const Header h = HeaderParser(path, text).parse();
  NpyArray a;
  a.dtype = parse_descr(path, h.descr);
  if (h.fortran_order) {
    fail(path, "Fortran-order arrays are not supported; save np.ascontiguousarray(arr)");
  }
  a.shape = h.shape;
  const std::optional<std::int64_t> bytes = byte_count(a.shape, npy_itemsize(a.dtype));
  if (!bytes) fail(path, "shape " + npy_shape_string(a.shape) + " is too large");
  const auto offset = static_cast<std::uintmax_t>(in.tellg());
  const std::uintmax_t present = file_size - offset;
  const auto needed = static_cast<std::uintmax_t>(*bytes);
  const std::string layout = "shape " + npy_shape_string(a.shape) + " of " + h.descr + " needs " +
                             std::to_string(needed) + " data bytes, the file holds " +
                             std::to_string(present);
  if (present < needed) fail(path, "truncated data: " + layout);
  if (present > needed) fail(path, "trailing bytes after the data: " + layout);
  a.data.resize(needed);
  if (!read_exact(in, a.data.data(), needed)) fail(path, "read error");
  return a;
}

void write_npy(std::ostream& out, const NpyArray& array, const fs::path& path) {
  if (std::any_of(array.shape.begin(), array.shape.end(), [](std::int64_t d) { return d < 0; })) {
    throw std::invalid_argument(path.string() + ": negative dimension in shape " +
                                npy_shape_string(array.shape));
  }
  const std::optional<std::int64_t> bytes = byte_count(array.shape, npy_itemsize(array.dtype));
  if (!bytes || static_cast<std::size_t>(*bytes) != array.data.size()) {
    throw std::invalid_argument(path.string() + ": " + std::to_string(array.data.size()) +
                                " data bytes do not match shape " + npy_shape_string(array.shape) +
                                " of " + npy_descr(array.dtype));
  }
  const std::string head = preamble_and_header(array);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  out.write(reinterpret_cast<const char*>(array.data.data()),
            static_cast<std::streamsize>(array.data.size()));
}

void write_npy_atomic(const fs::path& path, const NpyArray& array) {
  write_file_atomic(path, [&](std::ostream& out) { write_npy(out, array, path); });
}

NpyArray make_npy_float(NpyDtype dtype, std::vector<std::int64_t> shape,
                        std::span<const double> values) {
  NpyArray a{dtype, std::move(shape), {}};
  check_size(a, values.size(), "make_npy_float");
  a.data.reserve(values.size() * npy_itemsize(dtype));
  for (double v : values) {
    switch (dtype) {
      case NpyDtype::kF16:
        append_element<std::uint16_t>(a.data, double_to_half(v));
        break;
      case NpyDtype::kF32:
        append_element<float>(a.data, v);
        break;
      case NpyDtype::kF64:
        append_element<double>(a.data, v);
        break;
      case NpyDtype::kI32:
      case NpyDtype::kI64:
        throw std::invalid_argument(std::string("make_npy_float: ") + npy_descr(dtype) +
                                    " is not a float dtype");
    }
  }
  return a;
}

NpyArray make_npy_int(NpyDtype dtype, std::vector<std::int64_t> shape,
                      std::span<const std::int64_t> values) {
  if (npy_is_float(dtype)) {
    throw std::invalid_argument(std::string("make_npy_int: ") + npy_descr(dtype) +
                                " is not an integer dtype");
  }
  NpyArray a{dtype, std::move(shape), {}};
  check_size(a, values.size(), "make_npy_int");
  a.data.reserve(values.size() * npy_itemsize(dtype));
  for (std::int64_t v : values) {
    if (dtype == NpyDtype::kI64) {
      append_element<std::int64_t>(a.data, v);
      continue;
    }
    if (v < std::numeric_limits<std::int32_t>::min() ||
        v > std::numeric_limits<std::int32_t>::max()) {
      throw std::invalid_argument("make_npy_int: " + std::to_string(v) + " does not fit <i4");
    }
    append_element<std::int32_t>(a.data, v);
  }
  return a;
}

std::vector<float> to_float_vector(const NpyArray& array, const std::string& context) {
  switch (array.dtype) {
    case NpyDtype::kF16: {
      const std::vector<std::uint16_t> halves = copy_elements<std::uint16_t>(array);
      std::vector<float> out(halves.size());
      std::transform(halves.begin(), halves.end(), out.begin(), half_to_float);
      return out;
    }
    case NpyDtype::kF32:
      return copy_elements<float>(array);
    case NpyDtype::kF64: {
      const std::vector<double> wide = copy_elements<double>(array);
      return std::vector<float>(wide.begin(), wide.end());
    }
    case NpyDtype::kI32:
    case NpyDtype::kI64:
      break;
  }
  throw std::runtime_error(context + ": expected a float array, got integer dtype " +
                           npy_descr(array.dtype));
}

std::vector<std::int64_t> to_int64_vector(const NpyArray& array, const std::string& context) {
  switch (array.dtype) {
    case NpyDtype::kI32: {
      const std::vector<std::int32_t> narrow = copy_elements<std::int32_t>(array);
      return std::vector<std::int64_t>(narrow.begin(), narrow.end());
    }
    case NpyDtype::kI64:
      return copy_elements<std::int64_t>(array);
    case NpyDtype::kF16:
    case NpyDtype::kF32:
    case NpyDtype::kF64:
      break;
  }
  throw std::runtime_error(context + ": expected an integer array (<i4 or <i8), got float dtype " +
                           npy_descr(array.dtype));
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits >> 15) << 31;
  const std::uint32_t exp_field = (bits >> 10) & 0x1f;
  const std::uint32_t mant = bits & 0x3ff;
  if (exp_field == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  // Rebias the exponent (15 -> 127) and widen the mantissa; all ones stays all ones (inf, NaN).
  const std::uint32_t exp32 = exp_field == 0x1f ? 0xffu : exp_field - 15 + 127;
  return std::bit_cast<float>(sign | (exp32 << 23) | (mant << 13));
}

std::uint16_t float_to_half(float value) { return round_to_half<float, std::uint32_t>(value); }

std::uint16_t double_to_half(double value) { return round_to_half<double, std::uint64_t>(value); }

}  // namespace skipsoftmax
