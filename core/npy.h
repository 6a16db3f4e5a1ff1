// NumPy .npy files: the tensors the tools read and write.
//
// Reads format versions 1.0, 2.0 and 3.0 and writes 1.0 (2.0 only when the header does not fit
// 1.0's 16-bit length, as NumPy does). Only C-order arrays of little-endian <f2, <f4, <f8, <i4 and
// <i8 are accepted. bfloat16 is not: NumPy has no such dtype, and an ml_dtypes bfloat16 array is
// saved with the descr '<V2' (raw 2-byte void), which cannot be told apart from any other 2-byte
// record. Convert bf16 tensors to float32 before saving them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace skipsoftmax {

enum class NpyDtype { kF16, kF32, kF64, kI32, kI64 };

const char* npy_descr(NpyDtype dtype);  // "<f2", "<f4", "<f8", "<i4", "<i8"
std::size_t npy_itemsize(NpyDtype dtype);
bool npy_is_float(NpyDtype dtype);

struct NpyArray {
  NpyDtype dtype = NpyDtype::kF32;
  std::vector<std::int64_t> shape;  // empty: a 0-d array holding one element
  std::vector<std::byte> data;      // C order, little-endian: element_count() * itemsize bytes

  std::int64_t element_count() const;
};

// "(2, 3)", "(5,)", "()": the Python tuple NumPy writes, also used in error messages.
std::string npy_shape_string(const std::vector<std::int64_t>& shape);

// Throws std::runtime_error("<path>: ...") for a missing file, bad magic, an unsupported version,
// a truncated or malformed header, an unsupported, big-endian or object dtype, Fortran order,
// negative dimensions, or data shorter or longer than the shape implies.
NpyArray read_npy(const std::filesystem::path& path);

// Written through write_file_atomic: on failure `path` is left untouched. Throws
// std::invalid_argument when the data size does not match the shape.
void write_npy_atomic(const std::filesystem::path& path, const NpyArray& array);
// The same bytes to a stream (for outputs committed together, file_io.h's OutputSet); `path`
// names the file in errors.
void write_npy(std::ostream& out, const NpyArray& array, const std::filesystem::path& path);

// Builds an array of dtype from values: floats round to nearest even, integers must fit the
// dtype. Throws std::invalid_argument when values.size() does not match the shape.
NpyArray make_npy_float(NpyDtype dtype, std::vector<std::int64_t> shape,
                        std::span<const double> values);
NpyArray make_npy_int(NpyDtype dtype, std::vector<std::int64_t> shape,
                      std::span<const std::int64_t> values);

// Widens <f2 exactly and narrows <f8 to nearest; an integer dtype throws std::runtime_error
// starting with `context` (the file the array came from).
std::vector<float> to_float_vector(const NpyArray& array, const std::string& context);
// From <i4 or <i8; a float dtype throws std::runtime_error starting with `context`.
std::vector<std::int64_t> to_int64_vector(const NpyArray& array, const std::string& context);

// IEEE 754 binary16 <-> binary32/64. half_to_float is exact (subnormals, infinities, NaN payloads
// kept); the narrowing conversions round to nearest, ties to even, straight from the source
// precision (no double rounding through float), overflow to infinity and keep NaN payloads' top
// bits (a NaN whose kept bits are all zero becomes the quiet NaN).
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_half(float value);
std::uint16_t double_to_half(double value);

}  // namespace skipsoftmax
