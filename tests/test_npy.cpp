#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "npy.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

class NpyFileTest : public test::TempDirTest {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }

  fs::path write_raw(const std::string& name, const std::string& bytes) const {
    const fs::path p = path(name);
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // The message of the std::runtime_error read_npy throws, or "" when it succeeds.
  static std::string read_error(const fs::path& p) {
    try {
      read_npy(p);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }

  // The file's error names the file first and then the problem.
  void expect_error(const std::string& name, const std::string& bytes, const std::string& what) {
    const fs::path p = write_raw(name, bytes);
    const std::string msg = read_error(p);
    EXPECT_EQ(msg.rfind(p.string() + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
};

// A file with the given version and header dict, padded as NumPy pads it, then `data`.
std::string raw_npy(const std::string& dict, const std::string& data = "", int major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < preamble - 8; ++i) {
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

std::string f4_dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

std::vector<double> iota_values(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.5 * static_cast<double>(i) - 3.0;
  return v;
}

std::vector<std::int64_t> iota_ints(std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 1000 * static_cast<std::int64_t>(i) - 7;
  return v;
}

NpyArray make_array(NpyDtype dtype, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  const auto count = static_cast<std::size_t>(n);
  return npy_is_float(dtype) ? make_npy_float(dtype, shape, iota_values(count))
                             : make_npy_int(dtype, shape, iota_ints(count));
}

TEST_F(NpyFileTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<std::vector<std::int64_t>> shapes = {{},        {0},       {5},         {2, 3},
                                                         {2, 0, 3}, {3, 1, 4}, {2, 3, 4, 5}};
  for (NpyDtype dtype :
       {NpyDtype::kF16, NpyDtype::kF32, NpyDtype::kF64, NpyDtype::kI32, NpyDtype::kI64}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(std::string(npy_descr(dtype)) + " " + npy_shape_string(shape));
      const NpyArray a = make_array(dtype, shape);
      const fs::path p = path("a.npy");
      write_npy_atomic(p, a);
      const NpyArray b = read_npy(p);
      EXPECT_EQ(b.dtype, a.dtype);
      EXPECT_EQ(b.shape, a.shape);
      EXPECT_EQ(b.data, a.data);
      // The data starts on a 64-byte boundary, as NumPy lays it out.
      EXPECT_EQ((fs::file_size(p) - a.data.size()) % 64, 0u);
    }
  }
}

TEST_F(NpyFileTest, WritesNumpyVersion1Header) {
  const fs::path p = path("h.npy");
  write_npy_atomic(p, make_npy_float(NpyDtype::kF32, {2, 3}, iota_values(6)));
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // 10 bytes of preamble and a 60-character dict: the header is padded to 128 bytes.
  ASSERT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8),
            128 - 10);
  const std::string header = bytes.substr(10, 118);
  EXPECT_EQ(header.rfind(f4_dict("(2, 3)"), 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
}

TEST_F(NpyFileTest, WritesVersion2WhenTheHeaderOutgrowsVersion1) {
  // 22,000 dimensions of 1: the shape tuple alone is 66,000 characters.
  const std::vector<std::int64_t> shape(22000, 1);
  const fs::path p = path("long.npy");
  write_npy_atomic(p, make_npy_float(NpyDtype::kF64, shape, std::vector<double>{2.5}));
  std::ifstream in(p, std::ios::binary);
  char version[8];
  in.read(version, 8);
  EXPECT_EQ(version[6], 2);
  const NpyArray b = read_npy(p);
  EXPECT_EQ(b.shape, shape);
  EXPECT_EQ(to_float_vector(b, "x"), std::vector<float>{2.5f});
}

TEST_F(NpyFileTest, ReadsFilesAsNumpyWritesThem) {
  // np.save of np.arange(3, dtype='<i8'), NumPy >= 1.23: room left for the first axis to grow.
  const std::string dict =
      "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }" + std::string(20, ' ');
  std::string data(24, '\0');
  for (int i = 0; i < 3; ++i) data[static_cast<std::size_t>(8 * i)] = static_cast<char>(i);
  const NpyArray a = read_npy(write_raw("np.npy", raw_npy(dict, data)));
  EXPECT_EQ(to_int64_vector(a, "np.npy"), (std::vector<std::int64_t>{0, 1, 2}));

  // Keys in any order, versions 2.0 and 3.0 (32-bit header length).
  const std::string reordered = "{'shape': (1, 2), 'fortran_order': False, 'descr': '<f4'}";
  const std::string two_floats("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f
  for (int major : {2, 3}) {
    const NpyArray b = read_npy(write_raw("v.npy", raw_npy(reordered, two_floats, major)));
    EXPECT_EQ(b.shape, (std::vector<std::int64_t>{1, 2}));
    EXPECT_EQ(to_float_vector(b, "v.npy"), (std::vector<float>{1.0f, -2.0f}));
  }
}

TEST_F(NpyFileTest, RejectsMalformedFiles) {
  const std::string four_floats(16, '\0');
  expect_error("empty.npy", "", "empty file");
  expect_error("zip.npy", "PK\x03\x04 not numpy at all", "bad magic");
  expect_error("short.npy", "\x93NUM", "truncated header");
  expect_error("nolen.npy", std::string("\x93NUMPY\x01\x00\x40", 9), "truncated header");
  expect_error("cut.npy", raw_npy(f4_dict("(4,)")).substr(0, 40), "truncated header");
  expect_error("v4.npy", raw_npy(f4_dict("(4,)"), four_floats, 4), "version 4.0");
  expect_error("data.npy", raw_npy(f4_dict("(2, 3)"), four_floats), "truncated data");
  expect_error("extra.npy", raw_npy(f4_dict("(3,)"), four_floats), "trailing bytes");

  const std::vector<std::string> bad_dicts = {
      "{'descr': '<f4', 'shape': (4,), }",                                        // missing key
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}",          // extra key
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}",  // repeated
      "{'descr': '<f4', 'fortran_order': maybe, 'shape': (4,), }",                // bad bool
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",              // bad dim
      "{'descr': '<f4', 'fortran_order': False, 'shape': [4], }",                 // not a tuple
      "{'descr': '<f4, 'fortran_order': False, 'shape': (4,), }",                 // quotes
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), ",                 // no brace
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk",           // trailing text
      "'descr': '<f4'",                                                           // not a dict
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
  };
  for (const std::string& dict : bad_dicts) {
    SCOPED_TRACE(dict);
    expect_error("dict.npy", raw_npy(dict, four_floats), "malformed header");
  }
}

TEST_F(NpyFileTest, RejectsUnsupportedArrays) {
  const auto dict = [](const std::string& descr, const std::string& order,
                       const std::string& shape) {
    return "{'descr': " + descr + ", 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  const std::string data(16, '\0');
  expect_error("u2.npy", raw_npy(dict("'<u2'", "False", "(8,)"), data), "unsupported dtype '<u2'");
  expect_error("bf16.npy", raw_npy(dict("'<V2'", "False", "(8,)"), data), "bfloat16");
  expect_error("rec.npy", raw_npy(dict("[('a', '<f4')]", "False", "(4,)"), data), "structured");
  expect_error("be.npy", raw_npy(dict("'>f4'", "False", "(4,)"), data), "big-endian dtype '>f4'");
  expect_error("obj.npy", raw_npy(dict("'|O'", "False", "(2,)"), data), "object arrays");
  expect_error("neg.npy", raw_npy(dict("'<f4'", "False", "(2, -3)"), data),
               "negative dimension -3");
  expect_error("f.npy", raw_npy(dict("'<f4'", "True", "(2, 2)"), data), "Fortran-order");
  expect_error("big.npy", raw_npy(dict("'<f8'", "False", "(4294967296, 4294967296)"), data),
               "too large");
}

TEST_F(NpyFileTest, ReportsMissingFilesAndDirectories) {
  EXPECT_EQ(read_error(path("absent.npy")), path("absent.npy").string() + ": no such file");
  EXPECT_EQ(read_error(dir_), dir_.string() + ": is a directory");
}

TEST_F(NpyFileTest, FailedWriteLeavesNoFile) {
  NpyArray bad = make_npy_float(NpyDtype::kF32, {2, 2}, iota_values(4));
  bad.data.pop_back();
  EXPECT_THROW(write_npy_atomic(path("bad.npy"), bad), std::invalid_argument);
  EXPECT_THROW(write_npy_atomic(path("no/such/dir.npy"), make_array(NpyDtype::kF32, {1})),
               std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST(NpyConvert, ChecksDtypeKind) {
  const NpyArray ints = make_npy_int(NpyDtype::kI32, {3}, std::vector<std::int64_t>{0, 5, -9});
  EXPECT_EQ(to_int64_vector(ints, "cu.npy"), (std::vector<std::int64_t>{0, 5, -9}));
  const NpyArray floats = make_npy_float(NpyDtype::kF64, {2}, std::vector<double>{0.1, 3.0});
  EXPECT_EQ(to_float_vector(floats, "q.npy"), (std::vector<float>{0.1f, 3.0f}));
  try {
    to_float_vector(ints, "q.npy");
    ADD_FAILURE() << "integers accepted as floats";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("q.npy: expected a float array", 0), 0u) << e.what();
  }
  try {
    to_int64_vector(floats, "cu.npy");
    ADD_FAILURE() << "floats accepted as integers";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cu.npy: expected an integer array", 0), 0u) << e.what();
  }
  EXPECT_THROW(make_npy_int(NpyDtype::kI32, {1}, std::vector<std::int64_t>{1LL << 31}),
               std::invalid_argument);
  EXPECT_THROW(make_npy_float(NpyDtype::kF32, {3}, std::vector<double>{1.0}),
               std::invalid_argument);
}

bool is_half_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }

TEST(Half, DecodesKnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0xfd01)));
}

TEST(Half, EveryBitPatternSurvivesTheRoundTrip) {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = half_to_float(h);
    if (is_half_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_TRUE(is_half_nan(float_to_half(f))) << std::hex << i;
      ASSERT_TRUE(is_half_nan(double_to_half(static_cast<double>(f)))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << std::hex << i;
    ASSERT_EQ(double_to_half(static_cast<double>(f)), h) << std::hex << i;
  }
}

// Between every pair of neighbouring positive halves (and from 65504 to the overflow point 65536),
// the midpoint goes to the even neighbour and anything off the midpoint to the nearer one.
TEST(Half, RoundsToNearestTiesToEven) {
  for (std::uint16_t h = 0; h <= 0x7bff; ++h) {
    const double lo = half_to_float(h);
    const double hi = h == 0x7bff ? 65536.0 : half_to_float(static_cast<std::uint16_t>(h + 1));
    const double mid = (lo + hi) / 2;  // 12 significant bits: exact in float as well
    const auto up = static_cast<std::uint16_t>(h + 1);
    const std::uint16_t even = (h & 1) ? up : h;
    ASSERT_EQ(float_to_half(static_cast<float>(mid)), even) << h;
    ASSERT_EQ(double_to_half(mid), even) << h;
    ASSERT_EQ(double_to_half(-mid), 0x8000 | even) << h;
    ASSERT_EQ(float_to_half(std::nextafter(static_cast<float>(mid), 0.0f)), h) << h;
    ASSERT_EQ(float_to_half(std::nextafter(static_cast<float>(mid), 1e6f)), up) << h;
    ASSERT_EQ(double_to_half(std::nextafter(mid, 0.0)), h) << h;
    ASSERT_EQ(double_to_half(std::nextafter(mid, 1e6)), up) << h;
  }
}

TEST(Half, NarrowsDoubleWithoutRoundingTwice) {
  // Just above the midpoint of 1 and 1 + 2^-10; through float it would become the tie itself.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(double_to_half(x), 0x3c01);
  EXPECT_EQ(float_to_half(static_cast<float>(x)), 0x3c00);
}

TEST(Half, HandlesOutOfRangeAndSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(double_to_half(1e10), 0x7c00);
  EXPECT_EQ(double_to_half(-1e300), 0xfc00);
  EXPECT_EQ(double_to_half(inf), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(double_to_half(1e-10), 0x0000);
  EXPECT_EQ(double_to_half(-1e-10), 0x8000);
  EXPECT_EQ(double_to_half(std::numeric_limits<double>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_TRUE(is_half_nan(double_to_half(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(is_half_nan(float_to_half(-std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace skipsoftmax
